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

Times are medians of ``--repeat`` rounds, each long enough (>= 50 ms) to average several calls;
the rounds of all contenders of a workload alternate, so that each sees the same load on a shared
machine. Ratios are speed ratios (baseline time / our time: > 1 means we are faster). Compile
time is lowering + LLVM + JIT of a cold build.

    python scripts/bench_cpu.py [--gemm-size 1024] [--layers C2,C5] [--repeat 7] [--plain] [--json]

Every contender uses the same thread count: ours ``VTAKIT_NUM_THREADS`` (default: the CPUs this
process may use), which is also passed to onnxruntime and TVM; numpy's OpenBLAS follows
``OPENBLAS_NUM_THREADS``. For a single-core comparison set both to 1. Baselines need
``pip install vtakit[bench]``, and for TVM ``apache-tvm==0.27.*`` with ``apache-tvm-ffi==0.1.14.post0``.
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


class Contender:
    """Something to time: one round returns its seconds per call (several calls, >= 50 ms)."""

    def __init__(self, fn: Callable[[], Any], min_seconds: float = 0.05) -> None:
        self.fn = fn
        fn()
        start = time.perf_counter()
        fn()
        self.number = max(1, int(min_seconds / max(time.perf_counter() - start, 1e-7)))

    def round(self) -> float:
        start = time.perf_counter()
        for _ in range(self.number):
            self.fn()
        return (time.perf_counter() - start) / self.number

    def close(self) -> None:
        pass


def interleaved(contenders: dict[str, Any], repeat: int) -> dict[str, float]:
    """Median seconds per call of each contender, rounds alternating between them so that every
    contender sees the same machine load (the machine is shared; ratios are what to compare)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, contender in contenders.items():
            samples[name].append(contender.round())
    for contender in contenders.values():
        contender.close()
    return {name: statistics.median(values) for name, values in samples.items()}


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


def make_row(workload: str, gflop: float, compile_s: float, error: float, contenders: dict[str, Any],
             baselines: tuple[str, ...], repeat: int) -> Row:
    times = {k: v * 1e3 for k, v in interleaved(contenders, repeat).items()}
    return Row(workload, gflop, times.pop("ours"), compile_s,
               {k: v for k, v in times.items() if k in baselines}, {k: v for k, v in times.items()
                                                                     if k not in baselines}, error)


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
    Bp = te.placeholder((size // CHANNEL_BLOCK, size, CHANNEL_BLOCK), name="Bp")
    Cp = ops.dense_packed(A, Bp)
    mod_packed = vtakit.build(cpu.schedule_dense(Cp, batch_block=8), [A, Bp, Cp], target="llvm")
    bp = ops.layout.pack_dense_weight(np.ascontiguousarray(b.T), CHANNEL_BLOCK)
    contenders: dict[str, Any] = {"ours": Contender(lambda: mod(a, b, c)),
                                  "ours_prepacked_B": Contender(lambda: mod_packed(a, bp, c)),
                                  "numpy": Contender(lambda: a @ b)}
    if tvm_ok:
        worker = TVMWorker.start({"kind": "gemm", "size": size})
        if worker is not None:
            contenders["tvm"] = worker
    return make_row(f"gemm {size}^3", 2 * size ** 3 / 1e9, compile_s, error, contenders, ("numpy", "tvm"), repeat)


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
    gflop = 2 * co * ci * k * k * y.shape[2] * y.shape[3] / 1e9
    contenders: dict[str, Any] = {"ours": Contender(lambda: mod(x, wp, y))}
    if plain:
        kernel = te.placeholder((co, ci, k, k), name="kernel")
        plain_out = ops.conv2d_nchw(data, kernel, stride, pad)
        plain_mod = vtakit.build(cpu.schedule_conv2d_nchw(plain_out), [data, kernel, plain_out], target="llvm")
        contenders["ours_plain_oihw"] = Contender(lambda: plain_mod(x, wt, y))
    if ort is not None:
        session = ort_conv_session(ort, wt, x.shape, pad, stride)
        feed = {"x": x}
        warm = time.perf_counter()
        while time.perf_counter() - warm < 1.0:  # onnxruntime's timings settle after a warm-up
            session.run(None, feed)
        contenders["onnxruntime"] = Contender(lambda: session.run(None, feed))
    if tvm_ok:
        worker = TVMWorker.start({"kind": "conv", "layer": name})
        if worker is not None:
            contenders["tvm"] = worker
    return make_row(name, gflop, compile_s, error, contenders, ("onnxruntime", "tvm"), repeat)


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
# TVM bundles its own LLVM, which must not share a process with llvmlite's: TVM runs in a child
# that builds the workload once, then times one round per request on its stdin.
TVM_ERRORS: list[str] = []


def tvm_available() -> str | None:
    """None if the wheel imports (in a child process), else why not."""
    proc = subprocess.run([sys.executable, "-c", "import tvm; from tvm import s_tir"], capture_output=True, text=True,
                          timeout=300)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1]


class TVMWorker:
    """A child process holding a compiled TVM workload; ``round()`` times one round in it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc

    @classmethod
    def start(cls, spec: dict[str, Any]) -> "TVMWorker | None":
        env = dict(os.environ, TVM_NUM_THREADS=str(num_threads()))
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--tvm-worker", json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        if proc.stdout.readline().strip() != "ready":
            proc.wait(timeout=60)
            TVM_ERRORS.append(f"{spec}: {(proc.stderr.read().strip().splitlines() or ['failed'])[-1][:200]}")
            return None
        return cls(proc)

    def round(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def tvm_worker(spec: dict[str, Any]) -> None:
    """The child's side: build, say ready, then answer each ``run`` with seconds per call."""
    import tvm  # noqa: PLC0415 (optional baseline, only in the worker process)

    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": host_target().cpu,
                                "num-cores": num_threads()})
    func, shapes = tvm_gemm(spec["size"]) if spec["kind"] == "gemm" else tvm_conv(*LAYERS[spec["layer"]])
    exe = tvm.compile(func, target)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.uniform(-1, 1, shape).astype("float32"), dev) for shape in shapes]
    runner = exe.jit() if hasattr(exe, "jit") else exe
    evaluator = runner.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)
    evaluator(*args)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() == "run":
            print(float(np.median(evaluator(*args).results)), flush=True)


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
        tvm_worker(json.loads(args.tvm_worker))
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
