"""The quantiser's options: names, defaults, and their validation (a :class:`GraphError` naming the bad
value and the choices)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

from vtakit.errors import GraphError
from vtakit.runtime.packing import SHIFT_ADD_TERMS

#: a fixed-point multiplier has at most this many significant bits (15: the ALU's 16-bit signed MUL operand)
MULTIPLIER_BITS = 15

__all__ = ["QuantizeOptions", "parse_options", "METHODS", "GRANULARITIES", "SCALE_KINDS"]

#: calibration methods: the threshold of a tensor's range is its max |x|, a percentile of |x|, or the
#: TensorRT entropy (KL-divergence) threshold
METHODS = ("max", "percentile", "kl")
#: weight scales: one per tensor, or one per output channel
GRANULARITIES = ("tensor", "channel")
#: scales are powers of two (shift-only requantisation) or any float (fixed-point multiplier)
SCALE_KINDS = ("power2", "float")


@dataclass(frozen=True)
class QuantizeOptions:
    """The options of :func:`vtakit.graph.quantize` (see docs/quantization.md)."""

    method: str = "max"
    percentile: float = 99.99
    weight_granularity: str = "tensor"
    scales: str = "power2"
    skip_first_conv: bool = True
    multiplier_bits: int | None = None    # round multipliers to this many set bits: fewer shift-and-add terms
    fuse_residual: bool = True     # Conv -> Add [-> Relu] as one qnn.conv2d with a residual input (realize.py)

    @property
    def multiplier_form(self) -> bool:
        """Whether conv2d/dense requantise with a per-channel fixed-point multiplier."""
        return self.scales == "float" or self.weight_granularity == "channel"


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise GraphError(f"quantize: {name}={value!r} is not supported; choose one of {', '.join(map(repr, choices))}")
    return value


def parse_options(options: Mapping[str, Any]) -> QuantizeOptions:
    """``options`` (keyword arguments of ``quantize``) checked and completed with the defaults."""
    known = [f.name for f in fields(QuantizeOptions)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise GraphError(f"quantize: unknown option(s) {unknown}; the options are {', '.join(known)}")
    opts = {**{f.name: f.default for f in fields(QuantizeOptions)}, **options}
    _choice("method", opts["method"], METHODS)
    _choice("weight_granularity", opts["weight_granularity"], GRANULARITIES)
    _choice("scales", opts["scales"], SCALE_KINDS)
    p = opts["percentile"]
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0 < p <= 100:
        raise GraphError(f"quantize: percentile={p!r} must be a number in (0, 100], e.g. 99.99")
    if not isinstance(opts["skip_first_conv"], bool):
        raise GraphError(f"quantize: skip_first_conv={opts['skip_first_conv']!r} must be True or False")
    bits = opts["multiplier_bits"]
    if bits is not None and (isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MULTIPLIER_BITS):
        raise GraphError(f"quantize: multiplier_bits={bits!r} must be None or an int in [1, {MULTIPLIER_BITS}] (the "
                         f"set bits of each fixed-point multiplier, a speed option: without ALU_MUL each set bit "
                         f"is one shift-and-add term, e.g. {SHIFT_ADD_TERMS}; any multiplier runs either way)")
    if not isinstance(opts["fuse_residual"], bool):
        raise GraphError(f"quantize: fuse_residual={opts['fuse_residual']!r} must be True or False")
    return QuantizeOptions(opts["method"], float(p), opts["weight_granularity"], opts["scales"],
                           opts["skip_first_conv"], bits, opts["fuse_residual"])
