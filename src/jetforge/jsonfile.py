"""The one strict reader of JSON files from others (sidecars, manifests, plans, reports, samples metadata).

Python's ``json`` accepts what no file jetforge writes contains and what a hostile file uses: duplicate keys (the
last silently wins, so two readers of the same file can disagree about it), ``NaN``/``Infinity`` (which then flow
into preprocessing, scales and events as NaN; ``1e999`` is infinity by another name), strings holding a lone
UTF-16 surrogate (``"\\ud800"``: no character, and a UnicodeEncodeError wherever it is written or printed), and
nesting deep enough to raise ``RecursionError`` (an internal error).  :func:`parse_json` refuses each with one
line naming the file and where, and never quotes the file's content (a file named by mistake may hold a secret).
Readers then check types and ranges of what they use.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type

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


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999 parses as infinity: as much a non-number as Infinity
        raise _Refused("it holds a number too large for a float (one of %d characters), which reads as infinity"
                       % len(text))
    return value


def _lone_surrogate(node: Any) -> bool:
    """Whether a string anywhere in ``node`` (keys too) holds a lone surrogate (JSON's "\\ud800" escapes one)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= ch <= "\udfff" for ch in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


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
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants,
                          parse_float=_finite_float)
        if _lone_surrogate(data):  # cannot be written back as UTF-8, printed, or put in a generated file
            raise _Refused("a string in it holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is no character")
        return data
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
    return parse_json(read_text(path, what, error, hint), "%s %s" % (what, path), error, hint)


def read_text(path: PathLike, what: str = "text file", error: Type[JetforgeError] = InputFileError,
              hint: str = "") -> str:
    """The UTF-8 text of the file at ``path`` (labels, lists, JSON); a binary file is ``error``, never a crash.

    Refused in one line naming the file (never quoting it): unreadable, not UTF-8, or holding a NUL byte (no
    text file does; an image or a model named by mistake does).  Lone surrogates cannot occur: strict UTF-8
    decoding refuses their bytes.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise error("%s %s is not UTF-8 text (a binary file? byte %d is not UTF-8)" % (what, p, err.start),
                    hint=hint or None) from None
    except OSError as err:
        raise error("cannot read %s %s: %s" % (what, p, err.strerror or type(err).__name__), hint=hint or None) \
            from None
    if "\x00" in text:
        raise error("%s %s holds a NUL byte at character %d: a binary file, not text" % (what, p, text.index("\x00")),
                    hint=hint or None)
    return text


class ValueRefused(ValueError):
    """A value of a file from others has the wrong type or range; readers name the file around this message."""


_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
               dict: "an object"}


def expect(value: Any, kind: type, what: str) -> Any:
    """``value`` when it is of ``kind`` as JSON writes it (an int for a float is fine; a bool is never a number and
    nothing is coerced: ``true`` is no format 1, a list is no label), else :class:`ValueRefused` naming ``what``
    and the type found (never the value: it may be a secret)."""
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        found = ("null" if value is None else "a boolean" if isinstance(value, bool)
                 else _KIND_NAMES.get(type(value), type(value).__name__))
        raise ValueRefused("%s must be %s, not %s" % (what, _KIND_NAMES.get(kind, kind.__name__), found))
    return value


def expect_number(value: Any, what: str, low: Optional[float] = None, high: Optional[float] = None, *,
                  integer: bool = False, low_open: bool = False) -> Any:
    """``value`` as an int (``integer``) or a float, inside ``[low, high]`` (above ``low`` when ``low_open``);
    else :class:`ValueRefused` naming ``what``, the value and the range.  Floats are finite already
    (:func:`parse_json` refuses the rest)."""
    number = expect(value, int if integer else float, what)
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and number > high
    if too_low or too_high:
        parts = []
        if low is not None:
            parts.append(("above %g" if low_open else "at least %g") % low)
        if high is not None:
            parts.append("at most %g" % high)
        raise ValueRefused("%s is %s; it must be %s" % (what, number if integer else "%g" % number,
                                                        " and ".join(parts)))
    return number


def expect_text(value: Any, what: str, max_chars: int = 10000) -> str:
    """``value`` as a string of at most ``max_chars`` characters (a 100,000-character label is no label)."""
    text = expect(value, str, what)
    if len(text) > max_chars:
        raise ValueRefused("%s is %d characters long; at most %d are read" % (what, len(text), max_chars))
    return text


def expect_texts(value: Any, what: str, max_chars: int = 10000) -> List[str]:
    """``value`` as a list of strings (a nested list or a null in it is refused, never turned into ``"None"``)."""
    return [expect_text(item, "%s[%d]" % (what, i), max_chars) for i, item in enumerate(expect(value, list, what))]


__all__ = ["MAX_DEPTH", "ValueRefused", "expect", "expect_number", "expect_text", "expect_texts", "parse_json",
           "read_json", "read_text"]
