"""Where a build takes its INT8 scales from: a calibration cache or the Q/DQ model, by TensorRT version and device.

* DLA takes INT8 only from a calibration cache (no Q/DQ networks on DLA through TensorRT 10.x);
* TensorRT 11 only from Q/DQ (implicit INT8, and with it calibration caches, was removed);
* TensorRT 10 on the GPU prefers the Q/DQ model (explicit quantization is the supported path there)
  and falls back to the cache;
* TensorRT 8.x prefers the cache (its Q/DQ support is narrower) and falls back to Q/DQ.

A bundle carries one cache per TensorRT version (the header decides which) and optionally the Q/DQ
model; ``jetforge bundle create`` asks this on the workstation for every (target, version) it prepares,
and the board asks it again when it builds (``jetforge build BUNDLE``, ``board-check``).
"""

from typing import Iterable, Optional, Tuple

from jetforge.runtime.tensorrt.version import TensorRTVersion


def source_order(version: TensorRTVersion, device: str) -> Tuple[str, ...]:
    """The INT8 sources a build with ``version`` on ``device`` ("gpu"/"dla") accepts, preferred first."""
    if device == "dla":
        return ("cache",)
    if version.major >= 11:
        return ("qdq",)
    if version.major == 10:
        return ("qdq", "cache")
    return ("cache", "qdq")


def choose_int8_source(tensorrt: str, device: str, precision: str, cache_versions: Iterable[str],
                       have_qdq: bool) -> Tuple[Optional[str], str]:
    """(``"cache"``, ``"qdq"`` or None, why) for a build with ``tensorrt`` on ``device``.

    ``cache_versions`` are the TensorRT versions caches exist for, ``have_qdq`` whether a Q/DQ model
    does.  None with an empty reason means no INT8 source is needed (fp16/fp32); None with a reason
    means there is none for this build.
    """
    if precision not in ("int8", "best"):
        return None, ""
    version = TensorRTVersion.parse(tensorrt)
    has_cache = version in {TensorRTVersion.parse(v) for v in cache_versions}
    order = source_order(version, device)
    for source in order:
        if (source == "cache" and has_cache) or (source == "qdq" and have_qdq):
            return source, ""
    if precision == "best":
        return None, "no INT8 scales for TensorRT %s: builds FP16" % (version,)
    wants = {"cache": "a calibration cache for TensorRT %s" % (version,), "qdq": "a Q/DQ model"}
    return None, "INT8 on %s with TensorRT %s needs %s" % (device.upper(), version,
                                                           " or ".join(wants[s] for s in order))
