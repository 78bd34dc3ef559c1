"""``vtakit.graph``: import, transform, build and run whole networks.

The implementation lives in :mod:`vtakit.compiler.graph`; this module is its public import path,
as :mod:`vtakit.te` is for tensor expressions.
"""

from vtakit.compiler.graph import *  # noqa: F401,F403
from vtakit.compiler.graph import __all__  # noqa: F401
