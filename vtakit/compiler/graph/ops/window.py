"""Sliding-window geometry of Conv, ConvTranspose and the pools, resolved from ONNX attributes.

ONNX spreads one window over several attributes (``kernel_shape``, ``strides``, ``dilations``,
``pads``, ``auto_pad``, ``ceil_mode``; ``output_padding`` and ``output_shape`` for ConvTranspose)
whose defaults depend on the number of spatial axes. The numpy references, the TE computes and
the graph passes that rewrite convolutions (layout, BatchNormalization folding) all need the same
explicit numbers, so they are worked out here, once, into a :class:`Window`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from vtakit.errors import GraphError

__all__ = ["Window", "sliding_window", "transposed_window", "spatial_attr"]

AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


@dataclass(frozen=True)
class Window:
    """A window sliding over the spatial axes: per axis its kernel extent, stride, dilation, the padding
    before and after (``pads_end`` covers every window, ceil_mode included), the output extent and, for
    average pooling, the padding that counts as input (``count_end``: the declared padding only)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    output: tuple[int, ...]
    count_end: tuple[int, ...]

    @property
    def extent(self) -> tuple[int, ...]:
        """The span of each dilated kernel axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))

    @property
    def pads(self) -> tuple[int, ...]:
        """ONNX order: every axis' begin, then every axis' end."""
        return self.pads_begin + self.pads_end


def spatial_attr(attrs: Mapping[str, Any], key: str, n: int, default: int) -> tuple[int, ...]:
    """Attribute ``key`` as ``n`` ints (``default`` each when absent or empty)."""
    value = attrs.get(key)
    if value is None or len(value) == 0:
        return (default,) * n
    if len(value) != n:
        raise GraphError(f"{key}={list(value)} must have {n} entries, one per spatial axis")
    return tuple(int(v) for v in value)


def _auto_pad(attrs: Mapping[str, Any]) -> str:
    mode = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if mode not in AUTO_PADS:
        raise GraphError(f"auto_pad={mode!r} is not one of {list(AUTO_PADS)}")
    return mode


def sliding_window(in_spatial: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any],
                   ceil_mode: bool = False) -> Window:
    """The window of a convolution or pooling over ``in_spatial`` (ONNX's output-size rules, including
    ceil_mode's rule that a window may not start in the end padding)."""
    n = len(in_spatial)
    kernel = tuple(int(k) for k in kernel)
    if len(kernel) != n:
        raise GraphError(f"kernel_shape={list(kernel)} must have {n} entries, one per spatial axis")
    strides = spatial_attr(attrs, "strides", n, 1)
    dilations = spatial_attr(attrs, "dilations", n, 1)
    if min(strides + dilations + kernel, default=1) < 1:
        raise GraphError(f"strides {list(strides)}, dilations {list(dilations)} and kernel_shape {list(kernel)} "
                         "must be positive")
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    mode = _auto_pad(attrs)
    if mode == "NOTSET":
        pads = spatial_attr(attrs, "pads", 2 * n, 0)
        begin, end = pads[:n], pads[n:]
        if min(pads, default=0) < 0:
            raise GraphError(f"pads={list(pads)} must be non-negative")
    elif mode == "VALID":
        begin = end = (0,) * n
    else:
        total = [max(0, (-(-i // s) - 1) * s + e - i) for i, s, e in zip(in_spatial, strides, extent)]
        small = [t // 2 for t in total]
        begin = tuple(small) if mode == "SAME_UPPER" else tuple(t - h for t, h in zip(total, small))
        end = tuple(t - b for t, b in zip(total, begin))
    output = []
    for i, s, e, b, a in zip(in_spatial, strides, extent, begin, end):
        span = i + b + a - e
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= i + b:
            out -= 1
        if span < 0 or out < 1:
            raise GraphError(f"a window of extent {extent} (kernel {list(kernel)}, dilations {list(dilations)}) "
                             f"does not fit the input {list(in_spatial)} padded by {list(begin + end)}")
        output.append(out)
    covered = tuple(max(a, (o - 1) * s + e - i - b) for i, s, e, b, a, o in
                    zip(in_spatial, strides, extent, begin, end, output))
    return Window(kernel, strides, dilations, tuple(begin), covered, tuple(output), tuple(end))


def transposed_window(in_spatial: Sequence[int], kernel: Sequence[int], attrs: Mapping[str, Any]) -> Window:
    """The window of a ConvTranspose: ``output`` is its output extent and the pads are those removed from
    the full transposed result ``stride * (in - 1) + output_padding + extent`` (ONNX's rules for
    ``output_shape`` and ``auto_pad``; a pad is negative where ``output_shape`` asks for more)."""
    n = len(in_spatial)
    kernel = tuple(int(k) for k in kernel)
    strides = spatial_attr(attrs, "strides", n, 1)
    dilations = spatial_attr(attrs, "dilations", n, 1)
    out_pad = spatial_attr(attrs, "output_padding", n, 0)
    if any(p >= max(s, d) for p, s, d in zip(out_pad, strides, dilations)):
        raise GraphError(f"output_padding={list(out_pad)} must be smaller than the strides {list(strides)} or "
                         f"dilations {list(dilations)}")
    full = [s * (i - 1) + p + (k - 1) * d + 1 for i, s, p, k, d in zip(in_spatial, strides, out_pad, kernel, dilations)]
    mode = _auto_pad(attrs)
    wanted = attrs.get("output_shape")
    if wanted is not None and len(wanted):
        wanted = tuple(int(v) for v in wanted)[-n:]
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        # in * stride, but never beyond the full result (a kernel smaller than the stride): onnxruntime's rule
        wanted = tuple(min(i * s, f) for i, s, f in zip(in_spatial, strides, full))
    if wanted is not None and len(wanted):
        # a negative total (output_shape beyond the full result) adds zeros at the end, as onnxruntime does
        total = [f - w for f, w in zip(full, wanted)]
        small = [max(0, t // 2) for t in total]
        if mode == "SAME_UPPER":
            begin = tuple(small)
        else:
            begin = tuple(max(0, t - h) for t, h in zip(total, small))
        end = tuple(t - b for t, b in zip(total, begin))
    elif mode == "VALID":
        begin = end = (0,) * n
    else:
        pads = spatial_attr(attrs, "pads", 2 * n, 0)
        begin, end = pads[:n], pads[n:]
    output = tuple(f - b - a for f, b, a in zip(full, begin, end))
    if min(output) < 1:
        raise GraphError(f"ConvTranspose output {list(output)} is empty (pads {list(begin + end)})")
    return Window(kernel, strides, dilations, tuple(begin), tuple(end), output, tuple(end))
