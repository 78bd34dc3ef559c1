"""nvptx.timer: its arguments are checked before any GPU is touched (the timing itself needs a GPU)."""

import pytest


def test_time_kernels_rejects_bad_counts_before_touching_a_gpu():
    from vtakit.compiler.backend.nvptx.timer import time_kernels
    from vtakit.errors import ArgumentError

    with pytest.raises(ArgumentError, match="number and repeat must be positive ints, got 0 and 3"):
        time_kernels(object(), [], number=0)

