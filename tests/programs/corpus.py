"""The shared instruction-level program corpus (docs/architecture.md §8): every backend is checked against it.

Each case is a generator ``config -> Case``: a :class:`~vtakit.sim.program.Program` plus the DRAM
bytes it must leave behind, computed with numpy from the ISA description (never by a
simulator). Later backends iterate over :data:`CORPUS` (``name -> config -> Program``) and compare
final DRAM with ``fsim``; the ``fsim`` tests check every case against its expectation.

A generator raises :class:`Unsupported` when a configuration cannot hold the case (for example a
footprint larger than an SRAM); :func:`programs` skips those.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.sim.program import Program

from .asm import Asm, Region, pack_acc, pack_inp, pack_wgt, wrap_i32

__all__ = ["Case", "Expected", "Unsupported", "CASES", "CORPUS", "programs", "alu_reference", "PAD_COMBOS"]


class Unsupported(Exception):
    """The configuration cannot hold this case."""


@dataclass
class Expected:
    """Bytes a region of DRAM must hold after the run."""

    name: str
    addr: int
    data: np.ndarray   # uint8

    @classmethod
    def of(cls, name: str, region: Region, array: np.ndarray) -> "Expected":
        raw = np.frombuffer(np.ascontiguousarray(array).tobytes(), dtype=np.uint8)
        assert raw.size == region.nbytes, (name, raw.size, region.nbytes)
        return cls(name, region.addr, raw)


@dataclass
class Case:
    program: Program
    expected: list[Expected]


# ---------------------------------------------------------------------------- instruction shorthands
def load(mem: MemId, sram: int, dram: int, y: int, x: int, stride: int | None = None,
         pads: tuple[int, int, int, int] = (0, 0, 0, 0), **flags: bool) -> MemInsn:
    return MemInsn(opcode=Opcode.LOAD, memory_type=mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=x if stride is None else stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2],
                   x_pad_1=pads[3], **flags)


def store(sram: int, dram: int, y: int, x: int, stride: int | None = None, **flags: bool) -> MemInsn:
    return MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                   x_stride=x if stride is None else stride, **flags)


def nop(opcode: Opcode, mem: MemId, **flags: bool) -> MemInsn:
    """A token-only no-op (x_size = 0) on the module ``opcode``/``mem`` routes to."""
    return MemInsn(opcode=opcode, memory_type=mem, x_size=0, y_size=0, **flags)


def alu_map(op: AluOp, uops: tuple[int, int], count: int, *, imm: int | None = None, **flags: bool) -> AluInsn:
    """An ALU op over ``count`` consecutive entries, walking dst (and src) with the outer loop."""
    return AluInsn(alu_opcode=op, uop_bgn=uops[0], uop_end=uops[1], iter_out=count, iter_in=1, dst_factor_out=1,
                   src_factor_out=1, use_imm=imm is not None, imm=0 if imm is None else imm, **flags)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _fits(config: VTAConfig, **needs: int) -> None:
    for buffer, entries in needs.items():
        depth = getattr(config, f"{buffer}_depth")
        if entries > depth:
            raise Unsupported(f"needs {entries} {buffer.upper()} entries, {config.model} has {depth}")


def _acc_data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random int32 values across the full range, salted with the extremes."""
    data = rng.integers(-(1 << 31), 1 << 31, size=shape, dtype=np.int64)
    edges = np.array([-(1 << 31), (1 << 31) - 1, -1, 0, 1, 255, -129, 128], dtype=np.int64)
    flat = data.reshape(-1)
    flat[:min(len(edges), flat.size)] = edges[:flat.size]
    return data.astype(np.int32)


# ---------------------------------------------------------------------------- reference semantics
def alu_reference(op: AluOp, a: np.ndarray, b: np.ndarray | int, control: int = 0) -> np.ndarray:
    """The ALU of docs/isa.md written element by element in Python integers, wrapped to int32. For
    REQUANT ``b`` is the addend (0 in the immediate form) and ``control`` the immediate field."""
    a = np.asarray(a, dtype=np.int64)
    b = np.broadcast_to(np.asarray(b, dtype=np.int64), a.shape)
    out = np.empty(a.shape, dtype=np.int64)
    for pos in np.ndindex(a.shape):
        x, y = int(a[pos]), int(b[pos])
        if op == AluOp.MIN:
            r = min(x, y)
        elif op == AluOp.MAX:
            r = max(x, y)
        elif op == AluOp.ADD:
            r = x + y
        elif op == AluOp.SHR:
            s = y & 63
            s = s - 64 if s >= 32 else s
            r = x >> s if s >= 0 else x << -s
        elif op == AluOp.REQUANT:   # shift imm[4:0], ReLU imm[5], rounding imm[6]
            s = control & 31
            t = (x + y + (1 << (s - 1) if control & 64 and s else 0)) & 0xFFFFFFFF
            t = t - (1 << 32) if t >= 1 << 31 else t
            r = min(max(t >> s, 0 if control & 32 else -128), 127)
        else:  # MUL
            m = y & 0xFFFF
            m = m - 0x10000 if m >= 0x8000 else m
            r = x * m
        r &= 0xFFFFFFFF
        out[pos] = r - (1 << 32) if r >= 1 << 31 else r
    return out.astype(np.int32)


# ---------------------------------------------------------------------------- cases
def acc_roundtrip(config: VTAConfig) -> Case:
    """LOAD ACC (strided) -> ALU SHR 0 (the copy that writes OUT) -> STORE: DMA through ACC."""
    asm = Asm(config, "acc_roundtrip")
    rng = _rng(asm.name)
    rows, cols, stride = 3, 2, 3
    src = _acc_data(rng, (rows, stride, config.batch, config.block_out))
    acc = asm.data("acc", src, config.acc_elem_bytes)
    out = asm.space(rows * cols * config.out_elem_bytes, config.out_elem_bytes)
    u = asm.uop_block([Uop(0, 0, 0)])
    asm.emit(load(MemId.UOP, 0, u[0], 1, u[1] - u[0]),
             load(MemId.ACC, 0, acc.elem, rows, cols, stride),
             AluInsn(alu_opcode=AluOp.SHR, uop_bgn=u[0], uop_end=u[1], iter_out=rows, iter_in=cols,
                     dst_factor_out=cols, dst_factor_in=1, use_imm=True, imm=0, push_next=True),
             store(0, out.elem, rows, cols, push_prev=True, pop_prev=True),
             FinishInsn(pop_next=True))
    return Case(asm.program(), [Expected.of("out", out, src[:, :cols].astype(np.int8))])


def acc8_roundtrip(config: VTAConfig) -> Case:
    """LOAD ACC_8BIT sign-extends int8 into ACC; an arithmetic SHR by 1 exposes the sign bits."""
    asm = Asm(config, "acc8_roundtrip")
    rng = _rng(asm.name)
    n = 4
    src = rng.integers(-128, 128, size=(n, config.batch, config.block_out), dtype=np.int64).astype(np.int8)
    src.reshape(-1)[:2] = (-128, -1)
    acc8 = asm.data("acc8", src, config.acc8_elem_bytes)
    out = asm.space(n * config.out_elem_bytes, config.out_elem_bytes)
    u = asm.uop_block([Uop(0, 0, 0)])
    asm.emit(load(MemId.UOP, 0, u[0], 1, 1),
             load(MemId.ACC_8BIT, 0, acc8.elem, 1, n),
             alu_map(AluOp.SHR, u, n, imm=1, push_next=True),
             store(0, out.elem, 1, n, pop_prev=True, push_prev=True),
             FinishInsn(pop_next=True))
    return Case(asm.program(), [Expected.of("out", out, (src.astype(np.int32) >> 1).astype(np.int8))])


PAD_COMBOS = list(itertools.product((0, 1), repeat=4))   # which of y_pad_0, y_pad_1, x_pad_0, x_pad_1 are set


def padded_load(config: VTAConfig, mem: MemId, pads: tuple[int, int, int, int], y: int = 2, x: int = 3,
                name: str | None = None) -> Case:
    """A padded 2-D LOAD of INP (observed through an identity GEMM) or ACC (through ALU SHR 0)."""
    assert mem in (MemId.INP, MemId.ACC)
    asm = Asm(config, name or f"pad_{mem.name.lower()}_{'_'.join(map(str, pads))}")
    rng = _rng(asm.name)
    height, width = pads[0] + y + pads[1], pads[2] + x + pads[3]
    count = height * width
    stride = x + 1
    _fits(config, acc=count, **({"inp": count} if mem == MemId.INP else {}))
    if mem == MemId.INP:
        if config.block_in != config.block_out:
            raise Unsupported("an identity weight needs block_in == block_out")
        values = rng.integers(-128, 128, size=(y, stride, config.batch, config.block_in)).astype(np.int8)
        region = asm.data("inp", values, config.inp_elem_bytes)
        wgt = asm.data("identity", np.eye(config.block_out, dtype=np.int8)[None], config.wgt_elem_bytes)
    else:
        values = _acc_data(rng, (y, stride, config.batch, config.block_out))
        region = asm.data("acc", values, config.acc_elem_bytes)
    expected = np.zeros((height, width, config.batch, config.block_out), dtype=values.dtype)
    expected[pads[0]:pads[0] + y, pads[2]:pads[2] + x] = values[:, :x]
    out = asm.space(count * config.out_elem_bytes, config.out_elem_bytes)
    u = asm.uop_block([Uop(0, 0, 0)])
    asm.emit(load(MemId.UOP, 0, u[0], 1, 1))
    if mem == MemId.INP:
        walk = dict(uop_bgn=u[0], uop_end=u[1], iter_out=count, dst_factor_out=1, src_factor_out=1)
        asm.emit(GemmInsn(reset_reg=True, **walk),
                 load(MemId.WGT, 0, wgt.elem, 1, 1),
                 load(MemId.INP, 0, region.elem, y, x, stride, pads, push_next=True),
                 GemmInsn(pop_prev=True, push_next=True, **walk))
    else:
        asm.emit(load(MemId.ACC, 0, region.elem, y, x, stride, pads),
                 alu_map(AluOp.SHR, u, count, imm=0, push_next=True))
    asm.emit(store(0, out.elem, height, width, pop_prev=True, push_prev=True), FinishInsn(pop_next=True))
    return Case(asm.program(), [Expected.of("out", out, expected.astype(np.int8))])


def gemm_epilogue(config: VTAConfig, blocks: int = 4, shift: int = 3) -> Case:
    """A 4x4-block GEMM with bias, then the requantisation epilogue: SHR, ReLU (MAX 0), clip (MIN 127)."""
    asm = Asm(config, "gemm_epilogue")
    rng = _rng(asm.name)
    mb = kb = nb = blocks
    _fits(config, inp=mb * kb, wgt=nb * kb, acc=mb * nb)
    m, k, n = mb * config.batch, kb * config.block_in, nb * config.block_out
    a = rng.integers(-128, 128, size=(m, k)).astype(np.int8)
    w = rng.integers(-128, 128, size=(n, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, size=(m, n)).astype(np.int32)
    inp = asm.data("inp", pack_inp(a, config), config.inp_elem_bytes)
    wgt = asm.data("wgt", pack_wgt(w, config), config.wgt_elem_bytes)
    acc = asm.data("bias", pack_acc(bias, config), config.acc_elem_bytes)
    out = asm.space(mb * nb * config.out_elem_bytes, config.out_elem_bytes)
    g = asm.uop_block([Uop(0, kk, kk) for kk in range(kb)])
    v = asm.uop_block([Uop(0, 0, 0)])
    asm.emit(load(MemId.UOP, 0, g[0], 1, v[1] - g[0]),
             load(MemId.WGT, 0, wgt.elem, 1, nb * kb),
             load(MemId.INP, 0, inp.elem, 1, mb * kb, push_next=True),
             load(MemId.ACC, 0, acc.elem, 1, mb * nb),
             GemmInsn(uop_bgn=g[0], uop_end=g[1], iter_out=mb, iter_in=nb, dst_factor_out=nb, dst_factor_in=1,
                      src_factor_out=kb, src_factor_in=0, wgt_factor_out=0, wgt_factor_in=kb, pop_prev=True),
             alu_map(AluOp.SHR, v, mb * nb, imm=shift),
             alu_map(AluOp.MAX, v, mb * nb, imm=0),
             alu_map(AluOp.MIN, v, mb * nb, imm=127, push_next=True),
             store(0, out.elem, 1, mb * nb, pop_prev=True, push_prev=True),
             FinishInsn(pop_next=True))
    c = bias.astype(np.int64) + a.astype(np.int64) @ w.astype(np.int64).T
    result = np.clip(wrap_i32(c) >> shift, 0, 127).astype(np.int8)
    return Case(asm.program(), [Expected.of("out", out, pack_acc(result, config).astype(np.int8))])


ALU_IMMEDIATES = {
    AluOp.MIN: (-32768, -1, 0, 77, 32767),
    AluOp.MAX: (-32768, -1, 0, 77, 32767),
    AluOp.ADD: (-32768, -1, 0, 77, 32767),
    AluOp.SHR: (0, 1, 7, 31, -1, -5, -31, -32, 32, 33, 63, -40, 100, -32768, 32767),
    AluOp.MUL: (-32768, -3, -1, 0, 1, 7, 32767),
    # REQUANT's control field (shift 4:0, ReLU 5, rounding 6): no shift, every flag, the widest shift
    AluOp.REQUANT: (0, 0x20, 0x40, 0x47, 0x28, 0x6F, 31, 0x5F, 0x7F, 16),
}
#: REQUANT's control field in the tensor case (shift 9, rounding)
REQUANT_TENSOR_CONTROL = 0x49


def alu_case(config: VTAConfig, op: AluOp, tensor: bool) -> Case:
    """One ALU op over full-range data, with a tensor operand or each immediate in ALU_IMMEDIATES."""
    if op == AluOp.MUL:
        config = config.replace(alu_mul=True)
    if op == AluOp.REQUANT:
        config = config.replace(alu_requant=True)
    asm = Asm(config, f"alu_{op.name.lower()}_{'tensor' if tensor else 'imm'}")
    rng = _rng(asm.name)
    shape = (config.batch, config.block_out)
    n = 3                      # entries per operand block
    copies = 1 if tensor else len(ALU_IMMEDIATES[op])
    _fits(config, acc=n * max(copies, 2))
    x = _acc_data(rng, (n, *shape))
    xr = asm.data("x", x, config.acc_elem_bytes)
    if tensor:
        y = _acc_data(np.random.default_rng(7), (n, *shape))
        if op == AluOp.SHR:   # small shift operands of both signs, plus full-range ones (the low-6-bits rule)
            lanes = shape[0] * shape[1]
            y.reshape(-1)[:2 * lanes] = rng.integers(-40, 40, size=2 * lanes)
        yr = asm.data("y", y, config.acc_elem_bytes)
        u = asm.uop_block([Uop(0, n, 0)])
        out = asm.space(n * config.out_elem_bytes, config.out_elem_bytes)
        control = REQUANT_TENSOR_CONTROL if op == AluOp.REQUANT else 0
        alu = alu_map(op, u, n, push_next=True)
        if op == AluOp.REQUANT:   # the tensor form still reads its control bits from the immediate field
            alu = dataclasses.replace(alu, imm=control)
        asm.emit(load(MemId.UOP, 0, u[0], 1, 1), load(MemId.ACC, 0, xr.elem, 1, n),
                 load(MemId.ACC, n, yr.elem, 1, n), alu)
        expected = alu_reference(op, x, y, control)
    else:
        # copy c of x sits at acc[c*n, (c+1)*n) and gets immediate c; micro-op c points at it
        u = asm.uop_block([Uop(c * n, 0, 0) for c in range(copies)])
        out = asm.space(n * copies * config.out_elem_bytes, config.out_elem_bytes)
        asm.emit(load(MemId.UOP, 0, u[0], 1, copies))
        asm.emit(*(load(MemId.ACC, c * n, xr.elem, 1, n) for c in range(copies)))
        asm.emit(*(alu_map(op, (u[0] + c, u[0] + c + 1), n, imm=imm, push_next=c == copies - 1)
                   for c, imm in enumerate(ALU_IMMEDIATES[op])))
        expected = np.concatenate([alu_reference(op, x, 0, imm) if op == AluOp.REQUANT else alu_reference(op, x, imm)
                                   for imm in ALU_IMMEDIATES[op]])
    asm.emit(store(0, out.elem, 1, n * copies, pop_prev=True, push_prev=True), FinishInsn(pop_next=True))
    return Case(asm.program(), [Expected.of("out", out, expected.astype(np.int8))])


def relu_clip(config: VTAConfig) -> Case:
    """ReLU as MAX 0 then a MIN 127 clip, on full-range accumulators."""
    asm = Asm(config, "relu_clip")
    n = 4
    x = _acc_data(_rng(asm.name), (n, config.batch, config.block_out))
    xr = asm.data("x", x, config.acc_elem_bytes)
    out = asm.space(n * config.out_elem_bytes, config.out_elem_bytes)
    u = asm.uop_block([Uop(0, 0, 0)])
    asm.emit(load(MemId.UOP, 0, u[0], 1, 1), load(MemId.ACC, 0, xr.elem, 1, n),
             alu_map(AluOp.MAX, u, n, imm=0), alu_map(AluOp.MIN, u, n, imm=127, push_next=True),
             store(0, out.elem, 1, n, pop_prev=True, push_prev=True), FinishInsn(pop_next=True))
    return Case(asm.program(), [Expected.of("out", out, np.clip(x, 0, 127).astype(np.int8))])


def blocked_gemm(config: VTAConfig, virtual_threads: int = 1, uop_compression: bool = False) -> Case:
    """VTA's canonical double-buffered blocked GEMM (reference/vta.md §4.3, ``blocked_gemm_test``).

    out = int8(bias + inp . wgt^T) over rows x channels x channels, in square blocks of ``block``;
    with two virtual threads the INP/WGT buffers are split in two and the token pattern lets the
    loads of one thread overlap the GEMMs of the other.
    """
    c = config
    vt = virtual_threads
    block = 2 * max(c.batch, c.block_in, c.block_out)
    rows, channels = 2 * block, 4 * block
    bb, bi, bo = block // c.batch, block // c.block_in, block // c.block_out   # block extents in elements
    inp_block, wgt_block, out_block = bb * bi, bi * bo, bb * bo
    _fits(c, inp=inp_block * vt, wgt=wgt_block * vt, acc=out_block)
    asm = Asm(c, f"blocked_gemm_vt{vt}{'_compressed' if uop_compression else ''}")
    rng = _rng(asm.name)
    a = rng.integers(-128, 128, size=(rows, channels)).astype(np.int8)
    w = rng.integers(-128, 128, size=(channels, channels)).astype(np.int8)
    bias = rng.integers(-(1 << 20), 1 << 20, size=(rows, channels)).astype(np.int32)
    inp = asm.data("inp", pack_inp(a, c), c.inp_elem_bytes)
    wgt = asm.data("wgt", pack_wgt(w, c), c.wgt_elem_bytes)
    acc = asm.data("bias", pack_acc(bias, c), c.acc_elem_bytes)
    out = asm.space(rows // c.batch * channels // c.block_out * c.out_elem_bytes, c.out_elem_bytes)
    # micro-ops per thread t: one per (b, i, o), or one per b with the loops doing (i, o)
    kernels = []
    for t in range(vt):
        if uop_compression:
            uops = [Uop(b * bo, t * inp_block + b * bi, t * wgt_block) for b in range(bb)]
        else:
            uops = [Uop(b * bo + o, t * inp_block + b * bi + i, t * wgt_block + o * bi + i)
                    for b in range(bb) for i in range(bi) for o in range(bo)]
        kernels.append(asm.uop_block(uops))
    asm.emit(load(MemId.UOP, 0, kernels[0][0], 1, kernels[-1][1] - kernels[0][0]))
    in_feat = out_feat = channels
    for i in range(0, rows, block):
        for j in range(0, out_feat, block):
            asm.emit(load(MemId.ACC, 0, acc.elem + (i // c.batch * out_feat + j) // c.block_out, bb, bo,
                          out_feat // c.block_out, pop_next=(i > 0 or j > 0), push_prev=vt == 1))
            for k in range(0, in_feat, block * vt):
                for l in range(0, block * vt, block):
                    t = l // block
                    if vt == 1:
                        pop, push_prev = True, k + l != in_feat - block
                    else:
                        pop = (i > 0 or j > 0 or k > 0 or l > 0) and k + l != block * vt - block
                        push_prev = (k + l != in_feat - vt * block) and (
                            k + l != in_feat - block or j != out_feat - block or i != rows - block)
                    push_next = k + l == in_feat - block
                    asm.emit(load(MemId.WGT, t * wgt_block, wgt.elem + (j // c.block_out * in_feat + k + l) // c.block_in,
                                  bo, bi, in_feat // c.block_in, pop_next=pop),
                             load(MemId.INP, t * inp_block, inp.elem + (i // c.batch * in_feat + k + l) // c.block_in,
                                  bb, bi, in_feat // c.block_in, push_next=True))
                    kb, ke = kernels[t]
                    if uop_compression:
                        gemm = GemmInsn(uop_bgn=kb, uop_end=ke, iter_out=bi, iter_in=bo, dst_factor_out=0,
                                        src_factor_out=1, wgt_factor_out=1, dst_factor_in=1, src_factor_in=0,
                                        wgt_factor_in=bi, pop_prev=True, push_prev=push_prev, push_next=push_next)
                    else:
                        gemm = GemmInsn(uop_bgn=kb, uop_end=ke, pop_prev=True, push_prev=push_prev,
                                        push_next=push_next)
                    asm.emit(gemm)
            asm.emit(store(0, out.elem + (i // c.batch * out_feat + j) // c.block_out, bb, bo,
                           out_feat // c.block_out, pop_prev=True, push_prev=True))
    asm.emit(FinishInsn(pop_next=True))
    result = wrap_i32(bias.astype(np.int64) + a.astype(np.int64) @ w.astype(np.int64).T).astype(np.int8)
    return Case(asm.program(), [Expected.of("out", out, pack_acc(result, c).astype(np.int8))])


def token_burst(config: VTAConfig) -> Case:
    """The load module pushes more than TOKEN_QUEUE_DEPTH tokens before compute pops any (in program order).

    Under fsim's default schedule the load module stalls on the full load->compute queue, and
    fetch on the full load command queue; the program still completes.
    """
    c = config
    # at most token + cmd + 1 pushes can be issued before compute's pops are fetched; more would deadlock
    count = c.token_queue_depth + min(4, c.cmd_queue_depth + 1)
    _fits(c, inp=count, acc=count)
    asm = Asm(c, "token_burst")
    rng = _rng(asm.name)
    x = rng.integers(-128, 128, size=(count, c.batch, c.block_in)).astype(np.int8)
    wv = rng.integers(-128, 128, size=(1, c.block_out, c.block_in)).astype(np.int8)
    inp = asm.data("inp", x, c.inp_elem_bytes)
    wgt = asm.data("wgt", wv, c.wgt_elem_bytes)
    out = asm.space(count * c.out_elem_bytes, c.out_elem_bytes)
    u = asm.uop_block([Uop(k, k, 0) for k in range(count)])
    asm.emit(load(MemId.UOP, 0, u[0], 1, count), GemmInsn(uop_bgn=u[0], uop_end=u[1], reset_reg=True),
             load(MemId.WGT, 0, wgt.elem, 1, 1))
    asm.emit(*(load(MemId.INP, k, inp.elem + k, 1, 1, push_next=True) for k in range(count)))
    asm.emit(*(GemmInsn(uop_bgn=u[0] + k, uop_end=u[0] + k + 1, pop_prev=True, push_next=k == count - 1)
               for k in range(count)))
    asm.emit(store(0, out.elem, 1, count, pop_prev=True, push_prev=True), FinishInsn(pop_next=True))
    prod = np.einsum("kbi,oi->kbo", x.astype(np.int64), wv[0].astype(np.int64))
    return Case(asm.program(), [Expected.of("out", out, prod.astype(np.int8))])


def fetch_burst(config: VTAConfig) -> Case:
    """2 * CMD_QUEUE_DEPTH + 3 single-element STOREs in a row: fetch fills the store command queue."""
    c = config
    count = 2 * c.cmd_queue_depth + 3
    _fits(c, acc=count)
    asm = Asm(c, "fetch_burst")
    x = _acc_data(_rng(asm.name), (count, c.batch, c.block_out))
    xr = asm.data("x", x, c.acc_elem_bytes)
    out = asm.space(count * c.out_elem_bytes, c.out_elem_bytes)
    u = asm.uop_block([Uop(0, 0, 0)])
    asm.emit(load(MemId.UOP, 0, u[0], 1, 1), load(MemId.ACC, 0, xr.elem, 1, count),
             alu_map(AluOp.ADD, u, count, imm=-3, push_next=True))
    # stored in reverse order, each element on its own, so every STORE is a separate command
    asm.emit(*(store(k, out.elem + k, 1, 1, pop_prev=k == count - 1, push_prev=k == 0)
               for k in reversed(range(count))))
    asm.emit(FinishInsn(pop_next=True))
    return Case(asm.program(), [Expected.of("out", out, wrap_i32(x.astype(np.int64) - 3).astype(np.int8))])


# ---------------------------------------------------------------------------- registry
def _pad_cases() -> dict[str, Callable[[VTAConfig], Case]]:
    cases = {}
    values = (1, 2, 3, 2)
    for mem in (MemId.INP, MemId.ACC):
        for combo in PAD_COMBOS:
            pads = tuple(v * on for v, on in zip(values, combo))
            name = f"pad_{mem.name.lower()}_{''.join(map(str, pads))}"
            cases[name] = lambda cfg, m=mem, p=pads, nm=name: padded_load(cfg, m, p, name=nm)
        cases[f"pad_{mem.name.lower()}_x15"] = lambda cfg, m=mem: padded_load(cfg, m, (0, 0, 15, 15), 1, 2,
                                                                             f"pad_{m.name.lower()}_x15")
        cases[f"pad_{mem.name.lower()}_y15"] = lambda cfg, m=mem: padded_load(cfg, m, (15, 15, 0, 0), 2, 1,
                                                                             f"pad_{m.name.lower()}_y15")
        cases[f"pad_{mem.name.lower()}_all15"] = lambda cfg, m=mem: padded_load(cfg, m, (15, 15, 15, 15), 2, 3,
                                                                               f"pad_{m.name.lower()}_all15")
    return cases


CASES: dict[str, Callable[[VTAConfig], Case]] = {
    "acc_roundtrip": acc_roundtrip,
    "acc8_roundtrip": acc8_roundtrip,
    **_pad_cases(),
    "gemm_epilogue": gemm_epilogue,
    **{f"alu_{op.name.lower()}_{kind}": (lambda cfg, o=op, t=(kind == "tensor"): alu_case(cfg, o, t))
       for op in AluOp for kind in ("imm", "tensor")},
    "relu_clip": relu_clip,
    "blocked_gemm_vt1": lambda cfg: blocked_gemm(cfg, 1),
    "blocked_gemm_vt2": lambda cfg: blocked_gemm(cfg, 2),
    "blocked_gemm_vt1_compressed": lambda cfg: blocked_gemm(cfg, 1, uop_compression=True),
    "blocked_gemm_vt2_compressed": lambda cfg: blocked_gemm(cfg, 2, uop_compression=True),
    "token_burst": token_burst,
    "fetch_burst": fetch_burst,
}

CORPUS: dict[str, Callable[[VTAConfig], Program]] = {
    name: (lambda cfg, f=make: f(cfg).program) for name, make in CASES.items()}


def programs(config: VTAConfig) -> Iterator[tuple[str, Case]]:
    """Every case the configuration can hold, by name."""
    for name, make in CASES.items():
        try:
            yield name, make(config)
        except Unsupported:
            continue
