"""The one-line errors of a deployment, and what a failed ssh/rsync run's exit status and stderr mean.

ssh's exit status 255 and its stderr are turned into one-line errors: unreachable host, refused
authentication, changed host key; "No space left on device" anywhere (rsync, cat, tar) is a full
disk on the board.
"""

import shlex
from typing import TYPE_CHECKING, Optional, Sequence

from jetforge.errors import JetforgeError

if TYPE_CHECKING:  # the target module raises these errors
    from jetforge.deploy.remote.target import SshTarget


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


def classify(returncode: int, stderr: str, target: "SshTarget", doing: str = "connect",
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
