"""Benchmark workloads.  Importing this package never imports torch: see ``sixdim.workloads.registry``."""
