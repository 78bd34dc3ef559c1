"""The op benchmarks' check is strong: the requantisation shift comes from the accumulator's range,
so (almost) no output is clipped and a wrong accumulator shows in the compared outputs."""

import numpy as np
import pytest

from vtakit.compiler.topi_vta.bench import (CLIP, compile_dense, conv2d_data, dense_data, range_shift, run_conv2d,
                                            run_dense)
from vtakit.compiler.topi_vta.workloads import RESNET18, Conv2dWorkload
from vtakit.compiler.vta.env import get_env
from vtakit.hw.config import VTAConfig
from vtakit.runtime.packing import requantize

SMALL = VTAConfig.small()


@pytest.mark.parametrize("peak", [0, 1, 62, 63, 64, 1000, 1 << 20, (1 << 31) - 1 - 63])
def test_range_shift_is_the_smallest_that_saturates_nothing(peak):
    acc = np.array([[peak, -peak, peak // 3]], np.int32)       # the extremes meet the addend's extremes
    addend = np.array([63, -64, 0], np.int32)
    shift = range_shift(acc, addend, CLIP)
    out = requantize(acc, addend, shift, CLIP).ravel()
    assert ((out > CLIP[0]) & (out < CLIP[1])).all(), (peak, shift, out)
    if shift > 1:                                      # one less clips a peak
        lower = requantize(acc, addend, shift - 1, CLIP).ravel()
        assert lower[0] == CLIP[1] or lower[1] == CLIP[0]


def test_range_shift_stops_at_the_alu_limit():
    assert range_shift(np.array([-5], np.int32), None, (0, 127)) == 31     # no shift keeps -5 above 0
    assert range_shift(np.array([1 << 30], np.int32), np.array([127], np.int32), CLIP) == 24


@pytest.mark.parametrize("case", [
    lambda env: dense_data(env, 64, 32, 256),
    lambda env: conv2d_data(env, RESNET18["C10"]),
    lambda env: conv2d_data(env, Conv2dWorkload(6, 6, 8, 12, 3, 1, 1)),
], ids=["dense", "C10", "conv-small"])
def test_a_wrong_accumulator_changes_the_compared_outputs(case):
    """Off by one unit of the shift, nearly every accumulator entry gives a different output (with a
    fixed shift of 8 and a 0..127 clip, 90-96% of the outputs were clipped and hid such errors)."""
    for config in (SMALL, VTAConfig()):
        data = case(get_env(config))
        shift = range_shift(data.acc, data.addend, CLIP)
        assert data.unsaturated(shift, CLIP) == 1.0
        right = data.result(shift, CLIP)
        data.acc = data.acc + np.int32(1 << shift)
        changed = np.mean(data.result(shift, CLIP) != right)
        assert changed > 0.99, (config.model, shift, changed)


def test_the_benchmarks_report_their_shift_and_unsaturated_share():
    r = run_dense(16, 32, 16, SMALL, vthreads=2)
    data = dense_data(get_env(SMALL), 16, 32, 16)
    assert r.correct and r.shift == range_shift(data.acc, data.addend, CLIP) and r.unsaturated == 1.0
    c = run_conv2d(Conv2dWorkload(6, 6, 8, 12, 3, 1, 1), SMALL, vthreads=2)
    assert c.correct and c.unsaturated == 1.0 and {"shift", "unsaturated"} <= set(c.to_dict())


def test_compile_times_only_scheduling_and_building():
    compiled = compile_dense(16, 32, 16, SMALL, vthreads=1)
    assert compiled.threads == 1 and 0 < compiled.seconds < 60 and 0 < compiled.cpu_seconds < 60
    assert len(compiled.module.template.insns) > 0
