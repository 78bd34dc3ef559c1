"""Which of onnx's node tests vtakit runs, derived from the registries, and why the others are not run.

The onnx wheel ships one directory per node test (``onnx/backend/test/data/node/test_*``: a model and
its input/output data). A test is *in scope* when every node's operator has a converter at the
model's opset and every graph input and output is a tensor of a dtype vtakit compiles; the list
therefore grows by itself as operators are registered. In-scope tests that vtakit deliberately does
not run are matched by :data:`EXCLUDED`, patterns with the reason (the one table of exclusions, which
``docs/onnx_support.md`` prints); every other test gets its reason computed (the unsupported
operators or dtypes it uses).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field

import onnx

from vtakit.compiler.graph import frontend  # noqa: F401  (registers every converter)
from vtakit.compiler.graph.frontend import registry
from vtakit.compiler.graph.frontend.registry import MAX_OPSET, MIN_OPSET

__all__ = ["EXCLUDED", "excluded_reason", "NodeTestPlan", "node_test_dir", "node_test_plan", "classify"]

# In-scope tests vtakit does not run: a regular expression matching whole test names -> the reason.
# Each names a feature outside vtakit's scope (inference, 1-D and 2-D windows), or a test whose expected output
# onnxruntime (vtakit's golden model for networks) does not reproduce either; bugs are fixed, not listed.
EXCLUDED: dict[str, str] = {
    r"test_training_dropout(_default|_default_mask|_mask)?": "training-mode Dropout draws random numbers; vtakit "
                                                              "runs inference only",
    r"test_batchnorm_.*_training_mode": "training-mode BatchNormalization (batch statistics); vtakit runs inference "
                                        "only",
    r"test_wrap_pad": "Pad mode 'wrap' is out of scope (an UnsupportedOperatorError)",
    r"test_(averagepool|maxpool|convtranspose|conv)_3d.*": "3-D windows are out of scope; vtakit computes 1-D and 2-D "
                                                          "convolutions and pools",
    r"test_maxpool_with_argmax_.*": "MaxPool's Indices output is not supported",
    r"test_resize_.*cubic.*": "cubic Resize is out of scope (an UnsupportedOperatorError)",
    r"test_resize_.*antialias": "antialiased Resize is out of scope (an UnsupportedOperatorError)",
    r"test_quantizelinear_(axis|blocked_asymmetric)": "per-axis and blocked QuantizeLinear of a run-time tensor are "
                                                      "not supported (an UnsupportedOperatorError); vtakit quantises "
                                                      "activations per tensor (qnn.quantize) and weights at import",
    r"test_quantizelinear_(int16|uint16|blocked_symmetric)": "16-bit QuantizeLinear of a run-time tensor is out of "
                                                             "scope (an UnsupportedOperatorError); qnn.quantize "
                                                             "produces int8 or uint8",
    r"test_resize_downsample_scales_linear_align_corners": "the expected output divides by scale x input length "
                                                           "(2.4); onnxruntime, whose result vtakit equals, divides by "
                                                           "the integer output length (2) and fails this test too",
}


def excluded_reason(name: str) -> str | None:
    """The reason the in-scope test ``name`` is not run (None when it is run)."""
    for pattern, reason in EXCLUDED.items():
        if re.fullmatch(pattern, name):
            return reason
    return None


def node_test_dir() -> str:
    """The directory of onnx's node tests in the installed onnx wheel."""
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


@dataclass
class NodeTestPlan:
    """The node tests split three ways: run, excluded from the in-scope set (with reason), out of scope."""

    in_scope: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    out_of_scope: dict[str, str] = field(default_factory=dict)

    @property
    def to_run(self) -> list[str]:
        return [t for t in self.in_scope if t not in self.excluded]


def _value_dtype(value: onnx.ValueInfoProto) -> str | None:
    """The numpy dtype name of a tensor value (None when it is not a tensor or not a supported dtype)."""
    if not value.type.HasField("tensor_type"):
        return None
    try:
        return registry.onnx_dtype(value.type.tensor_type.elem_type, value.name)
    except Exception:
        return None


def classify(model: onnx.ModelProto) -> str | None:
    """Why ``model`` is out of scope, or None when vtakit supports all its operators and dtypes."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    opset = versions[0] if versions else 1
    if not MIN_OPSET <= opset <= MAX_OPSET:
        return f"opset {opset} is outside {MIN_OPSET}..{MAX_OPSET}"
    missing = sorted({f"{n.domain + '::' if n.domain not in ('', 'ai.onnx') else ''}{n.op_type}"
                      for n in model.graph.node if registry.find_converter(n.op_type, n.domain, opset) is None})
    if missing:
        return f"unsupported operator(s) {', '.join(missing)} (opset {opset})"
    bad = []
    for value in [*model.graph.input, *model.graph.output]:
        if _value_dtype(value) is None:
            kind = value.type.WhichOneof("value")
            bad.append(onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type) if kind == "tensor_type"
                       else kind or "untyped")
    if bad:
        return f"unsupported value type(s) {', '.join(sorted(set(bad)))}"
    return None


@functools.lru_cache(maxsize=1)
def node_test_plan() -> NodeTestPlan:
    """Every node test of the installed onnx, classified."""
    plan = NodeTestPlan()
    root = node_test_dir()
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "model.onnx")
        if not os.path.isfile(path):
            continue
        reason = classify(onnx.load(path, load_external_data=False))
        if reason is not None:
            plan.out_of_scope[name] = reason
            continue
        plan.in_scope.append(name)
        excluded = excluded_reason(name)
        if excluded is not None:
            plan.excluded[name] = excluded
    return plan
