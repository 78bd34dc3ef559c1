"""RunStats as a user prints it: a short summary, the retire list only when asked for."""

from __future__ import annotations

import re

from vtakit.sim.stats import COUNTER_NAMES, RunStats


def _timed(n: int) -> RunStats:
    counters = dict.fromkeys(COUNTER_NAMES, 0) | {"gemm_counter": 500, "alu_counter": 7}
    per_module = {"fetch": 1, "load": 2, "compute": 3, "store": 4}
    return RunStats("cycle", counters, cycles=1000, retire_cycles=list(range(10_000, 10_000 + n)),
                    busy_cycles=per_module, token_stall_cycles=per_module, memory_stall_cycles=per_module,
                    idle_cycles=per_module, dram_read_bytes=4096, dram_write_bytes=512, sim_seconds=0.25)


def test_print_is_one_short_line_without_the_retire_list():
    text = str(_timed(5000))
    assert "\n" not in text and len(text) < 200
    assert text == ("RunStats(backend='cycle', cycles=1000, utilization=50.0%, gemm_counter=500, alu_counter=7, "
                    "retire_cycles=[5000 instructions], sim_seconds=0.250)")
    assert repr(RunStats("fsim")) == "RunStats(backend='fsim', gemm_counter=0, alu_counter=0, sim_seconds=0.000)"


def test_describe_lists_retire_cycles_only_on_request():
    stats = _timed(3)
    short = stats.describe()
    assert re.search(r"^utilization +50\.0%$", short, re.M) and re.search(r"^dram read bytes +4096$", short, re.M)
    assert "busy cycles" in short and "fetch 1, load 2, compute 3, store 4" in short
    assert "3 instructions (describe(retire_cycles=True) lists them)" in short and "10001" not in short
    assert stats.describe(retire_cycles=True).splitlines()[-1].split()[-3:] == ["10000", "10001", "10002"]
    assert "retire cycles" not in RunStats("fsim").describe()
