"""The instruction life cycle every execution module shares: take, wait for tokens, execute, retire.

Load, compute and store differ only in what happens while an instruction executes, so the
state machine around it lives here once (docs/timing.md §Modules)::

    IDLE   --(command queue not empty: take the head; it leaves the queue)-->        WAIT
    WAIT   --(its last pop happens: start)-->                                         EXEC
    EXEC   --(the datapath's finish: its last write happens in this cycle)-->        RETIRE
    RETIRE --(its last push happens: retire event)-->                                IDLE

Pops go in flag order (pop_prev before pop_next) and pushes too (push_prev before push_next),
exactly as the functional simulator steps them, so both deadlock on the same programs; a later
flag may go in the same cycle as the earlier one. Each transition takes one clock edge, so an
instruction without tokens whose datapath finishes in its first execution cycle retires 3
cycles after it is taken (take, start, execute, retire).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from vtakit.hw import isa
from vtakit.hw.bus import HandshakeSignature
from vtakit.hw.config import INSN_BITS, VTAConfig
from vtakit.hw.layouts import INDEX_BITS, command_layout, insn_layout

__all__ = ["ModuleState", "TokenSignature", "RetireSignature", "Sequencer", "sequencer_ports"]


class ModuleState(enum.Enum, shape=2):
    IDLE = 0
    WAIT = 1
    EXEC = 2
    RETIRE = 3


class TokenSignature(HandshakeSignature):
    """A dependency-token handshake, producer side: ``valid`` = push, ``ready`` = room (tokens carry no data)."""


class RetireSignature(wiring.Signature):
    """Retire event: ``valid`` for one cycle with the instruction's index in the program."""

    def __init__(self):
        super().__init__({"valid": Out(1), "index": Out(INDEX_BITS)})


def sequencer_ports(config: VTAConfig, pops: tuple[str, ...], pushes: tuple[str, ...]) -> dict:
    """Ports of a module built around a :class:`Sequencer` (token ports named after the flags)."""
    ports = {"cmd": In(stream.Signature(command_layout(config))),
             "retire": Out(RetireSignature()), "state": Out(ModuleState), "blocked": Out(1),
             "busy": Out(1), "index": Out(INDEX_BITS)}
    ports.update({name: In(TokenSignature()) for name in pops})
    ports.update({name: Out(TokenSignature()) for name in pushes})
    return ports


class Sequencer:
    """Builds the IDLE/WAIT/EXEC/RETIRE machine of ``component`` into ``m``.

    Attributes for the datapath: ``insn`` (the taken instruction word, stable from WAIT to
    RETIRE), ``start`` (high in the pop cycle, the cycle before the first EXEC cycle),
    ``executing`` (state is EXEC). The datapath drives ``finish`` (only looked at in EXEC).
    """

    def __init__(self, m: Module, component, config: VTAConfig, pops: tuple[str, ...], pushes: tuple[str, ...]):
        self.insn = Signal(INSN_BITS)
        self.finish = Signal()
        self.start = Signal()
        state = Signal(ModuleState)
        index = Signal(INDEX_BITS)
        head = data.View(insn_layout(isa.Opcode.FINISH, config), self.insn)
        self.executing = state == ModuleState.EXEC

        # Flags still to be honoured; pops (pushes) go in flag order, as in fsim and VTA's HLS:
        # a later one may go in the same cycle as an earlier one, never before it.
        pend_pop = Signal(len(pops))
        pend_push = Signal(len(pushes))
        pop_fire = _in_order(m, [getattr(component, n).valid for n in pops], pend_pop)
        push_fire = _in_order(m, [getattr(component, n).ready for n in pushes], pend_push)
        pops_done = (pend_pop & ~pop_fire) == 0
        pushes_done = (pend_push & ~push_fire) == 0
        m.d.comb += [
            component.state.eq(state), component.index.eq(index),
            component.retire.index.eq(index),
            component.busy.eq((state == ModuleState.EXEC) | ((state == ModuleState.RETIRE) & pushes_done)),
        ]

        cmd = component.cmd
        incoming = data.View(insn_layout(isa.Opcode.FINISH, config), cmd.payload.insn)
        with m.Switch(state):
            with m.Case(ModuleState.IDLE):
                m.d.comb += cmd.ready.eq(1)
                with m.If(cmd.valid):
                    m.d.sync += [self.insn.eq(cmd.payload.insn), index.eq(cmd.payload.index),
                                 pend_pop.eq(Cat(*(getattr(incoming, n) for n in pops))),
                                 pend_push.eq(Cat(*(getattr(incoming, n) for n in pushes))),
                                 state.eq(ModuleState.WAIT)]
            with m.Case(ModuleState.WAIT):
                m.d.comb += [getattr(component, n).ready.eq(pop_fire[i]) for i, n in enumerate(pops)]
                m.d.sync += pend_pop.eq(pend_pop & ~pop_fire)
                with m.If(pops_done):
                    m.d.comb += self.start.eq(1)
                    m.d.sync += state.eq(ModuleState.EXEC)
            with m.Case(ModuleState.EXEC):
                with m.If(self.finish):
                    m.d.sync += state.eq(ModuleState.RETIRE)
            with m.Case(ModuleState.RETIRE):
                m.d.comb += [getattr(component, n).valid.eq(push_fire[i]) for i, n in enumerate(pushes)]
                m.d.sync += pend_push.eq(pend_push & ~push_fire)
                with m.If(pushes_done):
                    m.d.comb += component.retire.valid.eq(1)
                    m.d.sync += state.eq(ModuleState.IDLE)

        # Blocked: no progress possible this cycle without another module acting first.
        m.d.comb += component.blocked.eq(
            ((state == ModuleState.IDLE) & ~cmd.valid)
            | ((state == ModuleState.WAIT) & (pend_pop != 0) & (pop_fire == 0))
            | ((state == ModuleState.RETIRE) & (pend_push != 0) & (push_fire == 0)))


def _in_order(m: Module, ready: list, pending: Signal) -> Signal:
    """Which pending items go this cycle: each needs its queue ready and every earlier one gone."""
    fire = Signal(len(ready))
    earlier_clear = Const(1)
    for i, ok in enumerate(ready):
        m.d.comb += fire[i].eq(pending[i] & ok & earlier_clear)
        earlier_clear = earlier_clear & (~pending[i] | fire[i])
    return fire
