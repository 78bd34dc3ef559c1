"""Packed conv2d and dense with their default schedules: numpy-exact on fsim, cycle and rtl.

The default run keeps two real ResNet-18 layers (C10, C11) on fsim; every layer C2-C11 with 1
and 2 virtual threads (fsim's token, deadlock and race checks), the 1024^3 dense and the cycle
backend runs are ``slow``.
"""

import numpy as np
import pytest

from vtakit.compiler.topi_vta import (RESNET18, Conv2dKnobs, Conv2dWorkload, DenseKnobs, conv2d,
                                      default_conv2d_knobs, dense, get_workload)
from vtakit.compiler.topi_vta.bench import run_conv2d, run_dense
from vtakit.errors import CompileError
from vtakit.hw.config import VTAConfig
from vtakit.compiler.vta.env import get_env

from tests.compiler.vta.helpers import EPILOGUE_CONV, build_and_run, conv_case, dense_case, random_layer


# ---------------------------------------------------------------------------- small configuration
@pytest.mark.parametrize("vthreads", [1, 2, 3])
@pytest.mark.parametrize("wl", [Conv2dWorkload(6, 6, 8, 12, 3, 1, 1), Conv2dWorkload(9, 7, 4, 8, 3, 1, 2),
                                Conv2dWorkload(8, 8, 8, 8, 1, 0, 2), Conv2dWorkload(5, 5, 4, 4, 3, 0, 1),
                                Conv2dWorkload(4, 4, 4, 4, 3, 2, 1, batch=1)], ids=str)
def test_conv2d_default_schedule_small(small_env, wl, vthreads):
    s, tensors = conv2d(small_env, wl, vthreads=vthreads)
    host, expect = conv_case(small_env, wl)
    build_and_run(s, tensors, host, expect, small_env.config)


@pytest.mark.parametrize("backend", ["fsim", "cycle"])
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("wl, residual", [(Conv2dWorkload(6, 6, 8, 12, 3, 1, 1), (0, 0)),
                                          (Conv2dWorkload(9, 7, 4, 6, 3, 1, 2, batch=3), (2, 1)),
                                          (Conv2dWorkload(8, 8, 8, 8, 1, 0, 2), (31, 3))], ids=str)
def test_conv2d_with_a_fused_residual(small_env, wl, residual, vthreads, backend):
    """``residual=(lshift, rshift)``: ``clip((((acc + addend) >> shift) + (r << lshift)) >> rshift)``
    (:func:`vtakit.compiler.graph.ops.qnn.residual_requantize`), the residual DMA-loaded per tile."""
    from vtakit.compiler.graph.ops.qnn import residual_requantize
    from vtakit.runtime.packing import conv2d_reference, pack_bias, pack_nchw, pack_oihw, pad_to_blocks

    env = small_env
    rng = np.random.default_rng(sum(residual))
    x = rng.integers(-128, 128, (wl.batch, wl.ci, wl.h, wl.w), dtype=np.int8)
    w = rng.integers(-128, 128, (wl.co, wl.ci, wl.kh, wl.kw), dtype=np.int8)
    acc = conv2d_reference(pad_to_blocks(x, {0: env.batch}), w, wl.stride, wl.pad)
    addend = rng.integers(-2000, 2000, wl.co).astype(np.int32)
    r = rng.integers(-128, 128, acc.shape, dtype=np.int8)
    expect = residual_requantize(acc, addend, 9, (-128, 127), r, *residual)
    assert 0.2 < np.mean(np.abs(expect.astype(int)) < 127)
    s, tensors = conv2d(env, wl, vthreads=vthreads, shift=9, clip=(-128, 127), residual=residual)
    host = [pack_nchw(x, env.batch, env.block_in), pack_oihw(w, env.block_out, env.block_in),
            pack_bias(addend, env.batch, env.block_out), pack_nchw(r, env.batch, env.block_out)]
    build_and_run(s, tensors, host, pack_nchw(expect, env.batch, env.block_out), env.config, backend)


@pytest.mark.parametrize("residual", [(0, -1), (32, 0), "x"])
def test_conv2d_residual_shifts_are_checked(small_env, residual):
    with pytest.raises(CompileError, match="residual"):
        conv2d(small_env, Conv2dWorkload(4, 4, 4, 4, 3, 1, 1), residual=residual)


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("mnk", [(4, 8, 12), (16, 32, 16), (8, 4, 64)], ids=str)
def test_dense_default_schedule_small(small_env, mnk, vthreads):
    m, n, k = mnk
    s, tensors = dense(small_env, m, n, k, vthreads=vthreads)
    host, expect = dense_case(small_env, m, n, k)
    build_and_run(s, tensors, host, expect, small_env.config)


# Batch and channels that are not whole blocks are zero-padded: every lane is exact, and the
# benchmark result says what the padding costs (ideal MACs on the padded shapes vs useful MACs).
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("wl", [Conv2dWorkload(6, 6, 6, 5, 3, 1, 1), Conv2dWorkload(7, 5, 3, 9, 1, 0, 2, batch=3),
                                Conv2dWorkload(4, 4, 4, 4, 3, 1, 1, batch=1)], ids=str)
def test_conv2d_pads_partial_blocks(wl, batch):
    config = VTAConfig.small(LOG_BATCH=batch - 1)
    result = run_conv2d(wl, config, vthreads=2)
    padded = [-(-n // b) * b for n, b in ((wl.batch, batch), (wl.ci, 4), (wl.co, 4))]
    assert result.correct and result.useful_macs == wl.macs
    assert result.ideal_macs == padded[0] * padded[1] * padded[2] * wl.oh * wl.ow * wl.kh * wl.kw


@pytest.mark.parametrize("mnk", [(3, 5, 7), (1, 4, 4), (9, 13, 30)], ids=str)
def test_dense_pads_partial_blocks(mnk):
    m, n, k = mnk
    result = run_dense(m, n, k, VTAConfig.small(LOG_BATCH=1), vthreads=2)
    assert result.correct and result.useful_macs == m * n * k
    assert result.ideal_macs == (-(-m // 2) * 2) * (-(-n // 4) * 4) * (-(-k // 4) * 4)


@pytest.mark.parametrize("m, n, k", [(0, 4, 4), (4, True, 4), (4, 4, 2.5)])
def test_dense_sizes_must_be_positive_integers(small_env, m, n, k):
    with pytest.raises(CompileError, match="dense: [mnk] = .* must be a positive integer"):
        dense(small_env, m, n, k)


@pytest.mark.parametrize("config,wl", [(VTAConfig.small(), Conv2dWorkload(4, 4, 4, 8, 3, 1, 1)),
                                       (VTAConfig(), Conv2dWorkload(4, 4, 16, 32, 3, 1, 1))], ids=["small", "default"])
def test_small_conv2d_on_rtl_and_cycle_agree(config, wl):
    rtl = run_conv2d(wl, config, backend="rtl", vthreads=2)
    assert rtl.correct and rtl.cycles > rtl.ideal_cycles > 0
    cyc = run_conv2d(wl, config, backend="cycle", vthreads=2)
    assert cyc.correct and cyc.cycles == rtl.cycles


# Knobs that do not divide the axes: the tail tiles are peeled off (LoopPartition) into smaller
# DMAs and micro-op loops; tails of the reduction (tile_ci) and of each output axis, with and
# without virtual threads over whole tiles.
@pytest.mark.parametrize("mnk,knobs", [
    ((3, 12, 20), DenseKnobs(2, 2, 3)), ((5, 8, 12), DenseKnobs(7, 3, 5)),
    ((4, 16, 12), DenseKnobs(3, 1, 2, oc_nthread=2)), ((4, 16, 12), DenseKnobs(1, 3, 2)),
], ids=str)
def test_dense_with_knobs_that_do_not_divide(small_env, mnk, knobs):
    m, n, k = mnk
    s, tensors = dense(small_env, m, n, k, knobs)
    host, expect = dense_case(small_env, m, n, k)
    build_and_run(s, tensors, host, expect, small_env.config)


@pytest.mark.parametrize("wl,knobs", [
    (Conv2dWorkload(8, 8, 8, 8, 3, 1, 1), Conv2dKnobs(3, 8, 1, 1)),
    (Conv2dWorkload(8, 8, 8, 8, 3, 1, 1), Conv2dKnobs(8, 3, 1, 1)),
    (Conv2dWorkload(7, 7, 12, 12, 3, 1, 1), Conv2dKnobs(3, 5, 2, 2)),
    (Conv2dWorkload(6, 6, 12, 8, 1, 0, 1), Conv2dKnobs(4, 4, 1, 2)),
    (Conv2dWorkload(8, 7, 8, 12, 3, 1, 1), Conv2dKnobs(2, 3, 2, 1, h_nthread=2)),
    # regressions: a tail tile that reaches no padding (its padding condition is constant true);
    # a tail whose row slack (20 entries) exceeds the 4-bit x_pad_1 field (one DMA per row instead);
    # a tail whose row slack (15) fits the field alone but not with its right padding (1) on top
    (Conv2dWorkload(6, 8, 4, 4, 3, 1, 2), Conv2dKnobs(2, 3, 1, 1)),
    (Conv2dWorkload(6, 5, 12, 4, 1, 0, 1), Conv2dKnobs(5, 5, 2, 2)),
    (Conv2dWorkload(8, 19, 4, 4, 3, 1, 1), Conv2dKnobs(1, 17, 2, 1)),
], ids=str)
def test_conv2d_with_knobs_that_do_not_divide(small_env, wl, knobs):
    s, tensors = conv2d(small_env, wl, knobs)
    host, expect = conv_case(small_env, wl)
    build_and_run(s, tensors, host, expect, small_env.config)


def test_tail_tiles_on_the_cycle_backend():
    """The cycle model checks the program's timing-independent rules too (races, tokens)."""
    r = run_conv2d(Conv2dWorkload(7, 7, 12, 12, 3, 1, 1), VTAConfig.small(), backend="cycle",
                   knobs=Conv2dKnobs(3, 5, 2, 2))
    assert r.correct and r.cycles > r.ideal_cycles > 0


# ---------------------------------------------------------------------------- default configuration
@pytest.mark.parametrize("layer", ["C10", "C11"])
def test_resnet_layers_fsim(layer):
    r = run_conv2d(RESNET18[layer], backend="fsim", vthreads=2)
    assert r.correct and r.ideal_cycles == RESNET18[layer].macs // (16 * 16)


@pytest.mark.slow
@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("layer", list(RESNET18))
def test_all_resnet_layers_fsim(layer, vthreads):
    """Every benchmark program passes fsim's token, deadlock and race checks and matches numpy."""
    assert run_conv2d(RESNET18[layer], backend="fsim", vthreads=vthreads).correct


@pytest.mark.slow
@pytest.mark.parametrize("layer", list(RESNET18))
def test_all_resnet_layers_cycle(layer):
    r = run_conv2d(RESNET18[layer], backend="cycle", vthreads=2)
    assert r.correct and r.cycles >= r.ideal_cycles


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["fsim", "cycle"])
def test_dense_1024_cubed(backend):
    r = run_dense(1024, 1024, 1024, backend=backend, vthreads=2)
    assert r.correct and r.ideal_cycles == 1024 * 64 * 64


# ---------------------------------------------------------------------------- helpers and errors
def test_workload_and_knob_errors(small_env):
    assert get_workload("resnet18.C5") is RESNET18["C5"] and get_workload("C5") is RESNET18["C5"]
    with pytest.raises(CompileError, match="unknown workload 'resnet18.C1'"):
        get_workload("resnet18.C1")
    with pytest.raises(CompileError, match="stride must be a positive int or 2 positive ints, got 0"):
        Conv2dWorkload(8, 8, 4, 4, 3, 1, 0)
    with pytest.raises(CompileError, match="pad must be a non-negative int"):
        Conv2dWorkload(8, 8, 4, 4, 3, -1, 1)
    with pytest.raises(CompileError, match=r"pad must be a non-negative int or 4 non-negative ints, got \(1, 1\)"):
        Conv2dWorkload(8, 8, 4, 4, 3, (1, 1), 1)
    with pytest.raises(CompileError, match=r"kernel must be a positive int or 2 positive ints, got \(3, 0\)"):
        Conv2dWorkload(8, 8, 4, 4, (3, 0), 1, 1)
    with pytest.raises(CompileError, match="does not fit a 2x2 input"):
        Conv2dWorkload(2, 2, 4, 4, 3, 0, 1)
    wl = Conv2dWorkload(8, 8, 8, 8, 3, 1, 1)
    with pytest.raises(CompileError, match="tile_h=0 must be a positive integer"):
        conv2d(small_env, wl, Conv2dKnobs(0, 8, 1, 1))
    with pytest.raises(CompileError, match="tile_co=1 must divide 2 into 3 virtual threads"):
        conv2d(small_env, wl, Conv2dKnobs(8, 8, 1, 1, oc_nthread=3))
    with pytest.raises(CompileError, match="tile_ci=True must be a positive integer"):
        dense(small_env, 8, 8, 8, DenseKnobs(2, 1, True))
    with pytest.raises(CompileError, match="tile_co=3 must divide 4 into 2 virtual threads"):
        dense(small_env, 8, 16, 8, DenseKnobs(2, 3, 1, oc_nthread=2))
    with pytest.raises(CompileError, match="vthreads must be >= 1"):
        default_conv2d_knobs(small_env, wl, 0)
    with pytest.raises(CompileError, match="no conv2d tiling"):
        default_conv2d_knobs(small_env, Conv2dWorkload(64, 64, 4, 4, 11, 5, 1), 2)
    with pytest.raises(CompileError, match="no dense tiling of 4x4x4 fits .*, even with one virtual thread"):
        run_dense(4, 4, 4, VTAConfig.small(log_acc_buff_size=4), vthreads=2)
    with pytest.raises(CompileError, match=r"vthreads must be >= 1 \(an integer\), got 1.5"):
        run_dense(4, 4, 4, VTAConfig.small(), vthreads=1.5)


def test_tiles_entirely_in_the_padding(small_env):
    # pad 3 around a 1x1 kernel: the first output rows read nothing but padding
    wl = Conv2dWorkload(4, 2, 8, 16, 1, 3, 1)
    knobs = default_conv2d_knobs(small_env, wl, 2)
    assert run_conv2d(wl, VTAConfig.small(), knobs=knobs).correct
    with pytest.raises(CompileError, match=r"access pointer to data\[-4:0\] is out of range .*entirely in the padding"):
        run_conv2d(wl, VTAConfig.small(), knobs=Conv2dKnobs(5, 2, 4, 1, 1, 2))
    with pytest.raises(CompileError, match="each must read input that is not all padding"):
        default_conv2d_knobs(small_env, Conv2dWorkload(9, 9, 8, 8, 1, 2, 1), 1)


def test_programs_that_would_deadlock_are_compile_errors():
    shallow = VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1)
    wl = Conv2dWorkload(6, 6, 8, 8, 3, 1, 1)
    with pytest.raises(CompileError, match="deadlocks on 1x4_i8w8a32_10_9_10_11 with TOKEN_QUEUE_DEPTH=1 and "
                                           "CMD_QUEUE_DEPTH=1; use fewer virtual threads"):
        run_conv2d(wl, shallow, knobs=Conv2dKnobs(2, 6, 1, 1, 1, 3))
    # the default tiling stays within the token queue depth
    result = run_conv2d(wl, shallow, vthreads=3)
    assert result.correct and result.vthreads == 1


def test_threads_fall_back_when_the_output_does_not_split(small_env):
    # one output block: two threads cannot share it, so one runs (the knobs say so)
    result = run_dense(4, 4, 4, VTAConfig.small(), vthreads=2)
    assert result.correct and result.knobs["oc_nthread"] == 1
    # a 7x7 output with one channel block splits neither 3 nor 2 ways: one thread
    knobs = default_conv2d_knobs(small_env, Conv2dWorkload(7, 7, 4, 4, 3, 1, 1), 3)
    assert (knobs.oc_nthread, knobs.h_nthread) == (1, 1)
    # 6 rows and 2 channel blocks: 4 threads split neither, 3 split the rows
    knobs = default_conv2d_knobs(small_env, Conv2dWorkload(6, 6, 4, 8, 3, 1, 1), 4)
    assert knobs.oc_nthread * knobs.h_nthread == 3 and knobs.h_nthread == 3


# ---------------------------------------------------------------------------- general workloads
def test_workload_normalises_kernel_pads_and_strides_and_has_one_key():
    wl = Conv2dWorkload(7, 9, 3, 20, (3, 1), (0, 1, 1, 0), (2, 1), batch=2)
    assert (wl.kernel, wl.pad, wl.stride) == ((3, 1), (0, 1, 1, 0), (2, 1))
    assert (wl.kh, wl.kw, wl.pad_top, wl.pad_left, wl.pad_bottom, wl.pad_right, wl.stride_h, wl.stride_w) == \
        (3, 1, 0, 1, 1, 0, 2, 1)
    assert (wl.oh, wl.ow) == ((7 + 1 - 3) // 2 + 1, 9 + 1 - 1 + 1) and wl.macs == 2 * 3 * 10 * 20 * 3 * 3
    assert wl.key == (7, 9, 3, 20, 3, 1, 0, 1, 1, 0, 2, 1, 2)
    assert Conv2dWorkload.from_key(wl.key) == wl and Conv2dWorkload.from_key(list(wl.key)).key == wl.key
    c3 = RESNET18["C3"]                                   # ints: the same as the tuples
    assert c3 == Conv2dWorkload(56, 56, 64, 128, (3, 3), (1, 1, 1, 1), (2, 2))
    assert Conv2dWorkload.from_key((56, 56, 64, 128, 3, 1, 2)) == c3          # the older 7-int form
    with pytest.raises(CompileError, match="expected 13 ints"):
        Conv2dWorkload.from_key((1, 2, 3))


GENERAL = [
    Conv2dWorkload(7, 5, 3, 20, (3, 1), (0, 1, 1, 0), (2, 1)),
    Conv2dWorkload(9, 6, 20, 36, (1, 3), (1, 0, 0, 2), (1, 2)),
    Conv2dWorkload(5, 7, 36, 3, (2, 3), (1, 1, 0, 2), (1, 1)),
    Conv2dWorkload(11, 3, 3, 20, (5, 1), (2, 0, 2, 0), (2, 1), batch=3),
    Conv2dWorkload(6, 9, 20, 20, (3, 3), (0, 2, 1, 1), (2, 3)),
]


@pytest.mark.parametrize("vthreads", [1, 2])
@pytest.mark.parametrize("wl", GENERAL, ids=lambda wl: "x".join(map(str, wl.key)))
def test_general_conv2d_small_fsim(wl, vthreads):
    """Non-square kernels, asymmetric pads, per-axis strides, odd channel counts and sizes:
    bit-exact on fsim against numpy (conv2d_reference + requantize)."""
    result = run_conv2d(wl, VTAConfig.small(), vthreads=vthreads)
    assert result.correct and result.unsaturated > 0.95 and result.useful_macs == wl.macs


def test_general_conv2d_default_config_and_cycle():
    wl = Conv2dWorkload(9, 8, 20, 36, (3, 1), (0, 1, 1, 0), (2, 1))
    assert run_conv2d(wl, VTAConfig(), vthreads=2).correct
    r = run_conv2d(GENERAL[0], VTAConfig.small(), backend="cycle", vthreads=2)
    assert r.correct and r.cycles > r.ideal_cycles > 0


# ---------------------------------------------------------------------------- requantisation epilogue
MUL = VTAConfig.small(alu_mul=True)


def _epilogue_case(env, op, with_addend, multiplier, seed=0):
    """Packed operands and the packed expected output of a small conv2d or dense with the epilogue's
    operands: ``(host arrays, requantize kwargs (addend, multiplier), pack)``."""
    from vtakit.runtime.packing import pack_bias
    rng = np.random.default_rng(seed)
    host, acc, channels, pack = random_layer(env, op, rng)
    addend = rng.integers(-3000, 3000, channels, dtype=np.int32) if with_addend else None
    mult = rng.integers(-300, 300, channels, dtype=np.int32) if multiplier == "tensor" else multiplier
    host += [pack_bias(t, env.batch, env.block_out) for t in (addend, mult) if isinstance(t, np.ndarray)]
    return host, acc, addend, mult, pack


@pytest.mark.parametrize("op", ["conv2d", "dense"])
@pytest.mark.parametrize("with_addend,multiplier,shift,pre_shift,clip", [
    (True, None, 9, 0, (-128, 127)),
    (False, None, 8, 0, (-100, 50)),
    (True, None, -1, 0, (-128, 127)),          # a left shift: nearly everything saturates, both ways
    (True, None, 0, 0, (0, 127)),              # no SHR at all
    (True, "tensor", 13, 4, (-128, 127)),
    (False, "tensor", 16, 2, (-128, 127)),     # the rounding constant 2**15 takes two ADD immediates
    (True, 77, 10, 3, (-128, 127)),
    (True, 3, 3, -1, (-20, 20)),               # a left pre-shift
], ids=str)
def test_epilogue_equals_requantize_on_fsim(op, with_addend, multiplier, shift, pre_shift, clip):
    from vtakit.runtime.packing import requantize
    env = get_env(MUL)
    host, acc, addend, mult, pack = _epilogue_case(env, op, with_addend, multiplier)
    kwargs = dict(shift=shift, clip=clip, with_addend=with_addend, multiplier=multiplier, pre_shift=pre_shift)
    s, tensors = conv2d(env, EPILOGUE_CONV, **kwargs) \
        if op == "conv2d" else dense(env, 3, 6, 10, **kwargs)
    names = [t.name for t in tensors]
    want_names = ["addend"] * with_addend + ["multiplier"] * (multiplier == "tensor")
    assert names[2:-1] == want_names
    expect = pack(requantize(acc, addend, shift, clip, mult, pre_shift))
    build_and_run(s, tensors, host, expect, MUL)


def test_epilogue_stages_skip_identities_and_check_their_parameters(small_env):
    from vtakit.compiler.topi_vta import dense_packed
    _, st = dense_packed(small_env, 4, 4, 4, shift=0, with_addend=False)
    assert [n for n in st if n != "gemm"] == ["clip"]
    _, st = dense_packed(get_env(MUL), 4, 4, 4, shift=3, multiplier=5, pre_shift=1)
    assert [n for n in st if n != "gemm"] == ["addend_add", "shr", "mul", "round_add", "round_shr", "clip"]
    with pytest.raises(CompileError, match="a multiplier tensor needs a configuration with ALU_MUL enabled"):
        dense(small_env, 4, 4, 4, multiplier="tensor")
    with pytest.raises(CompileError, match=r"multiplier 32768 is outside \[-32768, 32767\]"):
        dense(get_env(MUL), 4, 4, 4, multiplier=1 << 15)
    with pytest.raises(CompileError, match="shift must be an int in"):
        dense(small_env, 4, 4, 4, shift=32)
    with pytest.raises(CompileError, match="clip"):
        dense(small_env, 4, 4, 4, clip=(0, 200))
    _, st = dense_packed(get_env(MUL), 4, 4, 4, shift=18, multiplier=-3)   # every shift; negative immediates
    assert [n for n in st if n != "gemm"] == ["addend_add", "mul", "round_pre", "round_add", "round_wrap",
                                              "round_shr", "clip"]
    _, st = dense_packed(small_env, 4, 4, 4, shift=2, pre_shift=5)     # no multiplier: pre_shift unused
    assert [n for n in st if n != "gemm"] == ["addend_add", "shr", "clip"] and "shift_right(" in str(st["shr"].op.body)
    with pytest.raises(CompileError, match="multiplier must be None, \"tensor\", \"shift_add\" or an int"):
        dense(get_env(MUL), 4, 4, 4, multiplier="per-channel")


@pytest.mark.parametrize("config", [MUL, VTAConfig(alu_mul=True)], ids=["small", "default"])
def test_epilogue_with_a_multiplier_on_the_cycle_backend(config):
    from vtakit.runtime.packing import requantize
    env = get_env(config)
    host, acc, addend, mult, pack = _epilogue_case(env, "conv2d", True, "tensor", seed=4)
    wl = EPILOGUE_CONV
    s, tensors = conv2d(env, wl, shift=12, clip=(-128, 127), multiplier="tensor", pre_shift=3)
    _, stats = build_and_run(s, tensors, host, pack(requantize(acc, addend, 12, (-128, 127), mult, 3)), config,
                             backend="cycle")
    assert stats.cycles > 0
