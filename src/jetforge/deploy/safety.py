"""Checks on values that come from outside — bundle manifests, archives, command lines — before a file
system or a shell sees them.

Bundles are copied between people and machines, so a manifest is hostile until checked:

* every path in it is a *bundle path*: relative, POSIX, already normalised (no ``.``, ``..``,
  empty parts, backslashes or control characters), so it names exactly one place inside the
  bundle folder (:func:`check_bundle_path`);
* every file used from a bundle is a regular file with one hard link, reached through no symbolic
  link (:func:`link_problem`), so a bundle cannot point at a file outside itself;
* the bundle's name is a plain file name (:func:`check_bundle_name`), because the board's folder is
  ``~/jetforge/bundles/<name>`` and ``rsync --delete-after`` runs there;
* remote paths are built only by :func:`remote_child` from a base folder and checked bundle paths, and
  every remote path is free of control characters (:func:`check_remote_path`; ``--remote-dir`` also
  of ``.`` and ``..`` parts), so the board's shell, the probe and rsync all name the same folder.

On the command line: SSH destinations are refused when they could be read as options or carry
shell characters (:func:`check_ssh_user`, :func:`check_ssh_host`), environment keys must be
identifiers (:func:`check_env_key`), and an app command template may name only its known fields
(:func:`expand_app_command`).  Each refusal is one :class:`~jetforge.errors.JetforgeError` that
names the value's origin and the fix, and never echoes the content of a file.
"""

import os
import re
import shlex
import stat
import string
from pathlib import Path, PurePosixPath
from typing import List, Mapping, Type

from jetforge.errors import ConfigError, JetforgeError

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}\$?$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
_IPV6_RE = re.compile(r"^[0-9A-Fa-f:.]{2,45}(%[A-Za-z0-9_.-]{1,32})?$")


class UnsafeValueError(JetforgeError):
    """A value from a manifest, archive or command line would leave its folder or reach a shell as code."""


def shown_value(value: object) -> str:
    """A value for an error message: repr, at most 80 characters.

    A longer one keeps its start and its end (a path's file name) around "..." in the middle.
    """
    text = repr(value)
    return text if len(text) <= 80 else text[:38] + "..." + text[-39:]


# ------------------------------------------------------------------------------------------------
# paths inside a bundle
# ------------------------------------------------------------------------------------------------
def bundle_path_problem(rel: object, normalised: bool = True) -> str:
    """Why ``rel`` is not a safe path inside a bundle ("" when it is).

    ``normalised=False`` (tar members) accepts ``./`` parts and a trailing ``/``, which ``tar -C DIR .``
    writes, but never ``..`` or an absolute path.
    """
    if not isinstance(rel, str):
        return "is not a string"
    if not rel:
        return "is empty"
    if _CONTROL.search(rel):
        return "holds a control character"
    try:
        rel.encode("utf-8")  # a lone surrogate (JSON "\ud800") has no bytes to name a file with
    except UnicodeEncodeError:
        return "is not UTF-8 text"
    if "\\" in rel:
        return "holds a backslash"
    if rel.startswith("/") or re.match(r"^[A-Za-z]:", rel):
        return "is absolute"
    parts = rel.split("/")
    if ".." in parts:
        return "climbs out with '..'"
    kept = [p for p in parts if p not in ("", ".")]
    if not kept:
        return "names the bundle folder itself"
    if normalised and kept != parts:
        return "is not normalised (empty or '.' parts)"
    return ""


def check_bundle_path(rel: object, what: str = "path", error: Type[JetforgeError] = UnsafeValueError,
                      normalised: bool = True) -> str:
    """``rel`` as a normalised POSIX bundle path, or ``error`` naming why it is unsafe."""
    why = bundle_path_problem(rel, normalised)
    if why:
        raise error("%s %s %s: a bundle may only name files inside itself" % (what, shown_value(rel), why),
                    hint="re-create the bundle with `jetforge bundle create`; do not edit its manifest")
    assert isinstance(rel, str)
    return "/".join(p for p in rel.split("/") if p not in ("", "."))


def link_problem(root: Path, rel: str) -> str:
    """Why ``root/rel`` is not a plain file of the bundle ("" when it is, "missing" when absent).

    Every folder between ``root`` and the file, and the file itself, is looked at with ``lstat``: a
    symbolic link anywhere on the way, a file with more than one hard link, or anything but a regular
    file is refused.  ``root`` itself may be a link (the user chose it).
    """
    here = root
    parts = rel.split("/")
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(str(here))
        except FileNotFoundError:
            return "missing"
        except NotADirectoryError:
            return "missing"
        except OSError as err:
            return "unreadable (%s)" % err.strerror
        last = i == len(parts) - 1
        if stat.S_ISLNK(st.st_mode):
            return "is a symbolic link" if last else "lies under %s, a symbolic link" % "/".join(parts[:i + 1])
        if not last and not stat.S_ISDIR(st.st_mode):
            return "missing"
        if last:
            if stat.S_ISDIR(st.st_mode):
                return "is a folder, not a file"
            if not stat.S_ISREG(st.st_mode):
                return "is not a regular file"
            if st.st_nlink > 1:
                return "is a hard link (%d names share its data)" % st.st_nlink
    return ""


def links_in(root: Path) -> List[str]:
    """Bundle paths of every symbolic link under ``root`` (not followed), sorted."""
    found: List[str] = []
    for folder, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found.append(Path(path).relative_to(root).as_posix())
    return sorted(found)


# ------------------------------------------------------------------------------------------------
# the bundle's name
# ------------------------------------------------------------------------------------------------
def bundle_name_problem(name: object) -> str:
    """Why ``name`` cannot name a bundle ("" when it can): a plain file name of letters, digits, ``._-``."""
    if not isinstance(name, str):
        return "is not a string"
    if not _NAME_RE.match(name) or name in (".", ".."):
        return "is not a plain name (letters, digits, '.', '_', '-'; at most 128; not starting with '.' or '-')"
    return ""


def check_bundle_name(name: object, error: Type[JetforgeError] = UnsafeValueError) -> str:
    why = bundle_name_problem(name)
    if why:
        raise error("bundle name %s %s: it names the bundle's folder on the board" % (shown_value(name), why),
                    hint="re-create the bundle with `jetforge bundle create --out DIR` (the name is DIR's)")
    assert isinstance(name, str)
    return name


def sanitise_bundle_name(text: str) -> str:
    """A safe bundle name from a folder name: other characters become ``_``; never empty, never hidden."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).lstrip("._-")[:128]
    return name or "bundle"


# ------------------------------------------------------------------------------------------------
# remote paths
# ------------------------------------------------------------------------------------------------
# C0, DEL, C1 (NEL among them) and the Unicode line and paragraph separators: a line break splits the probe's
# answer, any of them can make the board's shell, the probe and rsync name different folders, and none is shown.
_REMOTE_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
REMOTE_PATH_HINT = ("give a plain path such as ~/jetforge/bundles/NAME or /data/jetforge/NAME (absolute or under ~/, "
                    "no control characters, no '.' or '..' parts)")


def remote_path_problem(path: object, folder: bool = False) -> str:
    """Why ``path`` cannot name a place on the board ("" when it can).

    Every remote path: a non-empty UTF-8 string without control characters (see ``_REMOTE_CONTROL``).
    ``folder`` (``--remote-dir``) also: absolute or under ``~/``, and no ``.`` or ``..`` part (the shell's ``cd``
    reads ``link/..`` by name, ``mkdir`` and rsync through the link: two different folders).
    """
    if not isinstance(path, str):
        return "is not a string"
    if not path:
        return "is empty"
    bad = _REMOTE_CONTROL.search(path)
    if bad:
        return "holds the control character %s" % repr(bad.group(0))
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8 text"
    if folder:
        if not (path.startswith("/") or path == "~" or path.startswith("~/")):
            return "is neither absolute nor under ~/"
        parts = path.split("/")
        if ".." in parts:
            return "holds a '..' part"
        if "." in parts:
            return "holds a '.' part"
    return ""


def check_remote_path(path: object, what: str = "remote path", folder: bool = False,
                      error: Type[JetforgeError] = UnsafeValueError) -> str:
    """``path`` unchanged, or ``error`` naming why the board's shell, the probe and rsync could disagree on it."""
    why = remote_path_problem(path, folder)
    if why:
        raise error("%s %s %s: the probe, the shell and rsync on the board could each take it for another place"
                    % (what, shown_value(path), why), hint=REMOTE_PATH_HINT)
    assert isinstance(path, str)
    return path


def remote_child(base: str, *parts: str) -> str:
    """``base/part/...`` where every part is a checked bundle path: the result never leaves ``base``."""
    check_remote_path(base, "remote folder")
    out = base.rstrip("/") or "/"
    for part in parts:
        rel = check_bundle_path(part, "remote path part")
        out = out + rel if out.endswith("/") else out + "/" + rel
    return out


# ------------------------------------------------------------------------------------------------
# command-line values
# ------------------------------------------------------------------------------------------------
def check_ssh_user(user: str, spec: str, flag: str = "destination") -> str:
    if not _USER_RE.match(user):
        raise ConfigError("%s %s: the user name %s is not a plain login name"
                          % (flag, shown_value(spec), shown_value(user)),
                          hint="write user@host with a login name of letters, digits, '.', '_' and '-' "
                               "(not starting with '-')")
    return user


def check_ssh_host(host: str, spec: str, flag: str = "destination") -> str:
    """A host name or IP address that ssh and rsync cannot read as an option or a path."""
    if host.startswith("-"):
        raise ConfigError("%s %s starts with '-': ssh would read it as an option" % (flag, shown_value(spec)),
                          hint="give the board as user@host (e.g. nvidia@192.168.55.1); options go in --ssh-option")
    if not (_HOST_RE.match(host) or (":" in host and _IPV6_RE.match(host))):
        raise ConfigError("%s %s: %s is not a host name or IP address" % (flag, shown_value(spec), shown_value(host)),
                          hint="use letters, digits, '.', '-' (or an IPv6 address in [brackets])")
    return host


def check_env_key(key: str, item: str = "") -> str:
    """An environment variable name (``[A-Za-z_][A-Za-z0-9_]*``): anything else could run on the board."""
    if not _ENV_KEY_RE.match(key):
        raise ConfigError("--remote-env %s: %s is not an environment variable name"
                          % (shown_value(item or key), shown_value(key)),
                          hint="write KEY=VALUE with KEY made of letters, digits and '_' (not starting with a digit)")
    return key


APP_FIELDS = ("model", "out", "bundle", "config")


def check_app_command(template: str) -> List[str]:
    """The words of an ``--app-command`` template; refuse unknown ``{fields}`` and unbalanced quotes or braces."""
    hint = ("write a jetforge command line such as \"demo --model {model} --out {out}\"; the fields are %s, and "
            "{{ }} stand for literal braces" % ", ".join("{%s}" % f for f in APP_FIELDS))
    try:
        words = shlex.split(template)
    except ValueError as err:
        raise ConfigError("--app-command %s cannot be split into words: %s" % (shown_value(template), err),
                          hint=hint) from None
    if not words:
        raise ConfigError("--app-command is empty", hint=hint)
    for word in words:
        try:
            fields = list(string.Formatter().parse(word))
        except ValueError as err:
            raise ConfigError("--app-command %s: %s" % (shown_value(template), err), hint=hint) from None
        for _, name, spec, conversion in fields:
            if name is None:
                continue
            if name not in APP_FIELDS or spec or conversion:
                raise ConfigError("--app-command %s uses the field {%s}%s; only %s are replaced"
                                  % (shown_value(template), name + ("!" + conversion if conversion else "")
                                     + (":" + spec if spec else ""),
                                     " (a positional field)" if name == "" or name.isdigit() else "",
                                     ", ".join("{%s}" % f for f in APP_FIELDS)), hint=hint)
    return words


def expand_app_command(template: str, values: Mapping[str, str]) -> List[str]:
    """The words of ``template`` with its fields replaced (after :func:`check_app_command`)."""
    return [word.format(**{k: values[k] for k in APP_FIELDS}) for word in check_app_command(template)]
