"""The design space of the co-design search: which :class:`VTAConfig` keys vary, over which values,
and which configurations a part holds (docs/dse.md §2).

Every key that changes performance or area varies (:data:`KNOBS`): the array shape (LOG_BATCH,
LOG_BLOCK_IN, LOG_BLOCK_OUT), the four SRAMs, the bus, the DRAM reads in flight, the queue depths,
ALU_MUL and the area/speed keys of newer hardware features (:data:`OPTIONAL_KNOBS`, used when the
installed :class:`VTAConfig` has them). The SRAMs vary by *depth* (log2 of elements), not bytes:
the ISA's field widths bound depths, so a depth that encodes for one array shape encodes for all,
and far fewer sampled points fail validation. The clock and the DRAM latency are not knobs: the
part fixes them (:mod:`.fmax`), as it bounds the bus (:data:`BUS_LIMITS`), and BATCH never exceeds
the network's batch.

A point of the space is valid when :class:`VTAConfig` accepts it and fits when
:func:`vtakit.hw.estimate` puts every resource within the budget (a share of the part's capacity);
the search only ever proposes valid, fitting points (:meth:`DesignSpace.sample`,
:meth:`DesignSpace.neighbours`). The LUT budget is at most ``1 - lut_margin`` of the part (default
:data:`vtakit.hw.estimate.LUT_MARGIN`, the estimate's largest LUT error on the configurations held
out of its fit): a point whose estimated LUTs come within the estimate's error of the capacity
could go either way, and only a synthesis (:func:`vtakit.dse.verify.verify`) can say; the search
does not count it as fitting. ``lut_margin=0`` trusts the estimate up to the capacity.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

import numpy as np

from vtakit.dse.fmax import dram_latency_cycles, fmax_mhz
from vtakit.errors import ConfigError, DSEError
from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import LUT_MARGIN, ResourceEstimate, estimate
from vtakit.hw.parts import KINDS, Part, get_part

__all__ = ["Knob", "KNOBS", "OPTIONAL_KNOBS", "AREA_KEYS", "REPAIRS", "BUS_LIMITS", "DEFAULT_BUS_LIMIT", "Fit", "DesignSpace",
           "config_key"]


@dataclass(frozen=True)
class Knob:
    """One varied key: a :class:`VTAConfig` field, or ``log_<sram>_depth`` (sets ``LOG_<SRAM>_BUFF_SIZE``);
    ``values`` from the smallest area to the largest."""

    name: str
    values: tuple[Any, ...]


#: The keys every search varies. SRAM depth ranges: the ISA encodes at most 2^13 micro-ops and
#: 2^11 ACC rows, and INP + WGT + ACC depths share 32 bits (``VTAConfig`` rejects what overflows).
KNOBS: tuple[Knob, ...] = (
    Knob("log_batch", (0, 1, 2, 3)),
    Knob("log_block_in", (2, 3, 4, 5, 6)),
    Knob("log_block_out", (2, 3, 4, 5, 6)),
    Knob("log_uop_depth", (10, 11, 12, 13)),
    Knob("log_inp_depth", (8, 9, 10, 11, 12)),
    Knob("log_wgt_depth", (6, 7, 8, 9, 10, 11, 12)),
    Knob("log_acc_depth", (8, 9, 10, 11)),
    Knob("bus_width", (32, 64, 128, 256)),
    Knob("dram_outstanding", (1, 2, 4, 8, 16)),
    Knob("token_queue_depth", (2, 4, 8, 16)),
    Knob("cmd_queue_depth", (2, 4, 8, 16, 32)),
    Knob("alu_mul", (False, True)),
)
#: Keys of hardware features and area choices, varied when :class:`VTAConfig` defines them.
OPTIONAL_KNOBS: tuple[Knob, ...] = (
    Knob("alu_requant", (False, True)),          # fused requantisation (one ALU micro-op)
    Knob("bias_preload", (False, True)),         # a GEMM reset that copies the bias into ACC
    Knob("gemm_out_requant", (False, True)),     # GEMM write-back to OUT requantised (needs ALU_REQUANT)
    Knob("gemm_dsp_packing", (True, False)),     # two int8 products per DSP48E1
    Knob("acc_read_ports", (1, 2)),              # one ACC copy, or two for single-cycle ALU micro-ops
    # output channels whose products are LUT multipliers, not DSPs (at most BLOCK_OUT); even counts: packed
    # DSPs hold two channels' products, so an odd count frees no DSP
    Knob("gemm_lut_lanes", (0, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)),
)
#: The keys that choose how the RTL is built (area against speed), smallest-area value first.
AREA_KEYS = ("gemm_dsp_packing", "acc_read_ports", "gemm_lut_lanes")
#: How :meth:`DesignSpace.repair` lowers each resource kind: knob -> index step (+1: the next value).
REPAIRS: dict[str, dict[str, int]] = {
    "dsp": {"gemm_lut_lanes": +1, "gemm_dsp_packing": -1},
    "bram": {"log_wgt_depth": -1, "log_acc_depth": -1, "log_inp_depth": -1, "log_uop_depth": -1, "acc_read_ports": -1},
}
#: The widest bus (bits) each part offers the core; xc7z020: one 64-bit HP port.
BUS_LIMITS = {"xc7z020": 64}
#: The bus limit of parts not in :data:`BUS_LIMITS` (ECP5: soft DRAM controllers, 128 bits assumed).
DEFAULT_BUS_LIMIT = 128

_SRAMS = ("uop", "inp", "wgt", "acc")
_FIELDS = {f.name for f in fields(VTAConfig)}


def config_key(config: VTAConfig) -> str:
    """A configuration's identity in logs: its JSON keys, sorted."""
    return json.dumps(config.to_dict(), sort_keys=True)


@dataclass(frozen=True)
class Fit:
    """A configuration against the part's budget: the estimate, each resource's share of its
    budget, and the binding resource (the largest share)."""

    estimate: ResourceEstimate
    shares: dict[str, float]
    budget: dict[str, float]
    lut_margin: float = 0.0      # the share of the LUTs held back for the estimate's error (in ``budget``)

    @property
    def fits(self) -> bool:
        return all(s <= 1.0 for s in self.shares.values())

    @property
    def binding(self) -> str:
        return max(KINDS, key=lambda k: (self.shares[k], -KINDS.index(k)))

    @property
    def largest_fraction(self) -> float:
        """The largest share of the part's capacity (not of the budget): the Pareto front's area axis."""
        return max(getattr(self.estimate, k).fraction for k in KINDS)

    def describe(self, kind: str | None = None) -> str:
        """``"DSP 267 of 220 (121% of what is allowed)"`` for ``kind`` (default: the binding resource),
        with the budget when it is not the whole part."""
        kind = kind or self.binding
        r = getattr(self.estimate, kind)
        cap = r.available * self.budget[kind]
        budget = "" if self.budget[kind] == 1.0 else f", budget {100 * self.budget[kind]:g}% = {cap:g}"
        if kind == "lut" and self.lut_margin and self.budget[kind] == 1.0 - self.lut_margin:
            budget += f": the estimate's {100 * self.lut_margin:g}% error margin, beyond which only synthesis can tell"
        share = f"{100 * r.used / cap:.0f}% of what is allowed"
        return f"{kind.upper()} {round(r.used, 1):g} of {r.available}{budget} ({share})"

    def resources(self) -> dict[str, dict[str, float]]:
        return {k: {"used": round(getattr(self.estimate, k).used, 1), "available": getattr(self.estimate, k).available,
                    "fraction": round(getattr(self.estimate, k).fraction, 4)} for k in KINDS}


class DesignSpace:
    """The knobs a search varies on ``part`` for a network of batch ``max_batch``, within ``budget``
    (a share of every resource, or a share per resource kind; 1.0: the whole part). The LUT budget is
    at most ``1 - lut_margin`` (default :data:`vtakit.hw.estimate.LUT_MARGIN`; module docstring):
    ``budget`` holds the shares in force, the margin included."""

    def __init__(self, part: str | Part, max_batch: int = 1, budget: float | Mapping[str, float] = 1.0,
                 knobs: Iterable[Knob] | None = None, lut_margin: float | None = None) -> None:
        self.part = get_part(part)
        if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
            raise DSEError(f"the network's batch must be a positive int, got {max_batch!r}")
        self.max_batch = max_batch
        margin = LUT_MARGIN if lut_margin is None else lut_margin
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 1:
            raise DSEError(f"lut_margin must be a share of the part's LUTs in [0, 1), got {margin!r}")
        self.lut_margin = float(margin)
        self.budget = _budget(budget)
        self.budget["lut"] = min(self.budget["lut"], 1.0 - self.lut_margin)
        self.bus_limit = BUS_LIMITS.get(self.part.name, DEFAULT_BUS_LIMIT)
        chosen = list(knobs) if knobs is not None else [*KNOBS, *(k for k in OPTIONAL_KNOBS if k.name in _FIELDS)]
        self.knobs = tuple(self._bound(k) for k in chosen)

    def _bound(self, knob: Knob) -> Knob:
        if knob.name == "log_batch":
            return Knob(knob.name, tuple(v for v in knob.values if 1 << v <= self.max_batch))
        if knob.name == "bus_width":
            return Knob(knob.name, tuple(v for v in knob.values if v <= self.bus_limit))
        if knob.name not in _FIELDS and not (knob.name.startswith("log_") and knob.name.endswith("_depth")):
            raise DSEError(f"knob {knob.name!r} is not a VTAConfig key (or log_<sram>_depth)")
        return knob

    # ------------------------------------------------------------------ points and configurations
    def config(self, point: Mapping[str, Any]) -> VTAConfig:
        """The configuration of ``point`` (knob -> value) with the part's clock and DRAM latency; an
        unencodable point raises :class:`ConfigError`."""
        depths = _derived_depths()
        keys = {k: v for k, v in point.items() if k not in depths}
        default = VTAConfig()
        batch, block_in, block_out = (1 << keys.get(f, getattr(default, f))
                                      for f in ("log_batch", "log_block_in", "log_block_out"))
        elem_bytes = {"uop": 4, "inp": batch * block_in, "wgt": block_in * block_out, "acc": 4 * batch * block_out}
        for sram in _SRAMS:
            if f"log_{sram}_depth" in point:
                keys[f"log_{sram}_buff_size"] = point[f"log_{sram}_depth"] + int(math.log2(elem_bytes[sram]))
        config = VTAConfig(**keys)
        return self.clocked(config)

    def clocked(self, config: VTAConfig) -> VTAConfig:
        """``config`` with the part's clock for it and the DRAM latency at that clock."""
        clock = fmax_mhz(config, self.part)
        return config.replace(clock_mhz=clock, dram_latency=dram_latency_cycles(clock))

    def point(self, config: VTAConfig) -> dict[str, Any]:
        """The knob values of ``config`` (inverse of :meth:`config`)."""
        return {k.name: getattr(config, k.name) for k in self.knobs}

    def features(self, config: VTAConfig) -> np.ndarray:
        """What the search's cost model sees: every knob's value, the MACs and the largest resource share."""
        row = [float(getattr(config, k.name)) for k in self.knobs]
        row.append(math.log2(config.macs_per_cycle))
        row.append(self.fit(config).largest_fraction)
        return np.asarray(row, dtype=np.float64)

    def reference(self) -> VTAConfig:
        """VTA's default configuration on this part: ``VTAConfig()`` with the part's clock, DRAM latency
        and bus bound (the baseline of every search; it need not fit)."""
        return self.clocked(VTAConfig(bus_width=min(VTAConfig().bus_width, self.bus_limit)))

    def smallest(self) -> VTAConfig:
        """Every knob at its smallest-area value: if this does not fit, nothing does."""
        return self.config({k.name: k.values[0] for k in self.knobs})

    # ------------------------------------------------------------------ budget
    def fit(self, config: VTAConfig) -> Fit:
        est = estimate(config, self.part)
        shares = {k: getattr(est, k).used / (getattr(est, k).available * self.budget[k]) for k in KINDS}
        return Fit(est, shares, self.budget, self.lut_margin)

    def check_nonempty(self) -> None:
        """A :class:`DSEError` naming the binding resource when even :meth:`smallest` does not fit."""
        small = self.smallest()
        fit = self.fit(small)
        if not fit.fits:
            over = ", ".join(fit.describe(k) for k in KINDS if fit.shares[k] > 1.0)
            raise DSEError(f"nothing in the design space fits {self.part.name}{_budget_text(self.budget)}: even the "
                           f"smallest configuration ({small.model}) needs {over}; the binding resource is "
                           f"{fit.binding.upper()}")

    # ------------------------------------------------------------------ proposing points
    def sample(self, rng: np.random.Generator, n: int, exclude: set[str] | frozenset[str] = frozenset(),
               attempts: int = 400) -> list[VTAConfig]:
        """Up to ``n`` distinct valid, fitting configurations not in ``exclude`` (config keys), drawn
        uniformly per knob by ``rng`` (rejection sampling: ``attempts`` draws per configuration)."""
        out: list[VTAConfig] = []
        seen = set(exclude)
        for _ in range(n * attempts):
            if len(out) >= n:
                break
            point = {k.name: k.values[int(rng.integers(len(k.values)))] for k in self.knobs}
            config = self.admit(point, seen)
            if config is not None:
                out.append(config)
        return out

    def neighbours(self, config: VTAConfig, exclude: set[str] | frozenset[str] = frozenset()) -> list[VTAConfig]:
        """The valid, fitting configurations one knob step away from ``config`` (in knob order)."""
        point = self.point(config)
        out: list[VTAConfig] = []
        seen = set(exclude)
        for knob in self.knobs:
            if point[knob.name] not in knob.values:
                continue
            i = knob.values.index(point[knob.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(knob.values):
                    step = {**point, knob.name: knob.values[j]}
                    found = self.admit(step, seen)
                    if found is None:   # a step over the budget, repaired by the keys that trade area
                        repaired = self.repair(step, keep=knob.name)
                        found = None if repaired is None else self.admit(repaired, seen)
                    if found is not None:
                        out.append(found)
        return out

    def repair(self, point: Mapping[str, Any], keep: str = "", steps: int = 8) -> dict[str, Any] | None:
        """``point`` made to fit by moving the knobs of :data:`REPAIRS` (never ``keep``) one step at a time:
        each step moves the knob that most lowers the binding resource's share (more LUT lanes for DSPs,
        shallower SRAMs for block RAM); None when the point does not encode, or does not fit within
        ``steps`` steps. A fitting point is returned as it is. This is what lets a neighbour double the
        array: 1x16x16 to 1x32x16 needs LUT lanes to fit the DSPs at the same time."""
        point = dict(point)
        for _ in range(steps + 1):
            try:
                fit = self.fit(self.config(point))
            except ConfigError:
                return None
            if fit.fits:
                return point
            kind, best = fit.binding, None
            for knob in self.knobs:
                direction = REPAIRS.get(kind, {}).get(knob.name)
                if direction is None or knob.name == keep or point.get(knob.name) not in knob.values:
                    continue
                j = knob.values.index(point[knob.name]) + direction
                if not 0 <= j < len(knob.values):
                    continue
                moved = {**point, knob.name: knob.values[j]}
                try:
                    share = self.fit(self.config(moved)).shares[kind]
                except ConfigError:
                    continue
                if share < fit.shares[kind] and (best is None or share < best[0]):
                    best = (share, moved)
            if best is None:
                return None
            point = best[1]
        return None

    def admit(self, point: Mapping[str, Any], seen: set[str]) -> VTAConfig | None:
        """The configuration of ``point`` when it is valid, fits and is not in ``seen`` (then added)."""
        try:
            config = self.config(point)
        except ConfigError:
            return None
        key = config_key(config)
        if key in seen or not self.fit(config).fits:
            return None
        seen.add(key)
        return config

    def size(self) -> int:
        """Points in the space (valid or not)."""
        return int(np.prod([len(k.values) for k in self.knobs], dtype=np.int64))

    def describe(self) -> dict[str, Any]:
        """What the space searches, for reports: part, batch bound, budget, bus bound, knobs, points."""
        return {"part": self.part.name, "max_batch": self.max_batch, "budget": self.budget,
                "lut_margin": self.lut_margin,
                "bus_limit": self.bus_limit, "knobs": {k.name: list(k.values) for k in self.knobs},
                "points": self.size()}


def _derived_depths() -> tuple[str, ...]:
    return tuple(f"log_{s}_depth" for s in _SRAMS)


def _budget(budget: float | Mapping[str, float]) -> dict[str, float]:
    if isinstance(budget, Mapping):
        unknown = sorted(set(budget) - set(KINDS))
        if unknown:
            raise DSEError(f"budget names unknown resource kind(s) {unknown}; expected some of {list(KINDS)}")
        shares = {k: budget.get(k, 1.0) for k in KINDS}
    else:
        shares = {k: budget for k in KINDS}
    for kind, share in shares.items():
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise DSEError(f"budget for {kind.upper()} must be a share of the part in (0, 1], got {share!r}")
    return {k: float(v) for k, v in shares.items()}


def _budget_text(budget: dict[str, float]) -> str:
    parts = [f"{k.upper()} {100 * v:g}%" for k, v in budget.items() if v != 1.0]
    return f" within the budget ({', '.join(parts)})" if parts else ""
