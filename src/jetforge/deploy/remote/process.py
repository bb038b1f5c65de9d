"""Running ``ssh``, ``rsync`` and ``tar`` as subprocesses: argument lists (never a local shell), stderr forwarded
line by line while both streams are collected, connection and disk failures raised as one-line errors."""

import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import IO, Callable, List, Optional

from jetforge.deploy.remote.errors import DeployError, RemoteCommandError, classify
from jetforge.deploy.remote.target import SshTarget

Echo = Callable[[str], None]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def pump(stream: IO[bytes], sink: List[bytes], forward: Optional[Echo]) -> None:
    """Read ``stream`` to the end; forward every line (``\\n`` or ``\\r`` ended, for progress bars)."""
    pending = b""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)  # type: ignore[attr-defined]
        if not chunk:
            break
        sink.append(chunk)
        if forward is None:
            continue
        pending += chunk
        parts = re.split(rb"(\r|\n)", pending)
        pending = parts.pop() if parts else b""
        for i in range(0, len(parts) - 1, 2):
            text = parts[i].decode("utf-8", "replace")
            if text.strip():
                forward(text + ("\r" if parts[i + 1] == b"\r" else "\n"))
    if forward is not None and pending.strip():
        forward(pending.decode("utf-8", "replace") + "\n")


def run_process(argv: List[str], *, stdin_file: Optional[IO[bytes]] = None, on_stderr: Optional[Echo] = None,
                on_stdout: Optional[Echo] = None, timeout: Optional[float] = None) -> Result:
    """Run ``argv``, forwarding stderr (and optionally stdout) line by line while collecting both."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin_file is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as err:
        raise DeployError("%s is not installed on this machine" % argv[0],
                          hint="install OpenSSH and rsync (Debian/Ubuntu: sudo apt install openssh-client rsync)"
                          ) from err
    out: List[bytes] = []
    err: List[bytes] = []
    threads = [threading.Thread(target=pump, args=(proc.stdout, out, on_stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err, on_stderr), daemon=True)]
    for t in threads:
        t.start()
    try:
        if stdin_file is not None:
            assert proc.stdin is not None
            try:
                shutil.copyfileobj(stdin_file, proc.stdin, 1 << 20)
            except BrokenPipeError:
                pass
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        proc.wait(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    for t in threads:
        t.join()
    return Result(proc.returncode, b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace"))


def ssh_run(target: SshTarget, command: str, *, doing: str = "run a command", check: bool = True,
            on_stderr: Optional[Echo] = None, on_stdout: Optional[Echo] = None,
            stdin_file: Optional[IO[bytes]] = None, remote_dir: Optional[str] = None,
            timeout: Optional[float] = None) -> Result:
    """Run ``command`` (a shell command line) on the board; connection and disk problems raise one-line errors."""
    result = run_process(target.ssh_argv(command), stdin_file=stdin_file, on_stderr=on_stderr, on_stdout=on_stdout,
                         timeout=timeout)
    error = classify(result.returncode, result.stderr, target, doing, remote_dir)
    if error is not None:
        raise error
    if check and result.returncode != 0:
        raise RemoteCommandError("%s on %s failed (exit %d): %s" % (doing, target.label, result.returncode,
                                                                     last_line(result.stderr)),
                                 hint="the board's full output is in the results folder's remote.log")
    return result


def last_line(text: str) -> str:
    lines = [l.strip() for l in re.split(r"[\r\n]", text) if l.strip()]
    return lines[-1] if lines else "no error message"
