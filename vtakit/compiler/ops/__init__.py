"""The operator library: compute definitions (TVM TOPI style) and their default CPU schedules.

Compute definitions build tensor expressions only (:mod:`.nn`, :mod:`.elemwise`); schedules live
per target (:mod:`.cpu`, :mod:`.cuda`; :data:`SCHEDULES` maps a target name to its ``schedule``); :mod:`.layout` packs constant weights for the packed operators. These are
the building blocks the graph compiler lowers networks to::

    from vtakit.compiler import ops
    out = ops.relu(ops.conv2d_nchw(data, kernel, padding=1))
    mod = vtakit.build(ops.cpu.schedule(out), [data, kernel, out], target="llvm")   # picks schedule_conv2d_nchw
"""

from vtakit.compiler.ops import cpu, cuda, layout
from vtakit.compiler.ops.elemwise import (add, binary, broadcast_shape, cast, clip, divide, maximum, minimum, multiply,
                                          relu, subtract)
from vtakit.compiler.ops.nn import (conv2d_nchw, conv2d_nchw_packed, conv2d_output_shape, dense, dense_packed,
                                    depthwise_conv2d_nchw, global_avg_pool2d, matmul, pad, padding_of, pool2d, softmax)

__all__ = ["cpu", "cuda", "layout", "SCHEDULES", "add", "binary", "broadcast_shape", "cast", "clip", "divide", "maximum", "minimum",
           "multiply", "relu", "subtract", "conv2d_nchw", "conv2d_nchw_packed", "conv2d_output_shape", "dense",
           "dense_packed", "depthwise_conv2d_nchw", "global_avg_pool2d", "matmul", "pad", "padding_of", "pool2d",
           "softmax"]

#: each target's default schedule for an operator's output (what the graph compiler calls per fused group)
SCHEDULES = {"llvm": cpu.schedule, "cuda": cuda.schedule, "nvptx": cuda.schedule}
