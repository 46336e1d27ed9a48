"""What every kind of workload measures with: timing, the power phase's energy counter, the statistics,
operands, precision flags, the correctness check, the case result, and DeepSpark's six dimensions.  It
imports no kind of workload, so each kind can use it and none depends on another through it."""
