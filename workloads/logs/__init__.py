"""The command workload: a user's training command, and the logs it prints or writes read into one training
log (AI-Rank, MLPerf, regular expressions, the frameworks' own lines and files).  ``model`` (the log's
types, units and directions), ``training_log``, the line dialects and ``parsers``, ``mlperf_targets`` and
``lines`` are torch-free: the registry and the daemon's runner use them."""
