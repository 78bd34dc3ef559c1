"""The double-buffer token protocol between two stages, over round-robin SRAM buffers.

A producer stage writes an SRAM buffer that a consumer stage reads (load -> compute for INP/WGT,
compute -> store for OUT). With ``buffers`` copies used round-robin by successive units of work
(VTA's virtual threads), unit ``u`` may overwrite its buffer once the consumer has released unit
``u - buffers``, and the consumer may read it once the producer has released unit ``u``. This is
the token pattern of VTA's ``blocked_gemm_test`` and of TVM's ``CoProcSync`` after ``cthread``
injection, expressed once so that benchmarks and the random program generator share it.

Each pop is matched (FIFO) with the push of the intended unit because both stages walk the units
in the same order; every pop's matching push precedes it in the instruction stream as long as the
producer side of unit ``u`` is emitted after the consumer side of unit ``u - buffers`` and the
consumer side after the producer side, which keeps programs deadlock-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import ProgramError
from vtakit.hw.isa import Stage
from vtakit.runtime.builder import ProgramBuilder

__all__ = ["BufferChannel"]


@dataclass
class BufferChannel:
    """Tokens guarding ``buffers`` round-robin SRAM buffers over ``units`` units of work."""

    builder: ProgramBuilder
    producer: Stage
    consumer: Stage
    units: int
    buffers: int

    def __post_init__(self) -> None:
        if self.units < 0 or self.buffers < 1:
            raise ProgramError(f"BufferChannel needs units >= 0 and buffers >= 1, got {self.units}, {self.buffers}")

    def buffer(self, unit: int) -> int:
        """The buffer index unit ``unit`` uses."""
        return unit % self.buffers

    def acquire(self, unit: int) -> None:
        """Producer, before writing unit ``unit``'s buffer: wait until its previous user is consumed."""
        if unit >= self.buffers:
            self.builder.dep_pop(self.consumer, self.producer)

    def produced(self, unit: int) -> None:
        """Producer, after its last write of the unit: hand the buffer to the consumer."""
        self.builder.dep_push(self.producer, self.consumer)

    def consume(self, unit: int) -> None:
        """Consumer, before its first read of the unit: wait for the producer."""
        self.builder.dep_pop(self.producer, self.consumer)

    def release(self, unit: int) -> None:
        """Consumer, after its last read of the unit: give the buffer back if a later unit reuses it."""
        if unit + self.buffers < self.units:
            self.builder.dep_push(self.consumer, self.producer)
