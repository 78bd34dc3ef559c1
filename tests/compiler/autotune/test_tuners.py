"""Tuners: no config measured twice, resume from a log, seeded orders, and a cost model that learns."""

import fcntl
import os

import numpy as np
import pytest

from vtakit import autotune
from vtakit.compiler.autotune.tuner.cost_model import XGBoostCostModel
from vtakit.errors import TuningError
from vtakit.hw.config import VTAConfig


@pytest.fixture(scope="module")
def exhaustive(small_dense_task, tmp_path_factory):
    """Every config the small dense space's filter accepts, measured once (the ground truth), shared
    by the xdist workers through a locked file so the space is measured once per session."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")     # shared by the workers of one xdist run
    root = tmp_path_factory.getbasetemp().parent if run else tmp_path_factory.getbasetemp()
    log = root / f"autotune-exhaustive-{run or 'serial'}.log"
    n = small_dense_task.config_space.valid_count()
    with open(root / "autotune-exhaustive.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not log.exists() or len(autotune.load_records(log)) < n:
            option = autotune.measure_option(autotune.LocalBuilder(timeout=30, n_parallel=2),
                                             autotune.LocalRunner(timeout=30))
            autotune.GridSearchTuner(small_dense_task).tune(n, option, log_file=log)
    return {r.index: r.result for r in autotune.load_records(log)}


def test_grid_search_measures_every_valid_config_once(exhaustive, small_dense_task):
    space = small_dense_task.config_space
    assert 0 < len(space.invalid_indices()) and sorted(exhaustive) == \
        [i for i in range(len(space)) if i not in space.invalid_indices()]
    valid = [r for r in exhaustive.values() if r.ok]
    assert len(valid) == len(exhaustive)                      # the filter lets no failing config through
    assert len({r.cost for r in valid}) > 10                  # the knobs matter


def _spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.mark.parametrize("feature_type", ["knob", "itervar", "curve"])
def test_the_model_really_learns(exhaustive, small_dense_task, feature_type):
    """Trained on half of an exhaustively measured space, it ranks the other half (Spearman >= 0.6)."""
    valid = sorted(i for i, r in exhaustive.items() if r.ok)
    rng = np.random.default_rng(0)
    rng.shuffle(valid)
    train, test = valid[:len(valid) // 2], valid[len(valid) // 2:]
    model = XGBoostCostModel(small_dense_task, feature_type=feature_type, loss_type="rank", seed=0)
    model.fit(train, [1.0 / exhaustive[i].cost for i in train])
    predicted = model.predict(test)
    assert _spearman(predicted, [1.0 / exhaustive[i].cost for i in test]) >= 0.6


@pytest.mark.parametrize("make", [lambda t: autotune.RandomTuner(t, seed=1), lambda t: autotune.GATuner(t, pop_size=8,
                                  seed=1), lambda t: autotune.XGBTuner(t, plan_size=8, feature_type="knob", seed=1)],
                         ids=["random", "ga", "xgb"])
def test_resume_measures_no_config_twice_and_reaches_n_in_total(make, small_dense_task, fast_option, tmp_path):
    log = tmp_path / "t.log"
    first = make(small_dense_task).tune(10, fast_option, log_file=log)
    assert first.measured == 10
    second = make(small_dense_task).tune(24, fast_option, log_file=log)
    assert (second.resumed, second.measured) == (10, 14)
    indices = [r.index for r in autotune.load_records(log)]
    assert len(indices) == 24 == len(set(indices))
    third = make(small_dense_task).tune(24, fast_option, log_file=log)
    assert third.measured == 0 and third.resumed == 24


def test_seeded_random_search_resumed_measures_the_same_set(small_dense_task, fast_option, tmp_path):
    whole, parts = tmp_path / "whole.log", tmp_path / "parts.log"
    autotune.RandomTuner(small_dense_task, seed=7).tune(12, fast_option, log_file=whole)
    for n in (3, 8, 12):
        autotune.RandomTuner(small_dense_task, seed=7).tune(n, fast_option, log_file=parts)
    assert {r.index for r in autotune.load_records(whole)} == {r.index for r in autotune.load_records(parts)}


@pytest.mark.slow
def test_xgb_finds_a_good_config(exhaustive, small_dense_task, fast_option, tmp_path):
    best = min(r.cost for r in exhaustive.values() if r.ok)
    summary = autotune.XGBTuner(small_dense_task, plan_size=12, feature_type="knob", seed=0).tune(
        40, fast_option, log_file=tmp_path / "x.log")
    assert summary.best_cost <= 1.1 * best


def test_records_of_another_config_or_target_are_ignored_with_a_note(small_dense_task, fast_option, tmp_path):
    log = tmp_path / "t.log"
    other = autotune.create_task("vta.dense", "dense:16,16,16", config=VTAConfig.small(bus_width=128))
    autotune.RandomTuner(other, seed=0).tune(4, fast_option, log_file=log)
    cpu = autotune.create_task("llvm.dense", "dense:16,16,16", target="llvm")
    with pytest.warns(UserWarning, match="ignored 4 record.* for another target"):
        autotune.RandomTuner(cpu, seed=0).tune(2, fast_option, log_file=log)
    with pytest.warns(UserWarning) as caught:
        summary = autotune.RandomTuner(small_dense_task, seed=0).tune(4, fast_option, log_file=log)
    notes = " ".join(str(w.message) for w in caught)
    assert "ignored 4 record(s) of this workload measured on another VTAConfig" in notes
    assert "ignored 2 record(s) of this workload measured for another target" in notes
    assert summary.resumed == 0 and summary.measured == 4 and len(summary.notes) == 2


def test_transfer_learning_warm_starts_the_model(exhaustive, small_dense_task, fast_option, tmp_path):
    """Records of other workloads train a base model that picks the first trials."""
    log = tmp_path / "other.log"
    for wl in ("dense:16,32,16", "dense:32,16,16"):
        task = autotune.create_task("vta.dense", wl, config=VTAConfig.small())
        autotune.RandomTuner(task, seed=0).tune(24, fast_option, log_file=log)
    tuner = autotune.XGBTuner(small_dense_task, plan_size=16, feature_type="knob", seed=0)
    tuner.load_history(autotune.load_records(log))
    assert tuner.model.base is not None and 16 <= len(tuner.plan) <= 17
    assert tuner.plan[0] == small_dense_task.config_space.fallback.index   # the default still comes first
    best = min(r.cost for r in exhaustive.values() if r.ok)
    planned = [exhaustive[i].cost for i in tuner.plan]
    median_cost = float(np.median([r.cost for r in exhaustive.values() if r.ok]))
    assert min(planned) <= median_cost and min(planned) < 2 * best


def test_bad_tuner_input(small_dense_task):
    with pytest.raises(TuningError, match="n_trial must be a positive int"):
        autotune.RandomTuner(small_dense_task).tune(0)
    with pytest.raises(TuningError, match="unknown feature_type 'loops'"):
        autotune.XGBTuner(small_dense_task, feature_type="loops")
    with pytest.raises(TuningError, match="unknown loss_type 'hinge'"):
        autotune.XGBTuner(small_dense_task, loss_type="hinge")
    with pytest.raises(TuningError, match="needs a Task"):
        autotune.RandomTuner("vta.dense")
    with pytest.raises(TuningError, match="GATuner does not learn from history"):
        autotune.GATuner(small_dense_task).load_history([])


def test_xgb_measures_the_default_first_unless_told_not_to(small_dense_task):
    """``fallback_first=False`` leaves the default to the search (how transfer learning is
    measured where the default is already near the optimum)."""
    fallback = small_dense_task.config_space.fallback.index
    assert autotune.XGBTuner(small_dense_task, seed=0).next_batch(1)[0].index == fallback
    first = {autotune.XGBTuner(small_dense_task, seed=s, fallback_first=False).next_batch(1)[0].index for s in range(8)}
    assert len(first) > 1


class _PreferHighIndices:
    """A stand-in cost model for the annealer: rates a config by its index, remembers what it rated."""

    def __init__(self):
        self.rated = set()

    def cached(self):
        return len(self.rated)

    def predict(self, indices):
        self.rated.update(int(i) for i in indices)
        return np.asarray(indices, dtype=np.float64)


def test_annealing_spends_its_ratings_on_configs_the_filter_accepts():
    """ResNet-18 C9's space is 95% filtered: the chains start and walk on valid configs only, so
    a plan is full and every rating goes to a config a tuner may measure."""
    from vtakit.compiler.autotune.tuner.sa import SimulatedAnnealingOptimizer

    space = autotune.create_task("vta.conv2d", "resnet18.C9").config_space
    invalid = space.invalid_indices()
    assert len(invalid) > 0.9 * len(space)
    model = _PreferHighIndices()
    sa = SimulatedAnnealingOptimizer(space, n_iter=40, parallel_size=32, rng=np.random.default_rng(0),
                                     max_new_features=200)
    plan = sa.find_maximums(model, 16, set(invalid))
    assert len(plan) == 16 == len(set(plan)) and not set(plan) & invalid
    assert not model.rated & invalid and 32 < len(model.rated) <= 200 + 2 * 32   # the budget is checked per step
    top = max(set(range(len(space))) - invalid)   # the model's favourite, given as a chain's start
    fresh = SimulatedAnnealingOptimizer(space, n_iter=0, parallel_size=8, rng=np.random.default_rng(1))
    assert fresh.find_maximums(_PreferHighIndices(), 1, set(invalid), starts=[top]) == [top]


def test_features_are_computed_once_per_process(small_dense_task, monkeypatch):
    """Two models of one task (two seeds, a resumed run) share the lowered configs' features; each
    still counts its own ratings, so a tuner's feature budget does not depend on what ran before."""
    from vtakit.compiler.autotune.tuner import cost_model, features

    calls = []
    real = features.config_features
    monkeypatch.setattr(cost_model, "config_features", lambda *a: calls.append(a[1].index) or real(*a))
    features.shared_features(small_dense_task, "itervar").clear()
    a = XGBoostCostModel(small_dense_task, "itervar")
    b = XGBoostCostModel(small_dense_task, "itervar")
    xa, xb = a.features([3, 5, 7]), b.features([7, 5, 3, 9])
    assert sorted(calls) == [3, 5, 7, 9]
    assert np.array_equal(xa, xb[[2, 1, 0]]) and (a.cached(), b.cached()) == (3, 4)


def test_tile_features_give_the_vector_width_and_register_tile_relative_to_the_cpu():
    """``itervar``'s last two features: the hot loop's vector width in the CPU's vectors and the
    register tile in vectors over the CPU's vector registers (log2), wherever the loops sit; zero
    for the accelerator, which has neither."""
    from vtakit.compiler.autotune.tuner.features import config_features, feature_length
    from vtakit.compiler.ops import cpu

    lanes, registers = cpu.vector_lanes("float32"), cpu.default_target().vector_registers
    task = autotune.create_task("llvm.dense", (64, 64, 64), target="llvm")
    space = task.config_space
    seen = set()
    for index in range(0, len(space), 7):
        cfg = space.get(index)
        if space.invalid_reason(cfg) is not None:
            continue
        width, rows = cfg["tile_x"].size[-1], cfg["tile_y"].size[-1]
        vec = config_features(task, cfg, "itervar")
        assert len(vec) == feature_length("itervar", task)
        assert vec[-2] == pytest.approx(np.log2(width / lanes))
        assert vec[-1] == pytest.approx(np.log2(rows * width / lanes / registers))
        seen.add((width, rows))
    assert len(seen) > 10
    vta = autotune.create_task("vta.conv2d", "resnet18.C5")
    assert not config_features(vta, vta.config_space.fallback, "itervar")[-2:].any()


def test_diversity_filter_picks_a_plan_of_distinct_knob_values(small_dense_task):
    """AutoTVM's ``submodular_pick``: greedily the point adding the most unseen knob values; with
    ``diversity_filter_ratio`` the plan is so picked from the model's top ratio x plan_size."""
    from vtakit.compiler.autotune.tuner.xgb import submodular_pick

    points = [[0, 0, 0], [0, 0, 1], [1, 1, 1], [0, 1, 0], [2, 0, 1]]
    assert submodular_pick(points, 3) == [0, 2, 4]
    assert submodular_pick(points, 2, scores=[0, 5, 0, 0, 0]) == [1, 2]
    tuner = autotune.XGBTuner(small_dense_task, plan_size=4, seed=0, diversity_filter_ratio=3)
    configs = tuner.next_batch(4)
    results = [autotune.MeasureResult((float(1 + i),), autotune.MeasureErrorNo.NO_ERROR) for i in range(4)]
    tuner.update([autotune.MeasureInput(small_dense_task, c) for c in configs], results)
    assert len(tuner.plan) == 4 == len(set(tuner.plan)) and not set(tuner.plan) & {c.index for c in configs}


def test_local_picks_mutate_then_exploit_the_best_measured_config(small_dense_task):
    """``local_picks``: before the first fit every third random pick is a one-knob neighbour of the
    best measured config; each plan after a fit starts with the neighbours the model rates best."""
    space = small_dense_task.config_space
    with pytest.raises(TuningError):
        autotune.XGBTuner(small_dense_task, plan_size=4, local_picks=5)
    tuner = autotune.XGBTuner(small_dense_task, plan_size=8, seed=0, local_picks=3)

    def differ(a, b):
        return sum(x != y for x, y in zip(space.index_to_point(a), space.index_to_point(b)))

    measured = []
    for k in range(8):
        (cfg,) = tuner.next_batch(1)
        measured.append(cfg.index)
        cost = 1.0 if k == 0 else 2.0 + k            # the first (the fallback) stays the best
        tuner.update([autotune.MeasureInput(small_dense_task, cfg)],
                     [autotune.MeasureResult((cost,), autotune.MeasureErrorNo.NO_ERROR)])
    best = space.fallback.index
    assert measured[0] == best and differ(measured[3], best) == 1 and differ(measured[6], best) == 1
    assert len(set(measured)) == 8
    local = tuner.plan[:3]                                # the model has been fitted: the plan is new
    neighbours = tuner._neighbours(best)
    assert set(local) <= set(neighbours) and not set(local) & set(measured)
    rated = dict(zip(neighbours, tuner.model.predict(neighbours)))
    assert min(rated[i] for i in local) >= max(v for i, v in rated.items() if i not in local)
    assert len(tuner.plan) == 8 == len(set(tuner.plan))
