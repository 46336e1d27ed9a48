"""The command workload: a user's training command, and the logs it prints or writes read into one training
log (AI-Rank, MLPerf, regular expressions, the frameworks' own lines and files).  ``logparse``,
``mlperf_targets`` and ``lines`` are torch-free: the registry and the daemon's runner use them."""
