"""Tuners: :class:`GridSearchTuner`, :class:`RandomTuner`, :class:`GATuner` and the model-based
:class:`XGBTuner` (XGBoost cost model + simulated annealing), all driven by :meth:`Tuner.tune`."""

from vtakit.compiler.autotune.tuner.base import Callback, Tuner, TuneSummary
from vtakit.compiler.autotune.tuner.ga import GATuner
from vtakit.compiler.autotune.tuner.index_based import GridSearchTuner, RandomTuner
from vtakit.compiler.autotune.tuner.xgb import XGBTuner

__all__ = ["Callback", "Tuner", "TuneSummary", "GATuner", "GridSearchTuner", "RandomTuner", "XGBTuner"]
