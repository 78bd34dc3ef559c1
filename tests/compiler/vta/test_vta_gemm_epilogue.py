"""FuseGemmEpilogue (BIAS_PRELOAD, GEMM_OUT_REQUANT): conv2d and dense with the keys give the same int8
output as the default path and ``packing.requantize``, with the bias add moved into the reset and,
with both keys, no ALU pass at all; epilogues it must not fuse (a narrower clip, multipliers, fused
residuals) stay bit-exact; a whole small network too."""

import numpy as np
import pytest

import vtakit.graph as vg
from vtakit.compiler.topi_vta import Conv2dWorkload, conv2d, dense
from vtakit.compiler.vta.env import get_env
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp, GemmInsn
from vtakit.runtime.packing import requantize

from tests.compiler.vta.helpers import EPILOGUE_CONV, build_and_run
from tests.compiler.vta.test_vta_multiplier import _case

REQUANT = VTAConfig.small(alu_requant=True)
KEYS = {"bias": dict(bias_preload=True), "out": dict(gemm_out_requant=True),
        "both": dict(bias_preload=True, gemm_out_requant=True)}


def _layer(config, op, shift=9, clip=(0, 127), addend=True, multiplier=None, seed=1):
    env = get_env(config)
    host, acc, add_, mult, pack = _case(env, op, multiplier, seed, addend=addend)
    kw = dict(shift=shift, clip=clip, with_addend=addend, multiplier=multiplier, pre_shift=1 if multiplier else 0)
    s, tensors = conv2d(env, EPILOGUE_CONV, **kw) if op == "conv2d" else dense(env, 3, 6, 10, **kw)
    expect = pack(requantize(acc, add_, shift, clip, mult, kw["pre_shift"]))
    return build_and_run(s, tensors, host, expect, config, backend="cycle")   # (bit-exact, checked there)


def _ops(mod) -> list[AluOp]:
    return [i.alu_opcode for i in mod.template.insns if isinstance(i, AluInsn) and i.uop_end > i.uop_bgn]


@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("requant", [True, False], ids=["alu_requant", "plain"])
@pytest.mark.parametrize("addend", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("keys", list(KEYS))
def test_fused_epilogue_is_bit_exact_and_cheaper(op, requant, addend, keys):
    if "gemm_out_requant" in KEYS[keys] and not requant:
        pytest.skip("GEMM_OUT_REQUANT needs ALU_REQUANT")
    base = VTAConfig.small(alu_requant=requant)
    mod, stats = _layer(base.replace(**KEYS[keys]), op, addend=addend)
    ref_mod, ref = _layer(base, op, addend=addend)
    ops, ref_ops = _ops(mod), _ops(ref_mod)
    gemms = [i for i in mod.template.insns if isinstance(i, GemmInsn)]
    bias = any(g.epilogue and g.reset_reg for g in gemms)
    out = any(g.epilogue and not g.reset_reg for g in gemms)
    assert bias == (addend and "bias_preload" in KEYS[keys])
    if bias and not requant:
        assert ops == [o for o in ref_ops if o != AluOp.ADD]          # the bias ADD pass is gone
    if "gemm_out_requant" in KEYS[keys] and (addend is False or "bias_preload" in KEYS[keys]):
        assert out and ops == [] and stats.counters["alu_counter"] == 0
        assert stats.cycles < ref.cycles
    else:
        assert not out and len(ops) == len(ref_ops) - (ref_ops.count(AluOp.ADD) if bias and not requant else 0)
        assert stats.cycles <= ref.cycles
    assert stats.counters["gemm_counter"] == ref.counters["gemm_counter"]


@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("clip, multiplier", [((-5, 100), None), ((0, 127), 300), ((-128, 127), "shift_add:3")],
                         ids=["narrow_clip", "mul_imm", "shift_add"])
def test_epilogues_that_do_not_fuse_fully_stay_exact(op, clip, multiplier):
    config = REQUANT.replace(alu_mul=multiplier == 300, **KEYS["both"])
    mod, _ = _layer(config, op, shift=12, clip=clip, multiplier=multiplier, seed=3)
    assert _ops(mod)    # an ALU pass remains (MAX/MIN after REQUANT, or the multiplier's)


def test_conv_with_a_fused_residual_is_exact(monkeypatch):
    """test_vta_requant's residual case (bit-exact on fsim, the residual's REQUANT last) with both keys on."""
    import tests.compiler.vta.test_vta_requant as suite
    from tests.compiler.vta.test_vta_requant import test_conv2d_with_a_fused_residual as residual_case

    monkeypatch.setattr(suite, "REQUANT", REQUANT.replace(**KEYS["both"]))
    residual_case((2, 1))


@pytest.mark.parametrize("keys", ["bias", "both"])
def test_network_with_residual_pool_and_dense_is_bit_exact_and_faster(keys):
    from tests.graph.test_vta_target import _check, residual_pool_dense_net

    net, e, r = residual_pool_dense_net()
    config = REQUANT.replace(**KEYS[keys])
    mod = _check(net, [e, r], config, backends=("fsim", "cycle"))
    base = vg.build(net.graph([e, r]), target="vta", config=REQUANT)
    fused = mod.profile(net.sample, backend="cycle").total_cycles
    plain = base.profile(net.sample, backend="cycle").total_cycles
    assert fused <= plain if keys == "bias" else fused < plain, (fused, plain)


@pytest.mark.parametrize("wl", [Conv2dWorkload(16, 16, 8, 16, (1, 1), (0, 0, 0, 0), (2, 2)),
                                Conv2dWorkload(12, 10, 8, 8, (3, 3), (1, 1, 1, 1), (1, 1))], ids=["1x1s2", "3x3"])
@pytest.mark.parametrize("vthreads", [1, 2])
def test_tiled_layers_with_virtual_threads_lose_every_alu_pass(wl, vthreads):
    """Several tiles and virtual threads (the cthread loop around each tile's statements)."""
    from vtakit.compiler.topi_vta.bench import compile_conv2d, run_conv2d

    config = REQUANT.replace(**KEYS["both"])
    compiled = compile_conv2d(wl, config, vthreads)
    assert compiled.threads == vthreads
    assert _ops(compiled.module) == [] and _ops(compile_conv2d(wl, REQUANT, vthreads).module)
    fused, plain = run_conv2d(wl, config, "cycle", vthreads), run_conv2d(wl, REQUANT, "cycle", vthreads)
    assert fused.correct and plain.correct and fused.cycles < plain.cycles


def test_fused_conv_on_the_rtl_is_exact_and_timed_as_the_cycle_model():
    config = REQUANT.replace(**KEYS["both"])
    mod, rtl = _layer_on(config, "conv2d", "rtl")
    _, cycle = _layer_on(config, "conv2d", "cycle")
    assert _ops(mod) == [] and rtl.cycles == cycle.cycles


def _layer_on(config, op, backend):
    env = get_env(config)
    host, acc, add_, _, pack = _case(env, op, None, 1, addend=True)
    s, tensors = conv2d(env, EPILOGUE_CONV, shift=9, clip=(0, 127))
    return build_and_run(s, tensors, host, pack(requantize(acc, add_, 9, (0, 127), None, 0)), config, backend=backend)
