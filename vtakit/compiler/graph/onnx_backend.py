"""vtakit as an ``onnx.backend``: the module onnx's own test harness drives.

``onnx.backend.test.BackendTest(vtakit.graph.onnx_backend, __name__)`` runs the ONNX node tests
against vtakit: :func:`prepare` imports a model (:func:`vtakit.graph.from_onnx`) and builds it for
the CPU (``vtakit.graph.build(graph, "llvm")``); the returned :class:`VtakitRep` runs it. The
module-level functions are the ones ``onnx.backend.base.Backend`` defines, so the module itself can
be passed where a backend class is expected.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from vtakit.compiler.graph.build import build
from vtakit.compiler.graph.frontend import from_onnx
from vtakit.compiler.graph.frontend.registry import MAX_OPSET
from vtakit.compiler.graph.module import NetModule
from vtakit.errors import GraphError, UnsupportedOperatorError

__all__ = ["VtakitRep", "VtakitBackend", "prepare", "run_model", "run_node", "supports_device", "is_compatible"]

DEVICES = ("CPU",)


class VtakitRep(BackendRep):
    """A model prepared by :func:`prepare`: ``run(inputs)`` gives its outputs in the model's order.

    A model whose run-time inputs feed values the compiler needs at compile time (onnx's node tests
    give ``Reshape`` its shape that way) is built at its first run, specialised on those inputs' values
    (``from_onnx(..., input_values=)``); it is built again for other values of them, and only then."""

    def __init__(self, model: onnx.ModelProto, module: NetModule | None, options: Mapping[str, Any]) -> None:
        self.model = model
        self.module = module
        self._options = dict(options)
        self._inputs = [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
        self._specialised: list[tuple[tuple, NetModule]] = []

    def _bind(self, inputs: Any) -> dict[str, np.ndarray]:
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if isinstance(inputs, Mapping):
            missing = [name for name in self._inputs if name not in inputs]
            if missing:
                raise GraphError(f"inputs {missing} are missing; the model takes {self._inputs}")
            return {k: np.asarray(v) for k, v in inputs.items()}
        arrays = list(inputs)
        if len(arrays) < len(self._inputs):
            raise GraphError(f"the model takes inputs {self._inputs}, got {len(arrays)} arrays")
        return {name: np.asarray(a) for name, a in zip(self._inputs, arrays)}

    def _module_for(self, values: dict[str, np.ndarray]) -> NetModule:
        if self.module is not None:
            return self.module
        for key, module in self._specialised:
            if all(np.array_equal(values[name], v) and values[name].dtype == v.dtype for name, v in key):
                return module
        graph = _import(self.model, self._options, values)
        frozen = tuple((name, values[name].copy()) for name in self._inputs if name not in graph.inputs)
        module = _build(graph, self._options)
        self._specialised.append((frozen, module))
        return module

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        values = self._bind(inputs)
        module = self._module_for(values)
        return tuple(module.run({name: values[name] for name in module.input_names}))


def _import(model: onnx.ModelProto, options: Mapping[str, Any], values: Mapping[str, np.ndarray] | None = None):
    return from_onnx(model, input_shapes=options.get("input_shapes"), base_dir=options.get("base_dir"),
                     input_values=values)


def _build(graph: Any, options: Mapping[str, Any]) -> NetModule:
    return build(graph, target="llvm", cache_dir=options.get("cache_dir"))


class VtakitBackend(Backend):
    """The ``onnx.backend.base.Backend`` of vtakit (CPU only; ``target="llvm"``)."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper().split(":")[0] in DEVICES

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> VtakitRep:
        """Import ``model`` and compile it for the CPU; ``input_shapes`` and ``base_dir`` go to ``from_onnx``."""
        if not cls.supports_device(device):
            raise GraphError(f"vtakit's ONNX backend runs on {list(DEVICES)}, not {device!r}")
        try:
            module = _build(_import(model, kwargs), kwargs)
        except UnsupportedOperatorError:
            raise
        except GraphError:
            # maybe a run-time input is used where a compile-time value is needed: the first run builds the
            # model on its inputs' values (and raises the error again if that was not the cause)
            module = None
        return VtakitRep(model, module, kwargs)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
                  ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[np.ndarray, ...]:
        """Run one node on numpy ``inputs`` (in the node's input order; omitted optional inputs skipped)."""
        arrays = [np.asarray(x) for x in (inputs.values() if isinstance(inputs, Mapping) else inputs)]
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise GraphError(f"{node.op_type} node {node.name!r} reads {len(names)} inputs {names}, got "
                             f"{len(arrays)} arrays")
        graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for n, a in zip(names, arrays)]
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        if outputs_info:
            graph_outputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                             for n, (dt, shape) in zip([n for n in node.output if n], outputs_info)]
        opset = int(kwargs.get("opset_version", min(onnx.defs.onnx_opset_version(), MAX_OPSET)))
        model = helper.make_model(helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs),
                                  opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(arrays)

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)


prepare = VtakitBackend.prepare
run_model = VtakitBackend.run_model
run_node = VtakitBackend.run_node
supports_device = VtakitBackend.supports_device
is_compatible = VtakitBackend.is_compatible
