"""LLVM IR from the loop IR: the CPU backend's code generator.

:func:`generate` turns a lowered :class:`~vtakit.compiler.ir.PrimFunc` into an LLVM module with
two functions: ``<symbol>_kernel`` (one ``noalias`` pointer per buffer parameter, then one
``i64`` per symbolic shape variable, then the call's status word) and the entry
``int32 <symbol>(ptr argv, ptr shapes, ptr status)`` that ctypes calls. Semantics, as in TVM's
codegen_llvm:

- integers wrap around; ``Div``/``Mod`` truncate, ``FloorDiv``/``FloorMod`` round towards minus
  infinity (also for negative operands); shifts by the bit width or more are undefined, as in C;
- float ``Min``/``Max`` are ``a < b ? a : b`` (a NaN in ``a`` yields ``b``); float multiplies and
  adds may be contracted into FMAs (one rounding instead of two, as in TVM);
- ``Select`` evaluates both sides; the ``if_then_else`` intrinsic evaluates only the taken one;
- buffer index arithmetic is done in 64 bits, so large tensors address correctly;
- ``Ramp``/``Broadcast`` are LLVM vectors; a stride-1 ramp index is one vector load or store,
  small constant strides (pooling, strided convolution) load the span once and shuffle, others
  are gathered lane by lane. A ``vectorized`` loop with a constant extent and a
  straight-line body is vectorised here by substituting a ramp for its variable; otherwise it is
  left to LLVM's loop vectoriser;
- ``unrolled`` loops with a constant extent are unrolled here;
- a ``parallel`` loop is outlined into a task function and run by the runtime's thread pool, each
  task taking one contiguous chunk of iterations (deterministic); nested parallel loops are an
  error, as in TVM;
- ``Allocate`` of a constant size up to :data:`STACK_LIMIT` bytes lives on the stack (so that
  small register tiles are promoted to registers), up to :data:`TASK_STACK_LIMIT` inside a
  parallel task (a per-thread packed panel: on the heap, glibc would mmap and munmap it per task,
  and each munmap interrupts the other pool threads to flush their TLBs), larger or dynamic ones
  on the heap;
- a *checked* extern (one that may fail, such as a Python callback) receives the call's status
  word (``int32 *``) as an extra first argument and sets it non-zero when it fails; the code
  tests the word after every such call (and after every parallel launch) and, if it is set,
  frees its heap buffers and returns at once. The entry returns the status word (0: success),
  as TVM's generated code returns -1 after a failed ``call_packed``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from llvmlite import ir as lir

from vtakit.compiler import ir
from vtakit.compiler.backend.llvm_runtime import PARALLEL_LAUNCH
from vtakit.compiler.intrinsics import INTRINSICS
from vtakit.errors import CompileError

__all__ = ["generate", "CodeGen", "GeneratedModule", "STACK_LIMIT", "TASK_STACK_LIMIT", "MATH_INTRINSICS",
           "llvm_constant", "storage_type"]

STACK_LIMIT = 64 * 1024
TASK_STACK_LIMIT = 512 * 1024  # pool threads and the caller have stacks of megabytes
MAX_UNROLL = 1024
MAX_DEINTERLEAVE_STRIDE = 4  # strided vector loads up to this stride read the span and shuffle

_I1, _I8, _I32, _I64 = lir.IntType(1), lir.IntType(8), lir.IntType(32), lir.IntType(64)
_PTR = lir.PointerType()
_VOID = lir.VoidType()
_SCALARS: dict[str, lir.Type] = {
    "bool": _I1, "int8": _I8, "int16": lir.IntType(16), "int32": _I32, "int64": _I64,
    "uint8": _I8, "uint16": lir.IntType(16), "uint32": _I32, "uint64": _I64,
    "float16": lir.HalfType(), "float32": lir.FloatType(), "float64": lir.DoubleType(),
}
# Math functions LLVM has intrinsics for (lowered to vector code or libm calls by LLVM itself).
_LLVM_MATH = {
    "exp": "exp", "exp2": "exp2", "exp10": "exp10", "log": "log", "log2": "log2", "log10": "log10",
    "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos",
    "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "fabs": "fabs", "floor": "floor",
    "ceil": "ceil", "trunc": "trunc", "round": "roundeven", "nearbyint": "nearbyint", "pow": "pow",
    "fma": "fma", "copysign": "copysign",
}
# float32 math written out as straight-line code that vectorises, ahead of _LLVM_MATH and _LIBM (which
# would call libm once per lane): name -> the CodeGen method.
_INLINED_FLOAT32 = {"erf": "_erf_float32", "tanh": "_tanh_float32"}
# Math functions called in libm, one lane at a time: name -> (float32 symbol, float64 symbol).
_LIBM = {"erf": ("erff", "erf"), "atan2": ("atan2f", "atan2"), "log1p": ("log1pf", "log1p"),
         "expm1": ("expm1f", "expm1"), "fmod": ("fmodf", "fmod")}
# float32 erf = x P(x^2) / Q(x^2) on [-4, 4] (coefficients highest power first; Eigen's fast erf)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)
# float32 tanh = x P(x^2) / Q(x^2) on [-7.9053, 7.9053] (Eigen's fast tanh)
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
# The rest of vtakit.compiler.intrinsics (sigmoid, rsqrt, isnan, abs, the integer operations,
# likely, if_then_else) are written out in CodeGen._expr_Call.
MATH_INTRINSICS = tuple(sorted(INTRINSICS))


def _contract(instr: lir.Instruction) -> lir.Instruction:
    """Allow LLVM to fuse a float multiply and add into an FMA (as TVM does; one rounding fewer)."""
    instr.flags.append("contract")
    return instr


def _signed(dtype: str) -> bool:
    return ir.element_of(dtype).startswith("int")


def _scalar_type(dtype: str) -> lir.Type:
    base = ir.element_of(dtype)
    if base == "handle":
        return _PTR
    try:
        return _SCALARS[base]
    except KeyError:
        raise CompileError(f"the CPU backend does not support dtype {dtype!r}; "
                           f"expected one of {sorted(_SCALARS)}") from None


def _type(dtype: str) -> lir.Type:
    lanes = ir.lanes_of(dtype)
    return _scalar_type(dtype) if lanes == 1 else lir.VectorType(_scalar_type(dtype), lanes)


def storage_type(dtype: str) -> lir.Type:
    """How an element sits in memory: bools take a byte, as in numpy."""
    return _I8 if ir.element_of(dtype) == "bool" else _scalar_type(dtype)


def _lanes(value: lir.Value) -> int:
    return value.type.count if isinstance(value.type, lir.VectorType) else 1


def _elem_type(value: lir.Value) -> lir.Type:
    return value.type.element if isinstance(value.type, lir.VectorType) else value.type


def llvm_constant(ty: lir.Type, value: int | float) -> lir.Constant:
    """``value`` as an LLVM constant of ``ty``, splatted over a vector type."""
    if isinstance(ty, lir.VectorType):
        return lir.Constant(ty, [value] * ty.count)
    return lir.Constant(ty, value)


def _type_suffix(ty: lir.Type) -> str:
    elem = ty.element if isinstance(ty, lir.VectorType) else ty
    name = {lir.HalfType: "f16", lir.FloatType: "f32", lir.DoubleType: "f64"}.get(type(elem))
    name = name or f"i{elem.width}"
    return f"v{ty.count}{name}" if isinstance(ty, lir.VectorType) else name


# ---------------------------------------------------------------------------- IR analyses
def _struct_lanes(e: ir.PrimExpr) -> int:
    """Vector width of ``e`` from its structure (dtypes of rebuilt nodes may lag behind)."""
    if isinstance(e, (ir.Ramp, ir.Broadcast)):
        return e.lanes
    kids = [k for k in ir.children(e) if isinstance(k, ir.PrimExpr)]
    if isinstance(e, ir.Let):
        kids = [e.body]
    return max([ir.lanes_of(e.dtype)] + [_struct_lanes(k) for k in kids])


@dataclass
class _RampForm:
    """An index ``base + stride * [0, lanes)`` with a scalar base and a constant stride."""

    base: ir.PrimExpr
    stride: int
    lanes: int


def _ramp_form(e: ir.PrimExpr) -> _RampForm | None:
    if isinstance(e, ir.Ramp) and isinstance(e.stride, ir.IntImm) and _struct_lanes(e.base) == 1:
        return _RampForm(e.base, e.stride.value, e.lanes)
    if isinstance(e, ir.Broadcast) and _struct_lanes(e.value) == 1:
        return _RampForm(e.value, 0, e.lanes)
    if _struct_lanes(e) == 1:
        return _RampForm(e, 0, 1)
    if isinstance(e, (ir.Add, ir.Sub, ir.Mul)):
        a, b = _ramp_form(e.a), _ramp_form(e.b)
        if a is None or b is None or (a.lanes != b.lanes and 1 not in (a.lanes, b.lanes)):
            return None
        lanes = max(a.lanes, b.lanes)
        if isinstance(e, ir.Add):
            return _RampForm(a.base + b.base, a.stride + b.stride, lanes)
        if isinstance(e, ir.Sub):
            return _RampForm(a.base - b.base, a.stride - b.stride, lanes)
        for x, y in ((a, b), (b, a)):
            if y.stride == 0 and isinstance(y.base, ir.IntImm):
                return _RampForm(x.base * y.base.value, x.stride * y.base.value, lanes)
    return None


def _flat_index(buffer: ir.Buffer, indices: tuple[ir.PrimExpr, ...]) -> ir.PrimExpr:
    """Row-major (or explicitly strided) element offset of ``indices`` in ``buffer``."""
    if len(indices) != buffer.ndim and not (buffer.ndim == 0 and len(indices) == 1):
        raise CompileError(f"buffer {buffer.name!r} has {buffer.ndim} dimensions, indexed with {len(indices)}")
    if buffer.strides:
        strides = list(buffer.strides)
    else:
        strides, running = [], ir.const(1, "int64")
        for extent in reversed(buffer.shape):
            strides.append(running)
            running = _mul(running, extent)
        strides.reverse()
    flat: ir.PrimExpr = buffer.elem_offset
    for index, stride in zip(indices, strides):
        flat = _add(flat, _mul(ir.convert(index), stride))  # hand-built IR may hold plain ints
    return flat


def _is_const(e: ir.PrimExpr, value: int) -> bool:
    return isinstance(e, ir.IntImm) and e.value == value


def _add(a: ir.PrimExpr, b: ir.PrimExpr) -> ir.PrimExpr:
    if _is_const(a, 0):
        return b
    return a if _is_const(b, 0) else ir.Add(a, b, a.dtype if _struct_lanes(a) >= _struct_lanes(b) else b.dtype)


def _mul(a: ir.PrimExpr, b: ir.PrimExpr) -> ir.PrimExpr:
    if _is_const(a, 1):
        return b
    if isinstance(a, ir.IntImm) and isinstance(b, ir.IntImm):
        return ir.const(a.value * b.value, "int64")
    return a if _is_const(b, 1) else ir.Mul(a, b, a.dtype if _struct_lanes(a) >= _struct_lanes(b) else b.dtype)


class _Vectorizer(ir.IRMutator):
    """Substitutes a ramp for a loop variable and re-types the tree with the new lanes."""

    def __init__(self, var: ir.Var, ramp: ir.Ramp) -> None:
        self.map: dict[ir.Var, ir.PrimExpr] = {var: ramp}

    def visit_Var(self, node: ir.Var) -> ir.PrimExpr:
        return self.map.get(node, node)

    def generic_visit(self, node):  # type: ignore[override]
        new = super().generic_visit(node)
        if new is node or not isinstance(new, ir.PrimExpr):
            return new
        if isinstance(new, ir.BinaryOp):
            return type(new).make(new.a, new.b)
        if isinstance(new, (ir.Cast, ir.Call)):
            lanes = max(_struct_lanes(a) for a in ([new.value] if isinstance(new, ir.Cast) else
                                                    [x for x in new.args if isinstance(x, ir.PrimExpr)] or [new]))
            new.dtype = ir.with_lanes(new.dtype, lanes)
        return new

    def visit_LetStmt(self, node: ir.LetStmt) -> ir.Stmt:
        value = self.visit(node.value)
        if _struct_lanes(value) > 1:
            self.map[node.var] = ir.Var(node.var.name, ir.with_lanes(node.var.dtype, _struct_lanes(value)))
        return ir.LetStmt(self.map.get(node.var, node.var), value, self.visit(node.body))


_STRAIGHT = (ir.SeqStmt, ir.BufferStore, ir.LetStmt, ir.AttrStmt, ir.Evaluate)


def _straight_line(stmt: ir.Stmt) -> bool:
    ok = True

    def visit(node):
        nonlocal ok
        if isinstance(node, ir.Stmt) and not isinstance(node, _STRAIGHT):
            ok = False
        if isinstance(node, ir.Call) and node.op == "if_then_else":
            ok = False  # must stay lazy
    ir.walk(stmt, visit)
    return ok


# ---------------------------------------------------------------------------- code generator
@dataclass
class GeneratedModule:
    llvm_ir: str
    entry: str
    shape_vars: list[ir.Var]


@dataclass
class _Frame:
    """Per-LLVM-function state: builders, the variable environment, pointers known not to alias."""

    function: lir.Function
    builder: lir.IRBuilder
    allocas: lir.IRBuilder
    env: dict[ir.Var, lir.Value] = field(default_factory=dict)
    noalias: set[ir.Var] = field(default_factory=set)
    in_parallel: bool = False
    status: lir.Value | None = None  # the call's status word (int32 *), set by failing checked externs
    heap: list[lir.Value] = field(default_factory=list)  # live heap buffers, freed on an early return


def generate(func: ir.PrimFunc, symbol: str, triple: str = "", data_layout: str = "",
             externs: dict[str, str] | None = None, checked: frozenset[str] = frozenset(),
             vector_width: int = 0) -> GeneratedModule:
    """LLVM assembly for ``func``; ``symbol`` names the entry function; ``externs`` maps intrinsic
    names to the C symbols that implement them (called with the arguments as C scalars and pointers);
    the intrinsics in ``checked`` also get the status word first and are tested after each call.
    ``vector_width`` (bits, 0: the CPU's own) caps the registers LLVM splits wide vectors into."""
    generated = CodeGen(func, symbol, triple, data_layout, externs or {}, checked).run()
    if not vector_width:
        return generated
    return GeneratedModule(_with_vector_width(generated.llvm_ir, vector_width), generated.entry, generated.shape_vars)


def _with_vector_width(llvm_ir: str, bits: int) -> str:
    """Every function defined in ``llvm_ir`` told to use ``bits``-wide vector registers: the
    vectorisers prefer that width, and (with the target's prefer-N-bit tuning feature) explicit
    wider vectors are split into registers of that width, as clang's ``-mprefer-vector-width`` does.
    llvmlite's function attributes take no string attributes, so they are added to the text."""
    attrs = f' "prefer-vector-width"="{bits}" "min-legal-vector-width"="{bits}"'
    return "\n".join(line + attrs if line.startswith("define ") else line for line in llvm_ir.splitlines()) + "\n"


class CodeGen:
    """The per-node LLVM IR generator; the NVPTX backend subclasses it and overrides its hooks."""

    def __init__(self, func: ir.PrimFunc, symbol: str, triple: str, data_layout: str,
                 externs: dict[str, str], checked: frozenset[str]) -> None:
        self.func = func
        self.externs = externs
        self.checked = checked
        self.symbol = symbol
        self.module = lir.Module(name=symbol)
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.frame: _Frame = None  # type: ignore[assignment]
        self.n_outlined = 0

    # ------------------------------------------------------------ functions
    def run(self) -> GeneratedModule:
        params = self.func.params
        shape_vars = _vars_in(tuple(e for buf in params for e in (*buf.shape, *buf.strides, buf.elem_offset)))
        for buf in params:
            storage_type(buf.dtype)  # rejects dtypes the backend has no type for
        data_vars = [b.data for b in params]
        if len(set(map(id, data_vars))) != len(data_vars):
            raise CompileError(f"function {self.func.name!r}: two parameters share one data pointer")
        kernel = lir.Function(self.module, lir.FunctionType(_VOID, [_PTR] * len(params) + [_I64] * len(shape_vars)
                                                            + [_PTR]), f"{self.symbol}_kernel")
        kernel.linkage = "internal"
        kernel.attributes.add("nounwind")
        for arg, buf in zip(kernel.args, params):
            arg.add_attribute("noalias")
            arg.name = buf.name
        self.frame = self._new_frame(kernel)
        self.frame.status = kernel.args[-1]
        self.frame.status.name = "status"
        env = self.frame.env
        for var, arg in zip(data_vars, kernel.args):
            env[var] = arg
            self.frame.noalias.add(var)
        for var, arg in zip(shape_vars, kernel.args[len(params):]):
            arg.name = var.name
            env[var] = self._int_cast(arg, "int64", var.dtype)
        self.stmt(self.func.body)
        self.frame.builder.ret_void()
        self._emit_entry(kernel, len(params), len(shape_vars))
        return GeneratedModule(str(self.module), self.symbol, shape_vars)

    def _emit_entry(self, kernel: lir.Function, n_params: int, n_shapes: int) -> None:
        entry = lir.Function(self.module, lir.FunctionType(_I32, [_PTR, _PTR, _PTR]), self.symbol)
        b = lir.IRBuilder(entry.append_basic_block("entry"))
        argv, shapes, status = entry.args
        args = [b.load(b.gep(argv, [llvm_constant(_I64, k)], source_etype=_PTR), typ=_PTR) for k in range(n_params)]
        args += [b.load(b.gep(shapes, [llvm_constant(_I64, k)], source_etype=_I64), typ=_I64) for k in range(n_shapes)]
        b.call(kernel, [*args, status])
        b.ret(b.load(status, typ=_I32) if self.checked else llvm_constant(_I32, 0))

    def _new_frame(self, function: lir.Function) -> _Frame:
        entry = function.append_basic_block("entry")
        body = function.append_basic_block("body")
        allocas = lir.IRBuilder(entry)
        allocas.branch(body)
        allocas.position_at_start(entry)
        return _Frame(function, lir.IRBuilder(body), allocas)

    @property
    def b(self) -> lir.IRBuilder:
        return self.frame.builder

    def _alloca(self, ty: lir.Type, name: str) -> lir.Value:
        """Stack space in the function's entry block (so loops do not grow the stack), 64-byte aligned."""
        slot = self.frame.allocas.alloca(ty, name=name)
        slot.align = 64
        slot.type = _PTR  # llvmlite types allocas with their pointee; use opaque pointers throughout
        return slot

    def _return_if_failed(self) -> None:
        """After a checked extern call or a parallel launch: if the status word is set, free the
        live heap buffers and return (the caller reports the failure)."""
        b = self.b
        word = b.load_atomic(self.frame.status, "monotonic", 4, typ=_I32)
        failed, ok = b.append_basic_block("extern_failed"), b.append_basic_block("extern_ok")
        b.cbranch(b.icmp_signed("!=", word, llvm_constant(_I32, 0)), failed, ok)
        b.position_at_end(failed)
        for ptr in reversed(self.frame.heap):
            b.call(self._declare("free", _VOID, [_PTR]), [ptr])
        b.ret_void()
        b.position_at_end(ok)

    def _declare(self, name: str, ret: lir.Type, args: list[lir.Type]) -> lir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = lir.Function(self.module, lir.FunctionType(ret, args), name)
        return fn

    # ------------------------------------------------------------ helpers
    def _broadcast(self, value: lir.Value, lanes: int) -> lir.Value:
        if lanes == 1 or isinstance(value.type, lir.VectorType):
            return value
        vec_ty = lir.VectorType(value.type, lanes)
        one = self.b.insert_element(lir.Constant(vec_ty, None), value, llvm_constant(_I32, 0))
        zeros = lir.Constant(lir.VectorType(_I32, lanes), [0] * lanes)
        return self.b.shuffle_vector(one, lir.Constant(vec_ty, None), zeros)

    def _match(self, a: lir.Value, b: lir.Value) -> tuple[lir.Value, lir.Value]:
        lanes = max(_lanes(a), _lanes(b))
        if _lanes(a) not in (1, lanes) or _lanes(b) not in (1, lanes):
            raise CompileError(f"vector lanes differ: {a.type} vs {b.type}")
        return self._broadcast(a, lanes), self._broadcast(b, lanes)

    def _int_cast(self, value: lir.Value, src: str, dst: str) -> lir.Value:
        src_bits, dst_ty = _elem_type(value).width, _scalar_type(dst)
        if isinstance(value.type, lir.VectorType):
            dst_ty = lir.VectorType(dst_ty, value.type.count)
        dst_bits = _scalar_type(dst).width
        if dst_bits == src_bits:
            return value
        if dst_bits < src_bits:
            return self.b.trunc(value, dst_ty)
        return self.b.sext(value, dst_ty) if _signed(src) else self.b.zext(value, dst_ty)

    def _bind(self, var: ir.Var, value: lir.Value):
        if var in self.frame.env:
            raise CompileError(f"variable {var.name!r} is bound twice")
        self.frame.env[var] = value

    @contextmanager
    def _bound(self, var: ir.Var, value: lir.Value) -> Iterator[None]:
        self._bind(var, value)
        try:
            yield
        finally:
            del self.frame.env[var]

    # ------------------------------------------------------------ expressions
    def expr(self, e: ir.PrimExpr) -> lir.Value:
        method = getattr(self, f"_expr_{type(e).__name__}", None)
        if method is None:
            raise CompileError(f"the CPU backend cannot generate code for {type(e).__name__} {e}")
        return method(e)

    def _expr_IntImm(self, e: ir.IntImm) -> lir.Value:
        return llvm_constant(_type(e.dtype), int(e.value))

    def _expr_FloatImm(self, e: ir.FloatImm) -> lir.Value:
        return llvm_constant(_type(e.dtype), float(e.value))

    def _expr_Var(self, e: ir.Var) -> lir.Value:
        try:
            return self.frame.env[e]
        except KeyError:
            raise CompileError(f"variable {e.name!r} is used outside the scope that defines it") from None

    def _binary(self, e: ir.BinaryOp) -> tuple[lir.Value, lir.Value, str]:
        a, b = self._match(self.expr(e.a), self.expr(e.b))
        if a.type != b.type:
            raise CompileError(f"operand types differ in {e}: {e.a.dtype} vs {e.b.dtype}")
        return a, b, ir.element_of(e.a.dtype)

    def _expr_Add(self, e):
        a, b, dt = self._binary(e)
        return _contract(self.b.fadd(a, b)) if ir.is_float(dt) else self.b.add(a, b)

    def _expr_Sub(self, e):
        a, b, dt = self._binary(e)
        return _contract(self.b.fsub(a, b)) if ir.is_float(dt) else self.b.sub(a, b)

    def _expr_Mul(self, e):
        a, b, dt = self._binary(e)
        return _contract(self.b.fmul(a, b)) if ir.is_float(dt) else self.b.mul(a, b)

    def _expr_Div(self, e):
        a, b, dt = self._binary(e)
        if ir.is_float(dt):
            return self.b.fdiv(a, b)
        return self.b.sdiv(a, b) if _signed(dt) else self.b.udiv(a, b)

    def _expr_Mod(self, e):
        a, b, dt = self._binary(e)
        if ir.is_float(dt):
            return self.b.frem(a, b)
        return self.b.srem(a, b) if _signed(dt) else self.b.urem(a, b)

    def _floor_adjust(self, r: lir.Value, b: lir.Value) -> lir.Value:
        """True where a truncated remainder ``r`` (of division by ``b``) needs flooring."""
        zero = llvm_constant(r.type, 0)
        nonzero = self.b.icmp_signed("!=", r, zero)
        signs_differ = self.b.icmp_signed("<", self.b.xor(r, b), zero)
        return self.b.and_(nonzero, signs_differ)

    def _expr_FloorDiv(self, e):
        a, b, dt = self._binary(e)
        if ir.is_float(dt):
            return self._llvm_math("floor", [self.b.fdiv(a, b)])
        if not _signed(dt):
            return self.b.udiv(a, b)
        q, r = self.b.sdiv(a, b), self.b.srem(a, b)
        return self.b.sub(q, self.b.zext(self._floor_adjust(r, b), q.type))

    def _expr_FloorMod(self, e):
        a, b, dt = self._binary(e)
        if ir.is_float(dt):
            return self.b.fsub(a, self.b.fmul(self._llvm_math("floor", [self.b.fdiv(a, b)]), b))
        if not _signed(dt):
            return self.b.urem(a, b)
        r = self.b.srem(a, b)
        return self.b.add(r, self.b.select(self._floor_adjust(r, b), b, llvm_constant(r.type, 0)))

    def _compare(self, op: str, a: lir.Value, b: lir.Value, dt: str) -> lir.Value:
        if ir.is_float(dt):
            return self.b.fcmp_unordered(op, a, b) if op == "!=" else self.b.fcmp_ordered(op, a, b)
        if _signed(dt) or dt == "bool":
            return self.b.icmp_signed(op, a, b) if dt != "bool" else self.b.icmp_unsigned(op, a, b)
        return self.b.icmp_unsigned(op, a, b)

    def _expr_Min(self, e):
        a, b, dt = self._binary(e)
        return self.b.select(self._compare("<", a, b, dt), a, b)

    def _expr_Max(self, e):
        a, b, dt = self._binary(e)
        return self.b.select(self._compare(">", a, b, dt), a, b)

    def _cmp(op: str):  # noqa: N805 (a factory for the six comparison methods)
        def method(self, e):
            a, b, dt = self._binary(e)
            return self._compare(op, a, b, dt)
        return method

    _expr_EQ, _expr_NE, _expr_LT = _cmp("=="), _cmp("!="), _cmp("<")
    _expr_LE, _expr_GT, _expr_GE = _cmp("<="), _cmp(">"), _cmp(">=")

    def _expr_And(self, e):
        a, b, _ = self._binary(e)
        return self.b.and_(a, b)

    def _expr_Or(self, e):
        a, b, _ = self._binary(e)
        return self.b.or_(a, b)

    def _expr_Not(self, e):
        a = self.expr(e.a)
        return self.b.xor(a, llvm_constant(a.type, 1))

    def _expr_Select(self, e: ir.Select) -> lir.Value:
        cond = self.expr(e.cond)
        t, f = self._match(self.expr(e.true_value), self.expr(e.false_value))
        if _lanes(cond) > 1:
            t, f = self._broadcast(t, _lanes(cond)), self._broadcast(f, _lanes(cond))
            if _lanes(t) != _lanes(cond):
                raise CompileError(f"select condition has {_lanes(cond)} lanes, values {_lanes(t)}: {e}")
        return self.b.select(cond, t, f)

    def _expr_Cast(self, e: ir.Cast) -> lir.Value:
        return self._cast(self.expr(e.value), ir.element_of(e.value.dtype), ir.element_of(e.dtype))

    def _cast(self, v: lir.Value, src: str, dst: str) -> lir.Value:
        if src == dst:
            return v
        lanes = _lanes(v)
        ty = _type(ir.with_lanes(dst, lanes))
        if dst == "bool":
            return self.b.fcmp_unordered("!=", v, llvm_constant(v.type, 0.0)) if ir.is_float(src) \
                else self.b.icmp_unsigned("!=", v, llvm_constant(v.type, 0))
        if src == "bool":
            return self.b.uitofp(v, ty) if ir.is_float(dst) else self.b.zext(v, ty)
        if ir.is_float(src) and ir.is_float(dst):
            src_bits, dst_bits = ir._bits(src), ir._bits(dst)
            if src_bits == dst_bits:
                return v
            return self.b.fpext(v, ty) if dst_bits > src_bits else self.b.fptrunc(v, ty)
        if ir.is_float(dst):
            return self.b.sitofp(v, ty) if _signed(src) else self.b.uitofp(v, ty)
        if ir.is_float(src):
            return self.b.fptosi(v, ty) if _signed(dst) else self.b.fptoui(v, ty)
        return self._int_cast(v, src, dst)

    def _expr_Let(self, e: ir.Let) -> lir.Value:
        with self._bound(e.var, self.expr(e.value)):
            return self.expr(e.body)

    def _expr_Ramp(self, e: ir.Ramp) -> lir.Value:
        base, stride = self.expr(e.base), self.expr(e.stride)
        return self._ramp(base, stride, e.lanes, ir.element_of(e.base.dtype))

    def _ramp(self, base: lir.Value, stride: lir.Value, lanes: int, dt: str) -> lir.Value:
        vec_ty = lir.VectorType(base.type, lanes)
        steps = lir.Constant(vec_ty, list(range(lanes)) if not ir.is_float(dt) else [float(k) for k in range(lanes)])
        mul, add = (self.b.fmul, self.b.fadd) if ir.is_float(dt) else (self.b.mul, self.b.add)
        return add(self._broadcast(base, lanes), mul(self._broadcast(stride, lanes), steps))

    def _expr_Broadcast(self, e: ir.Broadcast) -> lir.Value:
        return self._broadcast(self.expr(e.value), e.lanes)

    # --- calls
    def _llvm_math(self, name: str, args: list[lir.Value]) -> lir.Value:
        args = list(self._match(*args)) if len(args) == 2 else args
        if len(args) == 3:
            lanes = max(map(_lanes, args))
            args = [self._broadcast(a, lanes) for a in args]
        ty = args[0].type
        fn = self._declare(f"llvm.{name}.{_type_suffix(ty)}", ty, [a.type for a in args])
        return self.b.call(fn, args)

    def _per_lane(self, fn: Callable[[list[lir.Value]], lir.Value], args: list[lir.Value]) -> lir.Value:
        lanes = max(map(_lanes, args))
        if lanes == 1:
            return fn(args)
        args = [self._broadcast(a, lanes) for a in args]
        results = [fn([self.b.extract_element(a, llvm_constant(_I32, k)) for a in args]) for k in range(lanes)]
        out = lir.Constant(lir.VectorType(results[0].type, lanes), None)
        for k, lane in enumerate(results):
            out = self.b.insert_element(out, lane, llvm_constant(_I32, k))
        return out

    def _expr_Call(self, e: ir.Call) -> lir.Value:
        op = e.op
        if op == "if_then_else":
            return self._if_then_else(e)
        if op == "tvm_access_ptr":
            return self._access_ptr(e)
        if op in self.externs:
            args = [self.expr(a) for a in e.args]
            if op in self.checked:
                args.insert(0, self.frame.status)
            ret = _type(e.dtype) if e.dtype != "handle" else _PTR
            result = self.b.call(self._declare(self.externs[op], ret, [a.type for a in args]), args)
            if op in self.checked:
                self._return_if_failed()
            return result
        bad = [a for a in e.args if not isinstance(a, ir.PrimExpr)]
        if bad or op not in MATH_INTRINSICS:
            raise CompileError(f"the CPU backend does not know the intrinsic {op!r} in {e}; expected one of "
                               f"{', '.join(MATH_INTRINSICS)} or a function registered with register_extern")
        args = [self.expr(a) for a in e.args]
        dt = ir.element_of(e.args[0].dtype) if e.args else ir.element_of(e.dtype)
        b = self.b
        if op == "likely":
            return args[0]
        if op in _LLVM_MATH or op in _LIBM or op in ("sigmoid", "rsqrt", "isnan"):
            if not ir.is_float(dt):
                if op == "fabs":
                    return self._abs(args[0])
                raise CompileError(f"intrinsic {op!r} needs a float argument, got {dt} in {e}")
        if dt == "float32" and op in _INLINED_FLOAT32:
            return getattr(self, _INLINED_FLOAT32[op])(args[0])
        if op in _LLVM_MATH:
            return self._llvm_math(_LLVM_MATH[op], args)
        if op in _LIBM:
            symbol = _LIBM[op][0 if dt == "float32" else 1]
            if dt not in ("float32", "float64"):
                raise CompileError(f"intrinsic {op!r} supports float32 and float64, got {dt} in {e}")
            fn = self._declare(symbol, _scalar_type(dt), [_scalar_type(dt)] * len(args))
            return self._per_lane(lambda xs: b.call(fn, xs), args)
        if op == "abs":
            return self._llvm_math("fabs", args) if ir.is_float(dt) else self._abs(args[0])
        if op == "sigmoid":
            x = args[0]
            return b.fdiv(llvm_constant(x.type, 1.0), b.fadd(llvm_constant(x.type, 1.0), self._llvm_math("exp", [b.fneg(x)])))
        if op == "rsqrt":
            return b.fdiv(llvm_constant(args[0].type, 1.0), self._llvm_math("sqrt", args))
        if op == "isnan":
            return b.fcmp_unordered("uno", args[0], args[0])
        if ir.is_float(dt):
            raise CompileError(f"intrinsic {op!r} needs integer arguments, got {dt} in {e}")
        if op == "popcount":
            return self._llvm_math("ctpop", args)
        if op == "bitwise_not":
            return b.xor(args[0], llvm_constant(args[0].type, -1))
        x, y = self._match(args[0], args[1])
        if x.type != y.type:
            raise CompileError(f"operand types differ in {e}")
        if op == "shift_right":
            return b.ashr(x, y) if _signed(dt) else b.lshr(x, y)
        if op == "shift_left":
            return b.shl(x, y)
        return {"bitwise_and": b.and_, "bitwise_or": b.or_, "bitwise_xor": b.xor}[op](x, y)

    def _odd_rational(self, x: lir.Value, bound: float, p_coeffs: tuple[float, ...],
                      q_coeffs: tuple[float, ...]) -> lir.Value:
        """x P(x^2) / Q(x^2) with x clamped to [-bound, bound] (NaN passes through the clamps)."""
        b = self.b

        def const(v: float) -> lir.Value:
            return llvm_constant(x.type, v)

        x = b.select(b.fcmp_ordered(">", x, const(bound)), const(bound), x)
        x = b.select(b.fcmp_ordered("<", x, const(-bound)), const(-bound), x)
        x2 = b.fmul(x, x)
        p = const(p_coeffs[0])
        for c in p_coeffs[1:]:
            p = _contract(b.fadd(_contract(b.fmul(p, x2)), const(c)))
        q = const(q_coeffs[0])
        for c in q_coeffs[1:]:
            q = _contract(b.fadd(_contract(b.fmul(q, x2)), const(c)))
        return b.fmul(x, b.fdiv(p, q))  # x last: tiny x keep their precision

    def _erf_float32(self, x: lir.Value) -> lir.Value:
        """erf of float32 lanes in straight-line code that vectorises (libm's erff is one call per lane):
        the rational approximation x P(x^2) / Q(x^2) on [-4, 4] (Eigen's, as TVM's fast_erf), +-1 beyond
        (erf(4) rounds to 1 in float32). Max relative error 4.5e-7 against the exact erf; NaN stays NaN."""
        return self._odd_rational(x, 4.0, _ERF_P, _ERF_Q)

    def _tanh_float32(self, x: lir.Value) -> lir.Value:
        """tanh of float32 lanes in straight-line code (LLVM lowers llvm.tanh to a libm call per lane):
        Eigen's rational approximation on [-7.9053, 7.9053] (+-1 beyond, in float32), x itself below
        4e-4. Max relative error 4e-7 against the exact tanh; NaN stays NaN, -0 stays -0."""
        b = self.b
        tiny = llvm_constant(x.type, 0.0004)
        small = b.fcmp_ordered("<", self._llvm_math("fabs", [x]), tiny)
        return b.select(small, x, self._odd_rational(x, 7.90531110763549805, _TANH_P, _TANH_Q))

    def _access_ptr(self, e: ir.Call) -> lir.Value:
        """``tvm_access_ptr(dtype, data, offset, extent, mask)``: the address of element ``offset``."""
        dtype, data, offset = e.args[0], e.args[1], e.args[2]
        base = self._expr_Var(data)
        return self.b.gep(base, [self.index(offset)], inbounds=True, source_etype=storage_type(str(dtype)))

    def _abs(self, x: lir.Value) -> lir.Value:
        return self.b.select(self.b.icmp_signed("<", x, llvm_constant(x.type, 0)), self.b.neg(x), x)

    def _if_then_else(self, e: ir.Call) -> lir.Value:
        cond_e, then_e, else_e = e.args
        cond = self.expr(cond_e)
        if _lanes(cond) > 1:  # vector condition: both sides, then a blend
            reads = []
            for side in (then_e, else_e):
                ir.walk(side, lambda n: isinstance(n, ir.BufferLoad) and reads.append(n))
            if reads:  # a guarded read (padding) evaluated for every lane could leave the buffer
                raise CompileError(f"if_then_else with a vector condition reads {reads[0].buffer.name!r} in a branch; "
                                   f"the CPU backend evaluates it only with a scalar condition: {e}")
            t, f = self._match(self.expr(then_e), self.expr(else_e))
            return self.b.select(cond, self._broadcast(t, _lanes(cond)), self._broadcast(f, _lanes(cond)))
        then_block = self.b.append_basic_block("ite_then")
        else_block = self.b.append_basic_block("ite_else")
        join = self.b.append_basic_block("ite_join")
        self.b.cbranch(cond, then_block, else_block)
        self.b.position_at_end(then_block)
        t = self.expr(then_e)
        then_end = self.b.block
        self.b.position_at_end(else_block)
        f = self.expr(else_e)
        else_end = self.b.block
        lanes = max(_lanes(t), _lanes(f))
        self.b.position_at_end(then_end)
        t = self._broadcast(t, lanes)
        self.b.branch(join)
        self.b.position_at_end(else_end)
        f = self._broadcast(f, lanes)
        self.b.branch(join)
        self.b.position_at_end(join)
        phi = self.b.phi(t.type)
        phi.add_incoming(t, then_end)
        phi.add_incoming(f, else_end)
        return phi

    # --- memory
    def index(self, e: ir.PrimExpr) -> lir.Value:
        """An integer index expression evaluated in 64 bits (scalar or vector)."""
        dt = ir.element_of(e.dtype)
        if isinstance(e, ir.IntImm):
            return llvm_constant(_I64, int(e.value))
        if isinstance(e, (ir.Add, ir.Sub, ir.Mul, ir.FloorDiv, ir.FloorMod, ir.Min, ir.Max)) and \
                dt in ("int8", "int16", "int32", "int64"):
            a, b = self._match(self.index(e.a), self.index(e.b))
            if isinstance(e, ir.Add):
                return self.b.add(a, b)
            if isinstance(e, ir.Sub):
                return self.b.sub(a, b)
            if isinstance(e, ir.Mul):
                return self.b.mul(a, b)
            if isinstance(e, ir.Min):
                return self.b.select(self.b.icmp_signed("<", a, b), a, b)
            if isinstance(e, ir.Max):
                return self.b.select(self.b.icmp_signed(">", a, b), a, b)
            q, r = self.b.sdiv(a, b), self.b.srem(a, b)
            adjust = self._floor_adjust(r, b)
            if isinstance(e, ir.FloorDiv):
                return self.b.sub(q, self.b.zext(adjust, q.type))
            return self.b.add(r, self.b.select(adjust, b, llvm_constant(r.type, 0)))
        if isinstance(e, ir.Ramp) and ir.is_int(dt):
            return self._ramp(self.index(e.base), self.index(e.stride), e.lanes, "int64")
        if isinstance(e, ir.Broadcast):
            return self._broadcast(self.index(e.value), e.lanes)
        value = self.expr(e)
        if not ir.is_int(dt):
            raise CompileError(f"buffer index {e} has dtype {e.dtype}; expected an integer")
        return self._int_cast(value, dt, "int64")

    def _data(self, buffer: ir.Buffer) -> lir.Value:
        try:
            return self.frame.env[buffer.data]
        except KeyError:
            raise CompileError(f"buffer {buffer.name!r} is used outside its allocation "
                               "(not a parameter and not allocated in an enclosing scope)") from None

    def _address(self, buffer: ir.Buffer, flat: lir.Value) -> lir.Value:
        return self.b.gep(self._data(buffer), [flat], inbounds=True, source_etype=storage_type(buffer.dtype))

    def _expr_BufferLoad(self, e: ir.BufferLoad) -> lir.Value:
        buf = e.buffer
        elem = storage_type(buf.dtype)
        align = max(1, elem.width // 8) if isinstance(elem, lir.IntType) else _byte_size(buf.dtype)
        flat = _flat_index(buf, e.indices)
        form = _ramp_form(flat)
        if form is not None and form.lanes == 1:
            value = self.b.load(self._address(buf, self.index(form.base)), typ=elem, align=align)
        elif form is not None and form.stride == 1:
            value = self.b.load(self._address(buf, self.index(form.base)), typ=lir.VectorType(elem, form.lanes),
                                align=align)
        elif form is not None and form.stride == 0:
            value = self._broadcast(self.b.load(self._address(buf, self.index(form.base)), typ=elem, align=align),
                                    form.lanes)
        elif form is not None and 1 < form.stride <= MAX_DEINTERLEAVE_STRIDE:
            # a small constant stride: load exactly the span once, then pick every stride-th element
            span = (form.lanes - 1) * form.stride + 1
            wide = self.b.load(self._address(buf, self.index(form.base)), typ=lir.VectorType(elem, span), align=align)
            picks = lir.Constant(lir.VectorType(_I32, form.lanes), [k * form.stride for k in range(form.lanes)])
            value = self.b.shuffle_vector(wide, lir.Constant(wide.type, None), picks)
        else:
            lanes = [self.b.load(self._address(buf, offset), typ=elem, align=align)
                     for offset in self._lane_offsets(flat, form)]
            value = lir.Constant(lir.VectorType(elem, len(lanes)), None)
            for k, lane in enumerate(lanes):
                value = self.b.insert_element(value, lane, llvm_constant(_I32, k))
        if ir.element_of(buf.dtype) == "bool":
            value = self.b.icmp_unsigned("!=", value, llvm_constant(value.type, 0))
        return value

    # ------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt) -> None:
        method = getattr(self, f"_stmt_{type(s).__name__}", None)
        if method is None:
            raise CompileError(f"the CPU backend cannot generate code for {type(s).__name__}")
        method(s)

    def _stmt_SeqStmt(self, s: ir.SeqStmt) -> None:
        for child in s.stmts:
            self.stmt(child)

    def _stmt_AttrStmt(self, s: ir.AttrStmt) -> None:
        self.stmt(s.body)

    def _stmt_Evaluate(self, s: ir.Evaluate) -> None:
        if not isinstance(s.value, (ir.IntImm, ir.FloatImm)):
            self.expr(s.value)

    def _stmt_LetStmt(self, s: ir.LetStmt) -> None:
        with self._bound(s.var, self.expr(s.value)):
            self.stmt(s.body)

    def _stmt_IfThenElse(self, s: ir.IfThenElse) -> None:
        cond = self.expr(s.cond)
        if _lanes(cond) > 1:
            raise CompileError(f"if condition {s.cond} is a vector; vectorised loops need straight-line bodies")
        if s.else_case is None:
            with self.b.if_then(cond):
                self.stmt(s.then_case)
            return
        with self.b.if_else(cond) as (then, otherwise):
            with then:
                self.stmt(s.then_case)
            with otherwise:
                self.stmt(s.else_case)

    def _stmt_BufferStore(self, s: ir.BufferStore) -> None:
        buf = s.buffer
        align = _byte_size(buf.dtype)
        value = self.expr(s.value)
        if ir.element_of(buf.dtype) == "bool":
            value = self.b.zext(value, lir.VectorType(_I8, _lanes(value)) if _lanes(value) > 1 else _I8)
        flat = _flat_index(buf, s.indices)
        form = _ramp_form(flat)
        lanes = form.lanes if form is not None else _struct_lanes(flat)
        if _lanes(value) > lanes:
            raise CompileError(f"store of a {_lanes(value)}-lane value to a {lanes}-lane index of {buf.name!r}")
        value = self._broadcast(value, lanes)
        if lanes == 1 or (form is not None and form.stride == 1):
            self.b.store(value, self._address(buf, self.index(form.base)), align=align)
            return
        for k, offset in enumerate(self._lane_offsets(flat, form)):
            lane = self.b.extract_element(value, llvm_constant(_I32, k))
            self.b.store(lane, self._address(buf, offset), align=align)

    def _lane_offsets(self, flat: ir.PrimExpr, form: _RampForm | None) -> list[lir.Value]:
        """Scalar element offsets of each lane of a gathered/scattered index."""
        if form is not None:  # base + k * stride: scalar arithmetic, no vector index
            base = self.index(form.base)
            return [self.b.add(base, llvm_constant(_I64, k * form.stride)) if k else base for k in range(form.lanes)]
        offsets = self.index(flat)
        return [self.b.extract_element(offsets, llvm_constant(_I32, k)) for k in range(_lanes(offsets))]

    def _stmt_Allocate(self, s: ir.Allocate) -> None:
        buf = s.buffer
        elem = storage_type(buf.dtype)
        size = math.prod(x.value for x in buf.shape) if all(isinstance(x, ir.IntImm) for x in buf.shape) else None
        nbytes = None if size is None else size * _byte_size(buf.dtype)
        if nbytes is not None and nbytes <= (TASK_STACK_LIMIT if self.frame.in_parallel else STACK_LIMIT):
            slot = self._alloca(lir.ArrayType(elem, max(size, 1)), buf.name)
            with self._bound(buf.data, slot):
                self.frame.noalias.add(buf.data)
                self.stmt(s.body)
            return
        count = self.index(_flat_size(buf.shape))
        total = self.b.mul(count, llvm_constant(_I64, _byte_size(buf.dtype)))
        total = self.b.and_(self.b.add(total, llvm_constant(_I64, 63)), llvm_constant(_I64, -64))
        total = self.b.select(self.b.icmp_signed("<", total, llvm_constant(_I64, 64)), llvm_constant(_I64, 64), total)
        ptr = self.b.call(self._declare("aligned_alloc", _PTR, [_I64, _I64]), [llvm_constant(_I64, 64), total])
        self.frame.heap.append(ptr)
        with self._bound(buf.data, ptr):
            self.frame.noalias.add(buf.data)
            self.stmt(s.body)
        self.frame.heap.pop()
        self.b.call(self._declare("free", _VOID, [_PTR]), [ptr])

    # --- loops
    def _stmt_For(self, s: ir.For) -> None:
        kind = s.kind
        if kind is ir.ForKind.THREAD_BINDING:
            if s.thread_tag not in ("vthread", "cthread") and not s.thread_tag.startswith("vthread"):
                raise CompileError(f"loop {s.loop_var.name!r} is bound to {s.thread_tag!r}, which the CPU has no "
                                   "hardware for; bind only vthread/cthread on target 'llvm'")
            kind = ir.ForKind.SERIAL
        if kind is ir.ForKind.PARALLEL:
            self._parallel(s)
        elif kind is ir.ForKind.UNROLLED and isinstance(s.extent, ir.IntImm) and s.extent.value <= MAX_UNROLL:
            begin = self.expr(s.min)
            for k in range(s.extent.value):
                with self._bound(s.loop_var, self.b.add(begin, llvm_constant(begin.type, k)) if k else begin):
                    self.stmt(s.body)
        elif kind is ir.ForKind.VECTORIZED and self._vectorizable(s):
            ramp = ir.Ramp(s.min, ir.const(1, s.loop_var.dtype), s.extent.value)
            self.stmt(_Vectorizer(s.loop_var, ramp).visit(s.body))
        else:
            begin = self.expr(s.min)
            end = self.b.add(begin, self.expr(s.extent))
            self._loop(s.loop_var, begin, end, lambda: self.stmt(s.body))

    def _vectorizable(self, s: ir.For) -> bool:
        if not isinstance(s.extent, ir.IntImm) or s.extent.value < 2 or not _straight_line(s.body):
            return False
        stores_vary = True

        def visit(node):
            nonlocal stores_vary
            if isinstance(node, ir.BufferStore):
                used = []
                for i in node.indices:
                    ir.walk(i, lambda n: n is s.loop_var and used.append(n))
                stores_vary = stores_vary and bool(used)
        ir.walk(s.body, visit)
        return stores_vary

    def _loop(self, var: ir.Var, begin: lir.Value, end: lir.Value, body: Callable[[], None]) -> None:
        b = self.b
        pre = b.block
        header, body_block, exit_block = (b.append_basic_block(f"{var.name}_{k}") for k in ("head", "body", "exit"))
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(begin.type, name=var.name)
        phi.add_incoming(begin, pre)
        less = b.icmp_signed("<", phi, end) if _signed(var.dtype) else b.icmp_unsigned("<", phi, end)
        b.cbranch(less, body_block, exit_block)
        b.position_at_end(body_block)
        with self._bound(var, phi):
            body()
        phi.add_incoming(b.add(phi, llvm_constant(phi.type, 1)), b.block)
        b.branch(header)
        b.position_at_end(exit_block)

    def _parallel(self, s: ir.For) -> None:
        if self.frame.in_parallel:
            raise CompileError(f"parallel loop {s.loop_var.name!r} is nested in another parallel loop; "
                               "fuse them into one parallel loop instead")
        env = self.frame.env
        captured = _vars_in(s, lambda v: v in env)
        values = [env[v] for v in captured]
        self.n_outlined += 1
        name = f"{self.symbol}_parallel{self.n_outlined}"
        values.append(self.frame.status)
        task_type = lir.FunctionType(_VOID, [_I32, _I32] + [v.type for v in values])
        task = lir.Function(self.module, task_type, f"{name}_task")
        task.linkage = "internal"
        task.attributes.add("nounwind")
        outer = self.frame
        self.frame = self._new_frame(task)
        self.frame.in_parallel = True
        self.frame.status = task.args[-1]
        for var, arg in zip(captured, task.args[2:]):
            self.frame.env[var] = arg
            arg.name = var.name
            if var in outer.noalias:
                arg.add_attribute("noalias")
                self.frame.noalias.add(var)
        task_id, num_tasks = task.args[0], task.args[1]
        begin0, extent = self.expr(s.min), self.expr(s.extent)
        ty = extent.type
        n = self.b.zext(num_tasks, ty) if ty.width > 32 else self.b.trunc(num_tasks, ty) if ty.width < 32 else num_tasks
        t = self.b.zext(task_id, ty) if ty.width > 32 else self.b.trunc(task_id, ty) if ty.width < 32 else task_id
        chunk = self.b.sdiv(self.b.add(extent, self.b.sub(n, llvm_constant(ty, 1))), n)
        begin = self.b.add(begin0, self.b.mul(t, chunk))
        stop = self.b.add(begin0, extent)
        end = self.b.add(begin, chunk)
        end = self.b.select(self.b.icmp_signed("<", end, stop), end, stop)
        self._loop(s.loop_var, begin, end, lambda: self.stmt(s.body))
        self.frame.builder.ret_void()
        self.frame = outer

        closure_ty = lir.LiteralStructType([v.type for v in values])
        trampoline = lir.Function(self.module, lir.FunctionType(_I32, [_I32, _I32, _PTR]), name)
        trampoline.linkage = "internal"
        tb = lir.IRBuilder(trampoline.append_basic_block("entry"))
        closure = trampoline.args[2]
        fields = [tb.load(tb.gep(closure, [llvm_constant(_I32, 0), llvm_constant(_I32, k)], source_etype=closure_ty), typ=v.type)
                  for k, v in enumerate(values)]
        tb.call(task, [trampoline.args[0], trampoline.args[1], *fields])
        tb.ret(llvm_constant(_I32, 0))

        slot = self._alloca(closure_ty, f"{name}_closure")
        for k, v in enumerate(values):
            self.b.store(v, self.b.gep(slot, [llvm_constant(_I32, 0), llvm_constant(_I32, k)], source_etype=closure_ty))
        extent = self.expr(s.extent)  # at most one chunk per iteration: a short loop launches few tasks
        wide = self.b.sext(extent, _I64) if extent.type.width < 64 else extent
        wide = self.b.select(self.b.icmp_signed("<", wide, llvm_constant(_I64, 1)), llvm_constant(_I64, 1), wide)
        wide = self.b.select(self.b.icmp_signed(">", wide, llvm_constant(_I64, 65535)), llvm_constant(_I64, 65535), wide)
        self.b.call(self._declare(PARALLEL_LAUNCH, _I32, [_PTR, _PTR, _I32]),
                    [trampoline, slot, self.b.trunc(wide, _I32)])
        if self.checked:
            self._return_if_failed()


def _vars_in(node, keep: Callable[[ir.Var], bool] = lambda v: True) -> list[ir.Var]:
    """The distinct variables under ``node`` (a node or a tuple of nodes), in order of appearance."""
    seen: dict[int, ir.Var] = {}

    def visit(n):
        if isinstance(n, ir.Var) and id(n) not in seen and keep(n):
            seen[id(n)] = n
    for root in (node if isinstance(node, tuple) else (node,)):
        ir.walk(root, visit)
    return list(seen.values())


def _byte_size(dtype: str) -> int:
    base = ir.element_of(dtype)
    return 1 if base == "bool" else ir._bits(base) // 8


def _flat_size(shape: tuple[ir.PrimExpr, ...]) -> ir.PrimExpr:
    size: ir.PrimExpr = ir.const(1, "int64")
    for extent in shape:
        size = _mul(size, extent)
    return size
