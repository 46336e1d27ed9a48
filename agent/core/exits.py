"""The exit codes of every ``sixdim`` command, defined once.

==  =============================================================================================
0   done: the command did what it was asked (a report made, files written, a run all ok or skipped)
1   done, but something the command checks failed: a run had failed or timed-out cases;
    ``generate --check`` found a stale file
2   bad usage, bad configuration or input, or something it cannot read or write (the message names it)
3   ``run --no-wait``: a device is held by another sixdim
128 + N  stopped by signal N (130 for SIGINT, 143 for SIGTERM), after cleaning up
==  =============================================================================================
"""

OK = 0
FAILED = 1
USAGE = 2
BUSY = 3
SIGNAL_BASE = 128
