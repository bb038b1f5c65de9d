"""The one TensorRT version type: parsing, comparison, and the calibration-cache header number.

Every place that reads a TensorRT version (a ``--tensorrt``/``--trt`` flag, a target profile's JetPack
table, ``tensorrt.__version__``, an engine sidecar, a cache header) goes through :class:`TensorRTVersion`,
so "10.3", "10.3.0", "10.3.0.30" and the header ``TRT-100300-...`` are one and the same version.

It is a named tuple ``(major, minor, patch)``: it compares, sorts, hashes and formats like the plain
tuples the code used before (``(10, 3, 0) == TensorRTVersion(10, 3, 0)``), and ``str()`` gives
``"10.3.0"``.  Engines load only with the TensorRT major.minor they were built with
(:meth:`TensorRTVersion.same_release`); a calibration cache only with its exact header number
(:meth:`TensorRTVersion.cache_header_number`).
"""

import re
from types import ModuleType
from typing import Any, NamedTuple, Optional, Sequence, Tuple, Type, Union

from jetforge.errors import EngineBuildError, JetforgeError
from jetforge.targets import jetpack_tensorrt_versions

# Optional "TRT-"/"trt"/"v" prefix, 1 to 4 dotted numbers, then an optional release suffix that carries no
# number of ours (".post1", "rc2", "+cuda12", "-ga"): "10.3", "10.3.0.30", "TRT-8.6.2", "10.13.3.9.post1".
_VERSION_RE = re.compile(r"^(?:trt-?|v)?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.\d+)?(?:[.+-]?[a-z][0-9a-z.+-]*)?$",
                         re.IGNORECASE)

VersionLike = Union[str, Sequence[int], "TensorRTVersion"]


class TensorRTVersion(NamedTuple):
    """``(major, minor, patch)`` of a TensorRT (or TensorRT-RTX) release."""

    major: int
    minor: int = 0
    patch: int = 0

    # ---- making one ------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, value: VersionLike, *, error: Type[JetforgeError] = EngineBuildError,
              hint: str = "write e.g. 10.3.0") -> "TensorRTVersion":
        """``"10.3"`` / ``"8.6.2.3"`` / ``"TRT-10.3"`` / ``(8, 6, 2)`` -> the version; ``error`` otherwise.

        Callers choose the error class and the fix they print (a calibration error or a build error); the
        rule for what is a version is the same for all.
        """
        if isinstance(value, TensorRTVersion):
            return value
        if isinstance(value, (tuple, list)):
            parts = [int(p) for p in value][:3]
            if not parts or any(p < 0 for p in parts):
                raise error("TensorRT version %r is not of the form MAJOR.MINOR[.PATCH]" % (value,), hint=hint)
            return cls(*parts)
        match = _VERSION_RE.match(str(value).strip())
        if not match:
            raise error("TensorRT version %r is not of the form MAJOR.MINOR[.PATCH]" % (value,), hint=hint)
        return cls(*(int(g) if g else 0 for g in match.groups()))

    @classmethod
    def lenient(cls, text: Any) -> "TensorRTVersion":
        """The digits of each dotted part, 0 where there are none; never raises.

        For text jetforge did not write and must not fail on: ``tensorrt.__version__`` of any build,
        a rule's version bound, the version recorded in a sidecar from another tool.
        """
        parts = []
        for part in str(text).split(".")[:3]:
            digits = re.match(r"\D*(\d+)", part)
            parts.append(int(digits.group(1)) if digits else 0)
        while len(parts) < 3:
            parts.append(0)
        return cls(*parts)

    @classmethod
    def of_module(cls, trt: ModuleType) -> "TensorRTVersion":
        """The version of an imported ``tensorrt`` / ``tensorrt_rtx`` module (0.0.0 when it has none)."""
        return cls.lenient(getattr(trt, "__version__", "0"))

    @classmethod
    def from_header_number(cls, number: int) -> "TensorRTVersion":
        """Inverse of :meth:`cache_header_number`: 8602 -> 8.6.2, 100300 -> 10.3.0."""
        n = int(number)
        if n >= 100000:
            return cls(n // 10000, (n // 100) % 100, n % 100)
        return cls(n // 1000, (n // 100) % 10, n % 100)

    # ---- what it means -----------------------------------------------------------------------------------
    def cache_header_number(self) -> int:
        """The number in a calibration cache's ``TRT-<N>-<algorithm>`` header (``getInferLibVersion()``).

        ``1000*major + 100*minor + patch`` up to TensorRT 9 (8.5.2 -> 8502), ``10000*major + 100*minor +
        patch`` from TensorRT 10 (10.3.0 -> 100300).
        """
        return (1000 if self.major < 10 else 10000) * self.major + 100 * self.minor + self.patch

    @property
    def writes_calibration_caches(self) -> bool:
        """Whether this version's cache header can exist: 7.0 and later, minor and patch below 100."""
        return self.major >= 7 and self.minor <= 99 and self.patch <= 99

    @property
    def release(self) -> Tuple[int, int]:
        """``(major, minor)``: engines (plans) load only with the release they were built with."""
        return self.major, self.minor

    def same_release(self, other: VersionLike) -> bool:
        """Whether an engine built with one of the two loads with the other (same major.minor).

        Text is read leniently: it may come from a sidecar or a library jetforge did not write.
        """
        theirs = TensorRTVersion.lenient(other) if isinstance(other, str) else TensorRTVersion.parse(other)
        return self.release == theirs.release

    def __str__(self) -> str:
        return "%d.%d.%d" % (self.major, self.minor, self.patch)


def version_text(value: VersionLike, *, error: Type[JetforgeError] = EngineBuildError,
                 hint: str = "write e.g. 10.3.0") -> str:
    """``"10.3"`` / ``"10.3.0.30"`` -> ``"10.3.0"``: the form manifests, file names and messages use."""
    return str(TensorRTVersion.parse(value, error=error, hint=hint))


def known_release(value: VersionLike, *, error: Type[JetforgeError] = EngineBuildError,
                  flag: str = "--tensorrt") -> TensorRTVersion:
    """``value`` parsed, refused unless it is a TensorRT release of jetforge's JetPack table (``targets/jetpack.yaml``).

    For what jetforge *writes for* a version with no target to check against (a calibration cache's header): a
    version no JetPack ships (``9.9``, ``7``, ``99.1``) would stamp a file that no TensorRT reads.  The patch must
    match (``8.6`` is 8.6.0, and 8.6.2 ignores a cache stamped 8.6.0); a fourth number (``8.6.2.3``) is a build.
    """
    version = TensorRTVersion.parse(value, error=error, hint="write e.g. %s 10.3" % flag)
    known = jetpack_tensorrt_versions()
    if str(version) not in known:
        close = [k for k in known if TensorRTVersion.parse(k).release == version.release]
        raise error("TensorRT %s is not a release of jetforge's JetPack table%s" % (
            version, "; did you mean %s?" % close[0] if close else ""),
            hint="%s takes one of %s (a newer JetPack's TensorRT is added to targets/jetpack.yaml)"
                 % (flag, ", ".join(known)))
    return version


def major_of(text: Optional[str]) -> int:
    """The major version of a version text, 0 when it names none (never raises)."""
    return TensorRTVersion.lenient(text).major if text else 0
