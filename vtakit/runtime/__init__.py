"""The host side of vtakit: devices, DRAM arrays, the program builder and program generators.

``Device`` owns a DRAM image and runs programs on a backend; ``ProgramBuilder`` builds programs
the way VTA's runtime did; ``random_program`` generates valid programs for differential testing
and ``compare_backends`` runs one on several backends, saving it for replay when they disagree.
(``vtakit.runtime.random_program`` is the function; its module is imported with
``from vtakit.runtime.random_program import ...``.)
"""

from vtakit.hw.isa import Stage
from vtakit.runtime.allocator import Allocator
from vtakit.runtime.builder import HostArray, ProgramBuilder
from vtakit.runtime.device import DEFAULT_DRAM_SIZE, Device, DeviceArray
from vtakit.runtime.random_program import RandomLimits, coverage, random_program, save_failure
from vtakit.runtime.replay import compare_backends, run_fresh

__all__ = ["Allocator", "DEFAULT_DRAM_SIZE", "Device", "DeviceArray", "HostArray", "ProgramBuilder", "Stage",
           "RandomLimits", "random_program", "coverage", "save_failure", "compare_backends", "run_fresh"]
