"""Output sets: the files one run writes, replaced together so that a folder never mixes two runs.

:func:`jetforge.fileio.atomic_output` makes each file whole or absent, but a command that writes several
files (``calibrate``: cache, Q/DQ ONNX and its sidecar, report, plots; ``prune``: plan, weights, report,
ONNX) and is stopped half-way used to leave its first new files beside the previous run's others: a set
that later stages (build, bundle) would take as belonging together.  An :class:`OutputSet` closes that gap:

* every file of the run is written into one hidden staging folder beside the outputs, under its final name
  (``.NAME.PID.HOST.RANDOM.partial``, the naming of :func:`jetforge.fileio.staging_dir`, so the next writer
  removes what a SIGKILLed run left there).  Files keep their names, so what refers to a neighbour by name (a
  sidecar, ONNX external data) stays right once moved;
* only when the run finished are the files moved into place, one ``rename`` each, and the files of the previous
  set that the new one does not have are removed (only those the previous record names, with the content it
  recorded, and never an input of the run);
* a small record, ``.NAME.set.json``, names the files of the set with their SHA-256.  It says ``committing``
  (with the previous set's files) while files are being moved and ``complete`` once they all are.

A stop by Ctrl-C, SIGTERM or an exception before or during the move leaves the previous set exactly as it was:
the staged files are dropped, and files already moved are put back (the old ones were hard-linked aside first).
Only a SIGKILL or a power cut between two renames can leave a mixed set; its record then still says
``committing``, and :func:`check_outputs` (readers) and the next writer of the set tell it from a whole one by
the content hashes and say so in one line.  Commits and checks of one folder hold a lock on the folder, so a
reader never mistakes a commit in progress for an interrupted one.
"""

import contextlib
import datetime
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from jetforge.errors import InputFileError
from jetforge.fileio import (PathLike, check_output_path, remove_stale_parts, sha256_file, staging_dir,
                             write_json_atomic)

try:  # POSIX; jetforge runs on Linux (Jetson, workstations), where it is always there
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

RECORD_FORMAT = "jetforge-output-set"
RECORD_VERSION = 1
_PART_MARK = ".part"  # atomic_output's temporary names: never a member of a set


def check_output_folder(path: PathLike, what: str = "output folder", hint: str = "") -> Path:
    """Refuse, before any work is done, an output folder that cannot be one: an existing file (or a link to one),
    or a path below a file.  The folder counterpart of :func:`jetforge.fileio.check_output_path`: ``board-check
    --out``, ``deploy --results`` and ``distill``'s ``out_dir`` each failed only after their whole run."""
    target = Path(path)
    if os.path.lexists(str(target)) and not target.is_dir():
        raise InputFileError("%s %s is a file, not a folder" % (what, target),
                             hint=hint or "give a folder (it is made where missing)")
    blocker = next((p for p in target.parents if os.path.lexists(str(p)) and not p.is_dir()), None)
    if blocker is not None:
        raise InputFileError("%s %s lies below %s, which is a file" % (what, target, blocker),
                             hint=hint or "give a folder (it is made where missing)")
    return target


def record_path(folder: PathLike, name: str) -> Path:
    """The record of set ``name`` in ``folder``: ``.NAME.set.json`` (hidden, beside the files it names)."""
    return Path(folder) / (".%s.set.json" % name)


def read_record(path: PathLike) -> Optional[Dict[str, Any]]:
    """The record at ``path``, or None when there is none (or it is not one of ours: it is then ignored)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or not isinstance(data.get("files"), dict):
        return None
    return data


@contextlib.contextmanager
def folder_lock(folder: PathLike, exclusive: bool = True) -> Iterator[None]:
    """Hold ``flock`` on ``folder`` while inside: commits take it exclusive, checks shared.

    A commit lasts a few renames, so waiting is short; a killed holder releases it with its last file
    descriptor.  Where folders cannot be locked (some network file systems) the work goes on unlocked.
    """
    fd = -1
    with contextlib.suppress(OSError):
        fd = os.open(str(folder), os.O_RDONLY)
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock


def _owned(record: Optional[Dict[str, Any]]) -> Dict[str, Set[str]]:
    """{member name: the contents it may have} of everything a record claims, a half-replaced set's both runs."""
    owned: Dict[str, Set[str]] = {}
    if record is None:
        return owned
    for name, digest in record["files"].items():
        owned.setdefault(name, set()).add(str(digest))
    for name, digests in (record.get("replaces") or {}).items():
        owned.setdefault(name, set()).update(str(d) for d in digests)
    return owned


def _disk_hash(path: Path) -> Optional[str]:
    """SHA-256 of a regular file at ``path``; None when there is none (a link or a folder is not a member)."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        return sha256_file(path)
    except OSError:
        return None


def verify(folder: PathLike, name: str, record: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """One line saying what is wrong with set ``name`` in ``folder``, or None when it is whole (or has no record).

    ``committing``: whole when every file is the new run's and none of the previous set's others is left, or
    every file is still the previous set's (the run was killed before or after moving anything); mixed
    otherwise.  ``complete``: every file it names must still have the recorded content.
    """
    folder = Path(folder)
    record = read_record(record_path(folder, name)) if record is None else record
    if record is None:
        return None
    new = {n: str(d) for n, d in record["files"].items()}
    disk = {n: _disk_hash(folder / n) for n in _owned(record)}
    if record.get("state") != "committing":
        changed = sorted(n for n, d in new.items() if disk.get(n) != d)
        if not changed:
            return None
        return ("outputs in %s written together by %s (%s, set %s) no longer belong together: %d of the %d "
                "changed or disappeared since (%s); rerun the command that wrote them"
                % (folder, _writer(record), record.get("time", "?"), name, len(changed), len(new), _names(changed)))
    old = {n: set(str(d) for d in ds) for n, ds in (record.get("replaces") or {}).items()}
    new_whole = all(disk[n] == d for n, d in new.items()) and all(disk[n] is None for n in old if n not in new)
    old_whole = all(disk[n] in ds for n, ds in old.items()) and all(disk[n] is None for n in new if n not in old)
    if new_whole or old_whole:
        return None
    fresh = sorted(n for n, d in new.items() if disk[n] == d and d not in old.get(n, ()))
    return ("mixed outputs in %s (set %s): %s was stopped while replacing them (SIGKILL or power loss) and %d of its "
            "%d new files are in place (%s) beside files of the run before; rerun the command that wrote them"
            % (folder, name, _writer(record), len(fresh), len(new), _names(fresh) or "none whole"))


def _writer(record: Dict[str, Any]) -> str:
    return "the run of pid %s" % record.get("pid", "?")


def _names(names: List[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (" ..." if len(names) > shown else "")


def check_outputs(path: PathLike) -> Optional[str]:
    """For readers: one line when the file at ``path`` belongs to an output set that is mixed or was changed.

    None when the set is whole, or ``path`` is in no set (written by hand, by another tool, or copied away from
    its record).  Sets are looked up in the file's folder and the one above (a set may hold a folder of plots).
    """
    target = Path(path).absolute()
    for depth, folder in enumerate((target.parent, target.parent.parent)):
        member = target.name if depth == 0 else "%s/%s" % (target.parent.name, target.name)
        try:
            names = [n for n in os.listdir(str(folder)) if n.startswith(".") and n.endswith(".set.json")]
        except OSError:
            continue
        for record_name in sorted(names):
            with folder_lock(folder, exclusive=False):
                record = read_record(folder / record_name)
                if record is not None and member in _owned(record):
                    return verify(folder, str(record.get("name", record_name[1:-len(".set.json")])), record)
    return None


class OutputSet:
    """The files one run writes into ``folder``, staged and then moved into place together (see module doc).

    ``with OutputSet(folder, name) as out:`` creates the staging folder; writers write to ``out.path(NAME)``;
    leaving the block normally commits, leaving it by an exception (Ctrl-C and SIGTERM included) drops what was
    staged and leaves the previous set as it was.  ``name`` names the set (its record, its staging folder):
    commands use their main output's name.  ``keep``: paths never removed as left-overs of the previous set
    (the run's inputs).
    """

    def __init__(self, folder: PathLike, name: str, keep: Iterable[Optional[PathLike]] = ()) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError("an output set's name is a plain file name, got %r" % name)
        self.folder = Path(folder)
        self.name = name
        self.record = record_path(self.folder, name)
        self.keep = {Path(k).resolve() for k in keep if k is not None}
        self.staging: Optional[Path] = None
        self.committed: Dict[str, str] = {}
        self.removed: List[str] = []
        self.previous_problem: Optional[str] = None

    def __enter__(self) -> "OutputSet":
        self.folder.mkdir(parents=True, exist_ok=True)
        with folder_lock(self.folder):
            self.previous_problem = verify(self.folder, self.name) if self._interrupted_before() else None
        if self.previous_problem:
            log.warning("%s (this run replaces all of them)", self.previous_problem)
        self.staging = staging_dir(self.folder / self.name)  # also removes the staging of killed writers
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        try:
            if exc_type is None:
                self.commit()
        finally:
            if self.staging is not None:
                shutil.rmtree(str(self.staging), ignore_errors=True)
        return False

    def _interrupted_before(self) -> bool:
        record = read_record(self.record)
        return record is not None and record.get("state") == "committing"

    def path(self, name: PathLike, folder: bool = False) -> Path:
        """Where to write the member ``name`` (relative to the folder, e.g. ``model.calib`` or ``plots/p.png``);
        ``folder``: ``name`` is a folder whose files are all members (the writer creates it).

        The final place is checked now (a file not a folder, nothing below a file), so a bad output path fails
        before the work, not after it.
        """
        staging = self._staged()
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError("an output set member is a path inside its folder, got %s" % name)
        final = self.folder / rel
        if folder and final.exists() and not final.is_dir():
            raise InputFileError("cannot write the folder %s: it is a file" % final, hint="choose another output path")
        check_output_path(final / "x" if folder else final)
        return staging / rel

    def final(self, staged: PathLike) -> Path:
        """The path a staged file will have once committed (any other path is returned as it is)."""
        p = Path(staged)
        if self.staging is not None:
            with contextlib.suppress(ValueError):
                return self.folder / p.relative_to(self.staging)
        return p

    def relocate(self, value: Any) -> Any:
        """``value`` (a path, a string, or dicts, lists and tuples of them) with every staged path made final.

        Reports and results name their files; they are built while the files are still staged.
        """
        if isinstance(value, Path):
            return self.final(value)
        if isinstance(value, str):  # a path, or a message that names one
            return value.replace(str(self.staging), str(self.folder)) if self.staging is not None else value
        if isinstance(value, dict):
            return {k: self.relocate(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.relocate(v) for v in value)
        return value

    def _staged(self) -> Path:
        if self.staging is None:
            raise RuntimeError("an OutputSet is used inside `with OutputSet(...) as out:`")
        return self.staging

    def staged_files(self) -> Dict[str, str]:
        """{member name: SHA-256} of every finished file in the staging folder (temporary files excluded)."""
        staging = self._staged()
        found: Dict[str, str] = {}
        for root, dirs, files in os.walk(str(staging)):
            dirs.sort()
            for f in sorted(files):
                p = Path(root) / f
                if (f.startswith(".") and _PART_MARK in f) or p.is_symlink() or not p.is_file():
                    continue
                found[p.relative_to(staging).as_posix()] = sha256_file(p)
        return found

    def commit(self) -> Dict[str, str]:
        """Move the staged files into place and retire the previous set's others; {member: SHA-256} committed."""
        files = self.staged_files()
        with folder_lock(self.folder):
            previous = read_record(self.record)
            leftovers = self._leftovers(previous, files)
            # What is at the set's names now, so that a reader can tell "all new" and "all as before" from a mix.
            before = {n: _disk_hash(self.folder / n) for n in files}
            before.update(leftovers)
            swap = _Swap(self.folder, self._staged(), staging_dir(self.folder / self.name, kind="old"))
            try:
                self._write_record("committing", files, {n: d for n, d in before.items() if d is not None})
                swap.place(files)
                swap.retire(sorted(leftovers))
                self._write_record("complete", files)
            except BaseException:
                swap.roll_back()
                self._restore_record(previous)
                raise
            finally:
                swap.discard_aside()
        self.committed, self.removed = files, sorted(leftovers)
        for name in files:  # temporary files of killed writers of the old, one file at a time, kind
            remove_stale_parts(self.folder / name)
        if leftovers:
            log.info("removed %d file(s) of the previous %s outputs that this run does not write: %s",
                     len(leftovers), self.name, ", ".join(sorted(leftovers)))
        return files

    def _leftovers(self, previous: Optional[Dict[str, Any]], files: Dict[str, str]) -> Dict[str, str]:
        """{member: SHA-256} of the previous set's members this run does not write, with content the record knows
        (so ours: a file changed since, or an input of this run, is kept)."""
        out: Dict[str, str] = {}
        for name, digests in sorted(_owned(previous).items()):
            p = self.folder / name
            if name in files or p.resolve() in self.keep:
                continue
            digest = _disk_hash(p)
            if digest is not None and digest in digests:
                out[name] = digest
            elif digest is not None:
                log.warning("kept %s: it changed since the previous %s run wrote it", p, self.name)
        return out

    def _write_record(self, state: str, files: Dict[str, str], replaces: Optional[Dict[str, str]] = None) -> None:
        """``replaces`` (while committing): what was at the set's names before, the previous run's files."""
        data: Dict[str, Any] = {
            "format": RECORD_FORMAT, "version": RECORD_VERSION, "name": self.name, "state": state,
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "pid": os.getpid(), "files": files}
        if replaces is not None:
            data["replaces"] = {n: [d] for n, d in sorted(replaces.items())}
        write_json_atomic(self.record, data)

    def _restore_record(self, previous: Optional[Dict[str, Any]]) -> None:
        if previous is not None:
            write_json_atomic(self.record, previous)
        else:
            with contextlib.suppress(OSError):
                self.record.unlink()


class _Swap:
    """The moves of one commit, each undoable until :meth:`discard_aside`: the previous files are hard-linked
    (else renamed) into the hidden ``aside`` folder before a new one takes their name."""

    def __init__(self, folder: Path, staging: Path, aside: Path) -> None:
        self.folder, self.staging, self.aside = folder, staging, aside
        self.done: List[Tuple[str, Optional[Path], bool]] = []  # (member, its previous file aside, retired)
        self.made_dirs: List[Path] = []

    def _set_aside(self, name: str) -> Optional[Path]:
        final = self.folder / name
        if not (final.exists() or final.is_symlink()):
            return None
        if final.is_dir() and not final.is_symlink():
            raise InputFileError("cannot write %s: it is a folder" % final, hint="move the folder away, or choose "
                                 "another output path")
        kept = self.aside / name
        kept.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(str(final), str(kept), follow_symlinks=False)  # the old file stays readable at its name
        except OSError:
            os.rename(str(final), str(kept))
        return kept

    def _make_parents(self, final: Path) -> None:
        missing = [p for p in reversed(final.relative_to(self.folder).parents) if not (self.folder / p).is_dir()]
        for p in missing:
            (self.folder / p).mkdir()
            self.made_dirs.append(self.folder / p)

    def place(self, files: Dict[str, str]) -> None:
        """Rename every staged file to its final name (the previous file, if any, set aside first)."""
        for name in files:
            final = self.folder / name
            self._make_parents(final)
            kept = self._set_aside(name)
            self.done.append((name, kept, False))
            _replace(self.staging / name, final)

    def retire(self, names: List[str]) -> None:
        """Move the previous set's left-overs aside (removed with it); folders they leave empty go too."""
        for name in names:
            kept = self.aside / name
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.rename(str(self.folder / name), str(kept))
            self.done.append((name, kept, True))
        for parent in sorted({(self.folder / n).parent for n in names}, key=lambda p: -len(p.parts)):
            if parent != self.folder:
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only when empty: a folder with anything else in it stays

    def roll_back(self) -> None:
        """Undo every move, newest first: the previous files are back under their names, the new ones gone."""
        for name, kept, retired in reversed(self.done):
            final = self.folder / name
            with contextlib.suppress(OSError):
                final.parent.mkdir(parents=True, exist_ok=True)
                if kept is not None:
                    os.replace(str(kept), str(final))
                elif not retired:
                    final.unlink()
        for d in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                d.rmdir()
        self.done = []

    def discard_aside(self) -> None:
        shutil.rmtree(str(self.aside), ignore_errors=True)


def _replace(source: Path, final: Path) -> None:
    """One rename of a staged file to its final name (a separate function: tests make it fail or kill the run)."""
    os.replace(str(source), str(final))


__all__ = ["OutputSet", "check_outputs", "folder_lock", "read_record", "record_path", "verify"]
