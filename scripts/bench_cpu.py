"""CPU backend speed: fp32 GEMM and the ResNet-18 conv layers C2-C11 against numpy/OpenBLAS,
onnxruntime and the apache-tvm wheel, all measured in the same run, with the machine's roofs.

- Roofline: the FMA peak of this machine per vector width (independent FMA chains in registers,
  1 and all threads), one-thread copy bandwidth, and the thread pool's fork/join cost per
  parallel launch (a tiny parallel kernel against the same kernel serial).
- GEMM M=N=K (default 1024): ``ops.matmul`` with B packed into panels of
  ``cpu.dense_pack_block(target)`` columns inside the kernel (the packing is timed) and the
  default dense schedule (a register tile from ``cpu.gemm_tile(target)``, each thread packing the
  panels it uses); also with B pre-packed. Baseline: ``a @ b`` with numpy's OpenBLAS, in a child
  process whose environment lacks ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE``, so OpenBLAS runs
  the kernel it picks for this CPU (the kernel it reports is recorded).
- Conv C2-C11 (NCHW, batch 1, fp32; the layer table of ``vtakit.compiler.topi_vta.workloads``):
  ``ops.conv2d_nchw_packed`` with the weights pre-packed as ``[O/ob, C, KH, KW, ob]``
  (``ob = cpu.conv2d_channel_block``) and its default schedule; optionally (``--plain``) the plain
  OIHW ``conv2d_nchw``. Baselines: onnxruntime running a single-Conv model, and TVM 0.27 with the
  hand TensorIR schedule of its x86 anchor when the wheel imports (in a child process: TVM
  bundles its own LLVM).

A round calls a contender for at least 50 ms and keeps the median call; the rounds of all
contenders of a workload alternate, so that each sees the same load on a shared machine, and a
contender's time is the median of ``--repeat`` rounds. Ratios are speed ratios (baseline time /
our time: > 1 means we are faster); compare only ratios from one run. Compile time is lowering +
LLVM + JIT of a cold build. The run records the CPU model and flags, LLVM's CPU and target,
numpy's BLAS kernel (threadpoolctl), the OPENBLAS_* environment, onnxruntime's version and
threads; it exits with status 1 if any result differs from the float64 reference by more than
the fp32 tolerance (4 ulps per term of the reduction).

    python scripts/bench_cpu.py [--gemm-size 1024] [--layers C2,C5] [--repeat 7] [--target "llvm ..."] [--json]

Every contender uses the same thread count: ours ``VTAKIT_NUM_THREADS`` (default: the CPUs this
process may use), which is also given to OpenBLAS, onnxruntime and TVM. For a single-core
comparison set ``VTAKIT_NUM_THREADS=1``. Baselines need ``pip install vtakit[bench]``, and for TVM
``apache-tvm==0.27.*`` with ``apache-tvm-ffi==0.1.14.post0``.
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
from vtakit.compiler.backend.llvm_runtime import host_target, num_threads, parse_target
from vtakit.compiler.ops import cpu
from vtakit.compiler.topi_vta.workloads import RESNET18 as LAYERS
from vtakit.errors import VtakitError

def layer_shape(name: str) -> tuple[int, int, int, int, int, int, int]:
    """H, W, in, out, kernel, pad, stride of a ResNet-18 layer (the package's workload table)."""
    wl = LAYERS[name]
    return wl.h, wl.w, wl.ci, wl.co, wl.kh, wl.pad_top, wl.stride_h      # the table's kernels are square


class Contender:
    """Something to time: one round calls it for at least ``min_seconds`` after one untimed call
    (which wakes thread pools that slept since the last round) and returns the median seconds per
    call. The median, not the mean: on a shared 2-core machine a call that loses a core to another
    process for a scheduler time slice (tens of ms) says nothing about the kernel, and a library
    that splits work statically (OpenBLAS) suffers more from it than one that shares chunks out."""

    def __init__(self, fn: Callable[[], Any], min_seconds: float = 0.05) -> None:
        self.fn = fn
        self.min_seconds = min_seconds
        fn()

    def round(self) -> float:
        self.fn()
        times: list[float] = []
        clock = time.perf_counter
        end = clock() + self.min_seconds
        while True:
            start = clock()
            self.fn()
            stop = clock()
            times.append(stop - start)
            if stop >= end:
                return statistics.median(times)

    def close(self) -> None:
        pass


# Pause before each round. Thread pools spin for a while after their last call (onnxruntime's
# intra-op pool, OpenBLAS's workers in the baseline child: about 0.1 s), and a round started at once
# ran on the cores they still held: vtakit's 2-thread figures read as 1-thread ones (GEMM 19.5 ms
# against 10.1 ms, measured on a quiet Zen 4).
SETTLE_SECONDS = 0.3


def interleaved(contenders: dict[str, Any], repeat: int) -> dict[str, float]:
    """Median seconds per call of each contender, rounds alternating between them so that every
    contender sees the same machine load (the machine is shared; ratios are what to compare), each
    round after the others' thread pools have gone back to sleep."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, contender in contenders.items():
            time.sleep(SETTLE_SECONDS)
            samples[name].append(contender.round())
    for contender in contenders.values():
        contender.close()
    return {name: statistics.median(values) for name, values in samples.items()}


TARGET = "llvm"  # --target: what the schedules block for and the kernels are compiled for


def cold_build(s, args) -> tuple[Any, float]:
    llvm_backend.clear_cache()
    start = time.perf_counter()
    mod = vtakit.build(s, args, target=TARGET)
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
    tolerance: float = 0.0

    @property
    def correct(self) -> bool:
        return self.max_abs_error <= self.tolerance

    def ratios(self) -> dict[str, float]:
        return {k: v / self.ours_ms for k, v in self.baselines_ms.items()}


def make_row(workload: str, gflop: float, compile_s: float, error: tuple[float, float], contenders: dict[str, Any],
             baselines: tuple[str, ...], repeat: int) -> Row:
    times = {k: v * 1e3 for k, v in interleaved(contenders, repeat).items()}
    return Row(workload, gflop, times.pop("ours"), compile_s,
               {k: v for k, v in times.items() if k in baselines}, {k: v for k, v in times.items()
                                                                     if k not in baselines}, *error)


def check(got: np.ndarray, want: np.ndarray, reduction: int) -> tuple[float, float]:
    """(max abs error, tolerance): fp32 sums of ``reduction`` products of values in [-1, 1] may
    differ from the reference by a few ulps per term; a wrong kernel is off by about 1."""
    return float(np.abs(got - want).max()), 4 * float(np.finfo(np.float32).eps) * reduction


# ---------------------------------------------------------------------------- GEMM
def bench_gemm(size: int, repeat: int, tvm_ok: bool) -> Row:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    A = te.placeholder((size, size), name="A")
    B = te.placeholder((size, size), name="B")
    block = cpu.dense_pack_block("float32", TARGET)
    C = ops.matmul(A, B, pack_block=block)
    mod, compile_s = cold_build(cpu.schedule_dense(C, target=TARGET), [A, B, C])
    c = np.zeros((size, size), "float32")
    mod(a, b, c)
    error = check(c, a.astype("float64") @ b.astype("float64"), size)
    Bp = te.placeholder((size // block, size, block), name="Bp")
    Cp = ops.dense_packed(A, Bp)
    mod_packed = vtakit.build(cpu.schedule_dense(Cp, target=TARGET), [A, Bp, Cp], target=TARGET)
    bp = ops.layout.pack_dense_weight(np.ascontiguousarray(b.T), block)
    contenders: dict[str, Any] = {"ours": Contender(lambda: mod(a, b, c)),
                                  "ours_prepacked_B": Contender(lambda: mod_packed(a, bp, c))}
    blas = ChildWorker.start({"kind": "numpy-gemm", "size": size})
    if blas is not None:
        contenders["numpy"] = blas
        BLAS_SEEN.update(blas.info)
    if tvm_ok:
        worker = ChildWorker.start({"kind": "tvm-gemm", "size": size})
        if worker is not None:
            contenders["tvm"] = worker
    return make_row(f"gemm {size}^3", 2 * size ** 3 / 1e9, compile_s, error, contenders, ("numpy", "tvm"), repeat)


# ---------------------------------------------------------------------------- conv2d
def conv_reference(x: np.ndarray, w: np.ndarray, pad: int, stride: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, c, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((1, o, oh, ow), x.dtype)
    for y in range(kh):
        for z in range(kw):
            patch = xp[0, :, y:y + (oh - 1) * stride + 1:stride, z:z + (ow - 1) * stride + 1:stride]
            out[0] += np.tensordot(w[:, :, y, z], patch, axes=(1, 0))
    return out


def bench_conv(name: str, repeat: int, plain: bool, ort: Any, tvm_ok: bool) -> Row:
    h, w, ci, co, k, pad, stride = layer_shape(name)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, ci, h, w)).astype("float32")
    wt = rng.uniform(-1, 1, (co, ci, k, k)).astype("float32")
    data = te.placeholder((1, ci, h, w), name="data")
    block = cpu.conv2d_channel_block(co, "float32", TARGET, LAYERS[name].ow)
    packed = te.placeholder((co // block, ci, k, k, block), name="kernel")
    out = ops.conv2d_nchw_packed(data, packed, stride, pad)
    mod, compile_s = cold_build(cpu.schedule_conv2d_nchw_packed(out, target=TARGET), [data, packed, out])
    wp = ops.layout.pack_conv2d_kernel(wt, block)
    y = np.zeros(tuple(int(s) for s in out.shape), "float32")
    mod(x, wp, y)
    error = check(y, conv_reference(x.astype("float64"), wt.astype("float64"), pad, stride), ci * k * k)
    gflop = 2 * co * ci * k * k * y.shape[2] * y.shape[3] / 1e9
    contenders: dict[str, Any] = {"ours": Contender(lambda: mod(x, wp, y))}
    if plain:
        kernel = te.placeholder((co, ci, k, k), name="kernel")
        plain_out = ops.conv2d_nchw(data, kernel, stride, pad)
        plain_mod = vtakit.build(cpu.schedule_conv2d_nchw(plain_out, target=TARGET), [data, kernel, plain_out],
                                 target=TARGET)
        contenders["ours_plain_oihw"] = Contender(lambda: plain_mod(x, wt, y))
    if ort is not None:
        session = ort_conv_session(ort, wt, x.shape, pad, stride)
        feed = {"x": x}
        warm = time.perf_counter()
        while time.perf_counter() - warm < 1.0:  # onnxruntime's timings settle after a warm-up
            session.run(None, feed)
        contenders["onnxruntime"] = Contender(lambda: session.run(None, feed))
    if tvm_ok:
        worker = ChildWorker.start({"kind": "tvm-conv", "layer": name})
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


# ---------------------------------------------------------------------------- child-process baselines
# A baseline whose library reads its environment at load time runs in a child process that builds
# the workload once, then times one round per request on its stdin. OpenBLAS runs there with
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed (some machines set them, and a forced Haswell
# kernel on an AVX-512 core flatters any rival); TVM runs there because it bundles its own LLVM,
# which must not share a process with llvmlite's.
CHILD_ERRORS: list[str] = []
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def tvm_available() -> str | None:
    """None if the wheel imports (in a child process), else why not."""
    proc = subprocess.run([sys.executable, "-c", "import tvm; from tvm import s_tir"], capture_output=True, text=True,
                          timeout=300)
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def baseline_env() -> dict[str, str]:
    """The children's environment: this one without the OpenBLAS kernel overrides, and every library
    told to use our thread count."""
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES}
    env.update(OPENBLAS_NUM_THREADS=str(num_threads()), TVM_NUM_THREADS=str(num_threads()))
    return env


class ChildWorker:
    """A child process holding a built workload; ``round()`` times one round in it. ``info`` is
    what the child reported when ready (the BLAS kernel it loaded, for instance)."""

    def __init__(self, proc: subprocess.Popen, info: dict[str, Any]) -> None:
        self.proc = proc
        self.info = info

    @classmethod
    def start(cls, spec: dict[str, Any]) -> "ChildWorker | None":
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=baseline_env())
        line = proc.stdout.readline().strip()
        if not line.startswith("ready"):
            proc.wait(timeout=60)
            CHILD_ERRORS.append(f"{spec}: {(proc.stderr.read().strip().splitlines() or ['failed'])[-1][:200]}")
            return None
        return cls(proc, json.loads(line[len("ready"):] or "{}"))

    def round(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def child_worker(spec: dict[str, Any]) -> None:
    """The child's side: build, say ready (with what it loaded), then answer each ``run`` with
    seconds per call."""
    if spec["kind"] == "numpy-gemm":
        rng = np.random.default_rng(0)
        a, b = (rng.uniform(-1, 1, (spec["size"], spec["size"])).astype("float32") for _ in range(2))
        contender = Contender(lambda: a @ b)
        print("ready" + json.dumps({"blas": blas_info()}), flush=True)
        for line in sys.stdin:
            if line.strip() == "run":
                print(contender.round(), flush=True)
        return
    import tvm  # noqa: PLC0415 (optional baseline, only in the worker process)

    target = tvm.target.Target({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": host_target().cpu,
                                "num-cores": num_threads()})
    func, shapes = tvm_gemm(spec["size"]) if spec["kind"] == "tvm-gemm" else tvm_conv(*layer_shape(spec["layer"]))
    exe = tvm.compile(func, target)
    dev = tvm.cpu()
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.uniform(-1, 1, shape).astype("float32"), dev) for shape in shapes]
    runner = exe.jit() if hasattr(exe, "jit") else exe
    evaluator = runner.time_evaluator("main", dev, number=1, repeat=1, min_repeat_ms=50)
    evaluator(*args)
    print("ready" + json.dumps({"tvm": tvm.__version__}), flush=True)
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


# ---------------------------------------------------------------------------- machine and environment
BLAS_SEEN: dict[str, Any] = {}  # what the OpenBLAS baseline child loaded


def blas_info() -> list[dict[str, Any]]:
    """numpy's BLAS libraries as threadpoolctl sees them (``architecture`` is OpenBLAS's kernel)."""
    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415 (optional benchmark dependency)
    except ImportError:
        return [{"error": "threadpoolctl not installed"}]
    return [{k: v for k, v in lib.items() if k != "filepath"} for lib in threadpool_info()
            if lib.get("user_api") == "blas"]


def cpu_info() -> dict[str, Any]:
    """The CPU model name and flags (from /proc/cpuinfo where there is one) and LLVM's view of it."""
    info: dict[str, Any] = {"llvm_cpu": host_target().cpu, "model": None, "flags": []}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and info["model"] is None:
                    info["model"] = value.strip()
                elif key.strip() == "flags" and not info["flags"]:
                    info["flags"] = value.split()
    except OSError:
        pass
    features = host_target().features.split(",")
    info["llvm_vector_features"] = sorted(f[1:] for f in features if f.startswith("+") and
                                          f[1:].startswith(("avx", "fma", "amx", "sse4")))
    info["target"] = str(cpu.default_target())
    return info


def environment(ort: Any) -> dict[str, Any]:
    """Everything that decides the baselines' speed, recorded with the figures."""
    env = {"threads": num_threads(), "load_average": os.getloadavg(), "cpu": cpu_info(),
           "openblas_env": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS")},
           "openblas_env_removed_for_baseline": [k for k in OPENBLAS_OVERRIDES if k in os.environ],
           "numpy": np.__version__, "numpy_blas_in_this_process": blas_info()}
    if ort is not None:
        env["onnxruntime"] = {"version": ort.__version__, "intra_op_num_threads": num_threads(),
                              "inter_op_num_threads": 1, "providers": ["CPUExecutionProvider"]}
    return env


def fork_join_us(repeat: int, launches: int = 200, width: int = 8192) -> dict[str, float]:
    """The thread pool's cost per parallel launch, measured inside compiled code: a kernel runs
    ``launches`` parallel loops one after another, each of 2 iterations of ``width`` element-wise
    operations (about a microsecond each), against the same kernel with serial loops. With 2 or
    more threads, a perfect launch would take half the serial time; the excess is the fork/join
    cost (median microseconds per launch). Also the time a parallel loop adds to a module call
    from Python, calls a few microseconds apart (as a graph executor makes them)."""
    mods = {kind: _launch_module(launches, width, kind == "parallel") for kind in ("serial", "parallel")}
    xa, ya = np.ones((launches, 2, width), "float32"), np.zeros((launches, 2, width), "float32")
    contenders = {kind: Contender(lambda mod=mod: mod(xa, ya), min_seconds=0.02) for kind, mod in mods.items()}
    times = interleaved(contenders, max(repeat, 5))
    ideal = times["serial"] / min(2, num_threads())
    one = {kind: _launch_module(1, 16, kind == "parallel") for kind in ("serial", "parallel")}
    xb, yb = np.ones((1, 2, 16), "float32"), np.zeros((1, 2, 16), "float32")
    per_call = interleaved({kind: Contender(lambda mod=mod: mod(xb, yb), min_seconds=0.02)
                            for kind, mod in one.items()}, max(repeat, 5))
    return {"fork_join_us": (times["parallel"] - ideal) / launches * 1e6,
            "launch_body_us": times["serial"] / launches / 2 * 1e6, "call_us": per_call["serial"] * 1e6,
            "parallel_call_extra_us": (per_call["parallel"] - per_call["serial"]) * 1e6}


def _launch_module(launches: int, width: int, parallel: bool) -> Any:
    x = te.placeholder((launches, 2, width), name="x")
    y = te.compute((launches, 2, width), lambda r, i, j: x[r, i, j] * 0.5 + 1.0, name="y")
    s = te.create_schedule(y.op)
    if parallel:
        s[y].parallel(s[y].op.axis[1])
    s[y].vectorize(s[y].split(s[y].op.axis[2], 16)[1])
    return vtakit.build(s, [x, y], target="llvm")


_PEAK_IR = """
declare <{n} x float> @llvm.fma.v{n}f32(<{n} x float>, <{n} x float>, <{n} x float>)
define float @peak(i64 %iters, float %x, float %y) {{
entry:
  %xv0 = insertelement <{n} x float> undef, float %x, i32 0
  %xv = shufflevector <{n} x float> %xv0, <{n} x float> undef, <{n} x i32> zeroinitializer
  %yv0 = insertelement <{n} x float> undef, float %y, i32 0
  %yv = shufflevector <{n} x float> %yv0, <{n} x float> undef, <{n} x i32> zeroinitializer
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
{phis}
{fmas}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %iters
  br i1 %more, label %loop, label %exit
exit:
{sums}
  %r = extractelement <{n} x float> %s{last}, i32 0
  ret float %r
}}
"""


def peak_gflops(lanes: int, threads: int, accumulators: int = 12, iters: int = 2_000_000) -> float:
    """GFLOPS of independent ``lanes``-wide FMA chains (in registers, no memory) on ``threads``
    threads: the compute roof of this machine for that vector width."""
    import ctypes  # noqa: PLC0415
    import threading  # noqa: PLC0415

    import llvmlite.binding as llvm  # noqa: PLC0415

    from vtakit.compiler.backend import llvm_runtime as rt  # noqa: PLC0415

    n = lanes
    phis = "\n".join(f"  %a{j} = phi <{n} x float> [zeroinitializer, %entry], [%b{j}, %loop]"
                      for j in range(accumulators))
    fmas = "\n".join(f"  %b{j} = call <{n} x float> @llvm.fma.v{n}f32(<{n} x float> %a{j}, <{n} x float> %xv, "
                      f"<{n} x float> %yv)" for j in range(accumulators))
    sums = "  %s0 = fadd <{n} x float> %b0, zeroinitializer\n".format(n=n) + "\n".join(
        f"  %s{j} = fadd <{n} x float> %s{j - 1}, %b{j}" for j in range(1, accumulators))
    text = _PEAK_IR.format(n=n, phis=phis, fmas=fmas, sums=sums, last=accumulators - 1)
    with rt.LLVM_LOCK:
        module = llvm.parse_assembly(text)
        module.triple = host_target().triple
        engine = rt.jit(module, host_target())
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)(
        engine.get_function_address("peak"))
    fn(1000, 0.5, 0.25)
    best = 0.0
    for _ in range(3):
        workers = [threading.Thread(target=fn, args=(iters, 0.5, 0.25)) for _ in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, threads * iters * accumulators * lanes * 2 / (time.perf_counter() - start) / 1e9)
    return best


def copy_bandwidth_gbs(megabytes: int = 256) -> float:
    """Main-memory bandwidth seen by one numpy copy (bytes read + bytes written per second)."""
    src = np.ones(megabytes << 18, "float32")
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best / 1e9


def roofline(repeat: int) -> dict[str, Any]:
    """The machine's roofs (FMA peak per vector width, 1 and all threads; copy bandwidth) and the
    pool's fork/join cost."""
    roofs: dict[str, Any] = {}
    for lanes in (8, 16):
        for threads in sorted({1, num_threads()}):
            roofs[f"fma_peak_gflops_{lanes * 32}bit_{threads}t"] = peak_gflops(lanes, threads)
    roofs["copy_gbs_1t"] = copy_bandwidth_gbs()
    roofs.update(fork_join_us(repeat))
    return roofs


# ---------------------------------------------------------------------------- main
def main() -> int:
    global TARGET
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gemm-size", type=int, default=1024)
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated subset of C2..C11")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--target", default="llvm",
                        help="vtakit CPU target, e.g. 'llvm -vector-width=256' (default: the host)")
    parser.add_argument("--plain", action="store_true", help="also time conv2d_nchw with OIHW weights")
    parser.add_argument("--no-ort", action="store_true")
    parser.add_argument("--no-tvm", action="store_true")
    parser.add_argument("--no-roofline", action="store_true", help="skip the FMA peak, bandwidth and fork/join rows")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        child_worker(json.loads(args.worker))
        return 0
    layers = [name.strip().upper() for name in args.layers.split(",") if name.strip()]
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        parser.error(f"unknown layers {unknown}; expected some of {list(LAYERS)}")
    try:
        TARGET = str(parse_target(args.target))
    except VtakitError as exc:
        parser.error(str(exc))

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

    roofs = {} if args.no_roofline else roofline(args.repeat)
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
    machine = environment(ort)
    machine.update(target=TARGET, numpy_blas_baseline=BLAS_SEEN.get("blas"))
    wrong = [r.workload for r in rows if not r.correct]
    if args.json:
        print(json.dumps({"machine": machine, "roofline": roofs,
                          "rows": [dict(asdict(r), ratios=r.ratios(), correct=r.correct) for r in rows],
                          "summary": summary, "wrong": wrong, "notes": notes + CHILD_ERRORS}, indent=2))
    else:
        print_text(machine, roofs, rows, summary, notes + CHILD_ERRORS)
    if wrong:
        print(f"error: wrong results (max_abs_error above tolerance) for {wrong}", file=sys.stderr)
        return 1
    return 0


def print_text(machine: dict[str, Any], roofs: dict[str, Any], rows: list[Row], summary: dict[str, Any],
               notes: list[str]) -> None:
    blas = machine.get("numpy_blas_baseline") or [{}]
    print(f"{machine['cpu']['model']} ({machine['cpu']['llvm_cpu']}), {machine['threads']} threads, "
          f"load {machine['load_average'][0]:.1f}; target {machine['target']}")
    print(f"numpy BLAS baseline: {blas[0].get('internal_api')} {blas[0].get('version')} kernel "
          f"{blas[0].get('architecture')}; OPENBLAS env {machine['openblas_env'] or 'none'} (removed for the "
          f"baseline: {machine['openblas_env_removed_for_baseline'] or 'none'})")
    if "onnxruntime" in machine:
        print(f"onnxruntime {machine['onnxruntime']['version']}, intra-op threads "
              f"{machine['onnxruntime']['intra_op_num_threads']}")
    if roofs:
        print("roofline: " + ", ".join(f"{k} {v:.1f}" for k, v in roofs.items()))
    print("times are medians in ms; ratio = baseline time / ours")
    keys = sorted({k for r in rows for k in (*r.baselines_ms, *r.extra_ms)})
    print(f"{'workload':<12}{'GFLOP':>7}{'ours':>9}{'GFLOPS':>8}" + "".join(f"{k:>18}" for k in keys)
          + f"{'compile s':>11}{'max err':>10}{'tol':>9}")
    for r in rows:
        cells = []
        for k in keys:
            v = r.baselines_ms.get(k, r.extra_ms.get(k))
            cells.append(f"{'-':>18}" if v is None else f"{v:>9.3f} ({r.ours_ms and v / r.ours_ms:4.2f}x)")
        print(f"{r.workload:<12}{r.gflop:>7.3f}{r.ours_ms:>9.3f}{r.gflop / r.ours_ms * 1e3:>8.1f}" + "".join(cells)
              + f"{r.compile_s:>11.2f}{r.max_abs_error:>10.1e}{r.tolerance:>9.1e}")
    if summary:
        total = summary["conv_total_ms"]
        print("conv C2-C11 total ms: " + ", ".join(f"{k} {v:.3f}" for k, v in total.items()))
    for note in notes:
        print("note:", note)


if __name__ == "__main__":
    sys.exit(main())
