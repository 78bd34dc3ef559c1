"""The accelerator's residual add (topi_vta.add): packed int8 a and b loaded into the accumulator,
shifted, added, requantised and stored; bit-exact against packing.add_reference on fsim and cycle."""

import numpy as np
import pytest

import vtakit
from vtakit.compiler.topi_vta import AddKnobs, add, add_packed, add_reference, choose_add_tiles, pack_nchw
from vtakit.compiler.topi_vta.add import add_alu_stages
from vtakit.compiler.vta.env import get_env
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig
from vtakit.runtime import Device
from vtakit.runtime.packing import unpack_nchw

SMALL = VTAConfig.small()


def run_add(config, shape, lshift_a=0, lshift_b=0, addend=0, shift=0, clip=(-128, 127), backend="fsim", seed=0,
            **kwargs):
    """Build, run on ``backend``, compare every packed lane (padding included) with add_reference."""
    env = get_env(config)
    s, tensors = add(env, shape, lshift_a, lshift_b, addend, shift, clip, **kwargs)
    mod = vtakit.build(s, tensors, target="vta", config=config)
    rng = np.random.default_rng(seed)
    a, b = (pack_nchw(rng.integers(-128, 128, shape, dtype=np.int8), env.batch, env.block_out) for _ in "ab")
    want = add_reference(a, b, lshift_a, lshift_b, addend, shift, clip)      # element-wise: any layout
    dev = Device(config, backend=backend)
    arrays = [dev.array(a), dev.array(b), dev.empty(want.shape, np.int8)]
    stats = mod(*arrays)
    np.testing.assert_array_equal(arrays[-1].numpy(), want)
    return stats, want


@pytest.mark.parametrize("backend", ["fsim", "cycle"])
@pytest.mark.parametrize("params", [
    dict(lshift_a=1, lshift_b=2, addend=3, shift=2),
    dict(),                                                    # a plain saturating add: only ADD, MAX, MIN
    dict(lshift_a=3, addend=-70000, shift=-1, clip=(-20, 100)),   # a left shift; an addend of three immediates
    dict(lshift_b=6, addend=1 << 16, shift=9, clip=(0, 127)),     # rounding folded in (1 << 16 = 2 * 32767 + 2)
    dict(lshift_a=24, lshift_b=25, shift=20),                  # big shifts that saturate both ways
    dict(lshift_a=31, shift=0),                                # 1 << 31 wraps
], ids=str)
def test_add_small_config_matches_reference(params, backend):
    stats, want = run_add(SMALL, (1, 20, 9, 7), backend=backend, **params)
    if backend == "cycle":
        assert stats.cycles > 0


def test_add_saturates_and_is_not_trivially_clipped():
    _, want = run_add(SMALL, (1, 20, 9, 7))
    assert (want == 127).any() and (want == -128).any() and ((want > -128) & (want < 127)).mean() > 0.5


@pytest.mark.parametrize("knobs", [AddKnobs(1, 3, 7), AddKnobs(5, 1, 2), AddKnobs(2, 2, 3), AddKnobs(1, 3, 7, 3, "h"),
                                   AddKnobs(1, 2, 7, 2, "c")], ids=str)
def test_add_tilings_with_tails_and_threads(knobs):
    run_add(SMALL, (1, 20, 9, 7), 1, 0, 5, 3, knobs=knobs) if knobs.nthread != 2 else \
        run_add(SMALL, (1, 16, 9, 7), 1, 0, 5, 3, knobs=knobs)


def test_add_pads_batch_and_channels_to_blocks():
    config = VTAConfig.small(LOG_BATCH=1)
    run_add(config, (3, 18, 5, 6), 2, 1, 100, 3, (-50, 60))


@pytest.mark.parametrize("vthreads", [1, 2])
def test_add_default_config_resnet_shape(vthreads):
    stats, _ = run_add(VTAConfig(), (1, 64, 56, 56), 1, 0, 1, 1, backend="cycle", vthreads=vthreads)
    assert stats.cycles > 0


def test_add_default_config_fsim():
    run_add(VTAConfig(), (1, 64, 56, 56), 0, 2, -3, 2, (-128, 127), seed=1)


def test_add_leaves_out_identities_and_checks_its_arguments(small_env):
    tensors, st = add_packed(small_env, (1, 4, 2, 2))
    assert [t.name for t in tensors] == ["a", "b", "out"] and [t.name for t in add_alu_stages(st)] == ["sum", "clip"]
    _, st = add_packed(small_env, (1, 4, 2, 2), 1, 2, 40000, -3)
    assert [t.name for t in add_alu_stages(st)] == ["a_shl", "b_shl", "sum", "addend0", "addend1", "shr", "clip"]
    with pytest.raises(CompileError, match=r"lshift_a must be an int in \[0, 31\]"):
        add(small_env, (1, 4, 2, 2), lshift_a=-1)
    with pytest.raises(CompileError, match="addend 200000 needs more than 4 16-bit ALU immediates"):
        add(small_env, (1, 4, 2, 2), addend=200000)
    with pytest.raises(CompileError, match="clip"):
        add(small_env, (1, 4, 2, 2), clip=(-300, 0))
    with pytest.raises(CompileError, match="shift must be an int in"):
        add(small_env, (1, 4, 2, 2), shift=40)
    with pytest.raises(CompileError, match=r"shape must be 4 positive ints \(N, C, H, W\)"):
        add(small_env, (4, 2, 2))
    with pytest.raises(CompileError, match="2 virtual threads over h need tiles of 2 to divide 3"):
        add(small_env, (1, 4, 3, 2), knobs=AddKnobs(1, 2, 2, 2, "h"))
    knobs = choose_add_tiles(small_env, (1, 20, 9, 7))
    assert 2 * knobs.tile_c * knobs.tile_h * knobs.tile_w * knobs.nthread <= small_env.config.acc_depth


def test_add_unpacks_to_the_nchw_reference():
    """The packed result unpacks to add_reference of the NCHW operands (padding lanes cut off)."""
    env = get_env(SMALL)
    shape = (1, 6, 3, 5)
    s, tensors = add(env, shape, 1, 1, 2, 2)
    mod = vtakit.build(s, tensors, target="vta", config=SMALL)
    rng = np.random.default_rng(3)
    a, b = (rng.integers(-128, 128, shape, dtype=np.int8) for _ in "ab")
    dev = Device(SMALL)
    arrays = [dev.array(pack_nchw(x, env.batch, env.block_out)) for x in (a, b)]
    arrays.append(dev.empty(tensors[-1].shape, np.int8))
    mod(*arrays)
    np.testing.assert_array_equal(unpack_nchw(arrays[-1].numpy(), shape), add_reference(a, b, 1, 1, 2, 2, (-128, 127)))
