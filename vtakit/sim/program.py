"""``Program``: the unit every backend runs, and its file format (docs/architecture.md §4).

A program is self-describing: the full configuration it was built for, its instructions, the
micro-op image and the byte address it is loaded from, and the DRAM segments (inputs, weights,
biases) it reads. Running it needs nothing else, which is what lets the test corpus, ``vtakit
disasm``/``run-program`` and a future FPGA driver share programs as files.

File format (``.vtaprog``): a NumPy ``.npz`` archive (a zip) with
  ``meta``      UTF-8 JSON: ``{"format": "vtakit-program", "version": 1, "name", "config"
                (VTA JSON keys), "uop_addr", "dram_size", "segments": [{"name", "addr"}, ...]}``
  ``insns``     uint8, the instructions encoded with :func:`vtakit.hw.isa.encode` (16 B each)
  ``uops``      uint8, the micro-ops encoded with :func:`vtakit.hw.isa.encode_uops` (4 B each)
  ``seg_<i>``   uint8, the bytes of segment i, placed at its ``addr`` in DRAM
"""

from __future__ import annotations

import io
import json
import operator
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vtakit.errors import ConfigError, ISAError, ProgramError
from vtakit.hw import isa
from vtakit.hw.config import VTAConfig

__all__ = ["Program", "Segment", "FORMAT_NAME", "FORMAT_VERSION", "MAX_DRAM_SIZE"]

FORMAT_NAME = "vtakit-program"
FORMAT_VERSION = 1
_ZIP_MAGIC = b"PK\x03\x04"   # a .npz is a zip archive; its first bytes say so
MAX_DRAM_SIZE = 1 << 32      # the accelerator's 32-bit physical address space


def _check_address(what: str, value: object, limit: int = MAX_DRAM_SIZE) -> None:
    """A byte address or size must be an int in [0, limit]."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ProgramError(f"{what}={value!r} must be an integer byte address in [0, {limit:#x}] "
                           "(the 32-bit DRAM address space)")


@dataclass(frozen=True)
class _Encoded:
    """An encoding and exactly what it encodes: the configuration and the (immutable) items."""

    config: VTAConfig
    items: tuple
    data: bytes


def _encoded(cached: _Encoded | None, items: list, config: VTAConfig, encode) -> _Encoded:
    """``cached`` if it still encodes ``items`` for ``config``, else a fresh encoding.

    Runs encode the same program again and again (a benchmark loop, a layer run per input).
    Instructions and micro-ops are frozen dataclasses, so a program's encoding can only change
    when its ``insns``/``uops`` list or its ``config`` is changed; the cache is reused only while
    the list holds the very same objects as at encoding time (an identity check, a few ns an item).
    """
    snapshot = tuple(items)
    if (cached is not None and cached.config is config and len(cached.items) == len(snapshot)
            and all(map(operator.is_, cached.items, snapshot))):
        return cached
    return _Encoded(config, snapshot, encode(snapshot, config))


@dataclass
class Segment:
    """Initial DRAM contents: ``data`` placed at byte address ``addr``."""

    addr: int
    data: bytes
    name: str = ""

    @property
    def end(self) -> int:
        return self.addr + len(self.data)


@dataclass
class Program:
    """Instructions, micro-op image and DRAM segments, for one configuration."""

    config: VTAConfig
    insns: list[isa.Instruction]
    uops: list[isa.Uop] = field(default_factory=list)
    uop_addr: int = 0
    segments: list[Segment] = field(default_factory=list)
    dram_size: int = 0
    name: str = ""

    def __post_init__(self) -> None:
        _check_address("uop_addr", self.uop_addr)
        _check_address("dram_size", self.dram_size)
        for i, seg in enumerate(self.segments):
            _check_address(f"segment {i} ({seg.name or 'unnamed'}) addr", seg.addr)
            _check_address(f"segment {i} ({seg.name or 'unnamed'}) end", seg.end)
        if self.uop_addr % isa.UOP_BYTES:
            raise ProgramError(f"uop_addr={self.uop_addr} must be a multiple of {isa.UOP_BYTES} bytes")
        self.dram_size = max(self.dram_size, self.uop_addr + isa.UOP_BYTES * len(self.uops),
                             *(s.end for s in self.segments), 0)
        _check_address("end of the micro-op image", self.dram_size)
        # Encodings of the last instructions / micro-ops encoded (not dataclass fields: neither
        # compared, printed nor copied by ``dataclasses.replace``; read with getattr so that an
        # instance made without __init__, e.g. by pickle from an older version, works); see ``_encoded``.
        self._insn_code: _Encoded | None = None
        self._uop_code: _Encoded | None = None

    @property
    def uop_segment(self) -> Segment:
        """The encoded micro-op image as a DRAM segment."""
        return Segment(self.uop_addr, self.encoded_uops(), "uops")

    def encoded_insns(self) -> bytes:
        """The instruction stream, encoded with :func:`vtakit.hw.isa.encode` (cached, see ``_encoded``)."""
        self._insn_code = _encoded(getattr(self, "_insn_code", None), self.insns, self.config, isa.encode)
        return self._insn_code.data

    def encoded_uops(self) -> bytes:
        """The micro-op image, encoded with :func:`vtakit.hw.isa.encode_uops` (cached, see ``_encoded``)."""
        self._uop_code = _encoded(getattr(self, "_uop_code", None), self.uops, self.config, isa.encode_uops)
        return self._uop_code.data

    def initial_dram(self, size: int | None = None) -> np.ndarray:
        """A zeroed DRAM image of ``size`` bytes (default: the program's own) with every segment placed."""
        size = self.dram_size if size is None else size
        if size < self.dram_size:
            raise ProgramError(f"program {self.name!r} needs {self.dram_size} bytes of DRAM, got {size}")
        dram = np.zeros(size, dtype=np.uint8)
        self._write_image(memoryview(dram))
        return dram

    def place(self, dram: np.ndarray) -> None:
        """Write the program's DRAM image (``initial_dram()``) over the first ``dram_size`` bytes of ``dram``."""
        if not (isinstance(dram, np.ndarray) and dram.dtype == np.uint8 and dram.ndim == 1
                and dram.flags.c_contiguous and dram.flags.writeable):
            raise ProgramError(f"program {self.name!r} can only be placed in a writable 1-D contiguous uint8 "
                               f"DRAM array, got {type(dram).__name__} "
                               f"{getattr(dram, 'dtype', '')}{getattr(dram, 'shape', '')}")
        if dram.size < self.dram_size:
            raise ProgramError(f"program {self.name!r} needs {self.dram_size} bytes of DRAM, got {dram.size}")
        dram[:self.dram_size] = 0
        self._write_image(memoryview(dram))

    def _write_image(self, view: memoryview) -> None:
        """Copy the segments and the micro-op image into a zeroed byte view of DRAM."""
        for seg in self.segments:   # memoryview slice assignment: no numpy array per segment
            view[seg.addr:seg.addr + len(seg.data)] = seg.data
        uops = self.encoded_uops()
        view[self.uop_addr:self.uop_addr + len(uops)] = uops

    def disasm(self) -> str:
        """The program as assembly text, one instruction per line, then the micro-ops."""
        lines = [f"; {self.name or 'program'} for {self.config.model}: {len(self.insns)} instructions, "
                 f"{len(self.uops)} micro-ops at {self.uop_addr:#x}"]
        lines += [f"{i:5d}  {isa.disasm(insn)}" for i, insn in enumerate(self.insns)]
        if self.uops:
            lines.append("; micro-ops (dst, src, wgt)")
            lines += [f"{i:5d}  uop {u.dst_idx} {u.src_idx} {u.wgt_idx}" for i, u in enumerate(self.uops)]
        return "\n".join(lines)

    # ------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "name": self.name,
                "config": self.config.to_dict(), "uop_addr": self.uop_addr, "dram_size": self.dram_size,
                "segments": [{"name": s.name, "addr": s.addr} for s in self.segments]}
        arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
                  "insns": np.frombuffer(self.encoded_insns(), dtype=np.uint8),
                  "uops": np.frombuffer(self.encoded_uops(), dtype=np.uint8)}
        for i, seg in enumerate(self.segments):
            arrays[f"seg_{i}"] = np.frombuffer(seg.data, dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)

    @classmethod
    def load(cls, path: str | Path, config: VTAConfig | None = None) -> "Program":
        """Read a program file; ``config``, when given, must equal the one it was built for."""
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise ProgramError(f"cannot read program file {str(path)!r}: {exc.strerror}") from exc
        not_a_program = f"{str(path)!r} is not a vtakit program file (a {FORMAT_NAME} .npz archive, as Program.save writes)"
        if not raw.startswith(_ZIP_MAGIC):   # (numpy's own message for other files advises allow_pickle)
            raise ProgramError(f"{not_a_program}: it does not start with a zip archive's header")
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except ValueError as exc:    # numpy's message here advises allow_pickle, which is never the fix
            raise ProgramError(f"{not_a_program}: an entry is not a plain numpy array (Python objects or a broken header)") from exc
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ProgramError(f"{not_a_program}: {exc}") from exc
        if "meta" not in arrays:
            raise ProgramError(f"{not_a_program}: it has no 'meta' entry, only {sorted(arrays)}")
        try:
            meta = json.loads(bytes(arrays["meta"]).decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ProgramError(f"{not_a_program}: its 'meta' entry is not JSON text ({exc})") from exc
        for key, value in arrays.items():
            if value.dtype != np.uint8 or value.ndim != 1:
                raise ProgramError(f"{str(path)!r} is malformed: array {key!r} is {value.dtype} with shape "
                                   f"{value.shape}, expected 1-D uint8 bytes")
        if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
            raise ProgramError(f"{str(path)!r}: format {meta.get('format') if isinstance(meta, dict) else meta!r} "
                               f"is not {FORMAT_NAME!r}")
        if meta.get("version") != FORMAT_VERSION:
            raise ProgramError(f"{str(path)!r}: version {meta.get('version')!r} unsupported, expected {FORMAT_VERSION}")
        try:
            file_config = VTAConfig.from_dict(meta["config"])
            segments = [Segment(s["addr"], bytes(arrays[f"seg_{i}"]), str(s["name"]))
                        for i, s in enumerate(meta["segments"])]
            program = cls(config=file_config, insns=isa.decode(bytes(arrays["insns"]), file_config),
                          uops=isa.decode_uops(bytes(arrays["uops"]), file_config), uop_addr=meta["uop_addr"],
                          segments=segments, dram_size=meta["dram_size"], name=str(meta.get("name", "")))
        except (KeyError, TypeError, ValueError, ISAError, ConfigError, ProgramError) as exc:
            raise ProgramError(f"{str(path)!r} is malformed: {type(exc).__name__}: {exc}") from exc
        if config is not None and config != file_config:
            raise ProgramError(file_config.mismatch(config, repr(str(path)), "the requested configuration"))
        return program
