"""Shape-manipulating, indexing and constant-producing graph operators (the injective family).

Inputs that fix a shape (``Reshape``'s target, ``Slice``'s starts and ends, ...) are compile-time
constants in vtakit's static-shaped graphs: they are listed in ``const_inputs`` and reach the
compute as numpy arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vtakit.compiler import ir, te
from vtakit.compiler.graph.ir import TensorType
from vtakit.compiler.graph.op import REQUIRED, Pattern, register_op
from vtakit.compiler.ops import math as tmath
from vtakit.compiler.ops import transform
from vtakit.compiler.ops.common import static_shape
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["reshape_target", "split_sizes", "slices", "pad_widths", "PAD_MODES", "DEPTH_TO_SPACE_MODES"]


def _shape_fold(types: list[TensorType], attrs: dict) -> tuple[np.ndarray, ...]:
    shape = types[0].shape
    rank = len(shape)
    start = attrs["start"] + rank if attrs["start"] < 0 else attrs["start"]
    end = rank if attrs["end"] is None else attrs["end"] + rank if attrs["end"] < 0 else attrs["end"]
    return (np.array(shape[max(0, min(start, rank)):max(0, min(end, rank))], dtype=np.int64),)


@register_op("Shape", pattern=Pattern.OPAQUE, attrs={"start": 0, "end": None}, fold_types=_shape_fold)
def _shape(ins, attrs):
    """The input's shape as an int64 vector (dims ``start:end``, opset 15)."""
    return _shape_fold([TensorType(ins[0].shape, ins[0].dtype.name)], attrs)


@register_op("Constant", pattern=Pattern.OPAQUE, attrs={"value": None})
def _constant(ins, attrs):
    """The constant ``value``."""
    return (np.asarray(attrs["value"]),)


@register_op("Size", pattern=Pattern.OPAQUE, fold_types=lambda types, attrs: (np.array(types[0].size, np.int64),))
def _size(ins, attrs):
    """The number of elements of the input, as an int64 scalar."""
    return (np.array(ins[0].size, np.int64),)


@register_op("ConstantOfShape", pattern=Pattern.OPAQUE, attrs={"value": None}, const_inputs=(0,))
def _constant_of_shape(ins, attrs):
    """A tensor of the shape given by input 0, filled with the one-element ``value`` (default float32 0)."""
    value = np.zeros(1, np.float32) if attrs["value"] is None else np.asarray(attrs["value"])
    if value.size != 1:
        raise GraphError(f"ConstantOfShape: value must hold one element, got shape {list(value.shape)}")
    shape = [int(d) for d in np.asarray(ins[0]).reshape(-1)]
    if min(shape, default=0) < 0:
        raise GraphError(f"ConstantOfShape: the shape {shape} has a negative dim")
    return (np.full(shape, value.reshape(()), dtype=value.dtype),)


@register_op("Range", pattern=Pattern.OPAQUE, const_inputs=(0, 1, 2))
def _range(ins, attrs):
    """``start + i * delta`` for i below ``max(ceil((limit - start) / delta), 0)``, in the inputs' dtype."""
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins)
    if delta == 0:
        raise GraphError("Range: delta is 0")
    count = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    return (np.asarray(start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype),)


# -- casts and copies ----------------------------------------------------------------------------------
def _dtype_name(dtype: str) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise GraphError(f"Cast: {dtype!r} is not a numpy dtype name") from None


@register_op("Cast", pattern=Pattern.ELEMWISE, attrs={"to": REQUIRED},
             compute=lambda ins, attrs: [tmath.convert(ins[0], _dtype_name(attrs["to"]))])
def _cast(ins, attrs):
    """The input converted to the dtype named ``to`` (floats to integers truncate towards zero)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (ins[0].astype(_dtype_name(attrs["to"])),)


@register_op("Identity", pattern=Pattern.INJECTIVE, compute=lambda ins, attrs: [ins[0]])
def _identity(ins, attrs):
    """The input, unchanged."""
    return (np.array(ins[0], copy=True),)


# -- shapes: flatten, reshape, squeeze, unsqueeze, expand -----------------------------------------------
def _axis(axis: int, rank: int, what: str, inclusive: bool = False) -> int:
    """``axis`` made non-negative, checked against ``rank`` (``inclusive``: ``rank`` itself is allowed)."""
    top = rank + 1 if inclusive else rank
    if not -rank <= axis < top:
        raise GraphError(f"{what}: axis {axis} is out of range for rank {rank} (expected {-rank}..{top - 1})")
    return axis + rank if axis < 0 else axis


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _flatten_shape(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    a = _axis(axis, len(shape), "Flatten", inclusive=True)
    return int(np.prod(shape[:a], dtype=np.int64)), int(np.prod(shape[a:], dtype=np.int64))


@register_op("Flatten", pattern=Pattern.INJECTIVE, attrs={"axis": 1},
             compute=lambda ins, attrs: [transform.reshape(ins[0], _flatten_shape(static_shape(ins[0]),
                                                                                  attrs["axis"]))])
def _flatten(ins, attrs):
    """The input as a matrix: dims before ``axis`` make the rows, the rest the columns."""
    return (ins[0].reshape(_flatten_shape(ins[0].shape, attrs["axis"])),)


def reshape_target(shape: tuple[int, ...], target: Any, allowzero: int = 0) -> tuple[int, ...]:
    """ONNX ``Reshape``'s output shape: 0 copies the input dim (unless ``allowzero``), -1 is inferred."""
    dims = _ints(target)
    size = int(np.prod(shape, dtype=np.int64))
    out = []
    for k, d in enumerate(dims):
        if d == 0 and not allowzero:
            if k >= len(shape):
                raise GraphError(f"Reshape: target {dims} copies dim {k} (0), but the input {shape} has rank {len(shape)}")
            d = shape[k]
        out.append(d)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise GraphError(f"Reshape: target {dims} may hold at most one -1 and no other negative dim")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise GraphError(f"Reshape: cannot infer the -1 in {dims} for an input of shape {shape}")
        out[out.index(-1)] = size // known
    if int(np.prod(out, dtype=np.int64)) != size:
        raise GraphError(f"Reshape: target {dims} ({tuple(out)}) does not hold the {size} elements of {shape}")
    return tuple(out)


def _reshape_compute(ins: list, attrs: dict) -> list:
    shape = static_shape(ins[0])
    return [transform.reshape(ins[0], reshape_target(shape, ins[1], attrs["allowzero"]))]


@register_op("Reshape", pattern=Pattern.INJECTIVE, attrs={"allowzero": 0}, const_inputs=(1,),
             compute=_reshape_compute)
def _reshape(ins, attrs):
    """The input with the shape of input 1 (0 copies a dim unless ``allowzero``; one -1 is inferred)."""
    return (ins[0].reshape(reshape_target(ins[0].shape, ins[1], attrs["allowzero"])),)


def _squeeze_shape(shape: tuple[int, ...], axes: Any) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    drop = {_axis(a, len(shape), "Squeeze") for a in _ints(axes)}
    bad = [a for a in sorted(drop) if shape[a] != 1]
    if bad:
        raise GraphError(f"Squeeze: axes {bad} of shape {shape} are not 1")
    return tuple(d for k, d in enumerate(shape) if k not in drop)


@register_op("Squeeze", pattern=Pattern.INJECTIVE, const_inputs=(1,),
             compute=lambda ins, attrs: [transform.reshape(ins[0], _squeeze_shape(static_shape(ins[0]),
                                                                                  _opt(ins, 1)))])
def _squeeze(ins, attrs):
    """The input without the size-1 dims listed in input 1 (all of them when it is omitted)."""
    return (ins[0].reshape(_squeeze_shape(ins[0].shape, _opt(ins, 1))),)


def _unsqueeze_shape(shape: tuple[int, ...], axes: Any) -> tuple[int, ...]:
    rank = len(shape) + len(_ints(axes))
    new = sorted(_axis(a, rank, "Unsqueeze") for a in _ints(axes))
    if len(set(new)) != len(new):
        raise GraphError(f"Unsqueeze: axes {_ints(axes)} repeat an axis")
    dims = iter(shape)
    return tuple(1 if k in new else next(dims) for k in range(rank))


@register_op("Unsqueeze", pattern=Pattern.INJECTIVE, const_inputs=(1,),
             compute=lambda ins, attrs: [transform.reshape(ins[0], _unsqueeze_shape(static_shape(ins[0]),
                                                                                    ins[1]))])
def _unsqueeze(ins, attrs):
    """The input with size-1 dims inserted at the output axes listed in input 1."""
    return (ins[0].reshape(_unsqueeze_shape(ins[0].shape, ins[1])),)


def _expand_shape(shape: tuple[int, ...], target: Any) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(shape, tuple(_ints(target))))
    except ValueError:
        raise GraphError(f"Expand: the input {shape} does not broadcast with {_ints(target)}") from None


@register_op("Expand", pattern=Pattern.BROADCAST, const_inputs=(1,),
             compute=lambda ins, attrs: [transform.broadcast_to(ins[0], _expand_shape(static_shape(ins[0]),
                                                                                      ins[1]))])
def _expand(ins, attrs):
    """The input broadcast with the shape in input 1 (numpy rules, either side may be 1)."""
    return (np.broadcast_to(ins[0], _expand_shape(ins[0].shape, ins[1])).copy(),)


def _opt(ins: list, i: int) -> Any:
    return ins[i] if i < len(ins) else None


# -- joining and splitting ---------------------------------------------------------------------------
@register_op("Concat", pattern=Pattern.INJECTIVE, attrs={"axis": REQUIRED},
             compute=lambda ins, attrs: [transform.concatenate(
                 ins, _axis(attrs["axis"], len(ins[0].shape), "Concat"))])
def _concat(ins, attrs):
    """The inputs joined along ``axis``."""
    return (np.concatenate(ins, axis=_axis(attrs["axis"], ins[0].ndim, "Concat")),)


def split_sizes(dim: int, split: Any, num_outputs: int | None) -> list[int]:
    """The part sizes of a ``Split`` of ``dim`` elements: ``split`` when given, else ``num_outputs`` parts of
    ``ceil(dim / num_outputs)`` (the last one smaller when it does not divide)."""
    if split is not None:
        sizes = _ints(split)
        if sum(sizes) != dim or min(sizes, default=0) < 0:
            raise GraphError(f"Split: sizes {sizes} do not add up to the axis' {dim} elements")
        return sizes
    if not num_outputs or num_outputs < 1:
        raise GraphError(f"Split: needs split sizes or num_outputs >= 1, got {num_outputs!r}")
    chunk = -(-dim // num_outputs)
    return [max(0, min(chunk, dim - k * chunk)) for k in range(num_outputs)]


def _split_parts(shape: tuple[int, ...], split: Any, attrs: dict) -> tuple[int, list[tuple[int, int]]]:
    axis = _axis(attrs["axis"], len(shape), "Split")
    sizes = split_sizes(shape[axis], split, attrs["num_outputs"])
    starts = np.cumsum([0] + sizes)[:-1]
    return axis, [(int(s), n) for s, n in zip(starts, sizes)]


def _split_compute(ins: list, attrs: dict) -> list:
    shape = static_shape(ins[0])
    axis, parts = _split_parts(shape, _opt(ins, 1), attrs)
    outs = []
    for start, n in parts:
        begin = [start if k == axis else 0 for k in range(len(shape))]
        out_shape = [n if k == axis else d for k, d in enumerate(shape)]
        outs.append(transform.strided_slice(ins[0], begin, [1] * len(shape), out_shape))
    return outs


@register_op("Split", pattern=Pattern.INJECTIVE, attrs={"axis": 0, "num_outputs": None}, const_inputs=(1,),
             compute=_split_compute)
def _split(ins, attrs):
    """The input cut along ``axis`` into parts of the sizes in input 1, or into ``num_outputs`` parts."""
    axis, parts = _split_parts(ins[0].shape, _opt(ins, 1), attrs)
    return tuple(np.take(ins[0], np.arange(s, s + n), axis=axis) for s, n in parts)


@register_op("Transpose", pattern=Pattern.INJECTIVE, attrs={"perm": None},
             compute=lambda ins, attrs: [transform.transpose(ins[0], _perm(len(ins[0].shape), attrs["perm"]))])
def _transpose(ins, attrs):
    """The input with its axes permuted by ``perm`` (default: reversed)."""
    return (np.ascontiguousarray(np.transpose(ins[0], _perm(ins[0].ndim, attrs["perm"]))),)


def _perm(rank: int, perm: Any) -> list[int]:
    out = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(out) != list(range(rank)):
        raise GraphError(f"Transpose: perm {out} is not a permutation of {rank} axes")
    return out


# -- slicing, padding, gathering, tiling --------------------------------------------------------------
def slices(shape: tuple[int, ...], starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> tuple[slice, ...]:
    """ONNX ``Slice``'s parameters as one Python slice per axis (Python's clamping is ONNX's)."""
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise GraphError(f"Slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    out = [slice(None)] * len(shape)
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, len(shape), "Slice")
        if a in seen or st == 0:
            raise GraphError(f"Slice: axis {a} repeats, or its step is 0 (axes {axes}, steps {steps})")
        seen.add(a)
        out[a] = slice(s, e, st)
    return tuple(out)


def _slice_compute(ins: list, attrs: dict) -> list:
    shape = static_shape(ins[0])
    begin, step, count = [], [], []
    for sl, d in zip(slices(shape, *ins[1:3], _opt(ins, 3), _opt(ins, 4)), shape):
        start, _, st = sl.indices(d)
        begin.append(start if len(range(*sl.indices(d))) else 0)
        step.append(st)
        count.append(len(range(*sl.indices(d))))
    return [transform.strided_slice(ins[0], begin, step, count)]


@register_op("Slice", pattern=Pattern.INJECTIVE, const_inputs=(1, 2, 3, 4), compute=_slice_compute)
def _slice(ins, attrs):
    """``data[starts:ends:steps]`` on the listed axes (inputs 1 to 4; ends clamp, negative steps walk back)."""
    return (np.ascontiguousarray(ins[0][slices(ins[0].shape, *ins[1:3], _opt(ins, 3), _opt(ins, 4))]),)


PAD_MODES = ("constant", "reflect", "edge")


def pad_widths(rank: int, pads: Any, axes: Any = None) -> list[tuple[int, int]]:
    """ONNX ``pads`` (all begins, then all ends, for ``axes`` or every axis) as (before, after) per axis."""
    pads = _ints(pads)
    axes = list(range(rank)) if axes is None else [_axis(a, rank, "Pad") for a in _ints(axes)]
    if len(pads) != 2 * len(axes):
        raise GraphError(f"Pad: {len(pads)} pads {pads} for {len(axes)} axes; expected {2 * len(axes)}")
    widths = [(0, 0)] * rank
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[k + len(axes)])
    return widths


def _pad_args(ins: list, attrs: dict) -> tuple[list[tuple[int, int]], str, Any]:
    mode = attrs["mode"]
    if mode not in PAD_MODES:
        raise UnsupportedOperatorError(f"Pad mode {mode!r} is not supported; supported modes: {list(PAD_MODES)}")
    value = _opt(ins, 2)
    value = 0 if value is None or np.asarray(value).size == 0 else np.asarray(value).reshape(-1)[0].item()
    return pad_widths(len(ins[0].shape), ins[1], _opt(ins, 3)), mode, value


def _pad_compute(ins: list, attrs: dict) -> list:
    widths, mode, value = _pad_args(ins, attrs)
    x = ins[0]
    if any(b < 0 or a < 0 for b, a in widths):   # negative pads crop
        shape = static_shape(x)
        begin = [max(0, -b) for b, _ in widths]
        count = [d + min(0, b) + min(0, a) for d, (b, a) in zip(shape, widths)]
        x = transform.strided_slice(x, begin, [1] * len(shape), count)
    return [transform.pad(x, [max(0, b) for b, _ in widths], [max(0, a) for _, a in widths], mode, value)]


@register_op("Pad", pattern=Pattern.INJECTIVE, attrs={"mode": "constant"}, const_inputs=(1, 2, 3),
             compute=_pad_compute)
def _pad(ins, attrs):
    """The input padded by input 1's counts (negative ones crop) with input 2's value, or by edge or reflection."""
    widths, mode, value = _pad_args(ins, attrs)
    x = ins[0][tuple(slice(max(0, -b), d - max(0, -a)) for d, (b, a) in zip(ins[0].shape, widths))]
    pads = [(max(0, b), max(0, a)) for b, a in widths]
    if mode == "constant":
        return (np.pad(x, pads, mode="constant", constant_values=np.asarray(value, x.dtype)),)
    return (np.pad(x, pads, mode=mode),)


@register_op("Gather", pattern=Pattern.INJECTIVE, attrs={"axis": 0},
             compute=lambda ins, attrs: [transform.take(ins[0], ins[1], _axis(attrs["axis"], len(ins[0].shape),
                                                                              "Gather"))])
def _gather(ins, attrs):
    """Input 0 indexed along ``axis`` by the integers of input 1 (negative ones count from the end)."""
    axis = _axis(attrs["axis"], ins[0].ndim, "Gather")
    n = ins[0].shape[axis]
    idx = np.asarray(ins[1]).astype(np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise GraphError(f"Gather: indices {idx.min()}..{idx.max()} are out of range for an axis of {n}")
    return (np.asarray(np.take(ins[0], idx, axis=axis)),)


@register_op("Tile", pattern=Pattern.INJECTIVE, const_inputs=(1,),
             compute=lambda ins, attrs: [transform.tile(ins[0], _ints(ins[1]))])
def _tile(ins, attrs):
    """The input repeated ``repeats[k]`` times along each axis k."""
    reps = _ints(ins[1])
    if len(reps) != ins[0].ndim:
        raise GraphError(f"Tile: {len(reps)} repeats {reps} for an input of rank {ins[0].ndim}")
    return (np.tile(ins[0], reps),)


# -- GatherElements, Trilu, DepthToSpace / SpaceToDepth ---------------------------------------------------
def _gather_elements_compute(ins: list, attrs: dict) -> list:
    data, indices = ins
    shape, ishape = static_shape(data), static_shape(indices)
    axis = _axis(attrs["axis"], len(shape), "GatherElements")
    if len(ishape) != len(shape):
        raise GraphError(f"GatherElements: indices of rank {len(ishape)} for data of rank {len(shape)}; expected "
                         "equal ranks")
    n = shape[axis]

    def read(*i):  # TVM's topi.gather: out[i] = data[i with i[axis] -> indices[i]]; negatives wrap, then clamped
        k = indices(*i).astype("int32")
        k = tmath.select(k < 0, k + n, k)
        k = te.max(te.min(k, n - 1), 0)
        return data(*i[:axis], k, *i[axis + 1:])
    return [te.compute(ishape, read, name="gather_elements", tag="injective")]


@register_op("GatherElements", pattern=Pattern.INJECTIVE, attrs={"axis": 0}, compute=_gather_elements_compute)
def _gather_elements(ins, attrs):
    """``out[i] = data[i with i[axis] replaced by indices[i]]`` (negative indices count from the end)."""
    data, idx = ins[0], np.asarray(ins[1]).astype(np.int64)
    axis = _axis(attrs["axis"], data.ndim, "GatherElements")
    n = data.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise GraphError(f"GatherElements: indices {idx.min()}..{idx.max()} are out of range for an axis of {n}")
    return (np.take_along_axis(data, np.where(idx < 0, idx + n, idx), axis=axis),)


def _trilu_k(ins: list) -> int:
    k = ins[1] if len(ins) > 1 and ins[1] is not None else np.zeros((), np.int64)
    values = np.asarray(k).reshape(-1)
    if values.size != 1:
        raise GraphError(f"Trilu: k must be a single integer, got {values.tolist()}")
    return int(values[0])


def _trilu_rank(rank: int) -> None:
    if rank < 2:
        raise GraphError(f"Trilu: input of rank {rank}; expected rank 2 or more")


def _trilu_compute(ins: list, attrs: dict) -> list:
    x = ins[0]
    shape = static_shape(x)
    _trilu_rank(len(shape))
    k, upper = _trilu_k(ins), bool(attrs["upper"])

    def read(*i):
        diff = i[-1] - i[-2]
        keep = diff >= k if upper else diff <= k
        return tmath.select(keep, x(*i), ir.const(0, x.dtype))
    return [te.compute(shape, read, name="trilu", tag="injective")]


@register_op("Trilu", pattern=Pattern.INJECTIVE, attrs={"upper": 1}, const_inputs=(1,), compute=_trilu_compute)
def _trilu(ins, attrs):
    """The upper (``upper``=1: j - i >= k) or lower (j - i <= k) triangle of the last two axes; the rest 0."""
    x = ins[0]
    _trilu_rank(x.ndim)
    k = _trilu_k(ins)
    return (np.triu(x, k) if attrs["upper"] else np.tril(x, k),)


# DepthToSpace modes: DCR (depth-column-row, the default) and CRD (column-row-depth)
DEPTH_TO_SPACE_MODES = ("DCR", "CRD")


def _block(op: str, shape: tuple[int, ...], b: int, to_space: bool) -> None:
    if len(shape) != 4:
        raise GraphError(f"{op}: input of shape {list(shape)}; expected rank 4 (N, C, H, W)")
    if b < 1:
        raise GraphError(f"{op}: blocksize {b}; expected a positive integer")
    if to_space and shape[1] % (b * b):
        raise GraphError(f"{op}: {shape[1]} channels are not a multiple of blocksize^2 = {b * b}")
    if not to_space and (shape[2] % b or shape[3] % b):
        raise GraphError(f"{op}: height {shape[2]} and width {shape[3]} must be multiples of blocksize {b}")


def _d2s_mode(mode: str) -> str:
    if mode not in DEPTH_TO_SPACE_MODES:
        raise GraphError(f"DepthToSpace: mode {mode!r}; expected one of {list(DEPTH_TO_SPACE_MODES)}")
    return mode


def _depth_to_space_compute(ins: list, attrs: dict) -> list:
    x = ins[0]
    shape = static_shape(x)
    b = attrs["blocksize"]
    _block("DepthToSpace", shape, b, True)
    mode = _d2s_mode(attrs["mode"])
    n, c, h, w = shape
    oc = c // (b * b)

    def read(i, ch, y, z):  # TVM's topi.nn.depth_to_space
        by, bx = y % b, z % b
        src = (by * b + bx) * oc + ch if mode == "DCR" else ch * b * b + by * b + bx
        return x(i, src, y // b, z // b)
    return [te.compute((n, oc, h * b, w * b), read, name="depth_to_space", tag="injective")]


@register_op("DepthToSpace", pattern=Pattern.INJECTIVE, attrs={"blocksize": REQUIRED, "mode": "DCR"},
             compute=_depth_to_space_compute)
def _depth_to_space(ins, attrs):
    """Channel blocks moved into blocksize x blocksize spatial blocks, in DCR or CRD order."""
    x, b = ins[0], attrs["blocksize"]
    _block("DepthToSpace", x.shape, b, True)
    n, c, h, w = x.shape
    if _d2s_mode(attrs["mode"]) == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return (np.ascontiguousarray(t.reshape(n, c // (b * b), h * b, w * b)),)


def _space_to_depth_compute(ins: list, attrs: dict) -> list:
    x = ins[0]
    shape = static_shape(x)
    b = attrs["blocksize"]
    _block("SpaceToDepth", shape, b, False)
    n, c, h, w = shape

    def read(i, ch, y, z):  # TVM's topi.nn.space_to_depth: channel (by * b + bx) * C + c
        block, src = ch // c, ch % c
        return x(i, src, y * b + block // b, z * b + block % b)
    return [te.compute((n, c * b * b, h // b, w // b), read, name="space_to_depth", tag="injective")]


@register_op("SpaceToDepth", pattern=Pattern.INJECTIVE, attrs={"blocksize": REQUIRED},
             compute=_space_to_depth_compute)
def _space_to_depth(ins, attrs):
    """blocksize x blocksize spatial blocks moved into channels (DepthToSpace's DCR order, inverted)."""
    x, b = ins[0], attrs["blocksize"]
    _block("SpaceToDepth", x.shape, b, False)
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return (np.ascontiguousarray(t.reshape(n, c * b * b, h // b, w // b)),)
