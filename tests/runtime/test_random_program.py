"""random_program: validity on the functional simulator, ISA coverage, limits, save and replay."""

import random
import re

import numpy as np
import pytest

from vtakit.errors import ConfigError, ProgramError, RaceError, SimError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.isa import Stage
from vtakit.runtime.random_program import coverage, random_program, save_failure
from vtakit.runtime.replay import compare_backends, run_fresh
from vtakit.sim.fsim import simulate
from vtakit.sim.program import Program

SMALL = VTAConfig.small()
CONFIGS = {
    "small": SMALL,
    "default": VTAConfig(),
    "small-mul": VTAConfig.small(alu_mul=True),
    "tiny-queues": VTAConfig.small(token_queue_depth=1, cmd_queue_depth=1),
    "odd-queues": VTAConfig.small(token_queue_depth=2, cmd_queue_depth=3),
    "batch2-block8": VTAConfig.small(log_batch=1, log_block_in=3, log_block_out=3, log_inp_buff_size=10,
                                     log_wgt_buff_size=12, log_acc_buff_size=12),
}

REQUIRED = {
    "load.UOP", "load.WGT", "load.INP", "load.ACC", "load.ACC_8BIT", "store.OUT",
    "nop.load.INP", "nop.load.WGT", "nop.load.UOP", "nop.load.ACC", "nop.load.ACC_8BIT", "nop.load.OUT",
    *(f"nop.store.{mem.name}" for mem in isa.MemId),
    "pad.y_pad_0", "pad.y_pad_1", "pad.x_pad_0", "pad.x_pad_1", "stride.load", "stride.store",
    "gemm", "gemm.reset", "gemm.all_factors", "alu.loop", "alu.SHR.negative",
    *(f"alu.{op}.{kind}" for op in ("MIN", "MAX", "ADD", "SHR") for kind in ("imm", "tensor")),
    "token_queue_overflow", "command_queue_overflow",
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_random_programs_are_accepted_by_the_functional_simulator(name):
    config = CONFIGS[name]
    for seed in range(40):
        program = random_program(config, seed)
        try:
            run_fresh(program)
        except SimError as exc:  # pragma: no cover - the message carries the seed for replay
            raise AssertionError(f"{name} seed {seed}: {exc}") from exc


def test_coverage_of_the_isa():
    features, threads = set(), set()
    for seed in range(40):
        program = random_program(SMALL if seed % 2 else VTAConfig(), seed)
        features |= coverage(program)
        threads.add(int(re.fullmatch(r"random-\d+-vt(\d)", program.name).group(1)))
    assert REQUIRED <= features, sorted(REQUIRED - features)
    assert threads == {1, 2, 3}
    assert not any(f.startswith("alu.MUL") for f in features)      # MUL only when the config has it
    mul = set().union(*(coverage(random_program(CONFIGS["small-mul"], s)) for s in range(20)))
    assert {"alu.MUL.imm", "alu.MUL.tensor"} <= mul


def test_queue_features_are_detected_from_the_stream():
    from vtakit.runtime import ProgramBuilder

    def storm(count):
        b = ProgramBuilder(SMALL)
        for _ in range(count):
            b.dep_push(Stage.STORE, Stage.COMPUTE)
        for _ in range(count):
            b.dep_pop(Stage.STORE, Stage.COMPUTE)
        return coverage(b.finish())

    assert "token_queue_overflow" in storm(SMALL.token_queue_depth + 1)
    assert "token_queue_overflow" not in storm(SMALL.token_queue_depth)

    def load_run(count):
        b = ProgramBuilder(SMALL)
        b.dep_push(Stage.COMPUTE, Stage.LOAD)
        b.dep_pop(Stage.COMPUTE, Stage.LOAD)
        for _ in range(count):
            b.load_2d(isa.MemId.INP, 0, 0, 1, 1)
        return coverage(b.finish())

    assert "command_queue_overflow" in load_run(SMALL.cmd_queue_depth + 2)
    assert "command_queue_overflow" not in load_run(SMALL.cmd_queue_depth + 1)


def _with_config(program, config):
    return Program(config, program.insns, program.uops, program.uop_addr, program.segments, program.dram_size,
                   program.name)


def test_results_do_not_depend_on_the_schedule():
    for seed in range(6):
        program = random_program(SMALL, seed)
        images = []
        for order in (None, random.Random(seed), random.Random(seed + 100)):
            dram = program.initial_dram()
            simulate(SMALL, program.insns, dram, rng=order)
            images.append(dram)
        assert all(np.array_equal(images[0], image) for image in images[1:])


def test_dropping_war_tokens_is_caught():
    """The checker can fail: without compute->load tokens, reloading a thread's buffer races."""
    caught = 0
    for seed in range(12):
        program = random_program(SMALL, seed, vthreads=1, storm_probability=0.0)
        insns = [_drop_war(insn) for insn in program.insns]
        if insns == program.insns:
            continue
        with pytest.raises((RaceError, ProgramError, SimError)) as info:
            run_fresh(_with_insns(program, insns))
        caught += info.type is RaceError
    assert caught >= 3


def _drop_war(insn):
    stage = isa.stage_of(insn)
    if stage == Stage.LOAD and insn.pop_next:
        return type(insn)(**{**vars(insn), "pop_next": False})
    if stage == Stage.COMPUTE and insn.push_prev:
        return type(insn)(**{**vars(insn), "push_prev": False})
    return insn


def _with_insns(program, insns):
    return Program(program.config, insns, program.uops, program.uop_addr, program.segments, program.dram_size,
                   program.name)


def test_programs_are_reproducible_and_respect_the_length_cap():
    a, b = random_program(SMALL, 5), random_program(SMALL, 5)
    assert isa.encode(a.insns, SMALL) == isa.encode(b.insns, SMALL) and a.segments == b.segments
    assert isa.encode(random_program(SMALL, 6).insns, SMALL) != isa.encode(a.insns, SMALL)
    for cap in (32, 60, 120):
        for seed in range(10):
            program = random_program(SMALL, seed, max_insns=cap)
            assert len(program.insns) <= cap
    assert all(random_program(SMALL, s, vthreads=2).name.endswith("vt2") for s in range(3))


@pytest.mark.parametrize("limits, message", [
    (dict(max_insn=10), r"unknown random program limit\(s\) \['max_insn'\]"),
    (dict(max_insns=10), "max_insns=10 must be at least 32"),
    (dict(vthreads=4), "vthreads=4 must be 1, 2 or 3"),
    (dict(max_uops=0), "max_uops=0 must be at least 1"),
    (dict(storm_probability=2.0), r"storm_probability=2.0 must be in \[0, 1\]"),
])
def test_bad_limits(limits, message):
    with pytest.raises(ConfigError, match=message):
        random_program(SMALL, 0, **limits)


@pytest.mark.parametrize("seed", [-1, 1.5, "7"])
def test_bad_seed(seed):
    with pytest.raises(ConfigError, match=f"seed={seed!r} must be a non-negative integer"):
        random_program(SMALL, seed)


def test_vthreads_need_token_room():
    with pytest.raises(ConfigError, match="vthreads=2 needs TOKEN_QUEUE_DEPTH >= 2"):
        random_program(VTAConfig.small(token_queue_depth=1), 0, vthreads=2)
    assert random_program(VTAConfig.small(token_queue_depth=1), 0).name.endswith("vt1")


def test_save_and_replay(tmp_path):
    program = random_program(SMALL, 11)
    path = save_failure(program, tmp_path / "failures")
    assert path.name == f"{program.name}.vtaprog"
    replayed = Program.load(path)
    assert replayed.insns == program.insns and replayed.uops == program.uops
    assert np.array_equal(run_fresh(replayed)[1], run_fresh(program)[1])


def test_compare_backends_saves_the_failing_program(tmp_path, monkeypatch):
    program = random_program(SMALL, 12)
    assert set(compare_backends(program, ("fsim", "fsim"))) == {"fsim"}

    from vtakit.runtime import device as device_module
    from vtakit.sim import fsim

    def corrupting(launch):
        stats = fsim.execute(launch)
        launch.dram[program.segments[-1].addr] ^= 1     # flip a bit of the output area
        return stats

    monkeypatch.setattr(device_module, "get_backend", lambda name: corrupting if name == "rtl" else fsim.execute)
    with pytest.raises(SimError, match=r"backend 'rtl' leaves DRAM different from 'fsim' at 1 bytes.*saved to"):
        compare_backends(program, ("fsim", "rtl"), save_dir=tmp_path)
    assert (tmp_path / f"{program.name}.vtaprog").exists()


def test_too_little_sram_for_the_threads():
    with pytest.raises(ConfigError, match="too little SRAM for 2 virtual threads"):
        random_program(VTAConfig.small(log_inp_buff_size=2), 0, vthreads=2)


def test_compare_backends_reports_backend_errors_with_the_saved_path(tmp_path, monkeypatch):
    from vtakit.runtime import device as device_module

    def broken(launch):
        raise RaceError("boom")

    monkeypatch.setattr(device_module, "get_backend", lambda name: broken)
    program = random_program(SMALL, 1)
    with pytest.raises(RaceError, match=r"^boom; program saved to .*random-1-vt\d\.vtaprog"):
        compare_backends(program, ("fsim",), save_dir=tmp_path)
