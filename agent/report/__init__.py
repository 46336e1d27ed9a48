"""The offline reports over the history: ``sixdim report regressions`` and ``sixdim report html``."""
