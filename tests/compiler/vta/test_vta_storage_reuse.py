"""StorageReuse on the VTA backend: the epilogue shares the accumulator tile of the GEMM.

The batch-2 conv2d with knobs (2, 4, 2, 2) needed 2112 of 2048 ACC bytes with one buffer per
stage (conv, addend_add, shr, clip, all attached at the same loop and duplicated by the tail peeling);
in place it needs one tile plus the addend. Random tilings of conv2d and dense run on fsim against
numpy with the pass on, and never need more ACC than without it; without the ALU's veto an
in-place chain that reads its source again computes a wrong result.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

import vtakit
from vtakit.compiler import te
from vtakit.compiler.lower import lower
from vtakit.compiler.lower.storage_reuse import scope_peak_bits
from vtakit.compiler.topi_vta import Conv2dKnobs, Conv2dWorkload, DenseKnobs, conv2d, dense
from vtakit.compiler.topi_vta.tiling import divisors
from vtakit.compiler.transform import PassContext
from vtakit.compiler.vta import get_env, module
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig

from tests.compiler.vta.helpers import build_and_run, conv_case, dense_case
from tests.compiler.vta.test_vta_passes import alu_schedule, run, wrap8

BATCH2 = VTAConfig.small(log_batch=1)
REPRO = (Conv2dWorkload(5, 20, 4, 12, 3, 1, 2, batch=2), Conv2dKnobs(2, 4, 2, 2))


@contextlib.contextmanager
def reuse_off():
    """Build without StorageReuse (the pass list gets the identity in its place)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(module, "storage_reuse_pass", lambda *a, **k: (lambda func: func))
        yield


def acc_bytes(env, s, tensors) -> int:
    """Peak ACC bytes of the lowered function (capacity check off, so overflows can be measured)."""
    ctx = module.build_config(env)
    with PassContext(config=ctx.config, memory_scopes=ctx.memory_scopes, disabled_pass=("VerifyMemoryScopes",)):
        func = lower(s, tensors, name="f")
    return scope_peak_bits(func, env.acc_scope) // 8


def test_batch2_conv2d_fits_in_place_and_matches_numpy():
    env = get_env(BATCH2)
    wl, knobs = REPRO
    s, tensors = conv2d(env, wl, knobs)
    with reuse_off():
        assert acc_bytes(env, s, tensors) == 2112
        with pytest.raises(CompileError, match=r"conv, addend.local.acc_buffer, addend_add, shr, clip live together "
                                               r"need 16896 bits \(2112 bytes\)"):
            vtakit.build(s, tensors, target="vta", config=BATCH2)
    tile = 2 * 4 * 2 * env.batch * env.block_out * 4           # tile_h x tile_w x tile_co entries of int32
    addend = 2 * env.batch * env.block_out * 4
    assert acc_bytes(env, s, tensors) == tile + addend == 576
    host, expect = conv_case(env, wl)
    mod, _ = build_and_run(s, tensors, host, expect, BATCH2)
    assert all(f"allocate {n}" not in str(mod.func) for n in ("addend_add", "shr", "clip"))


def test_alu_veto_is_needed():
    """``min(a + b, a)``: in place, the ADD would overwrite the ``a`` that MIN reads."""
    f, ref = (lambda a, b: te.min(a + b, a)), (lambda a, b: np.minimum(a + b, a))
    s, args = alu_schedule(f, n_inputs=2)
    (a, b), got = run(s, args)
    expect = wrap8(ref(a.astype(np.int64), b.astype(np.int64)))
    np.testing.assert_array_equal(got, expect)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(module, "in_place_accepts", lambda alu_mul, requant=False: (lambda store, producer: True))
        (a, b), got = run(*alu_schedule(f, n_inputs=2))
    assert not np.array_equal(got, expect)


# ---------------------------------------------------------------------------- random tilings
CONFIGS = [VTAConfig.small(), BATCH2]


@hst.composite
def conv_cases(draw):
    config = draw(hst.sampled_from(CONFIGS))
    env = get_env(config)
    kernel, stride = draw(hst.sampled_from([(1, 1), (1, 2), (3, 1), (3, 2)]))
    pad = draw(hst.integers(0, kernel // 2 + (1 if kernel == 3 else 0)))
    h, w = draw(hst.integers(kernel, 9)), draw(hst.integers(kernel, 12))
    ci, co = env.block_in * draw(hst.integers(1, 3)), env.block_out * draw(hst.integers(1, 4))
    wl = Conv2dWorkload(h, w, ci, co, kernel, pad, stride, batch=env.batch * draw(hst.integers(1, 2)))
    co_blocks, ci_blocks = co // env.block_out, ci // env.block_in
    oc_n = draw(hst.sampled_from([d for d in divisors(co_blocks) if d <= 2]))
    h_n = draw(hst.sampled_from([d for d in divisors(wl.oh) if d <= 2])) if oc_n == 1 else 1
    # tiles along rows/columns need not divide (tails are peeled); along threads they must
    tile_h = draw(hst.sampled_from(divisors(wl.oh // h_n))) if h_n > 1 else draw(hst.integers(1, wl.oh))
    tile_w = draw(hst.integers(1, wl.ow))
    tile_co = draw(hst.sampled_from(divisors(co_blocks // oc_n)))
    tile_ci = draw(hst.sampled_from(divisors(ci_blocks)))
    return config, wl, Conv2dKnobs(tile_h, tile_w, tile_co, tile_ci, oc_n, h_n)


@hst.composite
def dense_cases(draw):
    config = draw(hst.sampled_from(CONFIGS))
    env = get_env(config)
    mb, nb, kb = draw(hst.integers(1, 6)), draw(hst.integers(1, 6)), draw(hst.integers(1, 4))
    threads = draw(hst.sampled_from([d for d in divisors(nb) if d <= 2]))
    knobs = DenseKnobs(draw(hst.sampled_from(divisors(mb))), draw(hst.sampled_from(divisors(nb // threads))),
                       draw(hst.sampled_from(divisors(kb))), threads)
    return config, (mb * env.batch, nb * env.block_out, kb * env.block_in), knobs


def _check_case(config, build, operands):
    """With the pass: equal to numpy on fsim, or a CompileError that the build without the pass
    has too; never more ACC bytes than without it."""
    env = get_env(config)
    s, tensors = build(env)
    with reuse_off():
        before = acc_bytes(env, s, tensors)
    after = acc_bytes(env, s, tensors)
    assert after <= before
    host, expect = operands(env)
    try:
        build_and_run(s, tensors, host, expect, config)
    except CompileError as exc:
        with reuse_off(), pytest.raises(CompileError):
            vtakit.build(s, tensors, target="vta", config=config)
        assert "capacity" in str(exc) or "micro-op" in str(exc) or "DMA" in str(exc) or "pad" in str(exc), str(exc)


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(conv_cases())
def test_random_conv2d_tilings(case):
    config, wl, knobs = case
    _check_case(config, lambda env: conv2d(env, wl, knobs), lambda env: conv_case(env, wl))


@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(dense_cases())
def test_random_dense_tilings(case):
    config, (m, n, k), knobs = case
    _check_case(config, lambda env: dense(env, m, n, k, knobs), lambda env: dense_case(env, m, n, k))


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
          database=None)
@given(conv_cases())
def test_random_conv2d_tilings_campaign(case):
    config, wl, knobs = case
    _check_case(config, lambda env: conv2d(env, wl, knobs), lambda env: conv_case(env, wl))
