"""The packed layouts (with zero padding to whole blocks) and the integer references."""

import numpy as np
import pytest

from vtakit.errors import ArgumentError
from vtakit.runtime.packing import (add_reference, blocks, conv2d_reference, dense_reference, pack_bias, pack_matrix,
                                    pack_nchw, pack_oihw, requantize, rounding_addend, shift_values, unpack_matrix,
                                    unpack_nchw)

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


@pytest.mark.parametrize("pad,stride", [((0, 1, 1, 0), (2, 1)), ((2, 0, 1, 3), (1, 2)), (1, 2)], ids=str)
def test_conv2d_reference_takes_asymmetric_pads_and_per_axis_strides(pad, stride):
    x = RNG.integers(-128, 128, (2, 3, 5, 7), dtype=np.int8)
    w = RNG.integers(-128, 128, (4, 3, 3, 2), dtype=np.int8)
    pt, pl, pb, pr = (pad,) * 4 if isinstance(pad, int) else pad
    sh, sw = (stride,) * 2 if isinstance(stride, int) else stride
    got = conv2d_reference(x, w, stride, pad)
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh, ow = (xp.shape[2] - 3) // sh + 1, (xp.shape[3] - 2) // sw + 1
    assert got.shape == (2, 4, oh, ow)
    for i in range(oh):
        for j in range(ow):
            want = np.einsum("ncyx,ocyx->no", xp[:, :, i * sh:i * sh + 3, j * sw:j * sw + 2], w.astype(np.int64))
            assert (got[:, :, i, j] == want).all()


def test_requantize_adds_shifts_and_clips():
    acc = np.array([[[[-1000]], [[1000]], [[300]]]], np.int32)
    got = requantize(acc, np.array([0, 10, -100], np.int32), 2, (0, 127))     # (acc + addend) >> 2
    assert got.dtype == np.int8 and got.ravel().tolist() == [0, 127, 50]
    assert requantize(acc, None, 3, (-128, 127)).ravel().tolist() == [-125, 125, 37]
    assert requantize(acc, 4, 3, (-128, 127)).ravel().tolist() == [-125, 125, 38]      # a scalar addend
    assert requantize(acc, None, -1, (-128, 127)).ravel().tolist() == [-128, 127, 127]  # a left shift


def test_requantize_rounds_to_nearest_with_the_rounding_addend_folded_in():
    acc = np.arange(-40, 40, dtype=np.int32).reshape(1, -1)
    for shift in (1, 3, 4):
        got = requantize(acc, rounding_addend(shift), shift, (-128, 127))
        assert (got == np.floor(acc / 2 ** shift + 0.5)).all()
    assert rounding_addend(0) == rounding_addend(-3) == 0 and rounding_addend(31) == 1 << 30


def test_requantize_with_a_multiplier_wraps_as_int32():
    acc = np.array([[7, -7], [1 << 30, -(1 << 30)]], np.int32)        # channels on axis 1
    mult = np.array([3, -(1 << 15)], np.int64)
    got = requantize(acc, np.array([1, 2], np.int32), 2, (-128, 127), multiplier=mult, pre_shift=1)
    t = (acc.astype(np.int64) + [1, 2]) >> 1
    t = ((t * mult + (1 << 31)) % (1 << 32)) - (1 << 31)             # the product wraps to int32
    want = np.clip((t + 2) >> 2, -128, 127)
    assert got.tolist() == want.tolist()
    # 2**30 * 2 wraps to -2**31
    assert requantize(acc, None, 0, (-128, 127), multiplier=2).tolist() == [[14, -14], [-128, -128]]


def test_shift_values_is_the_alus_shr():
    x = np.array([-(1 << 31), -5, 5, (1 << 31) - 1], np.int64)
    assert shift_values(x, 1).tolist() == [-(1 << 30), -3, 2, (1 << 30) - 1]
    assert shift_values(x, -1).tolist() == [0, -10, 10, -2]
    assert shift_values(x, -32).tolist() == [0, 0, 0, 0]


def test_add_reference_shifts_adds_and_clips():
    a = np.array([1, -128, 127, 100], np.int8)
    b = np.array([2, -128, 127, -100], np.int8)
    assert add_reference(a, b, 0, 0, 0, 0, (-128, 127)).tolist() == [3, -128, 127, 0]
    assert add_reference(a, b, 2, 1, 1, 2, (-128, 127)).tolist() == [2, -128, 127, 50]   # (4a + 2b + 1) >> 2
    assert add_reference(a, b, 31, 0, 0, 0, (-128, 127)).tolist() == [-128, -128, -128, -100]   # 1 << 31 wraps


@pytest.mark.parametrize("call,match", [
    (lambda: requantize(np.zeros((1, 2), np.int32), None, 32, (-128, 127)), r"shift must be an int in \[-32, 31\]"),
    (lambda: requantize(np.zeros((1, 2), np.int32), None, 1, (-129, 127)), r"clip .* -128 <= lo <= hi <= 127"),
    (lambda: requantize(np.zeros((1, 2), np.int32), None, 1, (5, 4)), r"clip"),
    (lambda: requantize(np.zeros((1, 2), np.int32), None, 1, (0, 1), multiplier=1 << 15),
     r"multiplier must be an int in"),
    (lambda: requantize(np.zeros((1, 2), np.int32), None, 1, (0, 1), multiplier=np.array([1, 1 << 15])),
     r"multiplier values"),
    (lambda: requantize(np.zeros((1, 2), np.int32), np.zeros(3), 1, (0, 1)),
     r"addend must be a scalar or a 1-D integer array"),
    (lambda: requantize(np.zeros((1, 2), np.int32), None, 1, (0, 1), pre_shift=-33), r"pre_shift"),
    (lambda: add_reference(np.zeros(2, np.int8), np.zeros(3, np.int8), 0, 0, 0, 0, (0, 1)), r"same shape"),
    (lambda: add_reference(np.zeros(2, np.int8), np.zeros(2, np.int8), -1, 0, 0, 0, (0, 1)), r"lshift_a"),
    (lambda: conv2d_reference(np.zeros((1, 1, 3, 3), np.int8), np.zeros((1, 1, 1, 1), np.int8), 1, (1, 1)),
     r"pad must be an int or 4 ints"),
])
def test_requantize_and_add_reference_check_their_arguments(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()


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
