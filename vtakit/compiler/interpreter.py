"""Reference interpreter: executes any loop-IR function on numpy arrays.

It is the executable meaning of the IR, so every pass and backend can be checked against it.
Integer arithmetic is bit-exact for the dtype (two's-complement wrap-around), ``Div``/``Mod``
truncate, ``FloorDiv``/``FloorMod`` floor; floats compute in their own width (float32 stays
float32); vectors (``Ramp``/``Broadcast``, vector loads and stores) are numpy arrays. Fresh
allocations are filled with a poison pattern (NaN for floats), so reads of uninitialised memory
show up in results. Out-of-range accesses raise :class:`~vtakit.errors.MemoryAccessError`.

It runs every intrinsic of :mod:`vtakit.compiler.intrinsics` (float math in the operands' width, or
in float64 and rounded where numpy has no kernel for the width; ``fma`` rounded once). Target
intrinsics are supplied as ``intrinsics={"op": fn}``; ``fn`` receives the evaluated
arguments (ints, floats, numpy arrays, strings, and :class:`Pointer` for ``tvm_access_ptr``).
Thread-binding loops run serially (one iteration per thread). A loop re-binding a thread variable
that is already bound (a stage attached inside the thread loop that splits its work across the
same threads, e.g. a cooperative fetch into shared memory) runs for every thread value: the
current thread does the whole work of its peers, so what they would have written before the
barrier is there when the current thread reads it. The results equal the GPU's for race-free
kernels; timing and barriers themselves are not modelled.

Cross-thread reductions (:class:`~vtakit.compiler.ir.AllReduce`) are the exception: there the
threads of the loop bound to the reduction's thread index run as cooperative threads, each with
its own variables and private allocations (Python generators stepped in lockstep). Each thread runs
until it arrives at an all-reduce; when every thread of the group has arrived at the same one, the
contributions are combined (in thread-index order) and every thread continues with the result.
A thread that finishes or arrives at a different all-reduce while others wait is an error (a
divergent barrier, which deadlocks or is undefined on a GPU).

Works on IR before and after storage flattening: an access with one index per dimension uses the
buffer's strides and ``elem_offset``; a single index into a multi-dimensional buffer is a flat
element offset.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from vtakit.compiler import ir
from vtakit.errors import CompileError, MemoryAccessError

__all__ = ["Pointer", "Interpreter", "bind_arrays", "poison", "run"]

Env = dict
_UNBOUND = object()
ExprFn = Callable[[Env], Any]
StmtFn = Callable[[Env], None]


@dataclass
class Pointer:
    """The value of ``tvm_access_ptr``: a window of a buffer's storage, in elements."""

    array: np.ndarray
    data: ir.Var
    offset: int
    extent: int
    mask: int

    def view(self) -> np.ndarray:
        return self.array[self.offset:self.offset + self.extent]


def _np_dtype(dtype: str) -> np.dtype:
    base = ir.element_of(dtype)
    return np.dtype(np.bool_) if base == "bool" else np.dtype(base)


_BITWISE: dict[str, Callable[..., Any]] = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.invert,
}


def _wrapper(dtype: str) -> Callable[[int], int]:
    base = ir.element_of(dtype)
    if base == "bool":
        return lambda x: int(bool(x))
    bits = int(base.lstrip("uint"))
    mask = (1 << bits) - 1
    lo = -(1 << (bits - 1)) if base.startswith("int") else 0
    hi = lo + mask

    def wrap(x: int) -> int:
        return x if lo <= x <= hi else ((x - lo) & mask) + lo

    return wrap


def poison(dtype: str, size: int) -> np.ndarray:
    """Fresh storage of ``size`` elements filled with the poison pattern (NaN for floats)."""
    npd = _np_dtype(dtype)
    if npd.kind == "f":
        return np.full(size, np.nan, dtype=npd)
    if npd.kind == "b":
        return np.ones(size, dtype=npd)
    return np.full(size, 0x5A5A5A5A5A5A5A5A, dtype=np.uint64).astype(npd)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _exact_fma(a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` rounded once, as C's ``fma``: exact rational arithmetic, then one rounding."""
    def one(x: float, y: float, z: float) -> float:
        x, y, z = float(x), float(y), float(z)
        if not all(map(math.isfinite, (x, y, z))):
            return x * y + z
        return float(Fraction(x) * Fraction(y) + Fraction(z))

    return np.vectorize(one, otypes=[np.float64])(a, b, c)


def _float64(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` evaluated in float64 (numpy has no float32 kernel for it); the caller rounds."""
    return lambda *xs: fn(*(np.asarray(x, dtype=np.float64) for x in xs))


# Every float intrinsic of vtakit.compiler.intrinsics.FLOAT_MATH but isnan, computed in the
# operands' width where numpy has a kernel for it, else in float64 and rounded.
_FLOAT_MATH: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "exp2": np.exp2, "exp10": _float64(lambda x: np.power(10.0, x)), "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint,
    "nearbyint": np.rint, "pow": np.power, "copysign": np.copysign, "atan2": np.arctan2, "fmod": np.fmod,
    "fma": _exact_fma,
}


def _popcount(dtype: str) -> Callable[[Any], Any]:
    mask = (1 << int(ir.element_of(dtype).lstrip("uint"))) - 1
    return np.vectorize(lambda v: bin(int(v) & mask).count("1"), otypes=[np.int64])


class Interpreter:
    """Compiles a :class:`~vtakit.compiler.ir.PrimFunc` into Python closures and runs it."""

    def __init__(self, func: ir.PrimFunc, intrinsics: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self.func = func
        self.intrinsics = dict(intrinsics or {})
        self._body = self.stmt(func.body)

    def __call__(self, *arrays: np.ndarray) -> None:
        env = bind_arrays(self.func.name, self.func.params, arrays)
        with np.errstate(all="ignore"):
            self._body(env)

    # ------------------------------------------------------------------ hooks for subclasses
    def suspends(self, s: ir.Stmt) -> bool:
        """Whether a cooperative thread running ``s`` may stop in it to wait for its peers."""
        return ir.contains(s, ir.AllReduce)

    def allocation(self, buf: ir.Buffer, size: int) -> np.ndarray:
        """The storage an ``Allocate`` of ``buf`` (``size`` elements) binds: fresh and poisoned."""
        return poison(buf.dtype, size)

    def access_hook(self, buf: ir.Buffer, write: bool) -> Callable[[Any, Any], None] | None:
        """A function called with the flat index (an int or an index array) of every in-bounds
        load (``write`` false) or store of ``buf`` and, for a store, the value stored (None for a
        load); or None to call nothing."""
        return None

    # ------------------------------------------------------------------ expressions
    def expr(self, e: ir.PrimExpr) -> ExprFn:
        method = getattr(self, f"_e_{type(e).__name__}", None)
        if method is None:
            if isinstance(e, (ir.ProducerLoad, ir.Reduce)):
                raise CompileError(f"cannot interpret {type(e).__name__} {e}: lower the schedule first")
            raise CompileError(f"the interpreter does not support {type(e).__name__} ({e})")
        return method(e)

    def _e_IntImm(self, e: ir.IntImm) -> ExprFn:
        v = e.value
        return lambda env: v

    def _e_FloatImm(self, e: ir.FloatImm) -> ExprFn:
        v = _np_dtype(e.dtype).type(e.value)
        return lambda env: v

    def _e_Var(self, e: ir.Var) -> ExprFn:
        def load(env: Env) -> Any:
            try:
                return env[e]
            except KeyError:
                raise CompileError(f"variable {e.name} is used outside its scope") from None

        return load

    def _binary(self, e: ir.BinaryOp, scalar_int: Callable, other: Callable) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        if ir.is_int(e.dtype) and ir.lanes_of(e.dtype) == 1:
            # the wrap-around of _wrapper, inlined: scalar index arithmetic is most of the work
            bits = int(ir.element_of(e.dtype).lstrip("uint"))
            mask = (1 << bits) - 1
            lo = -(1 << (bits - 1)) if e.dtype.startswith("int") else 0
            hi = lo + mask
            if isinstance(e.b, ir.IntImm):
                c = e.b.value

                def by_const(env: Env) -> int:
                    x = scalar_int(fa(env), c)
                    return x if lo <= x <= hi else ((x - lo) & mask) + lo

                return by_const

            def scalar(env: Env) -> int:
                x = scalar_int(fa(env), fb(env))
                return x if lo <= x <= hi else ((x - lo) & mask) + lo

            return scalar
        return lambda env: other(fa(env), fb(env))

    def _e_Add(self, e: ir.Add) -> ExprFn:
        return self._binary(e, operator.add, operator.add)

    def _e_Sub(self, e: ir.Sub) -> ExprFn:
        return self._binary(e, operator.sub, operator.sub)

    def _e_Mul(self, e: ir.Mul) -> ExprFn:
        return self._binary(e, operator.mul, operator.mul)

    def _check_zero(self, e: ir.PrimExpr, b: Any) -> None:
        if (b == 0) if isinstance(b, int) else np.any(b == 0):
            raise CompileError(f"integer division by zero in {e}")

    def _e_Div(self, e: ir.Div) -> ExprFn:
        if ir.is_float(e.dtype):
            return self._binary(e, None, lambda a, b: a / b)  # type: ignore[arg-type]

        def scalar(a: int, b: int) -> int:
            self._check_zero(e, b)
            return _trunc_div(a, b)

        def vector(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            self._check_zero(e, b)
            q = np.abs(a) // np.abs(b)
            return np.where((a >= 0) == (b > 0), q, -q).astype(a.dtype)

        return self._binary(e, scalar, vector)

    def _e_Mod(self, e: ir.Mod) -> ExprFn:
        if ir.is_float(e.dtype):
            return self._binary(e, None, lambda a, b: np.fmod(a, b))  # type: ignore[arg-type]

        def scalar(a: int, b: int) -> int:
            self._check_zero(e, b)
            return a - b * _trunc_div(a, b)

        def vector(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            self._check_zero(e, b)
            return np.fmod(a, b)

        return self._binary(e, scalar, vector)

    def _e_FloorDiv(self, e: ir.FloorDiv) -> ExprFn:
        if ir.is_float(e.dtype):
            return self._binary(e, None, lambda a, b: np.floor(a / b))  # type: ignore[arg-type]

        def op(a: Any, b: Any) -> Any:
            self._check_zero(e, b)
            return a // b

        return self._binary(e, op, op)

    def _e_FloorMod(self, e: ir.FloorMod) -> ExprFn:
        if ir.is_float(e.dtype):
            return self._binary(e, None, lambda a, b: a - np.floor(a / b) * b)  # type: ignore[arg-type]

        def op(a: Any, b: Any) -> Any:
            self._check_zero(e, b)
            return a % b

        return self._binary(e, op, op)

    def _e_Min(self, e: ir.Min) -> ExprFn:
        return self._binary(e, min, np.minimum)

    def _e_Max(self, e: ir.Max) -> ExprFn:
        return self._binary(e, max, np.maximum)

    def _compare(self, e: ir.BinaryOp, op: Callable[[Any, Any], Any]) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        return lambda env: op(fa(env), fb(env))

    def _e_EQ(self, e: ir.EQ) -> ExprFn:
        return self._compare(e, lambda a, b: a == b)

    def _e_NE(self, e: ir.NE) -> ExprFn:
        return self._compare(e, lambda a, b: a != b)

    def _e_LT(self, e: ir.LT) -> ExprFn:
        return self._compare(e, lambda a, b: a < b)

    def _e_LE(self, e: ir.LE) -> ExprFn:
        return self._compare(e, lambda a, b: a <= b)

    def _e_GT(self, e: ir.GT) -> ExprFn:
        return self._compare(e, lambda a, b: a > b)

    def _e_GE(self, e: ir.GE) -> ExprFn:
        return self._compare(e, lambda a, b: a >= b)

    def _e_And(self, e: ir.And) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        if ir.lanes_of(e.dtype) > 1:
            return lambda env: np.logical_and(fa(env), fb(env))
        return lambda env: bool(fa(env)) and bool(fb(env))

    def _e_Or(self, e: ir.Or) -> ExprFn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        if ir.lanes_of(e.dtype) > 1:
            return lambda env: np.logical_or(fa(env), fb(env))
        return lambda env: bool(fa(env)) or bool(fb(env))

    def _e_Not(self, e: ir.Not) -> ExprFn:
        fa = self.expr(e.a)
        if ir.lanes_of(e.dtype) > 1:
            return lambda env: np.logical_not(fa(env))
        return lambda env: not fa(env)

    def _e_Select(self, e: ir.Select) -> ExprFn:
        fc, ft, ff = self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)
        if ir.lanes_of(e.dtype) > 1:
            return lambda env: np.where(fc(env), ft(env), ff(env)).astype(_np_dtype(e.dtype))
        return lambda env: ft(env) if fc(env) else ff(env)

    def _e_Cast(self, e: ir.Cast) -> ExprFn:
        fv = self.expr(e.value)
        npd = _np_dtype(e.dtype)
        if ir.lanes_of(e.dtype) > 1:
            return lambda env: fv(env).astype(npd)
        if ir.element_of(e.dtype) == "bool":
            return lambda env: bool(fv(env))
        if ir.is_int(e.dtype):
            wrap = _wrapper(e.dtype)

            def to_int(env: Env) -> int:
                v = fv(env)
                if isinstance(v, (float, np.floating)):
                    if not math.isfinite(v):
                        raise CompileError(f"cast of non-finite {v} to {e.dtype} in {e}")
                    v = math.trunc(float(v))
                return wrap(int(v))

            return to_int
        t = npd.type
        return lambda env: t(fv(env))

    def _e_Let(self, e: ir.Let) -> ExprFn:
        fv, fb = self.expr(e.value), self.expr(e.body)

        def let(env: Env) -> Any:
            env[e.var] = fv(env)
            try:
                return fb(env)
            finally:
                del env[e.var]

        return let

    def _e_Ramp(self, e: ir.Ramp) -> ExprFn:
        fb, fs = self.expr(e.base), self.expr(e.stride)
        npd, lanes = _np_dtype(e.dtype), e.lanes
        return lambda env: (fb(env) + fs(env) * np.arange(lanes, dtype=np.int64)).astype(npd)

    def _e_Broadcast(self, e: ir.Broadcast) -> ExprFn:
        fv = self.expr(e.value)
        npd, lanes = _np_dtype(e.dtype), e.lanes
        return lambda env: np.full(lanes, fv(env), dtype=npd)

    def _flat_index(self, buf: ir.Buffer, indices: tuple[ir.PrimExpr, ...]) -> ExprFn:
        fns = [self.expr(i) for i in indices]
        if len(indices) == 1 and (buf.ndim != 1 or not buf.strides and isinstance(buf.elem_offset, ir.IntImm)
                                  and buf.elem_offset.value == 0):
            return fns[0]
        if len(indices) != buf.ndim:
            raise CompileError(f"access to {buf.name} with {len(indices)} indices; it has {buf.ndim} dimensions")
        from vtakit.compiler.lower.flatten import buffer_strides  # noqa: PLC0415

        strides = [self.expr(s) for s in buffer_strides(buf)]
        off = self.expr(buf.elem_offset)
        return lambda env: off(env) + sum(f(env) * s(env) for f, s in zip(fns, strides))

    def _storage(self, buf: ir.Buffer) -> Callable[[Env], np.ndarray]:
        data = buf.data

        def get(env: Env) -> np.ndarray:
            try:
                return env[data]
            except KeyError:
                raise CompileError(f"buffer {buf.name} is accessed outside its allocation") from None

        return get

    def _e_BufferLoad(self, e: ir.BufferLoad) -> ExprFn:
        index, storage = self._flat_index(e.buffer, e.indices), self._storage(e.buffer)
        name = e.buffer.name
        as_int = ir.is_int(e.dtype) and ir.lanes_of(e.dtype) == 1
        track = self.access_hook(e.buffer, False)

        def load(env: Env) -> Any:
            arr, i = storage(env), index(env)
            if isinstance(i, np.ndarray):
                if i.size and (i.min() < 0 or i.max() >= arr.size):
                    raise MemoryAccessError(f"out-of-bounds read of {name}{i.tolist()} (size {arr.size})")
                if track is not None:
                    track(i, None)
                return arr[i]
            if not 0 <= i < arr.size:
                raise MemoryAccessError(f"out-of-bounds read of {name}[{i}] (size {arr.size})")
            if track is not None:
                track(i, None)
            v = arr[i]
            return int(v) if as_int else v

        return load

    def _e_Call(self, e: ir.Call) -> ExprFn:
        op = e.op
        if op == "if_then_else":
            fc, ft, ff = (self.expr(a) for a in e.args)
            if ir.lanes_of(e.dtype) > 1:
                return lambda env: np.where(fc(env), ft(env), ff(env))
            return lambda env: ft(env) if fc(env) else ff(env)
        if op == "likely":
            return self.expr(e.args[0])
        if op == "tvm_access_ptr":
            return self._access_ptr(e)
        args = [self.expr(a) if isinstance(a, ir.PrimExpr) else (lambda env, a=a: a) for a in e.args]
        if op in self.intrinsics:
            fn = self.intrinsics[op]
            return lambda env: fn(*[a(env) for a in args])
        npd = _np_dtype(e.dtype)
        scalar = ir.lanes_of(e.dtype) == 1
        if op in ("shift_left", "shift_right"):
            fa, fb = args
            if not scalar:
                return (lambda env: np.left_shift(fa(env), fb(env))) if op == "shift_left" else \
                    (lambda env: np.right_shift(fa(env), fb(env)))
            wrap = _wrapper(e.dtype)
            return (lambda env: wrap(fa(env) << fb(env))) if op == "shift_left" else \
                (lambda env: wrap(fa(env) >> fb(env)))
        if op in _BITWISE or op == "popcount":
            fn = _BITWISE[op] if op in _BITWISE else _popcount(e.args[0].dtype)
            if not scalar:
                return lambda env: np.asarray(fn(*[a(env) for a in args])).astype(npd)
            wrap = _wrapper(e.dtype)
            return lambda env: wrap(int(fn(*[a(env) for a in args])))
        if op == "abs" and ir.is_int(e.dtype) and scalar:
            wrap = _wrapper(e.dtype)
            return lambda env: wrap(abs(args[0](env)))
        if op == "isnan":
            return lambda env: bool(np.isnan(args[0](env))) if scalar else np.isnan(args[0](env))
        if op in _FLOAT_MATH or op == "abs":
            f = _FLOAT_MATH.get(op, np.abs)
            return lambda env: npd.type(f(*[a(env) for a in args])) if scalar else \
                np.asarray(f(*[a(env) for a in args])).astype(npd)
        raise CompileError(f"no implementation for intrinsic {op!r}; pass it to the interpreter as "
                           f"intrinsics={{{op!r}: fn}}")

    def _access_ptr(self, e: ir.Call) -> ExprFn:
        _, data, offset, extent, mask = e.args
        storage = self._e_Var(data)
        fo, fe, fm = self.expr(offset), self.expr(extent), self.expr(mask)

        def ptr(env: Env) -> Pointer:
            arr = storage(env)
            off, ext = fo(env), fe(env)
            if off < 0 or off + ext > arr.size:
                raise MemoryAccessError(f"access pointer to {data.name}[{off}:{off + ext}] is out of range "
                                        f"(size {arr.size})")
            return Pointer(arr, data, off, ext, fm(env))

        return ptr

    # ------------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt) -> StmtFn:
        method = getattr(self, f"_s_{type(s).__name__}", None)
        if method is None:
            raise CompileError(f"the interpreter does not support {type(s).__name__}")
        return method(s)

    def _s_SeqStmt(self, s: ir.SeqStmt) -> StmtFn:
        fns = [self.stmt(c) for c in s.stmts]

        def run_all(env: Env) -> None:
            for f in fns:
                f(env)

        return run_all

    def _s_For(self, s: ir.For) -> StmtFn:
        if s.kind is ir.ForKind.THREAD_BINDING and _reduces_over(s.body, s.loop_var):
            return self._thread_group(s)
        fmin, fext, body, var = self.expr(s.min), self.expr(s.extent), self.stmt(s.body), s.loop_var

        def loop(env: Env) -> None:
            saved = env.get(var, _UNBOUND)
            lo = fmin(env)
            for i in range(lo, lo + fext(env)):
                env[var] = i
                body(env)
            if saved is _UNBOUND:
                env.pop(var, None)
            else:
                env[var] = saved

        return loop

    def _s_Allocate(self, s: ir.Allocate) -> StmtFn:
        buf, body = s.buffer, self.stmt(s.body)
        sizes = [self.expr(x) for x in buf.shape]

        def alloc(env: Env) -> None:
            size = 1
            for f in sizes:
                size *= f(env)
            saved = env.get(buf.data)
            env[buf.data] = self.allocation(buf, size)
            body(env)
            if saved is None:
                del env[buf.data]
            else:
                env[buf.data] = saved

        return alloc

    def _s_BufferStore(self, s: ir.BufferStore) -> StmtFn:
        index, storage, value = self._flat_index(s.buffer, s.indices), self._storage(s.buffer), self.expr(s.value)
        name = s.buffer.name
        track = self.access_hook(s.buffer, True)

        def store(env: Env) -> None:
            arr, i, v = storage(env), index(env), value(env)
            if isinstance(i, np.ndarray):
                if i.size and (i.min() < 0 or i.max() >= arr.size):
                    raise MemoryAccessError(f"out-of-bounds write of {name}{i.tolist()} (size {arr.size})")
            elif not 0 <= i < arr.size:
                raise MemoryAccessError(f"out-of-bounds write of {name}[{i}] (size {arr.size})")
            if track is not None:
                track(i, v)
            arr[i] = v

        return store

    def _s_IfThenElse(self, s: ir.IfThenElse) -> StmtFn:
        cond, then = self.expr(s.cond), self.stmt(s.then_case)
        other = self.stmt(s.else_case) if s.else_case is not None else None

        def branch(env: Env) -> None:
            if cond(env):
                then(env)
            elif other is not None:
                other(env)

        return branch

    def _s_AttrStmt(self, s: ir.AttrStmt) -> StmtFn:
        return self.stmt(s.body)

    def _s_Evaluate(self, s: ir.Evaluate) -> StmtFn:
        f = self.expr(s.value)

        def evaluate(env: Env) -> None:
            f(env)

        return evaluate

    def _s_LetStmt(self, s: ir.LetStmt) -> StmtFn:
        fv, body, var = self.expr(s.value), self.stmt(s.body), s.var

        def let(env: Env) -> None:
            env[var] = fv(env)
            body(env)
            del env[var]

        return let


    # ------------------------------------------------------------------ cross-thread reductions
    def _s_AllReduce(self, s: ir.AllReduce) -> StmtFn:
        over = s.thread.name if isinstance(s.thread, ir.Var) else f"{s.thread} (not a thread variable)"
        raise CompileError(f"all-reduce over {over} ({s.thread_tag}) outside a loop bound to it; "
                           "it must run inside the thread loop of the threads it combines")

    def _thread_group(self, s: ir.For) -> StmtFn:
        """The loop bound to an all-reduce's thread index: its iterations run as cooperative threads."""
        fmin, fext, body, var = self.expr(s.min), self.expr(s.extent), self.gstmt(s.body), s.loop_var

        def launch(env: Env) -> None:
            lo = fmin(env)
            threads = []
            for i in range(lo, lo + fext(env)):
                tenv = dict(env)  # private variables and allocations; outer storage is shared
                tenv[var] = i
                threads.append(body(tenv))
            arrivals = [next(g, None) for g in threads]
            while True:
                if all(a is None for a in arrivals):
                    return
                first = next(a for a in arrivals if a is not None)
                for k, a in enumerate(arrivals):
                    if a is None or a.node is not first.node:
                        where = "finished" if a is None else "arrived at another all-reduce"
                        raise CompileError(f"divergent all-reduce over {var.name} ({s.thread_tag}): thread "
                                           f"{var.name}={lo + k} {where} while others wait at the all-reduce into "
                                           f"{first.node.buffer.name}; every "
                                           "thread of the group must reach the same all-reduce")
                total = first.combine([a.value for a in arrivals])
                arrivals = [_send(g, total) for g in threads]

        return launch

    def gstmt(self, s: ir.Stmt) -> GenFn:
        """``s`` as a generator function for one thread of a group: it yields at every all-reduce
        (an :class:`_Arrival`) and is sent the combined value."""
        if not self.suspends(s):
            f = self.stmt(s)

            def plain(env: Env) -> Iterator[_Arrival]:
                f(env)
                yield from ()

            return plain
        method = getattr(self, f"_g_{type(s).__name__}", None)
        if method is None:
            raise CompileError(f"the interpreter cannot run {type(s).__name__} around an all-reduce")
        return method(s)

    def _g_SeqStmt(self, s: ir.SeqStmt) -> GenFn:
        fns = [self.gstmt(c) for c in s.stmts]

        def run_all(env: Env) -> Iterator[_Arrival]:
            for f in fns:
                yield from f(env)

        return run_all

    def _g_For(self, s: ir.For) -> GenFn:
        if s.kind is ir.ForKind.THREAD_BINDING and _reduces_over(s.body, s.loop_var):
            # a group inside a thread of another group: it runs to completion within that thread,
            # so it may not hold an all-reduce of the enclosing group
            others = {n.thread.name for n in _all_reduces(s.body) if n.thread is not s.loop_var
                      and not _bound_inside(s.body, n.thread)}
            if others:
                raise CompileError(f"an all-reduce over {', '.join(sorted(others))} inside the {s.thread_tag} loop "
                                   f"{s.loop_var.name}, which reduces over its own threads; nest the all-reduces "
                                   "of different thread indices in separate loops")
            launch = self._thread_group(s)

            def nested(env: Env) -> Iterator[_Arrival]:
                launch(env)
                yield from ()

            return nested
        fmin, fext, body, var = self.expr(s.min), self.expr(s.extent), self.gstmt(s.body), s.loop_var

        def loop(env: Env) -> Iterator[_Arrival]:
            saved = env.get(var, _UNBOUND)
            lo = fmin(env)
            for i in range(lo, lo + fext(env)):
                env[var] = i
                yield from body(env)
            if saved is _UNBOUND:
                env.pop(var, None)
            else:
                env[var] = saved

        return loop

    def _g_Allocate(self, s: ir.Allocate) -> GenFn:
        buf, body = s.buffer, self.gstmt(s.body)
        sizes = [self.expr(x) for x in buf.shape]

        def alloc(env: Env) -> Iterator[_Arrival]:
            size = 1
            for f in sizes:
                size *= f(env)
            saved = env.get(buf.data)
            env[buf.data] = self.allocation(buf, size)
            yield from body(env)
            if saved is None:
                del env[buf.data]
            else:
                env[buf.data] = saved

        return alloc

    def _g_IfThenElse(self, s: ir.IfThenElse) -> GenFn:
        cond, then = self.expr(s.cond), self.gstmt(s.then_case)
        other = self.gstmt(s.else_case) if s.else_case is not None else None

        def branch(env: Env) -> Iterator[_Arrival]:
            if cond(env):
                yield from then(env)
            elif other is not None:
                yield from other(env)

        return branch

    def _g_AttrStmt(self, s: ir.AttrStmt) -> GenFn:
        return self.gstmt(s.body)

    def _g_LetStmt(self, s: ir.LetStmt) -> GenFn:
        fv, body, var = self.expr(s.value), self.gstmt(s.body), s.var

        def let(env: Env) -> Iterator[_Arrival]:
            env[var] = fv(env)
            yield from body(env)
            del env[var]

        return let

    def _g_AllReduce(self, s: ir.AllReduce) -> GenFn:
        cond, value = self.expr(s.condition), self.expr(s.value)
        c = s.combiner
        lhs, rhs = ir.Var("lhs", s.value.dtype), ir.Var("rhs", s.value.dtype)
        fcombine = self.expr(ir.substitute(c.result, {c.lhs: lhs, c.rhs: rhs}))
        identity = self.expr(c.identity_element)({})

        def combine(values: list[Any]) -> Any:
            acc, env = identity, {}
            for v in values:
                if v is not _UNBOUND:
                    env[lhs], env[rhs] = acc, v
                    acc = fcombine(env)
            return acc

        result = ir.Var("allreduce_result", s.value.dtype)
        store = self.stmt(ir.BufferStore(s.buffer, result, s.indices))

        def allreduce(env: Env) -> Iterator[_Arrival]:
            mine = value(env) if cond(env) else _UNBOUND  # a masked thread reads nothing
            env[result] = yield _Arrival(s, mine, combine)
            store(env)
            del env[result]

        return allreduce


@dataclass
class _Arrival:
    """A thread waiting at an all-reduce with its contribution (``_UNBOUND`` if it has none)."""

    node: ir.AllReduce
    value: Any
    combine: Callable[[list[Any]], Any]


GenFn = Callable[[Env], Iterator[_Arrival]]


def _send(gen: Iterator[_Arrival], value: Any) -> _Arrival | None:
    try:
        return gen.send(value)  # type: ignore[attr-defined]
    except StopIteration:
        return None


def _all_reduces(body: ir.Stmt) -> list[ir.AllReduce]:
    out: list[ir.AllReduce] = []
    ir.walk(body, lambda n: out.append(n) if isinstance(n, ir.AllReduce) else None)
    return out


def _bound_inside(body: ir.Stmt, var: ir.Var) -> bool:
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, ir.For) and n.loop_var is var:
            found = True

    ir.walk(body, visit)
    return found


def _reduces_over(body: ir.Stmt, thread: ir.Var) -> bool:
    found = False

    def visit(n: Any) -> None:
        nonlocal found
        if isinstance(n, ir.AllReduce) and n.thread is thread:
            found = True

    ir.walk(body, visit)
    return found


def bind_arrays(name: str, params: Sequence[ir.Buffer], arrays: Sequence[np.ndarray]) -> Env:
    """The environment of a call of ``name``: each parameter's data variable bound to its array
    (flattened, a view) and each shape variable to its extent; a mismatch raises CompileError."""
    if len(arrays) != len(params):
        raise CompileError(f"{name} takes {len(params)} arrays ({', '.join(p.name for p in params)}), "
                           f"got {len(arrays)}")
    env: Env = {}
    for k, (buf, arr) in enumerate(zip(params, arrays)):
        ok = isinstance(arr, np.ndarray) and arr.dtype == _np_dtype(buf.dtype) and arr.ndim == buf.ndim
        for extent, n in zip(buf.shape, arr.shape if ok else ()):
            if isinstance(extent, ir.Var):  # a shape variable: bound by the first array that has it
                ok = ok and env.setdefault(extent, n) == n
            else:
                ok = ok and isinstance(extent, ir.IntImm) and extent.value == n
        if not ok:
            got = f"{arr.shape} {arr.dtype}" if isinstance(arr, np.ndarray) else type(arr).__name__
            shape = tuple(env.get(e, str(e)) if isinstance(e, ir.Var) else int(e.value) for e in buf.shape)
            raise CompileError(f"argument {k} ({buf.name}): expected an array of shape {shape} and dtype "
                               f"{buf.dtype}, got {got}")
        if not arr.flags.c_contiguous:
            raise CompileError(f"argument {k} ({buf.name}) must be C-contiguous")
        env[buf.data] = arr.reshape(-1)
    return env


def run(func: ir.PrimFunc, *arrays: np.ndarray, intrinsics: Mapping[str, Callable[..., Any]] | None = None) -> None:
    """Execute ``func`` on ``arrays`` (outputs are written in place)."""
    Interpreter(func, intrinsics)(*arrays)
