"""The verdicts: the regression detector, the live trackers, change points and suite summaries.
They judge results the store holds; they run, serve and render nothing."""
