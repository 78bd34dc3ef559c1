"""Default tilings: the knob values that fit the SRAMs and minimise a simple cycle estimate.

The estimate follows the timing contract (docs/timing.md) coarsely: one GEMM/ALU micro-op per
cycle, DMA at BUS_WIDTH bits per cycle plus a latency per transfer. With one thread loads and
compute alternate; with several, loads of one thread overlap the compute of another, so a tile
costs the maximum of its compute and its loads. It only ranks candidates; the cycle simulator
measures.
"""

from __future__ import annotations

import itertools

from vtakit.compiler.topi_vta.knobs import Conv2dKnobs, DenseKnobs, conv2d_blocks, dense_blocks
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import VTAEnv
from vtakit.errors import CompileError
from vtakit.hw.config import ITER_BITS, VTAConfig
from vtakit.hw.pipeline import finish_delay

__all__ = ["choose_conv2d_tiles", "choose_dense_tiles", "divisors", "insn_overhead"]

_DMA_LATENCY = 40       # cycles per DMA instruction beyond its beats (request + DRAM latency)
_EPILOGUE_OPS = 4       # shift, bias, max, min (one REQUANT with ALU_REQUANT)
_LOAD_MARGIN = 1.5      # overlapped loads must leave slack: threads and fetch share the DRAM port


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


def insn_overhead(config: VTAConfig, alu: bool) -> int:
    """Cycles a GEMM (``alu`` false) or ALU instruction costs beyond its micro-ops when it follows another
    compute instruction: F in docs/timing.md §4 (``D + 4``: take, start, the pipeline's depth, retire)."""
    return finish_delay(config, alu) + 4


def _cost(env: VTAEnv, threads: int, n_tiles: int, n_k: int, gemm: int, load_bytes: int, dma_insns: int,
          acc_entries: int, store_bytes: int, extra_ops: int = 0, acc_load_bytes: int = 0) -> float:
    bus = env.config.bus_bytes
    load = load_bytes / bus + _DMA_LATENCY * dma_insns
    c = env.config   # epilogue ALU passes: none when the GEMMs requantise (GEMM_OUT_REQUANT after a BIAS_PRELOAD reset)
    ops = 0 if c.gemm_out_requant and c.bias_preload else (1 if c.alu_requant else _EPILOGUE_OPS - c.bias_preload)
    gemm_overhead, alu_overhead = insn_overhead(env.config, False), insn_overhead(env.config, True)
    epilogue = (ops + extra_ops) * (acc_entries + alu_overhead) + acc_entries + gemm_overhead   # ALUs + reset
    if acc_load_bytes:      # a fused residual: an ACC_8BIT load on the compute module, per tile
        epilogue += acc_load_bytes / bus + _DMA_LATENCY
    store = store_bytes / bus + _DMA_LATENCY
    if threads == 1:
        per_tile = n_k * (gemm + load + gemm_overhead) + epilogue + store
    else:   # loads overlap other threads' compute, except a tile's first load waits for its reset
        per_tile = max(n_k * (gemm + gemm_overhead) + epilogue, _LOAD_MARGIN * n_k * load, store) \
            + (load + store) / threads
    return n_tiles * per_tile + load + store


def choose_conv2d_tiles(env: VTAEnv, wl: Conv2dWorkload, vthreads: int = 2, residual: bool = False,
                        epilogue: tuple[int, int, int] = (0, 0, 0)) -> Conv2dKnobs:
    """The cheapest conv2d tiling with at most ``vthreads`` virtual threads; ``residual``: with a
    fused residual add (one more accumulator tile per thread, its load and up to 3 ALU ops);
    ``epilogue``: what a requantisation epilogue needs beyond the default (``(tiles, operand rows,
    ALU ops)``: more accumulator tiles, per-channel operand entries and ALU instructions;
    :func:`vtakit.compiler.topi_vta.epilogue.epilogue_resources`).

    Threads split output channels or rows; when neither divides ``vthreads`` ways (a 7x7 output
    with one channel block and 2 threads), the most threads that do are used, as the knobs say;
    never more than TOKEN_QUEUE_DEPTH.
    """
    _check_vthreads(vthreads)
    for threads in range(_thread_bound(env, vthreads), 0, -1):
        knobs = _best_conv2d_tiles(env, wl, threads, residual, epilogue)
        if knobs is not None:
            return knobs
    raise CompileError(f"no conv2d tiling of {wl} fits {env.config.model}, even with one virtual thread (tiles "
                       "must fit the SRAMs and each must read input that is not all padding)")


def _best_conv2d_tiles(env: VTAEnv, wl: Conv2dWorkload, vthreads: int, residual: bool = False,
                       epilogue: tuple[int, int, int] = (0, 0, 0)) -> Conv2dKnobs | None:
    e_tiles, e_rows, e_ops = epilogue
    c = env.config
    batch_blocks, ci_blocks, co_blocks = conv2d_blocks(env, wl)
    kh, kw, sh, sw = wl.kh, wl.kw, wl.stride_h, wl.stride_w
    strided_1x1 = kh == kw == 1 and (sh > 1 or sw > 1) and not any(wl.pad)   # conv2d's strided loads
    best: tuple[float, Conv2dKnobs] | None = None
    splits = [(1, 1)] if vthreads == 1 else [(vthreads, 1), (1, vthreads)]
    for (oc_n, h_n), th, tw, tco, tci in itertools.product(splits, divisors(wl.oh), divisors(wl.ow),
                                                            divisors(co_blocks), divisors(ci_blocks)):
        if wl.oh % (th * h_n) or co_blocks % (tco * oc_n) or not _tiles_read_data(wl, th, tw):
            continue
        rows, cols = (th - 1) * sh + kh, (tw - 1) * sw + kw
        if strided_1x1:     # only the rows and columns read: one DMA per row of one-entry bursts
            rows, cols = th, tw
        acc = th * tw * tco * ((2 if residual else 1) + e_tiles) + tco * (1 + e_rows)
        inp = tci * rows * cols
        wgt = tco * tci * kh * kw
        kernel = kh * tco * th * (kw if tci > 1 or tw == 1 else 1)
        uops = (kernel + ((6 if residual else 3) + e_ops) * th * tco) * vthreads
        if acc * vthreads > c.acc_depth or inp * vthreads > c.inp_depth or wgt * vthreads > c.wgt_depth \
                or uops > c.uop_depth or tw >= 1 << ITER_BITS or th * tco * tw >= 1 << ITER_BITS:
            continue
        n_tiles = batch_blocks * (wl.oh // th) * (wl.ow // tw) * (co_blocks // tco)
        gemm = th * tw * tco * tci * kh * kw
        inp_bytes = inp * c.inp_elem_bytes * (2 if strided_1x1 else 1)     # short bursts: about half the bus
        cost = _cost(env, vthreads, n_tiles, ci_blocks // tci, gemm,
                     inp_bytes + wgt * c.wgt_elem_bytes, tci * (th if strided_1x1 else 1) + 1, th * tw * tco,
                     th * tw * tco * c.out_elem_bytes, (2 if residual else 0) + e_ops,
                     th * tw * tco * c.out_elem_bytes if residual else 0)
        knobs = Conv2dKnobs(th, tw, tco, tci, oc_n, h_n)
        if best is None or cost < best[0]:
            best = (cost, knobs)
    return None if best is None else best[1]


def choose_dense_tiles(env: VTAEnv, m: int, n: int, k: int, vthreads: int = 2,
                       epilogue: tuple[int, int, int] = (0, 0, 0)) -> DenseKnobs:
    """The cheapest dense tiling with at most ``vthreads`` virtual threads over output column
    blocks (fewer when the columns do not split ``vthreads`` ways or TOKEN_QUEUE_DEPTH is smaller,
    as the knobs say; ``epilogue`` as :func:`choose_conv2d_tiles`)."""
    dense_blocks(env, m, n, k)  # rejects sizes that are not positive integers
    _check_vthreads(vthreads)
    for threads in range(_thread_bound(env, vthreads), 0, -1):
        knobs = _best_dense_tiles(env, m, n, k, threads, epilogue)
        if knobs is not None:
            return knobs
    raise CompileError(f"no dense tiling of {m}x{n}x{k} fits {env.config.model}, even with one virtual thread")


def _best_dense_tiles(env: VTAEnv, m: int, n: int, k: int, vthreads: int,
                      epilogue: tuple[int, int, int] = (0, 0, 0)) -> DenseKnobs | None:
    e_tiles, e_rows, e_ops = epilogue
    c = env.config
    mb, nb, kb = dense_blocks(env, m, n, k)
    best: tuple[float, DenseKnobs] | None = None
    for tb, tco, tci in itertools.product(divisors(mb), divisors(nb), divisors(kb)):
        if nb % (tco * vthreads):
            continue
        knobs = DenseKnobs(tb, tco, tci, vthreads)
        inp, wgt = tb * tci, tco * tci
        uops = (tco + (3 + e_ops) * tco) * vthreads
        if knobs.sram_overflow(env, epilogue) is not None \
                or uops > c.uop_depth or tb >= 1 << ITER_BITS or tci >= 1 << ITER_BITS:
            continue
        n_tiles = (mb // tb) * (nb // tco)
        cost = _cost(env, vthreads, n_tiles, kb // tci, tb * tco * tci,
                     inp * c.inp_elem_bytes + wgt * c.wgt_elem_bytes, 2, tb * tco, tb * tco * c.out_elem_bytes,
                     e_ops)
        if best is None or cost < best[0]:
            best = (cost, knobs)
    return None if best is None else best[1]


def _tiles_read_data(wl: Conv2dWorkload, th: int, tw: int) -> bool:
    """Whether every output tile reads at least one input row and column that is not padding
    (the DMA cannot load a tile that lies entirely in the padding)."""
    for out_size, tile, size, stride, pad, k in ((wl.oh, th, wl.h, wl.stride_h, wl.pad_top, wl.kh),
                                                 (wl.ow, tw, wl.w, wl.stride_w, wl.pad_left, wl.kw)):
        for first in range(0, out_size, tile):
            start = first * stride - pad
            end = start + (tile - 1) * stride + k
            if end <= 0 or start >= size:
                return False
    return True


def _thread_bound(env: VTAEnv, vthreads: int) -> int:
    """At most one thread per token-queue slot: each thread's prologue token waits in a queue."""
    return min(vthreads, env.config.token_queue_depth)


def _check_vthreads(vthreads: int) -> None:
    if not isinstance(vthreads, int) or isinstance(vthreads, bool) or vthreads < 1:
        raise CompileError(f"vthreads must be >= 1 (an integer), got {vthreads!r}")
