"""One-node ONNX models checked three ways against onnxruntime: the numpy references
(``vtakit.graph.evaluate``, the graph's golden model) and the compiled network (``vtakit.graph.build``).

A :class:`Case` names the operator, its inputs (run-time ones, and ``weights`` that become
initializers), its attributes and the opset; :func:`check` builds the model, runs all three and
compares outputs, shapes and dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from vtakit import graph as vg

__all__ = ["Case", "check", "model_of", "rand"]


@dataclass
class Case:
    """``op(*inputs, **attrs)`` at ``opset``; ``None`` inputs are omitted optional inputs; ``weights`` are
    initializers; ``outputs`` is the number of outputs."""

    op: str
    inputs: dict[str, np.ndarray | None]
    attrs: dict[str, Any] = field(default_factory=dict)
    weights: tuple[str, ...] = ()
    opset: int = 17
    outputs: int = 1

    def __str__(self) -> str:
        return f"{self.op}-{self.opset}({','.join(self.inputs)}){self.attrs or ''}"


def rand(*shape: int, seed: int = 0, dtype: Any = np.float32, low: float = -3, high: float = 3) -> np.ndarray:
    """Seeded uniform values in [low, high) of ``dtype`` (integers rounded)."""
    x = np.random.default_rng(seed + 7 * sum(shape)).uniform(low, high, shape)
    return (np.round(x) if np.issubdtype(np.dtype(dtype), np.integer) else x).astype(dtype)


def model_of(case: Case) -> onnx.ModelProto:
    node = helper.make_node(case.op, [n if a is not None else "" for n, a in case.inputs.items()],
                            [f"y{i}" for i in range(case.outputs)], **case.attrs)
    runtime = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
               for n, a in case.inputs.items() if a is not None and n not in case.weights]
    inits = [onnx.numpy_helper.from_array(np.asarray(case.inputs[n]), n) for n in case.weights
             if case.inputs.get(n) is not None]
    outputs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(case.outputs)]
    model = helper.make_model(helper.make_graph([node], "case", runtime, outputs, inits),
                              opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8 if case.opset <= 18 else 10
    return model


def check(case: Case, rtol: float = 1e-5, atol: float = 0.0, want: list[np.ndarray] | None = None) -> vg.Graph:
    """Compare vtakit's reference and compiled outputs with onnxruntime's (or with ``want``); the graph."""
    model = model_of(case)
    feeds = {n: a for n, a in case.inputs.items() if a is not None and n not in case.weights}
    if want is None:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)
    g = vg.from_onnx(model)
    ref = vg.evaluate(g, {n: feeds[n] for n in g.inputs})
    compiled = vg.build(g).run({n: feeds[n] for n in g.inputs})
    for i, w in enumerate(want):
        w = np.asarray(w)
        for what, got in (("numpy reference", ref[f"y{i}"]), ("compiled", compiled[i])):
            assert got.shape == w.shape and got.dtype == w.dtype, (
                f"{case} output {i} ({what}): {got.dtype}{list(got.shape)}, expected {w.dtype}{list(w.shape)}")
            np.testing.assert_allclose(got, w, rtol=rtol, atol=atol, err_msg=f"{case} output {i} ({what})")
    return g
