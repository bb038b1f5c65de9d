"""SSH to the board through the system's ``ssh``, ``rsync`` and ``tar``: commands, resumable copies, results.

Every connection uses ``BatchMode=yes`` (keys only: a password prompt would hang a script),
``StrictHostKeyChecking=accept-new`` with jetforge's own known-hosts file (the first connection
records the board's key, a changed key is refused), ``-p PORT``, ``-i KEY`` and an optional jump
host (a ``ProxyCommand`` running ssh with the same options, so the jump honours them too).

ssh's exit status 255 and its stderr are turned into one-line errors: unreachable host, refused
authentication, changed host key; "No space left on device" anywhere (rsync, cat, tar) is a full
disk on the board.

Copies: ``rsync --checksum --partial-dir`` sends only files whose content changed and keeps an
interrupted file on the board, so the next copy resumes from it (the partial file is the basis of
rsync's delta transfer).  Where rsync is missing on either side, a chunked copy over ssh appends to
``FILE.jetforge-part`` from the size already on the board, checks the SHA-256 and renames.
The manifest is always sent last and removed first, so a half-copied bundle never verifies.

Values from the command line are checked before ssh sees them: a user or host that could be read
as an option (``-oProxyCommand=...``) or holds shell characters is refused, and ``--`` ends ssh's and
rsync's options before the destination and the paths.  Every remote command is built from quoted
words.  ``rsync --delete-after`` runs only in a folder that is empty, already a bundle, or marked
by an earlier deploy (:data:`MARKER`), so a mistyped ``--remote-dir`` cannot wipe a folder.
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
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple

from jetforge.deploy.bundle import REMOTE_MARKER as MARKER
from jetforge.deploy.safety import check_bundle_path, check_ssh_host, check_ssh_user, remote_child
from jetforge.errors import JetforgeError
from jetforge.fileio import PathLike

PART_SUFFIX = ".jetforge-part"
Echo = Callable[[str], None]


# ------------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------------
class DeployError(JetforgeError):
    """Deploying to a board over SSH failed."""


class HostUnreachableError(DeployError):
    """The board cannot be reached (no route, connection refused, name unknown, timeout)."""


class AuthRefusedError(DeployError):
    """The board refused the SSH key."""


class HostKeyError(DeployError):
    """The board's host key differs from the one recorded."""


class RemoteDiskFullError(DeployError):
    """The board's disk is full."""


class RemoteJetforgeMissingError(DeployError):
    """jetforge is not installed on the board."""


class RemoteCommandError(DeployError):
    """A command on the board failed."""


class TransferError(DeployError):
    """A copy to or from the board failed."""


# ------------------------------------------------------------------------------------------------
# the connection
# ------------------------------------------------------------------------------------------------
def default_known_hosts() -> Path:
    """``$XDG_CONFIG_HOME/jetforge/known_hosts`` (default ``~/.config/jetforge/known_hosts``)."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".config") / "jetforge" / "known_hosts"


def split_destination(spec: str, flag: str = "destination") -> Tuple[Optional[str], str, Optional[int]]:
    """``user@host:port`` -> (user, host, port); user and port are optional; both are checked (see the module)."""
    user: Optional[str] = None
    rest = spec.strip()
    if rest.startswith("-"):
        check_ssh_host(rest, spec, flag)  # raises: ssh would read it as an option
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
    port: Optional[int] = None
    if rest.startswith("["):  # [ipv6]:port
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    elif rest.count(":") == 1 and rest.rsplit(":", 1)[1].isdigit():
        host, p = rest.rsplit(":", 1)
        port = int(p)
    else:
        host = rest
    if not host:
        raise DeployError("%r names no host" % spec, hint="write user@host (e.g. nvidia@192.168.55.1)")
    if user:
        check_ssh_user(user, spec, flag)
    return user or None, check_ssh_host(host, spec, flag), port


@dataclass
class SshTarget:
    """How to reach the board: ``user@host``, port, key, optional jump host, jetforge's known-hosts file."""

    host: str
    user: Optional[str] = None
    port: int = 22
    key: Optional[str] = None
    jump: Optional[str] = None
    known_hosts: Optional[str] = None
    options: List[str] = field(default_factory=list)   # extra `-o` options, e.g. for tests
    connect_timeout: int = 10

    def __post_init__(self) -> None:
        spec = self.destination
        check_ssh_host(self.host, spec)
        if self.user:
            check_ssh_user(self.user, spec)
        if self.jump:
            split_destination(self.jump, "--jump")

    @classmethod
    def parse(cls, spec: str, **kwargs: Any) -> "SshTarget":
        user, host, port = split_destination(spec)
        if port is not None and kwargs.get("port") is None:
            kwargs["port"] = port
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return cls(host=host, user=user, **kwargs)

    @property
    def destination(self) -> str:
        return "%s@%s" % (self.user, self.host) if self.user else self.host

    @property
    def label(self) -> str:
        return "%s port %d" % (self.destination, self.port)

    def _known_hosts(self) -> Path:
        path = Path(self.known_hosts) if self.known_hosts else default_known_hosts()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def _base(self, port: int) -> List[str]:
        args: List[str] = []
        for opt in self.options:
            args += ["-o", opt]
        args += ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
                 "-o", "UserKnownHostsFile=%s" % self._known_hosts(), "-o", "ConnectTimeout=%d" % self.connect_timeout,
                 "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-p", str(port)]
        if self.key:
            args += ["-i", str(Path(self.key).expanduser()), "-o", "IdentitiesOnly=yes"]
        return args

    def ssh_options(self) -> List[str]:
        args = self._base(self.port)
        if self.jump:
            juser, jhost, jport = split_destination(self.jump)
            jdest = "%s@%s" % (juser, jhost) if juser else jhost
            proxy = ["ssh"] + self._base(jport or 22) + ["-W", "%h:%p", "--", jdest]
            args += ["-o", "ProxyCommand=%s" % " ".join(shlex.quote(a) for a in proxy)]
        return args

    def ssh_argv(self, command: Optional[str] = None) -> List[str]:
        argv = ["ssh"] + self.ssh_options() + ["--", self.destination]
        if command is not None:
            argv.append(command)
        return argv

    def rsync_shell(self) -> str:
        return " ".join(shlex.quote(a) for a in ["ssh"] + self.ssh_options())

    def rsync_spec(self, remote_path: str) -> str:
        """``user@host:/abs/path`` for rsync (an IPv6 host in brackets); the path must be absolute.

        An absolute path keeps rsync from reading ``host::path`` as a daemon module.
        """
        if not remote_path.startswith("/"):
            raise DeployError("remote path %r for rsync is not absolute" % remote_path[:80],
                              hint="give --remote-dir as an absolute path or one starting with ~/")
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s:%s" % ("%s@%s" % (self.user, host) if self.user else host, remote_path)


# ------------------------------------------------------------------------------------------------
# error classification
# ------------------------------------------------------------------------------------------------
_UNREACHABLE = ("Could not resolve hostname", "Name or service not known", "Connection refused", "Connection timed out",
                "No route to host", "Network is unreachable", "Operation timed out", "timed out during banner exchange",
                "kex_exchange_identification", "Connection reset by peer", "Temporary failure in name resolution")
_AUTH = ("Permission denied", "Too many authentication failures", "no mutual signature", "Load key")
_HOSTKEY = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED")
DISK_FULL = "No space left on device"


def _line_with(text: str, needles: Sequence[str]) -> str:
    for line in text.splitlines():
        if any(n in line for n in needles):
            return " ".join(line.split())
    return ""


def classify(returncode: int, stderr: str, target: SshTarget, doing: str = "connect",
             remote_dir: Optional[str] = None) -> Optional[DeployError]:
    """The one-line error for a failed ssh/rsync/scp run, or None when it is not a connection/disk problem."""
    if returncode == 0:
        return None
    full = _line_with(stderr, (DISK_FULL,))
    if full:
        where = " (%s)" % remote_dir if remote_dir else ""
        return RemoteDiskFullError("the board's disk is full while trying to %s%s: %s" % (doing, where, full),
                                   hint="free space on the board (`df -h`; remove old engines in "
                                        "~/.cache/jetforge/engines and old results), or choose --remote-dir on a "
                                        "larger disk")
    # ssh reports its own failures with 255; rsync reports a dead remote shell with 12 or 255
    if returncode not in (255, 12, 5):
        return None
    line = _line_with(stderr, _HOSTKEY)
    if line:
        return HostKeyError("the host key of %s changed since it was first recorded: %s" % (target.label, line),
                            hint="if the board was reinstalled, remove its line from %s (ssh-keygen -R '[%s]:%d' -f "
                                 "%s); otherwise do not connect" % (target._known_hosts(), target.host, target.port,
                                                                    target._known_hosts()))
    line = _line_with(stderr, _AUTH)
    if line:
        key = target.key or "~/.ssh/id_ed25519"
        return AuthRefusedError("%s refused SSH authentication: %s" % (target.label, line),
                                hint="install your public key on the board (ssh-copy-id -i %s.pub -p %d %s) or pass "
                                     "--key with a key it accepts; jetforge never asks for passwords (BatchMode)"
                                     % (key, target.port, target.destination))
    line = _line_with(stderr, _UNREACHABLE)
    if line:
        return HostUnreachableError("cannot reach %s: %s" % (target.label, line),
                                    hint="check that the board is on and on the network, that sshd runs on it, and "
                                         "the address and --port%s" % (" and --jump" if target.jump else ""))
    if returncode == 255:
        last = (stderr.strip().splitlines() or ["ssh exited with status 255"])[-1]
        return DeployError("ssh to %s failed: %s" % (target.label, " ".join(last.split())),
                           hint="run `%s true` to see ssh's own messages" % " ".join(
                               shlex.quote(a) for a in ["ssh", "-p", str(target.port), "--", target.destination]))
    return None


def rquote(path: str) -> str:
    """Quote a path for the remote shell, keeping a leading ``~/`` as the remote user's home."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


# ------------------------------------------------------------------------------------------------
# running commands
# ------------------------------------------------------------------------------------------------
@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _pump(stream: IO[bytes], sink: List[bytes], forward: Optional[Echo]) -> None:
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
    threads = [threading.Thread(target=_pump, args=(proc.stdout, out, on_stdout), daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, err, on_stderr), daemon=True)]
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


# ------------------------------------------------------------------------------------------------
# what the board has
# ------------------------------------------------------------------------------------------------
@dataclass
class RemoteInfo:
    """Facts read from the board in one ssh round trip."""

    jetforge: Optional[str]          # "0.1.0", None where missing
    jetforge_path: str
    python: Optional[str]            # the interpreter of the jetforge script
    rsync: bool
    remote_dir: str                  # absolute
    free_bytes: Optional[int]
    arch: str
    l4t: Optional[str] = None
    jetpack: Optional[str] = None
    tensorrt: Optional[str] = None   # the TensorRT of the board's JetPack release
    model: Optional[str] = None
    target: Optional[str] = None
    how: str = ""

    @property
    def is_jetson(self) -> bool:
        return bool(self.l4t)

    def describe(self) -> str:
        if self.is_jetson:
            board = "%s, L4T %s" % (self.model or "unknown Jetson", self.l4t)
            if self.jetpack:
                board += " = JetPack %s (TensorRT %s)" % (self.jetpack, self.tensorrt)
            if self.target:
                board += ", target %s" % self.target
        else:
            board = "not a Jetson (%s, no /etc/nv_tegra_release)" % self.arch
        return board

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__, is_jetson=self.is_jetson)


PROBE = r"""JF={jf}; DIR={dir}
if command -v "$JF" >/dev/null 2>&1; then
  echo "jetforge=$("$JF" --version 2>&1 | head -n 1)"; echo "jfpath=$(command -v "$JF")"
  echo "python=$(head -n 1 "$(command -v "$JF")" 2>/dev/null | sed -n 's/^#! *//p')"
else echo "jetforge=MISSING"; fi
echo "rsync=$(command -v rsync || true)"
echo "tegra=$(head -n 1 /etc/nv_tegra_release 2>/dev/null)"
echo "model=$(tr -d '\000' < /proc/device-tree/model 2>/dev/null)"
echo "compatible=$(tr '\000' ',' < /proc/device-tree/compatible 2>/dev/null)"
echo "memtotal=$(grep MemTotal /proc/meminfo 2>/dev/null)"
echo "arch=$(uname -m)"
echo "home=$HOME"
if mkdir -p -- "$DIR" 2>/dev/null; then echo "dir=$(cd -- "$DIR" && pwd)"; echo "df=$(df -Pk -- "$DIR" | tail -n 1)";
  if [ -e "$DIR"/{marker} ] || [ -e "$DIR"/manifest.json ] || [ -z "$(ls -A -- "$DIR")" ]; then echo "owned=yes";
  else echo "owned=no"; fi
else echo "dir=UNWRITABLE"; fi
"""


def probe(target: SshTarget, remote_jetforge: str, remote_dir: str) -> RemoteInfo:
    """jetforge version, JetPack/TensorRT, board model, free space and rsync on the board."""
    from jetforge.targets.detect import (match_jetson, parse_meminfo_gb, parse_nv_tegra_release, release_for_l4t,
                                         split_device_tree_strings)

    script = PROBE.format(jf=rquote(remote_jetforge), dir=rquote(remote_dir), marker=shlex.quote(MARKER))
    result = ssh_run(target, script, doing="probe the board", check=False)
    values: Dict[str, str] = {}
    for line in result.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key not in values:
            values[key] = value.strip()
    if "arch" not in values:
        raise RemoteCommandError("the board's shell did not answer the probe (exit %d): %s"
                                 % (result.returncode, last_line(result.stderr)),
                                 hint="check that the remote login shell is a POSIX shell")
    if values.get("dir") in (None, "", "UNWRITABLE"):
        raise DeployError("cannot create %s on %s" % (remote_dir, target.label),
                          hint="choose a writable --remote-dir (the default is ~/jetforge/bundles/NAME)")
    check_remote_dir(values["dir"], values.get("home", ""), values.get("owned") == "yes", target)
    jf = values.get("jetforge", "MISSING")
    version = None
    if jf != "MISSING":
        m = re.search(r"jetforge\s+(\S+)", jf)
        version = m.group(1) if m else jf
    free = None
    parts = values.get("df", "").split()
    if len(parts) >= 4 and parts[3].isdigit():
        free = int(parts[3]) * 1024
    info = RemoteInfo(jetforge=version, jetforge_path=values.get("jfpath", remote_jetforge),
                      python=values.get("python") or None, rsync=bool(values.get("rsync")),
                      remote_dir=values["dir"], free_bytes=free, arch=values.get("arch", "?"))
    l4t = parse_nv_tegra_release(values.get("tegra", ""))
    if l4t:
        info.l4t = l4t
        release = release_for_l4t(l4t)
        if release is not None:
            info.jetpack, info.tensorrt = release.jetpack, release.tensorrt
        model = values.get("model") or None
        compatible = split_device_tree_strings(values.get("compatible", "").replace(",", "\x00"))
        mem = parse_meminfo_gb(values.get("memtotal", ""))
        t, how, _ = match_jetson(model, compatible, mem)
        info.model, info.target, info.how = model, (t.name if t is not None else None), how
    return info


def check_remote_dir(folder: str, home: str, owned: bool, target: SshTarget) -> None:
    """Refuse a remote bundle folder where the copy's deletions could hit the user's files.

    The copy makes the folder an exact image of the bundle (rsync ``--delete-after``), so it must be a
    folder jetforge owns: empty, already a bundle, or marked by an earlier deploy; never ``/``, the
    remote home or a folder above it.
    """
    top = folder.rstrip("/") or "/"
    if top == "/" or (home and (home.rstrip("/") == top or home.startswith(top + "/"))):
        raise DeployError("--remote-dir %s is %s on %s: the copy deletes what the bundle does not hold there"
                          % (folder, "the root folder" if top == "/" else "the remote home or above it",
                             target.label),
                          hint="give a folder of its own, e.g. --remote-dir ~/jetforge/bundles/NAME (the default)")
    if not owned:
        raise DeployError("%s on %s already holds files and is not a bundle folder: the copy would delete them"
                          % (folder, target.label),
                          hint="choose an empty or new --remote-dir (the default is ~/jetforge/bundles/NAME)")


def install_instructions(local_version: str, remote_jetforge: str, target: SshTarget) -> str:
    return ("install jetforge %s on the board: build a wheel here (pip wheel --no-deps -w dist .), copy it "
            "(scp -P %d dist/jetforge-%s-*.whl %s:) and run `python3 -m pip install --user jetforge-%s-*.whl` there "
            "(JetPack's python3 with its TensorRT; numpy, onnxruntime and opencv from pip or apt); or pass "
            "--remote-jetforge PATH if it is installed outside PATH (it was looked up as %r)"
            % (local_version, target.port, local_version, target.destination, local_version, remote_jetforge))


def check_free_space(free_bytes: Optional[int], needed_bytes: int, target: SshTarget, where: str) -> None:
    """Refuse a copy that cannot fit (with 10 % and 16 MiB to spare) before sending anything."""
    if free_bytes is None:
        return
    needed = int(needed_bytes * 1.1) + (16 << 20)
    if free_bytes < needed:
        raise RemoteDiskFullError("the board's disk is full: %s has %.0f MiB free, the bundle needs %.0f MiB"
                                  % (where, free_bytes / 1048576.0, needed / 1048576.0),
                                  hint="free space on %s (`df -h`; old engines live in ~/.cache/jetforge/engines) or "
                                       "choose --remote-dir on a larger disk" % target.destination)


# ------------------------------------------------------------------------------------------------
# copies
# ------------------------------------------------------------------------------------------------
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
    from jetforge.deploy.bundle import PARTIAL_DIR

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
    """Create and mark the remote folder, and remove its manifest (sent again last)."""
    ssh_run(target, "mkdir -p -- %s && touch -- %s && rm -f -- %s" % (
        rquote(remote_dir), rquote(remote_child(remote_dir, MARKER)), rquote(remote_child(remote_dir, manifest_name))),
        doing="prepare %s" % remote_dir, remote_dir=remote_dir)


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
        from jetforge.fileio import sha256_file

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
    from jetforge.deploy.bundle import safe_extract

    dest = Path(local_dir)
    dest.mkdir(parents=True, exist_ok=True)
    excludes = " ".join("--exclude=%s" % shlex.quote(p) for p in exclude)
    command = "if [ -d %s ]; then tar -C %s %s -cf - .; fi" % (rquote(remote_dir), rquote(remote_dir), excludes)
    proc = subprocess.Popen(target.ssh_argv(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    err_chunks: List[bytes] = []
    reader = threading.Thread(target=_pump, args=(proc.stderr, err_chunks, None), daemon=True)
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
