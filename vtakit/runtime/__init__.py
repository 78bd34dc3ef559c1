"""The host side of vtakit: devices, DRAM arrays, the program builder and program generators.

``Device`` owns a DRAM image and runs programs on a backend; ``ProgramBuilder`` builds programs
the way VTA's runtime did; ``random_program`` generates valid programs for differential testing.
"""

from vtakit.hw.isa import Stage
from vtakit.runtime.allocator import Allocator
from vtakit.runtime.builder import HostArray, ProgramBuilder
from vtakit.runtime.device import DEFAULT_DRAM_SIZE, Device, DeviceArray

__all__ = ["Allocator", "DEFAULT_DRAM_SIZE", "Device", "DeviceArray", "HostArray", "ProgramBuilder", "Stage"]
