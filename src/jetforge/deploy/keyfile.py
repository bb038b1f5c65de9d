"""A strict reader of GLib key files, the format of DeepStream's ``nvinfer`` and ``deepstream-app`` configurations.

DeepStream loads its configuration files with ``g_key_file_load_from_file`` and reads each value
with ``g_key_file_get_integer`` / ``_double`` / ``_boolean`` / ``_string`` / ``_*_list``.  Python's
``configparser`` is a different dialect: it folds key case, accepts ``;`` comments and ``key: value``,
continues values on indented lines, and refuses repeated keys, each of which GLib treats
otherwise.  So the files jetforge writes are checked with this reader, which follows GLib's
documented key-file format (docs.gtk.org/glib/struct.KeyFile.html, the Desktop Entry
Specification it summarises) and the rules of GLib's ``gkeyfile.c``:

* a line is, after its leading whitespace, blank, a comment (``#``), a group header ``[name]``
  (whitespace allowed after the ``]``; a name holds no ``[``, ``]`` or control character), or
  ``key=value``; anything else is a parse error;
* a key-value pair before the first group is an error ("does not start with a group");
* spaces around ``=`` are ignored; a key may carry a locale suffix ``key[locale]``;
  keys and groups are case-sensitive; a repeated key keeps its last value, a repeated group is
  merged into the first;
* the file is UTF-8;
* string values unescape ``\\s \\n \\t \\r \\\\``; any other escape is an error, except ``\\;``
  inside a list; lists are split on unescaped ``;`` with an optional trailing ``;``;
* integers are decimal ``strtol`` numbers in the 32-bit range (trailing whitespace allowed),
  doubles ``g_ascii_strtod`` numbers with nothing after them, booleans ``true``/``false``/``1``/``0``.

Errors are :class:`KeyFileError` naming the line or the group and key.
"""

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from jetforge.deploy.generated_names import check_text, text_problem
from jetforge.errors import ConfigError

LIST_SEPARATOR = ";"
INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1
_ESCAPES = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
# strtol(value, &end, 10): optional whitespace and sign, then decimal digits
_INTEGER = re.compile(r"^[ \t\n\r\f\v]*[+-]?[0-9]+[ \t\n\r\f\v]*$")
# g_ascii_strtod: optional leading whitespace, decimal or hex float, inf/infinity/nan; nothing after
_DOUBLE = re.compile(r"^[ \t\n\r\f\v]*[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                     r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
                     r"|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])$")


class KeyFileError(ConfigError):
    """A key file that GLib would refuse to load, or a value GLib would refuse to read as its type."""


@dataclass
class KeyFile:
    """The groups of a parsed key file, in file order, each an ordered ``{key: raw value}``."""

    groups: Dict[str, Dict[str, str]] = field(default_factory=dict)
    lines: Dict[Tuple[str, str], int] = field(default_factory=dict)  # (group, key) -> line of its last value

    def has(self, group: str, key: str) -> bool:
        return key in self.groups.get(group, {})

    def raw(self, group: str, key: str) -> str:
        try:
            return self.groups[group][key]
        except KeyError:
            raise KeyFileError("key file has no key %s in group [%s]" % (key, group)) from None

    def _where(self, group: str, key: str) -> str:
        line = self.lines.get((group, key))
        return "[%s] %s%s" % (group, key, " (line %d)" % line if line else "")

    # -- typed getters, as g_key_file_get_* --------------------------------------------------------
    def get_string(self, group: str, key: str) -> str:
        return _unescape(self.raw(group, key), self._where(group, key), in_list=False)[0]

    def get_string_list(self, group: str, key: str) -> List[str]:
        return _unescape(self.raw(group, key), self._where(group, key), in_list=True)

    def get_integer(self, group: str, key: str) -> int:
        return parse_integer(self.raw(group, key), self._where(group, key))

    def get_double(self, group: str, key: str) -> float:
        return parse_double(self.raw(group, key), self._where(group, key))

    def get_boolean(self, group: str, key: str) -> bool:
        return parse_boolean(self.raw(group, key), self._where(group, key))

    def get_integer_list(self, group: str, key: str) -> List[int]:
        where = self._where(group, key)
        return [parse_integer(v, where) for v in self.get_string_list(group, key)]

    def get_double_list(self, group: str, key: str) -> List[float]:
        where = self._where(group, key)
        return [parse_double(v, where) for v in self.get_string_list(group, key)]


def parse_integer(value: str, where: str) -> int:
    """``g_key_file_get_integer``: a decimal integer that fits a C ``int``."""
    if not _INTEGER.match(value):
        raise KeyFileError("%s: value %r cannot be interpreted as a number" % (where, value[:80]))
    number = int(value.strip())
    if not INT_MIN <= number <= INT_MAX:
        raise KeyFileError("%s: integer value %r out of range" % (where, value[:80]))
    return number


def parse_double(value: str, where: str) -> float:
    """``g_key_file_get_double``: what ``g_ascii_strtod`` reads whole (C locale, hex floats, inf, nan)."""
    if not _DOUBLE.match(value):
        raise KeyFileError("%s: value %r cannot be interpreted as a float number" % (where, value[:80]))
    text = value.strip()
    if text.lower().lstrip("+-").startswith("0x"):
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        return sign * float.fromhex(body if "p" in body.lower() else body + "p0")
    return float(text)


def parse_boolean(value: str, where: str) -> bool:
    """``g_key_file_get_boolean``: ``true``/``1`` or ``false``/``0`` (trailing whitespace ignored)."""
    text = value.rstrip(" \t\n\r\f\v")
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise KeyFileError("%s: value %r cannot be interpreted as a boolean" % (where, value[:80]))


def _unescape(value: str, where: str, in_list: bool) -> List[str]:
    """GLib's ``g_key_file_parse_value_as_string``: escapes resolved, split on unescaped ``;`` for lists."""
    pieces: List[str] = []
    current: List[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value):
                raise KeyFileError("%s: escape character at end of line" % where)
            nxt = value[i + 1]
            if nxt in _ESCAPES:
                current.append(_ESCAPES[nxt])
            elif in_list and nxt == LIST_SEPARATOR:
                current.append(LIST_SEPARATOR)
            else:
                raise KeyFileError("%s: invalid escape sequence \\%s" % (where, nxt))
            i += 2
            continue
        if in_list and ch == LIST_SEPARATOR:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if not in_list or current:  # a trailing separator ends the list, it does not add an empty piece
        pieces.append("".join(current))
    return pieces


def _group_name_problem(name: str) -> Optional[str]:
    if not name:
        return "is empty"
    if "[" in name or "]" in name:
        return "contains a bracket"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "contains a control character"
    return None


def _key_name_problem(key: str) -> Optional[str]:
    """``g_key_file_is_key_name``: non-empty, no ``=`` (split before), ``[``/``]`` only as a final locale suffix."""
    if not key:
        return "is empty"
    base, bracket, rest = key.partition("[")
    if "]" in base:
        return "contains ']'"
    if bracket:
        if not rest.endswith("]") or len(rest) < 2 or "[" in rest[:-1] or "]" in rest[:-1]:
            return "has a malformed locale suffix"
    if base != base.strip() or key != key.strip():
        return "has surrounding whitespace"
    return None


def parse_keyfile(text: str, source: str = "key file") -> KeyFile:
    """Parse ``text`` as GLib does (see the module docstring); a file GLib would refuse raises :class:`KeyFileError`."""
    kf = KeyFile()
    group: Optional[str] = None
    for number, raw_line in enumerate(text.split("\n"), 1):
        line = raw_line[:-1] if raw_line.endswith("\r") else raw_line
        stripped = line.lstrip(" \t\n\r\f\v")
        where = "%s line %d" % (source, number)
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            end = stripped.find("]")
            if end > 0 and stripped[end + 1:].strip(" \t") == "":
                name = stripped[1:end]
                why = _group_name_problem(name)
                if why:
                    raise KeyFileError("%s: invalid group name %r: it %s" % (where, name[:80], why))
                group = name
                kf.groups.setdefault(name, {})
                continue
        if "=" in stripped and not stripped.startswith("="):
            key, _, value = stripped.partition("=")
            key = key.rstrip(" \t")
            value = value.lstrip(" \t")
            why = _key_name_problem(key)
            if why:
                raise KeyFileError("%s: invalid key name %r: it %s" % (where, key[:80], why))
            if group is None:
                raise KeyFileError("%s: key file does not start with a group (key %r before any [group])"
                                   % (where, key[:80]))
            kf.groups[group][key] = value
            kf.lines[(group, key)] = number
            continue
        raise KeyFileError("%s: %r is not a key-value pair, group, or comment" % (where, stripped[:80]))
    return kf


def read_keyfile(data: bytes, source: str = "key file") -> KeyFile:
    """Decode ``data`` as UTF-8 (GLib refuses anything else) and parse it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise KeyFileError("%s is not UTF-8 (byte %d)" % (source, err.start)) from None
    if "\x00" in text:
        raise KeyFileError("%s contains a NUL byte" % source)
    return parse_keyfile(text, source)


def format_double(value: float) -> str:
    """A double as ``g_ascii_strtod`` reads it back exactly (shortest round-trip repr; never 'nan' by accident)."""
    if not math.isfinite(value):
        raise KeyFileError("a configuration value must be finite, got %r" % value)
    return repr(float(value))


def escape_value(value: str, in_list: bool = False) -> str:
    """The inverse of :func:`_unescape` for one string (or one list element with ``in_list``)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    if in_list:
        out = out.replace(LIST_SEPARATOR, "\\" + LIST_SEPARATOR)
    if out.startswith(" "):
        out = "\\s" + out[1:]
    return out


def string_value(value: str, what: str, hint: str) -> str:
    """``value`` as a key-file string that ``g_key_file_get_string`` reads back exactly.

    Controls, line separators and lone surrogates are refused (:func:`~jetforge.deploy.generated_names.check_text`):
    GLib's escapes cover only ``\\n \\t \\r``, a NUL cannot be stored, and a raw line break would
    start a new key or group.  The rest is escaped (``\\`` and a leading space).
    """
    return escape_value(check_text(value, what, hint))


def _comment(line: str) -> str:
    """A header line as a comment: characters that could end the line (or not encode) are shown as '?'."""
    return "".join("?" if text_problem(c) else c for c in line)


def render_keyfile(groups: "List[Tuple[str, List[Tuple[str, str]]]]", header: str = "") -> str:
    """Text of a key file from ``[(group, [(key, already-formatted value), ...]), ...]`` with a ``#`` header.

    Values arrive formatted (escaped); one that still holds a line break or NUL would add lines of its
    own, so it is refused here too, whatever checked it before (defence in depth).
    """
    lines = ["# " + _comment(line) if line else "#" for line in header.rstrip("\n").split("\n")] if header else []
    for name, entries in groups:
        why = _group_name_problem(name)
        if why:
            raise KeyFileError("group name %r %s" % (name[:80], why), hint="report this as a jetforge bug")
        if lines:
            lines.append("")
        lines.append("[%s]" % name)
        for key, value in entries:
            why = _key_name_problem(key) or ("holds a line break or NUL" if re.search("[\r\n\x00]", key + value)
                                             else None)
            if why:
                raise KeyFileError("[%s] %s=%r %s" % (name, key[:80], value[:80], why),
                                   hint="report this as a jetforge bug")
            lines.append("%s=%s" % (key, value))
    return "\n".join(lines) + "\n"


__all__ = ["KeyFile", "KeyFileError", "escape_value", "format_double", "parse_boolean", "parse_double",
           "parse_integer", "parse_keyfile", "read_keyfile", "render_keyfile", "string_value"]
