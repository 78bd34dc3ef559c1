"""The ``vta`` graph target on ALU_REQUANT configurations: every requantisation epilogue ends in the
fused REQUANT, and networks stay bit-exact with the integer CPU build (``target="llvm"``) and the
numpy reference, outputs and boundary tensors, on fsim and cycle, in fewer accelerator cycles."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit.graph as vg
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp
from vtakit.runtime.template import ProgramTemplate

from tests.graph.test_vta_target import Net, _check, _odd_channel_model, residual_pool_dense_net

SMALL = VTAConfig.small()
REQUANT = VTAConfig.small(alu_requant=True)


def _alu_ops(mod: vg.NetModule) -> list[AluOp]:
    """Every ALU operation in the module's accelerator programs (its program-template kernels)."""
    return [i.alu_opcode for k in mod._kernels if isinstance(k, ProgramTemplate)
            for i in k.insns if isinstance(i, AluInsn)]


def _cycles(mod: vg.NetModule, inputs: dict) -> int:
    return mod.profile(inputs, backend="cycle").total_cycles


def test_network_with_residual_pool_and_dense_is_bit_exact_and_faster():
    """conv -> maxpool -> conv -> residual add -> strided conv -> flatten -> dense -> dense."""
    net, e, r = residual_pool_dense_net()
    mod = _check(net, [e, r], REQUANT, backends=("fsim", "cycle"))
    steps = {s.name: s for s in mod.plan.steps}
    assert {steps[n.name].target for n in net.nodes if n.op.startswith("qnn.")} == {"vta"}
    plain = vg.build(net.graph([e, r]), target="vta", config=SMALL)
    fused, unfused = _cycles(mod, net.sample), _cycles(plain, net.sample)
    assert fused < unfused, (fused, unfused)
    ops = _alu_ops(mod)
    assert ops.count(AluOp.REQUANT) > 0 and AluOp.MIN not in ops and AluOp.REQUANT not in _alu_ops(plain)


@pytest.mark.parametrize("lshift, rshift", [(0, 0), (2, 1)])
def test_convs_with_fused_residuals(lshift, rshift):
    net = Net((1, 20, 8, 6), seed=21)
    a = net.conv_residual("x", "x", relu=False, residual_lshift=lshift, residual_shift=rshift)
    s = net.conv(a, 36, kernel=(1, 1), pads=(0, 0, 0, 0), strides=(2, 2), relu=False)
    b = net.conv(a, 36, strides=(2, 2))
    c = net.conv_residual(b, s, residual_lshift=lshift, residual_shift=rshift)
    mod = _check(net, [c, a], REQUANT, backends=("fsim", "cycle"))
    assert all(s.target == "vta" for s in mod.plan.steps if s.name in {n.name for n in net.nodes})


@pytest.mark.parametrize("config", [REQUANT, REQUANT.replace(alu_mul=True)], ids=["shift_add", "mul"])
def test_quantized_float_scales_end_in_requant(config):
    """Per-channel float scales: fixed-point multipliers (shift-and-add, or MUL with ALU_MUL) whose
    rounding shifts are REQUANTs; bit-exact with the numpy reference."""
    g = _odd_channel_model()
    calib = np.random.default_rng(1).standard_normal((4, 3, 11, 9)).astype(np.float32)
    q = vg.quantize(g, calib, scales="float", weight_granularity="channel")
    x = {"data": calib[:1]}
    mod = vg.build(q, target="vta", config=config)
    mult = [n.name for n in q.nodes if n.op in ("qnn.conv2d", "qnn.dense") and len(n.inputs) > 3 and n.inputs[3]]
    steps = {s.name: s for s in mod.plan.steps}
    assert mult and all(steps[n].target == "vta" for n in mult), [(n, steps[n].note) for n in mult]
    assert AluOp.REQUANT in _alu_ops(mod) and AluOp.MIN not in _alu_ops(mod)
    ref = vg.evaluate(q, x)["logits"]
    llvm = vg.build(q, target="llvm").run(x)[0]
    for backend in ("fsim", "cycle"):
        got = mod.run(x, backend=backend)[0]
        np.testing.assert_array_equal(got, ref, err_msg=backend)
        np.testing.assert_array_equal(got, llvm, err_msg=backend)
