"""A blocked, double-buffered int8 GEMM written directly with ``ProgramBuilder``.

This is the hand-scheduled workload behind ``vtakit bench gemm`` and the simulator benchmarks,
in the spirit of VTA's ``blocked_gemm_test``: ``C = clip((A . W^T) >> shift, -128, 127)`` with A of
shape (M, K) (M = batch rows), W of shape (N, K) (N output channels, stored [out][in] as VTA's
weights) and int8 C; sizes that are not whole blocks are zero-padded (:mod:`vtakit.runtime.packing`),
and ``ideal_macs`` vs ``useful_macs`` says what the padding costs. Output tiles of ``tm x tn`` tensor blocks accumulate over K in chunks of ``tk``
blocks; ``vthreads`` copies of every SRAM buffer are used round-robin with the double-buffer token
protocol (:class:`BufferChannel`), so the loads of one virtual thread overlap the GEMMs of another
and stores overlap the next tile's compute. The requantisation (SHR, MAX, MIN by immediates) runs
on the vector ALU before the store.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from vtakit.errors import AllocationError, ConfigError
from vtakit.hw.config import ITER_BITS, VTAConfig
from vtakit.hw.isa import AluOp, MemId, Stage, Uop
from vtakit.runtime.builder import ProgramBuilder
from vtakit.runtime.device import Device
from vtakit.runtime.packing import blocks, dense_reference, pack_matrix, requantize, unpack_matrix
from vtakit.runtime.pipeline import BufferChannel
from vtakit.sim.program import Program

__all__ = ["GemmTiling", "GemmBenchResult", "plan_gemm", "plan_gemm_threads", "MAX_VTHREADS", "requant_shift",
           "reference_gemm", "build_gemm", "gemm_program", "bench_gemm", "MAX_BENCH_DRAM"]

MAX_BENCH_DRAM = 1 << 30
MAX_VTHREADS = 8                    # SRAM buffer copies the planner splits the buffers into, at most
_FIELD_MAX = (1 << 16) - 1          # y_size, x_size and x_stride are 16-bit fields
_ITER_MAX = (1 << ITER_BITS) - 1


@dataclass(frozen=True)
class GemmTiling:
    """Tile sizes in tensor blocks: tm batch blocks x tn output blocks, reducing tk input blocks."""

    tm: int
    tn: int
    tk: int


@dataclass
class GemmBenchResult:
    """What ``vtakit bench gemm`` reports (``--json`` prints exactly these keys)."""

    correct: bool
    cycles: int | None
    ideal_cycles: int
    utilization: float | None
    sim_seconds: float
    useful_macs: int           # M * N * K: the multiply-accumulates the GEMM asks for
    ideal_macs: int            # what the accelerator does, channels zero-padded to whole blocks
    vthreads: int = 1          # virtual threads the program uses (at most the number asked for)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _largest_divisor(n: int, limit: int) -> int:
    return _divisors(n, max(limit, 1))[-1]


def _blocks(config: VTAConfig, m: int, n: int, k: int) -> tuple[int, int, int]:
    for name, value in (("M", m), ("N", n), ("K", k)):
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ConfigError(f"GEMM size {name}={value!r} must be a positive integer")
    mb, nb, kb = blocks(m, config.batch), blocks(n, config.block_out), blocks(k, config.block_in)
    if kb > _FIELD_MAX or nb > _FIELD_MAX:
        raise ConfigError(f"GEMM too large: K/BLOCK_IN={kb} and N/BLOCK_OUT={nb} must be at most {_FIELD_MAX} "
                          "(16-bit DMA stride field)")
    return mb, nb, kb


def plan_gemm(config: VTAConfig, m: int, n: int, k: int, vthreads: int = 1) -> GemmTiling:
    """Tiles that fit one virtual thread's share of every SRAM, chosen for data reuse.

    A unit of work loads tm x tk INP and tn x tk WGT elements and runs tm * tn * tk micro-ops, so
    GEMM work per loaded byte is tm * tn / (tm * inp_bytes + tn * wgt_bytes) whatever tk is; the
    plan maximises that, then tk (fewer, longer instructions). With several virtual threads it
    first requires two units per thread, so that loads and stores have compute to overlap with.
    """
    if not 1 <= vthreads <= MAX_VTHREADS:
        raise ConfigError(f"vthreads={vthreads} must be between 1 and {MAX_VTHREADS}")
    if vthreads > config.token_queue_depth:
        # In stream order up to `vthreads` tokens wait on load->compute and store->compute;
        # within the queue depth, running the program in stream order never blocks.
        raise ConfigError(f"vthreads={vthreads} needs TOKEN_QUEUE_DEPTH >= {vthreads}, {config.model} has "
                          f"{config.token_queue_depth}")
    mb, nb, kb = _blocks(config, m, n, k)
    inp_cap, wgt_cap = config.inp_depth // vthreads, config.wgt_depth // vthreads
    acc_cap = config.acc_depth // vthreads
    uop_cap = (config.uop_depth - vthreads) // (vthreads * vthreads)
    if min(inp_cap, wgt_cap, acc_cap, uop_cap) < 1:
        raise ConfigError(f"vthreads={vthreads} leaves less than one SRAM entry per thread on {config.model}")
    best: tuple[tuple[bool, float, int], GemmTiling] | None = None
    for tm in _divisors(mb, min(inp_cap, acc_cap, _ITER_MAX)):
        for tn in _divisors(nb, min(wgt_cap, acc_cap // tm, _ITER_MAX)):
            tk = _largest_divisor(kb, min(inp_cap // tm, wgt_cap // tn, uop_cap))
            units = (mb // tm) * (nb // tn) * (kb // tk)
            reuse = tm * tn / (tm * config.inp_elem_bytes + tn * config.wgt_elem_bytes)
            key = (vthreads == 1 or units >= 2 * vthreads, reuse, tk)
            if best is None or key > best[0]:
                best = (key, GemmTiling(tm, tn, tk))
    assert best is not None  # tm = tn = tk = 1 always fits
    return best[1]


def plan_gemm_threads(config: VTAConfig, m: int, n: int, k: int, vthreads: int = 2) -> tuple[int, GemmTiling]:
    """The most virtual threads up to ``vthreads`` that the GEMM can use, and their tiling.

    ``vthreads`` is a maximum, as for the compiled ops (``vtakit bench conv2d|dense``): fewer
    threads are used when TOKEN_QUEUE_DEPTH (or :data:`MAX_VTHREADS`) is smaller, when a thread's
    share of the SRAM would be empty, or when the GEMM has fewer units of work than threads.
    """
    if not isinstance(vthreads, (int, np.integer)) or isinstance(vthreads, bool) or vthreads < 1:
        raise ConfigError(f"vthreads={vthreads!r} must be a positive integer (the most virtual threads to use)")
    mb, nb, kb = _blocks(config, m, n, k)
    for threads in range(min(int(vthreads), MAX_VTHREADS, config.token_queue_depth), 1, -1):
        try:
            tiling = plan_gemm(config, m, n, k, threads)
        except ConfigError:  # this many threads leave a buffer share empty: try fewer
            continue
        if (mb // tiling.tm) * (nb // tiling.tn) * (kb // tiling.tk) >= threads:
            return threads, tiling
    return 1, plan_gemm(config, m, n, k, 1)


def requant_shift(k: int) -> int:
    """A right shift that keeps typical int8 x int8 dot products of length k near the int8 range."""
    return 6 + math.ceil(math.log2(k) / 2)


def reference_gemm(a: np.ndarray, w: np.ndarray, shift: int) -> np.ndarray:
    """numpy golden model: int32 GEMM (wrapping), arithmetic shift, clip to int8."""
    return requantize(dense_reference(a, w), None, shift, (-128, 127))


# ---------------------------------------------------------------------------- program
def build_gemm(builder: ProgramBuilder, a: Any, w: Any, c: Any, m: int, n: int, k: int, *,
               vthreads: int = 1, shift: int | None = None, tiling: GemmTiling | None = None) -> None:
    """Emit the blocked GEMM into ``builder``; ``a``/``w``/``c`` are packed DRAM arrays
    (:func:`~vtakit.runtime.packing.pack_matrix`, sizes padded to whole blocks)."""
    config = builder.config
    mb, nb, kb = _blocks(config, m, n, k)
    t = tiling or plan_gemm(config, m, n, k, vthreads)
    shift = requant_shift(k) if shift is None else shift
    inp_part, wgt_part = config.inp_depth // vthreads, config.wgt_depth // vthreads
    acc_part = config.acc_depth // vthreads
    tiles = [(mo, no) for mo in range(0, mb, t.tm) for no in range(0, nb, t.tn)]
    chunks = kb // t.tk
    units = len(tiles) * chunks
    loads = BufferChannel(builder, Stage.LOAD, Stage.COMPUTE, units, vthreads)
    outs = BufferChannel(builder, Stage.COMPUTE, Stage.STORE, len(tiles), vthreads)
    # A factor of a loop that runs once is irrelevant; zero it so it cannot overflow its field
    # (tk may equal a whole SRAM depth when the other tile dimension is 1).
    out_f, in_f = int(t.tm > 1), int(t.tn > 1)
    tile_loop = dict(iter_out=t.tm, iter_in=t.tn, dst_factor=(t.tn * out_f, in_f))

    def load(unit: int) -> None:
        (mo, no), ko = tiles[unit // chunks], (unit % chunks) * t.tk
        buf = loads.buffer(unit)
        loads.acquire(unit)
        builder.load_2d(MemId.INP, buf * inp_part, a, t.tm, t.tk, kb, offset=mo * kb + ko)
        builder.load_2d(MemId.WGT, buf * wgt_part, w, t.tn, t.tk, kb, offset=no * kb + ko)
        loads.produced(unit)

    for unit in range(min(vthreads, units)):       # prefetch: one unit per thread
        load(unit)
    for unit in range(units):
        tile, chunk = divmod(unit, chunks)
        (mo, no), buf, acc = tiles[tile], loads.buffer(unit), outs.buffer(tile) * acc_part
        loads.consume(unit)
        if chunk == 0:
            outs.acquire(tile)
            builder.gemm([Uop(acc)], reset=True, **tile_loop)
        builder.gemm([Uop(acc, buf * inp_part + kk, buf * wgt_part + kk) for kk in range(t.tk)],
                     src_factor=(t.tk * out_f, 0), wgt_factor=(0, t.tk * in_f), **tile_loop)
        loads.release(unit)
        if unit + vthreads < units:
            load(unit + vthreads)
        if chunk == chunks - 1:
            for op, imm in ((AluOp.SHR, shift), (AluOp.MAX, -128), (AluOp.MIN, 127)):
                builder.alu(op, [Uop(acc)], imm=imm, **tile_loop)
            outs.produced(tile)
            outs.consume(tile)
            builder.store_2d(acc, c, t.tm, t.tn, nb, offset=mo * nb + no)
            outs.release(tile)


def bench_gemm(m: int = 256, n: int = 256, k: int = 256, *, config: VTAConfig | None = None,
               backend: str = "fsim", vthreads: int = 2, seed: int = 0) -> GemmBenchResult:
    """Build the blocked GEMM on a fresh device, run it, check it against numpy. ``vthreads`` is
    the most virtual threads to use (:func:`plan_gemm_threads`); the result says how many were."""
    config = VTAConfig() if config is None else config
    vthreads, tiling = plan_gemm_threads(config, m, n, k, vthreads)
    mb, nb, kb = _blocks(config, m, n, k)
    pm, pn, pk = mb * config.batch, nb * config.block_out, kb * config.block_in   # zero-padded to blocks
    need = pm * pk + pn * pk + pm * pn + 4 * config.uop_depth
    if need > MAX_BENCH_DRAM:
        raise AllocationError(f"GEMM {m}x{n}x{k} needs about {need} bytes of device DRAM, more than the "
                              f"{MAX_BENCH_DRAM} byte limit of the benchmark")
    device = Device(config, backend, dram_size=need + (8 << 20))
    rng = np.random.default_rng(seed)
    a_host = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    w_host = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    a = device.array(pack_matrix(a_host, config.batch, config.block_in), name="A")
    w = device.array(pack_matrix(w_host, config.block_out, config.block_in), name="W")
    c = device.empty((mb, nb, config.batch, config.block_out), np.int8, name="C")
    builder = ProgramBuilder(config, device, name=f"gemm_{m}x{n}x{k}_vt{vthreads}")
    build_gemm(builder, a, w, c, m, n, k, vthreads=vthreads, tiling=tiling)
    program = builder.finish()
    stats = device.run(program)
    got = unpack_matrix(c.numpy(), (m, n))
    correct = bool(np.array_equal(got, reference_gemm(a_host, w_host, requant_shift(k))))
    return GemmBenchResult(correct, stats.cycles, stats.ideal_cycles, stats.utilization, stats.sim_seconds,
                           m * n * k, stats.ideal_cycles * config.macs_per_cycle, vthreads)


def gemm_program(config: VTAConfig, m: int, n: int, k: int, *, vthreads: int = 1, seed: int = 0) -> Program:
    """A self-contained GEMM program (random A and W as segments) for corpora and differential tests."""
    builder = ProgramBuilder(config, name=f"gemm_{m}x{n}x{k}_vt{vthreads}")
    rng = np.random.default_rng(seed)
    mb, nb, _ = _blocks(config, m, n, k)
    a = builder.array(pack_matrix(rng.integers(-128, 128, size=(m, k), dtype=np.int8), config.batch,
                                  config.block_in), name="A")
    w = builder.array(pack_matrix(rng.integers(-128, 128, size=(n, k), dtype=np.int8), config.block_out,
                                  config.block_in), name="W")
    c = builder.empty((mb, nb, config.batch, config.block_out), np.int8, name="C")
    build_gemm(builder, a, w, c, m, n, k, vthreads=vthreads)
    return builder.finish()

