"""The qnn operators' TE computes (the CPU integer path) equal their numpy references bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import vtakit.graph as vg
from vtakit.compiler.graph.ir import Graph, Node, TensorType
from vtakit.compiler.graph.passes import run_passes
from vtakit.errors import GraphError


def _check(nodes, inputs, constants, outputs):
    g = Graph(nodes, list(inputs), outputs, {k: TensorType(v.shape, v.dtype.name) for k, v in inputs.items()},
              constants)
    g = run_passes(g, ["InferType"])
    ref = vg.evaluate(g, inputs, keep_all=True)
    got = vg.build(g, "llvm", disabled_passes=("FuseOps",)).debug_run(inputs)
    for node in nodes:
        for out in node.outputs:
            assert got[out].dtype == ref[out].dtype, out
            np.testing.assert_array_equal(got[out], ref[out], err_msg=f"{node.op} {out}")
    return ref


@pytest.mark.parametrize("group, strides, pads, dilations, shift, pre_shift, multiplier", [
    (1, (1, 1), (1, 1, 1, 1), (1, 1), 9, 0, False),
    (2, (2, 1), (1, 0, 2, 1), (1, 2), 20, 3, True),
    (4, (1, 2), (0, 0, 0, 0), (2, 2), -3, 0, False),      # depthwise, negative shift (left shift, wraps)
    (1, (1, 1), (2, 2, 2, 2), (1, 1), 31, -2, True),
])
def test_conv2d_compute_matches_reference(group, strides, pads, dilations, shift, pre_shift, multiplier):
    rng = np.random.default_rng(group + shift)
    x = rng.integers(-128, 128, (2, 4, 9, 8)).astype(np.int8)
    w = rng.integers(-128, 128, (8, 4 // group, 3, 3)).astype(np.int8)
    consts = {"w": w, "b": rng.integers(-2**12, 2**12, 8).astype(np.int32)}
    ins = ["x", "w", "b"]
    if multiplier:
        consts["m"] = rng.integers(-2**15, 2**15, 8).astype(np.int32)
        ins.append("m")
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group, "shift": shift,
             "pre_shift": pre_shift, "clip": (-128, 127)}
    _check([Node("qnn.conv2d", ins, ["y"], attrs, "conv")], {"x": x}, consts, ["y"])


@pytest.mark.parametrize("shift, residual_lshift, residual_shift, clip", [
    (9, 0, 0, (0, 127)), (7, 2, 1, (-128, 127)), (-2, 5, 3, (-20, 90)), (20, 31, 0, (-128, 127))])
def test_conv2d_with_a_fused_residual_matches_reference(shift, residual_lshift, residual_shift, clip):
    """``qnn.conv2d`` with its optional residual (input 4): ``clip((((acc + addend) >> shift) + (residual <<
    residual_lshift)) >> residual_shift)``, int32 wrap-around (lshift 31 wraps)."""
    from vtakit.compiler.graph.ops.qnn import conv2d_accumulate, residual_requantize

    rng = np.random.default_rng(shift + 3 * residual_lshift)
    x = rng.integers(-128, 128, (2, 4, 6, 5)).astype(np.int8)
    r = rng.integers(-128, 128, (2, 8, 6, 5)).astype(np.int8)
    consts = {"w": rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8),
              "b": rng.integers(-2**12, 2**12, 8).astype(np.int32)}
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1, "shift": shift,
             "pre_shift": 0, "clip": clip, "residual_lshift": residual_lshift, "residual_shift": residual_shift}
    ref = _check([Node("qnn.conv2d", ["x", "w", "b", "", "r"], ["y"], attrs, "conv")], {"x": x, "r": r}, consts,
                 ["y"])
    acc = conv2d_accumulate(x, consts["w"], attrs).astype(np.int64) + consts["b"].reshape(1, -1, 1, 1)
    t = ((acc >> shift) if shift >= 0 else acc << -shift) + (r.astype(np.int64) << residual_lshift)
    t = ((t + 2**31) % 2**32 - 2**31) >> residual_shift
    np.testing.assert_array_equal(ref["y"], np.clip(t, *clip).astype(np.int8))
    np.testing.assert_array_equal(ref["y"], residual_requantize(conv2d_accumulate(x, consts["w"], attrs), consts["b"],
                                                                shift, clip, r, residual_lshift, residual_shift))


def test_conv2d_residual_must_match_the_output():
    x = np.zeros((1, 4, 5, 5), np.int8)
    consts = {"w": np.zeros((8, 4, 3, 3), np.int8), "b": np.zeros(8, np.int32)}
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1, "shift": 1, "pre_shift": 0,
             "clip": (-128, 127), "residual_lshift": 0, "residual_shift": 0}
    for r, what in ((np.zeros((1, 8, 4, 5), np.int8), "output's shape"), (np.zeros((1, 8, 5, 5), np.int32), "int8")):
        with pytest.raises(GraphError, match=what):
            _check([Node("qnn.conv2d", ["x", "w", "b", "", "r"], ["y"], attrs, "conv")], {"x": x, "r": r}, consts,
                   ["y"])


@pytest.mark.parametrize("shift, pre_shift, multiplier, clip", [(8, 0, False, (-128, 127)), (16, 2, True, (0, 100)),
                                                                (0, 0, False, (-5, 5))])
def test_dense_compute_matches_reference(shift, pre_shift, multiplier, clip):
    rng = np.random.default_rng(shift)
    x = rng.integers(-128, 128, (3, 40)).astype(np.int8)
    consts = {"w": rng.integers(-128, 128, (7, 40)).astype(np.int8),
              "b": rng.integers(-2**10, 2**10, 7).astype(np.int32)}
    ins = ["x", "w", "b"]
    if multiplier:
        consts["m"] = rng.integers(2**14, 2**15, 7).astype(np.int32)
        ins.append("m")
    _check([Node("qnn.dense", ins, ["y"], {"shift": shift, "pre_shift": pre_shift, "clip": clip}, "fc")],
           {"x": x}, consts, ["y"])


def test_dense_accumulator_wraps_like_the_reference():
    x = np.full((1, 4096), 127, np.int8)
    w = np.full((2, 4096), 127, np.int8)   # 4096 * 127 * 127 > 2**31 / 32: with the addend it wraps
    consts = {"w": w, "b": np.array([2**31 - 2**20, -2**31], np.int32)}
    attrs = {"shift": 24, "pre_shift": 0, "clip": (-128, 127)}
    _check([Node("qnn.dense", ["x", "w", "b"], ["y"], attrs, "fc")], {"x": x}, consts, ["y"])


@pytest.mark.parametrize("lshift_a, lshift_b, addend, shift, clip", [
    (0, 0, 0, 0, (-128, 127)), (2, 0, 2, 2, (0, 127)), (0, 3, 0, -1, (-128, 127)), (31, 0, 0, 30, (-9, 9))])
def test_add_compute_matches_reference(lshift_a, lshift_b, addend, shift, clip):
    rng = np.random.default_rng(lshift_a + 7 * lshift_b)
    a = rng.integers(-128, 128, (2, 3, 5, 5)).astype(np.int8)
    b = rng.integers(-128, 128, (2, 3, 5, 5)).astype(np.int8)
    attrs = {"lshift_a": lshift_a, "lshift_b": lshift_b, "addend": addend, "shift": shift, "clip": clip}
    _check([Node("qnn.add", ["a", "b"], ["y"], attrs, "add")], {"a": a, "b": b}, {}, ["y"])


@pytest.mark.parametrize("scale, zero_point, dtype", [(0.05, 0, "int8"), (2.0 ** -5, 0, "int8"), (0.1, 128, "uint8"),
                                                      (0.37, -3, "int8")])
def test_quantize_dequantize_compute_matches_reference(scale, zero_point, dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3, 7, 5)) * 4).astype(np.float32)
    x.flat[:6] = [0.5 * scale, 1.5 * scale, -0.5 * scale, -2.5 * scale, 1e9, -1e9]   # ties to even, saturation
    nodes = [Node("qnn.quantize", ["x"], ["q"], {"scale": scale, "zero_point": zero_point, "dtype": dtype}, "q"),
             Node("qnn.dequantize", ["q"], ["y"], {"scale": scale, "zero_point": zero_point}, "dq")]
    _check(nodes, {"x": x}, {}, ["y"])


def test_maxpool_and_flatten_run_on_int8():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (1, 3, 6, 6)).astype(np.int8)
    nodes = [Node("MaxPool", ["x"], ["p"], {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
                                           "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "storage_order": 0,
                                           "strides": [2, 2]}, "pool"),
             Node("Relu", ["p"], ["r"], {}, "relu"),
             Node("Flatten", ["r"], ["f"], {"axis": 1}, "flat")]
    ref = _check(nodes, {"x": x}, {}, ["f"])
    assert ref["f"].dtype == np.int8
