#!/usr/bin/env python3
"""Benchmark the operators exported transformers and detectors use (LayerNormalization, Gelu, Erf, Tanh, MatMul
in its Linear-layer and attention forms, ArgMax, CumSum, TopK, GatherElements, Einsum) and two transformer
encoder blocks: one-node ONNX models built by
``vtakit.graph`` for the CPU (target llvm) against onnxruntime in the same process.

Each model is built (kernel cache warm after the first run), checked against onnxruntime, then timed in
alternating rounds -- vtakit, onnxruntime, vtakit, ... -- each round the median of ``--calls`` back-to-back
calls; the figure is the median over rounds, so both see the same machine load. Both runtimes use their
default thread pools (vtakit: ``VTAKIT_NUM_THREADS`` or the CPUs; onnxruntime: its default).

TopK is O(n^2) per line in vtakit (rank counting: its tensor expressions have no sort) and CumSum O(n sqrt n)
(blocked masked sums: no sequential scan), which the TopK and CumSum rows measure.

    python scripts/bench_onnx_ops.py            # table
    python scripts/bench_onnx_ops.py --json     # one JSON object
    python scripts/bench_onnx_ops.py --only TopK,encoder
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

I64 = np.int64


def _cases() -> dict[str, tuple[Any, dict[str, np.ndarray]]]:
    """name -> (ONNX model, inputs)."""
    from tests.graph.onnx_cases import Case, model_of, rand
    from tests.graph.test_onnx_transformer_ops import _encoder_block

    cases = {
        "LayerNormalization 128x768": Case("LayerNormalization", {"x": rand(128, 768), "s": rand(768),
                                                                  "b": rand(768)}, weights=("s", "b")),
        "Gelu 128x3072": Case("Gelu", {"x": rand(128, 3072)}, opset=20),
        "ArgMax 64x1000 axis -1": Case("ArgMax", {"x": rand(64, 1000)}, {"axis": -1, "keepdims": 0}, opset=13),
        "CumSum 8x1024 axis -1": Case("CumSum", {"x": rand(8, 1024), "axis": np.array(-1, I64)}, weights=("axis",),
                                      opset=14),
        "TopK k=100 of 1x8400": Case("TopK", {"x": rand(1, 8400), "k": np.array([100], I64)}, weights=("k",),
                                     opset=11, outputs=2),
        "GatherElements 64x1000 axis 1": Case("GatherElements", {"x": rand(64, 1000), "i": np.random.default_rng(0)
                                                                 .integers(0, 1000, (64, 10))}, {"axis": 1}, opset=13),
        "MatMul 256x256 @ 256x1024 (weight)": Case("MatMul", {"a": rand(256, 256), "b": rand(256, 1024)},
                                                  weights=("b",)),
        "MatMul 256x256 @ 256x1024": Case("MatMul", {"a": rand(256, 256), "b": rand(256, 1024)}),
        "MatMul 2x128x256 @ 256x1024 (weight)": Case("MatMul", {"a": rand(2, 128, 256), "b": rand(256, 1024)},
                                                     weights=("b",)),
        "MatMul 2x128x256 @ 256x1024": Case("MatMul", {"a": rand(2, 128, 256), "b": rand(256, 1024)}),
        "MatMul 2x8x128x64 @ 2x8x64x128": Case("MatMul", {"a": rand(2, 8, 128, 64), "b": rand(2, 8, 64, 128)}),
        "Erf 128x3072": Case("Erf", {"x": rand(128, 3072)}, opset=13),
        "Tanh 128x3072": Case("Tanh", {"x": rand(128, 3072)}, opset=13),
        "Einsum bhid,bhjd->bhij 1x8x128x64": Case("Einsum", {"q": rand(1, 8, 128, 64), "k": rand(1, 8, 128, 64)},
                                                  {"equation": "bhid,bhjd->bhij"}, opset=12),
    }
    out = {name: (model_of(c), {n: a for n, a in c.inputs.items() if n not in c.weights}) for name, c in cases.items()}
    out["encoder block 2x64x128 (ffn 512)"] = (
        _encoder_block(seq=64, dim=128, ffn=512),
        {"x": np.random.default_rng(1).standard_normal((2, 64, 128)).astype(np.float32)})
    out["encoder block 2x128x256 (ffn 1024)"] = (
        _encoder_block(seq=128, dim=256, ffn=1024),
        {"x": np.random.default_rng(1).standard_normal((2, 128, 256)).astype(np.float32)})
    return out


def _median_call(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(name: str, model: Any, feeds: dict[str, np.ndarray], rounds: int, calls: int) -> dict[str, Any]:
    import onnxruntime as ort

    import vtakit.graph as vg

    start = time.perf_counter()
    module = vg.build(vg.from_onnx(model), target="llvm")
    build_s = time.perf_counter() - start
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got, want = module.run(feeds), session.run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())), err_msg=name)
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(_median_call(lambda: module.run(feeds), calls))
        theirs.append(_median_call(lambda: session.run(None, feeds), calls))
    v, o = statistics.median(ours), statistics.median(theirs)
    return {"name": name, "vtakit_ms": v * 1e3, "onnxruntime_ms": o * 1e3, "ratio": v / o, "build_s": build_s,
            "kernels": module.num_kernels}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", default="", help="comma-separated name prefixes (e.g. TopK,encoder)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    prefixes = [p for p in args.only.split(",") if p]
    rows = [bench(name, model, feeds, args.rounds, args.calls) for name, (model, feeds) in _cases().items()
            if not prefixes or any(name.startswith(p) for p in prefixes)]
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    print(f"{'model':<40} {'vtakit ms':>10} {'ort ms':>9} {'ratio':>8} {'build s':>8} {'kernels':>8}")
    for r in rows:
        print(f"{r['name']:<40} {r['vtakit_ms']:>10.3f} {r['onnxruntime_ms']:>9.3f} {r['ratio']:>8.1f} "
              f"{r['build_s']:>8.2f} {r['kernels']:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
