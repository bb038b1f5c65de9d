"""The one strict reader of JSON files from others (sidecars, manifests, plans, reports, samples metadata).

Python's ``json`` accepts what no file jetforge writes contains and what a hostile file uses: duplicate keys (the
last silently wins, so two readers of the same file can disagree about it), ``NaN``/``Infinity`` (which then flow
into preprocessing, scales and events as NaN), and nesting deep enough to raise ``RecursionError`` (an internal
error).  :func:`parse_json` refuses each with one line naming the file and where, and never quotes the file's
content (a file named by mistake may hold a secret).  Readers then check types and ranges of what they use.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple, Type

from jetforge.errors import InputFileError, JetforgeError
from jetforge.fileio import PathLike

MAX_DEPTH = 64  # deeper than any file jetforge writes; a sidecar nested 100,000 deep is refused before parsing


class _Refused(ValueError):
    """Raised inside the parser's hooks; turned into the caller's one-line error."""


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused("the key %s appears twice in one object" % _shown_key(key))
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise _Refused("it holds %s, which is not a number JSON allows" % name)


def _shown_key(key: str) -> str:
    """A key named in a message: short keys as they are (they are field names), others not at all."""
    if len(key) <= 40 and key.replace("_", "").replace("-", "").replace(".", "").isalnum():
        return repr(key)
    return "(a key of %d characters)" % len(key)


def _depth(text: str) -> int:
    """The deepest ``[``/``{`` nesting, outside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json(text: str, where: str, error: Type[JetforgeError] = InputFileError, hint: str = "") -> Any:
    """``text`` parsed strictly (see the module docstring); ``error`` names ``where`` and what is wrong."""
    if _depth(text) > MAX_DEPTH:
        raise error("%s nests lists or objects more than %d deep: not a file jetforge reads" % (where, MAX_DEPTH),
                    hint=hint or None)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except _Refused as err:
        raise error("%s is refused: %s" % (where, err), hint=hint or None) from None
    except json.JSONDecodeError as err:  # the parser's own words and a position, never the text
        raise error("%s is not valid JSON (%s at line %d column %d)" % (where, err.msg, err.lineno, err.colno),
                    hint=hint or None) from None
    except (ValueError, RecursionError) as err:  # int() of 4301+ digits and the like
        raise error("%s holds a value JSON cannot convert (%s)" % (where, type(err).__name__), hint=hint or None) \
            from None


def read_json(path: PathLike, what: str = "JSON file", error: Type[JetforgeError] = InputFileError,
              hint: str = "") -> Any:
    """Read and :func:`parse_json` the file at ``path``; unreadable or non-UTF-8 files are ``error`` too."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise error("%s %s is not UTF-8 text" % (what, p), hint=hint or None) from None
    except OSError as err:
        raise error("cannot read %s %s: %s" % (what, p, err.strerror or type(err).__name__), hint=hint or None) \
            from None
    return parse_json(text, "%s %s" % (what, p), error, hint)


__all__ = ["MAX_DEPTH", "parse_json", "read_json"]
