"""Checking the winner of a co-design search (``vtakit dse --verify``, docs/dse.md §7).

The search ranks configurations by the resource estimate and the cycle model; this module checks
the one it picked against what those models stand for:

1. **Synthesis** (``synth=True``): :func:`vtakit.hw.synth.synthesize` of the configuration for the
   part (the flattened Yosys run, minutes for a large array) must fit; the report sits beside the
   estimate the search used.
2. **Programs on the RTL**: the network is built for the configuration (with its tuning log) and
   run on a recording backend that keeps the DRAM image each accelerator program starts from; the
   ``programs`` shortest programs (by cycles) run again from that image on the verilator backend
   (the Amaranth ``rtl`` simulator when Verilator is missing) and on the cycle model, which must
   agree on the total cycles, every instruction's retire cycle, every module's busy cycles and the
   final DRAM contents, byte for byte.
3. **The network**: the outputs of that run (the cycle model executes every program) must equal the
   integer CPU reference (``vtakit.graph.evaluate``) bit for bit.

:class:`Verification` holds the results (``to_dict`` is the ``verification`` object of ``--json``);
``ok`` is True when every check that ran passed.
"""

from __future__ import annotations

import heapq
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

import numpy as np

from vtakit.errors import DSEError
from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import estimate
from vtakit.hw.parts import KINDS, get_part
from vtakit.sim.backend import BACKENDS, Launch, get_backend
from vtakit.sim.stats import RunStats

__all__ = ["ProgramCheck", "Verification", "verify", "compare_program", "PROGRAM_BACKENDS"]

#: Where the winner's programs run besides the cycle model, in order of preference.
PROGRAM_BACKENDS = ("verilator", "rtl")
_RECORD = "dse-record"


@dataclass
class ProgramCheck:
    """One accelerator program of the network on the cycle model and on an RTL backend."""

    step: str
    instructions: int
    cycles: int                  # the cycle model's
    backend: str
    backend_cycles: int | None
    mismatch: str = ""           # the first difference ('' when they agree)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.mismatch


@dataclass
class Verification:
    """What :func:`verify` checked on ``model`` for ``part``."""

    model: str
    part: str
    config: dict[str, Any]
    synth: dict[str, Any] | None = None          # resources, fits and seconds of the synthesis; None: not run
    synth_skipped: str = ""                      # why synthesis did not run
    estimate: dict[str, float] = field(default_factory=dict)
    programs: list[ProgramCheck] = field(default_factory=list)
    programs_total: int = 0                      # the network's accelerator programs
    network_equal: bool | None = None
    network_message: str = ""
    network_cycles: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def fits(self) -> bool | None:
        return None if self.synth is None else bool(self.synth["fits"])

    @property
    def ok(self) -> bool:
        return self.fits is not False and all(p.ok for p in self.programs) and self.network_equal is not False

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "model": self.model, "part": self.part, "config": self.config,
                "synth": self.synth, "synth_skipped": self.synth_skipped, "fits": self.fits,
                "estimate": self.estimate, "programs": [{**asdict(p), "ok": p.ok} for p in self.programs],
                "programs_total": self.programs_total, "network_equal": self.network_equal,
                "network_message": self.network_message, "network_cycles": self.network_cycles,
                "seconds": {k: round(v, 1) for k, v in self.seconds.items()}, "summary": self.describe()}

    def describe(self) -> str:
        """A few lines for the terminal."""
        lines = [f"verification of {self.model} on {self.part}: {'passed' if self.ok else 'FAILED'}"]
        if self.synth is None:
            lines.append(f"  synthesis: not run ({self.synth_skipped})")
        else:
            used = ", ".join(f"{k.upper()} {self.synth['resources'][k]:g} (estimate {self.estimate[k]:g})"
                             for k in KINDS)
            lines.append(f"  synthesis: {'fits' if self.synth['fits'] else 'DOES NOT FIT'}: {used}")
        for p in self.programs:
            what = "equal" if p.ok else p.mismatch
            lines.append(f"  {p.step}: {p.instructions} instructions, {p.cycles:,} cycles; {p.backend} == cycle: "
                         f"{what}")
        if self.network_equal is not None:
            lines.append(f"  network outputs == integer CPU reference: {self.network_equal}"
                         + (f" ({self.network_message})" if self.network_message else ""))
        return "\n".join(lines)


# ---------------------------------------------------------------------------- recording backend
@dataclass
class _Recorded:
    index: int
    config: VTAConfig
    insns: list
    dram: np.ndarray           # the image the program started from
    insn_addr: int
    encoded: bytes | None
    cycles: int


class _Recorder:
    """Runs every launch on the cycle model and keeps the ``keep`` shortest launches' starting images."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.count = 0
        self.heap: list[tuple[int, int, _Recorded]] = []   # (-cycles, -index, ...): a max-heap of the kept

    def __call__(self, launch: Launch) -> RunStats:
        start = launch.dram.copy() if self.keep else None
        stats = get_backend("cycle")(launch)
        index, self.count = self.count, self.count + 1
        if self.keep:
            rec = _Recorded(index, launch.config, list(launch.insns), start, launch.insn_addr, launch.encoded,
                            int(stats.cycles))
            item = (-rec.cycles, -index, rec)
            if len(self.heap) < self.keep:
                heapq.heappush(self.heap, item)
            elif item > self.heap[0]:
                heapq.heapreplace(self.heap, item)
        return stats


_recorder: _Recorder | None = None


def _record(launch: Launch) -> RunStats:
    """The ``dse-record`` backend (registered only while :func:`verify` runs)."""
    if _recorder is None:
        raise DSEError("the dse-record backend runs only inside vtakit.dse.verify")
    return _recorder(launch)


@contextmanager
def _recording(keep: int) -> Iterator[_Recorder]:
    global _recorder
    _recorder = _Recorder(keep)
    BACKENDS[_RECORD] = f"{__name__}:_record"
    try:
        yield _recorder
    finally:
        BACKENDS.pop(_RECORD, None)
        _recorder = None


# ---------------------------------------------------------------------------- checks
def _program_backend(requested: str | None) -> str:
    if requested is not None:
        if requested not in PROGRAM_BACKENDS:
            raise DSEError(f"unknown program backend {requested!r}; expected one of {list(PROGRAM_BACKENDS)}")
        return requested
    from vtakit.sim import verilator  # noqa: PLC0415

    return "verilator" if verilator.available() is None else "rtl"


def compare_program(config: VTAConfig, insns: list, dram: np.ndarray, insn_addr: int, encoded: bytes | None,
                    backend: str) -> tuple[str, RunStats, RunStats]:
    """Run one program from the DRAM image ``dram`` (not modified) on the cycle model and on ``backend``;
    returns the first difference ('' when none) in cycles, retire cycles, busy cycles or DRAM, and both runs'
    statistics."""
    ref_dram, got_dram = dram.copy(), dram.copy()
    ref = get_backend("cycle")(Launch(config, list(insns), ref_dram, insn_addr, encoded=encoded))
    got = get_backend(backend)(Launch(config, list(insns), got_dram, insn_addr, encoded=encoded))
    if got.cycles != ref.cycles:
        return f"{got.cycles} cycles, the cycle model {ref.cycles}", ref, got
    retire_got, retire_ref = got.retire_cycles or [], ref.retire_cycles or []
    if len(retire_got) != len(retire_ref):
        return f"{len(retire_got)} retire cycles, the cycle model {len(retire_ref)}", ref, got
    for i, (a, b) in enumerate(zip(retire_got, retire_ref)):
        if a != b:
            return f"instruction {i} retires in cycle {a}, in the cycle model in {b}", ref, got
    busy = {k: (got.busy_cycles or {}).get(k) for k in (ref.busy_cycles or {})}
    if busy != (ref.busy_cycles or {}):
        return f"busy cycles {busy}, the cycle model {ref.busy_cycles}", ref, got
    diff = np.flatnonzero(got_dram != ref_dram)
    if diff.size:
        return f"DRAM differs from the cycle model's at {diff.size} byte(s), first {diff[:4].tolist()}", ref, got
    return "", ref, got


def verify(network: Any, config: VTAConfig, part: str, *, tuning_log: str | None = None, synth: bool = True,
           programs: int = 2, backend: str | None = None, synth_dir: str | None = None) -> Verification:
    """Check ``config`` (the search's winner) for ``part`` on ``network`` (a name, a model or a
    :class:`~vtakit.dse.network.Network`): synthesis (when ``synth``), the ``programs`` shortest
    accelerator programs of the network on ``backend`` (default: verilator, else rtl) against the
    cycle model, and the network's outputs against the integer CPU reference (module docstring)."""
    from vtakit.compiler import graph as vg  # noqa: PLC0415 -- the graph compiler loads only when used
    from vtakit.dse.network import Network, load_network  # noqa: PLC0415

    if not isinstance(programs, int) or isinstance(programs, bool) or programs < 0:
        raise DSEError(f"programs must be an int >= 0 (how many of the network's programs run on the RTL), "
                       f"got {programs!r}")
    part_obj = get_part(part)
    net = network if isinstance(network, Network) else load_network(network)
    est = estimate(config, part_obj)
    out = Verification(config.model, part_obj.name, config.to_dict(),
                       estimate={k: round(getattr(est, k).used, 1) for k in KINDS})
    program_backend = _program_backend(backend) if programs else ""

    start = time.perf_counter()
    module = vg.build(net.graph, "vta", config=config, tuning_log=tuning_log)
    with _recording(programs) as recorder:
        outputs = module.run(net.sample, backend=_RECORD)
    stats = module.last_stats
    out.seconds["network"] = time.perf_counter() - start
    out.programs_total = recorder.count
    out.network_cycles = None if stats is None else stats.cycles
    names = [n for n, _ in stats.steps] if stats is not None and len(stats.steps) == recorder.count else []
    mismatched = [name for name, got, want in zip(net.graph.outputs, outputs, net.expected())
                  if not np.array_equal(got, want)]
    out.network_equal = not mismatched
    if mismatched:
        out.network_message = f"output(s) {mismatched} differ from the integer CPU reference"

    start = time.perf_counter()
    for _, _, rec in sorted(recorder.heap, key=lambda item: (-item[0], -item[1])):
        t = time.perf_counter()
        mismatch, _, got = compare_program(rec.config, rec.insns, rec.dram, rec.insn_addr, rec.encoded,
                                           program_backend)
        out.programs.append(ProgramCheck(names[rec.index] if names else f"program {rec.index}", len(rec.insns),
                                         rec.cycles, program_backend, got.cycles, mismatch, time.perf_counter() - t))
    out.seconds["programs"] = time.perf_counter() - start

    if synth:
        from vtakit.hw.synth import SynthError, synthesize  # noqa: PLC0415

        start = time.perf_counter()
        try:
            report = synthesize(config, part_obj, modules=False, out_dir=synth_dir)
        except SynthError as exc:
            out.synth_skipped = str(exc)
        else:
            out.synth = {"fits": report.fits, "resources": dict(report.resources),
                         "available": dict(part_obj.capacity), "tools": report.tools,
                         "seconds": {k: round(v, 1) for k, v in report.seconds.items()}}
        out.seconds["synth"] = time.perf_counter() - start
    else:
        out.synth_skipped = "not asked for (synth=False)"
    return out
