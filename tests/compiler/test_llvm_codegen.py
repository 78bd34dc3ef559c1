"""The CPU backend on hand-built loop IR: every expression and statement kind against numpy."""

import dataclasses
import multiprocessing
import platform
import threading

import numpy as np
import pytest

from vtakit.compiler import ir
from vtakit.compiler.backend.llvm import ArgumentError, build_llvm, fingerprint
from vtakit.compiler.backend.llvm_codegen import STACK_LIMIT
from vtakit.compiler.backend.llvm_runtime import parse_target
from vtakit.errors import CompileError, VtakitError

N = 37  # not a multiple of any vector width


def loop(var, extent, body, kind=ir.ForKind.SERIAL, start=0, tag=""):
    return ir.For(var, ir.convert(start), ir.convert(extent), kind, body, tag)


def elementwise(fn, in_dtypes, out_dtype, n=N, kind=ir.ForKind.SERIAL):
    """out[i] = fn(in0[i], in1[i], ...) as a module taking (in0, ..., out)."""
    ins = [ir.Buffer(f"in{k}", (n,), dt) for k, dt in enumerate(in_dtypes)]
    out = ir.Buffer("out", (n,), out_dtype)
    i = ir.Var("i")
    body = loop(i, n, ir.BufferStore(out, fn(*[b[i] for b in ins]), (i,)), kind)
    return build_llvm(ir.PrimFunc("ew", (*ins, out), body))


def run(mod, *inputs, out_dtype, n=N):
    out = np.zeros(n, out_dtype)
    mod(*inputs, out)
    return out


KINDS = [ir.ForKind.SERIAL, ir.ForKind.VECTORIZED, ir.ForKind.PARALLEL, ir.ForKind.UNROLLED]
rng = np.random.default_rng(7)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("kind", [ir.ForKind.SERIAL, ir.ForKind.VECTORIZED])
def test_signed_division_flavours(dtype, kind):
    a = rng.integers(-100, 100, N).astype(dtype)
    b = rng.choice([-7, -3, -1, 1, 2, 5], N).astype(dtype)
    ops = {
        ir.FloorDiv.make: lambda x, y: x // y,
        ir.FloorMod.make: lambda x, y: x % y,
        ir.Div.make: lambda x, y: (np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))).astype(dtype),
        ir.Mod.make: np.fmod,
    }
    for make, ref in ops.items():
        got = run(elementwise(make, [dtype, dtype], dtype, kind=kind), a, b, out_dtype=dtype)
        np.testing.assert_array_equal(got, ref(a, b), err_msg=str(make))


def test_unsigned_division_and_constant_divisors():
    a = rng.integers(0, 255, N).astype("uint8")
    b = rng.integers(1, 9, N).astype("uint8")
    for make, want in ((ir.FloorDiv.make, a // b), (ir.FloorMod.make, a % b)):
        np.testing.assert_array_equal(run(elementwise(make, ["uint8"] * 2, "uint8"), a, b, out_dtype="uint8"), want)
    s = np.arange(-18, 19, dtype=np.int32)
    for d in (4, -4, 3):
        got = run(elementwise(lambda x, d=d: x // d + (x % d) * 100, ["int32"], "int32"), s, out_dtype="int32")
        np.testing.assert_array_equal(got, s // d + (s % d) * 100)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "uint32", "int64"])
def test_integer_wrap_around(dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min // 2, info.max // 2, N, dtype=np.int64).astype(dtype)
    b = rng.integers(info.min // 2, info.max // 2, N, dtype=np.int64).astype(dtype)
    got = run(elementwise(lambda x, y: x * y + x - y * 3, [dtype, dtype], dtype, kind=ir.ForKind.VECTORIZED),
              a, b, out_dtype=dtype)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, a * b + a - b * np.array(3, dtype))


CASTS = [("int8", "int32"), ("uint8", "int32"), ("int32", "int8"), ("int32", "uint8"), ("int16", "uint16"),
         ("int32", "float32"), ("uint32", "float64"), ("float32", "int32"), ("float64", "float32"),
         ("float32", "float64"), ("int8", "float32"), ("float32", "uint8"), ("int64", "int32"), ("uint16", "int64"),
         ("float16", "float32"), ("float32", "float16"), ("uint64", "int8")]


@pytest.mark.parametrize("src,dst", CASTS)
@pytest.mark.parametrize("kind", [ir.ForKind.SERIAL, ir.ForKind.VECTORIZED])
def test_casts_match_numpy(src, dst, kind):
    if np.dtype(src).kind == "f":
        lo, hi = (0, 255) if np.dtype(dst).kind == "u" else (-120, 120)
        a = rng.uniform(lo, hi, N).astype(src)
    else:
        info = np.iinfo(src)
        a = rng.integers(max(info.min, -(2 ** 40)), min(info.max, 2 ** 40), N, dtype=np.int64).astype(src)
    got = run(elementwise(lambda x: ir.Cast(dst, x), [src], dst, kind=kind), a, out_dtype=dst)
    np.testing.assert_array_equal(got, a.astype(dst))


def test_half_precision_arithmetic():
    a = rng.uniform(-2, 2, N).astype("float16")
    b = rng.uniform(-2, 2, N).astype("float16")
    got = run(elementwise(lambda x, y: x * y - y, ["float16"] * 2, "float16", kind=ir.ForKind.VECTORIZED), a, b,
              out_dtype="float16")
    np.testing.assert_allclose(got.astype("float32"), (a * b - b).astype("float32"), rtol=2e-3, atol=2e-3)


def test_bool_casts_and_logic():
    a = rng.integers(-3, 3, N).astype("int32")
    b = rng.uniform(-1, 1, N).astype("float32")
    fn = lambda x, y: ir.Select(ir.Cast("bool", x) & ~(y > 0.0) | (x == 2), ir.Cast("int32", ir.Cast("bool", y)), -x)
    got = run(elementwise(fn, ["int32", "float32"], "int32"), a, b, out_dtype="int32")
    np.testing.assert_array_equal(got, np.where((a != 0) & ~(b > 0) | (a == 2), (b != 0).astype(np.int32), -a))
    bools = elementwise(lambda x: x > 0, ["int32"], "bool")
    np.testing.assert_array_equal(run(bools, a, out_dtype="bool"), a > 0)


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int8"])
def test_shifts_are_arithmetic_for_signed(dtype):
    a = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, N, dtype=np.int64).astype(dtype)
    s = rng.integers(0, 7, N).astype(dtype)
    for fn, want in ((lambda x, y: x >> y, a >> s), (lambda x, y: x << y, a << s)):
        np.testing.assert_array_equal(run(elementwise(fn, [dtype] * 2, dtype), a, s, out_dtype=dtype), want)


MATH = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "erf": None, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "abs": np.abs, "log2": np.log2, "exp2": np.exp2, "rsqrt": lambda x: 1 / np.sqrt(x), "atan": np.arctan,
}


@pytest.mark.parametrize("op", sorted(MATH))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_intrinsics(op, dtype):
    a = rng.uniform(0.05, 3.0, N).astype(dtype)
    a[:4] = [0.5, 1.5, 2.5, 0.25]  # halfway cases: round is to even, like numpy
    ref = MATH[op]
    if ref is None:
        import math
        ref = np.vectorize(math.erf)
    for kind in (ir.ForKind.SERIAL, ir.ForKind.VECTORIZED):
        got = run(elementwise(lambda x: ir.Call.make(dtype, op, [x]), [dtype], dtype, kind=kind), a, out_dtype=dtype)
        np.testing.assert_allclose(got, ref(a).astype(dtype), rtol=2e-6 if dtype == "float32" else 1e-12)


def _erf_grid() -> np.ndarray:
    """A dense grid over [-10, 10], tiny magnitudes down to the smallest normal, and the special values
    (a multiple of 16 elements)."""
    tiny = np.geomspace(1.2e-38, 1.0, 4000)
    specials = [np.inf, -np.inf, np.nan, 0.0, -0.0, 4.0, -4.0, np.nextafter(np.float32(4), np.float32(0))]
    return np.concatenate([np.linspace(-10, 10, 400008), tiny, -tiny, specials]).astype(np.float32)


def _unary_module(op: str, dtype: str, n: int, kind: ir.ForKind) -> object:
    """out[i] = op(in[i]), the loop split 16 wide, its inner loop of ``kind``."""
    src, out = ir.Buffer("in0", (n,), dtype), ir.Buffer("out", (n,), dtype)
    i, j = ir.Var("i"), ir.Var("j")
    idx = i * 16 + j
    body = loop(i, n // 16, loop(j, 16, ir.BufferStore(out, ir.Call.make(dtype, op, [src[idx]]), (idx,)), kind))
    return build_llvm(ir.PrimFunc(op, (src, out), body))


@pytest.mark.parametrize("op", ["erf", "tanh"])
@pytest.mark.parametrize("kind", [ir.ForKind.SERIAL, ir.ForKind.VECTORIZED])
def test_float32_erf_tanh_are_inlined_and_accurate(op, kind):
    """float32 erf and tanh are straight-line code (no per-lane libm call: they vectorise) within 1e-6
    relative error of the exact function everywhere; NaN stays NaN, +-inf gives +-1, -0 keeps its sign."""
    import math
    exact = {"erf": math.erf, "tanh": math.tanh}[op]
    x = _erf_grid()
    mod = _unary_module(op, "float32", x.size, kind)
    source = mod.get_source("ll-raw")
    assert f"{op}f" not in source and f"llvm.{op}" not in source
    if kind == ir.ForKind.VECTORIZED:
        assert "<16 x float>" in source
    got = run(mod, x, out_dtype="float32", n=x.size)
    finite = ~np.isnan(x)
    want = np.array([exact(float(v)) for v in x[finite]])
    rel = np.abs(got[finite] - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    assert rel.max() < 1e-6, (rel.max(), x[finite][rel.argmax()])
    assert np.isnan(got[~finite]).all()
    np.testing.assert_allclose(got[np.isinf(x)], np.sign(x[np.isinf(x)]), rtol=1e-6)
    assert np.signbit(got[(x == 0) & np.signbit(x)]).all()


@pytest.mark.parametrize("op", ["erf", "tanh"])
def test_float64_erf_tanh_stay_libm(op):
    import math
    exact = {"erf": math.erf, "tanh": math.tanh}[op]
    x = _erf_grid().astype(np.float64)
    x[np.isnan(x)] = 0.5
    mod = _unary_module(op, "float64", x.size, ir.ForKind.VECTORIZED)
    np.testing.assert_allclose(run(mod, x, out_dtype="float64", n=x.size), [exact(float(v)) for v in x],
                               rtol=1e-15, atol=0)


def test_pow_min_max_and_float_floor_ops():
    a = rng.uniform(-3, 3, N).astype("float32")
    b = rng.uniform(0.5, 2, N).astype("float32")
    fn = lambda x, y: ir.Max.make(x, y) * 2.0 + ir.Min.make(x, y) + ir.FloorMod.make(x, y) + ir.FloorDiv.make(x, y)
    got = run(elementwise(fn, ["float32"] * 2, "float32", kind=ir.ForKind.VECTORIZED), a, b, out_dtype="float32")
    want = np.maximum(a, b) * 2 + np.minimum(a, b) + (a - np.floor(a / b) * b) + np.floor(a / b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    got = run(elementwise(lambda x, y: ir.Call.make("float32", "pow", [y, x]), ["float32"] * 2, "float32"), a, b,
              out_dtype="float32")
    np.testing.assert_allclose(got, b ** a, rtol=1e-5)


def test_vectorized_loop_emits_vector_code_and_handles_strides():
    n = 64
    A, B = ir.Buffer("A", (n * 2,), "float32"), ir.Buffer("B", (n,), "float32")
    i, j = ir.Var("i"), ir.Var("j")
    # B[i*16 + j] = A[2*(i*16 + j)] + A[i*16 + j] (a stride-2 gather and a contiguous load)
    idx = i * 16 + j
    body = loop(i, n // 16, loop(j, 16, ir.BufferStore(B, A[idx * 2] + A[idx], (idx,)), ir.ForKind.VECTORIZED))
    mod = build_llvm(ir.PrimFunc("strided", (A, B), body))
    assert "<16 x float>" in mod.get_source("ll-raw")
    a = rng.uniform(size=n * 2).astype("float32")
    b = np.zeros(n, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a[::2][:n] + a[:n])


def test_explicit_ramp_broadcast_scatter():
    A, B = ir.Buffer("A", (8,), "int32"), ir.Buffer("B", (16,), "int32")
    ramp = ir.Ramp(ir.const(0), ir.const(1), 8)
    store = ir.BufferStore(B, A[ramp] * ir.Broadcast(ir.const(3), 8), (ir.Ramp(ir.const(1), ir.const(2), 8),))
    mod = build_llvm(ir.PrimFunc("scatter", (A, B), store))
    a, b = np.arange(8, dtype=np.int32), np.zeros(16, np.int32)
    mod(a, b)
    np.testing.assert_array_equal(b[1::2], a * 3)
    np.testing.assert_array_equal(b[::2], 0)


@pytest.mark.parametrize("size", [16, STACK_LIMIT // 4 + 16])
def test_allocate_on_stack_and_heap(size):
    A, B = ir.Buffer("A", (size,), "float32"), ir.Buffer("B", (size,), "float32")
    T = ir.Buffer("T", (size,), "float32", scope="local")
    i, j = ir.Var("i"), ir.Var("j")
    body = ir.Allocate(T, ir.seq(loop(i, size, ir.BufferStore(T, A[i] * 2.0, (i,))),
                                 loop(j, size, ir.BufferStore(B, T[size - 1 - j] + 1.0, (j,)))))
    mod = build_llvm(ir.PrimFunc("alloc", (A, B), body))
    a = rng.uniform(size=size).astype("float32")
    b = np.zeros(size, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a[::-1] * 2 + 1)


def test_if_then_else_let_attr_and_lazy_if_then_else():
    A, B = ir.Buffer("A", (N,), "int32"), ir.Buffer("B", (N,), "int32")
    i, t, u = ir.Var("i"), ir.Var("t"), ir.Var("u")
    # the lazy intrinsic must not read A[i - 40] (out of bounds) when the condition is false
    lazy = ir.Call.make("int32", "if_then_else", [i >= 40, A[i - 40], ir.Let(u, A[i] * 2, u + 1)])
    body = loop(i, N, ir.AttrStmt(None, "pragma_test", 1, ir.LetStmt(
        t, A[i] % 3, ir.IfThenElse(ir.EQ.make(t, 0), ir.BufferStore(B, lazy, (i,)),
                                   ir.BufferStore(B, ir.const(-1), (i,))))))
    mod = build_llvm(ir.PrimFunc("branches", (A, B), body))
    a = rng.integers(-50, 50, N).astype("int32")
    b = np.zeros(N, np.int32)
    mod(a, b)
    np.testing.assert_array_equal(b, np.where(a % 3 == 0, a * 2 + 1, -1))


@pytest.mark.parametrize("extent", [1, 2, 3, 15, 16, 17, 64, 1001, 70000])  # around the chunk counts and 2**16
def test_parallel_loop_covers_every_iteration_once(extent):
    A, B = ir.Buffer("A", (extent,), "int64"), ir.Buffer("B", (extent,), "int64")
    i = ir.Var("i", "int64")
    body = loop(i, ir.const(extent, "int64"), ir.BufferStore(B, B[i] + A[i] * i, (i,)), ir.ForKind.PARALLEL,
                start=ir.const(0, "int64"))
    mod = build_llvm(ir.PrimFunc("par", (A, B), body))
    a = rng.integers(0, 100, extent).astype("int64")
    b = np.ones(extent, "int64")
    mod(a, b)
    np.testing.assert_array_equal(b, 1 + a * np.arange(extent))


def par_matrix_module(rows=20, cols=33):
    """A parallel row loop inside a serial loop (many launches) that captures outer variables."""
    A, B = ir.Buffer("A", (rows, cols), "float32"), ir.Buffer("B", (rows, cols), "float32")
    T = ir.Buffer("T", (cols,), "float32", scope="local")
    r, i, j, k = ir.Var("r"), ir.Var("i"), ir.Var("j"), ir.Var("k")
    inner = ir.Allocate(T, ir.seq(
        loop(j, cols, ir.BufferStore(T, A[i, j] * ir.Cast("float32", r + 1), (j,)), ir.ForKind.VECTORIZED),
        loop(k, cols, ir.BufferStore(B, B[i, k] + T[k], (i, k)))))
    body = loop(r, 3, loop(i, rows, inner, ir.ForKind.PARALLEL))
    return build_llvm(ir.PrimFunc("par_matrix", (A, B), body)), rows, cols


def test_parallel_inside_serial_with_private_allocation():
    mod, rows, cols = par_matrix_module()
    a = rng.uniform(size=(rows, cols)).astype("float32")
    b = np.zeros((rows, cols), "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a * 6, rtol=1e-6)


def test_kernels_run_concurrently_from_python_threads():
    mod, rows, cols = par_matrix_module()
    a = rng.uniform(size=(rows, cols)).astype("float32")
    outs = [np.zeros((rows, cols), "float32") for _ in range(4)]

    def work(out):
        for _ in range(50):
            out[...] = 0
            mod(a, out)
    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        np.testing.assert_allclose(o, a * 6, rtol=1e-6)


def _child_runs_kernel(queue):
    mod, rows, cols = par_matrix_module()
    a = np.ones((rows, cols), "float32")
    b = np.zeros((rows, cols), "float32")
    mod(a, b)
    queue.put(float(b.sum()))


def test_parallel_runtime_survives_fork():
    mod, rows, cols = par_matrix_module()
    mod(np.ones((rows, cols), "float32"), np.zeros((rows, cols), "float32"))  # pool running in the parent
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_runs_kernel, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == pytest.approx(6 * rows * cols)


def test_unrolled_loop_is_unrolled():
    A = ir.Buffer("A", (4,), "int32")
    i = ir.Var("i")
    mod = build_llvm(ir.PrimFunc("unrolled", (A,), loop(i, 4, ir.BufferStore(A, i * i, (i,)), ir.ForKind.UNROLLED)))
    assert "br " not in mod.get_source("ll-raw").split("_kernel")[1].split("}")[0].split("body:")[1]
    a = np.zeros(4, np.int32)
    mod(a)
    np.testing.assert_array_equal(a, [0, 1, 4, 9])


def test_vthread_binding_runs_serially():
    A = ir.Buffer("A", (6,), "int32")
    v = ir.Var("vt")
    mod = build_llvm(ir.PrimFunc("vt", (A,), loop(v, 6, ir.BufferStore(A, v + 1, (v,)), ir.ForKind.THREAD_BINDING,
                                                   tag="vthread")))
    a = np.zeros(6, np.int32)
    mod(a)
    np.testing.assert_array_equal(a, np.arange(1, 7))


def test_symbolic_shapes_are_bound_from_arguments():
    n = ir.Var("n")
    A, B = ir.Buffer("A", (n, 3), "float32"), ir.Buffer("B", (n, 3), "float32")
    i, j = ir.Var("i"), ir.Var("j")
    mod = build_llvm(ir.PrimFunc("dyn", (A, B), loop(i, n, loop(j, 3, ir.BufferStore(B, A[i, j] + 1.0, (i, j))))))
    for rows in (1, 5, 40):
        a = rng.uniform(size=(rows, 3)).astype("float32")
        b = np.zeros_like(a)
        mod(a, b)
        np.testing.assert_allclose(b, a + 1)
    with pytest.raises(ArgumentError, match=r"argument 1 \('B'\) has shape \(4, 3\), expected \(5, 3\)"):
        mod(np.zeros((5, 3), "float32"), np.zeros((4, 3), "float32"))


def test_cache_is_by_content_not_by_names():
    def func(value_outer):
        B = ir.Buffer("B", (9,), "int32")
        outer, inner = ir.Var("i"), ir.Var("i")  # same names: only identity tells them apart
        store = ir.BufferStore(B, outer if value_outer else inner, (outer * 3 + inner,))
        return ir.PrimFunc("f", (B,), loop(outer, 3, loop(inner, 3, store)))

    f1, f2 = func(True), func(False)
    assert fingerprint(f1) != fingerprint(f2)
    assert fingerprint(f1) == fingerprint(func(True))
    m1, m2 = build_llvm(f1), build_llvm(f2)
    assert build_llvm(func(True)) is m1
    b1, b2 = np.zeros(9, np.int32), np.zeros(9, np.int32)
    m1(b1)
    m2(b2)
    np.testing.assert_array_equal(b1, np.repeat(np.arange(3), 3))
    np.testing.assert_array_equal(b2, np.tile(np.arange(3), 3))


# ---------------------------------------------------------------------------- errors
@pytest.fixture(scope="module")
def axpy():
    X, Y, Z = (ir.Buffer(n, (4, 5), "float32") for n in "XYZ")
    i, j = ir.Var("i"), ir.Var("j")
    body = loop(i, 4, loop(j, 5, ir.BufferStore(Z, X[i, j] * 2.0 + Y[i, j], (i, j))))
    return build_llvm(ir.PrimFunc("axpy", (X, Y, Z), body))


def ok_args():
    return [np.ones((4, 5), "float32") for _ in range(3)]


def test_argument_errors_name_the_argument(axpy):
    with pytest.raises(ArgumentError, match=r"axpy takes 3 arguments \(X, Y, Z\), got 2"):
        axpy(*ok_args()[:2])
    a = ok_args()
    a[1] = a[1].astype("float64")
    with pytest.raises(ArgumentError, match=r"argument 1 \('Y'\) has dtype float64, expected float32"):
        axpy(*a)
    a = ok_args()
    a[2] = np.ones((5, 4), "float32")
    with pytest.raises(ArgumentError, match=r"argument 2 \('Z'\) has shape \(5, 4\), expected \(4, 5\)"):
        axpy(*a)
    a = ok_args()
    a[0] = np.ones(20, "float32")
    with pytest.raises(ArgumentError, match=r"argument 0 \('X'\) has shape \(20,\), expected \(4, 5\)"):
        axpy(*a)
    a = ok_args()
    a[0] = np.ones((5, 4), "float32").T
    with pytest.raises(ArgumentError, match="C-contiguous"):
        axpy(*a)
    a = ok_args()
    a[1] = [[1.0] * 5] * 4
    with pytest.raises(ArgumentError, match="must be a numpy array, got list"):
        axpy(*a)
    a = ok_args()
    a[2].flags.writeable = False
    with pytest.raises(ArgumentError, match=r"argument 2 \('Z'\) is written by the kernel but the array is read-only"):
        axpy(*a)
    a = ok_args()
    with pytest.raises(ArgumentError, match=r"arguments 0 \('X'\) and 2 \('Z'\) overlap"):
        axpy(a[0], a[1], a[0])
    axpy(a[0], a[0], a[2])  # two read-only views of one array are fine
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, VtakitError)


def test_compile_errors():
    A = ir.Buffer("A", (4, 4), "float32")
    i, j = ir.Var("i"), ir.Var("j")
    nested = loop(i, 4, loop(j, 4, ir.BufferStore(A, ir.const(1.0), (i, j)), ir.ForKind.PARALLEL), ir.ForKind.PARALLEL)
    with pytest.raises(CompileError, match="parallel loop 'j' is nested in another parallel loop"):
        build_llvm(ir.PrimFunc("nested", (A,), nested))
    gpu = loop(i, 4, ir.BufferStore(A, ir.const(1.0), (i, i)), ir.ForKind.THREAD_BINDING, tag="threadIdx.x")
    with pytest.raises(CompileError, match="bound to 'threadIdx.x'"):
        build_llvm(ir.PrimFunc("gpu", (A,), gpu))
    unknown = loop(i, 4, ir.BufferStore(A, ir.Call.make("float32", "frobnicate", [A[i, i]]), (i, i)))
    with pytest.raises(CompileError, match="does not know the intrinsic 'frobnicate'"):
        build_llvm(ir.PrimFunc("unknown", (A,), unknown))
    T = ir.Buffer("T", (4,), "float32")
    with pytest.raises(CompileError, match="buffer 'T' is used outside its allocation"):
        build_llvm(ir.PrimFunc("unalloc", (A,), ir.BufferStore(A, T[0], (0, 0))))
    with pytest.raises(CompileError, match="variable 'j' is used outside the scope"):
        build_llvm(ir.PrimFunc("free_var", (A,), ir.BufferStore(A, ir.const(1.0), (j, j))))
    with pytest.raises(CompileError, match="does not support dtype 'bfloat16'"):
        build_llvm(ir.PrimFunc("bf", (ir.Buffer("H", (4,), "bfloat16"),), ir.Evaluate(ir.const(0))))
    with pytest.raises(CompileError, match="expects an ir.PrimFunc"):
        build_llvm("not a function")


def test_target_strings():
    assert parse_target("llvm").cpu
    assert parse_target("llvm -mcpu=haswell").cpu == "haswell"
    with pytest.raises(CompileError, match="must start with 'llvm'"):
        parse_target("cuda")
    with pytest.raises(CompileError, match="unknown target option '-foo'"):
        parse_target("llvm -foo=1")
    with pytest.raises(CompileError, match="malformed target option 'mcpu'"):
        parse_target("llvm mcpu")


def test_portable_target_cpu_gives_same_results():
    A, B = ir.Buffer("A", (64,), "float32"), ir.Buffer("B", (64,), "float32")
    i = ir.Var("i")
    func = ir.PrimFunc("portable", (A, B), loop(i, 64, ir.BufferStore(B, A[i] * A[i], (i,)), ir.ForKind.VECTORIZED))
    a = rng.uniform(size=64).astype("float32")
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the baseline CPU name below is x86's")
    for target in ("llvm", "llvm -mcpu=x86-64"):
        b = np.zeros(64, "float32")
        build_llvm(func, target)(a, b)
        np.testing.assert_allclose(b, a * a)


def test_freed_modules_leave_others_working():
    import gc

    from vtakit.compiler.backend.llvm import clear_cache

    def func(scale):
        A = ir.Buffer("A", (8,), "float32")
        i = ir.Var("i")
        return ir.PrimFunc("scale", (A,), loop(i, 8, ir.BufferStore(A, A[i] * scale, (i,))))

    keep = build_llvm(func(2.0))
    for k in range(3):
        build_llvm(func(3.0 + k))
        clear_cache()
        gc.collect()  # engines are freed; each owned its own target machine
    a = np.ones(8, "float32")
    keep(a)
    build_llvm(func(5.0))(a)
    np.testing.assert_array_equal(a, 10.0)


def test_thread_count_setting_is_checked(monkeypatch):
    from vtakit.compiler.backend.llvm_runtime import num_threads

    monkeypatch.setenv("VTAKIT_NUM_THREADS", "3")
    assert num_threads() == 3
    for bad in ("0", "two", "100000"):
        monkeypatch.setenv("VTAKIT_NUM_THREADS", bad)
        with pytest.raises(CompileError, match="VTAKIT_NUM_THREADS must be an integer"):
            num_threads()


def test_concurrent_builds_from_threads():
    def build_and_run(k, results):
        A = ir.Buffer("A", (16,), "int32")
        i = ir.Var("i")
        mod = build_llvm(ir.PrimFunc(f"t{k}", (A,), loop(i, 16, ir.BufferStore(A, i * (k + 1), (i,)),
                                                         ir.ForKind.VECTORIZED)))
        a = np.zeros(16, np.int32)
        mod(a)
        results[k] = a

    results = {}
    threads = [threading.Thread(target=build_and_run, args=(k, results)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        np.testing.assert_array_equal(results[k], np.arange(16) * (k + 1))


def test_time_evaluator_reports_each_repeat(axpy):
    evaluate = axpy.time_evaluator(number=2, repeat=3, min_repeat_ms=1)
    result = evaluate(*ok_args())
    assert len(result.results) == 3 and all(t > 0 for t in result.results)
    assert min(result.results) <= result.median <= max(result.results)
    with pytest.raises(CompileError, match="time_evaluator needs number >= 1"):
        axpy.time_evaluator(number=0)


def test_ill_formed_ir_is_a_compile_error():
    A = ir.Buffer("A", (4, 4), "float32")
    I = ir.Buffer("I", (4,), "int32")
    i, j = ir.Var("i"), ir.Var("j")

    def fails(body, match, params=(A, I)):
        with pytest.raises(CompileError, match=match):
            build_llvm(ir.PrimFunc("bad", params, body))

    fails(ir.BufferStore(A, ir.const(1.0), (i,)), "buffer 'A' has 2 dimensions, indexed with 1")
    fails(loop(i, 4, ir.LetStmt(j, i, ir.LetStmt(j, i, ir.Evaluate(ir.const(0))))), "variable 'j' is bound twice")
    fails(ir.BufferStore(I, ir.Add(I[0], A[0, 0]), (0,)), "operand types differ")
    fails(ir.BufferStore(A, ir.Call.make("float32", "exp", [I[0]]), (0, 0)), "intrinsic 'exp' needs a float argument")
    fails(ir.BufferStore(I, ir.Call.make("int32", "shift_left", [A[0, 0], A[0, 1]]), (0,)),
          "intrinsic 'shift_left' needs integer arguments")
    H = ir.Buffer("H", (4,), "float16")
    fails(ir.BufferStore(H, ir.Call.make("float16", "erf", [H[0]]), (0,)), "supports float32 and float64",
          params=(H,))
    fails(ir.BufferStore(I, ir.const(1), (ir.Cast("float32", I[0]),)), "buffer index .* has dtype float32")
    ramp = ir.Ramp(ir.const(0), ir.const(1), 4)
    fails(ir.IfThenElse(I[ramp] > 0, ir.Evaluate(ir.const(0))), "if condition .* is a vector")
    fails(ir.BufferStore(I, I[ramp], (0,)), "store of a 4-lane value to a 1-lane index")
    guarded = ir.Call.make("int32", "if_then_else", [ramp > 1, I[ramp - 2], ir.Broadcast(ir.const(0), 4)])
    fails(ir.BufferStore(I, guarded, (ramp,)), "if_then_else with a vector condition reads 'I'")
    blend = ir.Call.make("int32", "if_then_else", [ramp > 1, ramp, ir.Broadcast(ir.const(0), 4)])
    mod = build_llvm(ir.PrimFunc("blend", (I,), ir.BufferStore(I, blend, (ramp,))))
    out = np.zeros(4, np.int32)
    mod(out)
    np.testing.assert_array_equal(out, [0, 0, 2, 3])
    fails(ir.Evaluate(ir.const(0)), "two parameters share one data pointer",
          params=(A, ir.Buffer("B", (4, 4), "float32", data=A.data)))

    @dataclasses.dataclass(eq=False)
    class Unknown(ir.Stmt):
        pass

    fails(Unknown(), "cannot generate code for Unknown")


def test_unusable_targets_are_compile_errors():
    func = ir.PrimFunc("f", (ir.Buffer("A", (4,), "float32"),), ir.Evaluate(ir.const(0)))
    with pytest.raises(CompileError, match="LLVM cannot target 'nonsense-triple'|cannot run code for"):
        build_llvm(func, "llvm -mtriple=nonsense-triple")


def test_argument_shapes_that_cannot_be_bound():
    n = ir.Var("n")
    A = ir.Buffer("A", (n * 2,), "float32")
    mod = build_llvm(ir.PrimFunc("twice", (A,), ir.Evaluate(ir.const(0))))
    with pytest.raises(ArgumentError, match=r"extent \(n \* 2\) of axis 0 must be a constant or a variable"):
        mod(np.zeros(4, "float32"))
    S = ir.Buffer("S", (4,), "float32", elem_offset=n)
    mod = build_llvm(ir.PrimFunc("offset", (S,), ir.Evaluate(ir.const(0))))
    with pytest.raises(ArgumentError, match=r"shape variables \['n'\] are not bound"):
        mod(np.zeros(4, "float32"))
    with pytest.raises(CompileError, match="unknown source format 'pdf'"):
        mod.get_source("pdf")


def test_parameters_with_explicit_strides_take_matching_views():
    A = ir.Buffer("A", (3, 4), "float32", strides=(8, 1))  # rows padded to 8 elements
    B = ir.Buffer("B", (3, 4), "float32")
    i, j = ir.Var("i"), ir.Var("j")
    mod = build_llvm(ir.PrimFunc("padded", (A, B), loop(i, 3, loop(j, 4, ir.BufferStore(B, A[i, j] + 1.0, (i, j))))))
    storage = rng.uniform(size=(3, 8)).astype("float32")
    b = np.zeros((3, 4), "float32")
    mod(storage[:, :4], b)
    np.testing.assert_allclose(b, storage[:, :4] + 1)
    with pytest.raises(ArgumentError, match=r"argument 0 \('A'\) has element strides \(4, 1\), expected \(8, 1\)"):
        mod(np.zeros((3, 4), "float32"), b)
    row = ir.Var("row")
    V = ir.Buffer("V", (3, 4), "float32", strides=(row, 1))  # any row pitch, bound from the argument
    mod = build_llvm(ir.PrimFunc("pitched", (V, B), loop(i, 3, loop(j, 4, ir.BufferStore(B, V[i, j] * 2.0, (i, j))))))
    for pitch in (4, 6, 8):
        storage = rng.uniform(size=(3, pitch)).astype("float32")
        mod(storage[:, :4], b)
        np.testing.assert_allclose(b, storage[:, :4] * 2)


@pytest.mark.parametrize("stride", [2, 3, 4, 5])
def test_strided_vector_loads_read_only_their_span(stride):
    lanes = 16
    A = ir.Buffer("A", ((lanes - 1) * stride + 1,), "float32")  # exactly the span: no over-read possible
    B = ir.Buffer("B", (lanes,), "float32")
    ramp = ir.Ramp(ir.const(0), ir.const(stride), lanes)
    store = ir.BufferStore(B, A[ramp], (ir.Ramp(ir.const(0), ir.const(1), lanes),))
    mod = build_llvm(ir.PrimFunc("strided_load", (A, B), store))
    a = rng.uniform(size=(lanes - 1) * stride + 1).astype("float32")
    b = np.zeros(lanes, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a[::stride])


def test_build_passes_target_options_to_the_llvm_backend():
    import vtakit
    from vtakit import te

    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    plain = vtakit.build(s, [A, B], target="llvm")
    generic = vtakit.build(s, [A, B], target="llvm -mcpu=x86-64")
    assert "-mcpu=x86-64" in str(generic.target) and "-mcpu=x86-64" not in str(plain.target)
    a = np.arange(8, dtype="float32")
    b = np.empty_like(a)
    generic(a, b)
    np.testing.assert_array_equal(b, a + 1)
