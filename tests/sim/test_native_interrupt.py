"""Ctrl-C during a run of a compiled core (vtakit/sim/csrc): it answers promptly, and changes nothing.

The functional core releases the GIL and takes it back between slices of about 50 ms to run
Python's signal handlers; the timing core holds the GIL and checks for signals every few thousand
solver steps. A signal whose handler raises (SIGINT's raises KeyboardInterrupt) ends the run with
that exception, DRAM as it was before the run. Here a timer signal plays Ctrl-C in the middle of
runs that would last many seconds; afterwards the cores give the same results as before.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import numpy as np
import pytest

from tests.sim.test_cycle import _launch, _load
from tests.sim.test_cycle_native import _word
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import FinishInsn, GemmInsn, MemId, MemInsn, Opcode, Uop
from vtakit.sim import cycle, fsim, native

DEFAULT = VTAConfig()
INTERRUPT_AFTER = 0.2      # seconds
# CPU seconds the process may spend from the start of the run to the exception: the signal comes
# after at most INTERRUPT_AFTER of them, the rest is the core's answer (CPU time, not wall time,
# so that a loaded machine, which deschedules the test, does not make it fail).
PROMPT = 1.0


@pytest.fixture(autouse=True)
def cores(monkeypatch):
    monkeypatch.setenv("VTAKIT_NATIVE", "1")
    if not hasattr(signal, "setitimer"):
        pytest.skip("no interval timer signals on this platform")
    if native.core("_fsim_core") is None or native.core("_timing_core") is None:
        if os.environ.get("VTAKIT_REQUIRE_NATIVE") == "1":
            pytest.fail("the compiled cores are not built")
        pytest.skip("the compiled cores are not built")


@contextmanager
def ctrl_c_after(seconds: float):
    """Raise KeyboardInterrupt in the main thread ``seconds`` from now, from a real signal, as Ctrl-C does."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _gemm_after_store(iter_in: int) -> list:
    """A STORE to DRAM, then a GEMM of 2048 x ``iter_in`` x 8 micro-ops (16383: about 10^11 MACs)."""
    acc = DEFAULT.acc_depth
    return [_load(MemId.UOP, 0, 0x100 // 4, 1, 8),
            _load(MemId.INP, 0, 0x1000 // DEFAULT.inp_elem_bytes, 1, 1),
            _load(MemId.WGT, 0, 0x2000 // DEFAULT.wgt_elem_bytes, 1, 1, push_next=True),
            GemmInsn(reset_reg=True, pop_prev=True, push_next=True, uop_bgn=0, uop_end=1, iter_out=acc, iter_in=1,
                     dst_factor_out=1),
            MemInsn(opcode=Opcode.STORE, memory_type=MemId.OUT, sram_base=0, dram_base=0x3000 // 16, y_size=1,
                    x_size=4, x_stride=4, pop_prev=True, push_prev=True),
            GemmInsn(pop_next=True, uop_bgn=0, uop_end=8, iter_out=acc, iter_in=iter_in, dst_factor_out=1),
            FinishInsn()]


def _uops() -> list[Uop]:
    return [Uop(0, 0, 0)] * 8


def test_functional_core_answers_ctrl_c_and_restores_dram():
    _, launch = _launch(DEFAULT, _gemm_after_store(16383), _uops())
    before = launch.dram.copy()
    began = time.process_time()
    with ctrl_c_after(INTERRUPT_AFTER), pytest.raises(KeyboardInterrupt):
        fsim.simulate(DEFAULT, launch.insns, launch.dram)
    assert time.process_time() - began < INTERRUPT_AFTER + PROMPT
    assert np.array_equal(launch.dram, before)     # the STORE's bytes are undone


def test_functional_core_results_unchanged_by_slicing():
    """The same program, short enough to finish (and long enough for several slices' clock reads):
    the compiled core, which ran it, agrees with the Python engine."""
    _, launch = _launch(DEFAULT, _gemm_after_store(64), _uops())
    reference = launch.dram.copy()
    native_run = fsim.simulate(DEFAULT, launch.insns, launch.dram)
    python_run = fsim.simulate(DEFAULT, launch.insns, reference, engine="python")
    assert fsim._native_run(DEFAULT, launch.insns, launch.dram.copy(), None, True)[1] == ""
    assert np.array_equal(launch.dram, reference) and native_run.stats.counters == python_run.stats.counters
    assert native_run.stats.counters["gemm_counter"] == 8 * DEFAULT.acc_depth * 64


def _many_reads(loads: int) -> bytes:
    """``loads`` LOADs of 65535 one-element rows each (a read burst per row), then FINISH."""
    load = _word(Opcode.LOAD, memory_type=MemId.INP, x_size=1, y_size=(1 << 16) - 1, x_stride=2)
    return (load * loads + _word(Opcode.LOAD, memory_type=MemId.INP, push_next=1) + _word(Opcode.GEMM, pop_prev=1)
            + _word(Opcode.FINISH))


def _solve(stream: bytes):
    layout, params = cycle._native_params(DEFAULT)
    return native.core("_timing_core").solve(stream, layout, params, 0, 1 << 40)


def test_timing_core_answers_ctrl_c():
    short = _solve(_many_reads(3))
    began = time.process_time()
    with ctrl_c_after(INTERRUPT_AFTER), pytest.raises(KeyboardInterrupt):
        _solve(_many_reads(3000))     # about 10 s
    assert time.process_time() - began < INTERRUPT_AFTER + PROMPT
    assert not isinstance(short, str) and _solve(_many_reads(3)) == short
