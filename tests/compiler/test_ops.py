"""The operator library against numpy: the CPU module with the default schedules, and the
interpreter on the unscheduled definitions (small shapes)."""

import numpy as np
import pytest

import vtakit
from vtakit import te
from vtakit.compiler import ops
from vtakit.compiler.ops import cpu
from vtakit.errors import CompileError, ScheduleError

rng = np.random.default_rng(3)


def rand(shape, dtype="float32"):
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-1, 1, shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


def run_both(schedule, inputs, out, arrays, interpret=True, rtol=1e-5):
    """Run with the CPU module (given schedule) and the interpreter (default schedule); return both."""
    results = []
    args = [*inputs, out]
    targets = [("llvm", schedule)] + ([("interpreter", te.create_schedule(out.op))] if interpret else [])
    for target, s in targets:
        result = np.zeros(tuple(int(x) for x in out.shape), out.dtype)
        vtakit.build(s, args, target=target)(*arrays, result)
        results.append(result)
    return results


def check(got_list, want, rtol=1e-5, atol=1e-5):
    for got in got_list:
        if np.dtype(want.dtype).kind == "f":
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------- numpy references
def conv2d_ref(x, w, stride=1, padding=0, dilation=1, groups=1, out_dtype=None):
    out_dtype = out_dtype or x.dtype
    top, left, bottom, right = ops.padding_of(padding)
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
    acc = np.float64 if x.dtype.kind == "f" else np.int64
    xp = np.pad(x.astype(acc), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (wd - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), acc)
    opg = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * opg:(g + 1) * opg].astype(acc)
        for y in range(kh):
            for z in range(kw):
                patch = xs[:, :, y * dh:y * dh + (oh - 1) * sh + 1:sh, z * dw:z * dw + (ow - 1) * sw + 1:sw]
                out[:, g * opg:(g + 1) * opg] += np.einsum("nchw,oc->nohw", patch, ws[:, :, y, z])
    return out.astype(out_dtype)


def pool_ref(x, k, stride, padding, kind, count_include_pad=False):
    top, left, bottom, right = ops.padding_of(padding)
    fill = -np.inf if kind == "max" else 0
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), ((top, bottom), (left, right)))
    oh = (xp.shape[2] - k) // stride + 1
    ow = (xp.shape[3] - k) // stride + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for y in range(oh):
        for z in range(ow):
            win = xp[:, :, y * stride:y * stride + k, z * stride:z * stride + k]
            if kind == "max":
                out[:, :, y, z] = win.max(axis=(2, 3))
            else:
                cnt = k * k if count_include_pad else ones[y * stride:y * stride + k, z * stride:z * stride + k].sum()
                out[:, :, y, z] = win.sum(axis=(2, 3)) / cnt
    return out.astype(x.dtype)


# ---------------------------------------------------------------------------- tests
@pytest.mark.parametrize("shape,stride,padding,dilation,groups", [
    ((1, 3, 9, 8), 1, 1, 1, 1),
    ((2, 4, 10, 11), 2, (1, 2), 1, 2),
    ((1, 6, 12, 12), 1, (0, 1, 2, 1), 2, 3),
    ((1, 8, 7, 7), 2, 0, 1, 1),
])
def test_conv2d_nchw(shape, stride, padding, dilation, groups):
    n, c, h, w = shape
    o = 8 if groups == 1 else 2 * groups
    data = te.placeholder(shape, name="data")
    kernel = te.placeholder((o, c // groups, 3, 3), name="kernel")
    out = ops.conv2d_nchw(data, kernel, stride, padding, dilation, groups)
    x, k = rand(shape), rand((o, c // groups, 3, 3))
    got = run_both(cpu.schedule_conv2d_nchw(out), [data, kernel], out, [x, k])
    check(got, conv2d_ref(x, k, stride, padding, dilation, groups), rtol=1e-4)


def test_conv2d_int8_with_fused_epilogue():
    data = te.placeholder((1, 4, 6, 6), "int8", name="data")
    kernel = te.placeholder((8, 4, 3, 3), "int8", name="kernel")
    bias = te.placeholder((8,), "int32", name="bias")
    conv = ops.conv2d_nchw(data, kernel, padding=1, out_dtype="int32")
    out = ops.clip(ops.add(conv, ops.pad(te.compute((8, 1, 1), lambda c, a, b: bias[c], name="b3"), [0, 0, 0])),
                   -1000, 1000)
    x, k, b = rand((1, 4, 6, 6), "int8"), rand((8, 4, 3, 3), "int8"), rand((8,), "int32")
    got = run_both(cpu.schedule_conv2d_nchw(out), [data, kernel, bias], out, [x, k, b])
    want = np.clip(conv2d_ref(x, k, padding=1, out_dtype="int32") + b[:, None, None], -1000, 1000).astype("int32")
    check(got, want)


@pytest.mark.parametrize("stride,padding,block", [(1, 1, 8), (2, 1, 16), (1, 0, 4)])
def test_conv2d_nchw_packed(stride, padding, block):
    data = te.placeholder((1, 5, 14, 14), name="data")
    packed = te.placeholder((2, 5, 3, 3, block), name="packed")
    out = ops.relu(ops.conv2d_nchw_packed(data, packed, stride, padding))
    x, k = rand((1, 5, 14, 14)), rand((2 * block, 5, 3, 3))
    kp = ops.layout.pack_conv2d_kernel(k, block)
    got = run_both(cpu.schedule_conv2d_nchw_packed(out), [data, packed], out, [x, kp], interpret=False)
    check(got, np.maximum(conv2d_ref(x, k, stride, padding), 0), rtol=1e-4)


@pytest.mark.parametrize("mult,stride,padding", [(1, 1, 1), (2, 2, (1, 0))])
def test_depthwise_conv2d(mult, stride, padding):
    data = te.placeholder((1, 4, 9, 10), name="data")
    kernel = te.placeholder((4, mult, 3, 3), name="kernel")
    out = ops.depthwise_conv2d_nchw(data, kernel, stride, padding)
    x, k = rand((1, 4, 9, 10)), rand((4, mult, 3, 3))
    got = run_both(cpu.schedule_depthwise_conv2d_nchw(out), [data, kernel], out, [x, k])
    check(got, conv2d_ref(x, k.reshape(4 * mult, 1, 3, 3), stride, padding, groups=4), rtol=1e-4)


@pytest.mark.parametrize("batch,in_dim,out_dim,pack", [(4, 12, 32, 16), (3, 7, 10, None), (1, 16, 8, 8),
                                                     (2, 64, 10, None), (1, 32, 7, None)])
def test_dense(batch, in_dim, out_dim, pack):
    data = te.placeholder((batch, in_dim), name="data")
    weight = te.placeholder((out_dim, in_dim), name="weight")
    bias = te.placeholder((out_dim,), name="bias")
    out = ops.relu(ops.dense(data, weight, bias, pack_block=pack))
    x, w, b = rand((batch, in_dim)), rand((out_dim, in_dim)), rand((out_dim,))
    got = run_both(cpu.schedule_dense(out), [data, weight, bias], out, [x, w, b])
    check(got, np.maximum(x @ w.T + b, 0), rtol=1e-4)


def test_dense_packed_and_matmul():
    data = te.placeholder((5, 9), name="data")
    packed = te.placeholder((3, 9, 8), name="packed")
    out = ops.dense_packed(data, packed)
    x, w = rand((5, 9)), rand((24, 9))
    wp = ops.layout.pack_dense_weight(w, 8)
    got = run_both(cpu.schedule_dense(out), [data, packed], out, [x, wp], interpret=False)
    check(got, x @ w.T, rtol=1e-4)
    a, b = te.placeholder((6, 9), "int32", name="a"), te.placeholder((9, 16), "int32", name="b")
    c = ops.matmul(a, b, pack_block=16)
    av, bv = rand((6, 9), "int32"), rand((9, 16), "int32")
    check(run_both(cpu.schedule_dense(c), [a, b], c, [av, bv]), av @ bv)


@pytest.mark.parametrize("kind,k,stride,padding,include", [
    ("max", 3, 2, 1, False), ("avg", 3, 2, 1, False), ("avg", 2, 2, 0, True), ("avg", 3, 1, 1, True),
])
def test_pool2d(kind, k, stride, padding, include):
    data = te.placeholder((2, 3, 9, 10), name="data")
    out = ops.pool2d(data, k, stride, padding, kind, include)
    x = rand((2, 3, 9, 10))
    check(run_both(cpu.schedule_pool(out), [data], out, [x]), pool_ref(x, k, stride, padding, kind, include))


def test_pool2d_integer_max_and_global_average():
    data = te.placeholder((1, 4, 6, 6), "int8", name="data")
    out = ops.pool2d(data, 2, 2, 1, "max")
    x = rand((1, 4, 6, 6), "int8")
    check(run_both(cpu.schedule_pool(out), [data], out, [x]), pool_ref(x, 2, 2, 1, "max").astype("int8"))
    f = te.placeholder((2, 5, 7, 6), name="f")
    g = ops.global_avg_pool2d(f)
    fx = rand((2, 5, 7, 6))
    check(run_both(cpu.schedule_pool(g), [f], g, [fx]), fx.mean(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("shape,axis", [((4, 32), -1), ((3, 10), 1), ((2, 3, 5), 1), ((5, 6), 0)])
def test_softmax(shape, axis):
    x = te.placeholder(shape, name="x")
    out = ops.softmax(x, axis)
    xv = rand(shape) * 5
    e = np.exp(xv - xv.max(axis=axis, keepdims=True))
    check(run_both(cpu.schedule_softmax(out), [x], out, [xv]), e / e.sum(axis=axis, keepdims=True), rtol=1e-5)


def test_broadcast_and_elementwise():
    a = te.placeholder((3, 1, 40), name="a")
    b = te.placeholder((5, 1), name="b")
    out = ops.relu(ops.subtract(ops.multiply(ops.add(a, b), 2.0), ops.maximum(a, 0.25)))
    av, bv = rand((3, 1, 40)), rand((5, 1))
    got = run_both(cpu.schedule_injective(out), [a, b], out, [av, bv])
    check(got, np.maximum((av + bv) * 2 - np.maximum(av, 0.25), 0))
    c = te.placeholder((7, 33), "int32", name="c")
    out = ops.cast(ops.divide(ops.clip(c, -20, 20), 3), "int8")
    cv = rand((7, 33), "int32")
    check(run_both(cpu.schedule_injective(out), [c], out, [cv]), (np.clip(cv, -20, 20) // 3).astype("int8"))
    assert ops.broadcast_shape((4, 1, 3), (5, 1)) == (4, 5, 3)


def test_large_elementwise_runs_in_parallel_and_vectorised():
    a = te.placeholder((64, 512), name="a")
    out = ops.relu(a)
    mod = vtakit.build(cpu.schedule_injective(out), [a, out], target="llvm")
    source = mod.get_source("ll-raw")
    assert "vtakit_parallel_launch" in source and f"<{cpu.vector_lanes('float32')} x float>" in source
    av = rand((64, 512))
    got = np.zeros_like(av)
    mod(av, got)
    np.testing.assert_array_equal(got, np.maximum(av, 0))


def test_schedule_dispatch_by_operator():
    """cpu.schedule picks each operator's schedule; the result equals the interpreter's."""
    x = te.placeholder((1, 4, 8, 8), name="x")
    k = te.placeholder((8, 4, 3, 3), name="k")
    rows = te.placeholder((3, 16), name="rows")
    cases = {
        "conv": ([x, k], ops.relu(ops.conv2d_nchw(x, k, padding=1))),
        "pool": ([x], ops.pool2d(x, 2)),
        "softmax": ([rows], ops.softmax(rows)),
        "elementwise": ([x], ops.clip(ops.multiply(x, 2.0), -1.0, 1.0)),
    }
    for name, (inputs, out) in cases.items():
        arrays = [rand(tuple(int(d) for d in t.shape)) for t in inputs]
        got, want = run_both(cpu.schedule(out), inputs, out, arrays)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_operator_errors():
    x = te.placeholder((1, 4, 8, 8), name="x")
    with pytest.raises(CompileError, match="groups=3 must divide the 4 input"):
        ops.conv2d_nchw(x, te.placeholder((6, 1, 3, 3), name="k"), groups=3)
    with pytest.raises(CompileError, match="kernel 'k' has 3 input channels per group, expected 4"):
        ops.conv2d_nchw(x, te.placeholder((6, 3, 3, 3), name="k"))
    with pytest.raises(CompileError, match="conv2d data 'v' must have rank 4"):
        ops.conv2d_nchw(te.placeholder((4, 8), name="v"), te.placeholder((6, 4, 3, 3), name="k"))
    with pytest.raises(CompileError, match="does not fit"):
        ops.conv2d_nchw(x, te.placeholder((6, 4, 9, 9), name="k"))
    with pytest.raises(CompileError, match="padding must be"):
        ops.conv2d_nchw(x, te.placeholder((6, 4, 3, 3), name="k"), padding=(1, 2, 3))
    with pytest.raises(CompileError, match="strides must be an int or 2 ints"):
        ops.conv2d_nchw(x, te.placeholder((6, 4, 3, 3), name="k"), strides=(1, 1, 1))
    with pytest.raises(CompileError, match="weight 'w' has 5 input features, data 'd' has 4"):
        ops.dense(te.placeholder((2, 4), name="d"), te.placeholder((3, 5), name="w"))
    with pytest.raises(CompileError, match="pack_block 5 must be a positive divisor of 8"):
        ops.dense(te.placeholder((2, 4), name="d"), te.placeholder((8, 4), name="w"), pack_block=5)
    with pytest.raises(CompileError, match="bias 'b' must have shape \\(3,\\)"):
        ops.dense(te.placeholder((2, 4), name="d"), te.placeholder((3, 4), name="w"), te.placeholder((4,), name="b"))
    with pytest.raises(CompileError, match="pool_type must be 'max' or 'avg'"):
        ops.pool2d(x, 2, pool_type="min")
    with pytest.raises(CompileError, match=r"shapes \(3, 4\) and \(5,\) do not broadcast"):
        ops.add(te.placeholder((3, 4), name="p"), te.placeholder((5,), name="q"))
    with pytest.raises(CompileError, match="at least one operand must be a tensor"):
        ops.add(1, 2)
    with pytest.raises(CompileError, match="a_min=2 is greater than a_max=1"):
        ops.clip(x, 2, 1)
    with pytest.raises(CompileError, match="softmax axis 3 is out of range"):
        ops.softmax(te.placeholder((2, 3), name="s"), 3)
    with pytest.raises(CompileError, match="softmax needs a float tensor"):
        ops.softmax(te.placeholder((2, 3), "int32", name="s"))
    with pytest.raises(CompileError, match="block 5 must be positive and divide 8"):
        ops.layout.pack_conv2d_kernel(np.zeros((8, 2, 3, 3)), 5)
    with pytest.raises(ScheduleError, match="is not a softmax output"):
        cpu.schedule_softmax(ops.relu(x))
    with pytest.raises(ScheduleError, match="not a chain of element-wise stages ending in a conv2d_nchw stage"):
        cpu.schedule_conv2d_nchw(ops.relu(x))
    with pytest.raises(ScheduleError, match="is a reduction"):
        cpu.schedule_injective(ops.relu(ops.pool2d(x, 2)))


def test_more_operator_errors():
    x = te.placeholder((1, 4, 8, 8), name="x")
    with pytest.raises(CompileError, match="padding must be non-negative integers"):
        ops.pool2d(x, 2, padding=-1)
    with pytest.raises(CompileError, match="strides and dilation must be positive"):
        ops.conv2d_nchw(x, te.placeholder((4, 4, 3, 3), name="k"), strides=0)
    with pytest.raises(CompileError, match=r"pad of 'x' \(rank 4\) needs 4 widths per side"):
        ops.pad(x, [1, 1])
    with pytest.raises(CompileError, match="matmul: 'a' has 3 columns but 'b' has 4 rows"):
        ops.matmul(te.placeholder((2, 3), name="a"), te.placeholder((4, 5), name="b"))
    with pytest.raises(CompileError, match="dense_packed: weight 'p' has 6 input features"):
        ops.dense_packed(te.placeholder((2, 4), name="d"), te.placeholder((2, 6, 8), name="p"))
    with pytest.raises(CompileError, match="conv2d_nchw_packed: kernel 'p' has 3 input channels, data has 4"):
        ops.conv2d_nchw_packed(x, te.placeholder((1, 3, 3, 3, 8), name="p"))
    with pytest.raises(CompileError, match="depthwise_conv2d: kernel 'k' has 3 channels, data 'x' has 4"):
        ops.depthwise_conv2d_nchw(x, te.placeholder((3, 1, 3, 3), name="k"))
    with pytest.raises(CompileError, match=r"pack_dense_weight expects \[out, in\]"):
        ops.layout.pack_dense_weight(np.zeros((2, 3, 4)), 2)
    with pytest.raises(CompileError, match="pack_conv2d_kernel expects OIHW"):
        ops.layout.pack_conv2d_kernel(np.zeros((2, 3)), 2)
    with pytest.raises(ScheduleError, match="a schedule needs the output tensor"):
        cpu.schedule_injective([])
    side = ops.add(ops.relu(ops.conv2d_nchw(x, te.placeholder((4, 4, 3, 3), name="k"), padding=1)),
                   ops.pool2d(x, 1))
    with pytest.raises(ScheduleError, match="reads the reduction 'max_pool2d' besides its main operator"):
        cpu.schedule_conv2d_nchw(side)
