"""NVPTX LLVM IR from a :class:`DeviceProgram`: one ``ptx_kernel`` function per kernel.

The CPU code generator (:class:`vtakit.compiler.backend.llvm_codegen.CodeGen`) does the
expressions, statements, vectors and loops; this subclass overrides what differs on a GPU, as
TVM's codegen_nvptx overrides codegen_llvm:

- kernel parameters are global memory, ``ptr addrspace(1)`` (one ``noalias`` pointer per buffer,
  assumed 16-byte aligned, so that neighbouring accesses merge into vector loads and stores);
  the kernels are marked with ``nvvm.annotations`` (``kernel`` and ``maxntid{x,y,z}``, the block
  size), which LLVM turns into PTX ``.entry`` functions with ``.maxntid``;
- thread and block indices are ``llvm.nvvm.read.ptx.sreg.{tid,ctaid}.{x,y,z}``;
- ``shared`` buffers are ``addrspace(3)`` globals of the kernel (16-byte aligned); ``local`` ones
  are allocas, which LLVM places in the local address space (5) or in registers;
- the barrier ``tvm_storage_sync("shared")`` is ``llvm.nvvm.barrier0`` (``bar.sync 0``);
- math: ``sqrt``, ``fabs``, ``fma``, ``floor``, ``ceil``, ``trunc``, ``round``, ``copysign`` and
  ``fmod`` are native PTX instructions. libdevice is not linked, so float32 ``exp``, ``exp2``,
  ``exp10``, ``log``, ``log2``, ``log10``, ``pow``, ``sin``, ``cos``, ``tan``, ``tanh``, ``sinh``,
  ``cosh``, ``sigmoid``, ``erf``, ``log1p`` and ``expm1`` are built from PTX's ``ex2.approx``,
  ``lg2.approx``, ``sin.approx`` and ``cos.approx`` (see :data:`MATH_EXPANSIONS`; a few ulp, except
  ``erf`` above 0.5, within 2e-7, and ``sin``/``cos``, within 1e-6 on [-pi, pi]); float64 versions of these
  have no PTX instruction and are an error.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Callable

from llvmlite import ir as lir

from vtakit.compiler import ir
from vtakit.compiler.backend.llvm_codegen import MATH_INTRINSICS, CodeGen, llvm_constant, storage_type
from vtakit.compiler.backend.nvptx.program import THREAD_TAGS, DeviceKernel, DeviceProgram, is_barrier
from vtakit.compiler.backend.nvptx.split import SHARED_ALIGN, allocation_bytes
from vtakit.compiler.backend.nvptx.target import TRIPLE
from vtakit.errors import CompileError

__all__ = ["generate_nvptx", "kernel_symbol", "MATH_EXPANSIONS", "NATIVE_MATH", "GLOBAL_ALIGN"]

_I32, _F32 = lir.IntType(32), lir.FloatType()
_VOID = lir.VoidType()
_GLOBAL, _SHARED = 1, 3
GLOBAL_ALIGN = 16  # the alignment the kernels assume of every global buffer (the driver gives 256)
_SREG = {"threadIdx": "tid", "blockIdx": "ctaid"}
NATIVE_MATH = ("sqrt", "fabs", "fma", "floor", "ceil", "trunc", "roundeven", "nearbyint", "copysign", "ctpop")


def kernel_symbol(name: str) -> str:
    """The PTX entry name of a kernel (letters, digits and underscores)."""
    return "".join(c if c.isalnum() else "_" for c in name) or "kernel"


def generate_nvptx(program: DeviceProgram, data_layout: str = "") -> str:
    """LLVM assembly (NVPTX triple) with one kernel function per kernel of ``program``."""
    return _NVPTXCodeGen(program, data_layout).run_program()


@dataclass(frozen=True)
class _Expansion:
    """A float32 math function built from PTX instructions (``args`` are scalar LLVM values)."""

    arity: int
    build: Callable[["_NVPTXCodeGen", list[lir.Value]], lir.Value]


_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453


def _exp2_of_product(g: "_NVPTXCodeGen", x: lir.Value, scale: float) -> lir.Value:
    """``2 ** (x * scale)`` with the rounding error of the product folded back in (so that
    ``exp(x)`` stays within a few ulp for large ``x``): hi = x*s, lo = fma(x, s, -hi) + x*s_lo."""
    b = g.b
    s_hi = float(_f32(scale))
    hi = b.fmul(x, llvm_constant(_F32, s_hi))
    lo = g._nvvm("llvm.fma.f32", [x, llvm_constant(_F32, s_hi), b.fneg(hi)])
    lo = b.fadd(lo, b.fmul(x, llvm_constant(_F32, scale - s_hi)))
    # beyond float32's exponent range (and for infinities and NaN) the correction is moot, and inf - inf
    # would make it NaN
    in_range = b.fcmp_ordered("<", g._nvvm("llvm.fabs.f32", [hi]), llvm_constant(_F32, 128.0))
    lo = b.select(in_range, lo, llvm_constant(_F32, 0.0))
    return b.fmul(g._nvvm("llvm.nvvm.ex2.approx.f", [hi]), g._nvvm("llvm.fma.f32", [lo, llvm_constant(_F32, _LN2),
                                                                                   llvm_constant(_F32, 1.0)]))


def _f32(value: float) -> float:
    """``value`` rounded to float32."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _log2(g: "_NVPTXCodeGen", x: lir.Value) -> lir.Value:
    return g._nvvm("llvm.nvvm.lg2.approx.f", [x])


def _tanh(g: "_NVPTXCodeGen", xs: list[lir.Value]) -> lir.Value:
    """tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)): exact limits at +-inf, no overflow."""
    b, x = g.b, xs[0]
    ax = g._nvvm("llvm.fabs.f32", [x])
    e = _exp2_of_product(g, ax, 2 * _LOG2E)
    t = b.fsub(llvm_constant(_F32, 1.0), b.fdiv(llvm_constant(_F32, 2.0), b.fadd(e, llvm_constant(_F32, 1.0))))
    return g._nvvm("llvm.copysign.f32", [t, x])


def _erf(g: "_NVPTXCodeGen", xs: list[lir.Value]) -> lir.Value:
    """erf: its Taylor series below |x| = 0.5 (a few ulp: the relative error stays small near 0),
    Abramowitz & Stegun 7.1.26 above (absolute error below 1.5e-7)."""
    b, x = g.b, xs[0]
    ax = g._nvvm("llvm.fabs.f32", [x])
    x2 = b.fmul(x, x)
    series = b.fmul(_polynomial(g, x2, _ERF_TAYLOR), x)
    t = b.fdiv(llvm_constant(_F32, 1.0), b.fadd(llvm_constant(_F32, 1.0), b.fmul(ax, llvm_constant(_F32, 0.3275911))))
    poly = llvm_constant(_F32, 1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = g._nvvm("llvm.fma.f32", [poly, t, llvm_constant(_F32, c)])
    poly = b.fmul(poly, t)
    e = _exp2_of_product(g, b.fneg(x2), _LOG2E)
    tail = g._nvvm("llvm.copysign.f32", [b.fsub(llvm_constant(_F32, 1.0), b.fmul(poly, e)), x])
    return b.select(b.fcmp_ordered("<", ax, llvm_constant(_F32, 0.5)), series, tail)


def _polynomial(g: "_NVPTXCodeGen", x: lir.Value, coefficients: tuple[float, ...]) -> lir.Value:
    """sum_n coefficients[n] x^n by Horner's rule with FMAs."""
    out = llvm_constant(_F32, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        out = g._nvvm("llvm.fma.f32", [out, x, llvm_constant(_F32, c)])
    return out


def _expm1(g: "_NVPTXCodeGen", xs: list[lir.Value]) -> lir.Value:
    """expm1: its Taylor series below |x| = 0.5 (exp(x) - 1 would cancel), exp(x) - 1 above."""
    b, x = g.b, xs[0]
    series = b.fmul(_polynomial(g, x, _EXPM1_TAYLOR), x)
    direct = b.fsub(_exp2_of_product(g, x, _LOG2E), llvm_constant(_F32, 1.0))
    small = b.fcmp_ordered("<", g._nvvm("llvm.fabs.f32", [x]), llvm_constant(_F32, 0.5))
    return b.select(small, series, direct)


# expm1(x) = x * sum_n x^n / (n + 1)!; nine terms reach float32 precision below 0.5
_EXPM1_TAYLOR = tuple(1 / math.factorial(n + 1) for n in range(9))
# erf(x) = x * sum_n c_n x^(2n), c_n = 2/sqrt(pi) (-1)^n / (n! (2n + 1)); seven terms reach float32 precision
_ERF_TAYLOR = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7))


def _sinh_cosh(sign: float) -> Callable[["_NVPTXCodeGen", list[lir.Value]], lir.Value]:
    def build(g: "_NVPTXCodeGen", xs: list[lir.Value]) -> lir.Value:
        b, x = g.b, xs[0]
        up, down = _exp2_of_product(g, x, _LOG2E), _exp2_of_product(g, b.fneg(x), _LOG2E)
        both = b.fadd(up, down) if sign > 0 else b.fsub(up, down)
        return b.fmul(both, llvm_constant(_F32, 0.5))
    return build


MATH_EXPANSIONS: dict[str, _Expansion] = {
    "exp": _Expansion(1, lambda g, xs: _exp2_of_product(g, xs[0], _LOG2E)),
    "exp2": _Expansion(1, lambda g, xs: g._nvvm("llvm.nvvm.ex2.approx.f", xs)),
    "exp10": _Expansion(1, lambda g, xs: _exp2_of_product(g, xs[0], math.log2(10))),
    "log": _Expansion(1, lambda g, xs: g.b.fmul(_log2(g, xs[0]), llvm_constant(_F32, _LN2))),
    "log2": _Expansion(1, lambda g, xs: _log2(g, xs[0])),
    "log10": _Expansion(1, lambda g, xs: g.b.fmul(_log2(g, xs[0]), llvm_constant(_F32, math.log10(2)))),
    "pow": _Expansion(2, lambda g, xs: g._nvvm("llvm.nvvm.ex2.approx.f", [g.b.fmul(xs[1], _log2(g, xs[0]))])),
    "sin": _Expansion(1, lambda g, xs: g._nvvm("llvm.nvvm.sin.approx.f", xs)),
    "cos": _Expansion(1, lambda g, xs: g._nvvm("llvm.nvvm.cos.approx.f", xs)),
    "tan": _Expansion(1, lambda g, xs: g.b.fdiv(g._nvvm("llvm.nvvm.sin.approx.f", xs),
                                                g._nvvm("llvm.nvvm.cos.approx.f", xs))),
    "tanh": _Expansion(1, _tanh),
    "sinh": _Expansion(1, _sinh_cosh(-1.0)),
    "cosh": _Expansion(1, _sinh_cosh(1.0)),
    "erf": _Expansion(1, _erf),
    "log1p": _Expansion(1, lambda g, xs: g.b.fmul(_log2(g, g.b.fadd(xs[0], llvm_constant(_F32, 1.0))), llvm_constant(_F32, _LN2))),
    "expm1": _Expansion(1, _expm1),
}


class _NVPTXCodeGen(CodeGen):
    def __init__(self, program: DeviceProgram, data_layout: str) -> None:
        func = ir.PrimFunc(program.name, program.params, ir.Evaluate(ir.const(0, "int32")))
        super().__init__(func, kernel_symbol(program.name), TRIPLE, data_layout, {}, frozenset())
        self.program = program
        self.kernel: DeviceKernel | None = None

    def run_program(self) -> str:
        for kernel in self.program.kernels:
            self._kernel(kernel)
        return str(self.module)

    def _kernel(self, kernel: DeviceKernel) -> None:
        for buf in kernel.params:
            storage_type(buf.dtype)  # rejects dtypes the backend has no type for
        ptr = lir.PointerType(addrspace=_GLOBAL)
        fn = lir.Function(self.module, lir.FunctionType(_VOID, [ptr] * len(kernel.params)),
                          kernel_symbol(kernel.name))
        fn.attributes.add("nounwind")
        self.kernel = kernel
        self.frame = self._new_frame(fn)
        for buf, arg in zip(kernel.params, fn.args):
            arg.add_attribute("noalias")
            arg.attributes.align = GLOBAL_ALIGN  # cuMemAlloc aligns to 256 bytes: vector loads may merge
            arg.name = buf.name
            self.frame.env[buf.data] = arg
            self.frame.noalias.add(buf.data)
        for tag, var in kernel.thread_vars.items():
            kind, axis = tag.split(".")
            index = self._nvvm(f"llvm.nvvm.read.ptx.sreg.{_SREG[kind]}.{axis}", [], _I32)
            self.frame.env[var] = self._int_cast(index, "int32", var.dtype)
        self.stmt(kernel.body)
        self.frame.builder.ret_void()
        self._annotate(fn, kernel)

    def _annotate(self, fn: lir.Function, kernel: DeviceKernel) -> None:
        m = self.module
        entries = [(fn, "kernel", 1)] + [(fn, f"maxntid{axis}", n) for axis, n in zip("xyz", kernel.block)]
        for function, key, value in entries:
            m.add_named_metadata("nvvm.annotations", m.add_metadata(
                [function, lir.MetaDataString(m, key), lir.Constant(_I32, value)]))

    def _nvvm(self, name: str, args: list[lir.Value], ret: lir.Type | None = None) -> lir.Value:
        """A call of the intrinsic ``name`` (scalar arguments; the result has the first one's type)."""
        ret = ret if ret is not None else args[0].type
        return self.b.call(self._declare(name, ret, [a.type for a in args]), args)

    # ------------------------------------------------------------ statements
    def stmt(self, s: ir.Stmt) -> None:
        if is_barrier(s):
            self._nvvm("llvm.nvvm.barrier0", [], _VOID)
            return
        if not hasattr(self, f"_stmt_{type(s).__name__}"):
            raise CompileError(f"the cuda backend cannot generate code for {type(s).__name__} "
                               f"(kernel {self.kernel.name}): {s}")
        super().stmt(s)

    def _stmt_For(self, s: ir.For) -> None:
        if s.kind is ir.ForKind.PARALLEL:
            raise CompileError(f"kernel {self.kernel.name}: loop {s.loop_var.name!r} is parallel; on the cuda target "
                               "bind it to blockIdx/threadIdx instead")
        if s.kind is ir.ForKind.THREAD_BINDING:
            raise CompileError(f"kernel {self.kernel.name}: loop {s.loop_var.name!r} is still bound to "
                               f"{s.thread_tag!r} after the host/device split; expected one of {', '.join(THREAD_TAGS)}")
        super()._stmt_For(s)

    def _stmt_Allocate(self, s: ir.Allocate) -> None:
        buf = s.buffer
        allocation_bytes(buf)  # rejects symbolic sizes
        elem = storage_type(buf.dtype)
        count = max(1, math.prod(e.value for e in buf.shape) * ir.lanes_of(buf.dtype))
        if buf.scope == "shared":
            name = kernel_symbol(f"{self.kernel.name}_{buf.name}")
            slot = lir.GlobalVariable(self.module, lir.ArrayType(elem, count), self.module.get_unique_name(name),
                                      addrspace=_SHARED)
            slot.linkage = "internal"
            slot.align = SHARED_ALIGN
            slot.initializer = lir.Constant(slot.value_type, lir.Undefined)
            slot.type = lir.PointerType(addrspace=_SHARED)  # opaque pointers throughout
        elif buf.scope == "local":
            slot = self._alloca(lir.ArrayType(elem, count), buf.name)
        else:
            raise CompileError(f"kernel {self.kernel.name}: buffer {buf.name!r} is allocated in scope {buf.scope!r}; "
                               "a kernel allocates only 'shared' and 'local' memory")
        with self._bound(buf.data, slot):
            self.frame.noalias.add(buf.data)
            self.stmt(s.body)

    # ------------------------------------------------------------ expressions
    def expr(self, e: ir.PrimExpr) -> lir.Value:
        if not hasattr(self, f"_expr_{type(e).__name__}"):
            raise CompileError(f"the cuda backend cannot generate code for {type(e).__name__} {e}")
        return super().expr(e)

    def _expr_Call(self, e: ir.Call) -> lir.Value:
        op = e.op
        if op in ("erf", "log1p", "expm1"):  # libm calls on the CPU
            return self._expand(op, [self.expr(a) for a in e.args], e)
        if op == "fmod" and ir.is_float(e.dtype):
            a, b = self._match(self.expr(e.args[0]), self.expr(e.args[1]))
            return self.b.frem(a, b)
        if op not in MATH_INTRINSICS and op != "tvm_access_ptr" or op == "atan2":
            known = sorted({*MATH_INTRINSICS} - {"atan2"})
            raise CompileError(f"the cuda backend has no intrinsic {op!r} (libdevice is not linked) in {e}; "
                               f"expected one of {', '.join(known)}")
        return super()._expr_Call(e)

    def _llvm_math(self, name: str, args: list[lir.Value]) -> lir.Value:
        if name in NATIVE_MATH:
            return super()._llvm_math(name, args)
        return self._expand(name, args, None)

    def _expand(self, name: str, args: list[lir.Value], e: ir.Call | None) -> lir.Value:
        expansion = MATH_EXPANSIONS.get(name)
        where = f" in {e}" if e is not None else ""
        if expansion is None:
            raise CompileError(f"the cuda backend has no {name!r} (libdevice is not linked){where}; available: "
                               f"{', '.join(sorted({*NATIVE_MATH, *MATH_EXPANSIONS}))}")
        elem = args[0].type.element if isinstance(args[0].type, lir.VectorType) else args[0].type
        if not isinstance(elem, lir.FloatType):
            raise CompileError(f"the cuda backend computes {name!r} in float32 only, got {elem}{where}; "
                               "cast the argument to float32")
        if len(args) != expansion.arity:
            raise CompileError(f"{name!r} takes {expansion.arity} argument(s), got {len(args)}{where}")
        return self._per_lane(lambda xs: expansion.build(self, xs), args)

