"""The kernel benchmarks (GEMM, convolution, RNN, sparse GEMM, all-reduce, memory bandwidth, launch latency)
and DeepBench's shapes they run.  ``shapes`` is torch-free: the registry expands cases from it."""
