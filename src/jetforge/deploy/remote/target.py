"""How to reach the board: ``user@host:port``, key, jump host and jetforge's own known-hosts file, as ssh and
rsync arguments.

Every connection uses ``BatchMode=yes`` (keys only: a password prompt would hang a script),
``StrictHostKeyChecking=accept-new`` with jetforge's own known-hosts file (the first connection
records the board's key, a changed key is refused), ``-p PORT``, ``-i KEY`` and an optional jump
host (a ``ProxyCommand`` running ssh with the same options, so the jump honours them too).
Values from the command line are checked before ssh sees them: a user or host that could be read as
an option (``-oProxyCommand=...``) or holds shell characters is refused, and ``--`` ends ssh's and
rsync's options before the destination.  Remote paths are quoted for the remote shell (:func:`rquote`),
which refuses control characters in them.
"""

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Tuple

from jetforge.config import Bound
from jetforge.deploy.remote.errors import DeployError
from jetforge.fileio import expand_user
from jetforge.deploy.safety import check_remote_path, check_ssh_host, check_ssh_user


def default_known_hosts() -> Path:
    """``$XDG_CONFIG_HOME/jetforge/known_hosts`` (default ``~/.config/jetforge/known_hosts``)."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (expand_user(base, "$XDG_CONFIG_HOME") if base else Path.home() / ".config") / "jetforge" / "known_hosts"


#: ``--port`` and ``HOST:PORT``: a TCP port is a 16-bit number, and 0 is no port a server listens on.
PORT = Bound(int, 1, 65535, why="a TCP port is 16 bits")
#: ``--connect-timeout``: ssh's ConnectTimeout, whole seconds that ssh reads into a 32-bit int.
CONNECT_TIMEOUT = Bound(int, 1, 2 ** 31 - 1, why="seconds; ssh reads ConnectTimeout into a 32-bit int")


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
    if port is not None:
        PORT.check(port, "the port of %s %s" % (flag, spec))
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
            args += ["-i", str(expand_user(self.key, "--key")), "-o", "IdentitiesOnly=yes"]
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
        check_remote_path(remote_path, "remote path for rsync", error=DeployError)
        if not remote_path.startswith("/"):
            raise DeployError("remote path %r for rsync is not absolute" % remote_path[:80],
                              hint="give --remote-dir as an absolute path or one starting with ~/")
        host = "[%s]" % self.host if ":" in self.host else self.host
        return "%s:%s" % ("%s@%s" % (self.user, host) if self.user else host, remote_path)


def rquote(path: str) -> str:
    """Quote a path for the remote shell, keeping a leading ``~/`` as the remote user's home.

    The one way a path reaches the board's shell (the probe, the copies, every command): a path with a
    control character is refused here (:func:`~jetforge.deploy.safety.check_remote_path`), so no line
    break can split it into two folders, and the folder the probe resolves (``pwd -P``, absolute) is what
    the later commands and rsync (``-s``: no remote shell) are given, verbatim.
    """
    check_remote_path(path, error=DeployError)
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)
