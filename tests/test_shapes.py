"""DeepBench's sets, as data: their sizes match DeepBench's lists, and CPU scaling keeps every path."""

from sixdim.workloads.kernels import shapes


def test_set_sizes_match_deepbench():
    # Counts of the entries in DeepBench's code/kernels/*_problems.h (training and server inference sets).
    assert (len(shapes.GEMM_TRAINING), len(shapes.GEMM_INFERENCE)) == (160, 75)
    assert (len(shapes.CONV_TRAINING), len(shapes.CONV_INFERENCE)) == (94, 107)
    assert (len(shapes.RNN_TRAINING), len(shapes.RNN_INFERENCE)) == (52, 69)
    assert len(shapes.SPARSE_INFERENCE) == 24
    assert shapes.ALLREDUCE_FLOATS == [100000, 3097600, 4194304, 6553600, 16777217, 38360000, 64500000]


def test_sets_hold_deepbench_landmarks():
    assert shapes.GemmShape(5124, 9124, 2560, "TN") in shapes.GEMM_TRAINING
    assert shapes.GemmShape(3072, 7435, 1024, "NT") in shapes.GEMM_TRAINING
    assert shapes.GemmShape(35, 700, 2048, mode="inference") in shapes.GEMM_INFERENCE
    assert {s.op for s in shapes.GEMM_TRAINING} == {"NN", "TN", "NT"}
    assert shapes.ConvShape(700, 161, 1, 32, 32, 20, 5, 0, 0, 2, 2) in shapes.CONV_TRAINING
    assert shapes.ConvShape(7, 7, 2048, 2, 512, 1, 1, 3, 3, 2, 2, "inference") in shapes.CONV_INFERENCE
    assert shapes.RnnShape(2816, 32, 750, "gru") in shapes.RNN_TRAINING
    assert {s.cell for s in shapes.RNN_TRAINING} == {"vanilla", "lstm", "gru"}
    assert max(s.batch for s in shapes.RNN_INFERENCE) == 4
    assert {s.sparsity for s in shapes.SPARSE_INFERENCE} == {0.9, 0.95}


def test_scaling_keeps_filters_batches_and_sparsity():
    gemm = shapes.scale(shapes.GemmShape(5124, 9124, 2560, "TN"), 16)
    assert (gemm.m, gemm.n, gemm.k, gemm.op) == (320, 570, 160, "TN")
    conv = shapes.scale(shapes.ConvShape(700, 161, 1, 32, 32, 20, 5, 0, 0, 2, 2), 16)
    assert (conv.s, conv.r, conv.n, conv.stride_w) == (20, 5, 32, 2) and conv.w >= conv.s and conv.h >= conv.r
    rnn = shapes.scale(shapes.RnnShape(2816, 32, 1500, "gru"), 16)
    assert (rnn.hidden, rnn.batch, rnn.cell) == (176, 32, "gru") and rnn.steps <= 25
    sparse = shapes.scale(shapes.SparseShape(7680, 1, 2560, 0.95), 16)
    assert (sparse.n, sparse.sparsity) == (1, 0.95)
