"""Buffers of stages attached inside a split that does not divide are sized to one tile.

The region of such a stage is clipped at the end of its axis, e.g. ``min(2*xo + 1, 8)*2 - 4*xo + 3``
entries of the padded input for a tile of two outputs: at most 5, though bounding each term alone
gives 19. Too big a buffer wastes SRAM and leaves row slack the 2-D DMA cannot express.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vtakit.compiler import ir
from vtakit.compiler.arith import Analyzer
from vtakit.compiler.lower.bound import _buffer_extent
from vtakit.compiler.lower.schedule_ops import schedule_to_primfunc
from vtakit.compiler.topi_vta import Conv2dKnobs, Conv2dWorkload, conv2d
from vtakit.compiler.vta import get_env
from vtakit.hw.config import VTAConfig

from tests.compiler.vta.helpers import build_and_run, conv_case


def _shapes(s, tensors) -> dict[str, list[int]]:
    shapes: dict[str, list[int]] = {}

    def visit(n) -> None:
        if isinstance(n, ir.Allocate):
            shapes[n.buffer.name] = [x.value if isinstance(x, ir.IntImm) else int(x) for x in n.buffer.shape]

    ir.walk(schedule_to_primfunc(s, tensors, "f").body, visit)
    return shapes


def _halo(tile: int, wl: Conv2dWorkload, axis: int) -> int:
    return (tile - 1) * wl.stride[axis] + wl.kernel[axis]


# (config, workload, knobs): the output tile does not divide the output width (and height)
CASES = [
    (VTAConfig.small(), Conv2dWorkload(10, 17, 8, 12, 3, 1, 2), Conv2dKnobs(1, 2, 1, 1)),
    (VTAConfig.small(), Conv2dWorkload(8, 19, 4, 4, 3, 1, 1), Conv2dKnobs(1, 17, 2, 1)),
    (VTAConfig.small(log_batch=1), Conv2dWorkload(5, 20, 4, 12, 3, 1, 2, batch=2), Conv2dKnobs(2, 4, 2, 2)),
    (VTAConfig.small(log_batch=1), Conv2dWorkload(5, 20, 4, 12, 3, 1, 2, batch=2), Conv2dKnobs(2, 4, 1, 2)),
]
IDS = [f"b{c.batch}-{wl.h}x{wl.w}s{wl.stride_h}-tile{k.tile_h}x{k.tile_w}co{k.tile_co}" for c, wl, k in CASES]
# every case fits: the DMA lowering splits the second's padded rows (x_pad_1 <= 15), and in-place storage
# reuse keeps the third's conv/addend_add/shr/clip in one accumulator tile (576 of 2048 bytes, was 2112)
FIT = IDS


@pytest.mark.parametrize("config,wl,knobs", CASES, ids=IDS)
def test_input_tile_buffer_is_one_tile(config, wl, knobs):
    s, tensors = conv2d(get_env(config), wl, knobs)
    shapes = _shapes(s, tensors)
    h, w = shapes["data_pad"][2:4]
    assert (h, w) == (min(_halo(knobs.tile_h, wl, 0), wl.h + wl.pad_top + wl.pad_bottom),
                      min(_halo(knobs.tile_w, wl, 1), wl.w + wl.pad_left + wl.pad_right))
    assert shapes["conv"][2:4] == [knobs.tile_h, knobs.tile_w]


@pytest.mark.parametrize("config,wl,knobs", [c for c, i in zip(CASES, IDS) if i in FIT], ids=FIT)
def test_non_dividing_tiles_match_numpy(config, wl, knobs):
    env = get_env(config)
    s, tensors = conv2d(env, wl, knobs)
    host, expect = conv_case(env, wl)
    build_and_run(s, tensors, host, expect, config)


def test_extent_bound_cancels_the_clipped_terms():
    xo = ir.Var("xo", "int32")
    an = Analyzer()
    an.bind(xo, 0, 8)
    two, one = ir.IntImm("int32", 2), ir.IntImm("int32", 1)
    clipped = ir.Min(xo * two + one, ir.IntImm("int32", 8)) * two - xo * ir.IntImm("int32", 4) + ir.IntImm("int32", 3)
    assert an.const_int_bound(clipped)[1] == 19           # the terms bounded one by one
    assert _buffer_extent(clipped, an, None, 0, {xo: ir.IntImm("int32", 9)}) == 5
    # a max under a minus: 10 - max(xo, 2) + xo <= 10 - xo + xo
    e = ir.IntImm("int32", 10) - ir.Max(xo, two) + xo
    assert _buffer_extent(e, an, None, 0, {xo: ir.IntImm("int32", 9)}) == 10
    # a min under a minus is not replaced by a side (that would not bound it): 8 - min(xo, 2) + ... stays sound
    e = ir.IntImm("int32", 8) - ir.Min(xo, two)
    assert _buffer_extent(e, an, None, 0, {xo: ir.IntImm("int32", 9)}) == 8


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-9, 9), st.booleans(),
                          st.integers(-3, 3), st.integers(-9, 9)), min_size=1, max_size=3),
       st.integers(-3, 3), st.integers(0, 12))
def test_extent_bound_is_sound(terms, k, n):
    """Sums of ``c * min/max(a*x + b, d*x + e)`` plus ``k*x``: the bound is at least every value."""
    x = ir.Var("x", "int32")
    an = Analyzer()
    an.bind(x, 0, n)

    def imm(v):
        return ir.IntImm("int32", v)

    e, values = x * imm(k), [k * v for v in range(n + 1)]
    for c, a, b, is_min, d, f in terms:
        op, fn = (ir.Min, min) if is_min else (ir.Max, max)
        e = e + op(x * imm(a) + imm(b), x * imm(d) + imm(f)) * imm(c)
        values = [acc + c * fn(a * v + b, d * v + f) for acc, v in zip(values, range(n + 1))]
    assert _buffer_extent(e, an, None, 0, {x: imm(n + 1)}) >= max(max(values), 0)
