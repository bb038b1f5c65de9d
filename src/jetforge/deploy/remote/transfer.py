"""Copying a bundle to the board and results back: rsync where both sides have it, a chunked resumable copy over
ssh where not, and ``tar`` over ssh for the results.

``rsync --checksum --partial-dir`` sends only files whose content changed and keeps an interrupted file
on the board, so the next copy resumes from it (the partial file is the basis of rsync's delta
transfer).  Where rsync is missing on either side, a chunked copy over ssh appends to
``FILE.jetforge-part`` from the size already on the board, checks the SHA-256 and renames.  The
manifest is always sent last and removed first, so a half-copied bundle never verifies.
``rsync --delete-after`` runs only in a folder jetforge marked (:data:`MARKER`, naming the folder; an
empty folder is claimed and marked first), checked again on the board right before the copy
(:mod:`.owner`), so a mistyped ``--remote-dir`` cannot wipe a folder.
"""

import os
import re
import shlex
import shutil
import subprocess
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.deploy.bundle import PARTIAL_DIR, safe_extract
from jetforge.deploy.bundle import REMOTE_MARKER as MARKER
from jetforge.deploy.remote.errors import DeployError, RemoteCommandError, TransferError, classify
from jetforge.deploy.remote.owner import claim_script
from jetforge.deploy.remote.process import Echo, Result, last_line, pump, run_process, ssh_run
from jetforge.deploy.remote.target import SshTarget, rquote
from jetforge.deploy.safety import check_bundle_path, check_remote_path, remote_child
from jetforge.fileio import PathLike, sha256_file

PART_SUFFIX = ".jetforge-part"


@dataclass
class TransferStats:
    """What a copy did (the manifest, always sent last, is not counted).

    ``literal_bytes`` below a file's size after an interruption proves the resume: the rest came
    from the partial file already on the board (``matched_bytes``).
    """

    method: str
    files_total: int = 0
    files_transferred: int = 0
    bytes_total: int = 0
    literal_bytes: int = 0
    matched_bytes: int = 0
    resumed_files: List[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def _stat(text: str, label: str) -> int:
    m = re.search(r"^%s:\s*([\d,\.]+)" % re.escape(label), text, re.MULTILINE)
    if not m:
        return 0
    return int(float(m.group(1).replace(",", "")))


def rsync_available_locally() -> bool:
    return shutil.which("rsync") is not None


def push_rsync(target: SshTarget, local_dir: PathLike, remote_dir: str, *, manifest_name: str = "manifest.json",
               bwlimit: Optional[int] = None, on_progress: Optional[Echo] = None) -> TransferStats:
    """Send ``local_dir`` to ``remote_dir`` (absolute) with rsync; the manifest is removed first and sent last."""
    started = time.perf_counter()
    _prepare(target, remote_dir, manifest_name)
    base = ["rsync", "-rt", "-s", "--checksum", "--partial-dir=%s" % PARTIAL_DIR, "--stats", "--info=progress2",
            "-e", target.rsync_shell()]
    if bwlimit:
        base.append("--bwlimit=%d" % int(bwlimit))
    local = os.path.abspath(str(local_dir))  # absolute: never read as an option or a host:path
    first = base + ["--delete-after", "--exclude=/%s" % manifest_name, "--exclude=/%s" % MARKER, "--",
                    local + "/", target.rsync_spec(remote_dir) + "/"]
    def progress(text: str) -> None:  # rsync's progress2 lines; its --stats block is parsed, not shown
        if on_progress is not None and re.search(r"\d%", text):
            on_progress(text)

    result = run_process(first, on_stdout=progress)
    _check_rsync(result, target, remote_dir)
    stats = TransferStats(method="rsync", files_total=_stat(result.stdout, "Number of files") or 0,
                          files_transferred=_stat(result.stdout, "Number of regular files transferred"),
                          bytes_total=_stat(result.stdout, "Total file size"),
                          literal_bytes=_stat(result.stdout, "Literal data"),
                          matched_bytes=_stat(result.stdout, "Matched data"))
    last = run_process(base + ["--", os.path.join(local, manifest_name),
                               target.rsync_spec(remote_child(remote_dir, manifest_name))])
    _check_rsync(last, target, remote_dir)
    stats.seconds = time.perf_counter() - started
    return stats


def _prepare(target: SshTarget, remote_dir: str, manifest_name: str) -> None:
    """Check again on the board that the folder is jetforge's, mark it, and remove its manifest (sent again last).

    Nothing deletes in ``remote_dir`` before this passed: the folder must be the probe's resolved absolute
    path, and hold jetforge's marker naming it (or be empty: jetforge claims it here), see :mod:`.owner`.
    """
    check_remote_path(remote_dir, "remote folder", error=TransferError)
    if not remote_dir.startswith("/"):
        raise TransferError("remote folder %r is not absolute" % remote_dir[:80],
                            hint="the copy takes the folder the probe resolved on the board")
    name = check_bundle_path(manifest_name, "manifest name")
    result = ssh_run(target, claim_script(remote_dir, name), doing="prepare %s" % remote_dir, check=False,
                     remote_dir=remote_dir)
    if result.returncode == 3:
        state = result.stdout.strip().rpartition("owner=")[2] or "unknown"
        raise DeployError("%s on %s changed since the probe and is no longer a folder jetforge marked (%s): "
                          "nothing was copied or deleted" % (remote_dir, target.label, state),
                          hint="run the deploy again, or choose a new --remote-dir")
    if result.returncode != 0:
        raise RemoteCommandError("prepare %s on %s failed (exit %d): %s" % (remote_dir, target.label,
                                                                         result.returncode, last_line(result.stderr)),
                                 hint="check that the folder is writable, or choose another --remote-dir")


def _check_rsync(result: Result, target: SshTarget, remote_dir: str) -> None:
    error = classify(result.returncode, result.stderr, target, "copy the bundle", remote_dir)
    if error is not None:
        raise error
    if result.returncode != 0:
        raise TransferError("rsync to %s failed (exit %d): %s" % (target.label, result.returncode,
                                                                   last_line(result.stderr)),
                            hint="run the same deploy again: rsync resumes an interrupted copy")


def push_ssh(target: SshTarget, local_dir: PathLike, files: Sequence[Tuple[str, str]], remote_dir: str, *,
             manifest_name: str = "manifest.json", on_progress: Optional[Echo] = None) -> TransferStats:
    """Chunked, resumable copy without rsync: ``files`` is [(relative path, sha256)], the manifest goes last."""
    started = time.perf_counter()
    local = Path(local_dir)
    rd = rquote(remote_dir)
    names = [check_bundle_path(f, "bundle file") for f, _ in files]  # relative: the commands run in remote_dir
    _prepare(target, remote_dir, manifest_name)
    listing = ("cd -- %s && for f in %s; do if [ -f \"$f\" ]; then sha256sum -- \"$f\"; fi; "
               "if [ -f \"$f%s\" ]; then echo \"PART $(wc -c < \"$f%s\") $f\"; fi; done"
               % (rd, " ".join(shlex.quote(n) for n in names), PART_SUFFIX, PART_SUFFIX))
    result = ssh_run(target, listing, doing="list %s" % remote_dir, remote_dir=remote_dir)
    have: Dict[str, str] = {}
    parts: Dict[str, int] = {}
    for line in result.stdout.splitlines():
        if line.startswith("PART "):
            _, size, name = line.split(" ", 2)
            parts[name] = int(size)
        elif "  " in line:
            digest, name = line.split("  ", 1)
            have[name] = digest
    stats = TransferStats(method="ssh", files_total=len(files) + 1)
    todo = [(n, d) for n, d in files if have.get(n) != d] + [(manifest_name, "")]
    stats.bytes_total = sum((local / n).stat().st_size for n, _ in files)
    for name, digest in todo:
        path = local / name
        size = path.stat().st_size
        offset = parts.get(name, 0)
        if offset > size:
            offset = 0
        if offset:
            stats.resumed_files.append(name)
        remote_part = name + PART_SUFFIX
        prep = "cd -- %s && mkdir -p -- %s && %s" % (rd, shlex.quote(os.path.dirname(name) or "."),
                                                       "touch -- %s" % shlex.quote(remote_part) if offset
                                                       else ": > %s" % shlex.quote(remote_part))
        with open(str(path), "rb") as f:
            f.seek(offset)
            if on_progress is not None:
                on_progress("%s: sending %d of %d bytes%s\n" % (name, size - offset, size,
                                                                " (resuming at %d)" % offset if offset else ""))
            ssh_run(target, "%s && cat >> %s" % (prep, shlex.quote(remote_part)), doing="copy %s" % name,
                    stdin_file=f, remote_dir=remote_dir)
        if name != manifest_name:
            stats.literal_bytes += size - offset
            stats.matched_bytes += offset
            stats.files_transferred += 1
        want = digest or sha256_file(path)
        check = ("cd -- %s && if echo %s | sha256sum -c --status; then mv -f -- %s %s; else rm -f -- %s; exit 7; fi"
                 % (rd, shlex.quote("%s  %s" % (want, remote_part)), shlex.quote(remote_part), shlex.quote(name),
                    shlex.quote(remote_part)))
        done = ssh_run(target, check, doing="check %s" % name, check=False, remote_dir=remote_dir)
        if done.returncode != 0:
            raise TransferError("%s arrived corrupt on the board (SHA-256 differs); the partial copy was removed"
                                % name, hint="run the same deploy again to send it from the start")
    stats.seconds = time.perf_counter() - started
    return stats


def fetch_dir(target: SshTarget, remote_dir: str, local_dir: PathLike,
              exclude: Sequence[str] = ()) -> List[Path]:
    """Copy ``remote_dir`` (absolute) into ``local_dir`` through ``tar`` over ssh; returns the files written."""
    dest = Path(local_dir)
    dest.mkdir(parents=True, exist_ok=True)
    excludes = " ".join("--exclude=%s" % shlex.quote(p) for p in exclude)
    command = "if [ -d %s ]; then tar -C %s %s -cf - .; fi" % (rquote(remote_dir), rquote(remote_dir), excludes)
    proc = subprocess.Popen(target.ssh_argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    err_chunks: List[bytes] = []
    reader = threading.Thread(target=pump, args=(proc.stderr, err_chunks, None), daemon=True)
    reader.start()
    names: List[str] = []
    staging = dest / (".fetch-%s" % uuid.uuid4().hex[:8])
    staging.mkdir()
    try:
        assert proc.stdout is not None
        head = proc.stdout.peek(1) if hasattr(proc.stdout, "peek") else b"x"  # type: ignore[attr-defined]
        if head:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                names = safe_extract(tar, staging)
        proc.stdout.read()
        proc.wait()
        reader.join()
        stderr = b"".join(err_chunks).decode("utf-8", "replace")
        error = classify(proc.returncode, stderr, target, "fetch the results", remote_dir)
        if error is not None:
            raise error
        if proc.returncode != 0:
            raise TransferError("fetching %s from %s failed (exit %d): %s"
                                % (remote_dir, target.label, proc.returncode, last_line(stderr)),
                                hint="the results stay on the board in %s" % remote_dir)
        for rel in names:
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(str(staging / rel), str(out))
    except tarfile.TarError as err:
        raise TransferError("the results archive from %s is damaged: %s" % (target.label, err),
                            hint="the results stay on the board in %s" % remote_dir) from err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(str(staging), ignore_errors=True)
    return [dest / n for n in names]
