"""Verification of the search's winner: its shortest programs on the RTL equal the cycle model (cycles,
retire cycles, busy cycles, DRAM), the network's outputs equal the integer CPU reference, a
difference is reported, and synthesis confirms the fit (slow)."""

from __future__ import annotations

import json

import pytest

from vtakit import dse
from vtakit.cli import main
from vtakit.dse.verify import verify
from vtakit.errors import DSEError
from vtakit.hw.config import VTAConfig
from vtakit.sim import backend as sim_backend
from vtakit.sim.backend import get_backend


@pytest.fixture(scope="module")
def digits():
    return dse.load_network("digits")


def _small():
    return dse.DesignSpace("xc7z020").clocked(VTAConfig.small())


def test_programs_on_the_rtl_and_the_network_equal_the_models(digits):
    v = verify(digits, _small(), "xc7z020", synth=False, programs=1, backend="rtl")
    assert v.ok and v.network_equal is True and v.fits is None and "synth=False" in v.synth_skipped
    (p,) = v.programs
    assert p.ok and p.backend == "rtl" and p.backend_cycles == p.cycles > 0 and p.instructions > 0
    from vtakit.compiler import graph as vg

    profile = vg.build(digits.graph, "vta", config=_small()).profile(digits.sample, backend="cycle")
    steps = [r for r in profile.layers if r.on_accelerator]
    assert v.programs_total == len(steps) and v.network_cycles == profile.total_cycles
    assert p.cycles == min(r.cycles for r in steps) and p.step == min(steps, key=lambda r: r.cycles).name
    d = v.to_dict()
    assert d["ok"] and d["programs"][0]["ok"] and json.loads(json.dumps(d)) == d
    assert "rtl == cycle: equal" in v.describe()


def _late(launch):
    """A backend: the cycle model, with instruction 3 retiring a cycle late."""
    stats = get_backend("cycle")(launch)
    stats.retire_cycles = list(stats.retire_cycles)
    stats.retire_cycles[3] += 1
    return stats


def test_a_difference_from_the_cycle_model_fails_the_check(digits, monkeypatch):
    monkeypatch.setitem(sim_backend.BACKENDS, "late", f"{__name__}:_late")
    monkeypatch.setattr("vtakit.dse.verify.PROGRAM_BACKENDS", ("late",))
    v = verify(digits, _small(), "xc7z020", synth=False, programs=2, backend="late")
    assert not v.ok and v.network_equal is True
    assert all("instruction 3 retires in cycle" in p.mismatch for p in v.programs)
    assert "FAILED" in v.describe()


def test_bad_arguments(digits):
    with pytest.raises(DSEError, match=r"programs must be an int >= 0.*got -1"):
        verify(digits, _small(), "xc7z020", programs=-1)
    with pytest.raises(DSEError, match=r"unknown program backend 'fsim'"):
        verify(digits, _small(), "xc7z020", synth=False, backend="fsim")
    with pytest.raises(DSEError, match=r"verify must be one of \[None, 'sim', 'full'\], got 'yes'"):
        dse.search("digits", "xc7z020", trials=1, verify="yes")


def test_search_verifies_its_winner(small_search, small_options, tmp_path, capsys, monkeypatch):
    """``vtakit dse --verify sim --out``: the winner's check in --json and verification.json. Without
    Verilator the program runs on the rtl backend (building the winner's Verilator model took 100 s of
    this test; test_random_configurations_fsim_cycle_rtl and the slow full check run Verilator)."""
    monkeypatch.setattr("vtakit.sim.verilator.available", lambda: "no verilator in this test")
    result, log = small_search
    copy = tmp_path / "log.jsonl"
    copy.write_bytes(log.read_bytes())                    # resumed: nothing is evaluated again
    out = tmp_path / "out"
    argv = ["dse", "--model", "digits", "--part", "xc7z020", "--trials", str(small_options["trials"]),
            "--batch-size", str(small_options["batch_size"]), "--parallel", str(small_options["n_parallel"]),
            "--seed", str(small_options["seed"]), "--log", str(copy), "--verify", "sim", "--verify-programs", "1",
            "--json", "--out", str(out), "-q"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    v = d["verification"]
    assert v["ok"] and v["model"] == result.best.model and v["network_equal"] is True
    assert len(v["programs"]) == 1 and v["programs"][0]["ok"] and v["programs"][0]["backend"] == "rtl"
    assert v["synth"] is None
    assert json.loads((out / "verification.json").read_text()) == v


@pytest.mark.slow
def test_full_winner_check_on_a_small_budget(tmp_path):
    """A search within a quarter of the xc7z020 and the full check of its winner: synthesis fits (about a
    minute for a small array), two programs on the RTL, the network bit for bit."""
    result = dse.search("digits", "xc7z020", trials=8, batch_size=4, seed=5, budget=0.25, log=tmp_path / "s.jsonl",
                        verify="full")
    v = result.verification
    assert v["ok"] and v["fits"] is True and v["network_equal"] is True, v["summary"]
    assert len(v["programs"]) == 2 and all(p["ok"] for p in v["programs"])
    for kind in ("lut", "dsp", "bram"):         # the estimate the search used is within 25% of synthesis
        used = v["synth"]["resources"][kind]
        assert abs(v["estimate"][kind] - used) <= 0.25 * max(used, 4), (kind, v["estimate"][kind], used)
