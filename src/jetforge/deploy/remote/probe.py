"""What the board has, read in one ssh round trip (jetforge, JetPack/TensorRT, board model, free space, rsync),
and the checks made on it before anything is copied (a folder jetforge owns, enough free space).

The probe resolves ``--remote-dir`` on the board once (``mkdir -p``, then ``pwd -P``: absolute, links
followed) and every later command and rsync get that path verbatim, so they all name the folder whose
ownership was checked (:mod:`.owner`)."""

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional

from jetforge.deploy.remote.errors import DeployError, RemoteCommandError, RemoteDiskFullError
from jetforge.deploy.remote.owner import check_remote_dir, ownership_script
from jetforge.deploy.remote.process import last_line, ssh_run
from jetforge.deploy.remote.target import SshTarget, rquote
from jetforge.deploy.safety import REMOTE_PATH_HINT, check_remote_path, remote_path_problem, shown_value


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


PROBE = r"""JF={jf}; DIR={dir}; nl='
'
printf 'home=%s\n' "$HOME"; printf 'home_resolved=%s\n' "$(cd -- "$HOME" 2>/dev/null && pwd -P)"
if mkdir -p -- "$DIR" 2>/dev/null && R=$(cd -- "$DIR" && pwd -P) && [ -n "$R" ]; then
  case $R in *"$nl"*) echo "dir=UNSAFE";; *) printf 'dir=%s\n' "$R"; echo "df=$(df -Pk -- "$R" | tail -n 1)"
{ownership}  echo "owner=$st"; printf 'marker_for=%s\n' "$mf";; esac
else echo "dir=UNWRITABLE"; fi
if command -v "$JF" >/dev/null 2>&1; then
  echo "jetforge=$("$JF" --version 2>&1 | head -n 1)"; echo "jfpath=$(command -v "$JF")"
  echo "python=$(head -n 1 "$(command -v "$JF")" 2>/dev/null | sed -n 's/^#! *//p')"
else echo "jetforge=MISSING"; fi
echo "rsync=$(command -v rsync || true)"
echo "tegra=$(head -n 1 /etc/nv_tegra_release 2>/dev/null)"
echo "model=$(tr -d '\000\n' < /proc/device-tree/model 2>/dev/null)"
echo "compatible=$(tr '\000' ',' < /proc/device-tree/compatible 2>/dev/null)"
echo "memtotal=$(grep MemTotal /proc/meminfo 2>/dev/null)"
echo "arch=$(uname -m)"
"""
# the folder's lines come first, before any line a file on the board could add to
VERBATIM = ("dir", "marker_for")  # paths: a leading or trailing space is part of the name


def _answers(stdout: str) -> Dict[str, str]:
    """The probe's ``key=value`` lines (split at newlines only: a path may hold other line breaks)."""
    values: Dict[str, str] = {}
    for line in stdout.split("\n"):
        key, sep, value = line.partition("=")
        if sep and key not in values:
            values[key] = value if key in VERBATIM else value.strip()
    return values


def probe(target: SshTarget, remote_jetforge: str, remote_dir: str) -> RemoteInfo:
    """jetforge version, JetPack/TensorRT, board model, free space and rsync on the board."""
    from jetforge.targets.detect import (match_jetson, parse_meminfo_gb, parse_nv_tegra_release, release_for_l4t,
                                         split_device_tree_strings)

    script = PROBE.format(jf=rquote(remote_jetforge), dir=rquote(check_remote_path(remote_dir, "--remote-dir", True)),
                          ownership=ownership_script())
    result = ssh_run(target, script, doing="probe the board", check=False)
    values = _answers(result.stdout)
    if "arch" not in values:
        raise RemoteCommandError("the board's shell did not answer the probe (exit %d): %s"
                                 % (result.returncode, last_line(result.stderr)),
                                 hint="check that the remote login shell is a POSIX shell")
    if values.get("dir") in (None, "", "UNWRITABLE"):
        raise DeployError("cannot create %s on %s" % (remote_dir, target.label),
                          hint="choose a writable --remote-dir (the default is ~/jetforge/bundles/NAME)")
    folder = values["dir"]
    if folder == "UNSAFE" or remote_path_problem(folder) or not folder.startswith("/"):
        raise DeployError("--remote-dir %s is, on %s, the folder %s: a path with control characters, which the "
                          "shell and rsync could take for another folder" % (shown_value(remote_dir), target.label,
                                                                            shown_value(folder)),
                          hint=REMOTE_PATH_HINT)
    check_remote_dir(folder, values.get("home", ""), values.get("owner", ""), target, values.get("marker_for", ""),
                     values.get("home_resolved", ""))
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
                      remote_dir=folder, free_bytes=free, arch=values.get("arch", "?"))
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
