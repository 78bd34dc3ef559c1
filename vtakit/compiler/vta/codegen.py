"""Code generation: the lowered VTA function becomes a :class:`ProgramTemplate`.

The host part of the function (loops, lets, conditions around the commands) is executed once at
compile time by the reference interpreter, with the VTA intrinsics as callbacks that drive a
:class:`~vtakit.runtime.builder.ProgramBuilder` (VTA's command queue: micro-op kernel caching,
dependence-flag placement, the final synchronisation); each compute -> store token then moves to
the last compute instruction its stores need, and each store -> compute token to the first compute
instruction that needs it (:mod:`.store_tokens`). SRAM buffers get static entry addresses
(a stack per scope, following the allocation nesting). DRAM operands are the function's
parameters: each DMA instruction records a relocation (instruction, parameter, memory) and the
micro-op image is placed at run time, so one template serves any set of device arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from vtakit.compiler import ir
from vtakit.compiler.interpreter import Interpreter, Pointer
from vtakit.compiler.vta.env import (ACC_SCOPE, DEP_POP, DEP_PUSH, INP_SCOPE, LOAD_2D, PUSH_ALU, PUSH_GEMM,
                                     SCOPE_MEM, STORE_2D, UOP_LOOP_BEGIN, UOP_LOOP_END, UOP_PUSH, WGT_SCOPE, VTAEnv)
from vtakit.compiler.vta.gemm_epilogue import REQUANT_SET
from vtakit.compiler.vta.store_tokens import hoist_store_pushes, sink_store_pops
from vtakit.errors import CompileError, DeadlockError, ISAError, MemoryAccessError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import ITER_BITS
from vtakit.hw.isa import AluOp, MemId, Opcode
from vtakit.runtime.builder import ProgramBuilder
from vtakit.runtime.template import ProgramTemplate, Relocation
from vtakit.sim.fsim import check_schedule

__all__ = ["ProgramTemplate", "Relocation", "generate"]

_PAD_MAX = 15          # 4-bit padding fields
_SCOPE_OF_MEM = {MemId.INP: INP_SCOPE, MemId.WGT: WGT_SCOPE, MemId.ACC: ACC_SCOPE, MemId.ACC_8BIT: ACC_SCOPE,
                 MemId.OUT: ACC_SCOPE}


def _dummy(size: int, dtype: str) -> np.ndarray:
    """A placeholder array of ``size`` elements (no storage): code generation never touches data."""
    base = np.zeros(1, dtype=np.dtype(ir.element_of(dtype)) if ir.element_of(dtype) != "bool" else np.bool_)
    return np.lib.stride_tricks.as_strided(base, shape=(max(size, 0),), strides=(0,), writeable=False)


def _const_size(buf: ir.Buffer) -> int:
    size = 1
    for s in buf.shape:
        if not isinstance(s, ir.IntImm):
            raise CompileError(f"buffer {buf.name} has non-constant shape {buf.shape}; the VTA target needs "
                               "static shapes")
        size *= s.value
    return size


class _CodeGen(Interpreter):
    def __init__(self, func: ir.PrimFunc, env: VTAEnv) -> None:
        self.env = env
        self.builder = ProgramBuilder(env.config, name=func.name)
        self.relocations: list[Relocation] = []
        self.sram_base: dict[ir.Var, int] = {}
        self.sram_scope: dict[ir.Var, str] = {}
        self.sram_top = dict.fromkeys(SCOPE_MEM, 0)
        self.params = {p.data: k for k, p in enumerate(func.params)}
        self.lanes = {scope: env.lanes(scope) for scope in SCOPE_MEM}
        self.kernel: list[isa.Uop] | None = None
        self.kernel_sig: tuple | None = None
        self.kernel_loops: list[tuple[int, int, int, int]] = []
        intrinsics: dict[str, Callable[..., Any]] = {
            LOAD_2D: self._load, STORE_2D: self._store, UOP_PUSH: self._uop_push, DEP_PUSH: self._dep_push,
            DEP_POP: self._dep_pop, UOP_LOOP_BEGIN: self._loop_begin, UOP_LOOP_END: lambda: 0,
            REQUANT_SET: self._requant_set}
        super().__init__(func, intrinsics)

    # ------------------------------------------------------------------ run
    def generate(self) -> ProgramTemplate:
        env: dict = {}
        for p in self.func.params:
            env[p.data] = _dummy(_const_size(p), p.dtype)
        try:
            self._body(env)
        except MemoryAccessError as exc:
            raise CompileError(f"{self.func.name}: {exc}: a DMA tile lies outside its tensor (entirely in the "
                               "padding?); use other tile sizes") from exc
        try:
            program = self.builder.finish()
        except (ISAError, ProgramError) as exc:
            raise CompileError(f"{self.func.name}: the generated program does not encode: {exc}") from exc
        c = self.env.config
        insns, _ = hoist_store_pushes(program.insns, program.uops, program.uop_addr // isa.UOP_BYTES,
                                      self.relocations, c.uop_depth, c.out_depth)
        insns, _ = sink_store_pops(insns, self.relocations)
        try:
            check_schedule(c, insns)
        except DeadlockError as exc:
            raise CompileError(f"{self.func.name}: the generated program deadlocks on {c.model} with "
                               f"TOKEN_QUEUE_DEPTH={c.token_queue_depth} and CMD_QUEUE_DEPTH={c.cmd_queue_depth}; "
                               f"use fewer virtual threads or deeper queues ({exc})") from exc
        loads = [i for i, insn in enumerate(insns)
                 if insn.opcode == Opcode.LOAD and insn.memory_type == MemId.UOP and insn.x_size > 0]
        return ProgramTemplate(insns, list(program.uops), self.relocations, loads)

    # ------------------------------------------------------------------ statements
    def _s_Allocate(self, s: ir.Allocate):
        buf = s.buffer
        if buf.scope not in SCOPE_MEM:
            raise CompileError(f"buffer {buf.name} is allocated in scope {buf.scope!r}, but the VTA target runs no "
                               f"host code; put intermediate stages in {sorted(SCOPE_MEM)}")
        lanes, depth = self.env.lanes(buf.scope), self.env.depth(buf.scope)
        size = _const_size(buf)
        entries = -(-size // lanes)
        body = self.stmt(s.body)
        dummy = _dummy(size, buf.dtype)

        def alloc(e: dict) -> None:
            base = self.sram_top[buf.scope]
            if base + entries > depth:
                raise CompileError(f"buffer {buf.name} needs {entries} entries of {buf.scope} at entry {base}, over "
                                   f"its capacity of {depth} entries")
            self.sram_top[buf.scope] = base + entries
            self.sram_base[buf.data], self.sram_scope[buf.data] = base, buf.scope
            e[buf.data] = dummy
            body(e)
            del e[buf.data]
            self.sram_top[buf.scope] = base

        return alloc

    def _s_BufferStore(self, s: ir.BufferStore):
        raise CompileError(f"the store {str(s).strip()[:120]} would run on the host, but the VTA target has none: "
                           "copies need the dma_copy pragma, element-wise stages in the accumulator the alu "
                           "pragma, and the GEMM stage tensorize")

    def _s_AttrStmt(self, s: ir.AttrStmt):
        body = self.stmt(s.body)
        if s.key != "coproc_uop_scope":
            return body
        kind = s.value
        signature = _kernel_signature(s.body)
        built: dict[tuple, _KernelCall | None] = {}

        def kernel(e: dict) -> None:
            if self.kernel is not None:
                raise CompileError("nested coproc_uop_scope")
            key = self._signature_values(signature, e) if signature is not None else None
            call = built.get(key, _UNBUILT) if key is not None else _UNBUILT
            if call is _UNBUILT:
                self.kernel, self.kernel_sig, self.kernel_loops = [], None, []
                body(e)
                call = self._plan_kernel(kind)
                self.kernel = None
                if key is not None:
                    built[key] = call
            if call is not None:
                self._emit_kernel(call)

        return kernel

    def _signature_values(self, signature: tuple[ir.Var, ...], e: dict) -> tuple | None:
        """The values that decide a micro-op kernel: its free variables' values and the SRAM
        placement of the buffers it addresses (None when one of them is not a plain integer)."""
        key = []
        for v in signature:
            if v in self.sram_base:
                key.append((self.sram_base[v], self.sram_scope[v]))
                continue
            value = e.get(v)
            if not isinstance(value, int):
                return None
            key.append(value)
        return tuple(key)

    # ------------------------------------------------------------------ helpers
    def _sram_index(self, ptr: Pointer, scope: str, what: str) -> int:
        if ptr.data not in self.sram_base:
            raise CompileError(f"{what}: {ptr.data.name} is not an SRAM buffer")
        have = self.sram_scope[ptr.data]
        if have != scope:
            raise CompileError(f"{what}: {ptr.data.name} is in {have}, expected {scope}")
        lanes = self.lanes[scope]
        if ptr.offset % lanes:
            raise CompileError(f"{what}: offset {ptr.offset} in {ptr.data.name} is not a whole {scope} entry "
                               f"({lanes} scalars)")
        return self.sram_base[ptr.data] + ptr.offset // lanes

    def _dram(self, ptr: Pointer, lanes: int, last: int, what: str) -> tuple[int, int]:
        k = self.params.get(ptr.data)
        if k is None:
            raise CompileError(f"{what}: {ptr.data.name} is not a parameter of the function")
        if ptr.offset % lanes:
            raise CompileError(f"{what}: offset {ptr.offset} in {ptr.data.name} is not a multiple of the "
                               f"{lanes}-scalar tile")
        size = ptr.array.size
        if ptr.offset < 0 or ptr.offset + last * lanes > size:
            raise CompileError(f"{what}: reads/writes {ptr.data.name}[{ptr.offset}:{ptr.offset + last * lanes}], "
                               f"outside its {size} scalars")
        return k, ptr.offset // lanes

    # ------------------------------------------------------------------ intrinsics
    def _load(self, mem: int, sram: Pointer, dram: Pointer, y: int, x: int, stride: int,
              y0: int, y1: int, x0: int, x1: int) -> int:
        mem = MemId(mem)
        what = f"load of {dram.data.name} into {sram.data.name}"
        if x <= 0 or y < 0 or (y == 0 and not (y0 or y1)):
            raise CompileError(f"{what}: a {y}x{x} tile lies entirely in the padding; use larger tiles")
        for name, v in (("y_pad_0", y0), ("y_pad_1", y1), ("x_pad_0", x0), ("x_pad_1", x1)):
            if v > _PAD_MAX:
                raise CompileError(f"{what}: {name}={v} exceeds the DMA's maximum padding of {_PAD_MAX}")
        scope = _SCOPE_OF_MEM[mem]
        base = self._sram_index(sram, scope, what)
        k, offset = self._dram(dram, self.lanes[scope], (y - 1) * stride + x, what)
        index = self.builder.load_2d(mem, base, offset, y, x, stride, y_pad_0=y0, y_pad_1=y1, x_pad_0=x0, x_pad_1=x1)
        self.relocations.append(Relocation(index, k, mem))
        return 0

    def _store(self, sram: Pointer, dram: Pointer, y: int, x: int, stride: int) -> int:
        what = f"store of {sram.data.name} to {dram.data.name}"
        base = self._sram_index(sram, ACC_SCOPE, what)
        k, offset = self._dram(dram, self.lanes[ACC_SCOPE], (y - 1) * stride + x, what)
        self.relocations.append(Relocation(self.builder.store_2d(base, offset, y, x, stride), k, MemId.OUT))
        return 0

    def _dep_push(self, src: int, dst: int) -> int:
        self.builder.dep_push(src, dst)        # the builder checks the stages
        return 0

    def _dep_pop(self, src: int, dst: int) -> int:
        self.builder.dep_pop(src, dst)
        return 0

    def _requant_set(self, imm: int) -> int:
        try:
            self.builder.set_requant(int(imm))
        except ProgramError as exc:
            raise CompileError(f"{self.func.name}: {exc}") from exc
        return 0

    def _loop_begin(self, extent: int, dst: int, src: int, wgt: int) -> int:
        if self.kernel is None:
            raise CompileError("vta.uop_loop_begin outside a coproc_uop_scope")
        self.kernel_loops.append((extent, dst, src, wgt))
        return 0

    def _uop_push(self, mode: int, reset: int, dst: Any, src: Any, wgt: Any, alu_op: int, use_imm: int,
                  imm: int) -> int:
        if self.kernel is None:
            raise CompileError("vta.uop_push outside a coproc_uop_scope")
        sig = (mode, reset, alu_op, use_imm, imm)
        if self.kernel_sig is None:
            self.kernel_sig = sig
        elif self.kernel_sig != sig:
            raise CompileError(f"one micro-op kernel mixes different operations {self.kernel_sig} and {sig}")
        what = "GEMM micro-op" if mode == 0 else "ALU micro-op"
        d = self._sram_index(dst, ACC_SCOPE, what)
        if mode == 0:   # (use_imm on a GEMM micro-op: the epilogue bit; a bias reset's src is in ACC)
            bias = reset and use_imm
            s = self._sram_index(src, ACC_SCOPE if bias else INP_SCOPE, what) if isinstance(src, Pointer) else 0
            w = self._sram_index(wgt, WGT_SCOPE, what) if isinstance(wgt, Pointer) else 0
        else:
            s = self._sram_index(src, ACC_SCOPE, what) if isinstance(src, Pointer) else d
            w = 0
        self.kernel.append(isa.Uop(d, s, w))
        return 0

    def _plan_kernel(self, kind: str) -> _KernelCall | None:
        """The GEMM/ALU push of the micro-ops and loops just collected (None for an empty kernel)."""
        if not self.kernel:
            return None
        mode, reset, alu_op, use_imm, imm = self.kernel_sig
        if (mode == 0) != (kind == PUSH_GEMM) or (mode == 1) != (kind == PUSH_ALU):
            raise CompileError(f"a {kind} scope holds micro-ops of mode {mode}")
        env = self.env
        src_scope = INP_SCOPE if mode == 0 and not (reset and use_imm) else ACC_SCOPE
        lanes = (env.lanes(ACC_SCOPE), env.lanes(src_scope), env.lanes(WGT_SCOPE))
        loops = []
        for extent, *factors in self.kernel_loops:
            if not 1 <= extent < 1 << ITER_BITS:
                raise CompileError(f"micro-op loop of extent {extent} does not fit the {ITER_BITS}-bit iteration field")
            for f, n in zip(factors, lanes):
                if f % n:
                    raise CompileError(f"micro-op loop factor {f} scalars is not a whole SRAM entry ({n})")
            loops.append((extent, *(f // n for f, n in zip(factors, lanes))))
        while len(loops) < 2:
            loops.append((1, 0, 0, 0))
        (eo, do, so, wo), (ei, di, si, wi) = loops
        return _KernelCall(mode, tuple(self.kernel), eo, ei, (do, di), (so, si), (wo, wi), bool(reset),
                           AluOp(alu_op) if mode else None,
                           imm if mode and (use_imm or alu_op == AluOp.REQUANT) else None, bool(use_imm),
                           mode == 0 and bool(use_imm))

    def _emit_kernel(self, c: _KernelCall) -> None:
        try:
            if c.mode == 0:
                self.builder.gemm(c.uops, iter_out=c.iter_out, iter_in=c.iter_in, dst_factor=c.dst_factor,
                                  src_factor=c.src_factor, wgt_factor=c.wgt_factor, reset=c.reset,
                                  epilogue=c.epilogue)
            else:
                self.builder.alu(c.alu_op, c.uops, iter_out=c.iter_out, iter_in=c.iter_in, dst_factor=c.dst_factor,
                                 src_factor=c.src_factor, imm=c.imm, use_imm=c.use_imm)
        except ProgramError as exc:
            raise CompileError(f"{self.func.name}: {exc}") from exc


@dataclass(frozen=True)
class _KernelCall:
    """One ``VTAPushGEMMOp``/``VTAPushALUOp``: the micro-op kernel and its two-level loop."""

    mode: int                          # 0 GEMM, 1 ALU
    uops: tuple[isa.Uop, ...]
    iter_out: int
    iter_in: int
    dst_factor: tuple[int, int]
    src_factor: tuple[int, int]
    wgt_factor: tuple[int, int]
    reset: bool
    alu_op: AluOp | None
    imm: int | None                    # the immediate field (an operand, or REQUANT's control bits)
    use_imm: bool = False
    epilogue: bool = False             # GEMM's epilogue bit (BIAS_PRELOAD / GEMM_OUT_REQUANT)


_UNBUILT = object()
_KERNEL_INTRINSICS = {UOP_PUSH, UOP_LOOP_BEGIN, UOP_LOOP_END}


def _kernel_signature(body: ir.Stmt) -> tuple[ir.Var, ...] | None:
    """The free variables of a ``coproc_uop_scope`` body, in a fixed order, when the body only
    computes micro-ops (so equal values give the same kernel, as VTA's runtime caches kernels by
    their signature); None when it does anything else, and it then runs every time."""
    bound: set[ir.Var] = set()
    used: dict[ir.Var, None] = {}
    pure = True

    def visit(n: Any) -> None:
        nonlocal pure
        if isinstance(n, (ir.Allocate, ir.BufferStore, ir.AllReduce)):
            pure = False
        elif isinstance(n, ir.Call) and n.op.startswith("vta.") and n.op not in _KERNEL_INTRINSICS:
            pure = False
        elif isinstance(n, ir.For):
            bound.add(n.loop_var)
        elif isinstance(n, (ir.LetStmt, ir.Let)):
            bound.add(n.var)
        elif isinstance(n, ir.Var):
            used[n] = None

    ir.walk(body, visit)
    return tuple(v for v in used if v not in bound) if pure else None


def generate(func: ir.PrimFunc, env: VTAEnv) -> ProgramTemplate:
    """Run the host part of ``func`` and return the program it issues."""
    return _CodeGen(func, env).generate()


