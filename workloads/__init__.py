"""Benchmark workloads.  Importing this package never imports torch: see ``workloads.registry``."""
