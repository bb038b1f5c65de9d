"""Which TensorRT library is imported: JetPack/desktop ``tensorrt`` or ``tensorrt_rtx``.

This is the only place in jetforge that imports either (tests/test_architecture.py checks it); every other
module asks :func:`load_tensorrt`.  TensorRT-RTX parses ONNX and builds engines on any machine, so the
tests' parse/build checks run on it here, where JetPack's TensorRT cannot be installed; it has no DLA, no
INT8 calibrator and no precision flags (:mod:`.compat` says what each library has).
"""

import importlib
from types import ModuleType
from typing import Optional

from jetforge.errors import DependencyError
from jetforge.optional import INSTALL_HINTS, require

TENSORRT = "tensorrt"
TENSORRT_RTX = "tensorrt_rtx"
LIBRARIES = (TENSORRT, TENSORRT_RTX)
LIBRARY_NAMES = {TENSORRT: "TensorRT", TENSORRT_RTX: "TensorRT-RTX"}
_ALIASES = {"tensorrt": TENSORRT, "trt": TENSORRT, "rtx": TENSORRT_RTX, "tensorrt_rtx": TENSORRT_RTX,
            "tensorrt-rtx": TENSORRT_RTX}


def library_name(prefer: str) -> str:
    """``"tensorrt"`` / ``"rtx"`` / ``"tensorrt_rtx"`` -> the import name; ValueError for anything else."""
    try:
        return _ALIASES[prefer]
    except KeyError:
        raise ValueError("prefer must be one of tensorrt, rtx, got %r" % (prefer,)) from None


def load_tensorrt(prefer: str = TENSORRT, *, fallback: bool = False, purpose: str = "") -> ModuleType:
    """Import ``tensorrt`` (``prefer="tensorrt"``) or ``tensorrt_rtx`` (``prefer="rtx"``).

    With ``fallback`` the other library is tried when the preferred one is not installed, and a
    DependencyError names both installs when neither is.  Without it, a missing library is a
    DependencyError with its install hint; a broken install (an ImportError or OSError raised inside
    the package) is raised as it is, so that the user is not sent after the wrong fix.
    """
    first = library_name(prefer)
    if not fallback:
        return require(first, purpose or ("building TensorRT engines" if first == TENSORRT else "TensorRT-RTX builds"))
    for name in [first] + [n for n in LIBRARIES if n != first]:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise DependencyError("neither TensorRT nor TensorRT-RTX is installed; one is needed to parse and build ONNX",
                          hint="%s; or %s" % (INSTALL_HINTS[TENSORRT][1], INSTALL_HINTS[TENSORRT_RTX][1]))


def module_name(trt: ModuleType) -> str:
    """``"tensorrt"`` or ``"tensorrt_rtx"`` for an imported library module (or a stand-in named like one)."""
    top = trt.__name__.split(".")[0]
    return TENSORRT_RTX if top.startswith(TENSORRT_RTX) else TENSORRT


def is_rtx(trt: ModuleType) -> bool:
    return module_name(trt) == TENSORRT_RTX


def display_name(trt: ModuleType) -> str:
    """``"TensorRT"`` or ``"TensorRT-RTX"``."""
    return LIBRARY_NAMES[module_name(trt)]


def version_string(trt: ModuleType) -> str:
    """``trt.__version__`` as the library reports it (``"10.3.0.30"``); ``"0"`` when it has none."""
    return str(getattr(trt, "__version__", "0"))


def installed_version(prefer: str = TENSORRT) -> Optional[str]:
    """The version of the installed library, or None where it is not installed.

    Like :func:`jetforge.optional.is_available`, an ImportError (absent, or failing inside) means "not
    here"; anything else a broken install raises (OSError for a missing libnvinfer.so) propagates.
    """
    try:
        return version_string(importlib.import_module(library_name(prefer)))
    except ImportError:
        return None
