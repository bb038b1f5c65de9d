"""Safe file writing: atomic replace, content hashes, and never overwriting an input.

Every artifact jetforge writes (ONNX, sidecars, caches, engines, reports, videos)
goes through :func:`atomic_output`, so an interrupted run never leaves a file that
looks complete, and :func:`check_not_input` refuses an output path that is one of
the inputs of the same command.

A run killed outright (SIGKILL, power loss) cannot remove its temporary file.  Those
are hidden (``.NAME.PID.HOST.RANDOM.part.EXT``) and name the process that wrote them,
so the next write to the same target removes the ones whose writer is gone
(:func:`remove_stale_parts`).  Folders (a bundle, an engine-cache entry) are assembled in a hidden
staging folder named the same way and renamed into place (:func:`staging_dir`, :func:`replace_dir`);
the next writer of that folder removes a killed writer's leftovers (:func:`remove_stale_staging`).
"""

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Union

from jetforge.errors import InputFileError

PathLike = Union[str, "os.PathLike[str]"]

log = logging.getLogger(__name__)

# A temporary file whose writer cannot be identified (another machine, or a name from before the
# PID was recorded) is removed only when nobody has touched it for this long: every jetforge
# writer appends to its file as it goes, so a day without a write means the writer is gone.
STALE_PART_AGE_S = 24 * 3600.0


def _host_tag() -> str:
    """Eight hex digits naming this machine (and container): a PID is only meaningful on its own host."""
    return "%08x" % (zlib.crc32(socket.gethostname().encode("utf-8", "replace")) & 0xFFFFFFFF)


def _part_pattern(target_name: str) -> "re.Pattern[str]":
    """Temporary files of :func:`atomic_output` for ``target_name``, with or without writer PID and host."""
    return re.compile(r"^\.%s\.(?:(?P<pid>\d+)\.(?P<host>[0-9a-f]{8})\.)?[A-Za-z0-9_]{6,}\.part(?:\.[^./]+)?$"
                      % re.escape(target_name))


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno != errno.ESRCH  # EPERM: it exists, owned by someone else
    return True


def remove_stale_parts(path: PathLike, max_age_s: float = STALE_PART_AGE_S) -> List[Path]:
    """Remove temporary files left next to ``path`` by earlier writers that are gone; the removed paths.

    Only files of :func:`atomic_output`'s own pattern for this target name are considered.  One
    is removed when its writer was a process of this host that no longer runs, or, when the
    writer cannot be checked (another host, an old-style name), when it was not modified for
    ``max_age_s``.  A writer that is still running keeps its file.
    """
    target = Path(path)
    folder = target.parent
    pattern = _part_pattern(target.name)
    try:
        names = [n for n in os.listdir(str(folder)) if pattern.match(n)]
    except OSError:
        return []
    removed: List[Path] = []
    host = _host_tag()
    now = time.time()
    for name in names:
        m = pattern.match(name)
        p = folder / name
        try:
            st = p.lstat()
        except OSError:
            continue
        if m is None or not stat.S_ISREG(st.st_mode):  # a link or a folder of that name is not ours
            continue
        if m.group("pid") is not None and m.group("host") == host:
            pid = int(m.group("pid"))
            stale = pid != os.getpid() and not _pid_alive(pid)
        else:
            stale = now - st.st_mtime > max_age_s
        if stale:
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
    if removed:
        log.info("removed %d temporary file(s) left by an interrupted run next to %s", len(removed), target)
    return removed


def _dir_pattern(target_name: str) -> "re.Pattern[str]":
    """Staging (``partial``) and set-aside (``old``) folders of :func:`staging_dir` / :func:`replace_dir` for
    ``target_name``; also the older names without a writer (``.NAME.partial-XXXXXXXX``)."""
    return re.compile(r"^\.%s\.(?:(?P<pid>\d+)\.(?P<host>[0-9a-f]{8})\.[A-Za-z0-9_]{6,}\.(?:partial|old)"
                      r"|(?:partial|old)-[A-Za-z0-9_]{6,})$" % re.escape(target_name))


def _writer_gone(match: "re.Match[str]", mtime: float, max_age_s: float) -> bool:
    """Whether the writer a temporary name records is gone (same host, PID not running), else whether it is old."""
    if match.group("pid") is not None and match.group("host") == _host_tag():
        pid = int(match.group("pid"))
        return pid != os.getpid() and not _pid_alive(pid)
    return time.time() - mtime > max_age_s


def remove_stale_staging(final: PathLike, max_age_s: float = STALE_PART_AGE_S) -> List[Path]:
    """Remove the hidden folders a killed writer of folder ``final`` left beside it; the removed paths.

    Folders are assembled in a staging folder and renamed into place (:func:`staging_dir`,
    :func:`replace_dir`); only SIGKILL or a power cut leaves one behind.  The same rule as
    :func:`remove_stale_parts`: removed when its writer was a process of this host that no longer runs,
    or, when that cannot be checked, after ``max_age_s`` without a change.  Links are never followed.
    """
    target = Path(final)
    pattern = _dir_pattern(target.name)
    try:
        names = [n for n in os.listdir(str(target.parent)) if pattern.match(n)]
    except OSError:
        return []
    removed: List[Path] = []
    for name in names:
        p = target.parent / name
        try:
            st = p.lstat()
        except OSError:
            continue
        match = pattern.match(name)
        if match is not None and stat.S_ISDIR(st.st_mode) and _writer_gone(match, st.st_mtime, max_age_s):
            shutil.rmtree(str(p), ignore_errors=True)
            removed.append(p)
    if removed:
        log.info("removed %d folder(s) left by an interrupted run next to %s", len(removed), target)
    return removed


def staging_dir(final: PathLike, kind: str = "partial") -> Path:
    """Create a hidden folder next to ``final`` to assemble it in, named after its writer; return it.

    ``.NAME.PID.HOST.RANDOM.partial``: a later run can tell a folder left by a killed writer from one still
    being written, and removes the former first (:func:`remove_stale_staging`).
    """
    target = Path(final)
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind == "partial":
        remove_stale_staging(target)
    return Path(tempfile.mkdtemp(prefix=".%s.%d.%s." % (target.name, os.getpid(), _host_tag()), suffix="." + kind,
                                 dir=str(target.parent)))


def replace_dir(staging: PathLike, final: PathLike) -> None:
    """Rename the finished ``staging`` folder to ``final``; an existing ``final`` is set aside first, then removed.

    Readers see the old folder or the new one, never a mix; if the rename fails the old folder is put back.
    """
    target = Path(final)
    old = None
    if target.exists():
        old = staging_dir(target, kind="old")
        os.rename(str(target), str(old / target.name))
    try:
        os.rename(str(staging), str(target))
    except BaseException:
        if old is not None:
            os.rename(str(old / target.name), str(target))
            shutil.rmtree(str(old), ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(str(old), ignore_errors=True)


def check_output_path(path: PathLike) -> Path:
    """Refuse, before any work is done, an output path that cannot be a file: a folder, or below a file.

    Commands call it on their outputs up front, so that a typo costs a second, not a whole run;
    :func:`atomic_output` calls it again when it writes.
    """
    target = Path(path)
    if target.is_dir():
        raise InputFileError("cannot write %s: it is a folder" % target, hint="name a file, not a folder")
    blocker = next((p for p in target.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise InputFileError("cannot write %s: %s is a file, not a folder" % (target, blocker),
                             hint="choose another output path")
    return target


@contextlib.contextmanager
def atomic_output(path: PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically.

    On an exception the temporary file is removed and ``path`` is left as it was.
    ``suffix`` lets writers that infer the format from the extension (OpenCV's
    VideoWriter, onnx.save) see the right one.  Temporary files of earlier writers of
    ``path`` that were killed are removed first (:func:`remove_stale_parts`).
    """
    target = check_output_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(target)
    # The temporary name ends with the real extension: writers such as OpenCV's
    # VideoWriter choose the container from it.  It names the writer (PID and host) so
    # that a later run can tell a file left by a killed writer from one still being written.
    fd, tmp_name = tempfile.mkstemp(prefix=".%s.%d.%s." % (target.name, os.getpid(), _host_tag()),
                                    suffix=".part" + (suffix or target.suffix), dir=str(target.parent))
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the result the permissions a plain open() would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_name, 0o666 & ~umask)
    try:
        yield tmp
        os.replace(str(tmp), str(target))
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_bytes_atomic(path: PathLike, data: bytes) -> Path:
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: PathLike, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_png_atomic(figure: Any, path: PathLike, dpi: Optional[float] = None, layout: bool = True) -> Path:
    """Write a matplotlib figure as a PNG through :func:`atomic_output` (a plot is never left half written).

    ``layout`` applies ``tight_layout()`` first; ``dpi`` None keeps the figure's own.  The figure stays open:
    whoever made it closes it.  matplotlib is not imported here (the figure brings its own).
    """
    if layout:
        figure.tight_layout()
    with atomic_output(path, suffix=".png") as tmp:
        figure.savefig(str(tmp), format="png", dpi="figure" if dpi is None else dpi)
    return Path(path)


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks (models and videos can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


SIDECAR_SUFFIX = ".json"


def check_not_input(output: PathLike, inputs: Iterable[Optional[PathLike]], replaces_folder: bool = False) -> None:
    """Refuse to write ``output`` over any of ``inputs`` or over an input's sidecar (nothing the user had is lost).

    An input's sidecar (``model.onnx.json`` beside ``model.onnx``, ``model.engine.json``, ``model.calib.json``)
    describes it: overwriting it leaves the input unusable although the input itself was not touched, so it
    counts as an input.  ``replaces_folder``: ``output`` is a folder the command replaces whole (``--force``);
    it must then hold no input either, at any depth.
    """
    out = Path(output).resolve()
    for item in inputs:
        if item is None:
            continue
        source = Path(item).resolve()
        if source == out:
            raise InputFileError("output %s is also an input of this command" % output,
                                 hint="choose a different output path")
        if source.with_name(source.name + SIDECAR_SUFFIX) == out:
            raise InputFileError("output %s is the sidecar of the input %s (writing it would make that input "
                                 "unusable)" % (output, item), hint="choose a different output path")
        if replaces_folder and out in source.parents:
            raise InputFileError("output folder %s holds the input %s: replacing the folder would delete it"
                                 % (output, item), hint="choose an output folder that holds none of the inputs")


def require_file(path: PathLike, what: str = "file", hint: str = "") -> Path:
    """Return ``path`` as a Path if it is an existing file, else raise a clear InputFileError.

    A folder (or a device, a socket) where a file is expected is named as what it is, so the
    user is not sent looking for a file that is there.
    """
    p = Path(path)
    if p.is_file():
        return p
    if p.is_dir():
        raise InputFileError("%s %s is a folder, not a file" % (what, p),
                             hint="name the file itself, not the folder that holds it")
    if not p.exists():
        raise InputFileError("%s %s does not exist" % (what, p), hint=hint or "check the path")
    raise InputFileError("%s %s is not a regular file" % (what, p), hint=hint or "give the path of a file")


def opencv_path(path: PathLike, what: str = "file") -> str:
    """``path`` as the text OpenCV is given, refused in one line when it cannot be UTF-8.

    A name with a byte that is not UTF-8 (a file from another system, a Latin-1 name) reaches Python as a lone
    surrogate, and OpenCV's ``VideoCapture``/``imread`` then crash the interpreter (exit 139, no message).
    """
    text = os.fspath(path)
    text = text if isinstance(text, str) else os.fsdecode(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputFileError("the name of %s %s is not valid UTF-8, and OpenCV cannot open such a name"
                             % (what, os.fsencode(text).decode("ascii", "backslashreplace")),  # the real bytes
                             hint="rename it (e.g. `convmv -f latin1 -t utf8 --notest FILE`)") from None
    return text


def expand_user(path: PathLike, what: str = "path") -> Path:
    """``~/x`` and ``~user/x`` as the shell expands them, refused in one line where it cannot: Python's
    ``expanduser`` raises RuntimeError (an internal error) for ``~nosuchuser/x`` and when no home folder is known."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        first = os.fspath(path)
        first = (first if isinstance(first, str) else os.fsdecode(first)).split("/", 1)[0]
        raise InputFileError("%s %s starts with %s, and there is no such user or home folder to expand it to"
                             % (what, os.fspath(path), first),
                             hint="write the folder out in full (no ~), or check the user name") from None


def require_dir(path: PathLike, what: str = "folder", hint: str = "") -> Path:
    """Return ``path`` as a Path if it is an existing folder, else raise a clear InputFileError."""
    p = Path(path)
    if p.is_dir():
        return p
    if p.exists():
        raise InputFileError("%s %s is a file, not a folder" % (what, p), hint=hint or "give the path of a folder")
    raise InputFileError("%s %s does not exist" % (what, p), hint=hint or "check the path")

