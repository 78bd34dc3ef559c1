"""The co-design search loop: :func:`search` (docs/dse.md).

The search runs in rounds. Each round proposes a deterministic batch of valid, fitting
configurations (:class:`~vtakit.dse.space.DesignSpace`): in round 0, ``VTAConfig()`` on the part
when it fits (so the search is never worse than VTA's default) and the rest at random; at random
for the ``random`` strategy; else the candidates the latency model (:class:`~vtakit.dse.model.LatencyModel`,
trained on every earlier round's results, sorted by configuration) rates fastest, with one random
pick per batch. The reference is evaluated with round 0's other proposals when it fits (its record
says round -1), before the rounds when it does not. Every configuration of a batch is one job on the
tuner's executor (local worker processes, or dask.distributed):
:func:`~vtakit.dse.evaluate.evaluate_job` measures the network's tasks with default tilings on the
cycle model. Results are appended to the log as they arrive.

A round's batch depends only on the seed, the round number and the earlier rounds' results, so a
search given its log replays the same batches, takes what the log holds and evaluates only the
rest: a killed search resumes with nothing lost and nothing evaluated twice, and the same seed and
log give the same Pareto front. An *error* record of the log is evaluated again (it may be the
machine's, not the configuration's). After the rounds, the ``top_k`` fastest fitting configurations and
the reference (``VTAConfig()`` on the part) get their schedules tuned with the XGB tuner for
``schedule_trials`` trials each (split over the network's tasks by weight), each into its own
tuning log, which the tuner resumes in the same way.
"""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from vtakit.compiler.autotune.measure import LocalBuilder, LocalRunner, MeasureOption, dask_executor
from vtakit.compiler.autotune.task import extract_tasks, split_trials
from vtakit.compiler.autotune.tuner.xgb import XGBTuner
from vtakit.dse.evaluate import Evaluation, NetworkCycles, TaskCycles, evaluate_job, ideal_cycles, network_cycles
from vtakit.dse.log import SearchLog
from vtakit.dse.model import LatencyModel
from vtakit.dse.network import Network, load_network
from vtakit.dse.result import DSEResult
from vtakit.dse.space import DesignSpace, config_key
from vtakit.errors import DSEError
from vtakit.hw.config import VTAConfig
from vtakit.hw.parts import get_part
from vtakit.progress import progress

__all__ = ["search", "STRATEGIES", "Searcher"]

#: How the next configurations are chosen: the latency model, or uniformly at random.
STRATEGIES = ("xgb", "random")
#: What ``verify`` may ask for: nothing, the simulations only, or synthesis too.
VERIFY_MODES = (None, "sim", "full")
#: Random candidates the model rates per round (besides the neighbours of the best so far).
POOL_SIZE = 256
#: How many of the fastest configurations so far contribute their neighbours to the pool.
NEIGHBOUR_PARENTS = 4


def search(network: Any, part: str, *, trials: int = 32, schedule_trials: int = 0, top_k: int = 3,
           strategy: str = "xgb", seed: int = 0, batch_size: int = 8, calibration: Any = None,
           budget: float | Mapping[str, float] = 1.0, log: str | Path | None = None,
           tuning_dir: str | Path | None = None, dask: str | None = None, n_parallel: int | None = None,
           timeout: float = 120.0, measure_cpu: bool = False, image: int = 224, verify: str | None = None,
           verify_programs: int = 2, lut_margin: float | None = None) -> DSEResult:
    """Search accelerator configurations (and, for the best, schedules) for ``network`` on ``part``.

    ``network``: ``"resnet18"``, ``"digits"``, an ``.onnx`` path (``calibration`` quantises a float
    one), an onnx ``ModelProto`` or a quantised :class:`vtakit.graph.Graph`. ``trials``: how many
    configurations to evaluate (the reference ``VTAConfig()`` comes on top). ``schedule_trials``: the
    tuning budget of each of the ``top_k`` fastest configurations and of the reference (0: no
    tuning, default tilings only). ``strategy``: ``xgb`` (the latency model) or ``random``.
    ``budget``: the share of the part every resource may use (or a share per kind, e.g.
    ``{"bram": 0.85}``); ``lut_margin``: the share of the LUTs held back for the estimate's error
    (default :data:`vtakit.hw.estimate.LUT_MARGIN`; :class:`~vtakit.dse.space.DesignSpace`), so the
    LUT budget is at most ``1 - lut_margin``. ``log``: the search log (JSON lines) to resume from and append to; the
    tuning logs go to ``tuning_dir`` (default: ``<log>.tuning/``, else a temporary directory).
    ``dask``: a scheduler address or ``local:N``; else ``n_parallel`` local worker processes.
    ``measure_cpu``: also build the best and the reference network and profile its CPU part.
    ``verify``: check the best configuration afterwards (:func:`vtakit.dse.verify.verify`; the result's
    ``verification``): ``"full"`` synthesises it too, ``"sim"`` runs ``verify_programs`` of its programs
    on the RTL and the network against the CPU reference only."""
    _check_args(trials, schedule_trials, top_k, strategy, seed, batch_size, timeout)
    if verify not in VERIFY_MODES:
        raise DSEError(f"verify must be one of {list(VERIFY_MODES)}, got {verify!r}")
    part_name = get_part(part).name
    net = load_network(network, calibration, image=image)
    space = DesignSpace(part_name, net.batch, budget, lut_margin=lut_margin)
    space.check_nonempty()
    result = Searcher(net, space, strategy=strategy, seed=seed, batch_size=batch_size, log=log,
                      tuning_dir=tuning_dir, timeout=timeout).run(trials, schedule_trials, top_k, dask, n_parallel,
                                                                   measure_cpu)
    if verify is not None:
        from vtakit.dse.verify import verify as check  # noqa: PLC0415

        best = result.best_evaluation
        result.verification = check(net, best.config, part_name, tuning_log=result.tuning_logs.get(best.key),
                                    synth=verify == "full", programs=verify_programs).to_dict()
    return result


def _check_args(trials: int, schedule_trials: int, top_k: int, strategy: str, seed: int, batch_size: int,
                timeout: float) -> None:
    for name, value, low in (("trials", trials, 1), ("schedule_trials", schedule_trials, 0), ("top_k", top_k, 1),
                             ("seed", seed, 0), ("batch_size", batch_size, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise DSEError(f"{name} must be an int >= {low}, got {value!r}")
    if strategy not in STRATEGIES:
        raise DSEError(f"unknown strategy {strategy!r}; expected one of {list(STRATEGIES)}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise DSEError(f"timeout must be a positive number of seconds, got {timeout!r}")


class Searcher:
    """One search: the space, the log, the rounds so far (see the module docstring)."""

    def __init__(self, network: Network, space: DesignSpace, *, strategy: str = "xgb", seed: int = 0,
                 batch_size: int = 8, log: str | Path | None = None, tuning_dir: str | Path | None = None,
                 timeout: float = 120.0) -> None:
        self.net = network
        self.space = space
        self.strategy = strategy
        self.seed = seed
        self.batch_size = batch_size
        self.timeout = timeout
        self.log = SearchLog(log, network.name, space.part.name, space.budget)
        self.log_path = None if log is None else str(log)
        self.tuning_dir = Path(tuning_dir) if tuning_dir is not None else (
            Path(f"{log}.tuning") if log is not None else None)
        self.history: list[Evaluation] = []     # this search's evaluations, round by round, sorted in a round
        self.model = LatencyModel(seed)

    # ------------------------------------------------------------------ the run
    def run(self, trials: int, schedule_trials: int = 0, top_k: int = 3, dask: str | None = None,
            n_parallel: int | None = None, measure_cpu: bool = False) -> DSEResult:
        logged = self.log.load()
        notes = list(logged.notes)
        with ExitStack() as stack:
            stack.callback(self.log.close)
            executor = None
            if dask:
                executor, client = dask_executor(dask)
                stack.callback(client.close)
                n_parallel = n_parallel or sum(w.get("nthreads", 1) for w in
                                               client.scheduler_info()["workers"].values())
            option = MeasureOption(LocalBuilder(timeout=self.timeout, n_parallel=n_parallel),
                                   LocalRunner(timeout=self.timeout), executor)
            pool = stack.enter_context(option.open_executor())
            option = MeasureOption(option.builder, option.runner, pool)
            known = dict(logged.evaluations)   # every evaluation of the log and of this run, by config key
            ref_key = config_key(self.space.reference())
            if not self.space.fit(self.space.reference()).fits:   # else round 0 evaluates it beside its others
                known[ref_key] = self._reference(pool, known)
            self._rounds(pool, trials, known)
            reference = known[ref_key] if ref_key in known else self._reference(pool, known)
            mine = {e.key for e in self.history} | {reference.key}
            extra = [e for k, e in logged.evaluations.items() if k not in mine]
            if extra:
                notes.append(f"{len(extra)} evaluation(s) of the log were not proposed by this search (another seed "
                             "or strategy); they join the results")
            evaluations = self.history + extra
            tuning_logs: dict[str, str] = {}
            if schedule_trials:
                self._tune_top(evaluations, reference, schedule_trials, top_k, option, logged.tuned, tuning_logs)
        result = DSEResult(self.net.name, self.space.part.name, self.space.budget, self.strategy, self.seed,
                           evaluations, reference, schedule_trials, tuning_logs, notes=notes, log=self.log_path,
                           space=self.space.describe())
        if measure_cpu:
            result.cpu_seconds = self._cpu_part(result, tuning_logs)
        return result

    def _reference(self, pool: Any, logged: dict[str, Evaluation]) -> Evaluation:
        ref = self.space.reference()
        key = config_key(ref)
        if _reusable(logged, key):
            return logged[key]
        return self._collect(pool, [ref], -1, reference=True)[0]

    def _rounds(self, pool: Any, trials: int, logged: dict[str, Evaluation]) -> None:
        with progress(f"dse: {self.net.name} on {self.space.part.name}", total=trials, unit="config",
                      delay=0) as bar:
            r = 0
            while len(self.history) < trials:
                batch = self.propose(r, min(self.batch_size, trials - len(self.history)))
                if not batch:
                    break   # nothing valid and fitting is left to propose
                reused = {config_key(c): logged[config_key(c)] for c in batch if _reusable(logged, config_key(c))}
                todo = [c for c in batch if config_key(c) not in reused]
                bar.advance(len(reused))
                fresh = self._collect(pool, todo, r, bar=bar) if todo else []
                logged.update((e.key, e) for e in fresh)
                results = sorted([*reused.values(), *fresh], key=lambda e: e.key)
                self.history.extend(results)
                best = min((e.latency_s for e in self.history), default=float("inf"))
                if best < float("inf"):
                    bar.step(f"best {best * 1e3:.3f} ms")
                r += 1

    def _collect(self, pool: Any, configs: list[VTAConfig], round_: int, reference: bool = False,
                 bar: Any = None) -> list[Evaluation]:
        """Evaluate ``configs`` as jobs on ``pool``; each result is logged as it arrives. The reference
        (``VTAConfig()`` on the part) is always evaluated as such: round -1, measured even if it does not fit."""
        futures: dict[Future, VTAConfig] = {}
        ref_key = config_key(self.space.reference())
        for config in configs:
            is_ref = reference or config_key(config) == ref_key
            futures[pool.submit(evaluate_job, self.net.graph, config.to_dict(), self.space.part.name,
                                self.space.budget, self.space.max_batch, self.timeout, -1 if is_ref else round_,
                                is_ref, self.net.sample, self.net.expected())] = config
        out = []
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: config_key(futures[f])):
                    ev = self._result_of(fut, futures[fut], -1 if config_key(futures[fut]) == ref_key else round_)
                    self.log.append_eval(ev)
                    out.append(ev)
                    if bar is not None:
                        bar.advance()
        finally:
            for fut in futures:
                fut.cancel()
        return out

    def _result_of(self, fut: Future, config: VTAConfig, round_: int) -> Evaluation:
        try:
            return Evaluation.from_record(fut.result())
        except Exception as exc:   # the executor lost the job (a killed worker, a broken pool)
            return Evaluation(config, "error", f"the evaluation job failed: {type(exc).__name__}: {exc}",
                              fmax_mhz=config.clock_mhz, round=round_)

    # ------------------------------------------------------------------ proposing
    def propose(self, round_: int, n: int) -> list[VTAConfig]:
        """The batch of round ``round_``: ``n`` configurations not yet in this search's history."""
        rng = np.random.default_rng([self.seed, round_])
        seen = {e.key for e in self.history}
        measured = [e for e in self.history if e.ok]
        if round_ == 0:   # VTA's default first when it fits (the search is then never worse), then at random
            ref = self.space.reference()
            first = [ref] if self.space.fit(ref).fits and config_key(ref) not in seen and n > 0 else []
            return first + self.space.sample(rng, n - len(first), seen | {config_key(c) for c in first})
        if self.strategy == "random" or len(measured) < 2:
            return self.space.sample(rng, n, seen)
        # the model learns latency x MACs (time per ideal cycle: how well the array is used) and the array
        # size enters analytically, so a larger array than any measured one is rated by what it adds
        # (trees do not extrapolate: rated on latency, 512 MACs would look like the best 256-MAC point)
        self.model.fit(np.stack([self.space.features(e.config) for e in self.history]),
                       [e.latency_s * e.config.macs_per_cycle for e in self.history])
        pool = self.space.sample(rng, POOL_SIZE, seen)
        taken = seen | {config_key(c) for c in pool}
        for parent in sorted(measured, key=lambda e: (e.latency_s, e.key))[:NEIGHBOUR_PARENTS]:
            near = self.space.neighbours(parent.config, taken)
            taken |= {config_key(c) for c in near}   # two parents may share a neighbour: propose it once
            pool.extend(near)
        if not pool:
            return []
        scores = self.model.predict(np.stack([self.space.features(c) for c in pool])) \
            - np.log([c.macs_per_cycle for c in pool])
        order = [int(i) for i in np.argsort(scores, kind="stable")]
        greedy = n - 1 if n > 1 else n
        batch = [pool[i] for i in order[:greedy]]
        rest = [pool[i] for i in order[greedy:]]
        if len(batch) < n and rest:
            batch.append(rest[int(rng.integers(len(rest)))])
        return batch

    # ------------------------------------------------------------------ tuning the top configurations
    def _tune_top(self, evaluations: list[Evaluation], reference: Evaluation, schedule_trials: int, top_k: int,
                  option: MeasureOption,
                  logged: dict[tuple[str, int], tuple[tuple[TaskCycles, ...], NetworkCycles | None]],
                  tuning_logs: dict[str, str]) -> None:
        fitting = sorted((e for e in evaluations if e.ok and e.fits), key=lambda e: (e.latency_s, e.key))
        chosen = fitting[:top_k] + ([reference] if reference.ok and reference not in fitting[:top_k] else [])
        directory = self.tuning_dir or Path(_temp_dir())
        directory.mkdir(parents=True, exist_ok=True)
        for k, ev in enumerate(chosen):
            path = directory / f"{ev.config.model}-{_short_hash(ev.key)}.log"
            tuning_logs[ev.key] = str(path)
            done = logged.get((ev.key, schedule_trials))
            if done is None:
                ev.tuned = self._tune(ev, schedule_trials, option, path, f"dse: tuning {k + 1}/{len(chosen)}")
                if ev.network is not None:   # the whole network with the tuned schedules
                    ev.tuned_network, _ = network_cycles(self.net.graph, ev.config, self.net.sample,
                                                         self.net.expected(), tuning_log=str(path))
                self.log.append_tuned(ev, schedule_trials, str(path))
            else:
                ev.tuned, ev.tuned_network = done
            ev.schedule_trials = schedule_trials

    def _tune(self, ev: Evaluation, schedule_trials: int, option: MeasureOption, path: Path,
              title: str) -> tuple[TaskCycles, ...]:
        tasks = extract_tasks(self.net.graph, target="vta", config=ev.config)
        shares = split_trials(tasks, schedule_trials)
        if not path.exists():   # the default tilings' trials, measured already: the tuner resumes them
            path.write_text("".join(t + "\n" for t in ev.trials))
        out = []
        with progress(f"{title} {ev.config.model}", total=sum(shares), unit="trial", delay=0) as bar:
            for task, share in zip(tasks, shares):
                tuner = XGBTuner(task, plan_size=min(64, max(8, share // 4)), seed=self.seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # notes on the log's other tasks: expected here
                    summary = tuner.tune(share, option, log_file=path,
                                         callbacks=[lambda *_: bar.advance()])
                default = next((t.cycles for t in ev.tasks if t.template == task.name and t.args == task.args), None)
                cost = summary.best_cost if summary.best_cost < float("inf") else default
                if cost is None:
                    raise DSEError(f"tuning {task} on {ev.config.model}: no valid schedule in {share} trials")
                out.append(TaskCycles(task.name, task.args, task.count, int(cost), ideal_cycles(task)))
        return tuple(out)

    # ------------------------------------------------------------------ the CPU part
    def _cpu_part(self, result: DSEResult, tuning_logs: dict[str, str]) -> dict[str, float]:
        from vtakit.compiler import graph as vg  # noqa: PLC0415 -- network builds only when asked

        out = {}
        for name, ev in (("best", result.best_evaluation), ("default", result.reference)):
            if not ev.ok:
                continue
            log = tuning_logs.get(ev.key)
            module = vg.build(self.net.graph, "vta", config=ev.config, tuning_log=log)
            profile = module.profile(self.net.sample, backend="cycle")
            out[name] = float(profile.cpu_seconds)
        return out



def _reusable(logged: dict[str, Evaluation], key: str) -> bool:
    """Whether the log's evaluation of ``key`` stands; an error (a worker killed, a timeout under load, code
    changing under a running search) is evaluated again."""
    return key in logged and logged[key].status != "error"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _temp_dir() -> str:
    return tempfile.mkdtemp(prefix="vtakit-dse-")
