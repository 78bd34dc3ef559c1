"""``vtakit.autotune``: the tuner, importable as ``from vtakit import autotune`` or
``import vtakit.autotune as autotune``; the implementation lives in :mod:`vtakit.compiler.autotune`."""

from vtakit.compiler.autotune import *  # noqa: F401,F403
from vtakit.compiler.autotune import __all__  # noqa: F401
