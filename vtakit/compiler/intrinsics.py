"""The intrinsics a loop-IR ``Call`` may name, in one table.

Every executor of loop IR (the IR interpreter, the LLVM CPU back end) implements exactly this set,
so a function one of them runs, the other runs too; ``tests/compiler/test_intrinsics.py`` holds
them to it and compares their results. The GPU back end implements a documented subset.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Intrinsic", "INTRINSICS", "FLOAT_MATH", "INTEGER_OPS"]


@dataclass(frozen=True)
class Intrinsic:
    """``name(arg, ...)`` with ``arity`` arguments; ``operands`` says which dtypes it takes:
    ``"float"``, ``"int"``, ``"any"`` (abs), or ``"special"`` (likely, if_then_else: the
    executors treat them as control, not arithmetic)."""

    name: str
    arity: int
    operands: str


_FLOAT_UNARY = ("exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt",
                "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf",
                "fabs", "floor", "ceil", "trunc", "round", "nearbyint", "isnan")
_FLOAT_BINARY = ("pow", "copysign", "atan2", "fmod")

#: Float math: ``round`` rounds half to even, ``isnan`` returns bool, ``fma`` rounds once.
FLOAT_MATH: dict[str, Intrinsic] = {
    **{n: Intrinsic(n, 1, "float") for n in _FLOAT_UNARY},
    **{n: Intrinsic(n, 2, "float") for n in _FLOAT_BINARY},
    "fma": Intrinsic("fma", 3, "float"),
}
#: Integer operations: ``shift_right`` is arithmetic on signed types, logical on unsigned ones.
INTEGER_OPS: dict[str, Intrinsic] = {
    **{n: Intrinsic(n, 2, "int") for n in ("shift_left", "shift_right", "bitwise_and", "bitwise_or",
                                           "bitwise_xor")},
    "bitwise_not": Intrinsic("bitwise_not", 1, "int"),
    "popcount": Intrinsic("popcount", 1, "int"),
}
INTRINSICS: dict[str, Intrinsic] = {
    **FLOAT_MATH, **INTEGER_OPS,
    "abs": Intrinsic("abs", 1, "any"),
    "likely": Intrinsic("likely", 1, "special"),
    "if_then_else": Intrinsic("if_then_else", 3, "special"),
}
