"""The requantisation epilogue's multiplier forms on the accelerator, bit-exact with
``packing.requantize``: MUL (immediate, negative too, or per channel) with every shift in the ALU's
range on ALU_MUL configurations, shift-and-add (immediate or per-channel SHR amounts, one term per set
bit of the largest multiplier: any non-negative multiplier, up to 15 set bits) without it."""

import numpy as np
import pytest

from vtakit.compiler.topi_vta import conv2d, dense
from vtakit.compiler.topi_vta.epilogue import epilogue_resources, form_terms, multiplier_form, shift_add_form
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles
from vtakit.compiler.vta.env import get_env
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig
from vtakit.runtime.packing import (SHIFT_ADD_TERMS, dense_reference, multiplier_set_bits, pack_bias, pack_matrix,
                                    requantize, shift_add_amounts, shift_add_terms, shift_add_value)

from tests.compiler.vta.helpers import EPILOGUE_CONV, build_and_run, random_layer

SMALL_MUL = VTAConfig.small(alu_mul=True)
SMALL = VTAConfig.small()
DEFAULT = VTAConfig()
WL = EPILOGUE_CONV


def _few_bits(rng, n, bits=SHIFT_ADD_TERMS, top=15):
    """``n`` multipliers in [0, 2**top) with at most ``bits`` set bits (some with fewer, one 0)."""
    out = []
    for k in range(n):
        chosen = rng.choice(top, size=rng.integers(0, bits + 1), replace=False)
        out.append(int(sum(1 << int(b) for b in chosen)))
    return np.array(out, np.int32)


def _exact_bits(rng, counts, top=15):
    """One multiplier in [0, 2**top) per entry of ``counts``, with exactly that many set bits."""
    return np.array([int(sum(1 << int(b) for b in rng.choice(top, size=k, replace=False))) for k in counts],
                    np.int32)


#: set bits per channel of the mixed multipliers (cycled over the channels): 1, 5, 9 and 15 terms
MIXED_BITS = (1, 5, 9, 15)


def _case(env, op, multiplier, seed, addend=True, bits=None):
    rng = np.random.default_rng(seed)
    host, acc, channels, pack = random_layer(env, op, rng)
    add = rng.integers(-3000, 3000, channels, dtype=np.int32) if addend else None
    if addend:
        host.append(pack_bias(add, env.batch, env.block_out))
    if multiplier == "tensor":
        mult = rng.integers(-(1 << 15), 1 << 15, channels, dtype=np.int32)
        mult[0], mult[-1] = -(1 << 15), (1 << 15) - 1
        host.append(pack_bias(mult, env.batch, env.block_out))
    elif form_terms(multiplier) is not None:
        terms = form_terms(multiplier)
        mult = _few_bits(rng, channels, terms) if bits is None else \
            _exact_bits(rng, [bits[c % len(bits)] for c in range(channels)])
        amounts = shift_add_amounts(mult, terms)
        packed = np.stack([pack_bias(amounts[:, k].copy(), env.batch, env.block_out)
                           for k in range(terms)], axis=1)
        host.append(np.ascontiguousarray(packed))
    else:
        mult = multiplier
    return host, acc, add, mult, pack


def _run(config, op, multiplier, shift, pre_shift, seed=0, backend="fsim", clip=(-128, 127), bits=None):
    env = get_env(config)
    host, acc, add, mult, pack = _case(env, op, multiplier, seed, bits=bits)
    kw = dict(shift=shift, clip=clip, multiplier=multiplier, pre_shift=pre_shift)
    if op == "conv2d":      # the graph target's tiling: room for the epilogue (conv2d's default knobs leave none)
        knobs = choose_conv2d_tiles(env, WL, 2, False, epilogue_resources(multiplier, config.alu_mul, shift))
        s, tensors = conv2d(env, WL, knobs, **kw)
    else:
        s, tensors = dense(env, 3, 6, 10, **kw)
    expect = pack(requantize(acc, add, shift, clip, mult, pre_shift))
    build_and_run(s, tensors, host, expect, config, backend=backend)
    return expect


# ---------------------------------------------------------------------------- ALU_MUL
@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("shift,pre_shift", [(18, 4), (20, 2), (21, 0), (22, 0), (23, 0), (27, 9), (31, 13), (16, 6),
                                             (-3, 0)])
def test_mul_per_channel_every_shift_fsim(op, shift, pre_shift):
    expect = _run(SMALL_MUL, op, "tensor", shift, pre_shift, seed=abs(shift))
    if 20 <= shift + pre_shift <= 23:
        assert len(np.unique(expect)) > 3            # not all saturated or zero


@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("mult,shift,pre_shift", [(-3, 4, 0), (-32768, 22, 3), (-1, 0, 0), (0, 20, 0),
                                                  (32767, 31, 12), (12345, 21, 1)])
def test_mul_immediate_negative_and_large_shifts_fsim(op, mult, shift, pre_shift):
    _run(SMALL_MUL, op, mult, shift, pre_shift, seed=7)


@pytest.mark.parametrize("op", ["conv2d", "dense"])
def test_mul_on_the_cycle_backend(op):
    _run(SMALL_MUL, op, "tensor", 24, 4, seed=3, backend="cycle")
    _run(SMALL_MUL, op, -771, 19, 0, seed=4, backend="cycle")


def test_rounding_reproduces_int32_wraparound():
    """t + 2**(shift-1) overflowing int32 wraps in requantize; the split rounding does too."""
    env = get_env(SMALL_MUL)
    a = np.full((3, 10), 127, np.int8)
    w = np.full((6, 10), 127, np.int8)
    acc = dense_reference(a, w)                      # 161290
    add = np.full(6, 0, np.int32)
    mult = np.array([32767, 13316, 13317, 13318, -32768, 1], np.int32)   # t*m near 2**31
    host = [pack_matrix(a, env.batch, env.block_in), pack_matrix(w, env.block_out, env.block_in),
            pack_bias(add, env.batch, env.block_out), pack_bias(mult, env.batch, env.block_out)]
    s, tensors = dense(env, 3, 6, 10, shift=30, clip=(-128, 127), multiplier="tensor")
    expect = pack_matrix(requantize(acc, add, 30, (-128, 127), mult), env.batch, env.block_out)
    build_and_run(s, tensors, host, expect, SMALL_MUL)


# ---------------------------------------------------------------------------- shift-and-add (no ALU_MUL)
@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("shift,pre_shift", [(20, 0), (23, 3), (14, 0), (18, 0), (31, 9)])
def test_shift_add_per_channel_fsim(config, op, shift, pre_shift):
    _run(config, op, "shift_add", shift, pre_shift, seed=shift + 1)


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("mult", [0b100100010001, 1 << 14, 3, 1, 0])
def test_shift_add_immediate_fsim(config, mult):
    _run(config, "conv2d", mult, 18, 1, seed=int(mult))


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
def test_shift_add_on_the_cycle_backend(config):
    _run(config, "conv2d", "shift_add", 21, 2, seed=11, backend="cycle")
    _run(config, "dense", 0b1010000010001, 22, 0, seed=12, backend="cycle")


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("shift,pre_shift", [(23, 3), (19, 2), (31, 0)])
def test_shift_add_many_terms_mixed_per_channel_fsim(config, op, shift, pre_shift):
    """Channels of 1, 5, 9 and 15 set bits in one layer: 15 terms, each channel exact."""
    expect = _run(config, op, shift_add_form(15), shift, pre_shift, seed=shift + 5, bits=MIXED_BITS)
    if shift + pre_shift < 31:
        assert len(np.unique(expect)) > 3            # not all saturated or zero


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("bits", [(1,), (5, 1), (9, 5, 1), (15,)], ids=["1", "5", "9", "15"])
def test_shift_add_term_counts_fsim(config, op, bits):
    """As many terms as the most set bits: 1, 5, 9, 15."""
    _run(config, op, shift_add_form(max(bits)), 22, 2, seed=sum(bits), bits=bits)


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("op", ["conv2d", "dense"])
def test_shift_add_many_terms_on_the_cycle_backend(config, op):
    _run(config, op, shift_add_form(15), 24, 4, seed=21, backend="cycle", bits=MIXED_BITS)
    _run(config, op, 0b111011101110111, 26, 0, seed=22, backend="cycle")      # immediate, 12 set bits


@pytest.mark.parametrize("config", [SMALL, DEFAULT], ids=["small", "default"])
@pytest.mark.parametrize("mult", [0b101010101010101, 0x7FFF, 0b100110101100011], ids=["8", "15", "9"])
def test_shift_add_immediate_many_bits_fsim(config, mult):
    _run(config, "dense", mult, 27, 1, seed=int(mult) % 97)


def test_shift_add_amounts_realise_the_multiplier():
    rng = np.random.default_rng(0)
    m = np.concatenate([_few_bits(rng, 200), [0, 1, 1 << 14, 0x7800, 0x4001]])
    assert (shift_add_value(shift_add_amounts(m)).reshape(-1) == m).all()
    t = rng.integers(-(1 << 31), 1 << 31, m.size)
    want = ((t * m.astype(np.int64)) + (1 << 31)) % (1 << 32) - (1 << 31)
    assert (shift_add_value(shift_add_amounts(m), t) == want).all()
    with pytest.raises(Exception, match="5 set bits, more than 4"):
        shift_add_amounts([0b11111], 4)
    assert multiplier_set_bits(-1) == 32 and multiplier_set_bits(0x7001) == 4
    # every non-negative multiplier, up to 15 set bits: as many terms as the most set bits
    every = np.arange(0, 1 << 15)
    amounts = shift_add_amounts(every)
    assert amounts.shape == (1 << 15, 15) and shift_add_terms(every) == 15
    assert (shift_add_value(amounts).reshape(-1) == every).all()
    t = rng.integers(-(1 << 31), 1 << 31, every.size)
    want = ((t * every) + (1 << 31)) % (1 << 32) - (1 << 31)
    assert (shift_add_value(amounts, t) == want).all()
    assert shift_add_terms([0, 0]) == 1 and shift_add_terms([1, 0b1011]) == 3
    assert shift_add_amounts([0b1011, 4]).shape == (2, 3)


def test_multiplier_form_and_errors():
    assert multiplier_form(None, False) == (None, None)
    assert multiplier_form(np.array([5, 5]), True) == (5, None)
    assert multiplier_form(np.array([5, -6]), True) == ("tensor", None)
    assert multiplier_form(np.array([5, 0x4400]), False) == ("shift_add:2", None)
    assert multiplier_form(np.array([0x4400, 0x4400]), False) == (0x4400, None)
    # more set bits than 4: more terms, never the CPU
    assert multiplier_form(np.array([5, 0x7700]), False) == ("shift_add:6", None)
    assert multiplier_form(np.array([1, 0x7FFF, 0]), False) == ("shift_add:15", None)
    assert multiplier_form(np.array([0x7FFF, 0x7FFF]), False) == (0x7FFF, None)
    form, reason = multiplier_form(np.array([-5]), False)
    assert form is None and "multiplier needs ALU_MUL (a negative multiplier" in reason
    form, reason = multiplier_form(np.array([3, -(1 << 15)]), False)
    assert form is None and "17 set bits" in reason
    assert "outside" in multiplier_form(np.array([1 << 15]), True)[1]
    dense(get_env(SMALL), 4, 4, 4, multiplier=0x7700)                 # 6 set bits: shift-and-add
    with pytest.raises(CompileError, match="needs ALU_MUL"):
        dense(get_env(SMALL), 4, 4, 4, multiplier=-3)
    with pytest.raises(CompileError, match="a multiplier tensor needs a configuration with ALU_MUL"):
        dense(get_env(SMALL), 4, 4, 4, multiplier="tensor")
    with pytest.raises(CompileError, match="multiplier must be None"):
        dense(get_env(SMALL), 4, 4, 4, multiplier="per-channel")
    with pytest.raises(CompileError, match="shift_add:K"):
        dense(get_env(SMALL), 4, 4, 4, multiplier="shift_add:17")
    assert form_terms("shift_add") == SHIFT_ADD_TERMS and form_terms("shift_add:9") == 9 and form_terms(7) is None
    with pytest.raises(CompileError, match="terms must be an int"):
        shift_add_form(0)


def test_epilogue_resources_grow_with_the_terms():
    """The tiler sees the real cost: 2 * K ALU instructions, K operand rows, one more tile."""
    assert epilogue_resources("shift_add:1", False, 20) == (1, 1, 2 + 4)
    assert epilogue_resources("shift_add:9", False, 20) == (1, 9, 18 + 4)
    assert epilogue_resources("shift_add:15", False, 12) == (1, 15, 30 + 2)
    assert epilogue_resources("shift_add", False, 12) == (1, SHIFT_ADD_TERMS, 2 * SHIFT_ADD_TERMS + 2)
    assert epilogue_resources(0x7FFF, False, 20) == (1, 0, 30 + 4)
    assert epilogue_resources(0x7FFF, True, 20) == (0, 0, 1 + 4)


# ---------------------------------------------------------------------------- the ALU chain
def test_alu_chain_negative_immediates_and_tensor_shifts():
    """``x * -c`` (the simplifier's ``0 - x * c``), ``c0 - x * c``, ``0 - x`` and ``x >> tensor``."""
    from tests.compiler.vta.test_vta_passes import alu_schedule, run, wrap8

    from vtakit.runtime.packing import shift_values

    cfg = SMALL_MUL
    for fexpr, ref in ((lambda a: a * -3, lambda a: a * -3), (lambda a: 7 - a * 5, lambda a: 7 - a * 5),
                       (lambda a: 0 - a, lambda a: -a), (lambda a: a * -32768, lambda a: a * -32768)):
        (a,), got = run(*alu_schedule(fexpr), config=cfg)
        np.testing.assert_array_equal(got, wrap8(ref(a.astype(np.int64))))
    (a, b), got = run(*alu_schedule(lambda a, b: a >> b, n_inputs=2), config=SMALL)
    amounts = ((b.astype(np.int64) & 63) ^ 32) - 32
    want = np.vectorize(lambda x, s: int(shift_values(np.array([x]), int(s))[0]))(a.astype(np.int64), amounts)
    np.testing.assert_array_equal(got, wrap8(want))
    with pytest.raises(CompileError, match="negates, which needs a configuration with ALU_MUL"):
        import vtakit
        s, args = alu_schedule(lambda a: 0 - a)
        vtakit.build(s, args, target="vta", config=SMALL)
