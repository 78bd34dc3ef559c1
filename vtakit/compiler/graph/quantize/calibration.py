"""Calibration: the forms calibration data may take, running the float graph on it, and the range
thresholds (``max``, ``percentile``, ``kl``) of the tensors the quantiser needs scales for.

Calibration data is one of

* a mapping ``{input name: array}`` or a ``.npz`` path (str or PathLike) keyed by input name;
* an iterable of such mappings, or of arrays (a one-input model);
* one array (a one-input model).

An array holds samples along its leading axis: with one more dimension than the input, sample ``i`` is
``array[i]``; with the input's rank and a batch-1 input, sample ``i`` is ``array[i:i+1]`` (a
(256, 1, 16, 16) array is 256 samples of a (1, 1, 16, 16) input); an array of exactly the input's shape
is one sample. Float arrays are cast to the input's dtype; integer, bool and object arrays are errors.

Statistics come from the fastest evaluator that works: the graph built for the CPU without fusion,
whose ``debug_run`` returns every tensor; the numpy reference :func:`vtakit.graph.evaluate` otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from vtakit.compiler.graph.evaluate import evaluate
from vtakit.compiler.graph.ir import Graph, TensorType
from vtakit.errors import GraphError, VtakitError
from vtakit.progress import progress

__all__ = ["calibration_samples", "collect_statistics", "TensorStats", "threshold", "kl_threshold",
           "percentile_threshold", "HISTOGRAM_BINS", "QUANTIZED_BINS"]

#: bins of the |x| histogram of percentile and kl calibration
HISTOGRAM_BINS = 2048
#: the quantised distribution's levels in the kl search (int8: 128 magnitudes)
QUANTIZED_BINS = 128

Sample = dict[str, np.ndarray]


# ---------------------------------------------------------------------------- input forms
def _split(name: str, array: Any, ty: TensorType) -> list[np.ndarray]:
    """The samples in ``array`` for input ``name`` of type ``ty`` (cast to its dtype)."""
    arr = np.asarray(array)
    want = np.dtype(ty.dtype)
    if np.issubdtype(want, np.floating):
        if not np.issubdtype(arr.dtype, np.floating):
            raise GraphError(f"quantize: calibration data for input {name!r} is {arr.dtype}; the input is {ty}, "
                             "so it must be a float array")
    elif arr.dtype != want:
        raise GraphError(f"quantize: calibration data for input {name!r} is {arr.dtype}, the input is {ty}")
    arr = arr.astype(want, copy=False)
    shape, rank = ty.shape, len(ty.shape)
    if arr.ndim == rank + 1 and arr.shape[1:] == shape:
        return [arr[i] for i in range(arr.shape[0])]
    if rank and shape[0] == 1 and arr.ndim == rank and arr.shape[1:] == shape[1:]:
        return [arr[i:i + 1] for i in range(arr.shape[0])]
    if arr.shape == shape:
        return [arr]
    raise GraphError(f"quantize: calibration data for input {name!r} has shape {list(arr.shape)}; the input is "
                     f"{ty}, so expected samples of shape {list(shape)}, stacked along a new leading axis"
                     + (" or along the batch axis" if rank and shape[0] == 1 else ""))


def _from_mapping(graph: Graph, data: Mapping[str, Any]) -> list[Sample]:
    unknown = sorted(set(data) - set(graph.inputs))
    if unknown:
        raise GraphError(f"quantize: calibration data names {unknown}, which are not inputs of the graph; its "
                         f"inputs are {graph.inputs}")
    missing = [n for n in graph.inputs if n not in data]
    if missing:
        raise GraphError(f"quantize: calibration data lacks the input(s) {missing} (it has {sorted(data)})")
    per_input = {n: _split(n, data[n], graph.type_of(n)) for n in graph.inputs}
    counts = {n: len(v) for n, v in per_input.items()}
    if len(set(counts.values())) > 1:
        raise GraphError(f"quantize: the calibration inputs hold different numbers of samples: {counts}")
    return [{n: per_input[n][i] for n in graph.inputs} for i in range(next(iter(counts.values())))]


def _one_input(graph: Graph, what: str) -> str:
    if len(graph.inputs) != 1:
        raise GraphError(f"quantize: calibration data given as {what} serves a one-input model only; this graph has "
                         f"inputs {graph.inputs}: give a dict (or .npz) keyed by input name")
    return graph.inputs[0]


def calibration_samples(graph: Graph, calibration: Any) -> list[Sample]:
    """``calibration`` (any form the module docstring lists) as a list of ``{input name: array}`` samples,
    each array of its input's exact type."""
    if isinstance(calibration, (str, os.PathLike)):
        path = os.fspath(calibration)
        if not os.path.isfile(path):
            raise GraphError(f"quantize: the calibration file {path!r} does not exist")
        try:
            with np.load(path, allow_pickle=False) as npz:
                data = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            raise GraphError(f"quantize: cannot read the calibration file {path!r} as .npz: {exc}") from None
        samples = _from_mapping(graph, data)
    elif isinstance(calibration, np.ndarray):
        name = _one_input(graph, "one array")
        samples = [{name: s} for s in _split(name, calibration, graph.type_of(name))]
    elif isinstance(calibration, Mapping):
        samples = _from_mapping(graph, calibration)
    elif isinstance(calibration, Iterable) and not isinstance(calibration, (bytes, bytearray)):
        samples = []
        for item in calibration:
            if isinstance(item, Mapping):
                samples.extend(_from_mapping(graph, item))
            elif isinstance(item, np.ndarray) or np.ndim(item) > 0:
                name = _one_input(graph, "arrays")
                samples.extend({name: s} for s in _split(name, item, graph.type_of(name)))
            else:
                raise GraphError(f"quantize: a calibration item must be a dict of arrays or an array, got "
                                 f"{type(item).__name__}")
    else:
        raise GraphError(f"quantize: calibration must be an array, a dict of arrays, an iterable of those or a .npz "
                         f"path, got {type(calibration).__name__}")
    if not samples:
        raise GraphError("quantize: the calibration data is empty; give at least one sample")
    return samples


# ---------------------------------------------------------------------------- running the float graph
def _runner(graph: Graph, values: Sequence[str], first: Sample) -> Callable[[Sample], Mapping[str, np.ndarray]]:
    """A function from a sample to (at least) ``values``: a CPU build's debug_run, else the numpy evaluator."""
    from vtakit.compiler.graph.build import build  # noqa: PLC0415  (build imports the targets, which import us late)
    try:
        module = build(graph, "llvm", disabled_passes=("FuseOps",))
        got = module.debug_run(first)
        if all(v in got for v in values):
            return module.debug_run
    except VtakitError:
        pass
    return lambda sample: evaluate(graph, sample, keep_all=True)


@dataclass
class TensorStats:
    """What calibration recorded of one tensor: max |x| (per channel on axis 1 when asked) and, for the
    percentile and kl methods, a histogram of |x| over [0, amax]."""

    amax: float = 0.0
    channel_amax: np.ndarray | None = None
    histogram: np.ndarray | None = None


def collect_statistics(graph: Graph, samples: Sequence[Sample], values: Sequence[str],
                       channel_values: Sequence[str] = (), histograms: bool = False) -> dict[str, TensorStats]:
    """Run ``graph`` on every sample and record ``values``' statistics (``channel_values`` also per channel;
    ``histograms`` adds a second pass recording |x| histograms of ``values``)."""
    wanted = list(dict.fromkeys([*values, *channel_values]))
    if not wanted:
        return {}
    run = _runner(graph, wanted, samples[0])
    stats = {v: TensorStats() for v in wanted}
    passes = 2 if histograms else 1
    with progress(f"calibrating {graph.name}", total=passes * len(samples), unit="sample") as bar:
        for sample in samples:
            env = run(sample)
            for v in wanted:
                a = np.abs(np.asarray(env[v], np.float64))
                if not np.all(np.isfinite(a)):
                    raise GraphError(f"quantize: tensor {v!r} is not finite (NaN or inf) on a calibration sample")
                st = stats[v]
                st.amax = max(st.amax, float(a.max()) if a.size else 0.0)
                if v in channel_values and a.ndim >= 2:
                    cm = a.max(axis=tuple(k for k in range(a.ndim) if k != 1)) if a.size else np.zeros(a.shape[1])
                    st.channel_amax = cm if st.channel_amax is None else np.maximum(st.channel_amax, cm)
            bar.advance()
        if histograms:
            for v in values:
                stats[v].histogram = np.zeros(HISTOGRAM_BINS, np.int64)
            for sample in samples:
                env = run(sample)
                for v in values:
                    st = stats[v]
                    if st.amax > 0:
                        h, _ = np.histogram(np.abs(np.asarray(env[v], np.float64)), bins=HISTOGRAM_BINS,
                                            range=(0.0, st.amax))
                        st.histogram += h
                bar.advance()
    return stats


# ---------------------------------------------------------------------------- thresholds
def percentile_threshold(hist: np.ndarray, amax: float, percentile: float) -> float:
    """The upper edge of the histogram bin where the cumulative share of |x| reaches ``percentile``."""
    total = int(hist.sum())
    if total == 0:
        return amax
    k = int(np.searchsorted(np.cumsum(hist), percentile / 100.0 * total))
    return min(amax, (k + 1) * amax / len(hist))


def kl_threshold(hist: np.ndarray, amax: float, levels: int = QUANTIZED_BINS) -> float:
    """TensorRT's entropy calibration: the clipping threshold ``i`` bins (``i >= levels``) minimising
    KL(P || Q), P the histogram clipped at ``i`` with the outliers added to its last bin, Q the first ``i``
    bins merged into ``levels`` levels and each level spread evenly over its non-empty bins."""
    hist = np.asarray(hist, np.float64)
    n = len(hist)
    if hist.sum() == 0 or n <= levels:
        return amax
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])   # tail[i] = sum(hist[i:])
    best_i, best_kl = n, np.inf
    for i in range(levels, n + 1):
        ref = hist[:i]
        p = ref.copy()
        p[-1] += tail[i]
        starts = (np.arange(levels) * i) // levels
        group = np.repeat(np.arange(levels), np.diff(np.append(starts, i)))
        nonzero = ref > 0
        sums = np.add.reduceat(ref, starts)
        counts = np.add.reduceat(nonzero.astype(np.float64), starts)
        q = np.where(nonzero, sums[group] / np.maximum(counts[group], 1), 0.0)
        ps, qs = p.sum(), q.sum()
        if qs == 0:
            continue
        p, q = p / ps, q / qs
        mask = p > 0
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if kl < best_kl:
            best_i, best_kl = i, kl
    return min(amax, (best_i + 0.5) * amax / n)


def threshold(stats: TensorStats, method: str, percentile: float = 99.99) -> float:
    """The clipping threshold of a tensor under calibration ``method``."""
    if method == "max" or stats.histogram is None or stats.amax == 0:
        return stats.amax
    if method == "percentile":
        return percentile_threshold(stats.histogram, stats.amax, percentile)
    return kl_threshold(stats.histogram, stats.amax)
