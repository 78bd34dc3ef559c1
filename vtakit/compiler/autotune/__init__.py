"""``vtakit.autotune``: AutoTVM-style tuning of schedule templates (docs/architecture.md §5).

Templates (:mod:`.task`) declare a config space (:mod:`.space`); tuners (:mod:`.tuner`) pick
configs to measure, guided by an XGBoost cost model or not; measurement (:mod:`.measure`) runs
each trial in a killable child process on any ``concurrent.futures.Executor`` (local processes,
or a dask.distributed cluster) and checks every result against numpy; records (:mod:`.record`)
are JSON lines appended per trial, from which a run resumes and :func:`apply_history_best`
(:mod:`.dispatch`) serves the best config per workload to the compiler. :func:`extract_tasks`
lists a network's tunable layers as tasks (with counts and weights) and :func:`split_trials`
shares a trial budget among them.
"""

from vtakit.compiler.autotune import templates  # noqa: F401 -- registers the built-in templates
from vtakit.compiler.autotune.dispatch import ApplyHistoryBest, apply_history_best, lookup
from vtakit.compiler.autotune.measure import (LocalBuilder, LocalRunner, MeasureErrorNo, MeasureInput, MeasureOption,
                                              MeasureResult, dask_executor, measure_option)
from vtakit.compiler.autotune.record import TuningRecord, load_records, pick_best
from vtakit.compiler.autotune.space import ConfigEntity, ConfigSpace
from vtakit.compiler.autotune.task import (MIN_TRIALS_PER_TASK, Task, create_task, extract_tasks, get_template,
                                           parse_workload, registered_templates, split_trials, template)
from vtakit.compiler.autotune.tuner import GATuner, GridSearchTuner, RandomTuner, Tuner, XGBTuner

__all__ = ["ApplyHistoryBest", "apply_history_best", "lookup", "LocalBuilder", "LocalRunner", "MeasureErrorNo",
           "MeasureInput", "MeasureOption", "MeasureResult", "dask_executor", "measure_option", "TuningRecord",
           "load_records", "pick_best", "ConfigEntity", "ConfigSpace", "Task", "create_task", "extract_tasks",
           "split_trials", "MIN_TRIALS_PER_TASK", "get_template", "parse_workload", "registered_templates",
           "template", "GATuner", "GridSearchTuner", "RandomTuner", "Tuner", "XGBTuner"]
