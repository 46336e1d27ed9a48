"""The store: the SQLite history and its one read-only reader.  All SQL on the history lives here."""
