"""Seeded random programs that are valid by construction, for differential testing.

``random_program(config, seed, **limits)`` returns a :class:`Program` that the functional
simulator accepts (legal, token-balanced, race-free, no uninitialised or out-of-range access, no
deadlock) and that exercises the whole ISA: every legal opcode/memory pair and token-only no-ops
of every memory type, padding and strides, two-level loops with all six index factors, tensor and
immediate ALU operations (negative and out-of-range shifts; MUL and REQUANT when the config has them; bias
resets, requantising GEMM write-backs and REQUANT register sets with BIAS_PRELOAD / GEMM_OUT_REQUANT), 1..3
virtual threads, token queues pushed past their depth and long single-module runs that fill a
command queue. ``coverage(program)`` names the features a program exercises.

How validity is guaranteed:

* Work is a sequence of tasks (load -> compute -> store). Task ``u`` belongs to virtual thread
  ``u % T`` and uses only that thread's partition of INP, WGT, ACC and OUT, so threads never share
  SRAM entries. Two :class:`BufferChannel` s (load/compute over INP+WGT, compute/store over OUT)
  give the happens-before edges of double buffering. Every pop is matched with a push earlier in
  the instruction stream and, read in stream order, no queue ever holds more than
  TOKEN_QUEUE_DEPTH tokens (prefetched loads and delayed stores stay within bounds derived from
  it), so executing the program in stream order never blocks: it cannot deadlock.
* Reads are drawn only from entries known to be written: per-thread bitmaps track INP/WGT written
  by loads, ACC written by ACC loads, resets, GEMMs and ALU ops, and OUT written by GEMM/ALU (LOAD
  ACC does not write OUT). Loops are sampled so that every index they generate stays in a
  partition and hits written entries.
* DRAM inputs (INP, WGT, ACC, ACC_8BIT data) and the output area are disjoint, so loads and stores
  never touch the same bytes; stores may overwrite each other's output (same module, in order).
* Token storms (more pushes than the queue holds, then the pops) are placed only at the start and
  the end, where no token is outstanding, and hold DEPTH + CMD_QUEUE_DEPTH + 1 tokens: the pusher
  stalls on the full queue in every schedule, its remaining no-ops fit its command queue, and
  fetch reaches the pops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vtakit.errors import ConfigError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, GemmInsn, MemId, MemInsn, Opcode, Stage, Uop, requant_imm
from vtakit.runtime.builder import ProgramBuilder
from vtakit.runtime.pipeline import BufferChannel
from vtakit.sim.program import Program

__all__ = ["RandomLimits", "random_program", "coverage", "save_failure"]

_QUEUES = ((Stage.LOAD, Stage.COMPUTE), (Stage.COMPUTE, Stage.LOAD),
           (Stage.COMPUTE, Stage.STORE), (Stage.STORE, Stage.COMPUTE))
_PUSH_FLAG = {q: ("push_next" if q[0] < q[1] else "push_prev") for q in _QUEUES}
_POP_FLAG = {q: ("pop_prev" if q[0] < q[1] else "pop_next") for q in _QUEUES}
_NOP_MEMS = {Stage.LOAD: (MemId.INP, MemId.WGT),
             Stage.COMPUTE: (MemId.UOP, MemId.ACC, MemId.ACC_8BIT, MemId.OUT),
             Stage.STORE: tuple(MemId)}
_SRC_ELEMS = 96           # elements in each random DRAM input array
_OUT_ELEMS = 256          # elements in the output area (stores wrap around it)
_PART_CAP = 96            # SRAM entries used per thread and buffer, to keep programs small


@dataclass(frozen=True)
class RandomLimits:
    """Size limits of a random program."""

    max_insns: int = 200        # total instructions, FINISH included (keeps RTL runs short)
    max_tasks: int = 8          # load -> compute -> store tasks
    vthreads: int | None = None  # virtual threads; None draws 1..3
    max_uops: int = 4           # micro-ops per kernel
    max_iter: int = 3           # iter_out / iter_in
    max_ops: int = 5            # compute operations per task
    storm_probability: float = 0.5   # chance of a token storm at the start and at the end

    def __post_init__(self) -> None:
        for name in ("max_tasks", "max_uops", "max_iter", "max_ops"):
            if getattr(self, name) < 1:
                raise ConfigError(f"random program limit {name}={getattr(self, name)} must be at least 1")
        if self.max_insns < 32:
            raise ConfigError(f"random program limit max_insns={self.max_insns} must be at least 32")
        if self.vthreads is not None and not 1 <= self.vthreads <= 3:
            raise ConfigError(f"random program limit vthreads={self.vthreads} must be 1, 2 or 3")
        if not 0.0 <= self.storm_probability <= 1.0:
            raise ConfigError(f"storm_probability={self.storm_probability} must be in [0, 1]")


@dataclass
class _Loop:
    """A micro-op kernel with its loop, and the ACC entries (absolute) it writes."""

    uops: list[Uop]
    iter_out: int
    iter_in: int
    factors: list[tuple[int, int]]   # (out, in) per index kind: dst[, src[, wgt]]
    written: list[int]


@dataclass
class _Thread:
    """What one virtual thread has written in its SRAM partitions (offsets within the partition)."""

    inp: np.ndarray
    wgt: np.ndarray
    acc: np.ndarray
    out: np.ndarray


class _Generator:
    """One random program: the builder, each thread's SRAM windows and what has been written."""

    def __init__(self, config: VTAConfig, seed: int, limits: RandomLimits) -> None:
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.limits = limits
        # Stream-order outstanding tokens must stay within the token queues (see generate()).
        most = min(3, 2 * config.token_queue_depth - 1)
        if limits.vthreads is not None and limits.vthreads > most:
            raise ConfigError(f"vthreads={limits.vthreads} needs TOKEN_QUEUE_DEPTH >= {(limits.vthreads + 2) // 2}, "
                              f"{config.model} has {config.token_queue_depth}")
        self.threads = limits.vthreads or int(self.rng.integers(1, most + 1))
        self.b = ProgramBuilder(config, name=f"random-{seed}-vt{self.threads}")
        t = self.threads
        self.parts = {"inp": min(config.inp_depth // t, _PART_CAP), "wgt": min(config.wgt_depth // t, _PART_CAP),
                      "acc": min(config.acc_depth // t, _PART_CAP)}
        if min(self.parts.values()) < 1:
            raise ConfigError(f"{config.model} has too little SRAM for {t} virtual threads")
        # Each thread's window sits at a random place inside its share, so high SRAM addresses are used.
        share = {"inp": config.inp_depth // t, "wgt": config.wgt_depth // t, "acc": config.acc_depth // t}
        self.base = {k: [i * share[k] + int(self.rng.integers(0, share[k] - self.parts[k] + 1)) for i in range(t)]
                     for k in share}
        # OUT has ACC's depth and indices: the same window tracks both.
        self.state = [_Thread(inp=np.zeros(self.parts["inp"], bool), wgt=np.zeros(self.parts["wgt"], bool),
                              acc=np.zeros(self.parts["acc"], bool), out=np.zeros(self.parts["acc"], bool))
                      for _ in range(t)]
        r = self.rng
        cfg = config
        self.src = {
            MemId.INP: self.b.array(r.integers(-128, 128, (_SRC_ELEMS, cfg.batch, cfg.block_in), np.int8), name="inp"),
            MemId.WGT: self.b.array(r.integers(-128, 128, (_SRC_ELEMS, cfg.block_out, cfg.block_in), np.int8),
                                    name="wgt"),
            MemId.ACC: self.b.array(r.integers(-2**31, 2**31, (_SRC_ELEMS, cfg.batch, cfg.block_out), np.int32),
                                    name="acc"),
            MemId.ACC_8BIT: self.b.array(r.integers(-128, 128, (_SRC_ELEMS, cfg.batch, cfg.block_out), np.int8),
                                         name="acc8"),
        }
        self.out = self.b.empty((_OUT_ELEMS, cfg.batch, cfg.block_out), np.int8, name="out")
        self.out_cursor = 0

    # ------------------------------------------------------------------ helpers
    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, lo: int, hi: int) -> int:
        """Uniform integer in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    def nop(self, stage: Stage) -> None:
        mems = _NOP_MEMS[stage]
        opcode = Opcode.STORE if stage == Stage.STORE else Opcode.LOAD
        self.b.append(MemInsn(opcode=opcode, memory_type=mems[self.pick(0, len(mems) - 1)], x_size=0,
                              y_size=self.pick(0, 3), x_stride=self.pick(0, 3)))

    # ------------------------------------------------------------------ token storms
    def storm(self) -> None:
        """Push DEPTH + CMD_QUEUE_DEPTH + 1 tokens on one queue, then pop them.

        Fetch can dispatch the first pop only once the pusher has started its (DEPTH+1)-th push,
        so the pusher stalls on a full token queue in every schedule, while its remaining no-ops
        still fit its command queue (no deadlock).
        """
        depth, cmd = self.config.token_queue_depth, self.config.cmd_queue_depth
        queue = _QUEUES[self.pick(0, 3)]
        count = depth + cmd + 1
        for _ in range(count):
            self.b.dep_push(*queue)
        for _ in range(count):
            self.b.dep_pop(*queue)
        self.b.commit_pending_pops(queue[1])

    def storm_size(self) -> int:
        return 2 * (self.config.token_queue_depth + self.config.cmd_queue_depth + 1) + 1

    # ------------------------------------------------------------------ DMA
    def _dims(self, room: int) -> tuple[int, int, tuple[int, int, int, int]]:
        """Random (y, x, pads) whose padded footprint fits ``room`` (>= 1) entries."""
        for _ in range(20):
            y, x = self.pick(1, 4), self.pick(1, 8)
            pads = (0, 0, 0, 0)
            if self.chance(0.5):
                pads = tuple(self.pick(0, 2) if self.chance(0.5) else 0 for _ in range(4))
                if self.chance(0.15):
                    big = list(pads)
                    big[self.pick(0, 3)] = self.pick(8, 15)
                    pads = tuple(big)
            if (pads[0] + y + pads[1]) * (pads[2] + x + pads[3]) <= room:
                return y, x, pads
        return 1, 1, (0, 0, 0, 0)

    def load(self, mem: MemId, thread: int) -> None:
        """A padded, strided 2-D load into a random place of the thread's partition."""
        kind = {MemId.INP: "inp", MemId.WGT: "wgt", MemId.ACC: "acc", MemId.ACC_8BIT: "acc"}[mem]
        part = self.parts[kind]
        y, x, (yp0, yp1, xp0, xp1) = self._dims(part)
        footprint = (yp0 + y + yp1) * (xp0 + x + xp1)
        start = self.pick(0, part - footprint)
        roll = self.rng.random()
        stride = x if roll < 0.4 else self.pick(x + 1, x + 4) if roll < 0.9 else self.pick(0, x)
        offset = self.pick(0, _SRC_ELEMS - ((y - 1) * stride + x))
        self.b.load_2d(mem, self.base[kind][thread] + start, self.src[mem], y, x, stride, offset=offset,
                       y_pad_0=yp0, y_pad_1=yp1, x_pad_0=xp0, x_pad_1=xp1)
        getattr(self.state[thread], kind)[start:start + footprint] = True

    def store(self, thread: int) -> bool:
        """Store a run of written OUT entries as a 2-D block; False when there is none."""
        written = self.state[thread].out
        runs = _runs(written)
        if not runs:
            return False
        start, length = runs[self.pick(0, len(runs) - 1)]
        x = self.pick(1, min(length, 8))
        y = self.pick(1, min(length // x, 4))
        begin = start + self.pick(0, length - x * y)
        stride = x if self.chance(0.5) else self.pick(x, x + 4)
        extent = (y - 1) * stride + x
        if self.out_cursor + extent > _OUT_ELEMS:
            self.out_cursor = 0
        self.b.store_2d(self.base["acc"][thread] + begin, self.out, y, x, stride, offset=self.out_cursor)
        self.out_cursor += extent
        return True

    # ------------------------------------------------------------------ compute
    def loop(self, masks: list[np.ndarray], bases: list[int]) -> _Loop | None:
        """A random micro-op kernel and two-level loop whose indices stay in the windows.

        ``masks[i]`` are the allowed entries of index kind i (dst, src, wgt) within a window and
        ``bases[i]`` the window's SRAM address. None when nothing fits.
        """
        lim = self.limits
        for attempt in range(12):
            shrink = attempt >= 6
            io = 1 if shrink else self.pick(1, lim.max_iter)
            ii = 1 if shrink else self.pick(1, lim.max_iter)
            factors = [(0, 0) if shrink else (self.pick(0 if self.chance(0.3) else 1, 3),
                                               self.pick(0 if self.chance(0.3) else 1, 3)) for _ in masks]
            offsets = [np.array(sorted({i * fo + j * fi for i in range(io) for j in range(ii)}))
                       for fo, fi in factors]
            starts = []
            for mask, offs in zip(masks, offsets):
                span = int(offs[-1])
                if span >= mask.size:
                    starts = None
                    break
                ok = np.ones(mask.size - span, bool)
                for o in offs:
                    ok &= mask[o:o + mask.size - span]
                starts.append(np.flatnonzero(ok))
                if not starts[-1].size:
                    starts = None
                    break
            if starts is None:
                continue
            n = self.pick(1, lim.max_uops)
            picks = [[int(s[self.pick(0, s.size - 1)]) + base for _ in range(n)] for s, base in zip(starts, bases)]
            uops = [Uop(*([p[k] for p in picks] + [0] * (3 - len(picks)))) for k in range(n)]
            written = sorted({p + int(o) for p in picks[0] for o in offsets[0]})
            return _Loop(uops, io, ii, factors, written)
        return None

    def compute_op(self, thread: int) -> None:
        """One random compute instruction (with its LOAD UOP when the kernel is new) on the thread's windows."""
        st = self.state[thread]
        acc_base = self.base["acc"][thread]
        choice = self.rng.random()
        if choice < 0.15 or not st.acc.any():              # initialise ACC: load it or reset it
            if self.chance(0.4):
                self.load(MemId.ACC if self.chance(0.6) else MemId.ACC_8BIT, thread)
                return
            if self.config.bias_preload and st.acc.any() and self.chance(0.5):   # a bias reset: dst = acc[src]
                spec = self.loop([np.ones(self.parts["acc"], bool), st.acc], [acc_base, acc_base])
                if spec is None:
                    return
                self.b.gemm(spec.uops, iter_out=spec.iter_out, iter_in=spec.iter_in, dst_factor=spec.factors[0],
                            src_factor=spec.factors[1], reset=True, epilogue=True)
            else:
                spec = self.loop([np.ones(self.parts["acc"], bool)], [acc_base])
                if spec is None:
                    return
                self.b.gemm([Uop(u.dst_idx) for u in spec.uops], iter_out=spec.iter_out, iter_in=spec.iter_in,
                            dst_factor=spec.factors[0], reset=True)
        elif choice < 0.55 and st.inp.any() and st.wgt.any():
            spec = self.loop([st.acc, st.inp, st.wgt], [acc_base, self.base["inp"][thread], self.base["wgt"][thread]])
            if spec is None:
                return
            dst, src, wgt = spec.factors
            if self.config.gemm_out_requant and self.chance(0.2):   # set the requant register first
                self.b.set_requant(requant_imm(self.pick(0, 31), self.chance(0.5), self.chance(0.5)))
            self.b.gemm(spec.uops, iter_out=spec.iter_out, iter_in=spec.iter_in, dst_factor=dst, src_factor=src,
                        wgt_factor=wgt, epilogue=self.config.gemm_out_requant and self.chance(0.5))
        elif choice < 0.95:
            ops = ([AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR] + ([AluOp.MUL] if self.config.alu_mul else [])
                   + ([AluOp.REQUANT] if self.config.alu_requant else []))
            op = ops[self.pick(0, len(ops) - 1)]
            use_imm = self.chance(0.5)
            spec = self.loop([st.acc] * (1 if use_imm else 2), [acc_base] * (1 if use_imm else 2))
            if spec is None:
                return
            imm = None
            if op == AluOp.REQUANT:   # the control field in both forms: every shift, ReLU and rounding
                imm = requant_imm(self.pick(0, 31), self.chance(0.5), self.chance(0.5))
            elif use_imm:   # shifts mostly near the legal range, including negative and out-of-range amounts
                imm = (self.pick(-40, 40) if op == AluOp.SHR and self.chance(0.8)
                       else self.pick(-(1 << 15), (1 << 15) - 1))
            self.b.alu(op, spec.uops, iter_out=spec.iter_out, iter_in=spec.iter_in, dst_factor=spec.factors[0],
                       src_factor=(0, 0) if use_imm else spec.factors[1], imm=imm, use_imm=use_imm)
        else:
            self.nop(Stage.COMPUTE)
            return
        for index in spec.written:
            st.acc[index - acc_base] = True
            st.out[index - acc_base] = True

    # ------------------------------------------------------------------ tasks
    def task_bound(self) -> int:
        """Most instructions one task can emit."""
        loads = max(self.config.cmd_queue_depth + 2, 5) + 2
        return loads + (2 * self.limits.max_ops + 3) + 6

    def emit_load(self, unit: int, channel: BufferChannel) -> None:
        thread = unit % self.threads
        channel.acquire(unit)
        if self.chance(0.2):           # a long run of loads: fills the command queue if the pop waits
            for _ in range(self.config.cmd_queue_depth + 2):
                self.load(MemId.INP if self.chance(0.5) else MemId.WGT, thread)
        else:
            for mem, written in ((MemId.INP, self.state[thread].inp), (MemId.WGT, self.state[thread].wgt)):
                for _ in range(self.pick(0 if written.any() else 1, 2)):
                    self.load(mem, thread)
            if self.chance(0.2):
                self.nop(Stage.LOAD)
        channel.produced(unit)

    def emit_compute(self, unit: int, loads: BufferChannel, outs: BufferChannel) -> None:
        thread = unit % self.threads
        loads.consume(unit)
        outs.acquire(unit)
        for _ in range(self.pick(1, self.limits.max_ops)):
            self.compute_op(thread)
        loads.release(unit)
        outs.produced(unit)

    def emit_store(self, unit: int, outs: BufferChannel) -> None:
        thread = unit % self.threads
        outs.consume(unit)
        for _ in range(self.pick(1, 2)):
            if not self.store(thread) or self.chance(0.15):
                self.nop(Stage.STORE)
        outs.release(unit)

    def generate(self) -> Program:
        lim = self.limits
        storms = [self.chance(lim.storm_probability) for _ in range(2)]
        reserve = 8 + sum(storms) * self.storm_size()
        budget = lim.max_insns - reserve
        if budget < self.task_bound():
            storms, budget = [False, False], lim.max_insns - 8
        units = max(1, min(lim.max_tasks, budget // self.task_bound()))
        # Loads run ``ahead`` tasks early and stores ``delay`` tasks late. In stream order that
        # leaves up to ahead+1 (L->C), T-ahead (C->L), delay+1 (C->S) and T-delay (S->C) tokens
        # outstanding; keeping those within TOKEN_QUEUE_DEPTH keeps the program deadlock-free
        # whatever the command queue depth (executing it in stream order never blocks).
        t, depth = self.threads, self.config.token_queue_depth
        ahead = self.pick(max(0, t - depth), min(t - 1, depth - 1))
        delay = self.pick(max(0, t - depth), min(t - 1, depth - 1))
        loads = BufferChannel(self.b, Stage.LOAD, Stage.COMPUTE, units, t)
        outs = BufferChannel(self.b, Stage.COMPUTE, Stage.STORE, units, t)
        if storms[0]:
            self.storm()
        for unit in range(min(ahead + 1, units)):
            self.emit_load(unit, loads)
        for unit in range(units):
            self.emit_compute(unit, loads, outs)
            if unit - delay >= 0:
                self.emit_store(unit - delay, outs)
            if unit + ahead + 1 < units:
                self.emit_load(unit + ahead + 1, loads)
        for unit in range(max(0, units - delay), units):
            self.emit_store(unit, outs)
        if storms[1]:
            self.storm()
        program = self.b.finish()
        assert len(program.insns) <= lim.max_insns, (len(program.insns), lim)
        return program


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs of True as (start, length)."""
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2])]


def random_program(config: VTAConfig | None = None, seed: int = 0, **limits: object) -> Program:
    """A valid random program for ``config`` (default: VTA's), reproducible from ``seed``.

    ``limits`` are the fields of :class:`RandomLimits` (``max_insns``, ``max_tasks``,
    ``vthreads``, ``max_uops``, ``max_iter``, ``max_ops``, ``storm_probability``).
    """
    config = VTAConfig() if config is None else config
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"random program seed={seed!r} must be a non-negative integer")
    known = {f.name for f in dataclasses.fields(RandomLimits)}
    unknown = sorted(set(limits) - known)
    if unknown:
        raise ConfigError(f"unknown random program limit(s) {unknown}; expected some of {sorted(known)}")
    return _Generator(config, seed, RandomLimits(**limits)).generate()  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- coverage
def coverage(program: Program) -> set[str]:
    """The ISA features ``program`` exercises (names as used by the coverage test).

    Besides instruction kinds, two queue features are read from the stream order:
    ``token_queue_overflow`` -- more than TOKEN_QUEUE_DEPTH pushes on a queue precede the pops that
    free them, so the pusher must wait on a full queue; ``command_queue_overflow`` -- an
    instruction that pops is followed by more than CMD_QUEUE_DEPTH instructions of its own module,
    so fetch stalls on the full command queue whenever that pop has to wait.
    """
    config = program.config
    features: set[str] = set()
    outstanding = dict.fromkeys(_QUEUES, 0)
    run_module, run_length, run_starts_with_pop = None, 0, False
    for insn in program.insns:
        stage = isa.stage_of(insn)
        if isinstance(insn, MemInsn):
            prefix = insn.opcode.name.lower()
            if insn.x_size == 0:
                features.add(f"nop.{prefix}.{insn.memory_type.name}")
            else:
                features.add(f"{prefix}.{insn.memory_type.name}")
                for name in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1"):
                    if getattr(insn, name):
                        features.add(f"pad.{name}")
                if insn.y_size > 1 and insn.x_stride > insn.x_size:
                    features.add(f"stride.{prefix}")
        elif isinstance(insn, GemmInsn):
            features.add("gemm.reset" if insn.reset_reg else "gemm")
            if insn.epilogue:
                features.add("gemm.bias" if insn.reset_reg else "gemm.requant_out")
            factors = (insn.dst_factor_out, insn.dst_factor_in, insn.src_factor_out, insn.src_factor_in,
                       insn.wgt_factor_out, insn.wgt_factor_in)
            if not insn.reset_reg and insn.iter_out > 1 and insn.iter_in > 1 and all(factors):
                features.add("gemm.all_factors")
        elif isinstance(insn, AluInsn):
            features.add(f"alu.{insn.alu_opcode.name}.{'imm' if insn.use_imm else 'tensor'}")
            if insn.uop_end <= insn.uop_bgn and insn.alu_opcode == AluOp.REQUANT:
                features.add("alu.REQUANT.set")
            if insn.use_imm and insn.alu_opcode == AluOp.SHR and insn.imm < 0:
                features.add("alu.SHR.negative")
            if insn.iter_out > 1 and insn.iter_in > 1 and insn.dst_factor_out and insn.dst_factor_in:
                features.add("alu.loop")
        for queue in _QUEUES:
            if getattr(insn, _PUSH_FLAG[queue]) and stage == queue[0]:
                outstanding[queue] += 1
                if outstanding[queue] > config.token_queue_depth:
                    features.add("token_queue_overflow")
            if getattr(insn, _POP_FLAG[queue]) and stage == queue[1]:
                outstanding[queue] -= 1
        pops = insn.pop_prev or insn.pop_next
        if stage == run_module:
            run_length += 1
        else:
            run_module, run_length, run_starts_with_pop = stage, 1, bool(pops)
        if run_starts_with_pop and run_length > config.cmd_queue_depth + 1:
            features.add("command_queue_overflow")
    return features


def save_failure(program: Program, directory: str | Path) -> Path:
    """Save a program that failed a check as ``<directory>/<name>.vtaprog`` for replay with
    ``vtakit run-program``; returns the path."""
    path = Path(directory) / f"{program.name or 'program'}.vtaprog"
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(path)
    return path
