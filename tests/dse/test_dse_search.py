"""The search: API shape on a small search, resume after a kill, reproducibility, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import vtakit
from vtakit import dse
from vtakit.dse import config_key
from vtakit.dse.fingerprint import code_fingerprint, fingerprint_of
from vtakit.dse.log import SearchLog
from vtakit.errors import ConfigError, DSEError
from vtakit.hw.config import VTAConfig
from vtakit.hw.estimate import estimate



def _eval_lines(log: Path) -> list[dict]:
    lines = []
    for line in log.read_text().splitlines():
        try:
            raw = json.loads(line)
        except json.JSONDecodeError:
            continue
        if raw.get("kind") == "eval":
            lines.append(raw)
    return lines


def _front(result) -> list[str]:
    return [e.key for e in result.pareto]


def test_api_shape(small_search, small_options, tmp_path):
    result, log = small_search
    opts = small_options
    assert isinstance(result, dse.DSEResult)
    assert len(result.evaluations) == opts["trials"]
    assert isinstance(result.best, VTAConfig)
    assert result.pareto and result.best_evaluation in result.pareto
    for e in result.pareto:
        assert e.ok and e.fits and e.latency_s > 0 and 0 < e.largest_fraction <= 1
        assert e.cycles >= e.ideal_cycles > 0 and e.fmax_mhz == 100.0
    lat = [e.latency_s for e in result.pareto]
    frac = [e.largest_fraction for e in result.pareto]
    assert lat == sorted(lat) and frac == sorted(frac, reverse=True)   # a front: faster costs more
    table = result.table()
    assert "Pareto front: digits on xc7z020" in table and result.best.model in table
    d = result.to_dict()
    for key in ("best", "best_cycles", "default_cycles", "speedup", "resources", "pareto", "evaluations"):
        assert key in d
    assert VTAConfig.from_dict(d["best"]) == result.best
    assert d["speedup"] == pytest.approx(d["default_cycles"] / d["best_cycles"])
    assert d["resources"]["fits"] and set(d["resources"]) >= {"lut", "ff", "dsp", "bram"}
    assert d["evaluations"] == opts["trials"] and len(d["pareto"]) == len(result.pareto)
    assert d["space"]["part"] == "xc7z020" and d["space"]["knobs"]["bus_width"] == [32, 64]
    assert d["space"]["points"] == np.prod([len(v) for v in d["space"]["knobs"].values()])
    assert result.reference.config.replace(clock_mhz=100.0, dram_latency=32) == VTAConfig()
    pytest.importorskip("matplotlib")
    result.plot(tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_every_evaluated_config_validates_fits_and_is_logged_once(small_search, small_options):
    result, log = small_search
    opts = small_options
    lines = _eval_lines(log)
    keys = [json.dumps(r["config"], sort_keys=True) for r in lines]
    reference_apart = not result.reference.fits                         # else it is one of the trials
    assert len(keys) == len(set(keys)) == opts["trials"] + reference_apart
    assert {e.key for e in result.evaluations} | {result.reference.key} == set(keys)
    for raw in lines:
        config = VTAConfig.from_dict(raw["config"])                     # validates
        if raw["round"] >= 0:
            assert estimate(config, "xc7z020").fits and raw["status"] == "ok"
    rounds = sorted(e.round for e in result.evaluations)
    assert rounds == [-1] * (1 - reference_apart) + [0] * (3 + reference_apart) + [1] * 4


def test_the_log_shows_block_buffer_bus_and_feature_keys_varied(small_search):
    """Even the 8 evaluations of the small search move every key of the array (BATCH aside: the network's is
    1), of the SRAMs, of the bus and of the features."""
    _, log = small_search
    configs = [VTAConfig.from_dict(r["config"]) for r in _eval_lines(log)]
    keys = ["log_block_in", "log_block_out", "log_inp_buff_size", "log_wgt_buff_size", "log_acc_buff_size",
            "bus_width", "alu_mul", "alu_requant", "bias_preload", "gemm_out_requant"]
    fixed = [k for k in keys if len({getattr(c, k) for c in configs}) < 2]
    assert not fixed, f"{fixed} took one value over {len(configs)} evaluations"


def test_same_seed_and_log_give_the_same_front(small_search, small_options, tmp_path):
    result, log = small_search
    opts = small_options
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(log.read_bytes())
    again = dse.search("digits", "xc7z020", log=copy, **opts)
    assert _front(again) == _front(result) and again.best == result.best
    assert copy.read_bytes() == log.read_bytes()                       # nothing evaluated again


def test_a_killed_search_resumes_with_nothing_lost_or_repeated(small_search, small_options, tmp_path):
    result, log = small_search
    opts = small_options
    lines = log.read_bytes().split(b"\n")
    killed = tmp_path / "killed.jsonl"
    kept = lines[:7]                                                   # round 0 (4 lines) and 3 of round 1
    killed.write_bytes(b"\n".join(kept) + b"\n" + lines[7][: len(lines[7]) // 2])   # killed mid-line
    with pytest.warns(UserWarning, match="skipped its last line"):
        resumed = dse.search("digits", "xc7z020", log=killed, **opts)
    evals = _eval_lines(killed)
    keys = [json.dumps(r["config"], sort_keys=True) for r in evals]
    assert len(keys) == len(set(keys)) == len(_eval_lines(log))         # only the missing ones were evaluated
    assert {e.key for e in resumed.evaluations} == {e.key for e in result.evaluations}
    assert _front(resumed) == _front(result)


def test_a_log_of_another_part_is_ignored_with_a_note(small_search, tmp_path):
    _, log = small_search
    other = tmp_path / "other.jsonl"
    other.write_text(log.read_text().replace('"part":"xc7z020"', '"part":"ecp5-85k"'))
    space = dse.DesignSpace("xc7z020")
    contents = SearchLog(other, "digits", "xc7z020", space.budget).load()
    lines = len(_eval_lines(log))
    assert not contents.evaluations and f"ignored {lines} record(s) of another network, part or budget" in \
        contents.notes[0]


def test_an_error_record_is_evaluated_again_on_resume(small_search, small_options, tmp_path):
    """An error in the log may be the machine's (a killed worker, code changing under the search): resuming
    evaluates that configuration again, and the front is the one of the log without the error."""
    result, log = small_search
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    at = min(range(len(lines)), key=lambda i: records[i]["seconds"])   # the quickest to evaluate again
    raw = records[at]
    assert raw["kind"] == "eval" and raw["status"] == "ok"
    broken = {**raw, "status": "error", "message": "the evaluation job failed: BrokenProcessPool", "tasks": [],
              "network_cycles": None}
    flaky = tmp_path / "flaky.jsonl"
    flaky.write_text("\n".join([*lines[:at], json.dumps(broken, separators=(",", ":")), *lines[at + 1:]]) + "\n")
    again = dse.search("digits", "xc7z020", log=flaky, **small_options)
    evals = _eval_lines(flaky)
    assert len(evals) == len(lines) + 1 and evals[-1]["config"] == raw["config"] and evals[-1]["status"] == "ok"
    assert evals[-1]["network_cycles"] == raw["network_cycles"]           # deterministic
    assert _front(again) == _front(result)
    contents = SearchLog(flaky, "digits", "xc7z020", dse.DesignSpace("xc7z020").budget).load()
    assert contents.evaluations[config_key(VTAConfig.from_dict(raw["config"]))].ok   # the later line stands


def test_a_version_1_log_is_evaluated_again_with_a_note(small_search, tmp_path):
    """Version 1 lines hold no whole-network cycles: ignored (no warning per line), one note."""
    _, log = small_search
    old = tmp_path / "old.jsonl"
    old.write_text(log.read_text().replace('"version":2', '"version":1'))
    contents = SearchLog(old, "digits", "xc7z020", dse.DesignSpace("xc7z020").budget).load()
    lines = len(_eval_lines(log))
    assert not contents.evaluations and f"ignored {lines} version-1 record(s)" in contents.notes[0]


def test_random_strategy_and_the_model_propose_differently(small_search, small_options):
    result, _ = small_search
    opts = small_options
    net = dse.load_network("digits")
    space = dse.DesignSpace("xc7z020", net.batch)
    xgb = dse.Searcher(net, space, strategy="xgb", seed=opts["seed"])
    rnd = dse.Searcher(net, space, strategy="random", seed=opts["seed"])
    first = result.evaluations[:opts["batch_size"]]                    # round 0 (with the reference)
    round0 = {e.key for e in first}                                     # round 0 is random for both
    assert {config_key(c) for c in xgb.propose(0, 4)} == {config_key(c) for c in rnd.propose(0, 4)} == round0
    xgb.history = rnd.history = first
    a, b = xgb.propose(1, 4), rnd.propose(1, 4)
    assert len(a) == len(b) == 4 and a != b
    for r in range(2, 5):                                              # batches never repeat a configuration
        batch = xgb.propose(r, 8)
        keys = {config_key(c) for c in batch}
        assert len(keys) == len(batch) == 8 and not keys & {e.key for e in first}
    again = dse.Searcher(net, space, strategy="xgb", seed=opts["seed"])
    again.history = first
    assert again.propose(1, 4) == a                                    # deterministic


@pytest.mark.parametrize("network, match", [
    ("resnet19", r"unknown network 'resnet19'.*expected one of \['resnet18', 'digits'\]"),
    ("missing.onnx", r"unknown network 'missing.onnx' \(no such file\)"),
    (42, r"unknown network 42"),
])
def test_unknown_network(network, match):
    with pytest.raises(DSEError, match=match):
        dse.search(network, "xc7z020", trials=1)


def test_bad_arguments():
    with pytest.raises(ConfigError, match=r"unknown FPGA part 'zynq'"):
        dse.search("digits", "zynq", trials=1)
    with pytest.raises(DSEError, match=r"trials must be an int >= 1, got 0"):
        dse.search("digits", "xc7z020", trials=0)
    with pytest.raises(DSEError, match=r"unknown strategy 'grid'"):
        dse.search("digits", "xc7z020", strategy="grid")
    with pytest.raises(DSEError, match=r"binding resource is DSP"):
        dse.search("digits", "xc7z020", budget={"dsp": 0.01})


def test_pareto_front_is_the_non_dominated_set():
    def ev(lat: int, frac: float, tag: int) -> dse.Evaluation:
        config = VTAConfig.small(cmd_queue_depth=tag)
        return dse.Evaluation(config, "ok", fmax_mhz=1.0, largest_fraction=frac,
                              tasks=(dse.TaskCycles("vta.dense", (1, 1, 1), 1, lat, 1),))
    points = [ev(10, 0.9, 1), ev(20, 0.5, 2), ev(20, 0.6, 3), ev(30, 0.5, 4), ev(40, 0.1, 5), ev(15, 0.95, 6)]
    front = dse.pareto_front(points)
    assert [(e.cycles, e.largest_fraction) for e in front] == [(10, 0.9), (20, 0.5), (40, 0.1)]
    failed = dse.Evaluation(VTAConfig.small(cmd_queue_depth=7), "error", "boom")
    assert dse.pareto_front([failed]) == [] and failed.latency_s == float("inf")


def test_a_batch_never_holds_a_configuration_twice():
    """Two of the fastest configurations two knob steps apart share a neighbour: proposed once."""
    net = dse.Network("stub", None, 1, {})
    space = dse.DesignSpace("xc7z020")
    base = space.reference()
    a = space.clocked(base.replace(dram_outstanding=2))
    b = space.clocked(base.replace(dram_outstanding=8))          # a and b share the neighbour with 4

    def ev(config, cycles):
        return dse.Evaluation(config, "ok", fmax_mhz=100.0, tasks=(dse.TaskCycles("vta.dense", (1, 1, 1), 1,
                                                                                   cycles, 1),))
    searcher = dse.Searcher(net, space, seed=0)
    searcher.history = [ev(a, 100), ev(b, 101), ev(space.smallest(), 900)]
    batch = searcher.propose(1, 1000)
    keys = [config_key(c) for c in batch]
    assert len(keys) == len(set(keys)) > 256
    assert config_key(space.clocked(base.replace(dram_outstanding=4))) in keys


# ---------------------------------------------------------------------- the code fingerprint
def _fingerprint_of(log: Path) -> str:
    return json.loads(log.read_text().splitlines()[0])["fingerprint"]


def test_every_record_carries_the_running_codes_fingerprint(small_search):
    _, log = small_search
    prints = {json.loads(line)["fingerprint"] for line in log.read_text().splitlines()}
    assert prints == {code_fingerprint()} and code_fingerprint().startswith(f"{vtakit.__version__}-")


def test_records_of_other_code_are_ignored_with_a_warning_that_counts_them(small_search, tmp_path):
    """A log written before the cycle model (or the compiler, the estimator...) changed is not reused:
    one warning says how many records were ignored and of which fingerprint; newer records stand."""
    _, log = small_search
    lines = log.read_text().splitlines()
    mine = _fingerprint_of(log)
    stale = [line.replace(f'"fingerprint":"{mine}"', '"fingerprint":"0.0.9-0123456789abcdef"') for line in lines[:3]]
    unprinted = [json.dumps({k: v for k, v in json.loads(line).items() if k != "fingerprint"}) for line in lines[3:5]]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([*stale, *unprinted, *lines[5:]]) + "\n")
    with pytest.warns(UserWarning) as caught:
        contents = SearchLog(mixed, "digits", "xc7z020", dse.DesignSpace("xc7z020").budget).load()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert (f"ignored 5 record(s) measured by other code (code fingerprint 3 of 0.0.9-0123456789abcdef, 2 of none; "
            f"this code's is {mine})") in messages[0]
    assert messages[0] in contents.notes
    kept = {config_key(VTAConfig.from_dict(json.loads(line)["config"])) for line in lines[5:]}
    assert set(contents.evaluations) == kept and len(kept) == len(lines) - 5


def test_a_malformed_log_keeps_its_readable_records_and_warns_for_each_other_line(small_search, tmp_path):
    _, log = small_search
    lines = log.read_text().splitlines()
    first = json.loads(lines[1])
    bad_status = json.dumps({**first, "status": "fine"})
    no_config = json.dumps({k: v for k, v in first.items() if k != "config"})
    wrong_kind = json.dumps({**first, "kind": "guess"})
    broken = tmp_path / "broken.jsonl"
    body = [lines[0], "not json at all", "[1, 2, 3]", bad_status, no_config, wrong_kind, "", *lines[1:]]
    broken.write_text("\n".join(body) + "\n" + lines[1][:40])      # and a line cut by a kill
    with pytest.warns(UserWarning) as caught:
        contents = SearchLog(broken, "digits", "xc7z020", dse.DesignSpace("xc7z020").budget).load()
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 6, messages
    assert all("not a readable record" in m for m in messages)
    assert any("line 2," in m for m in messages) and any("status 'fine' is not one of" in m for m in messages)
    assert any("unknown kind 'guess'" in m for m in messages) and any("skipped its last line" in m for m in messages)
    assert set(contents.evaluations) == {config_key(VTAConfig.from_dict(json.loads(x)["config"])) for x in lines}


def test_the_fingerprint_follows_the_code_that_computes_the_figures(tmp_path):
    root = tmp_path / "pkg"
    (root / "sim").mkdir(parents=True)
    (root / "sim" / "cycle.py").write_text("LATENCY = 4\n")
    (root / "sim" / "__pycache__").mkdir()
    (root / "cli.py").write_text("print('hi')\n")
    sources = ("sim",)
    before = fingerprint_of(root, sources, "1.0")
    assert before.startswith("1.0-") and len(before) == len("1.0-") + 16
    (root / "cli.py").write_text("print('bye')\n")                              # not a timing source
    (root / "sim" / "__pycache__" / "cycle.cpython-311.pyc").write_bytes(b"\0")  # nor a compiled cache
    assert fingerprint_of(root, sources, "1.0") == before
    (root / "sim" / "cycle.py").write_text("LATENCY = 5\n")
    changed = fingerprint_of(root, sources, "1.0")
    assert changed != before
    assert fingerprint_of(root, sources, "1.1") != changed                       # the version counts too
    with pytest.raises(FileNotFoundError, match="hw"):
        fingerprint_of(root, ("sim", "hw"), "1.0")
    assert code_fingerprint() == fingerprint_of(Path(vtakit.__file__).resolve().parent, version=vtakit.__version__)
