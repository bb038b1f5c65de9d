"""Configuration as dataclasses, loaded from YAML plus ``--set key=value`` overrides.

Every subcommand's options are a dataclass.  This module turns a YAML mapping
(and dotted overrides) into an instance of it, checking types and rejecting
unknown keys with a did-you-mean suggestion, so that downstream code only ever
sees a typed, validated object and a typo in a config file can never be
silently ignored.

A number's allowed range is a :class:`Bound`: one object, with the reason for its limits, that checks the
option wherever it arrives - a command-line flag (:meth:`Bound.argtype`, argparse's ``type=``), a YAML key or
``--set`` (a dataclass field made with :meth:`Bound.field`, checked by :func:`from_dict` under its dotted name) and
a Python argument (:meth:`Bound.check`).  Every ``float`` the loader reads must be finite: no option means
anything by NaN or infinity, and NaN passes every comparison a range check makes (``grad_clip: .nan`` turned
clipping off).
"""

import argparse
import copy
import dataclasses
import enum
import math
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Type, TypeVar, Union

from jetforge.errors import ConfigError, InputFileError, UnknownNameError
from jetforge.fileio import require_file

T = TypeVar("T")

_NONE = type(None)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


Number = Union[int, float]


class Bound:
    """The allowed range of one numeric option, and why its limits are where they are.

    ``kind`` is ``int`` or ``float``; ``low``/``high`` are the limits (None: none on that side), inclusive unless
    ``low_open``/``high_open``; ``why`` says where the limits come from (a memory size, a format's field width, what
    the algorithm can use) and is part of every refusal, so a user learns the reason, not only the number.  A float
    must be finite whatever the limits; an int is never a bool or a float.  The refusal names the option, the value
    and the range in one line: ``--upscale: 50 is out of range (allowed: (0, 8]; ...)``.
    """

    def __init__(self, kind: type, low: Optional[Number] = None, high: Optional[Number] = None, *,
                 low_open: bool = False, high_open: bool = False, why: str = "") -> None:
        if kind not in (int, float):
            raise TypeError("a Bound is of int or float, not %r" % (kind,))
        self.kind = kind
        self.low, self.high = low, high
        self.low_open, self.high_open = low_open, high_open
        self.why = why

    def describe(self) -> str:
        """The range as a user reads it: ``1..4096``, ``1 or more``, ``(0, 8]``, ``above 0``."""
        def show(v: Number) -> str:
            return "%d" % v if self.kind is int else "%g" % v
        if self.low is not None and self.high is not None:
            if self.kind is int:
                return "%s..%s" % (show(self.low), show(self.high))
            return "%s%s, %s%s" % ("(" if self.low_open else "[", show(self.low), show(self.high),
                                   ")" if self.high_open else "]")
        if self.low is not None:
            return ("above %s" if self.low_open else "%s or more") % show(self.low)
        if self.high is not None:
            return ("below %s" if self.high_open else "at most %s") % show(self.high)
        return "any finite number" if self.kind is float else "any integer"

    def problem(self, value: Any) -> str:
        """Why ``value`` is refused, as the text after the option's name ("" when it is allowed)."""
        allowed = "allowed: %s%s" % (self.describe(), "; " + self.why if self.why else "")
        if self.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            return "%r is not an integer (%s)" % (value, allowed)
        if self.kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return "%r is not a number (%s)" % (value, allowed)
            if not math.isfinite(value):
                return "%r is not a finite number (%s)" % (value, allowed)
        low_bad = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        high_bad = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if low_bad or high_bad:
            return "%s is out of range (%s)" % (value if self.kind is int else "%g" % value, allowed)
        return ""

    def check(self, value: Any, name: str) -> Any:
        """``value`` (as ``self.kind``) when allowed, else :class:`ConfigError` naming ``name`` (``--batch``,
        ``train.grad_clip``)."""
        problem = self.problem(value)
        if problem:
            raise ConfigError("%s: %s" % (name, problem))
        return float(value) if self.kind is float else value

    def parse(self, text: str) -> Number:
        """A flag's text as a checked number; :class:`argparse.ArgumentTypeError` (argparse names the flag)."""
        try:
            value: Number = self.kind(text.strip())
        except (TypeError, ValueError, OverflowError):
            raise argparse.ArgumentTypeError("%r is not %s (allowed: %s%s)" % (
                text, "an integer" if self.kind is int else "a number", self.describe(),
                "; " + self.why if self.why else "")) from None
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    @property
    def argtype(self) -> Callable[[str], Number]:
        """argparse's ``type=`` for a flag with this range (a refusal is a usage error: one line, exit 1)."""
        return self.parse

    def field(self, default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
        """A dataclass field whose values :func:`from_dict` checks against this range (None passes: unset)."""
        metadata = dict(kwargs.pop("metadata", {}) or {})
        metadata[BOUND_KEY] = self
        return dataclasses.field(default=default, metadata=metadata, **kwargs)

    def __repr__(self) -> str:
        return "Bound(%s, %s)" % (self.kind.__name__, self.describe())


#: A count of things to do (iterations, samples, frames): 1 or more.  No upper limit: a count costs time, not memory,
#: and Ctrl-C stops it; where a count does cost memory the command checks it against the memory it needs.
COUNT = Bound(int, 1)
#: A count that may be zero (warm-up calls, reconnect attempts, frames a lost track is kept).
NON_NEGATIVE = Bound(int, 0)
#: A probability or score threshold.
PROBABILITY = Bound(float, 0.0, 1.0, why="a probability")
#: A length or a duration that may be zero (pixels of margin, seconds).
NON_NEGATIVE_NUMBER = Bound(float, 0.0)
#: A size or a duration above zero (pixels, seconds).
POSITIVE_NUMBER = Bound(float, 0.0, low_open=True)

#: The dataclass field metadata key that holds a field's :class:`Bound`.
BOUND_KEY = "jetforge_bound"


def dynamic_argtype(make: Callable[[], Bound]) -> Callable[[str], Number]:
    """argparse's ``type=`` for a range known only when the command runs (``--threads``: this machine's CPUs)."""
    def parse(text: str) -> Number:
        return make().parse(text)
    parse.__name__ = getattr(make, "__name__", "bounded")
    return parse


def check_bounds(obj: Any, where: str = "") -> None:
    """Check every field of dataclass ``obj`` made with :meth:`Bound.field` (None, a list's or a mapping's
    numbers: each checked): what ``__post_init__`` calls so that a Python caller gets the loader's checks."""
    for f in dataclasses.fields(obj):
        bound = f.metadata.get(BOUND_KEY)
        if bound is not None:
            _check_bound(bound, getattr(obj, f.name), "%s.%s" % (where, f.name) if where else f.name)


def _check_bound(bound: Bound, value: Any, where: str) -> None:
    if value is None:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_bound(bound, v, "%s.%s" % (where, k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_bound(bound, v, "%s[%d]" % (where, i))
    else:
        bound.check(value, where)


def _convert(value: Any, tp: Any, where: str, bound: Optional[Bound] = None) -> Any:
    """Convert a YAML value to the annotated type ``tp`` or raise ConfigError naming ``where``; ``bound``: the
    field's range, checked on each number it holds (a list's items, a mapping's values)."""
    origin = typing.get_origin(tp) if hasattr(typing, "get_origin") else getattr(tp, "__origin__", None)
    args = typing.get_args(tp) if hasattr(typing, "get_args") else getattr(tp, "__args__", ())
    if tp is Any:
        return value
    if origin is typing.Union:
        if value is None and _NONE in args:
            return None
        options = [a for a in args if a is not _NONE]
        if len(options) == 1:  # Optional[X]: X's own error (e.g. a did-you-mean) is the useful one
            return _convert(value, options[0], where, bound)
        errors = []
        for option in options:
            try:
                return _convert(value, option, where, bound)
            except ConfigError as err:
                errors.append(err.message)
        raise ConfigError("%s: %r does not fit %s" % (where, value, " or ".join(_type_name(a) for a in args)))
    if origin is typing.Literal if hasattr(typing, "Literal") else False:
        if value not in args:
            raise ConfigError("%s: %r is not one of %s" % (where, value, ", ".join(repr(a) for a in args)))
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError("%s: expected a mapping for %s, got %r" % (where, tp.__name__, value))
        return from_dict(tp, value, where=where)
    if origin in (list, List, tuple, typing.Tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            value = [value]
        items = list(value)
        if origin in (tuple, typing.Tuple):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_convert(v, args[0], "%s[%d]" % (where, i), bound) for i, v in enumerate(items))
            if args and len(args) != len(items):
                raise ConfigError("%s: expected %d values, got %d" % (where, len(args), len(items)))
            return tuple(_convert(v, a, "%s[%d]" % (where, i), bound) for i, (v, a) in enumerate(zip(items, args)))
        item_type = args[0] if args else Any
        return [_convert(v, item_type, "%s[%d]" % (where, i), bound) for i, v in enumerate(items)]
    if origin in (dict, Dict):
        if not isinstance(value, Mapping):
            raise ConfigError("%s: expected a mapping, got %r" % (where, value))
        key_t, val_t = args if args else (Any, Any)
        return {_convert(k, key_t, where): _convert(v, val_t, "%s.%s" % (where, k), bound) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise UnknownNameError(where, str(value), [str(m.value) for m in tp]) from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError("%s: expected true or false, got %r" % (where, value))
    if tp is int or tp is float:
        return _convert_number(value, tp, where, bound)
    if tp is str:
        if not isinstance(value, str):
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            raise ConfigError("%s: expected a string, got %r" % (where, value),
                              hint="write it in quotes, e.g. '%s'" % value if number else None)
        return value
    if tp is Path:
        if not isinstance(value, (str, os.PathLike)):
            raise ConfigError("%s: expected a path, got %r" % (where, value))
        return Path(value)
    return value


def _convert_number(value: Any, tp: type, where: str, bound: Optional[Bound]) -> Any:
    """An ``int`` (never a bool: ``format: true`` is not 1) or a finite ``float``, within ``bound`` if given."""
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError("%s: expected an integer, got %r" % (where, value))
        return value if bound is None else bound.check(value, where)
    if isinstance(value, str):  # PyYAML reads 1e-3 (no dot) as a string
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError("%s: expected a number, got %r" % (where, value))
    try:
        number = float(value)
    except OverflowError:  # an int past 1.8e308
        number = math.inf
    if bound is not None:  # its refusal names the range, NaN and infinity included
        return bound.check(number, where)
    if not math.isfinite(number):  # NaN passes every range check after it; no option means anything by it
        raise ConfigError("%s: %r is not a finite number" % (where, value), hint="give a finite number")
    return number


def _hints(cls: type) -> Dict[str, Any]:
    module = sys.modules.get(cls.__module__)
    return typing.get_type_hints(cls, vars(module) if module else None)


def from_dict(cls: Type[T], data: Mapping[str, Any], *, where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys with a suggestion."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError("%r is not a dataclass" % (cls,))
    if not isinstance(data, Mapping):
        raise ConfigError("%s: expected a mapping of keys to values, got %s"
                          % (where or cls.__name__, type(data).__name__))
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = _hints(cls)
    kwargs = {}
    for key, value in data.items():
        dotted = "%s.%s" % (where, key) if where else str(key)
        if key not in fields:
            raise UnknownNameError("configuration key", str(key), fields, prefix=where + "." if where else "",
                                   hint="valid keys here: " + ", ".join(sorted(fields)))
        kwargs[key] = _convert(value, hints[key], dotted, fields[key].metadata.get(BOUND_KEY))
    try:
        return cls(**kwargs)  # type: ignore[call-arg]
    except TypeError as err:
        raise ConfigError("%s: %s" % (where or cls.__name__, err)) from err
    except ValueError as err:  # __post_init__ validation (its message may already name the section)
        message, place = str(err), where or cls.__name__
        named = message.startswith(place + ":") or message.startswith(place + ".")
        raise ConfigError(message if named else "%s: %s" % (place, message)) from err


def to_dict(obj: Any) -> Any:
    """A YAML/JSON-friendly view of a config object (Paths as strings, enums as values)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    return obj


def parse_override(text: str) -> "tuple[list[str], Any]":
    """Split ``a.b=value`` into (["a", "b"], parsed value); the value is read as YAML."""
    import yaml

    if "=" not in text:
        raise ConfigError("--set %r is not of the form key=value" % text, hint="write e.g. --set precision=fp16")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError("--set %r has an empty key" % text)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError):  # as in read_yaml: the text stays a string
        value = raw
    return key.split("."), value


#: Deeper flow nesting than any configuration has; PyYAML's scanner slows down with the square of the depth
#: (2000 ``[`` take seconds, a few KB more take minutes), so such text is refused before YAML reads it.
MAX_YAML_NESTING = 64


def yaml_nesting_problem(text: str) -> str:
    """Why ``text`` is refused before YAML parses it ("" when it is not): flow nesting past MAX_YAML_NESTING."""
    depth = deepest = 0
    for ch in re.sub(r"[^\[\]{}]", "", text):
        depth = depth + 1 if ch in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    if deepest > MAX_YAML_NESTING:
        return "nests [ ] or { } %d deep (more than %d)" % (deepest, MAX_YAML_NESTING)
    return ""


def read_yaml(path: "str | os.PathLike[str]") -> Dict[str, Any]:
    """Read a YAML mapping, turning every way a file can be wrong into one clear error."""
    import yaml

    p = require_file(path, "configuration file", hint="check the path given to --config")
    try:
        text = p.read_text(encoding="utf-8")
        problem = yaml_nesting_problem(text)
        if problem:
            raise ConfigError("%s %s: not a configuration" % (p, problem), hint="give the path of a YAML file")
        data = yaml.safe_load(text)
    except UnicodeDecodeError as err:
        raise InputFileError("configuration file %s is not UTF-8 text: %s" % (p, err),
                             hint="give the path of a YAML file") from err
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        raise ConfigError("%s is not valid YAML%s: %s" % (p, at, getattr(err, "problem", err))) from err
    except RecursionError:
        raise ConfigError("%s nests lists or mappings too deeply to be a configuration" % p) from None
    except (ValueError, OverflowError) as err:  # PyYAML's int() of 4301+ digits; chr() of "\U80000000"
        raise ConfigError("%s holds a value YAML cannot convert (%s)" % (p, str(err)[:80]),
                          hint="give the path of a configuration file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("%s must hold a mapping of keys to values, not a %s" % (p, type(data).__name__))
    return data


def load_config(cls: Type[T], path: "Optional[str | os.PathLike[str]]" = None,
                overrides: Iterable[str] = (), base: Optional[Mapping[str, Any]] = None,
                final: Optional[Mapping[str, Any]] = None) -> T:
    """Resolve ``cls`` from defaults <- ``base`` <- YAML file at ``path`` <- ``--set`` overrides <- ``final``.

    ``final`` is a (nested) mapping of values that win over everything else: a command's own flags, given
    explicitly, over its ``--config`` file and ``--set``.  A ``--set`` value for a string field stays the text
    typed (``--set tensorrt_version=10.10`` is "10.10", not the number 10.1).
    """
    data: Dict[str, Any] = copy.deepcopy(dict(base or {}))  # overrides must not edit the caller's mapping
    if path is not None:
        data = _merge(data, read_yaml(path))
    for text in overrides:
        keys, value = parse_override(text)
        if _is_text_field(cls, keys) and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = text.split("=", 1)[1].strip()
        node = data
        for k in keys[:-1]:
            child = node.get(k)
            if not isinstance(child, dict):
                child = {}
                node[k] = child
            node = child
        node[keys[-1]] = value
    if final:
        data = _merge(data, final)
    try:
        return from_dict(cls, data)
    except RecursionError:  # a YAML alias that contains itself (a: &x [*x]) or absurd nesting
        raise ConfigError("the configuration refers to itself or nests too deeply (a YAML alias inside itself?)",
                          hint="write each value out; configurations are plain trees") from None


def _is_text_field(cls: Any, keys: List[str]) -> bool:
    """Whether the dotted key ``keys`` names a ``str`` (or ``Optional[str]``) field of dataclass ``cls``."""
    tp: Any = cls
    for key in keys:
        if not (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
            return False
        hints = _hints(tp)
        if key not in hints:
            return False
        tp = hints[key]
        args = [a for a in getattr(tp, "__args__", ()) if a is not _NONE]
        if getattr(tp, "__origin__", None) is typing.Union and len(args) == 1:
            tp = args[0]
    return tp is str


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> Dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out
