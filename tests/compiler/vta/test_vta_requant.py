"""The fused requantisation epilogue (ALU_REQUANT): every epilogue form compiles to REQUANT where it
can, bit-exact with ``packing.requantize`` / ``add_reference``, with fewer ALU micro-ops than the
same layer without the key; ALU injection's matcher on its own."""

import numpy as np
import pytest

import vtakit
from vtakit.compiler import te
from vtakit.compiler.topi_vta import add, conv2d, dense
from vtakit.compiler.topi_vta.epilogue import epilogue_resources
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
from vtakit.compiler.vta.env import get_env
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import AluInsn, AluOp
from vtakit.runtime import Device
from vtakit.runtime.packing import add_reference, pack_bias, pack_nchw, requantize

from tests.compiler.vta.helpers import EPILOGUE_CONV, build_and_run, random_layer
from tests.compiler.vta.test_vta_multiplier import _case

SMALL = VTAConfig.small()
REQUANT = VTAConfig.small(alu_requant=True)
REQUANT_MUL = VTAConfig.small(alu_requant=True, alu_mul=True)


def _alu_ops(mod) -> list[AluOp]:
    return [i.alu_opcode for i in mod.template.insns if isinstance(i, AluInsn)]


def _layer(config, op, seed, shift, clip, addend=True, multiplier=None, pre_shift=0):
    """Build and run one small conv2d/dense with the epilogue's arguments on fsim, numpy-exact;
    returns (module, stats)."""
    env = get_env(config)
    host, acc, add_, mult, pack = _case(env, op, multiplier, seed, addend=addend)
    kw = dict(shift=shift, clip=clip, multiplier=multiplier, pre_shift=pre_shift, with_addend=addend)
    if op == "conv2d":
        knobs = choose_conv2d_tiles(env, EPILOGUE_CONV, 2, False,
                                    epilogue_resources(multiplier, config.alu_mul, shift, config.alu_requant))
        s, tensors = conv2d(env, EPILOGUE_CONV, knobs, **kw)
    else:
        s, tensors = dense(env, 3, 6, 10, **kw)
    expect = pack(requantize(acc, add_, shift, clip, mult, pre_shift))
    return build_and_run(s, tensors, host, expect, config)


@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("shift, clip, addend, ops", [
    (9, (-128, 127), True, [AluOp.REQUANT]),                      # REQUANT tensor: bias + rounding addend
    (9, (0, 127), True, [AluOp.REQUANT]),                         # ReLU bit
    (0, (-128, 127), True, [AluOp.REQUANT]),                      # no shift
    (20, (0, 127), True, [AluOp.REQUANT]),                        # wide (from 24 on, the simplifier drops clips)
    (7, (-128, 127), False, [AluOp.REQUANT]),                     # no bias: REQUANT immediate
    (9, (-5, 100), True, [AluOp.REQUANT, AluOp.MAX, AluOp.MIN]),  # a narrower clip: MAX and MIN after it
    (9, (-100, 127), True, [AluOp.REQUANT, AluOp.MAX]),           # (a low bound above 0 would fill padding lanes)
    (-2, (-128, 127), True, [AluOp.ADD, AluOp.SHR, AluOp.REQUANT]),   # a left shift: only the clip is REQUANT
])
def test_plain_epilogue_is_one_requant(op, shift, clip, addend, ops):
    mod, stats = _layer(REQUANT, op, 1, shift, clip, addend)
    assert sorted(set(_alu_ops(mod))) == sorted(set(ops))
    _, plain = _layer(SMALL, op, 1, shift, clip, addend)
    plain_ops = int(addend) + int(shift != 0) + 2       # ADD, SHR, MAX, MIN
    assert stats.counters["alu_counter"] * plain_ops == plain.counters["alu_counter"] * len(ops)


@pytest.mark.parametrize("config, multiplier, shift", [
    (REQUANT_MUL, 300, 20),            # MUL immediate, rounding beyond one ADD immediate (2**19)
    (REQUANT_MUL, -77, 9),             # a negative multiplier
    (REQUANT_MUL, "tensor", 14),       # MUL tensor
    (REQUANT, 0x1234, 18),             # shift-and-add with immediate amounts
    (REQUANT, "shift_add:4", 12),      # shift-and-add with per-channel amounts
    (REQUANT, 5, 0),                   # a multiplier and no final shift
])
@pytest.mark.parametrize("op", ["conv2d", "dense"])
def test_multiplier_forms_end_in_requant(config, multiplier, shift, op):
    mod, stats = _layer(config, op, 2, shift, (-128, 127), multiplier=multiplier, pre_shift=1)
    ops = _alu_ops(mod)
    assert ops[-1] == AluOp.REQUANT and ops.count(AluOp.REQUANT) * 1 <= len(ops)
    assert AluOp.MIN not in ops and AluOp.MAX not in ops
    _, plain = _layer(config.replace(alu_requant=False), op, 2, shift, (-128, 127), multiplier=multiplier,
                      pre_shift=1)
    assert stats.counters["alu_counter"] < plain.counters["alu_counter"]


@pytest.mark.parametrize("residual", [(0, 0), (2, 1), (31, 3)], ids=str)
def test_conv2d_with_a_fused_residual(residual):
    """The residual's shift and the clip are one REQUANT immediate; the pre-residual shift stays apart."""
    from vtakit.compiler.graph.ops.qnn import residual_requantize
    from vtakit.runtime.packing import conv2d_reference, pack_oihw

    env = get_env(REQUANT)
    wl = EPILOGUE_CONV
    rng = np.random.default_rng(sum(residual))
    x = rng.integers(-128, 128, (1, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
    acc = conv2d_reference(x, w, wl.stride, wl.pad)
    addend = rng.integers(-2000, 2000, wl.co).astype(np.int32)
    r = rng.integers(-128, 128, acc.shape, dtype=np.int8)
    expect = residual_requantize(acc, addend, 9, (0, 127), r, *residual)
    s, tensors = conv2d(env, wl, shift=9, clip=(0, 127), residual=residual)
    host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in),
            pack_bias(addend, env.batch, env.block_out), pack_nchw(r, env.batch, env.block_out)]
    mod, _ = build_and_run(s, tensors, host, pack_nchw(expect, env.batch, env.block_out), env.config)
    ops = _alu_ops(mod)
    assert ops[-1] == AluOp.REQUANT and AluOp.MIN not in ops and AluOp.MAX not in ops


@pytest.mark.parametrize("params, ops", [
    (dict(), [AluOp.REQUANT]),                                                   # ADD b, MAX, MIN
    (dict(lshift_b=6, addend=1 << 8, shift=9, clip=(0, 127)), [AluOp.SHR, AluOp.REQUANT]),   # rounding folded
    (dict(lshift_a=1, addend=3, shift=2), [AluOp.SHR, AluOp.ADD, AluOp.REQUANT]),   # another addend: ADD stays
    (dict(addend=5, shift=-1), [AluOp.ADD, AluOp.SHR, AluOp.REQUANT]),      # a left shift: the clip alone
], ids=str)
def test_residual_add_op(params, ops):
    env = get_env(REQUANT)
    shape = (1, 8, 3, 4)
    s, tensors = add(env, shape, **params)
    mod = vtakit.build(s, tensors, target="vta", config=REQUANT)
    rng = np.random.default_rng(5)
    a, b = (pack_nchw(rng.integers(-128, 128, shape, dtype=np.int8), env.batch, env.block_out) for _ in "ab")
    args = {k: params.get(k, d) for k, d in (("lshift_a", 0), ("lshift_b", 0), ("addend", 0), ("shift", 0),
                                             ("clip", (-128, 127)))}
    want = add_reference(a, b, *args.values())
    dev = Device(REQUANT, backend="fsim")
    arrays = [dev.array(a), dev.array(b), dev.empty(want.shape, np.int8)]
    mod(*arrays)
    np.testing.assert_array_equal(arrays[-1].numpy(), want)
    assert sorted(set(_alu_ops(mod))) == sorted(set(ops))


def test_epilogue_resources_count_requant():
    assert epilogue_resources(300, True, 20) == (0, 0, 5)
    assert epilogue_resources(300, True, 20, requant=True) == (0, 0, 1)
    assert epilogue_resources(300, True, -3, requant=True) == (0, 0, 3)   # a left shift: the rounding stays
    assert epilogue_resources(None, False, 8, requant=True) == (0, 0, 0)


def test_the_rtl_runs_a_compiled_requant_layer():
    """One small dense layer with a REQUANT epilogue on the RTL: the same bytes and cycles as the
    cycle model."""
    env = get_env(REQUANT)
    rng = np.random.default_rng(3)
    host, acc, channels, pack = random_layer(env, "dense", rng)
    addend = rng.integers(-3000, 3000, channels, dtype=np.int32)
    s, tensors = dense(env, 3, 6, 10, shift=8, clip=(0, 127), with_addend=True)
    expect = pack(requantize(acc, addend, 8, (0, 127)))
    host = host + [pack_bias(addend, env.batch, env.block_out)]
    mod, cycle = build_and_run(s, tensors, host, expect, REQUANT, backend="cycle")
    assert AluOp.REQUANT in _alu_ops(mod)
    _, rtl = build_and_run(s, tensors, host, expect, REQUANT, backend="rtl")
    assert rtl.cycles == cycle.cycles


def test_matcher_keeps_expressions_it_cannot_fuse():
    """ALU injection fuses only what REQUANT computes: a clip without int8 bounds stays MAX/MIN."""
    env = get_env(REQUANT)
    n = env.block_out
    a = te.placeholder((4, 1, n), "int32", name="a")
    a_acc = te.compute(a.shape, lambda *i: a(*i), name="a_acc")
    y = te.compute(a.shape, lambda *i: te.min(te.max(a_acc(*i) >> 3, -1000), 1000), name="y")
    out = te.compute(a.shape, lambda *i: y(*i).astype("int8"), name="out")
    s = te.create_schedule(out.op)
    for t in (a_acc, y):
        s[t].set_scope(env.acc_scope)
    s[a_acc].pragma(s[a_acc].op.axis[0], env.dma_copy)
    s[y].pragma(s[y].op.axis[0], env.alu)
    s[out].pragma(s[out].op.axis[0], env.dma_copy)
    mod = vtakit.build(s, [a, out], target="vta", config=REQUANT)
    assert _alu_ops(mod) == [AluOp.SHR, AluOp.MAX, AluOp.MIN]
    assert isa.requant_imm(3, relu=True, rounding=True) == 3 | 32 | 64
