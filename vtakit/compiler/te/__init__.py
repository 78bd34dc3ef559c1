"""Tensor expressions and schedules, TVM classic TE style (``vtakit.te``)."""

from vtakit.compiler.te.expr import (
    CommReducer, IterVar, Range, Reducer, abs, all, any, call_intrin, ceil, comm_reducer, const, cos, erf, exp,
    exp2, floor, floordiv, floormod, if_then_else, log, log2, log10, max, max_value, min, min_value, pow, power,
    reduce_axis, round, rsqrt, sigmoid, sin, size_var, sqrt, sum, tanh, thread_axis, trunc, truncdiv, truncmod,
    var,
)
from vtakit.compiler.te.schedule import Schedule, Stage, create_schedule
from vtakit.compiler.te.tensor import ComputeOp, Operation, PlaceholderOp, Tensor, compute, placeholder
from vtakit.compiler.te.tensor_intrin import TensorIntrin, decl_buffer, decl_tensor_intrin

__all__ = [
    "CommReducer", "IterVar", "Range", "Reducer", "abs", "all", "any", "call_intrin", "ceil", "comm_reducer",
    "const", "cos", "erf", "exp", "exp2", "floor", "floordiv", "floormod", "if_then_else", "log", "log2", "log10",
    "max", "max_value", "min", "min_value", "pow", "power", "reduce_axis", "round", "rsqrt", "sigmoid", "sin",
    "size_var", "sqrt", "sum", "tanh", "thread_axis", "trunc", "truncdiv", "truncmod", "var",
    "Schedule", "Stage", "create_schedule",
    "ComputeOp", "Operation", "PlaceholderOp", "Tensor", "compute", "placeholder",
    "TensorIntrin", "decl_buffer", "decl_tensor_intrin",
]
