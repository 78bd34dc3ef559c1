"""The one definition of an accelerator instance: ``VTAConfig`` (docs/architecture.md §2).

VTA describes a hardware variant with a ``vta_config.json`` of log2 sizes; every other number
(element widths, SRAM depths, ISA field widths, MACs per cycle) follows from it. This module
reads and writes that file, adds vtakit's own system keys (bus, DRAM model, queue depths) and
computes every derived quantity in one place, so the RTL, the simulators and the compiler can
never disagree about a size.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from vtakit.errors import ConfigError

__all__ = ["VTAConfig", "INSN_BITS", "UOP_BITS", "ITER_BITS"]

INSN_BITS = 128
UOP_BITS = 32
ITER_BITS = 14
_WORD_BITS = 64

# VTA's JSON keys map onto the dataclass fields by lower-casing; LOG_BLOCK is the one alias.
_LOG_BLOCK = "LOG_BLOCK"
# The key of the configuration object in ``vtakit info --json`` (never a VTA key).
_INFO_CONFIG = "config"


@dataclass(frozen=True)
class VTAConfig:
    """A VTA hardware configuration. ``VTAConfig()`` is VTA's default (Pynq, 1x16x16)."""

    target: str = "sim"
    hw_ver: str = "0.0.2"
    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_batch: int = 0
    log_block_in: int = 4
    log_block_out: int = 4
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    # vtakit's system keys: the memory system and queues around the core.
    bus_width: int = 64
    dram_latency: int = 32
    dram_outstanding: int = 8
    token_queue_depth: int = 8
    cmd_queue_depth: int = 8
    clock_mhz: float = 100.0
    alu_mul: bool = False
    # Fused requantisation: ALU opcode REQUANT (docs/isa.md), clip((dst + addend) >> s) in one micro-op.
    alu_requant: bool = False
    # GEMM epilogue keys (docs/isa.md, GEMM's epilogue bit): a reset GEMM with the bit copies a bias from ACC
    # (BIAS_PRELOAD); an accumulating GEMM with it writes OUT requantised by the requant register (GEMM_OUT_REQUANT).
    bias_preload: bool = False
    gemm_out_requant: bool = False
    # Area keys (docs/fpga.md): how the RTL is built; the ISA and the results do not change.
    gemm_dsp_packing: bool = True
    acc_read_ports: int = 1
    # Output channels per batch row (the last ones) whose products are LUT multipliers, not DSPs.
    gemm_lut_lanes: int = 0

    def __post_init__(self) -> None:
        self._validate()

    # ------------------------------------------------------------------ construction
    @classmethod
    def small(cls, **overrides: Any) -> "VTAConfig":
        """The fast-test configuration: 1x4x4 with small buffers; ``overrides`` as for the constructor."""
        params = dict(log_batch=0, log_block_in=2, log_block_out=2, log_uop_buff_size=10,
                      log_inp_buff_size=9, log_wgt_buff_size=10, log_acc_buff_size=11)
        params.update(_keyword_fields(overrides))
        return cls(**params)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "VTAConfig":
        """Build from VTA's JSON keys (upper case) plus vtakit's keys; unknown keys are errors."""
        if not isinstance(raw, dict):
            raise ConfigError(f"a VTA configuration must be a JSON object, got {type(raw).__name__}")
        return cls(**_json_fields(raw))

    @classmethod
    def from_json(cls, path: str | Path) -> "VTAConfig":
        """Read a ``vta_config.json`` file, or what ``vtakit info --json`` wrote (its ``config`` object;
        the model string and derived quantities beside it are reports, not inputs)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read configuration file {str(path)!r}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"configuration file {str(path)!r} is not UTF-8 text: {exc}") from exc
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"configuration file {str(path)!r} is not valid JSON: {exc}") from exc
        if isinstance(raw, dict) and _INFO_CONFIG in raw:
            raw = raw[_INFO_CONFIG]
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        """VTA's JSON keys (LOG_BLOCK when in and out agree) plus vtakit's keys."""
        same_block = self.log_block_in == self.log_block_out
        out: dict[str, Any] = {}
        for f in fields(self):
            key = f.name.upper()
            if same_block and key in ("LOG_BLOCK_IN", "LOG_BLOCK_OUT"):
                out[_LOG_BLOCK] = self.log_block_in     # (in the place of the pair)
            else:
                out[key] = getattr(self, f.name)
        return out

    def to_json(self, path: str | Path | None = None) -> str:
        """The configuration as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            Path(path).write_text(text)
        return text

    def replace(self, **changes: Any) -> "VTAConfig":
        """A copy with some fields changed (snake_case names or JSON keys), validated like any configuration."""
        return dataclasses.replace(self, **_keyword_fields(changes))

    def differences(self, other: "VTAConfig") -> str:
        """The keys on which ``other`` differs, as ``KEY=mine vs theirs`` (for error messages)."""
        return ", ".join(f"{f.name.upper()}={getattr(self, f.name)!r} vs {getattr(other, f.name)!r}"
                         for f in fields(self) if getattr(self, f.name) != getattr(other, f.name))

    def mismatch(self, other: "VTAConfig", built: str, there: str) -> str:
        """An error message for ``built`` (made for this configuration) meeting ``there`` (which has
        ``other``): both model strings when they differ (system keys such as BUS_WIDTH are not in
        them), and always every differing key with both values."""
        head = (f"{built} was built for {self.model}, {there} is {other.model}" if self.model != other.model
                else f"{built} was built for {self.model} with other system keys than {there}")
        return f"{head}: {self.differences(other)}"

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            expected = {"str": str, "int": int, "float": (int, float), "bool": bool}[f.type]
            if not isinstance(value, expected) or (f.type in ("int", "float") and isinstance(value, bool)):
                raise ConfigError(f"{f.name.upper()}={value!r} must be of type {f.type}")
        widths = (self.log_inp_width, self.log_wgt_width, self.log_acc_width)
        if widths != (3, 3, 5):
            raise ConfigError(f"LOG_INP_WIDTH/LOG_WGT_WIDTH/LOG_ACC_WIDTH={widths} unsupported; "
                              "expected (3, 3, 5): int8 inputs and weights, int32 accumulators")
        for name in ("log_batch", "log_block_in", "log_block_out"):
            if not 0 <= getattr(self, name) <= 6:
                raise ConfigError(f"{name.upper()}={getattr(self, name)} out of range, expected 0..6")
        for name in ("log_uop_buff_size", "log_inp_buff_size", "log_wgt_buff_size", "log_acc_buff_size"):
            if not 0 <= getattr(self, name) <= 30:
                raise ConfigError(f"{name.upper()}={getattr(self, name)} out of range, expected 0..30")
        for name, elem_bytes in (("uop", UOP_BITS // 8), ("inp", self.inp_elem_bytes),
                                 ("wgt", self.wgt_elem_bytes), ("acc", self.acc_elem_bytes)):
            size = 1 << getattr(self, f"log_{name}_buff_size")
            if size < elem_bytes:
                raise ConfigError(f"LOG_{name.upper()}_BUFF_SIZE={getattr(self, f'log_{name}_buff_size')} "
                                  f"gives {size} B, smaller than one {name} element ({elem_bytes} B)")
        if self.bus_width not in (32, 64, 128, 256, 512):
            raise ConfigError(f"BUS_WIDTH={self.bus_width} unsupported, expected one of 32, 64, 128, 256, 512")
        for name in ("dram_latency", "dram_outstanding", "token_queue_depth", "cmd_queue_depth"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.upper()}={getattr(self, name)} must be at least 1")
        if self.token_queue_depth > 255:
            raise ConfigError(f"TOKEN_QUEUE_DEPTH={self.token_queue_depth} must be at most 255")
        if not 0 < self.clock_mhz < math.inf:
            raise ConfigError(f"CLOCK_MHZ={self.clock_mhz} must be positive and finite")
        if self.acc_read_ports not in (1, 2):
            raise ConfigError(f"ACC_READ_PORTS={self.acc_read_ports} unsupported, expected 1 (one ACC copy; a tensor "
                              "ALU micro-op takes 2 cycles) or 2 (ACC stored twice; every micro-op takes 1 cycle)")
        if not 0 <= self.gemm_lut_lanes <= self.block_out:
            raise ConfigError(f"GEMM_LUT_LANES={self.gemm_lut_lanes} out of range, expected 0..BLOCK_OUT "
                              f"({self.block_out}): the output channels whose products are LUT multipliers")
        if self.gemm_out_requant and not self.alu_requant:
            raise ConfigError(f"GEMM_OUT_REQUANT={self.gemm_out_requant} needs ALU_REQUANT=True (ALU REQUANT sets the "
                              f"requant register its write-back reads), got ALU_REQUANT={self.alu_requant}")
        self._validate_encodable()

    def _validate_encodable(self) -> None:
        depths = self._log_depths()
        overflows = _encoding_overflows(depths)
        if overflows:
            needs = ", ".join(f"{what} needs {used} bits of {limit}" for what, used, limit in overflows)
            raise ConfigError(f"configuration {self.model} cannot be encoded: {needs} (depths uop={self.uop_depth} "
                              f"inp={self.inp_depth} wgt={self.wgt_depth} acc={self.acc_depth}); "
                              f"{self._shrink_advice(depths)}")

    def _log_depths(self) -> dict[str, int]:
        """log2 of each SRAM's depth, by buffer name (uop, inp, wgt, acc)."""
        return {"uop": self.log_uop_depth, "inp": self.log_inp_depth, "wgt": self.log_wgt_depth,
                "acc": self.log_acc_depth}

    def _shrink_advice(self, depths: dict[str, int]) -> str:
        """Which LOG_*_BUFF_SIZE keys to shrink, and to what, so the instructions fit: each key that
        alone suffices, else all of them together (the deepest buffer first)."""
        def excess(changed: dict[str, int]) -> int:
            return sum(used - limit for _, used, limit in _encoding_overflows({**depths, **changed}))

        def key(name: str, log_depth: int) -> str:
            return f"LOG_{name.upper()}_BUFF_SIZE to {getattr(self, f'log_{name}_buff_size') - depths[name] + log_depth}"

        single = []
        for name, log_depth in depths.items():
            fit = next((d for d in range(log_depth - 1, -1, -1) if not excess({name: d})), None)
            if fit is not None:
                single.append(key(name, fit))
        if single:
            return "shrink " + (single[0] if len(single) == 1 else f"one of {', '.join(single[:-1])} or {single[-1]}")
        # Greedily halve the buffer that removes the most excess bits (the deeper one on a tie); depth 1
        # everywhere always fits, so this ends.
        shrunk = dict(depths)
        while excess(shrunk):
            name = min((n for n in shrunk if shrunk[n] > 0),
                       key=lambda n: (excess({**shrunk, n: shrunk[n] - 1}), -shrunk[n]))
            shrunk[name] -= 1
        return "shrink " + ", ".join(key(name, shrunk[name]) for name in depths if shrunk[name] != depths[name])

    # ------------------------------------------------------------------ derived quantities
    @property
    def batch(self) -> int:
        return 1 << self.log_batch

    @property
    def block_in(self) -> int:
        return 1 << self.log_block_in

    @property
    def block_out(self) -> int:
        return 1 << self.log_block_out

    @property
    def inp_width(self) -> int:
        return 1 << self.log_inp_width

    @property
    def wgt_width(self) -> int:
        return 1 << self.log_wgt_width

    @property
    def acc_width(self) -> int:
        return 1 << self.log_acc_width

    @property
    def out_width(self) -> int:
        return self.inp_width

    @property
    def inp_elem_bits(self) -> int:
        return self.inp_width * self.batch * self.block_in

    @property
    def wgt_elem_bits(self) -> int:
        return self.wgt_width * self.block_out * self.block_in

    @property
    def acc_elem_bits(self) -> int:
        return self.acc_width * self.batch * self.block_out

    @property
    def out_elem_bits(self) -> int:
        return self.out_width * self.batch * self.block_out

    @property
    def uop_elem_bits(self) -> int:
        return UOP_BITS

    @property
    def inp_elem_bytes(self) -> int:
        return self.inp_elem_bits // 8

    @property
    def wgt_elem_bytes(self) -> int:
        return self.wgt_elem_bits // 8

    @property
    def acc_elem_bytes(self) -> int:
        return self.acc_elem_bits // 8

    @property
    def out_elem_bytes(self) -> int:
        return self.out_elem_bits // 8

    @property
    def uop_elem_bytes(self) -> int:
        return UOP_BITS // 8

    @property
    def acc8_elem_bytes(self) -> int:
        """DRAM bytes of one ACC_8BIT element: BATCH*BLOCK_OUT int8 values."""
        return self.batch * self.block_out

    @property
    def uop_buff_size(self) -> int:
        return 1 << self.log_uop_buff_size

    @property
    def inp_buff_size(self) -> int:
        return 1 << self.log_inp_buff_size

    @property
    def wgt_buff_size(self) -> int:
        return 1 << self.log_wgt_buff_size

    @property
    def acc_buff_size(self) -> int:
        return 1 << self.log_acc_buff_size

    @property
    def out_buff_size(self) -> int:
        return self.acc_buff_size * self.out_width // self.acc_width

    @property
    def uop_depth(self) -> int:
        return self.uop_buff_size // self.uop_elem_bytes

    @property
    def inp_depth(self) -> int:
        return self.inp_buff_size // self.inp_elem_bytes

    @property
    def wgt_depth(self) -> int:
        return self.wgt_buff_size // self.wgt_elem_bytes

    @property
    def acc_depth(self) -> int:
        return self.acc_buff_size // self.acc_elem_bytes

    @property
    def out_depth(self) -> int:
        return self.acc_depth

    @property
    def log_uop_depth(self) -> int:
        return self.uop_depth.bit_length() - 1

    @property
    def log_inp_depth(self) -> int:
        return self.inp_depth.bit_length() - 1

    @property
    def log_wgt_depth(self) -> int:
        return self.wgt_depth.bit_length() - 1

    @property
    def log_acc_depth(self) -> int:
        return self.acc_depth.bit_length() - 1

    @property
    def uop_src_bits(self) -> int:
        """Micro-op src_idx width: it indexes INP (GEMM) or ACC (ALU)."""
        return max(self.log_acc_depth, self.log_inp_depth)

    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @property
    def bus_bytes(self) -> int:
        return self.bus_width // 8

    @cached_property
    def model(self) -> str:
        """VTA's configuration string, e.g. ``1x16_i8w8a32_15_15_18_17``."""
        block = (f"{self.block_in}" if self.block_in == self.block_out
                 else f"{self.block_in}x{self.block_out}")
        return (f"{self.batch}x{block}_i{self.inp_width}w{self.wgt_width}a{self.acc_width}_"
                f"{self.log_uop_buff_size}_{self.log_inp_buff_size}_"
                f"{self.log_wgt_buff_size}_{self.log_acc_buff_size}")

    def summary(self) -> dict[str, Any]:
        """For ``vtakit info``: the model string, the keys (``config``: what :meth:`from_dict` takes
        back) and, apart, the quantities derived from them."""
        derived = ("batch", "block_in", "block_out", "inp_elem_bytes", "wgt_elem_bytes", "acc_elem_bytes",
                   "out_elem_bytes", "uop_depth", "inp_depth", "wgt_depth", "acc_depth", "out_depth",
                   "macs_per_cycle")
        values = {name: getattr(self, name) for name in derived}
        values["peak_gops"] = 2 * self.macs_per_cycle * self.clock_mhz / 1000
        return {"model": self.model, "config": self.to_dict(), "derived": values}


def _encoding_overflows(log_depths: dict[str, int]) -> list[tuple[str, int, int]]:
    """The instruction words and micro-op fields that SRAMs of these depths (log2, by buffer name)
    overflow: (what, bits needed, bits available)."""
    uop, inp, wgt, acc = (log_depths[name] for name in ("uop", "inp", "wgt", "acc"))
    needs = (("GEMM/ALU word 0", 7 + 1 + uop + (uop + 1) + 2 * ITER_BITS, _WORD_BITS),
             ("GEMM word 1", 2 * (acc + inp + wgt), _WORD_BITS),
             ("ALU word 1", 4 * acc + 3 + 1 + 16, _WORD_BITS),
             ("micro-op", acc + max(acc, inp) + wgt, UOP_BITS))
    return [(what, used, limit) for what, used, limit in needs if used > limit]


def _check_field_names(names: Any) -> None:
    unknown = sorted(set(names) - {f.name for f in fields(VTAConfig)})
    if unknown:
        raise ConfigError(f"unknown configuration field(s) {unknown}; expected some of "
                          f"{[f.name for f in fields(VTAConfig)]}")


def _json_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """VTA's JSON keys (upper case; LOG_BLOCK sets both block sizes) renamed to the dataclass fields."""
    known = {f.name.upper(): f for f in fields(VTAConfig)}
    unknown = sorted(k for k in raw if k not in known and k != _LOG_BLOCK)
    if unknown:
        raise ConfigError(f"unknown configuration key(s) {unknown}; expected some of "
                          f"{sorted([*known, _LOG_BLOCK])}")
    params: dict[str, Any] = {}
    if _LOG_BLOCK in raw:
        block = raw[_LOG_BLOCK]
        if not isinstance(block, int) or isinstance(block, bool):
            raise ConfigError(f"{_LOG_BLOCK}={block!r} must be of type int")
        for key in ("LOG_BLOCK_IN", "LOG_BLOCK_OUT"):
            if key in raw and raw[key] != raw[_LOG_BLOCK]:
                raise ConfigError(f"{key}={raw[key]!r} disagrees with LOG_BLOCK={raw[_LOG_BLOCK]!r}")
        params["log_block_in"] = params["log_block_out"] = raw[_LOG_BLOCK]
    for key, value in raw.items():
        if key != _LOG_BLOCK:
            params[known[key].name] = value
    return params


def _keyword_fields(keys: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments that may mix field names and VTA's JSON keys (``VTAConfig(LOG_BLOCK=3)``),
    as field names; a field given under both spellings is an error."""
    upper = {k: v for k, v in keys.items() if k.isupper()}
    params = {k: v for k, v in keys.items() if not k.isupper()}
    _check_field_names(params)
    for name, value in _json_fields(upper).items():
        if name in params:
            raise ConfigError(f"{name.upper()} is given twice, as {name}={params[name]!r} and as a JSON key "
                              f"({value!r}); give it once")
        params[name] = value
    return params


_dataclass_init = VTAConfig.__init__


@functools.wraps(_dataclass_init)
def _init(self: VTAConfig, *args: Any, **keys: Any) -> None:
    _dataclass_init(self, *args, **_keyword_fields(keys))


# VTAConfig(LOG_BLOCK=3, BUS_WIDTH=128) as well as VTAConfig(log_block_in=3, ...): the JSON keys
# VTA users know work as keywords; the generated __init__ does the rest.
VTAConfig.__init__ = _init  # type: ignore[method-assign]
