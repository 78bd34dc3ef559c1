"""vtakit: an open hardware/software co-design kit for a VTA-style deep-learning accelerator."""

from vtakit import errors
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig
from vtakit.runtime import Device
from vtakit import te
from vtakit.compiler.build import build
from vtakit.compiler.lower import lower

__all__ = ["errors", "isa", "VTAConfig", "Device", "te", "lower", "build"]
__version__ = "0.1.0"
