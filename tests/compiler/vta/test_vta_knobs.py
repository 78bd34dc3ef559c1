"""conv2d's schedule knobs beyond the tiles: load placement (``load_at``), epilogue placement
(``epilogue_at``), 3 virtual threads. Every value is numpy-exact on fsim (its token, deadlock and
race checks), with and without a fused residual, on the small configuration and on a ResNet-18
layer of the default one; bad values are compile errors that name the value and the choices; the
static checks (the tuner's filter) reject what cannot build."""

import dataclasses
import re

import numpy as np
import pytest

from vtakit.compiler.topi_vta import RESNET18, Conv2dKnobs, Conv2dWorkload, conv2d
from vtakit.compiler.topi_vta.bench import run_conv2d
from vtakit.compiler.topi_vta.knobs import CONV2D_EPILOGUE_AT, CONV2D_LOAD_AT
from vtakit.compiler.vta.env import get_env
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig

from tests.compiler.vta.helpers import build_and_run, conv_case

WL = Conv2dWorkload(6, 6, 8, 12, 3, 1, 1)          # 2 input, 3 output channel blocks on small
BASE = Conv2dKnobs(2, 3, 1, 1)

CHOICES = {
    "load_at=dy": dict(load_at="dy"),
    "load_at=dy,tile_ci=2,3-threads": dict(load_at="dy", tile_ci=2, h_nthread=3),
    "epilogue_at=co": dict(epilogue_at="co", tile_co=3),
    "epilogue_at=co,co_h": dict(epilogue_at="co", tile_co=3, tile_order="co_h", oc_nthread=1, h_nthread=1),
    "oc_nthread=3": dict(oc_nthread=3),
    "h_nthread=3": dict(h_nthread=3),
    "all": dict(load_at="dy", epilogue_at="co", tile_co=3, tile_ci=2, h_nthread=3),
}


def _residual_case(env, wl, residual, shift=9):
    from vtakit.compiler.graph.ops.qnn import residual_requantize
    from vtakit.runtime.packing import conv2d_reference, pack_bias, pack_nchw, pack_oihw, pad_to_blocks

    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (wl.batch, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
    acc = conv2d_reference(pad_to_blocks(x, {0: env.batch}), w, wl.stride, wl.pad)
    addend = rng.integers(-2000, 2000, wl.co).astype(np.int32)
    r = rng.integers(-128, 128, acc.shape, dtype=np.int8)
    expect = residual_requantize(acc, addend, shift, (-128, 127), r, *residual)
    host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in),
            pack_bias(addend, env.batch, env.block_out), pack_nchw(r, env.batch, env.block_out)]
    return host, pack_nchw(expect, env.batch, env.block_out)


@pytest.mark.parametrize("residual", [None, (2, 1)], ids=["plain", "residual"])
@pytest.mark.parametrize("choice", list(CHOICES.values()), ids=list(CHOICES))
def test_every_knob_value_is_numpy_exact_on_small(small_env, choice, residual):
    knobs = dataclasses.replace(BASE, **choice)
    assert knobs.static_error(WL, small_env) is None
    if residual is None:
        s, tensors = conv2d(small_env, WL, knobs)
        host, expect = conv_case(small_env, WL)
    else:
        s, tensors = conv2d(small_env, WL, knobs, shift=9, clip=(-128, 127), residual=residual)
        host, expect = _residual_case(small_env, WL, residual)
    build_and_run(s, tensors, host, expect, small_env.config)


@pytest.mark.parametrize("wl, knobs", [
    (Conv2dWorkload(9, 7, 4, 8, 3, 1, 2), Conv2dKnobs(5, 4, 2, 1, epilogue_at="co")),   # strided, padded
    (Conv2dWorkload(8, 8, 8, 8, 3, 0, 2), Conv2dKnobs(3, 3, 1, 2, load_at="dy")),       # strided, unpadded
    (Conv2dWorkload(8, 8, 8, 8, 1, 0, 2), Conv2dKnobs(4, 4, 2, 2, epilogue_at="co")),   # strided 1x1 loads
    (Conv2dWorkload(6, 9, 4, 12, (2, 3), (0, 1, 1, 0), (1, 1)), Conv2dKnobs(3, 4, 3, 1, 1, 2, load_at="dy",
                                                                          epilogue_at="co")),   # asymmetric
    (Conv2dWorkload(7, 9, 4, 8, (3, 1), 0, (1, 1)), Conv2dKnobs(2, 9, 2, 1, load_at="dy")),      # tail row tile
], ids=str)
def test_new_knobs_on_strides_pads_and_kernels(small_env, wl, knobs):
    assert knobs.static_error(wl, small_env) is None
    s, tensors = conv2d(small_env, wl, knobs)
    host, expect = conv_case(small_env, wl)
    build_and_run(s, tensors, host, expect, small_env.config)


@pytest.mark.parametrize("layer, knobs", [
    ("C11", Conv2dKnobs(7, 7, 2, 4, 2, 1, load_at="dy", epilogue_at="co")),
    ("C11", Conv2dKnobs(7, 7, 1, 8, 1, 1, tile_order="co_h")),
    ("C10", Conv2dKnobs(7, 7, 4, 2, 2, 1, epilogue_at="co")),
], ids=["C11-dy-co", "C11-default-choices", "C10-co"])
def test_new_knobs_on_a_default_config_layer(layer, knobs):
    """A ResNet-18 layer on the default configuration, each new choice numpy-exact on fsim."""
    wl = RESNET18[layer]
    assert knobs.static_error(wl, get_env(VTAConfig())) is None
    assert run_conv2d(wl, VTAConfig(), knobs=knobs).correct


def test_three_threads_on_a_default_config_layer():
    wl = RESNET18["C11"]
    knobs = Conv2dKnobs(7, 7, 1, 4, 1, 1)
    four = dataclasses.replace(knobs, h_nthread=1, oc_nthread=4, tile_co=1)     # 32 channel blocks / 4 threads
    assert four.static_error(wl, get_env(VTAConfig())) is None
    assert run_conv2d(wl, VTAConfig(), knobs=four).correct
    three = dataclasses.replace(knobs, oc_nthread=3, tile_co=1)                  # 3 does not divide 32
    assert three.static_error(wl, get_env(VTAConfig())) == "conv2d knob tile_co=1 must divide 32 into 3 virtual threads"


@pytest.mark.parametrize("name, value, choices", [("load_at", "ci", CONV2D_LOAD_AT),
                                                  ("epilogue_at", "row", CONV2D_EPILOGUE_AT),
                                                  ("tile_order", "w_h", ("h_co", "co_h"))])
def test_bad_values_name_the_value_and_the_choices(small_env, name, value, choices):
    knobs = dataclasses.replace(BASE, **{name: value})
    with pytest.raises(CompileError, match=re.escape(f"{name}={value!r} must be one of {tuple(choices)}")):
        conv2d(small_env, WL, knobs)
    assert name in knobs.static_error(WL, small_env)


def test_static_checks_reject_what_cannot_build(small_env):
    env = small_env
    # row padding with dy loads needs a row loop of stride 1 inside the load
    for wl, knobs in ((WL, dataclasses.replace(BASE, tile_h=1, load_at="dy")),           # one-row tiles
                      (Conv2dWorkload(7, 6, 4, 8, 3, 1, 1), Conv2dKnobs(2, 2, 1, 1, load_at="dy")),  # one-row tail
                      (Conv2dWorkload(7, 6, 4, 8, 3, 1, 2), Conv2dKnobs(2, 3, 1, 1, load_at="dy")),  # strided rows
                      (Conv2dWorkload(7, 6, 4, 8, (3, 1), 1, 1), Conv2dKnobs(2, 2, 1, 1, load_at="dy"))):  # kw = 1
        with pytest.raises(CompileError, match="load_at=.dy. with padding"):
            conv2d(env, wl, knobs)
    # tiles overflowing an SRAM, and too many threads for the token queues
    wide = Conv2dWorkload(12, 12, 8, 12, 3, 1, 1)
    big = Conv2dKnobs(12, 12, 1, 1)
    assert "overflow the input SRAM" in big.static_error(wide, env)
    with pytest.raises(CompileError, match="capacity"):
        run_conv2d(wide, VTAConfig.small(), knobs=big)
    assert "TOKEN_QUEUE_DEPTH=2" in Conv2dKnobs(1, 6, 1, 1, 3, 1).static_error(WL, get_env(VTAConfig.small(
        token_queue_depth=2)))
    # choices that build the default program again are not worth a trial
    assert "is load_at='k_o'" in Conv2dKnobs(2, 2, 1, 1, load_at="dy").static_error(
        Conv2dWorkload(6, 6, 8, 12, 1, 0, 1), env)
    assert "is epilogue_at='tile'" in dataclasses.replace(BASE, epilogue_at="co").static_error(WL, env)
    # the default tiler's choice passes
    from vtakit.compiler.topi_vta import default_conv2d_knobs
    assert default_conv2d_knobs(env, WL).static_error(WL, env) is None
