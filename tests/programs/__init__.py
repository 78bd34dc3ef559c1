"""The shared instruction-level program corpus and a backend-agnostic runner (see corpus.py)."""

from .corpus import CASES, CORPUS, Case, Expected, Unsupported, programs
from .runner import run_program

__all__ = ["CASES", "CORPUS", "Case", "Expected", "Unsupported", "programs", "run_program"]
