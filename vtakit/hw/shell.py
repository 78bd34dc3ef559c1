"""``VTAShell``: the core plus an AXI4-Lite register file, the top level for FPGA integration.

A host (a Zynq PS, a soft CPU, a PCIe bridge) writes the instruction count and address over
AXI4-Lite, sets CONTROL.start, and waits for the ``irq`` line or polls CONTROL.done; the core
fetches instructions and moves data over its AXI4 master port. The register map is
:data:`REGISTERS` and is documented in docs/registers.md (generated from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from vtakit.hw.bus import Axi4Signature, AxiLiteSignature
from vtakit.hw.config import VTAConfig
from vtakit.hw.core import VTACore
from vtakit.hw.sequencer import RetireSignature

__all__ = ["VTAShell", "Register", "REGISTERS", "SHELL_ID", "config_words", "registers_markdown"]

#: Value of the ID register: ASCII "VTAK".
SHELL_ID = 0x5654414B


@dataclass(frozen=True)
class Register:
    offset: int
    name: str
    access: str
    description: str


REGISTERS = (
    Register(0x00, "CONTROL", "RW", "bit 0 start: write 1 to launch (ignored while running; reads 0); bit 1 done "
                                    "(RO, set when FINISH retires, cleared by start); bit 2 running (RO); bit 3 "
                                    "deadlock (RO, every module blocked: the program can never finish)"),
    Register(0x04, "ID", "RO", f"constant {SHELL_ID:#010x} (ASCII \"VTAK\")"),
    Register(0x08, "INSN_COUNT", "RW", "number of instructions to run"),
    Register(0x0C, "INSN_ADDR", "RW", "byte address of the instruction stream in DRAM (16-byte aligned)"),
    Register(0x10, "CYCLES", "RO", "cycles from start to done (docs/timing.md §1)"),
    Register(0x14, "BUSY_FETCH", "RO", "cycles fetch still had instructions to dispatch"),
    Register(0x18, "BUSY_LOAD", "RO", "cycles the load module executed or retired an instruction"),
    Register(0x1C, "BUSY_COMPUTE", "RO", "cycles the compute module executed or retired an instruction"),
    Register(0x20, "BUSY_STORE", "RO", "cycles the store module executed or retired an instruction"),
    Register(0x24, "GEMM_UOPS", "RO", "GEMM micro-ops executed, reset GEMMs excluded (VTA's gemm_counter)"),
    Register(0x28, "ALU_UOPS", "RO", "ALU micro-ops executed (VTA's alu_counter)"),
    Register(0x2C, "CONFIG0", "RO", "bits 3:0 LOG_BATCH, 7:4 LOG_BLOCK_IN, 11:8 LOG_BLOCK_OUT, "
                                    "15:12 log2(BUS_WIDTH), bit 16 ALU_MUL, bit 17 ALU_REQUANT, bit 18 BIAS_PRELOAD, "
                                    "bit 19 GEMM_OUT_REQUANT"),
    Register(0x30, "CONFIG1", "RO", "bits 7:0 LOG_UOP_BUFF_SIZE, 15:8 LOG_INP_BUFF_SIZE, 23:16 LOG_WGT_BUFF_SIZE, "
                                    "31:24 LOG_ACC_BUFF_SIZE"),
)
_COUNTER_REGISTERS = {"CYCLES": "cycles", "BUSY_FETCH": "busy_fetch", "BUSY_LOAD": "busy_load",
                      "BUSY_COMPUTE": "busy_compute", "BUSY_STORE": "busy_store", "GEMM_UOPS": "gemm_uops",
                      "ALU_UOPS": "alu_uops"}
_ADDR_BITS = 8


def config_words(config: VTAConfig) -> tuple[int, int]:
    """The CONFIG0 and CONFIG1 register values of ``config``."""
    word0 = (config.log_batch | config.log_block_in << 4 | config.log_block_out << 8
             | (config.bus_width.bit_length() - 1) << 12 | int(config.alu_mul) << 16
             | int(config.alu_requant) << 17 | int(config.bias_preload) << 18 | int(config.gemm_out_requant) << 19)
    word1 = (config.log_uop_buff_size | config.log_inp_buff_size << 8 | config.log_wgt_buff_size << 16
             | config.log_acc_buff_size << 24)
    return word0, word1


class VTAShell(wiring.Component):
    """The core with an AXI4-Lite control port.

    Interface attributes
    --------------------
    s_axil : AXI4-Lite slave (32-bit registers, :data:`REGISTERS`)
    m_axi : AXI4 master (the core's memory port)
    irq : out, high while CONTROL.done is set
    retire_load, retire_compute, retire_store : out, retire events (``valid``, program ``index``) for
        harnesses that record retire cycles (docs/timing.md §1)
    """

    def __init__(self, config: VTAConfig):
        self._config = config
        self.core = VTACore(config)
        super().__init__({
            "s_axil": Out(AxiLiteSignature(addr_width=_ADDR_BITS)),
            "m_axi": Out(Axi4Signature(data_width=config.bus_width)),
            "irq": Out(1),
            **{f"retire_{name}": Out(RetireSignature()) for name in ("load", "compute", "store")},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        wiring.connect(m, core.axi, wiring.flipped(self.m_axi))
        for name in ("load", "compute", "store"):
            wiring.connect(m, getattr(core, f"retire_{name}"), wiring.flipped(getattr(self, f"retire_{name}")))
        bus = self.s_axil
        insn_count = Signal(32)
        insn_addr = Signal(32)
        m.d.comb += [core.insn_count.eq(insn_count), core.insn_addr.eq(insn_addr), self.irq.eq(core.done)]

        # Writes: take AW and W together, answer OKAY.
        bvalid = Signal()
        take_write = bus.awvalid & bus.wvalid & ~bvalid
        m.d.comb += [bus.awready.eq(take_write), bus.wready.eq(take_write), bus.bvalid.eq(bvalid),
                     bus.bresp.eq(0)]
        with m.If(take_write):
            m.d.sync += bvalid.eq(1)
            with m.Switch(bus.awaddr[2:]):
                with m.Case(0x00 >> 2):
                    with m.If(bus.wstrb[0] & bus.wdata[0] & ~core.running):
                        m.d.comb += core.start.eq(1)
                with m.Case(0x08 >> 2):
                    m.d.sync += insn_count.eq(bus.wdata)
                with m.Case(0x0C >> 2):
                    m.d.sync += insn_addr.eq(bus.wdata)
        with m.Elif(bvalid & bus.bready):
            m.d.sync += bvalid.eq(0)

        # Reads: one outstanding, answered the cycle after the address.
        rvalid = Signal()
        rdata = Signal(32)
        m.d.comb += [bus.arready.eq(~rvalid), bus.rvalid.eq(rvalid), bus.rdata.eq(rdata), bus.rresp.eq(0)]
        word0, word1 = config_words(self._config)
        values = {"CONTROL": Cat(Const(0, 1), core.done, core.running, core.deadlock), "ID": Const(SHELL_ID, 32),
                  "INSN_COUNT": insn_count, "INSN_ADDR": insn_addr, "CONFIG0": Const(word0, 32),
                  "CONFIG1": Const(word1, 32)}
        values.update({reg: getattr(core, name) for reg, name in _COUNTER_REGISTERS.items()})
        with m.If(bus.arvalid & ~rvalid):
            m.d.sync += [rvalid.eq(1), rdata.eq(0)]
            with m.Switch(bus.araddr[2:]):
                for reg in REGISTERS:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += rdata.eq(values[reg.name])
        with m.Elif(rvalid & bus.rready):
            m.d.sync += rvalid.eq(0)
        return m


def registers_markdown() -> str:
    """docs/registers.md."""
    lines = ["# Control registers (AXI4-Lite)", "",
             "Generated from `vtakit/hw/shell.py` (`REGISTERS`); regenerate with "
             "`python -c 'from vtakit.hw.shell import registers_markdown; print(registers_markdown(), end=\"\")' "
             "> docs/registers.md`.", "",
             "The shell (`VTAShell`, Verilog top `vtakit_top` from `vtakit verilog`) has a 32-bit AXI4-Lite slave "
             "`s_axil` with 8 address bits (word-aligned registers; other offsets read 0 and ignore writes), an "
             "AXI4 master `m_axi` (INCR bursts, ID width 2, address width 32, data width BUS_WIDTH; see "
             "docs/timing.md §5), an `irq` output that is high while CONTROL.done is set, and the retire events "
             "`retire_{load,compute,store}__valid` / `__index` (an instruction's program index, for harnesses that "
             "record retire cycles). Clock `clk`, synchronous active-high reset `rst`.", "",
             "Launch sequence: write INSN_COUNT and INSN_ADDR, write 1 to CONTROL, wait for `irq` (or poll "
             "CONTROL until done or deadlock is set), then read the counters.", "",
             "| offset | name | access | description |", "|---|---|---|---|"]
    lines += [f"| {reg.offset:#04x} | {reg.name} | {reg.access} | {reg.description} |" for reg in REGISTERS]
    return "\n".join(lines) + "\n"
