"""Accelerator operators (VTA's ``vta.top``): packed conv2d and dense with a fused
requantisation epilogue (:func:`~vtakit.runtime.packing.requantize`), the residual add of two
packed activations (:mod:`.add`, :func:`~vtakit.runtime.packing.add_reference`), their default
schedules and knobs, and the ResNet-18 benchmark workloads; the numpy packing helpers and
references of :mod:`vtakit.runtime.packing` are re-exported here."""

from vtakit.compiler.topi_vta.add import AddKnobs, add, add_packed, choose_add_tiles, schedule_add_packed
from vtakit.compiler.topi_vta.conv2d import (Conv2dKnobs, conv2d, conv2d_packed, default_conv2d_knobs,
                                             schedule_conv2d_packed)
from vtakit.compiler.topi_vta.dense import DenseKnobs, dense, dense_packed, schedule_dense_packed
from vtakit.compiler.topi_vta.epilogue import declare_requant, schedule_requant
from vtakit.compiler.topi_vta.tiling import choose_conv2d_tiles, choose_dense_tiles
from vtakit.compiler.topi_vta.workloads import RESNET18, Conv2dWorkload, get_workload
from vtakit.runtime.packing import (add_reference, conv2d_reference, dense_reference, pack_bias, pack_matrix, pack_nchw,
                                    pack_oihw, requantize, rounding_addend, shift_values, unpack_matrix, unpack_nchw)

__all__ = ["AddKnobs", "add", "add_packed", "choose_add_tiles", "schedule_add_packed",
           "Conv2dKnobs", "conv2d", "conv2d_packed", "default_conv2d_knobs", "schedule_conv2d_packed",
           "DenseKnobs", "dense", "dense_packed", "schedule_dense_packed", "declare_requant", "schedule_requant",
           "conv2d_reference", "dense_reference", "add_reference", "requantize", "rounding_addend", "shift_values",
           "pack_bias", "pack_matrix", "pack_nchw", "pack_oihw", "unpack_matrix", "unpack_nchw",
           "choose_conv2d_tiles", "choose_dense_tiles", "RESNET18", "Conv2dWorkload", "get_workload"]
