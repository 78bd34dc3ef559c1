"""Schedule variants with numpy references, shared by the tests of every backend.

Each :class:`ScheduleCase` builds a fresh schedule exercising one primitive (or a combination),
knows which arguments are inputs, and computes the expected outputs with numpy. A backend test
runs every case through its own runner::

    from vtakit.compiler.testing import CASES, check_case
    for case in CASES:
        check_case(case, lambda s, args, arrays: vtakit.build(s, args, target="llvm")(*arrays))

:func:`matmul_variant` makes the random split/reorder schedules of the property tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler import te
from vtakit.compiler.te.schedule import Schedule
from vtakit.compiler.te.tensor import Tensor

__all__ = ["ScheduleCase", "CASES", "case", "make_arrays", "check_case", "interpreter_runner", "matmul_variant",
           "toy_gemm_intrin", "TOY_INTRINSICS"]

Runner = Callable[[Schedule, list[Tensor], list[np.ndarray]], None]


@dataclass
class ScheduleCase:
    name: str
    build: Callable[[], tuple[Schedule, list[Tensor]]]
    reference: Callable[..., Sequence[np.ndarray]]   # input arrays -> expected output arrays
    num_inputs: int
    intrinsics: dict[str, Callable[..., Any]] = field(default_factory=dict)  # interpreter callbacks needed
    portable: bool = True            # False: needs interpreter-only intrinsic callbacks
    rtol: float = 1e-5


def make_arrays(args: Sequence[Tensor], num_inputs: int, seed: int = 0) -> list[np.ndarray]:
    """Random inputs (small integers for integer dtypes), zeroed outputs."""
    rng = np.random.default_rng(seed)
    out = []
    for k, t in enumerate(args):
        shape = tuple(int(s) for s in t.shape)
        if k >= num_inputs:
            out.append(np.zeros(shape, dtype=t.dtype))
        elif np.dtype(t.dtype).kind == "f":
            out.append(rng.uniform(0.1, 1.0, shape).astype(t.dtype))
        else:
            info = np.iinfo(t.dtype)
            lo, hi = max(info.min, -100), min(info.max, 100)
            out.append(rng.integers(lo, hi + 1, shape).astype(t.dtype))
    return out


def check_case(c: ScheduleCase, runner: Runner, seed: int = 0) -> None:
    """Build ``c``, run it with ``runner`` and compare every output with numpy."""
    s, args = c.build()
    arrays = make_arrays(args, c.num_inputs, seed)
    expected = c.reference(*arrays[:c.num_inputs])
    runner(s, args, arrays)
    for t, got, want in zip(args[c.num_inputs:], arrays[c.num_inputs:], expected):
        if np.dtype(t.dtype).kind == "f":
            np.testing.assert_allclose(got, want, rtol=c.rtol, atol=1e-6, err_msg=f"{c.name}: output {t.name}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{c.name}: output {t.name}")


def interpreter_runner(intrinsics: dict | None = None) -> Runner:
    from vtakit.compiler.interpreter import run  # noqa: PLC0415
    from vtakit.compiler.lower import lower  # noqa: PLC0415

    def runner(s: Schedule, args: list[Tensor], arrays: list[np.ndarray]) -> None:
        run(lower(s, args), *arrays, intrinsics=intrinsics)

    return runner


CASES: list[ScheduleCase] = []


def case(num_inputs: int, reference: Callable[..., Any], **kw: Any) -> Callable:
    def register(fn: Callable[[], tuple[Schedule, list[Tensor]]]) -> Callable:
        CASES.append(ScheduleCase(fn.__name__, fn, lambda *a: _tuple(reference(*a)), num_inputs, **kw))
        return fn

    return register


def _tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


# ---------------------------------------------------------------------------- workloads
def _matmul(n: int, m: int, l: int, dtype: str = "float32") -> tuple[Tensor, Tensor, Tensor]:
    A = te.placeholder((n, l), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _mm_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return a @ b
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(a.dtype)


def matmul_variant(n: int, m: int, l: int, factors: Sequence[int], order: Sequence[int],
                   dtype: str = "int32") -> tuple[Schedule, list[Tensor]]:
    """Matmul with i, j, k split by ``factors`` and the six loops permuted by ``order``."""
    A, B, C = _matmul(n, m, l, dtype)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, ii = s[C].split(i, factor=factors[0])
    jo, ji = s[C].split(j, factor=factors[1])
    ko, ki = s[C].split(k, factor=factors[2])
    loops = [io, ii, jo, ji, ko, ki]
    s[C].reorder(*[loops[p] for p in order])
    return s, [A, B, C]


@case(2, _mm_ref)
def default_matmul():
    A, B, C = _matmul(5, 6, 7)
    return te.create_schedule(C.op), [A, B, C]


@case(2, _mm_ref)
def split_nondividing():
    A, B, C = _matmul(10, 7, 9, "int32")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=3)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, ko, C.op.axis[1], ki, ii)
    return s, [A, B, C]


@case(2, _mm_ref)
def split_nparts():
    A, B, C = _matmul(10, 7, 9, "int32")
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[1], nparts=3)
    return s, [A, B, C]


@case(2, _mm_ref)
def split_of_split_inner():
    A, B, C = _matmul(13, 6, 5, "int32")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=6)
    iio, iii = s[C].split(ii, factor=4)
    s[C].reorder(iii, io, iio)
    return s, [A, B, C]


@case(2, _mm_ref)
def tile_matmul():
    A, B, C = _matmul(12, 10, 8)
    s = te.create_schedule(C.op)
    s[C].tile(C.op.axis[0], C.op.axis[1], 4, 3)
    return s, [A, B, C]


@case(2, _mm_ref)
def fuse_then_split():
    A, B, C = _matmul(6, 7, 5, "int32")
    s = te.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    s[C].split(f, factor=5)
    return s, [A, B, C]


@case(2, _mm_ref)
def reorder_reduction_outermost():
    A, B, C = _matmul(6, 7, 5, "int32")
    s = te.create_schedule(C.op)
    s[C].reorder(C.op.reduce_axis[0], C.op.axis[1], C.op.axis[0])
    return s, [A, B, C]


def _stencil() -> tuple[Tensor, Tensor, Tensor]:
    A = te.placeholder((20, 11), name="A")
    B = te.compute((20, 11), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((18, 10), lambda i, j: B[i, j] + B[i + 2, j + 1] * B[i + 1, j], name="C")
    return A, B, C


def _stencil_ref(a: np.ndarray) -> np.ndarray:
    b = a * np.float32(2.0) + np.float32(1.0)
    return b[:18, :10] + b[2:20, 1:11] * b[1:19, :10]


def _stencil_at(level: int) -> tuple[Schedule, list[Tensor]]:
    A, B, C = _stencil()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=3)
    s[C].reorder(io, jo, ii, ji)
    s[B].compute_at(s[C], [io, jo, ii, ji][level])
    return s, [A, C]


@case(1, _stencil_ref)
def compute_at_outer():
    return _stencil_at(0)


@case(1, _stencil_ref)
def compute_at_middle():
    return _stencil_at(1)


@case(1, _stencil_ref)
def compute_at_inner():
    return _stencil_at(2)


@case(1, _stencil_ref)
def compute_at_innermost():
    return _stencil_at(3)


@case(1, _stencil_ref)
def compute_at_split_producer():
    A, B, C = _stencil()
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=5)
    s[B].compute_at(s[C], io)
    bo, bi = s[B].split(B.op.axis[1], factor=4)
    s[B].reorder(bi, B.op.axis[0], bo)
    return s, [A, C]


def _mm_chain_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.exp(a * np.float32(0.5)) + np.float32(1)) @ b


@case(2, _mm_chain_ref, rtol=1e-4)
def compute_at_reduction_axis():
    A = te.placeholder((8, 12), name="A")
    B = te.placeholder((12, 6), name="B")
    E = te.compute((8, 12), lambda i, k: te.exp(A[i, k] * 0.5) + 1.0, name="E")
    k = te.reduce_axis((0, 12), name="k")
    C = te.compute((8, 6), lambda i, j: te.sum(E[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, factor=5)
    s[E].compute_at(s[C], ko)
    return s, [A, B, C]


@case(1, lambda a: np.sqrt((a * np.float32(2) + np.float32(1)) ** 2 + np.float32(3)), rtol=1e-5)
def compute_inline_chain():
    A = te.placeholder((7, 5), name="A")
    B = te.compute((7, 5), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((7, 5), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((7, 5), lambda i, j: C[i, j] * C[i, j], name="D")
    E = te.compute((7, 5), lambda i, j: te.sqrt(D[i, j] + 3.0), name="E")
    s = te.create_schedule(E.op)
    for t in (B, C, D):
        s[t].compute_inline()
    return s, [A, E]


@case(2, _mm_ref)
def cache_read_shared_at_reduction():
    A, B, C = _matmul(8, 9, 12)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "local", [C])
    io, ii = s[C].split(C.op.axis[0], factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=5)
    s[C].reorder(io, ko, ii, C.op.axis[1], ki)
    s[AA].compute_at(s[C], ko)
    s[BB].compute_at(s[C], ii)
    return s, [A, B, C]


@case(2, _mm_ref)
def cache_write_local():
    A, B, C = _matmul(8, 10, 6, "int32")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[CC].compute_at(s[C], jo)
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=4)
    s[CC].reorder(ko, CC.op.axis[0], ki, CC.op.axis[1])
    return s, [A, B, C]


def _vthread(tag: str) -> tuple[Schedule, list[Tensor]]:
    A, B, C = _matmul(8, 12, 6, "int32")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    AA = s.cache_read(A, "local", [CC])
    jo, ji = s[C].split(C.op.axis[1], factor=6)
    tx, jo = s[C].split(jo, nparts=2)
    s[C].reorder(tx, C.op.axis[0], jo, ji)
    s[C].bind(tx, te.thread_axis(tag))
    s[CC].compute_at(s[C], C.op.axis[0])
    s[AA].compute_at(s[CC], CC.op.reduce_axis[0])
    return s, [A, B, C]


@case(2, _mm_ref)
def vthread_matmul():
    return _vthread("vthread")


@case(2, _mm_ref)
def cthread_matmul():
    return _vthread("cthread")


@case(1, lambda a: np.maximum(a * np.float32(3) - np.float32(1), np.float32(0.5)))
def vectorize_inner():
    A = te.placeholder((6, 16), name="A")
    B = te.compute((6, 16), lambda i, j: te.max(A[i, j] * 3.0 - 1.0, 0.5), name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=8)
    s[B].vectorize(ji)
    return s, [A, B]


@case(2, lambda a, b: a + b)
def vectorize_nondividing():
    A = te.placeholder((5, 10), "int32", name="A")
    B = te.placeholder((5, 10), "int32", name="B")
    C = te.compute((5, 10), lambda i, j: A[i, j] + B[i, j], name="C")
    s = te.create_schedule(C.op)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].vectorize(ji)
    return s, [A, B, C]


@case(2, _mm_ref)
def unroll_parallel_pragma():
    A, B, C = _matmul(8, 6, 5, "int32")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].parallel(io)
    s[C].unroll(ii)
    s[C].pragma(io, "parallel_launch_point")
    s[C].unroll(C.op.reduce_axis[0])
    return s, [A, B, C]


def _conv_ref(data: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, ci, h, wd = data.shape
    co, _, kh, kw = w.shape
    pad = np.zeros((n, ci, h + 2, wd + 2), data.dtype)
    pad[:, :, 1:-1, 1:-1] = data
    out = np.zeros((n, co, h, wd), np.int64)
    for y in range(kh):
        for x in range(kw):
            out += np.einsum("nchw,oc->nohw", pad[:, :, y:y + h, x:x + wd].astype(np.int64), w[:, :, y, x].astype(np.int64))
    return out.astype(np.int32)


@case(2, _conv_ref)
def conv2d_padded_tiled():
    N, CI, H, W, CO = 1, 3, 7, 6, 4
    data = te.placeholder((N, CI, H, W), "int8", name="data")
    wgt = te.placeholder((CO, CI, 3, 3), "int8", name="wgt")
    pad = te.compute((N, CI, H + 2, W + 2), lambda n, c, y, x: te.if_then_else(
        te.all(y >= 1, y < H + 1, x >= 1, x < W + 1), data[n, c, y - 1, x - 1], ir.const(0, "int8")), name="pad")
    rc, ry, rx = te.reduce_axis((0, CI), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    out = te.compute((N, CO, H, W), lambda n, o, y, x: te.sum(
        pad[n, rc, y + ry, x + rx].astype("int32") * wgt[o, rc, ry, rx].astype("int32"), axis=[rc, ry, rx]),
        name="out")
    s = te.create_schedule(out.op)
    yo, yi = s[out].split(out.op.axis[2], factor=3)
    s[out].reorder(out.op.axis[0], yo, out.op.axis[1], yi, out.op.axis[3])
    s[pad].compute_at(s[out], yo)
    return s, [data, wgt, out]


@case(1, lambda a: (a.max(axis=1), a.min(axis=1), np.prod(a, axis=1, dtype=np.int32)))
def reducers_max_min_custom():
    A = te.placeholder((6, 5), "int32", name="A")
    k1, k2, k3 = (te.reduce_axis((0, 5), n) for n in ("k1", "k2", "k3"))
    prod = te.comm_reducer(lambda x, y: x * y, lambda t: ir.const(1, t), name="prod")
    Mx = te.compute((6,), lambda i: te.max(A[i, k1], axis=k1), name="Mx")
    Mn = te.compute((6,), lambda i: te.min(A[i, k2], axis=k2), name="Mn")
    Pr = te.compute((6,), lambda i: prod(A[i, k3], axis=k3), name="Pr")
    s = te.create_schedule([Mx.op, Mn.op, Pr.op])
    return s, [A, Mx, Mn, Pr]


def _math_ref(a: np.ndarray) -> np.ndarray:
    f = np.float32
    return (np.exp(a) + np.log(a + f(1)) * np.tanh(a) - f(1) / (f(1) + np.exp(-a)) + np.abs(a - f(0.5))
            + np.floor(a * f(3))).astype(np.float32)


@case(1, _math_ref, rtol=1e-5)
def math_intrinsics():
    A = te.placeholder((4, 9), name="A")
    B = te.compute((4, 9), lambda i, j: te.exp(A[i, j]) + te.log(A[i, j] + 1.0) * te.tanh(A[i, j])
                   - te.sigmoid(A[i, j]) + te.abs(A[i, j] - 0.5) + te.floor(A[i, j] * 3.0), name="B")
    return te.create_schedule(B.op), [A, B]


@case(2, lambda a, b: ((a.astype(np.int32) @ b.astype(np.int32)) >> 2).astype(np.int8))
def int8_gemm_shift_cast():
    A = te.placeholder((4, 8), "int8", name="A")
    B = te.placeholder((8, 5), "int8", name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((4, 5), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"), axis=k), name="C")
    D = te.compute((4, 5), lambda i, j: (C[i, j] >> 2).astype("int8"), name="D")
    return te.create_schedule(D.op), [A, B, D]


@case(1, lambda a: (a.astype(np.int64) * 3).sum(axis=1).astype(np.int32))
def rfactor_inner_parallel():
    A = te.placeholder((5, 23), "int32", name="A")
    k = te.reduce_axis((0, 23), name="k")
    B = te.compute((5,), lambda i: te.sum(A[i, k] * 3, axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ki)
    s[BF].parallel(BF.op.axis[0])
    return s, [A, B]


@case(1, lambda a: a.max(axis=(1, 2)))
def rfactor_outer_two_axes():
    A = te.placeholder((3, 6, 10), "int32", name="A")
    r, c = te.reduce_axis((0, 6), name="r"), te.reduce_axis((0, 10), name="c")
    B = te.compute((3,), lambda i: te.max(A[i, r, c], axis=[r, c]), name="B")
    s = te.create_schedule(B.op)
    f = s[B].fuse(r, c)
    fo, fi = s[B].split(f, nparts=4)
    BF = s.rfactor(B, fo, factor_axis=1)
    return s, [A, B]


# ---------------------------------------------------------------------------- tensorize
def toy_gemm_intrin(m: int, n: int, l: int, mode: str, dtype: str = "int32") -> te.TensorIntrin:
    """A toy GEMM intrinsic c[m, n] (+)= a[m, l] @ b[l, n] whose statements are plain loop IR
    (so every backend runs it). ``mode``: "body" (one body with init), "reset_update",
    "body_update" (no reset: body initialises, update accumulates)."""
    a = te.placeholder((m, l), dtype, name="a")
    b = te.placeholder((l, n), dtype, name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    bufs = {t: te.decl_buffer(t.shape, dtype, f"{t.name}_buf", offset_factor=1, strides=[te.var(f"{t.name}_s"), 1])
            for t in (a, b, c)}

    def fcompute(ins: list[ir.Buffer], outs: list[ir.Buffer]) -> Any:
        aa, bb = ins
        cc = outs[0]
        i, j, kk = ir.Var("ti"), ir.Var("tj"), ir.Var("tk")

        def loops(body: ir.Stmt) -> ir.Stmt:
            return ir.For(i, ir.const(0), ir.const(m), ir.ForKind.SERIAL,
                          ir.For(j, ir.const(0), ir.const(n), ir.ForKind.SERIAL, body))

        acc = ir.For(kk, ir.const(0), ir.const(l), ir.ForKind.SERIAL,
                     cc.vstore((i, j), cc.vload((i, j)) + aa.vload((i, kk)) * bb.vload((kk, j))))
        reset = loops(cc.vstore((i, j), ir.const(0, dtype)))
        update = loops(acc)
        body = ir.seq(reset, update)
        if mode == "body":
            return body
        if mode == "reset_update":
            return None, reset, update
        if mode == "body_update":
            return body, None, update
        raise ValueError(mode)

    return te.decl_tensor_intrin(c.op, fcompute, name=f"toy_gemm_{mode}", binds=bufs)


def _tensorized(mode: str) -> tuple[Schedule, list[Tensor]]:
    A, B, C = _matmul(8, 12, 16, "int32")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    if mode == "body":
        s[C].tensorize(ii, toy_gemm_intrin(4, 4, 16, mode))
    else:
        ko, ki = s[C].split(C.op.reduce_axis[0], factor=8)
        s[C].reorder(io, jo, ko, ii, ji, ki)
        s[C].tensorize(ii, toy_gemm_intrin(4, 4, 8, mode))
    return s, [A, B, C]


@case(2, _mm_ref)
def tensorize_body_only():
    return _tensorized("body")


@case(2, _mm_ref)
def tensorize_reset_update():
    return _tensorized("reset_update")


@case(2, _mm_ref)
def tensorize_body_update():
    return _tensorized("body_update")


def _toy_gemm_call(pa: Any, pb: Any, pc: Any, sa: int, sb: int, sc: int, m: int, n: int, l: int, reset: int) -> int:
    """Interpreter callback of the call-style toy intrinsic (pointers are element windows)."""
    a = np.lib.stride_tricks.as_strided(pa.array[pa.offset:], (m, l), (sa * pa.array.itemsize, pa.array.itemsize))
    b = np.lib.stride_tricks.as_strided(pb.array[pb.offset:], (l, n), (sb * pb.array.itemsize, pb.array.itemsize))
    c = np.lib.stride_tricks.as_strided(pc.array[pc.offset:], (m, n), (sc * pc.array.itemsize, pc.array.itemsize))
    prod = (a.astype(np.int64) @ b.astype(np.int64))
    c[...] = (prod if reset else c + prod).astype(c.dtype)
    return 0


TOY_INTRINSICS = {"toy_gemm": _toy_gemm_call}


def _call_intrin(m: int, n: int, l: int) -> te.TensorIntrin:
    a = te.placeholder((m, l), "int32", name="a")
    b = te.placeholder((l, n), "int32", name="b")
    k = te.reduce_axis((0, l), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    bufs = {t: te.decl_buffer(t.shape, "int32", f"{t.name}_buf", offset_factor=1,
                              strides=[te.var(f"{t.name}_s"), 1], scope="local.acc" if t is c else "")
            for t in (a, b, c)}

    def fcompute(ins: list[ir.Buffer], outs: list[ir.Buffer]) -> Any:
        aa, bb = ins
        cc = outs[0]

        def call(reset: int) -> ir.PrimExpr:
            return te.call_intrin("int32", "toy_gemm", aa.access_ptr("r"), bb.access_ptr("r"), cc.access_ptr("rw"),
                                  aa.strides[0], bb.strides[0], cc.strides[0], m, n, l, reset)

        return call(1), None, call(0)

    return te.decl_tensor_intrin(c.op, fcompute, name="toy_gemm_call", binds=bufs)


@case(2, _mm_ref, intrinsics=TOY_INTRINSICS, portable=False)
def tensorize_call_scoped_accumulator():
    """The VTA shape: a call intrinsic, the accumulator in a tagged scope via cache_write."""
    from vtakit.compiler.scope import MemoryInfo, register_memory_scope  # noqa: PLC0415

    register_memory_scope("local.acc", MemoryInfo(32, 32 * 1024), override=True)
    A, B, C = _matmul(8, 8, 12, "int32")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local.acc")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[CL].compute_at(s[C], jo)
    ko, ki = s[CL].split(CL.op.reduce_axis[0], factor=4)
    s[CL].reorder(ko, *CL.op.axis, ki)
    s[CL].tensorize(CL.op.axis[0], _call_intrin(4, 4, 4))
    return s, [A, B, C]
