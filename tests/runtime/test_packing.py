"""The packed layouts (with zero padding to whole blocks) and the integer references."""

import numpy as np
import pytest

from vtakit.errors import ArgumentError
from vtakit.runtime.packing import (blocks, conv2d_reference, dense_reference, pack_bias, pack_matrix, pack_nchw,
                                    pack_oihw, requantize, unpack_matrix, unpack_nchw)

RNG = np.random.default_rng(1)


def test_pack_roundtrips_and_layouts():
    x = RNG.integers(-128, 128, (2, 32, 3, 5), dtype=np.int8)
    px = pack_nchw(x, 2, 16)
    assert px.shape == (1, 2, 3, 5, 2, 16) and px[0, 1, 2, 4, 1, 3] == x[1, 19, 2, 4]
    np.testing.assert_array_equal(unpack_nchw(px), x)
    w = RNG.integers(-128, 128, (32, 16, 3, 3), dtype=np.int8)
    pw = pack_oihw(w, 16, 16)
    assert pw.shape == (2, 1, 3, 3, 16, 16) and pw[1, 0, 2, 1, 5, 7] == w[21, 7, 2, 1]
    a = RNG.integers(-128, 128, (8, 32), dtype=np.int8)
    pa = pack_matrix(a, 4, 16)
    assert pa.shape == (2, 2, 4, 16) and pa[1, 1, 2, 3] == a[6, 19]
    np.testing.assert_array_equal(unpack_matrix(pa), a)
    pb = pack_bias(np.arange(32, dtype=np.int32), 2, 16)
    assert pb.shape == (2, 2, 16) and pb[1, 1, 3] == 19 and pb.dtype == np.int32


def test_counts_that_are_not_whole_blocks_are_zero_padded():
    assert [blocks(n, 16) for n in (1, 15, 16, 17, 24)] == [1, 1, 1, 2, 2]
    x = RNG.integers(1, 128, (3, 24, 2, 2), dtype=np.int8)       # no zeros: padding is visible
    px = pack_nchw(x, 2, 16)
    assert px.shape == (2, 2, 2, 2, 2, 16)
    assert not px[0, 1, :, :, :, 8:].any() and not px[1, :, :, :, 1, :].any() and px[0, 1, :, :, :, :8].all()
    assert unpack_nchw(px).shape == (4, 32, 2, 2)
    np.testing.assert_array_equal(unpack_nchw(px, x.shape), x)
    w = RNG.integers(1, 128, (20, 24, 3, 3), dtype=np.int8)
    pw = pack_oihw(w, 16, 16)
    assert pw.shape == (2, 2, 3, 3, 16, 16) and not pw[1, :, :, :, 4:, :].any() and not pw[:, 1, :, :, :, 8:].any()
    a = RNG.integers(1, 128, (5, 7), dtype=np.int8)
    pa = pack_matrix(a, 4, 4)
    assert pa.shape == (2, 2, 4, 4) and np.count_nonzero(pa) == a.size
    np.testing.assert_array_equal(unpack_matrix(pa, a.shape), a)
    pb = pack_bias(np.arange(1, 21, dtype=np.int32), 1, 16)
    assert pb.shape == (2, 1, 16) and not pb[1, 0, 4:].any()


def test_padding_does_not_change_the_real_lanes():
    a = RNG.integers(-128, 128, (5, 7), dtype=np.int8)
    w = RNG.integers(-128, 128, (6, 7), dtype=np.int8)
    padded = dense_reference(unpack_matrix(pack_matrix(a, 4, 4)), unpack_matrix(pack_matrix(w, 4, 4)))
    np.testing.assert_array_equal(padded[:5, :6], dense_reference(a, w))
    assert not padded[5:].any() and not padded[:, 6:].any()


@pytest.mark.parametrize("call, match", [
    (lambda: pack_nchw(np.zeros((2, 3, 4)), 1, 16), r"pack_nchw: x must be a 4-D array \(N, C, H, W\), got shape "
                                                    r"\(2, 3, 4\)"),
    (lambda: pack_oihw(np.zeros((2, 3)), 16, 16), r"pack_oihw: w must be a 4-D array"),
    (lambda: pack_matrix(np.zeros(3), 4, 4), r"pack_matrix: a must be a 2-D array \(M, K\), got shape \(3,\)"),
    (lambda: pack_bias(np.zeros((2, 2)), 1, 4), r"pack_bias: bias must be a 1-D array"),
    (lambda: unpack_nchw(np.zeros((1, 2, 3, 4))), r"unpack_nchw: x must be a 6-D array"),
    (lambda: unpack_matrix(np.zeros((2, 2))), r"unpack_matrix: a must be a 4-D array"),
    (lambda: unpack_matrix(np.zeros((1, 1, 4, 4)), (5, 4)), r"unpack_matrix: shape \(5, 4\) does not fit in the "
                                                            r"unpacked shape \(4, 4\)"),
    (lambda: unpack_nchw(np.zeros((1, 1, 2, 2, 1, 4)), (1, 4, 2)), r"unpack_nchw: shape \(1, 4, 2\) does not fit"),
])
def test_wrong_shapes_are_argument_errors(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()


def test_conv2d_reference_matches_direct_loops():
    x = RNG.integers(-128, 128, (1, 3, 5, 6), dtype=np.int8)
    w = RNG.integers(-128, 128, (2, 3, 3, 3), dtype=np.int8)
    got = conv2d_reference(x, w, stride=2, pad=1)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    for o in range(2):
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                assert got[0, o, i, j] == (xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o]).sum()


def test_requantize_shifts_adds_bias_and_clips():
    acc = np.array([[[[-1000]], [[1000]], [[300]]]], np.int32)
    got = requantize(acc, 2, np.array([0, 10, -100], np.int32), (0, 127))
    assert got.dtype == np.int8 and got.ravel().tolist() == [0, 127, 0]
    assert requantize(acc, 3, None, (-128, 127)).ravel().tolist() == [-125, 125, 37]


@pytest.mark.parametrize("fill", [None, -128, 127])
def test_dense_reference_is_exact_and_wraps_as_the_accumulator(fill):
    """The float64 (BLAS) path equals integer arithmetic, including sums that wrap past int32."""
    k = 1 << 17                                      # 2**17 products of 2**14: 2**31 wraps
    if fill is None:
        a, w = RNG.integers(-128, 128, (3, k), dtype=np.int8), RNG.integers(-128, 128, (2, k), dtype=np.int8)
    else:
        a, w = np.full((3, k), fill, np.int8), np.full((2, k), -128, np.int8)
    want = (a.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)
    got = dense_reference(a, w)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    if fill == -128:
        assert got[0, 0] == -(1 << 31)
