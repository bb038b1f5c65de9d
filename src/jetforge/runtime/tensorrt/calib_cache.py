"""The one reader (and writer) of TensorRT INT8 calibration caches, with one set of rules.

A cache is the text file ``IInt8Calibrator::writeCalibrationCache`` writes::

    TRT-100300-EntropyCalibration2
    input: 3c010a14
    conv1_out: 3d8e5a2b

The header number is ``getInferLibVersion()``: ``1000*major + 100*minor + patch`` up to TensorRT 9
(8.5.2 -> 8502) and ``10000*major + 100*minor + patch`` from TensorRT 10 (10.3.0 -> 100300); the one
version type, :class:`~jetforge.runtime.tensorrt.version.TensorRTVersion`, converts both ways.
Each value is the big-endian IEEE-754 float32 bit pattern of a tensor's scale (``amax / 127``).
NVIDIA's own tools write values without zero padding (``1a2b3c`` for ``001a2b3c``), so 1 to 8 hex
digits are read.

Caches travel between machines and people, so every reader in jetforge (the build planner, the
TensorRT builder, ``dla-check``, ``calibrate --check-cache``, ``bundle create``) parses them here,
and what no calibration produces is refused with the line number:

* bytes that are not printable ASCII (an engine, a timing cache, a file in another encoding);
* a header that is not ``TRT-<number>-<algorithm>``, or whose number is no TensorRT version that
  writes caches (7.0 to 9.x as ``N < 10000``, 10 and later as ``N >= 100000``);
* a line that is not ``name: hexscale`` (the name may hold ``:`` and spaces, as TensorRT's own
  ``(Unnamed Layer* 3) [Shuffle]_output`` does);
* a scale that is not a finite, positive, normal float32: NaN, infinity, zero, a negative number,
  or a subnormal (below 2**-126 ~ 1.2e-38).  A cache whose last value was cut (``logits: 2db8``)
  decodes to a subnormal (1.6e-41) and is refused instead of being read as a valid scale;
  ``scale = amax / 127`` of any tensor that is not always zero is normal;
* a tensor named twice (which of the two values TensorRT would use is not defined).

Error messages name the file, the line number and the rule, never the file's text: a path that
was not meant to be a cache must not be echoed back.

This module imports only :mod:`jetforge.errors` and the version type: the runtime, calibrate, deploy and
cli layers all use it.
"""

import math
import re
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Mapping, Union

from jetforge.errors import CalibrationError, InputFileError
from jetforge.runtime.tensorrt.version import TensorRTVersion

#: The smallest positive normal float32 (2**-126); a scale below it is subnormal.
FLOAT32_MIN_NORMAL = 2.0 ** -126
#: The largest float32.
FLOAT32_MAX = struct.unpack(">f", bytes.fromhex("7f7fffff"))[0]

_HEADER_RE = re.compile(r"^TRT-(\d{1,9})-([A-Za-z0-9_]+)$")
_HEX_RE = re.compile(r"^(?:0[xX])?([0-9a-fA-F]{1,8})$")
_NOT_PRINTABLE = re.compile(r"[^\x20-\x7e\t\r\n]")
_HINT_DAMAGED = "the file is cut or damaged: recalibrate with `jetforge calibrate`, or copy the cache again"

# ------------------------------------------------------------------------------------------------
# header numbers and scale bits (the numbering itself is TensorRTVersion.cache_header_number)
# ------------------------------------------------------------------------------------------------
def is_header_number(number: int) -> bool:
    """Whether ``number`` is one a TensorRT that writes caches puts in the header (7.0 and later)."""
    return 7000 <= number < 10000 or 100000 <= number < 10000000


def scale_to_hex(scale: float) -> str:
    """A float32 scale -> 8 lowercase hex digits of its big-endian bit pattern."""
    return struct.pack(">f", float(scale)).hex()


def hex_to_scale(text: str) -> float:
    """1 to 8 hex digits (optionally ``0x``-prefixed) -> the float32 they encode; ValueError otherwise.

    This only decodes: whether the value is a usable scale is :func:`scale_problem`'s question.
    """
    m = _HEX_RE.match(text.strip())
    if not m:
        raise ValueError("not 1-8 hex digits")
    return struct.unpack(">f", bytes.fromhex(m.group(1).rjust(8, "0")))[0]


def scale_problem(scale: float) -> str:
    """Why ``scale`` cannot be a calibration scale ("" when it can): finite, positive, normal float32."""
    if math.isnan(scale):
        return "not a number (NaN)"
    if math.isinf(scale):
        return "infinite"
    if scale == 0:
        return "zero"
    if scale < 0:
        return "negative"
    if scale < FLOAT32_MIN_NORMAL:
        return "subnormal (below 1.2e-38, as a value cut short decodes)"
    if scale > FLOAT32_MAX:
        return "beyond the float32 range"
    return ""


def check_scales(scales: Mapping[str, float], source: str = "calibration cache") -> None:
    """Raise CalibrationError for the first scale :func:`scale_problem` refuses (used by writers too)."""
    for name, scale in scales.items():
        why = scale_problem(float(scale))
        if why:
            raise CalibrationError("%s: the scale of tensor %r is %s; TensorRT needs finite, positive, normal "
                                   "float32 scales" % (source, name, why),
                                   hint="recalibrate; a tensor that is always zero gets the placeholder 1/127")


# ------------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheInfo:
    """A parsed cache: its header, TensorRT header number, calibrator algorithm and scales in file order."""

    header: str
    version_number: int
    algorithm: str
    scales: Dict[str, float] = field(default_factory=OrderedDict)

    @property
    def version(self) -> TensorRTVersion:
        return TensorRTVersion.from_header_number(self.version_number)


def _text_of(data: Union[bytes, str], source: str) -> str:
    if isinstance(data, bytes):
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError as err:
            raise CalibrationError("%s is not a text calibration cache: byte %d is not ASCII" % (source, err.start),
                                   hint="give the cache TensorRT's calibrator or `jetforge calibrate` wrote, not an "
                                        "engine, a timing cache or another file") from None
    else:
        text = data
    bad = _NOT_PRINTABLE.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        raise CalibrationError("%s is not a text calibration cache: line %d holds a %s character"
                               % (source, line, "non-ASCII" if ord(bad.group()) > 127 else "control"),
                               hint="give the cache TensorRT's calibrator or `jetforge calibrate` wrote")
    return text


def parse_calibration_cache(data: Union[bytes, str], source: str = "calibration cache") -> CacheInfo:
    """Parse a cache (bytes or text) under the rules of the module docstring; CalibrationError otherwise."""
    text = _text_of(data, source)
    numbered = [(i, ln.strip()) for i, ln in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"),
                                                       start=1)]
    numbered = [(i, ln) for i, ln in numbered if ln]
    if not numbered:
        raise CalibrationError("%s is empty" % source, hint="recalibrate with `jetforge calibrate`")
    first, header = numbered[0]
    match = _HEADER_RE.match(header)
    if not match:
        raise CalibrationError("%s does not start with a TensorRT header like TRT-100300-EntropyCalibration2 "
                               "(line %d is not one)" % (source, first),
                               hint="give a cache written by TensorRT or `jetforge calibrate`")
    number = int(match.group(1))
    if not is_header_number(number):
        raise CalibrationError("%s: header number %d is not a TensorRT version that writes caches (7.0 and later: "
                               "8502 for 8.5.2, 100300 for 10.3.0)" % (source, number), hint=_HINT_DAMAGED)
    scales: Dict[str, float] = OrderedDict()
    seen: Dict[str, int] = {}
    for number_of_line, line in numbered[1:]:
        name, sep, value = line.rpartition(":")
        name = name.strip()
        if not sep or not name:
            raise CalibrationError("%s line %d is not `tensor: hexscale`" % (source, number_of_line),
                                   hint=_HINT_DAMAGED)
        try:
            scale = hex_to_scale(value)
        except ValueError:
            raise CalibrationError("%s line %d: the value is not a hex float32 scale (1-8 hex digits)"
                                   % (source, number_of_line), hint=_HINT_DAMAGED) from None
        why = scale_problem(scale)
        if why:
            raise CalibrationError("%s line %d: the scale is %s; no calibration writes that (TensorRT needs finite, "
                                   "positive, normal float32 scales)" % (source, number_of_line, why),
                                   hint=_HINT_DAMAGED)
        if name in seen:
            raise CalibrationError("%s line %d names the tensor of line %d again" % (source, number_of_line,
                                                                                     seen[name]),
                                   hint="keep one scale per tensor: recalibrate, or remove the duplicate line")
        seen[name] = number_of_line
        scales[name] = scale
    return CacheInfo(header, int(match.group(1)), match.group(2), scales)


def read_calibration_cache_file(path: Union[str, Path]) -> CacheInfo:
    """:func:`parse_calibration_cache` of the file at ``path`` (which must be a regular file)."""
    p = Path(path)
    if not p.is_file():
        raise InputFileError("calibration cache %s %s" % (p, "is a folder, not a file" if p.is_dir()
                                                          else "does not exist"),
                             hint="give the .calib written by `jetforge calibrate MODEL --data DIR`")
    return parse_calibration_cache(p.read_bytes(), "calibration cache %s" % p)


# ------------------------------------------------------------------------------------------------
# writing
# ------------------------------------------------------------------------------------------------
def format_calibration_cache(version_number: int, algorithm: str, scales: Mapping[str, float]) -> str:
    """The text TensorRT writes: the header line, then ``name: 8 hex digits`` per tensor, ``\\n`` ended.

    Refuses what :func:`parse_calibration_cache` would refuse, so a written cache always reads back.
    """
    if not is_header_number(int(version_number)):
        raise CalibrationError("header number %d is not a TensorRT version that writes caches" % version_number,
                               hint="give a TensorRT version from 7.0 on, e.g. 10.3")
    if not re.match(r"^[A-Za-z0-9_]+$", algorithm):
        raise CalibrationError("calibrator algorithm %r is not a header token" % algorithm,
                               hint="use e.g. EntropyCalibration2")
    check_scales(scales)
    for name in scales:
        if not name.strip() or name != name.strip() or _NOT_PRINTABLE.search(name) or set(name) & {"\n", "\r"}:
            raise CalibrationError("tensor name %r cannot be written to a calibration cache" % name,
                                   hint="give tensors printable ASCII names without surrounding spaces")
    lines = ["TRT-%d-%s" % (int(version_number), algorithm)]
    lines.extend("%s: %s" % (name, scale_to_hex(s)) for name, s in scales.items())
    return "\n".join(lines) + "\n"
