"""``vtakit.graph``: import, transform, build and run whole networks.

The implementation lives in :mod:`vtakit.compiler.graph`; this module is its public import path,
as :mod:`vtakit.te` is for tensor expressions. ``vtakit.graph.onnx_backend`` (onnx's backend
interface) is importable as a submodule too: ``import vtakit.graph.onnx_backend``.
"""

import sys

from vtakit.compiler.graph import *  # noqa: F401,F403
from vtakit.compiler.graph import __all__  # noqa: F401
from vtakit.compiler.graph import onnx_backend

sys.modules[f"{__name__}.onnx_backend"] = onnx_backend
