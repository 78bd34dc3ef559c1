"""``vtakit dse``: --json, --out (best_config.json readable by --config), --plot, and its errors."""

from __future__ import annotations

import json

import pytest

from vtakit.cli import main
from vtakit.errors import DSEError
from vtakit.hw.config import VTAConfig


def _args(opts: dict) -> list[str]:
    return ["dse", "--model", "digits", "--part", "xc7z020", "--trials", str(opts["trials"]), "--batch-size",
            str(opts["batch_size"]), "--parallel", str(opts["n_parallel"]), "--seed", str(opts["seed"])]


def test_dse_json_and_out_dir(small_search, small_options, tmp_path, capsys):
    result, log = small_search
    copy = tmp_path / "log.jsonl"
    copy.write_bytes(log.read_bytes())                    # resumed: nothing is evaluated again
    out = tmp_path / "out"
    assert main([*_args(small_options), "--log", str(copy), "--json", "--out", str(out), "-q"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert copy.read_bytes() == log.read_bytes()
    assert d["best"] == result.best.to_dict() and d["evaluations"] == small_options["trials"]
    assert d["best_cycles"] == result.best_cycles and d["default_cycles"] == result.default_cycles
    assert d["speedup"] == pytest.approx(result.default_cycles / result.best_cycles)
    assert [p["model"] for p in d["pareto"]] == [e.config.model for e in result.pareto]
    names = {p.name for p in out.iterdir()}
    assert {"best_config.json", "pareto.csv", "pareto.json", "best_tuning.log"} <= names
    assert VTAConfig.from_json(out / "best_config.json") == result.best
    csv_lines = (out / "pareto.csv").read_text().splitlines()
    assert len(csv_lines) == len(result.pareto) + 1 and csv_lines[0].startswith("model,")
    tuning = [json.loads(line) for line in (out / "best_tuning.log").read_text().splitlines()]
    assert tuning and all(r["vta_config"] == result.best.to_dict() for r in tuning)
    assert main(["info", "--config", str(out / "best_config.json"), "--json"]) == 0      # readable by --config
    assert json.loads(capsys.readouterr().out)["model"] == result.best.model


def test_dse_table_and_plot(small_search, small_options, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    _, log = small_search
    copy = tmp_path / "log.jsonl"
    copy.write_bytes(log.read_bytes())
    assert main([*_args(small_options), "--log", str(copy), "--plot", str(tmp_path / "p.png"), "-q"]) == 0
    text = capsys.readouterr().out
    assert "Pareto front: digits on xc7z020" in text and "reference (VTAConfig())" in text
    assert (tmp_path / "p.png").stat().st_size > 1000


@pytest.mark.parametrize("argv, status, message", [
    (["--model", "resnet19", "--part", "xc7z020"], 1, "unknown network 'resnet19'"),
    (["--model", "digits", "--part", "xc7z999"], 2, "unknown FPGA part 'xc7z999'"),
    (["--model", "digits", "--part", "xc7z020", "--budget", "0.05"], 1, "the binding resource is "),
    (["--model", "digits", "--part", "xc7z020", "--schedule-trials", "-1"], 1, "--schedule-trials must be >= 0"),
    (["--model", "digits", "--part", "xc7z020", "--trials", "0"], 2, "invalid count '0'"),
    (["--model", "digits", "--part", "xc7z020", "--lut-margin", "1.5"], 1,
     "lut_margin must be a share of the part's LUTs in [0, 1), got 1.5"),
])
def test_dse_errors(argv, status, message, capsys):
    with pytest.raises(SystemExit) if status == 2 else _no_exit() as info:
        code = main(["dse", *argv])
    if status == 2:
        assert info.value.code == 2
    else:
        assert code == status
    assert message in capsys.readouterr().err


class _no_exit:  # noqa: N801 -- stands in for pytest.raises where the command returns
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_lut_margin_reaches_the_search(monkeypatch):
    from vtakit import dse

    seen = {}

    def fake_search(*args, **kwargs):
        seen.update(kwargs)
        raise DSEError("stopped after the options were read")

    monkeypatch.setattr(dse, "search", fake_search)
    assert main(["dse", "--model", "digits", "--part", "xc7z020", "--lut-margin", "0"]) == 1
    assert seen["lut_margin"] == 0.0
    main(["dse", "--model", "digits", "--part", "xc7z020"])
    assert seen["lut_margin"] is None                   # the search's default, the estimate's LUT_MARGIN
