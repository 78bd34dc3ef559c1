#!/usr/bin/env python3
"""Benchmark the GPU backend: the dense 4096^3 fp32 GEMM and ResNet-18 (batch 1, fp32) built for ``cuda``.

Without a GPU (the usual case here) it reports what can be known statically, per kernel: ptxas's
registers per thread, spill stores and loads and shared memory, the launch (grid, threads per
block) and the occupancy those allow on an A100-class SM (sm_80: 65536 registers, 2048 threads,
164 KiB of shared memory, 32 blocks; :mod:`vtakit.compiler.backend.nvptx.occupancy`).

With a GPU (the CUDA driver finds one) it also measures, in the same run:

- the GEMM's GFLOPS, kernels timed with the operands on the GPU
  (:func:`~vtakit.compiler.backend.nvptx.timer.time_kernels`), its output checked against numpy;
- ResNet-18's kernel time: every step's kernel program timed the same way on its own operands
  (the values a CPU build, ``target="llvm"``, computes), summed over the network's steps (the
  executor copies each step's operands between host and GPU, which this leaves out); every step's
  GPU output is compared with the CPU's (the largest error relative to the value's magnitude);
- PyTorch on CUDA for both (``torch.matmul`` with TF32 off; torchvision's ``resnet18``), when
  ``torch`` with CUDA (and ``torchvision``) is importable; otherwise those figures are null with
  the reason.

    python scripts/bench_gpu.py            # table
    python scripts/bench_gpu.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

import numpy as np

import vtakit
from vtakit import te
from vtakit.compiler import ops
from vtakit.compiler.backend.nvptx import ptxas_check
from vtakit.compiler.backend.nvptx.driver import cuda_driver
from vtakit.compiler.backend.nvptx.occupancy import SM80, occupancy
from vtakit.compiler.backend.nvptx.timer import time_kernels
from vtakit.errors import DeviceError
from vtakit.progress import progress


def gpu_present() -> tuple[bool, str]:
    try:
        cuda_driver()
    except DeviceError as exc:
        return False, str(exc)
    return True, ""


def kernel_rows(module: Any, arch: str, label: str) -> list[dict[str, Any]]:
    """One row per kernel of a GPU kernel program: launch, ptxas resources, static occupancy."""
    report = ptxas_check(module.get_source("ptx"), arch)
    rows = []
    for k in module.kernels:
        res = report.kernel(k.name)
        threads = k.block[0] * k.block[1] * k.block[2]
        occ = occupancy(threads, res.registers, res.shared_bytes, SM80)
        rows.append({"label": label, "kernel": k.name, "grid": list(k.grid), "block": list(k.block),
                     "threads_per_block": threads, "registers": res.registers, "spill_stores": res.spill_stores,
                     "spill_loads": res.spill_loads, "shared_bytes": res.shared_bytes,
                     "stack_bytes": res.stack_bytes, "blocks_per_sm": occ.blocks_per_sm,
                     "occupancy": occ.occupancy, "occupancy_limited_by": occ.limited_by})
    return rows


def gemm_module(n: int, arch: str) -> tuple[Any, list[Any]]:
    a = te.placeholder((n, n), "float32", name="a")
    w = te.placeholder((n, n), "float32", name="w")
    out = ops.dense(a, w)
    return vtakit.build(ops.cuda.schedule(out), [a, w, out], target=f"cuda -arch={arch}", name="gemm"), [a, w, out]


def measure_gemm(module: Any, n: int, repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    out = np.zeros((n, n), np.float32)
    seconds = min(time_kernels(module, [a, w, out], number=3, repeat=repeat))
    want = a @ w.T
    err = float(np.max(np.abs(out - want)) / np.max(np.abs(want)))
    return {"seconds": seconds, "gflops": 2 * n ** 3 / seconds / 1e9, "max_rel_error": err}


def resnet_modules(image: int) -> tuple[Any, Any]:
    from vtakit import graph as vg
    from vtakit.compiler.graph.zoo import resnet18

    model = resnet18(0, image=image)
    return model, vg.build(vg.from_onnx(model), target="cuda")


def measure_resnet(model: Any, module: Any, image: int, repeat: int) -> dict[str, Any]:
    """Each step's kernels timed on the step's operands (taken from a CPU run of the network), summed."""
    from vtakit import graph as vg

    x = np.random.default_rng(1).standard_normal((1, 3, image, image)).astype(np.float32)
    cpu = vg.build(vg.from_onnx(model), target="llvm", disabled_passes=("AlterOpLayout",))  # the same graph
    values = cpu.debug_run({"data": x})
    total, worst = 0.0, 0.0
    for step in module.plan.steps:
        program = module.gpu_kernels[step.kernel]
        arrays = [np.ascontiguousarray(values[a]) if a in values else np.ascontiguousarray(module.constants[a])
                  for a in step.args]
        arrays = [a.copy() for a in arrays]
        total += min(time_kernels(program, arrays, number=3, repeat=repeat))
        for name, got in zip(step.args[len(step.args) - step.outputs:], arrays[len(arrays) - step.outputs:]):
            want = values[name]
            worst = max(worst, float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30)))
    return {"kernel_seconds": total, "steps": len(module.plan.steps), "max_rel_error_vs_cpu": worst,
            "note": "sum of each step's kernels timed with its operands on the GPU (no host copies)"}


def torch_figures(n: int, image: int, repeat: int) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {"gemm_gflops": None, "resnet18_seconds": None, "reason": "torch is not installed"}
    if not torch.cuda.is_available():
        return {"gemm_gflops": None, "resnet18_seconds": None, "reason": "torch has no CUDA device"}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.rand((n, n), device="cuda")
    w = torch.rand((n, n), device="cuda")

    def timed(fn: Any) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / 3)
        return best

    result: dict[str, Any] = {"gemm_gflops": 2 * n ** 3 / timed(lambda: a @ w.T) / 1e9, "resnet18_seconds": None,
                              "reason": ""}
    try:
        import torchvision
    except ImportError:
        result["reason"] = "torchvision is not installed (no ResNet-18 to compare with)"
        return result
    net = torchvision.models.resnet18().cuda().eval()
    x = torch.rand((1, 3, image, image), device="cuda")
    with torch.no_grad():
        result["resnet18_seconds"] = timed(lambda: net(x))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--arch", default="sm_80", help="architecture the PTX is generated and checked for")
    parser.add_argument("--n", type=int, default=4096, help="GEMM size (n x n x n)")
    parser.add_argument("--image", type=int, default=224, help="ResNet-18 input size")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions on a GPU (the best is kept)")
    parser.add_argument("--skip-resnet", action="store_true", help="the GEMM only")
    args = parser.parse_args(argv)
    has_gpu, why = gpu_present()
    result: dict[str, Any] = {"machine": {"cpu": platform.processor() or platform.machine(), "python": sys.version.split()[0]},
                              "arch": args.arch, "occupancy_limits": SM80.name, "gpu": has_gpu,
                              "no_gpu_reason": why or None, "kernels": []}
    with progress("GPU benchmark", total=4, unit="stage") as bar:
        bar.step(f"building the {args.n}^3 GEMM")
        start = time.perf_counter()
        gemm, _ = gemm_module(args.n, args.arch)
        result["gemm_build_seconds"] = time.perf_counter() - start
        result["kernels"] += kernel_rows(gemm, args.arch, f"dense {args.n}^3")
        bar.advance()
        model = net = None
        if not args.skip_resnet:
            bar.step("building ResNet-18 for cuda")
            start = time.perf_counter()
            model, net = resnet_modules(args.image)
            result["resnet18_build_seconds"] = time.perf_counter() - start
            steps: dict[int, list[str]] = {}
            for step in net.plan.steps:
                steps.setdefault(step.kernel, []).append(step.name)
            for k, program in enumerate(net.gpu_kernels):
                label = f"resnet18 {'+'.join(net.plan.steps[[s.kernel for s in net.plan.steps].index(k)].ops)} " \
                        f"x{len(steps.get(k, []))}"
                result["kernels"] += kernel_rows(program, args.arch, label)
        bar.advance()
        measured: dict[str, Any] = {"gemm": None, "resnet18": None}
        if has_gpu:
            bar.step("timing on the GPU")
            measured["gemm"] = measure_gemm(gemm, args.n, args.repeat)
            if net is not None:
                measured["resnet18"] = measure_resnet(model, net, args.image, args.repeat)
            measured["torch"] = torch_figures(args.n, args.image, args.repeat)
        else:
            measured["reason"] = f"no GPU: {why}"
            measured["torch"] = {"gemm_gflops": None, "resnet18_seconds": None, "reason": "no GPU on this machine"}
        bar.advance()
        result["measured"] = measured
        rows = result["kernels"]
        result["summary"] = {"kernels": len(rows), "with_spills": sum(1 for r in rows if r["spill_stores"] or r["spill_loads"]),
                             "max_registers": max(r["registers"] for r in rows),
                             "min_occupancy": min(r["occupancy"] for r in rows)}
        bar.advance()
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    head = ("kernel", "label", "grid", "block", "regs", "spills", "shared B", "blocks/SM", "occupancy", "limit")
    table = [(r["kernel"], r["label"], "x".join(map(str, r["grid"])), "x".join(map(str, r["block"])),
              str(r["registers"]), f"{r['spill_stores']}/{r['spill_loads']}", str(r["shared_bytes"]),
              str(r["blocks_per_sm"]), f"{100 * r['occupancy']:.0f}%", r["occupancy_limited_by"]) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    for line in (head, tuple("-" * w for w in widths), *table):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip())
    print(f"\nGPU: {'yes' if has_gpu else 'no (' + why + ')'}")
    for key in ("gemm", "resnet18", "torch"):
        if key in measured:
            print(f"{key}: {measured[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
