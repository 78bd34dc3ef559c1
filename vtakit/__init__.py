"""vtakit: an open hardware/software co-design kit for a VTA-style deep-learning accelerator."""

from vtakit import errors
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig

__all__ = ["errors", "isa", "VTAConfig"]
__version__ = "0.1.0"
