"""What may be written into which generated file: the one place that checks (or escapes) every name jetforge writes.

``export-config`` copies names into files that are later run, compiled or parsed on the board:
tensor names, labels and the model name come from the bundle's sidecar, which may come from
someone else; ``--name`` and ``--source`` come from the command line.  Each file has its own
syntax, and a name that is only text to jetforge can be code there (issue 25: an input named
``in$(touch /tmp/x)`` ran when ``build_engines.sh`` was run; an output named
``logits"); system(...); (void)("`` ran inside the compiled nvinfer parser; ``--name ../../escape``
wrote files two folders above ``--out``).  So each value is checked for the format it goes into,
and refused with a one-line :class:`GeneratedNameError` that shows the value (``%r``, truncated)
and the fix, unless an escape is exact for that format:

* any text (labels, names, URIs, protobuf and key-file strings): no control character (C0, DEL,
  C1), no line or paragraph separator and no lone surrogate -- they break a file's line
  structure, or cannot be written as UTF-8 at all (:func:`check_text`);
* a tensor name written into a shell script, C++ source or an nvinfer ``;`` list: letters,
  digits and ``_ . : / -`` only (:func:`tensor_name`), which covers real models' names
  (``input``, ``detection_boxes:0``, ``StatefulPartitionedCall/model/logits``) and leaves nothing
  that sh, C++ or trtexec's ``name:dims,name:dims`` lists would read specially;
* a file or folder name (``--name``): one path component of letters, digits and ``_ . -``, not
  starting with ``.`` or ``-``, short enough for its longest derived name (:func:`folder_name`);
* shell words are quoted with ``shlex.quote`` as well (:func:`shell_command`), C string literals
  and protobuf text strings are escaped exactly (:func:`c_string`, :func:`pbtxt_string`), and a
  C++ comment keeps only characters that cannot end it or splice lines (:func:`c_comment`);
* every path written is resolved and must stay inside the output folder (:func:`inside`), even
  after the checks above (defence in depth).
"""

import re
import shlex
import string
import unicodedata
from pathlib import Path
from typing import Optional, Sequence

from jetforge.errors import ConfigError

MAX_PATH_COMPONENT_BYTES = 255          # NAME_MAX of ext4, xfs, btrfs (and what tar and zip keep)
SHOWN_CHARS = 40                        # how much of a refused value an error message repeats
RENAME_TENSOR = "rename the tensor in the model (its exporter's input/output names) and re-export it with its sidecar"
FIX_SIDECAR = "correct it in the model's sidecar (MODEL.onnx.json) or re-export the model, then re-create the bundle"
FIX_LABEL = "correct the label in the model's sidecar (or re-export the model with --labels FILE), then re-create the bundle"
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")
_FOLDER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# printable ASCII without '\\' (splices a // comment onto the next line) and '?' (trigraphs: '??/' is '\\' in C++14)
_COMMENT_CHARS = frozenset(c for c in string.printable if c not in "\\?" and (c == " " or not c.isspace()))


class GeneratedNameError(ConfigError):
    """A name or value cannot be written safely into a generated script, source, config or file name."""


def shown(value: str, limit: int = SHOWN_CHARS) -> str:
    """``value`` as an error message shows it: ``repr`` (control characters visible), cut at ``limit`` characters."""
    return repr(value[:limit]) + ("..." if len(value) > limit else "")


def text_problem(value: str) -> Optional[str]:
    """Why ``value`` cannot go into a line-structured UTF-8 file, or None when it can."""
    for ch in value:
        category = unicodedata.category(ch)
        if category == "Cc":
            return "a control character (U+%04X)" % ord(ch)
        if category == "Cs":
            return "a lone surrogate (U+%04X), which is not UTF-8" % ord(ch)
        if category in ("Zl", "Zp"):
            return "a line separator (U+%04X)" % ord(ch)
    return None


def check_text(value: str, what: str, hint: str) -> str:
    """``value`` unchanged when it has no control character, line separator or lone surrogate; else refused."""
    problem = text_problem(value)
    if problem:
        raise GeneratedNameError("%s %s holds %s" % (what, shown(value), problem), hint=hint)
    return value


def check_labels(labels: Sequence[str], hint: str = FIX_LABEL) -> None:
    """Labels go one per line into labels files, into key files and C++ sources: no line breaks or controls."""
    for label in labels:
        check_text(label, "label", hint)


def tensor_name(name: str, what: str, where: str) -> str:
    """``name`` unchanged when a shell script, C++ source or nvinfer list can hold it as it is; else refused."""
    if not _TENSOR_NAME.fullmatch(name):
        raise GeneratedNameError("%s %s cannot be written into %s: a tensor name there may hold only letters, "
                                 "digits and _ . : / -" % (what, shown(name), where), hint=RENAME_TENSOR)
    return name


def folder_name(value: str, what: str = "--name", suffixes: Sequence[str] = ()) -> str:
    """``value`` unchanged when it is one plain path component (also with each of ``suffixes`` added); else refused.

    Plain: letters, digits and ``_ . -`` (no ``/``, ``\\``, ``..``, spaces or controls), not starting
    with ``.`` (hidden, ``.`` and ``..``) or ``-`` (an option to the commands that later see it).
    """
    limit = MAX_PATH_COMPONENT_BYTES - max([len(s.encode("utf-8")) for s in suffixes] + [0])
    why = None
    if not value:
        why = "it is empty"
    elif not _FOLDER_NAME.fullmatch(value):
        why = "it is not one plain folder name"
    elif len(value.encode("utf-8")) > limit:
        why = "it is %d bytes long" % len(value.encode("utf-8"))
    if why:
        raise GeneratedNameError("%s %s is refused: %s" % (what, shown(value), why),
                                 hint="give %s with letters, digits, _ . - only (not starting with . or -), at most "
                                      "%d bytes" % (what, limit))
    return value


def shell_command(words: Sequence[str]) -> str:
    """One sh command line: each word checked by :func:`check_text` and quoted with ``shlex.quote``."""
    return " ".join(shlex.quote(check_text(w, "shell word", "report this as a jetforge bug")) for w in words)


def c_string(text: str) -> str:
    """A C/C++ string literal holding exactly ``text`` (UTF-8): quotes, backslashes, '?' and non-ASCII escaped."""
    out = []
    for ch in text:
        if ch in "\\\"?":  # '?' too: '??/' would be a trigraph (a backslash) under -std=c++14
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:  # three-digit octal escapes never run into a following digit (at most three digits are read)
            if unicodedata.category(ch) == "Cs":
                raise GeneratedNameError("C++ string %s holds a lone surrogate, which is not UTF-8" % shown(text),
                                         hint=FIX_LABEL)
            out.extend("\\%03o" % byte for byte in ch.encode("utf-8"))
    return '"%s"' % "".join(out)


def c_comment(text: str) -> str:
    """``text`` for a ``//`` comment: anything that could end the line or splice it (``\\``, ``??/``) becomes ``_``."""
    return "".join(c if c in _COMMENT_CHARS else "_" for c in text)


def pbtxt_string(value: str) -> str:
    """A protobuf text-format string literal holding exactly ``value`` (``\\`` and ``"`` escaped, UTF-8 kept)."""
    check_text(value, "Triton config string", RENAME_TENSOR)
    return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"')


def inside(root: Path, *parts: str) -> Path:
    """``root/parts...``, refused unless it resolves inside ``root`` (an absolute part or ``..`` would leave it)."""
    target = root.joinpath(*parts)
    base = root.resolve()
    resolved = target.resolve()
    if resolved != base and base not in resolved.parents:
        raise GeneratedNameError("%s would be written outside the output folder" % shown("/".join(parts)),
                                 hint="give names without / or .. (this is a jetforge bug if the name was checked)")
    return target


__all__ = ["FIX_LABEL", "FIX_SIDECAR", "GeneratedNameError", "MAX_PATH_COMPONENT_BYTES", "RENAME_TENSOR", "c_comment", "c_string",
           "check_labels", "check_text", "folder_name", "inside", "pbtxt_string", "shell_command", "shown",
           "tensor_name", "text_problem"]
