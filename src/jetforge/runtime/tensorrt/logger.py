"""The one TensorRT logger (``trt.ILogger``): keeps what TensorRT said and forwards it to Python logging.

Builds and parse checks keep every message, because the error jetforge raises quotes TensorRT's own words
(``errors()``, ``at_least("WARNING")``); a long-running session keeps none (``keep=False``) and only
forwards.  What is forwarded goes to the ``jetforge.runtime.tensorrt`` logger (or the one given) at a
matching level: errors as ERROR, warnings as WARNING, info and verbose as DEBUG.

TensorRT's severities are ordered ``INTERNAL_ERROR`` (0) < ``ERROR`` < ``WARNING`` < ``INFO`` <
``VERBOSE`` (4); "at least WARNING" means WARNING, ERROR or INTERNAL_ERROR.
"""

import logging
from types import ModuleType
from typing import Any, List, Optional, Tuple

from jetforge.runtime.tensorrt.compat import enum_name

SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")
LEVELS = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.ERROR, "WARNING": logging.WARNING,
          "INFO": logging.DEBUG, "VERBOSE": logging.DEBUG}
DEFAULT_LOGGER = "jetforge.runtime.tensorrt"


def _rank(name: str) -> int:
    return SEVERITIES.index(name) if name in SEVERITIES else len(SEVERITIES)


def make_logger(trt: ModuleType, *, keep: bool = True, forward: Optional[str] = "WARNING",
                log: Optional[logging.Logger] = None) -> Any:
    """A ``trt.ILogger`` for ``trt`` (TensorRT or TensorRT-RTX).

    ``keep``: record ``(severity name, message)`` pairs in ``.messages``.  ``forward``: the least severe
    severity passed on to Python logging (``"VERBOSE"`` for all, None for none).
    """
    target = log or logging.getLogger(DEFAULT_LOGGER)
    limit = _rank(forward) if forward is not None else -1

    class JetforgeTrtLogger(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: List[Tuple[str, str]] = []

        def log(self, severity: Any, msg: str) -> None:  # noqa: A003 - TensorRT's method name
            name = enum_name(severity)
            if keep:
                self.messages.append((name, str(msg)))
            if _rank(name) <= limit:
                target.log(LEVELS.get(name, logging.INFO), "TensorRT: %s", msg)

        def at_least(self, severity: str, since: int = 0) -> List[str]:
            """Kept messages of ``severity`` or worse (from message number ``since`` on)."""
            return [m for s, m in self.messages[since:] if _rank(s) <= _rank(severity)]

        def errors(self, since: int = 0) -> List[str]:
            return self.at_least("ERROR", since)

    return JetforgeTrtLogger()
