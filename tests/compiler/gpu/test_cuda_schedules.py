"""The GPU schedules of :mod:`vtakit.compiler.ops.cuda`: every op built for ``cuda`` gives PTX that
ptxas accepts for sm_80 and sm_90, and its emulation (every block and thread, shared memory, barriers,
races checked) equals numpy: exactly for integers, within float32 rounding otherwise. Where a GPU
is present, the same module also runs on it and must equal numpy the same way. Shapes are small so
that emulation stays fast; the block limits are checked on large shapes by building only.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ops
from vtakit.compiler.backend.nvptx import ptxas_check
from vtakit.compiler.ops import cuda, nn_extra
from vtakit.compiler.backend.nvptx.driver import cuda_driver
from vtakit.errors import DeviceError, ScheduleError
from tests.compiler.test_ops import conv2d_ref, pool_ref

ARCHS = ("sm_80", "sm_90")


def _arrays(args, count, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for t in args[:count]:
        shape = tuple(int(x) for x in t.shape)
        if np.dtype(t.dtype).kind == "f":
            out.append(rng.uniform(-1, 1, shape).astype(t.dtype))
        else:
            out.append(rng.integers(-20, 20, shape).astype(t.dtype))
    return out


@functools.cache
def gpu_present() -> bool:
    try:
        cuda_driver()
    except DeviceError:
        return False
    return True


def _assert_matches(got, want):
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def check(s, args, inputs, want, ptx_archs=ARCHS):
    """Build for every arch (ptxas must accept the PTX), emulate on sm_80 and compare with ``want``;
    where a GPU is present, run the module on it too and compare the same way."""
    mods = {arch: vtakit.build(s, args, target=f"cuda -arch={arch}") for arch in ptx_archs}
    for arch, mod in mods.items():
        ptxas_check(mod.get_source("ptx"), arch)
    mod = mods[ptx_archs[0]]
    for k in mod.kernels:
        assert k.block[0] * k.block[1] * k.block[2] <= cuda.MAX_THREADS
        assert k.shared_bytes <= cuda.SHARED_BUDGET
    outs = [np.zeros(tuple(int(x) for x in t.shape), t.dtype) for t in args[len(inputs):]]
    mod.emulate(*inputs, *outs)
    _assert_matches(outs[0], want)
    if gpu_present():
        on_gpu = [np.zeros_like(o) for o in outs]
        mod(*inputs, *on_gpu)
        _assert_matches(on_gpu[0], want)
    return mod


# ---------------------------------------------------------------------------- element-wise
def test_elementwise_chain_broadcast():
    x = te.placeholder((3, 5, 7), "float32", name="x")
    z = te.placeholder((5, 1), "float32", name="z")
    y = ops.relu(ops.multiply(ops.add(x, z), x))
    a, b = _arrays([x, z], 2)
    mod = check(cuda.schedule(y), [x, z, y], [a, b], np.maximum((a + b) * a, 0))
    assert len(mod.kernels) == 1  # the chain is one kernel


def test_elementwise_int_exact_with_tail_block():
    """331 elements (a prime): no divisor near 256 threads, so the last block is guarded."""
    x = te.placeholder((331,), "int32", name="x")
    y = ops.clip(ops.subtract(x, ops.multiply(x, x)), -100, 100)
    (a,) = _arrays([x], 1)
    check(cuda.schedule_injective(y), [x, y], [a], np.clip(a - a * a, -100, 100))


def test_injective_schedule_rejects_a_reduction():
    x = te.placeholder((4, 64), "float32", name="x")
    with pytest.raises(ScheduleError, match="stage 'reduce' is a reduction"):
        cuda.schedule_injective(ops.relu(nn_extra.reduce(x, [1], "sum")))


# ---------------------------------------------------------------------------- dense
def _dense(m, n, k, dtype="float32", out_dtype=None, bias=True):
    a = te.placeholder((m, k), dtype, name="a")
    w = te.placeholder((n, k), dtype, name="w")
    args = [a, w]
    b = None
    if bias:
        b = te.placeholder((n,), out_dtype or dtype, name="b")
        args.append(b)
    out = ops.relu(ops.dense(a, w, b, out_dtype=out_dtype)) if bias else ops.dense(a, w, out_dtype=out_dtype)
    return args, out


def test_dense_tiled_shared_local_vthread():
    args, out = _dense(16, 24, 16)
    s = cuda.schedule(out)
    text = str(vtakit.lower(s, [*args, out]))
    assert "in shared" in text and "in local" in text
    a, w, b = _arrays(args, 3)
    check(s, [*args, out], [a, w, b], np.maximum(a @ w.T + b, 0))


def test_dense_int8_exact_with_explicit_tiles():
    args, out = _dense(16, 16, 24, "int8", "int32", bias=False)
    tiles = cuda.DenseTiles(cuda.AxisTile(2, 2, 4), cuda.AxisTile(2, 4, 2), 8)
    a, w = _arrays(args, 2)
    check(cuda.schedule_dense(out, tiles=tiles), [*args, out], [a, w], a.astype(np.int32) @ w.astype(np.int32).T)


def test_dense_small_batch_reduces_across_threads():
    args, out = _dense(2, 10, 64)
    s = cuda.schedule(out)
    assert "tvm_thread_allreduce" in str(vtakit.lower(s, [*args, out]))
    a, w, b = _arrays(args, 3)
    mod = check(s, [*args, out], [a, w, b], np.maximum(a @ w.T + b, 0))
    assert len(mod.kernels) == 2  # the reduction, then the epilogue


def test_dense_tiles_that_break_a_limit_are_rejected():
    args, out = _dense(64, 64, 64, bias=False)
    with pytest.raises(ScheduleError, match="rows block 24 must divide 64"):
        cuda.schedule_dense(out, tiles=cuda.DenseTiles(cuda.AxisTile(1, 8, 3), cuda.AxisTile(1, 8, 1), 8))
    with pytest.raises(ScheduleError, match="2048 threads per block, more than 1024"):
        cuda.schedule_dense(out, tiles=cuda.DenseTiles(cuda.AxisTile(1, 32, 2), cuda.AxisTile(1, 64, 1), 8))


# ---------------------------------------------------------------------------- convolution
CONVS = {  # (n, c, h, w, o, k, stride, pad, dilation, groups)
    "3x3": (1, 4, 6, 6, 8, 3, 1, 1, 1, 1),
    "stride2": (1, 3, 7, 7, 4, 3, 2, 1, 1, 1),
    "pad2_dilation2": (1, 2, 6, 6, 4, 3, 1, 2, 2, 1),
    "1x1_stride2": (2, 4, 6, 6, 4, 1, 2, 0, 1, 1),
    "groups2": (1, 4, 5, 5, 4, 3, 1, 1, 1, 2),
}


@pytest.mark.parametrize("name", sorted(CONVS))
def test_conv2d(name):
    n, c, h, w, o, k, st, p, d, g = CONVS[name]
    x = te.placeholder((n, c, h, w), "float32", name="x")
    wt = te.placeholder((o, c // g, k, k), "float32", name="wt")
    y = ops.relu(ops.conv2d_nchw(x, wt, st, p, d, g))
    a, b = _arrays([x, wt], 2)
    check(cuda.schedule(y), [x, wt, y], [a, b], np.maximum(conv2d_ref(a, b, st, p, d, g), 0))


def test_conv2d_int8_exact_tiled_over_input_channels():
    x = te.placeholder((1, 8, 4, 4), "int8", name="x")
    wt = te.placeholder((4, 8, 3, 3), "int8", name="wt")
    y = ops.conv2d_nchw(x, wt, 1, 1, out_dtype="int32")
    tiles = cuda.ConvTiles(2, 2, 2, 4, 4)   # two steps of 4 input channels through shared memory
    a, b = _arrays([x, wt], 2)
    check(cuda.schedule_conv2d_nchw(y, tiles=tiles), [x, wt, y], [a, b], conv2d_ref(a, b, 1, 1, out_dtype="int32"))


def test_conv2d_tiles_fit_the_block_limits_for_resnet_layers():
    for c, o, hw, k, st in ((3, 64, 224, 7, 2), (64, 64, 56, 3, 1), (128, 256, 28, 3, 2), (512, 512, 7, 3, 1)):
        out = (hw + 2 * (k // 2) - k) // st + 1
        t = cuda.conv2d_tiles(o, out, out, c, (k, k), (st, st))
        assert t.threads <= cuda.MAX_THREADS
        assert out % t.row_threads == 0 and out % t.col_threads == 0 and c % t.rc_block == 0


def test_conv2d_bad_tiles_are_rejected():
    x = te.placeholder((1, 4, 6, 6), "float32", name="x")
    wt = te.placeholder((8, 4, 3, 3), "float32", name="wt")
    y = ops.conv2d_nchw(x, wt, 1, 1)
    with pytest.raises(ScheduleError, match="rows block 4 must divide 6"):
        cuda.schedule_conv2d_nchw(y, tiles=cuda.ConvTiles(2, 2, 4, 6, 4))


@pytest.mark.parametrize("mult,stride", [(1, 1), (2, 2)])
def test_depthwise_conv2d(mult, stride):
    x = te.placeholder((1, 3, 7, 7), "float32", name="x")
    wt = te.placeholder((3, mult, 3, 3), "float32", name="wt")
    y = ops.depthwise_conv2d_nchw(x, wt, stride, 1)
    a, b = _arrays([x, wt], 2)
    want = conv2d_ref(a, b.reshape(3 * mult, 1, 3, 3), stride, 1, 1, 3)
    check(cuda.schedule(y), [x, wt, y], [a, b], want)


# ---------------------------------------------------------------------------- pooling, softmax, reductions
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d(kind):
    x = te.placeholder((1, 3, 7, 7), "float32", name="x")
    y = ops.pool2d(x, 3, 2, 1, kind)
    (a,) = _arrays([x], 1)
    check(cuda.schedule(y), [x, y], [a], pool_ref(a, 3, 2, 1, kind))


def test_global_avg_pool_and_int_max_pool_exact():
    x = te.placeholder((2, 3, 5, 5), "float32", name="x")
    (a,) = _arrays([x], 1)
    y = ops.global_avg_pool2d(x)
    check(cuda.schedule(y), [x, y], [a], a.mean((2, 3), keepdims=True))
    xi = te.placeholder((1, 2, 6, 6), "int8", name="xi")
    yi = ops.pool2d(xi, 2, 2, 0, "max")
    (ai,) = _arrays([xi], 1)
    check(cuda.schedule(yi), [xi, yi], [ai], ai.reshape(1, 2, 3, 2, 3, 2).max((3, 5)))


def test_softmax_reduces_across_threads():
    x = te.placeholder((3, 64), "float32", name="x")
    y = ops.softmax(x)
    s = cuda.schedule(y)
    assert str(vtakit.lower(s, [x, y])).count("tvm_thread_allreduce") == 2
    (a,) = _arrays([x], 1)
    e = np.exp(a - a.max(1, keepdims=True))
    mod = check(s, [x, y], [a], e / e.sum(1, keepdims=True))
    assert len(mod.kernels) == 1


@pytest.mark.parametrize("length", [7, 263])
def test_softmax_rows_of_odd_length(length):
    """7: fewer elements than a warp; 263 (a prime above 256 threads): 32 threads, the last slice guarded."""
    x = te.placeholder((2, length), "float32", name="x")
    y = ops.softmax(x)
    (a,) = _arrays([x], 1)
    e = np.exp(a - a.max(1, keepdims=True))
    check(cuda.schedule(y), [x, y], [a], e / e.sum(1, keepdims=True), ptx_archs=("sm_80",))


@pytest.mark.parametrize("rfactor", [True, False])
def test_cross_thread_reduction_with_and_without_rfactor(rfactor):
    x = te.placeholder((5, 96), "int32", name="x")
    y = nn_extra.reduce(x, [1], "sum")
    s = cuda.schedule_reduce(y, rfactor=rfactor)
    text = str(vtakit.lower(s, [x, y]))
    assert "tvm_thread_allreduce" in text and (".rf" in text) == rfactor
    (a,) = _arrays([x], 1)
    check(s, [x, y], [a], a.sum(1, keepdims=True))


def test_other_reductions_get_kernels_of_their_own():
    x = te.placeholder((2, 40), "float32", name="x")
    y = nn_extra.softmax_axes(x, [1], log=True)
    (a,) = _arrays([x], 1)
    m = a.max(1, keepdims=True)
    check(cuda.schedule(y), [x, y], [a], a - m - np.log(np.exp(a - m).sum(1, keepdims=True)))
    p = te.placeholder((2, 3, 4), "float32", name="p")
    q = te.placeholder((2, 4, 5), "float32", name="q")
    z = nn_extra.batch_matmul(p, q)
    b, c = _arrays([p, q], 2)
    check(cuda.schedule(z), [p, q, z], [b, c], b @ c)


def test_scalar_output_is_a_clear_error():
    x = te.placeholder((4, 8), "float32", name="x")
    with pytest.raises(ScheduleError, match="reduces to a scalar"):
        cuda.schedule_reduce(nn_extra.reduce(x, [0, 1], "sum", keepdims=False))


# ---------------------------------------------------------------------------- limits on large shapes
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1, 1000, 512), (97, 89, 83), (8, 1000, 2048)])
def test_dense_schedules_fit_the_block_limits(shape):
    m, n, k = shape
    args, out = _dense(m, n, k, bias=False)
    mod = vtakit.build(cuda.schedule(out), [*args, out], target="cuda")
    for kern in mod.kernels:
        assert kern.block[0] * kern.block[1] * kern.block[2] <= cuda.MAX_THREADS
        assert kern.shared_bytes <= cuda.SHARED_BUDGET


def _conv(n, c, hw, o, k, stride, pad, groups=1, depthwise=False):
    x = te.placeholder((n, c, hw, hw), "float32", name="x")
    if depthwise:
        w = te.placeholder((c, 1, k, k), "float32", name="w")
        return [x, w], ops.depthwise_conv2d_nchw(x, w, stride, pad)
    w = te.placeholder((o, c // groups, k, k), "float32", name="w")
    return [x, w], ops.relu(ops.conv2d_nchw(x, w, stride, pad, 1, groups))


@pytest.mark.parametrize("case", [
    (1, 3, 227, 96, 11, 4, 0), (1, 2048, 7, 1000, 1, 1, 0), (2, 97, 31, 89, 5, 2, 2), (1, 512, 14, 512, 3, 1, 1),
    (1, 64, 112, 64, 3, 1, 1, 64), (1, 32, 112, 0, 3, 2, 1, 1, True), (1, 13, 17, 26, 3, 1, 1, 13),
    (1, 1, 70, 64, 65, 1, 0)])
def test_conv_schedules_fit_the_block_limits(case):
    """Large, prime and grouped shapes: every kernel within 1024 threads and 48 KiB, ptxas accepts it."""
    args, out = _conv(*case)
    mod = vtakit.build(cuda.schedule(out), [*args, out], target="cuda")
    mod.ptxas()
    for kern in mod.kernels:
        assert kern.block[0] * kern.block[1] * kern.block[2] <= cuda.MAX_THREADS
        assert kern.shared_bytes <= cuda.SHARED_BUDGET


@pytest.mark.parametrize("shape", [(1, 1000), (64, 4099), (3, 1)])
def test_softmax_and_pool_schedules_fit_the_block_limits(shape):
    x = te.placeholder(shape, "float32", name="x")
    y = ops.softmax(x)
    mod = vtakit.build(cuda.schedule(y), [x, y], target="cuda")
    assert all(k.block[0] * k.block[1] * k.block[2] <= cuda.MAX_THREADS for k in mod.kernels)
    p = te.placeholder((1, 8, shape[1] % 97 + 3, 9), "float32", name="p")
    q = ops.pool2d(p, 3, 1, 1, "avg")
    mod = vtakit.build(cuda.schedule(q), [p, q], target="cuda")
    assert all(k.block[0] * k.block[1] * k.block[2] <= cuda.MAX_THREADS for k in mod.kernels)


# ---------------------------------------------------------------------------- errors
def test_schedule_errors_name_the_offending_value():
    x = te.placeholder((4, 8), "float32", name="x")
    scalar = te.compute((), lambda: x[0, 0] + 1, name="scalar")
    with pytest.raises(ScheduleError, match="stage 'scalar' is a scalar"):
        cuda.schedule_injective(scalar)
    with pytest.raises(ScheduleError, match="'relu' is not a softmax output"):
        cuda.schedule_softmax(ops.relu(x))
    args, out = _dense(64, 64, 512, bias=False)
    big = cuda.DenseTiles(cuda.AxisTile(1, 16, 4), cuda.AxisTile(1, 16, 4), 512)
    with pytest.raises(ScheduleError, match="262144 bytes of shared memory per block, more than 49152"):
        cuda.schedule_dense(out, tiles=big)
    c = te.placeholder((1, 64, 8, 8), "float32", name="c")
    w = te.placeholder((64, 64, 3, 3), "float32", name="w")
    y = ops.conv2d_nchw(c, w, 1, 1)
    with pytest.raises(ScheduleError, match=r"2048 threads per block \(32 on threadIdx.z\), more than 1024"):
        cuda.schedule_conv2d_nchw(y, tiles=cuda.ConvTiles(32, 2, 8, 8, 8))
    with pytest.raises(ScheduleError, match="bytes of shared memory per block, more than 49152"):
        cuda.schedule_conv2d_nchw(y, tiles=cuda.ConvTiles(16, 4, 2, 2, 64))
