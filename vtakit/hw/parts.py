"""FPGA parts that ``vtakit synth`` and :func:`vtakit.hw.estimate` know: capacities and tool options.

Every part reports the same four resource kinds (docs/fpga.md):

* ``lut``: logic LUTs (Xilinx LUT6 sites; ECP5 LUT4s),
* ``ff``: flip-flops,
* ``dsp``: multiplier blocks (Xilinx DSP48E1; ECP5 MULT18X18D),
* ``bram``: block RAMs (Xilinx RAMB36E1 equivalents, a RAMB18E1 counting one half; ECP5 DP16KD EBRs).

Capacities: the Zynq-7020 (xc7z020) from Xilinx's 7-series overview (53,200 LUTs, 106,400 FFs,
220 DSP48E1, 140 RAMB36); the ECP5 LFE5U-25F/45F/85F as nextpnr-ecp5's chip database reports them
(``--report``: TRELLIS_COMB and TRELLIS_FF sites, MULT18X18D, DP16KD), which agree with
Lattice's ECP5 family table (LUT4s with one FF each; 18x18 multipliers; 18 Kb EBRs).
"""

from __future__ import annotations

from dataclasses import dataclass

from vtakit.errors import ConfigError

__all__ = ["Part", "PARTS", "KINDS", "get_part"]

#: The resource kinds of every report, in report order.
KINDS = ("lut", "ff", "dsp", "bram")


@dataclass(frozen=True)
class Part:
    """An FPGA part: its family (``xilinx7`` or ``ecp5``), capacity per resource kind and the
    primitive names that each kind counts in reports."""

    name: str
    family: str
    capacity: dict[str, int]
    description: str
    #: nextpnr-ecp5 device flag (``--85k``) and package; ECP5 only.
    nextpnr_device: str = ""
    nextpnr_package: str = ""
    nextpnr_speed: int = 6

    @property
    def primitive_names(self) -> dict[str, str]:
        """What each kind is made of on this part, for tables."""
        if self.family == "xilinx7":
            return {"lut": "LUT", "ff": "FF", "dsp": "DSP48E1", "bram": "BRAM36"}
        return {"lut": "LUT4", "ff": "FF", "dsp": "MULT18X18D", "bram": "DP16KD"}


PARTS: dict[str, Part] = {
    "xc7z020": Part("xc7z020", "xilinx7", {"lut": 53_200, "ff": 106_400, "dsp": 220, "bram": 140},
                    "Xilinx Zynq-7020 (Pynq-Z1/Z2, VTA's default target)"),
    "ecp5-85k": Part("ecp5-85k", "ecp5", {"lut": 83_640, "ff": 83_640, "dsp": 156, "bram": 208},
                     "Lattice ECP5 LFE5U-85F", "--85k", "CABGA381"),
    "ecp5-45k": Part("ecp5-45k", "ecp5", {"lut": 43_848, "ff": 43_848, "dsp": 72, "bram": 108},
                     "Lattice ECP5 LFE5U-45F", "--45k", "CABGA381"),
    "ecp5-25k": Part("ecp5-25k", "ecp5", {"lut": 24_288, "ff": 24_288, "dsp": 28, "bram": 56},
                     "Lattice ECP5 LFE5U-25F", "--25k", "CABGA381"),
}


def get_part(name: str | Part) -> Part:
    """The part called ``name``; an unknown name is a :class:`ConfigError` naming the choices."""
    if isinstance(name, Part):
        return name
    try:
        return PARTS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown FPGA part {name!r}: choose one of {', '.join(PARTS)}") from None
