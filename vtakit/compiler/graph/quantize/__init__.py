"""Post-training int8 quantisation of a float graph: ``vtakit.graph.quantize(graph, calibration, **options)``.

Symmetric int8 (zero point 0): activations per tensor, weights per tensor or per output channel,
int32 biases. The float graph is first cleaned (``InferType``, ``FoldConstant``, ``FoldBatchNorm``,
``DeadCodeElimination``) so batch norms are folded into their convolutions; then

1. :mod:`.plan` decides which nodes become ``qnn.conv2d`` / ``qnn.dense`` / ``qnn.add``, which run on
   int8 as they are, and where ``qnn.quantize`` / ``qnn.dequantize`` go;
2. :mod:`.calibration` runs the float graph on the calibration samples and records the ranges of
   the tensors that get scales;
3. :mod:`.realize` turns ranges into scales (:mod:`.scales`) and writes the quantised graph.

The result is an ordinary graph of registered operators: ``vtakit.graph.evaluate`` is its integer
reference, ``vtakit.graph.build(q, "llvm")`` runs it with integer kernels, bit for bit the same.
Its outputs are float (dequantised), comparable with the float model's. docs/quantization.md has the
formulas, the options and measured accuracy.
"""

from __future__ import annotations

from typing import Any

from vtakit.compiler.graph.ir import Graph
from vtakit.compiler.graph.passes import run_passes
from vtakit.compiler.graph.quantize.calibration import calibration_samples, collect_statistics
from vtakit.compiler.graph.quantize.options import QuantizeOptions, parse_options
from vtakit.compiler.graph.quantize.plan import plan_quantization
from vtakit.compiler.graph.quantize.realize import realize
from vtakit.errors import GraphError

__all__ = ["quantize", "QuantizeOptions", "CLEANUP_PASSES"]

#: the float passes run before quantisation (the llvm target's, without layout changes and fusion)
CLEANUP_PASSES = ("InferType", "FoldConstant", "FoldBatchNorm", "DeadCodeElimination")


def quantize(graph: Graph, calibration: Any, **options: Any) -> Graph:
    """``graph`` quantised to int8 after calibration on ``calibration``.

    ``calibration``: an array, a dict ``{input name: array}``, an iterable of those (or of arrays), or a
    ``.npz`` path; arrays stack samples on their leading axis (see :mod:`.calibration`).

    Options: ``method`` (``"max"``, ``"percentile"``, ``"kl"``), ``percentile`` (99.99),
    ``weight_granularity`` (``"tensor"``, ``"channel"``), ``scales`` (``"power2"``, ``"float"``),
    ``skip_first_conv`` (True: the first convolution stays float, as TVM VTA's ``skip_conv_layers=[0]``).
    """
    opts = parse_options(options)
    if not isinstance(graph, Graph):
        raise GraphError(f"quantize: expected a vtakit.graph.Graph, got {type(graph).__name__}")
    g = run_passes(graph.verify(), CLEANUP_PASSES)
    samples = calibration_samples(g, calibration)
    plan = plan_quantization(g, opts)
    stats = collect_statistics(g, samples, plan.calibrated, plan.per_channel, histograms=opts.method != "max")
    return realize(g, plan, stats, opts)
