"""CPU backend speed: fp32 GEMM and the ResNet-18 conv layers C2-C11 against numpy/OpenBLAS,
onnxruntime and the apache-tvm wheel, all measured in the same run (reference/cpu_anchors.md).

- GEMM M=N=K (default 1024): ``ops.matmul`` with B packed into 32-column panels inside the kernel
  (the packing is timed) and the default dense schedule (an 8x32 register tile of C, k unrolled
  by 4, parallel over tiles); also with B pre-packed. Baseline: ``a @ b`` (numpy's OpenBLAS).
- Conv C2-C11 (NCHW, batch 1, fp32): ``ops.conv2d_nchw_packed`` with the weights pre-packed as
  ``[O/32, C, KH, KW, 32]`` (as the TVM anchor) and ``schedule_conv2d_nchw_packed``; optionally
  (``--plain``) the plain OIHW ``conv2d_nchw`` with its default schedule. Baselines: onnxruntime
  running a single-Conv model, and TVM 0.27 with the anchor's hand TensorIR schedule when the
  wheel imports (in a child process: TVM bundles its own LLVM).

Times are medians of ``--repeat`` runs, each long enough (>= 50 ms) to average several calls.
Ratios are speed ratios (baseline time / our time: > 1 means we are faster). Compile time is
lowering + LLVM + JIT of a cold build.

    python scripts/bench_cpu.py [--gemm-size 1024] [--layers C2,C5] [--repeat 7] [--plain] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

import vtakit
from vtakit import te
from vtakit.compiler import ops
from vtakit.compiler.backend import llvm as llvm_backend
from vtakit.compiler.backend.llvm_runtime import host_target, num_threads
from vtakit.compiler.ops import cpu

# ResNet-18 conv workloads (reference/vta.md section 7.2): H, W, in, out, kernel, pad, stride.
LAYERS = {
    "C2": (56, 56, 64, 64, 3, 1, 1), "C3": (56, 56, 64, 128, 3, 1, 2), "C4": (56, 56, 64, 128, 1, 0, 2),
    "C5": (28, 28, 128, 128, 3, 1, 1), "C6": (28, 28, 128, 256, 3, 1, 2), "C7": (28, 28, 128, 256, 1, 0, 2),
    "C8": (14, 14, 256, 256, 3, 1, 1), "C9": (14, 14, 256, 512, 3, 1, 2), "C10": (14, 14, 256, 512, 1, 0, 2),
    "C11": (7, 7, 512, 512, 3, 1, 1),
}
CHANNEL_BLOCK = 32


def timeit(fn: Callable[[], Any], repeat: int, min_seconds: float = 0.05) -> float:
    """Median seconds per call over ``repeat`` runs of enough calls to last ``min_seconds``."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(min_seconds / once))
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return statistics.median(runs)


def cold_build(s, args) -> tuple[Any, float]:
    llvm_backend.clear_cache()
    start = time.perf_counter()
    mod = vtakit.build(s, args, target="llvm")
    return mod, time.perf_counter() - start


@dataclass
class Row:
    workload: str
    gflop: float
    ours_ms: float
    compile_s: float
    baselines_ms: dict[str, float] = field(default_factory=dict)
    extra_ms: dict[str, float] = field(default_factory=dict)
    max_abs_error: float = 0.0

    def ratios(self) -> dict[str, float]:
        return {k: v / self.ours_ms for k, v in self.baselines_ms.items()}


# ---------------------------------------------------------------------------- GEMM
def bench_gemm(size: int, repeat: int, tvm_ok: bool) -> Row:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    A = te.placeholder((size, size), name="A")
    B = te.placeholder((size, size), name="B")
    C = ops.matmul(A, B, pack_block=CHANNEL_BLOCK)
    mod, compile_s = cold_build(cpu.schedule_dense(C, batch_block=8), [A, B, C])
    c = np.zeros((size, size), "float32")
    mod(a, b, c)
    error = float(np.abs(c - a @ b).max())
    ours = timeit(lambda: mod(a, b, c), repeat)
    Bp = te.placeholder((size // CHANNEL_BLOCK, size, CHANNEL_BLOCK), name="Bp")
    Cp = ops.dense_packed(A, Bp)
    mod_packed = vtakit.build(cpu.schedule_dense(Cp, batch_block=8), [A, Bp, Cp], target="llvm")
    bp = ops.layout.pack_dense_weight(np.ascontiguousarray(b.T), CHANNEL_BLOCK)
    packed = timeit(lambda: mod_packed(a, bp, c), repeat)
    numpy_time = timeit(lambda: a @ b, repeat)
    row = Row(f"gemm {size}^3", 2 * size ** 3 / 1e9, ours * 1e3, compile_s, {"numpy": numpy_time * 1e3},
              {"ours_prepacked_B": packed * 1e3}, error)
    if tvm_ok:
        tvm_time = run_tvm_worker({"kind": "gemm", "size": size, "repeat": repeat})
        if tvm_time is not None:
            row.baselines_ms["tvm"] = tvm_time * 1e3
    return row


# ---------------------------------------------------------------------------- conv2d
def conv_reference(x: np.ndarray, w: np.ndarray, pad: int, stride: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, c, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((1, o, oh, ow), "float32")
    for y in range(kh):
        for z in range(kw):
            patch = xp[0, :, y:y + (oh - 1) * stride + 1:stride, z:z + (ow - 1) * stride + 1:stride]
            out[0] += np.tensordot(w[:, :, y, z], patch, axes=(1, 0))
    return out


def bench_conv(name: str, repeat: int, plain: bool, ort: Any, tvm_ok: bool) -> Row:
    h, w, ci, co, k, pad, stride = LAYERS[name]
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, ci, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (co, ci, k, k)).astype("float32")
    data = te.placeholder((1, ci, h, w), name="data")
    packed = te.placeholder((co // CHANNEL_BLOCK, ci, k, k, CHANNEL_BLOCK), name="kernel")
    out = ops.conv2d_nchw_packed(data, packed, stride, pad)
    mod, compile_s = cold_build(cpu.schedule_conv2d_nchw_packed(out), [data, packed, out])
    wp = ops.layout.pack_conv2d_kernel(wt, CHANNEL_BLOCK)
    y = np.zeros(tuple(int(s) for s in out.shape), "float32")
    mod(x, wp, y)
    error = float(np.abs(y - conv_reference(x, wt, pad, stride)).max())
    ours = timeit(lambda: mod(x, wp, y), repeat)
    gflop = 2 * co * ci * k * k * y.shape[2] * y.shape[3] / 1e9
    row = Row(name, gflop, ours * 1e3, compile_s, max_abs_error=error)
    if plain:
        kernel = te.placeholder((co, ci, k, k), name="kernel")
        plain_out = ops.conv2d_nchw(data, kernel, stride, pad)
        plain_mod = vtakit.build(cpu.schedule_conv2d_nchw(plain_out), [data, kernel, plain_out], target="llvm")
        row.extra_ms["ours_plain_oihw"] = timeit(lambda: plain_mod(x, wt, y), repeat) * 1e3
    if ort is not None:
        session = ort_conv_session(ort, wt, x.shape, pad, stride)
        feed = {"x": x}
        session.run(None, feed)
        warm = time.perf_counter()
        while time.perf_counter() - warm < 1.0:  # onnxruntime's timings settle after a warm-up
            session.run(None, feed)
        row.baselines_ms["onnxruntime"] = timeit(lambda: session.run(None, feed), repeat) * 1e3
    if tvm_ok:
        tvm_time = run_tvm_worker({"kind": "conv", "layer": name, "repeat": repeat})
        if tvm_time is not None:
            row.baselines_ms["tvm"] = tvm_time * 1e3
    return row


def ort_conv_session(ort: Any, weight: np.ndarray, in_shape: tuple, pad: int, stride: int) -> Any:
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415 (optional benchmark dependency)

    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4, strides=[stride] * 2,
                            kernel_shape=list(weight.shape[2:]))
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads()
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------- apache-tvm (optional)
# TVM bundles its own LLVM, which must not share a process with llvmlite's: TVM runs in a child.
TVM_ERRORS: list[str] = []


def tvm_available() -> str | None:
    """None if the wheel imports (in a child process), else why not."""
    proc = subprocess.run([sys.executable, "-c", "import tvm; from tvm import s_tir"], capture_output=True, text=True,
                          timeout=300)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def run_tvm_worker(spec: dict[str, Any]) -> float | None:
    env = dict(os.environ, TVM_NUM_THREADS=str(num_threads()))
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--tvm-worker", json.dumps(spec)],
                          capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        TVM_ERRORS.append(f"{spec}: {(proc.stderr.strip().splitlines() or ['failed'])[-1][:200]}")
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def tvm_worker(spec: dict[str, Any]) -> float:
    import tvm  # noqa: PLC0415 (optional baseline, only in the worker process)

    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": host_target().cpu,
                                "num-cores": num_threads()})
    func, shapes = tvm_gemm(spec["size"]) if spec["kind"] == "gemm" else tvm_conv(*LAYERS[spec["layer"]])
    exe = tvm.compile(func, target)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.uniform(-1, 1, shape).astype("float32"), dev) for shape in shapes]
    runner = exe.jit() if hasattr(exe, "jit") else exe
    evaluator = runner.time_evaluator("main", dev, number=5, repeat=spec["repeat"])
    return float(np.median(evaluator(*args).results))


def tvm_gemm(size: int):
    """TVM 0.27 GEMM, hand TensorIR schedule as in the anchor: B packed in 32-column panels, an 8x32
    register tile, k unrolled by 4, parallel over tiles (the packing is timed, as in ours)."""
    import tvm  # noqa: PLC0415
    from tvm import te as tte  # noqa: PLC0415

    A = tte.placeholder((size, size), name="A")
    B = tte.placeholder((size, size), name="B")
    Bp = tte.compute((size // 32, size, 32), lambda z, k, x: B[k, z * 32 + x], name="Bp")
    k = tte.reduce_axis((0, size), name="k")
    C = tte.compute((size, size), lambda i, j: tte.sum(A[i, k] * Bp[j // 32, k, j % 32], axis=k), name="C")
    sch = tvm.s_tir.Schedule(tte.create_prim_func([A, B, C]))
    block = sch.get_sblock("C")
    i, j, kk = sch.get_loops(block)
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 32])
    ko, ki = sch.split(kk, [None, 4])
    sch.reorder(jo, io, ko, ki, ii, ji)
    sch.parallel(sch.fuse(jo, io))
    sch.unroll(ki)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.decompose_reduction(block, ko)
    z, _, x = sch.get_loops(sch.get_sblock("Bp"))
    sch.parallel(z)
    sch.vectorize(x)
    return sch.mod, [(size, size)] * 3


def tvm_conv(h: int, w: int, ci: int, co: int, k: int, pad: int, stride: int):
    """TVM 0.27 conv2d, NCHW in and out, weights pre-packed [O/32, C, KH, KW, 32], a tile of 7 pixels x
    32 channels, parallel over (channel block, row): the anchor's schedule."""
    import tvm  # noqa: PLC0415
    from tvm import te as tte  # noqa: PLC0415

    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    X = tte.placeholder((1, ci, h, w), name="X")
    W = tte.placeholder((co // 32, ci, k, k, 32), name="W")
    P = tte.compute((1, ci, h + 2 * pad, w + 2 * pad), lambda n, c, yy, xx: tte.if_then_else(
        tte.all(yy >= pad, yy < h + pad, xx >= pad, xx < w + pad), X[n, c, yy - pad, xx - pad], 0.0), name="P")
    rc, ry, rx = tte.reduce_axis((0, ci), "rc"), tte.reduce_axis((0, k), "ry"), tte.reduce_axis((0, k), "rx")
    Y = tte.compute((1, co // 32, oh, ow, 32), lambda n, ob, yy, xx, oc: tte.sum(
        P[n, rc, yy * stride + ry, xx * stride + rx] * W[ob, rc, ry, rx, oc], axis=[rc, ry, rx]), name="Y")
    O = tte.compute((1, co, oh, ow), lambda n, o, yy, xx: Y[n, o // 32, yy, xx, o % 32], name="O")
    sch = tvm.s_tir.Schedule(tte.create_prim_func([X, W, O]))
    conv = sch.get_sblock("Y")
    n, ob, yy, xx, oc, rc_, ry_, rx_ = sch.get_loops(conv)
    xo, xi = sch.split(xx, [None, 7])
    sch.reorder(n, ob, yy, xo, rc_, ry_, rx_, xi, oc)
    sch.parallel(sch.fuse(n, ob, yy))
    sch.unroll(xi)
    sch.vectorize(oc)
    sch.decompose_reduction(conv, rc_)
    return sch.mod, [(1, ci, h, w), (co // 32, ci, k, k, 32), (1, co, oh, ow)]


# ---------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gemm-size", type=int, default=1024)
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated subset of C2..C11")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--plain", action="store_true", help="also time conv2d_nchw with OIHW weights")
    parser.add_argument("--no-ort", action="store_true")
    parser.add_argument("--no-tvm", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tvm-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tvm_worker:
        print(json.dumps({"seconds": tvm_worker(json.loads(args.tvm_worker))}))
        return
    layers = [name.strip().upper() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        parser.error(f"unknown layers {unknown}; expected some of {list(LAYERS)}")

    notes = []
    ort = None
    if not args.no_ort:
        try:
            import onnxruntime as ort  # noqa: PLC0415
        except ImportError:
            notes.append("onnxruntime not installed (pip install vtakit[bench]): skipped")
    tvm_ok = False
    if not args.no_tvm:
        why = tvm_available()
        tvm_ok = why is None
        if why:
            notes.append(f"apache-tvm unavailable ({why[:120]}): skipped")

    rows = [bench_gemm(args.gemm_size, args.repeat, tvm_ok)] if args.gemm_size else []
    for name in layers:
        rows.append(bench_conv(name, args.repeat, args.plain, ort, tvm_ok))
    convs = [r for r in rows if r.workload in LAYERS]
    summary: dict[str, Any] = {}
    if convs:
        summary["conv_total_ms"] = {"ours": sum(r.ours_ms for r in convs)}
        for key in sorted({k for r in convs for k in r.baselines_ms}):
            if all(key in r.baselines_ms for r in convs):
                summary["conv_total_ms"][key] = sum(r.baselines_ms[key] for r in convs)
        summary["conv_total_ratio"] = {k: v / summary["conv_total_ms"]["ours"]
                                       for k, v in summary["conv_total_ms"].items() if k != "ours"}
    machine = {"cpu": host_target().cpu, "threads": num_threads(), "load_average": os.getloadavg()}
    if args.json:
        print(json.dumps({"machine": machine, "rows": [dict(asdict(r), ratios=r.ratios()) for r in rows],
                          "summary": summary, "notes": notes + TVM_ERRORS}, indent=2))
        return
    print(f"host {machine['cpu']}, {machine['threads']} threads, load {machine['load_average'][0]:.1f}; "
          "times are medians in ms; ratio = baseline time / ours")
    keys = sorted({k for r in rows for k in (*r.baselines_ms, *r.extra_ms)})
    print(f"{'workload':<12}{'GFLOP':>7}{'ours':>9}{'GFLOPS':>8}" + "".join(f"{k:>18}" for k in keys)
          + f"{'compile s':>11}{'max err':>10}")
    for r in rows:
        cells = []
        for k in keys:
            v = r.baselines_ms.get(k, r.extra_ms.get(k))
            cells.append(f"{'-':>18}" if v is None else f"{v:>9.3f} ({r.ours_ms and v / r.ours_ms:4.2f}x)")
        print(f"{r.workload:<12}{r.gflop:>7.3f}{r.ours_ms:>9.3f}{r.gflop / r.ours_ms * 1e3:>8.1f}" + "".join(cells)
              + f"{r.compile_s:>11.2f}{r.max_abs_error:>10.1e}")
    if summary:
        total = summary["conv_total_ms"]
        print("conv C2-C11 total ms: " + ", ".join(f"{k} {v:.3f}" for k, v in total.items()))
    for note in notes + TVM_ERRORS:
        print("note:", note)


if __name__ == "__main__":
    main()
