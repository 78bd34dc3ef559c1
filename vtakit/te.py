"""``vtakit.te``: tensor expressions and schedules, importable the way TVM users expect.

``from vtakit import te`` and ``import vtakit.te as te`` both give this module; the
implementation lives in :mod:`vtakit.compiler.te`.
"""

from vtakit.compiler.te import *  # noqa: F401,F403
from vtakit.compiler.te import __all__  # noqa: F401
