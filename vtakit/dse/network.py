"""The network a co-design search optimises for: a built-in name or a model, quantised to int8.

``resnet18`` is the graph zoo's ResNet-18 (seeded weights, 224x224, batch 1) calibrated on seeded
random images; ``digits`` is the small CNN shipped with vtakit, calibrated on its own calibration
split (the quick network of tests and examples). Anything else is an ONNX model (a path or a
``ModelProto``) or a :class:`vtakit.graph.Graph`: a float model needs calibration samples, an int8
(QDQ or already quantised) one does not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from vtakit.errors import DSEError

__all__ = ["Network", "BUILTIN_NETWORKS", "load_network"]

#: The built-in networks, by name.
BUILTIN_NETWORKS = ("resnet18", "digits")


@dataclass
class Network:
    """A quantised graph ready for ``vtakit.autotune.extract_tasks`` and ``vtakit.graph.build``, its
    name, its batch (the first input's leading dimension), one input for profiling and checking, and
    (:meth:`expected`) the integer CPU reference's outputs for it."""

    name: str
    graph: Any
    batch: int
    sample: dict[str, np.ndarray]
    _expected: list[np.ndarray] | None = field(default=None, repr=False, compare=False)

    def expected(self) -> list[np.ndarray]:
        """The integer CPU reference's outputs for :attr:`sample` (``vtakit.graph.evaluate``, numpy; once),
        in output order: what the accelerator's outputs must equal bit for bit."""
        if self._expected is None:
            from vtakit.compiler import graph as vg  # noqa: PLC0415

            ref = vg.evaluate(self.graph, self.sample)
            self._expected = [np.asarray(ref[name]) for name in self.graph.outputs]
        return self._expected


#: The built-in networks loaded so far in this process, by (name, image): quantising ResNet-18 and its
#: CPU reference take seconds, and a process that runs several searches (a benchmark, the tests) needs
#: them once. Every load returns its own :class:`Network` (the graph, sample and reference are shared:
#: nothing modifies them).
_BUILTIN_CACHE: dict[tuple[str, int], Network] = {}


def load_network(network: Any, calibration: Any = None, *, image: int = 224) -> Network:
    """``network``: ``"resnet18"``, ``"digits"``, an ``.onnx`` path, an onnx ``ModelProto`` or a
    :class:`vtakit.graph.Graph`; ``calibration`` quantises a float model (what
    :func:`vtakit.graph.quantize` takes). ``image`` sizes the built-in ResNet-18."""
    if isinstance(network, str) and network in BUILTIN_NETWORKS and calibration is None:
        key = (network, image if network == "resnet18" else 0)
        if key not in _BUILTIN_CACHE:
            _BUILTIN_CACHE[key] = _load(network, None, image)
        net = _BUILTIN_CACHE[key]
        net.expected()   # computed once, shared by every later load
        return replace(net)
    return _load(network, calibration, image)


def _load(network: Any, calibration: Any, image: int) -> Network:
    from vtakit.compiler import graph as vg  # noqa: PLC0415 -- the graph compiler (onnx) loads only when used

    rng = np.random.default_rng(0)
    if isinstance(network, str) and network == "resnet18":
        g = vg.from_onnx(vg.zoo.resnet18(seed=0, image=image))
        shape = g.type_of(g.inputs[0]).shape
        if calibration is None:
            calibration = rng.standard_normal((4, *shape[1:])).astype(np.float32)
        name = "resnet18" if image == 224 else f"resnet18@{image}"
    elif isinstance(network, str) and network == "digits":
        from vtakit.datasets import digits_model_path, load_digits_calibration  # noqa: PLC0415

        g = vg.from_onnx(str(digits_model_path()))
        calibration = load_digits_calibration() if calibration is None else calibration
        name = "digits"
    elif isinstance(network, (str, os.PathLike)):
        path = Path(network)
        if path.suffix.lower() != ".onnx" or not path.is_file():
            what = "no such file" if path.suffix.lower() == ".onnx" else "not a built-in network or an .onnx file"
            raise DSEError(f"unknown network {os.fspath(network)!r} ({what}); expected one of "
                           f"{list(BUILTIN_NETWORKS)} or the path of an .onnx model")
        g = vg.from_onnx(str(path))
        name = path.stem
    elif type(network).__name__ == "ModelProto":
        g = vg.from_onnx(network)
        name = g.name or "model"
    elif isinstance(network, vg.Graph):
        g = network
        name = g.name or "graph"
    else:
        raise DSEError(f"unknown network {network!r}: expected one of {list(BUILTIN_NETWORKS)}, an .onnx path, an "
                       f"onnx ModelProto or a vtakit.graph.Graph")
    quantized = any(node.op.startswith("qnn.") for node in g.nodes)
    if not quantized:
        if calibration is None:
            raise DSEError(f"network {name!r} is a float model: the accelerator runs int8 networks, so give "
                           "calibration samples (--calibration CALIB.npz, keyed by input name) or a quantised model")
        g = vg.quantize(g, calibration)
    shape = tuple(int(d) for d in g.type_of(g.inputs[0]).shape)
    dtype = np.dtype(g.type_of(g.inputs[0]).dtype)
    sample = {g.inputs[0]: rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
              else rng.integers(-128, 128, shape).astype(dtype)}
    return Network(name, g, shape[0] if shape else 1, sample)
