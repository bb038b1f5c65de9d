"""TensorRT INT8 calibration caches: the text file ``IInt8Calibrator::writeCalibrationCache`` writes.

Format::

    TRT-100300-EntropyCalibration2
    input: 3c010a14
    conv1_out: 3d8e5a2b

The header number is ``getInferLibVersion()``: ``1000*major + 100*minor + patch`` for
TensorRT 8.x and earlier (8.5.2 -> 8502), ``10000*major + 100*minor + patch`` from 10.0
(10.3.0 -> 100300).  Each value is the big-endian IEEE-754 float32 bit pattern of the
**scale** ``amax / 127``.  TensorRT ignores (and recalibrates over) a cache whose header is
not its own, so a cache is stamped for one TensorRT version and this module refuses to hand
one over to another version unless the caller explicitly retargets it.

Parsing (and the rules a cache must meet) is the one reader's,
:mod:`jetforge.runtime.tensorrt.calib_cache`, which the build planner and bundles use too, and the
header number is the one version type's (``TensorRTVersion.cache_header_number``); this module adds
what calibration needs on top: amax <-> scale, version checks, retargeting, and the comparison with a
model's tensors.
"""

import logging
import math
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

from jetforge.errors import CalibrationError
from jetforge.fileio import PathLike, write_text_atomic
from jetforge.runtime.tensorrt import calib_cache
from jetforge.runtime.tensorrt.calib_cache import hex_to_scale, scale_to_hex  # noqa: F401  (public here too)
from jetforge.runtime.tensorrt.version import TensorRTVersion, known_release

log = logging.getLogger(__name__)

INT8_BOUND = 127.0

#: Algorithm tokens TensorRT writes in the header, by calibrator class.
ALGORITHM_TOKENS = OrderedDict([
    ("EntropyCalibration2", "IInt8EntropyCalibrator2"),
    ("MinMaxCalibration", "IInt8MinMaxCalibrator"),
    ("EntropyCalibration", "IInt8EntropyCalibrator (legacy)"),
    ("LegacyCalibration", "IInt8LegacyCalibrator"),
])
DEFAULT_TOKEN = "EntropyCalibration2"

#: The TensorRT versions each JetPack ships (for messages).
JETPACK_TRT = {(8, 5, 2): "JetPack 5.1.x", (8, 6, 2): "JetPack 6.0", (10, 3, 0): "JetPack 6.1/6.2"}

Version = TensorRTVersion
_TRT_HINT = "give e.g. --tensorrt 10.3 (JetPack 6.1/6.2), 8.6.2 (JetPack 6.0) or 8.5.2 (JetPack 5.1)"


def parse_trt_version(text: Union[str, Tuple[int, ...], List[int]]) -> TensorRTVersion:
    """``"10.3"`` / ``"10.3.0"`` / ``"8.6.2.3"`` / ``(8, 6, 2)`` -> the version, one that writes caches.

    The parser is the one version type's (:class:`~jetforge.runtime.tensorrt.version.TensorRTVersion`);
    calibration adds its error class and the ``--tensorrt`` fix.  It reads any version a cache may carry;
    :func:`stamp_version` is the stricter check for a version jetforge writes a new cache for.
    """
    version = TensorRTVersion.parse(text, error=CalibrationError, hint=_TRT_HINT)
    if not version.writes_calibration_caches:
        raise CalibrationError("TensorRT version %s is not one that writes calibration caches" % (version,),
                               hint="give a TensorRT version from 7.0 on, e.g. --tensorrt 10.3")
    return version


def stamp_version(text: Union[str, Tuple[int, ...], List[int]]) -> TensorRTVersion:
    """The version a *new* cache is stamped for: parsed, and refused unless a JetPack of jetforge's table ships it
    (:func:`~jetforge.runtime.tensorrt.version.known_release`): a cache for TensorRT 9.9 or 99.1 is read by no
    TensorRT.  Reading an existing cache accepts any version (:func:`parse_trt_version`)."""
    return known_release(parse_trt_version(text), error=CalibrationError)


def version_string(version: Union[str, Tuple[int, ...], List[int]]) -> str:
    return str(TensorRTVersion.parse(version, error=CalibrationError, hint=_TRT_HINT))


def float32(value: float) -> float:
    """Round a Python float to the nearest float32 (what the cache can hold)."""
    return struct.unpack(">f", struct.pack(">f", float(value)))[0]


@dataclass
class CacheValidation:
    """What a cache holds compared with a model's tensors."""

    matched: List[str] = field(default_factory=list)
    not_in_model: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    internal: List[str] = field(default_factory=list)  # TensorRT's own layer tensors, "(Unnamed Layer* 3) [...]"

    @property
    def ok(self) -> bool:
        return not self.not_in_model

    def to_dict(self) -> Dict[str, object]:
        return {"matched": len(self.matched), "not_in_model": list(self.not_in_model),
                "missing_from_cache": list(self.missing), "tensorrt_internal": len(self.internal), "ok": self.ok}


@dataclass
class CalibrationCache:
    """Per-tensor INT8 scales (``amax / 127``) stamped for one TensorRT version and calibrator."""

    scales: "OrderedDict[str, float]" = field(default_factory=OrderedDict)
    trt_version: Version = TensorRTVersion(10, 3, 0)
    algorithm: str = DEFAULT_TOKEN
    source: Optional[str] = None

    def __post_init__(self) -> None:
        self.trt_version = parse_trt_version(self.trt_version)
        if self.algorithm not in ALGORITHM_TOKENS:
            log.warning("calibration cache algorithm %r is not one TensorRT is known to write (%s)",
                        self.algorithm, ", ".join(ALGORITHM_TOKENS))
        self.scales = OrderedDict((str(k), float32(v)) for k, v in self.scales.items())
        calib_cache.check_scales(self.scales, self.source or "calibration cache")

    # ----------------------------------------------------------------- building
    @classmethod
    def from_amax(cls, amax: Dict[str, float], trt_version: Union[str, Version] = "10.3",
                  algorithm: str = DEFAULT_TOKEN) -> "CalibrationCache":
        """Scales from per-tensor amax; a tensor that is always 0 gets the placeholder scale 1/127.

        "Always 0" includes an amax so small that ``amax / 127`` is no normal float32 (below about
        1.5e-36): such a scale would be refused by every cache reader, and no activation that small is
        distinguishable from zero in INT8 anyway.
        """
        scales = OrderedDict()
        for name, a in amax.items():
            a = float(a)
            if not math.isfinite(a) or a < 0 or a / INT8_BOUND > calib_cache.FLOAT32_MAX:
                raise CalibrationError("amax of tensor %r is %r" % (name, a),
                                       hint="the model produced inf/NaN on the calibration data; check the data "
                                            "and preprocessing")
            scale = float32(a / INT8_BOUND)
            scales[name] = scale if scale >= calib_cache.FLOAT32_MIN_NORMAL else 1.0 / INT8_BOUND
        return cls(scales=scales, trt_version=parse_trt_version(trt_version), algorithm=algorithm)

    @property
    def header(self) -> str:
        return "TRT-%d-%s" % (self.header_number, self.algorithm)

    @property
    def header_number(self) -> int:
        return self.trt_version.cache_header_number()

    def amax(self, name: str) -> float:
        return self.scales[name] * INT8_BOUND

    def amaxes(self) -> Dict[str, float]:
        return OrderedDict((k, v * INT8_BOUND) for k, v in self.scales.items())

    def __len__(self) -> int:
        return len(self.scales)

    # ----------------------------------------------------------------- text
    def to_text(self) -> str:
        return calib_cache.format_calibration_cache(self.header_number, self.algorithm, self.scales)

    @classmethod
    def from_text(cls, text: str, source: str = "calibration cache") -> "CalibrationCache":
        """Parse a cache, including ones TensorRT wrote (CRLF, names with ``:``, short hex), by the one reader."""
        return cls._from_info(calib_cache.parse_calibration_cache(text, source), source)

    @classmethod
    def _from_info(cls, info: "calib_cache.CacheInfo", source: str) -> "CalibrationCache":
        return cls(scales=OrderedDict(info.scales), trt_version=info.version, algorithm=info.algorithm,
                   source=source)

    def write(self, path: PathLike) -> Path:
        return write_text_atomic(path, self.to_text())

    @classmethod
    def read(cls, path: PathLike) -> "CalibrationCache":
        return cls._from_info(calib_cache.read_calibration_cache_file(path), str(path))

    # ----------------------------------------------------------------- checks
    def check_version(self, trt_version: Union[str, Version]) -> None:
        """Refuse a cache stamped for another TensorRT: TensorRT would silently ignore it."""
        want = parse_trt_version(trt_version)
        if want.cache_header_number() == self.header_number:
            return
        have_s, want_s = version_string(self.trt_version), version_string(want)
        where = self.source or "calibration cache"
        raise CalibrationError(
            "%s is for TensorRT %s (header %s) but TensorRT %s%s was asked for; TensorRT ignores a cache "
            "whose header is not its own and would recalibrate or drop INT8"
            % (where, have_s, self.header, want_s,
               " (%s)" % JETPACK_TRT[want] if want in JETPACK_TRT else ""),
            hint="recalibrate with --tensorrt %s, or rewrite the header with --retarget if you accept scales computed "
                 "for TensorRT %s (safe for EntropyCalibration2/MinMax caches, which are computed before fusion)"
                 % (want_s, have_s))

    def check_algorithm(self, token: str) -> None:
        if token != self.algorithm:
            raise CalibrationError(
                "%s was written for %s but the build uses %s; TensorRT refuses it (\"Calibration table does "
                "not match calibrator algorithm type\")" % (self.source or "calibration cache", self.algorithm, token),
                hint="recalibrate, or retarget the cache to algorithm %s" % token)

    def retarget(self, trt_version: Union[str, Version], algorithm: Optional[str] = None) -> "CalibrationCache":
        """A copy stamped for ``trt_version`` (and ``algorithm``); the scales are unchanged. Logs a warning."""
        new = CalibrationCache(scales=OrderedDict(self.scales), trt_version=parse_trt_version(trt_version),
                               algorithm=algorithm or self.algorithm, source=self.source)
        if new.header != self.header:
            log.warning("retargeting calibration cache %s from %s to %s: the scales were computed by another "
                        "TensorRT version and are used as they are",
                        self.source or "", self.header, new.header)
        return new

    def validate_against(self, tensor_names: Iterable[str]) -> CacheValidation:
        """Which cache entries name tensors of the model, which do not, which model tensors have none."""
        names = list(tensor_names)
        known = set(names)
        result = CacheValidation()
        for name in self.scales:
            if name in known:
                result.matched.append(name)
            elif name.startswith("(Unnamed Layer"):
                result.internal.append(name)
            else:
                result.not_in_model.append(name)
        result.missing = [n for n in names if n not in self.scales]
        return result

    def to_dict(self) -> Dict[str, object]:
        return {"header": self.header, "trt_version": version_string(self.trt_version),
                "algorithm": self.algorithm, "tensors": len(self.scales)}
