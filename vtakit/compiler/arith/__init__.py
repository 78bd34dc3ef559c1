"""Integer arithmetic analysis for lowering and the backends (see :mod:`.analyzer`)."""

from vtakit.compiler.arith.analyzer import (
    Analyzer,
    can_prove,
    const_int_bound,
    linear_coefficients,
    simplify,
    structural_key,
)

__all__ = ["Analyzer", "simplify", "const_int_bound", "can_prove", "linear_coefficients", "structural_key"]
