"""Accelerator templates ``vta.conv2d`` and ``vta.dense``: the knobs of :mod:`vtakit.compiler.topi_vta`
(output tile, input-channel chunk, virtual threads) as config spaces, with the default tiler
(``choose_*_tiles``) as the fallback config. Measured in cycles on the cycle model.

Tiles are splits whose inner factor is the tile (``factors`` policy: tiles divide the axis, so no
tail tiles); thread counts are knobs of 1, 2 or 4 per axis for dense, and 1, 2, 3 or 4 per axis
for conv2d, kept to the token queues' depth in all; conv2d's two outer tile loops (rows, channel
blocks) come in either order, its input and weight loads sit per input-channel chunk (``k_o``)
or per kernel row (``dy``), and its requantisation epilogue runs per output tile (``tile``) or per
channel block (``co``); the knobs added after the first logs (``load_at``, ``epilogue_at``) are
declared with their default, so a record without them names today's schedule. conv2d's space
carries a filter (``ConfigSpace.define_filter``): configs the knobs' static checks reject
(:meth:`Conv2dKnobs.static_error`: thread splits that do not divide, more threads than the token
queues, tiles that overflow an SRAM, ``dy`` loads the DMA's padding cannot express, choices that
build the default program again) are never proposed by a tuner; dense's the same way
(:meth:`DenseKnobs.static_error`: uneven thread splits, too many threads, SRAM overflow). A config
that still fails to build is recorded as an error, as AutoTVM records invalid kernels. The requantisation
(``clip((acc + addend) >> shift)``, a random addend) uses the whole int8 range and a shift that saturates no output of the reference operands, so the
check against numpy sees every accumulator bit. ``vta.conv2d``'s arguments are a workload's
``Conv2dWorkload.key`` (any kernel, pads, strides, batch) or the older 7 ints
``(h, w, ci, co, kernel, pad, stride)`` of earlier logs and ``conv2d:`` specs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from vtakit.compiler.autotune.space import ConfigEntity, ConfigSpace
from vtakit.compiler.autotune.task import template
from vtakit.compiler.te import Schedule, Tensor
from vtakit.compiler.topi_vta.bench import CLIP, OpData, conv2d_data, dense_data, range_shift
from vtakit.compiler.topi_vta.conv2d import conv2d
from vtakit.compiler.topi_vta.dense import dense
from vtakit.compiler.topi_vta.knobs import (CONV2D_EPILOGUE_AT, CONV2D_LOAD_AT, CONV2D_THREADS, CONV2D_TILE_ORDERS,
                                          Conv2dKnobs, DenseKnobs, conv2d_blocks, dense_blocks)
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles, choose_dense_tiles
from vtakit.compiler.topi_vta.workloads import Conv2dWorkload
from vtakit.compiler.vta.env import VTAEnv, get_env
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig

__all__ = ["conv2d_knobs", "dense_knobs", "THREAD_CHOICES"]

#: Virtual threads per split axis the spaces offer (capped by TOKEN_QUEUE_DEPTH).
THREAD_CHOICES = (1, 2, 4)


def _threads(env: VTAEnv) -> list[int]:
    return [t for t in THREAD_CHOICES if t <= env.config.token_queue_depth]


def _conv2d_threads(env: VTAEnv) -> list[int]:
    return [t for t in CONV2D_THREADS if t <= env.config.token_queue_depth]


def _inner(cfg: Any, name: str) -> int:
    return cfg[name].size[-1]


def conv2d_knobs(cfg: Any) -> Conv2dKnobs:
    """The :class:`Conv2dKnobs` a ``vta.conv2d`` config names."""
    return Conv2dKnobs(_inner(cfg, "tile_h"), _inner(cfg, "tile_w"), _inner(cfg, "tile_co"), _inner(cfg, "tile_ci"),
                       cfg["oc_nthread"].val, cfg["h_nthread"].val, cfg["tile_order"].val,
                       **{name: _opt(cfg, name, default) for name, default in _CONV2D_OPTIONAL.items()})


#: Knobs added after the first logs were written, with today's default (a config or record without
#: them means the default).
_CONV2D_OPTIONAL = {"load_at": Conv2dKnobs.load_at, "epilogue_at": Conv2dKnobs.epilogue_at}


def _opt(cfg: Any, name: str, default: Any) -> Any:
    names = cfg.entity_map if isinstance(cfg, ConfigEntity) else cfg.knobs
    return cfg[name].val if name in names else default


def dense_knobs(cfg: Any) -> DenseKnobs:
    """The :class:`DenseKnobs` a ``vta.dense`` config names."""
    return DenseKnobs(_inner(cfg, "tile_b"), _inner(cfg, "tile_co"), _inner(cfg, "tile_ci"), cfg["oc_nthread"].val)


@lru_cache(maxsize=32)
def _op_data(op: str, args: tuple[int, ...], config: VTAConfig, seed: int) -> OpData:
    env = get_env(config)
    return conv2d_data(env, Conv2dWorkload.from_key(args), seed) if op == "conv2d" else dense_data(env, *args, seed)


def _shift(op: str, args: tuple[int, ...], config: VTAConfig) -> int:
    """The requantisation shift of a workload: the smallest that saturates no output of the seed-0
    operands (whole int8 range as clip), so the check against numpy sees every accumulator's bits."""
    data = _op_data(op, args, config, 0)
    return range_shift(data.acc, data.addend, CLIP)


def _reference(op: str, args: tuple[int, ...], config: VTAConfig | None, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    config = config or VTAConfig()
    data = _op_data(op, args, config, seed)
    return data.host, data.expect(_shift(op, args, config), CLIP)


def _conv2d_reference(*key: int, config: VTAConfig | None = None,
                      seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    return _reference("conv2d", Conv2dWorkload.from_key(key).key, config, seed)


@template("vta.conv2d", reference=_conv2d_reference)
def _conv2d_template(cfg: Any, *key: int, config: VTAConfig | None = None) -> tuple[Schedule, list[Tensor]]:
    """The task arguments are a workload's :attr:`Conv2dWorkload.key` (13 ints) or the older 7
    ``(h, w, ci, co, kernel, pad, stride)`` (``conv2d:...`` specs, ResNet-18 names, earlier logs)."""
    env = get_env(config or VTAConfig())
    wl = Conv2dWorkload.from_key(key)
    _, ci_blocks, co_blocks = conv2d_blocks(env, wl)
    cfg.define_split("tile_h", wl.oh)
    cfg.define_split("tile_w", wl.ow)
    cfg.define_split("tile_co", co_blocks)
    cfg.define_split("tile_ci", ci_blocks)
    cfg.define_knob("oc_nthread", _conv2d_threads(env))
    cfg.define_knob("h_nthread", _conv2d_threads(env))
    cfg.define_knob("tile_order", list(CONV2D_TILE_ORDERS))
    cfg.define_knob("load_at", list(CONV2D_LOAD_AT), default=Conv2dKnobs.load_at)
    cfg.define_knob("epilogue_at", list(CONV2D_EPILOGUE_AT), default=Conv2dKnobs.epilogue_at)
    cfg.define_filter(lambda c: conv2d_knobs(c).static_error(wl, env))
    cfg.add_flop(2 * wl.macs)
    if isinstance(cfg, ConfigSpace):
        try:
            best = choose_conv2d_tiles(env, wl)
        except CompileError:
            best = None
        if best is not None:
            cfg.set_fallback(tile_h=[-1, best.tile_h], tile_w=[-1, best.tile_w], tile_co=[-1, best.tile_co],
                             tile_ci=[-1, best.tile_ci], oc_nthread=best.oc_nthread, h_nthread=best.h_nthread,
                             tile_order=best.tile_order)
    knobs = conv2d_knobs(cfg)
    if knobs.oc_nthread * knobs.h_nthread > env.config.token_queue_depth:
        raise CompileError(f"{knobs.oc_nthread} x {knobs.h_nthread} virtual threads exceed TOKEN_QUEUE_DEPTH="
                           f"{env.config.token_queue_depth}")
    return conv2d(env, wl, knobs, shift=_shift("conv2d", wl.key, env.config), clip=CLIP)


def _dense_reference(m: int, n: int, k: int, config: VTAConfig | None = None,
                     seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    return _reference("dense", (m, n, k), config, seed)


@template("vta.dense", reference=_dense_reference)
def _dense_template(cfg: Any, m: int, n: int, k: int, config: VTAConfig | None = None) -> tuple[Schedule, list[Tensor]]:
    env = get_env(config or VTAConfig())
    mb, nb, kb = dense_blocks(env, m, n, k)
    cfg.define_split("tile_b", mb)
    cfg.define_split("tile_co", nb)
    cfg.define_split("tile_ci", kb)
    cfg.define_knob("oc_nthread", _threads(env))
    cfg.define_filter(lambda c: dense_knobs(c).static_error(mb, nb, kb, env))
    cfg.add_flop(2 * m * n * k)
    if isinstance(cfg, ConfigSpace):
        try:
            best = choose_dense_tiles(env, m, n, k)
        except CompileError:
            best = None
        if best is not None:
            cfg.set_fallback(tile_b=[-1, best.tile_b], tile_co=[-1, best.tile_co], tile_ci=[-1, best.tile_ci],
                             oc_nthread=best.oc_nthread)
    return dense(env, m, n, k, dense_knobs(cfg), shift=_shift("dense", (m, n, k), env.config), clip=CLIP)
