"""``jetforge deploy BUNDLE user@host``: copy, check, run on the board, bring the results back.

Steps, each with one clear error when it fails:

1. open and verify the bundle here (a corrupt bundle is never sent);
2. probe the board over SSH: jetforge version (install instructions where it is missing), JetPack
   and its TensorRT, board model, free space; refuse a board whose TensorRT the bundle was not
   prepared for, and a disk that cannot hold it;
3. copy what changed (rsync, or the chunked ssh copy), manifest last; ``jetforge bundle verify``
   on the board;
4. run the asked steps on the board — ``doctor``, ``build`` (through the board's engine cache),
   ``bench`` (the TensorRT engine, or the ONNX model on ONNX Runtime where TensorRT is missing,
   labelled as such), ``app`` — streaming the board's log (with its progress bars) here;
5. fetch the results (metrics JSON, plots, the annotated video with ``fetch_video``) into
   ``results/<host>-<YYYYmmdd-HHMMSS>/`` with ``deploy.json`` (what ran, where, with which
   versions) and ``remote.log``.

Before anything is sent, the options are checked (:meth:`DeployOptions.check`): ``--remote-env`` keys
are identifiers, ``--app-command`` names only its known fields, ``--remote-dir`` is absolute or under
``~/`` with no control character and no ``.`` or ``..`` part, ``--results`` is a folder that can be made
(not a file, not below one, not inside the bundle).  On the board the copy deletes only in a folder
jetforge marked as its own (:mod:`jetforge.deploy.remote.owner`).  The board's folder defaults to
``~/jetforge/bundles/<name>`` with the bundle's checked name, and every command sent to the board is a
list of quoted words.
"""

import datetime
import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO

import jetforge
from jetforge.deploy.bundle import ONNX, BundleNotPreparedError, open_bundle
from jetforge.deploy.onboard import EXIT_NO_TENSORRT
from jetforge.deploy.remote import (DeployError, RemoteCommandError, RemoteInfo, RemoteJetforgeMissingError, SshTarget,
                                    check_free_space, fetch_dir, install_instructions, last_line, probe, push_rsync,
                                    push_ssh, rquote, rsync_available_locally, ssh_run)
from jetforge.deploy.safety import (check_app_command, check_bundle_name, check_env_key, check_remote_path,
                                    expand_app_command, shown_value)
from jetforge.errors import ConfigError
from jetforge.fileio import PathLike, write_json_atomic
from jetforge.runtime.tensorrt.version import version_text

STEPS = ("doctor", "build", "bench", "board-check", "app")
VIDEO_PATTERNS = ("*.mp4", "*.avi", "*.mkv", "*.mov")
DEFAULT_APP = "demo --model {model} --out {out}"
REMOTE_BASE = "~/jetforge/bundles"


@dataclass
class DeployOptions:
    """Everything ``jetforge deploy`` takes besides the bundle and the board."""

    remote_dir: Optional[str] = None            # default ~/jetforge/bundles/<bundle name>
    remote_jetforge: str = "jetforge"
    remote_env: Dict[str, str] = field(default_factory=dict)
    runs: List[str] = field(default_factory=list)
    results_root: str = "results"
    fetch_video: bool = False
    transfer: str = "auto"                      # auto, rsync, ssh
    bwlimit: Optional[int] = None               # KiB/s for rsync
    target: str = "auto"                        # --target for the remote build
    bench_args: List[str] = field(default_factory=list)
    app_command: str = DEFAULT_APP

    def check(self, bundle_path: Optional[PathLike] = None) -> None:
        """Refuse, before any connection, options that could run code on the board, point the copy at another
        folder than the one checked, or fail only after the remote run (one clear error)."""
        for step in self.runs:
            if step not in STEPS:
                raise DeployError("unknown --run step %r" % step, hint="use one of: %s" % ", ".join(STEPS))
        for key in self.remote_env:
            check_env_key(key)
        if "app" in self.runs:
            check_app_command(self.app_command)
        if self.remote_dir is not None:
            check_remote_path(self.remote_dir, "--remote-dir", folder=True, error=ConfigError)
        check_remote_path(self.remote_jetforge, "--remote-jetforge", error=ConfigError)
        check_results_root(self.results_root, bundle_path)


def check_results_root(root: PathLike, bundle_path: Optional[PathLike] = None) -> None:
    """Refuse a ``--results`` folder that cannot be made (a file, or below one) or lies inside the bundle."""
    path = Path(root)
    if os.path.lexists(str(path)) and not path.is_dir():
        raise ConfigError("--results %s is a file, not a folder: the results could not be written there"
                          % shown_value(str(root)),
                          hint="give a folder (it is made where missing), e.g. --results results")
    blocker = next((p for p in path.parents if os.path.lexists(str(p)) and not p.is_dir()), None)
    if blocker is not None:
        raise ConfigError("--results %s lies below %s, which is a file: the results could not be written there"
                          % (shown_value(str(root)), shown_value(str(blocker))),
                          hint="give a folder (it is made where missing), e.g. --results results")
    if bundle_path is not None:
        bundle, out = Path(bundle_path).resolve(), path.resolve()
        if out == bundle or (bundle.is_dir() and bundle in out.parents):
            raise ConfigError("--results %s is inside the bundle %s: the results would become part of the bundle"
                              % (shown_value(str(root)), shown_value(str(bundle_path))),
                              hint="give a folder outside the bundle, e.g. --results results")


class Console:
    """Where the deploy says what it does: lines here, the board's output prefixed, and a log file."""

    def __init__(self, host: str, stream: Optional[TextIO] = None, quiet: bool = False) -> None:
        self.host = host
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.log_lines: List[str] = []

    def say(self, text: str) -> None:
        self.log_lines.append("[deploy] " + text)
        if not self.quiet:
            self.stream.write("deploy: %s\n" % text)
            self.stream.flush()

    def remote(self, text: str) -> None:
        """One line (or one ``\\r``-ended progress update) of the board's output."""
        line = text.rstrip("\r\n")
        if text.endswith("\n"):
            self.log_lines.append("[%s] %s" % (self.host, line))
        if not self.quiet:
            self.stream.write("[%s] %s%s" % (self.host, line, "\r" if text.endswith("\r") else "\n"))
            self.stream.flush()


def _stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def _safe_host(host: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", host).strip("_") or "board"


def check_board_prepared(manifest: Any, info: RemoteInfo) -> Optional[str]:
    """Raise where the board's JetPack TensorRT (or target) is not one the bundle was prepared for."""
    if not info.is_jetson:
        return None
    if info.tensorrt is None:
        return "L4T %s is not in jetforge's JetPack table: the board's TensorRT version is unknown" % info.l4t
    version = version_text(info.tensorrt)
    ok = [p for p in manifest.prepared if p.ok]
    listing = ", ".join("%s/TensorRT %s" % (p.target, p.tensorrt) for p in ok)
    if info.target is not None and info.target not in manifest.target_names:
        raise BundleNotPreparedError("the board is a %s (JetPack %s, TensorRT %s); bundle %s was prepared for %s"
                                     % (info.target, info.jetpack, version, manifest.name, listing),
                                     hint="re-create the bundle with --target %s" % info.target)
    rows = [p for p in ok if p.tensorrt == version and (info.target is None or p.target == info.target)]
    if not rows:
        raise BundleNotPreparedError("the board runs JetPack %s with TensorRT %s; bundle %s was prepared for %s"
                                     % (info.jetpack, version, manifest.name, listing),
                                     hint="re-create the bundle with --tensorrt %s (and --calib with a cache for it), "
                                          "or flash the board with the JetPack the bundle was made for" % version)
    return None


class Deployment:
    """One ``jetforge deploy`` run; :meth:`run` does the steps of the module docstring."""

    def __init__(self, bundle_path: PathLike, ssh: SshTarget, options: DeployOptions,
                 console: Optional[Console] = None) -> None:
        self.bundle_path = Path(bundle_path)
        self.ssh = ssh
        self.opts = options
        self.console = console or Console(ssh.host)
        self.summary: Dict[str, Any] = {}
        self.results_dir: Optional[Path] = None

    # -- helpers ------------------------------------------------------------------------------------
    def _env(self) -> str:
        """``env 'K=V' ... `` before a command (keys checked as identifiers; each pair one quoted word)."""
        pairs = [shlex.quote("%s=%s" % (check_env_key(k), v)) for k, v in sorted(self.opts.remote_env.items())]
        return ("env %s " % " ".join(pairs)) if pairs else ""

    def _command(self, program: str, args: List[str], cwd: str, stdout_to: Optional[str] = None) -> str:
        """``cd CWD && env ... PROGRAM ARGS [> FILE]`` with every word quoted (``args`` are plain words)."""
        line = "cd -- %s && %s%s %s" % (rquote(cwd), self._env(), rquote(program),
                                         " ".join(shlex.quote(a) for a in args))
        return line + (" > %s" % shlex.quote(stdout_to) if stdout_to else "")

    def _jf(self, args: List[str], cwd: str, stdout_to: Optional[str] = None) -> str:
        return self._command(self.info.jetforge_path, args, cwd, stdout_to)

    def _remote(self, what: str, command: str, check: bool = False) -> Any:
        self.console.say("%s on the board" % what)
        started = time.perf_counter()
        result = ssh_run(self.ssh, command, doing=what, check=False, on_stderr=self.console.remote,
                         remote_dir=self.remote_dir)
        self.steps.append({"step": what, "exit": result.returncode, "seconds": round(time.perf_counter() - started, 2),
                           "command": command})
        if check and result.returncode != 0:
            raise RemoteCommandError("%s on %s failed (exit %d): %s" % (what, self.ssh.label, result.returncode,
                                                                         last_line(result.stderr)),
                                     hint="see remote.log in the results folder for the board's whole output")
        return result

    @staticmethod
    def _json(text: str) -> Optional[Dict[str, Any]]:
        start = text.find("{")
        if start < 0:
            return None
        try:
            data = json.loads(text[start:])
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    # -- the run ------------------------------------------------------------------------------------
    def run(self) -> Dict[str, Any]:
        opts = self.opts
        opts.check(self.bundle_path)
        bundle = open_bundle(self.bundle_path)
        manifest = bundle.manifest
        self.console.say("bundle %s (%d files, %.1f MiB, hash %s) verified here"
                         % (manifest.name, len(manifest.files), manifest.total_bytes / 1048576.0,
                            manifest.bundle_hash[:12]))
        self.remote_dir = opts.remote_dir or "%s/%s" % (REMOTE_BASE, check_bundle_name(manifest.name))
        self.steps: List[Dict[str, Any]] = []
        stamp = _stamp()
        info = self._connect(manifest)                                      # 2. the board
        stats = self._copy(bundle, info)                                    # 3. copy
        self.summary = {"host": self.ssh.host, "port": self.ssh.port, "user": self.ssh.user,
                        "started": stamp, "bundle": {"name": manifest.name, "hash": manifest.bundle_hash,
                                                      "path": str(self.bundle_path)},
                        "remote_dir": info.remote_dir, "board": info.to_dict(), "transfer": stats.to_dict(),
                        "jetforge_local": jetforge.__version__, "steps": self.steps}
        if info.jetforge is None:
            return self.summary

        # verify on the board
        verify = self._remote("bundle verify", self._jf(["bundle", "verify", info.remote_dir, "--json"],
                                                        info.remote_dir))
        if verify.returncode != 0:
            raise DeployError("the bundle on the board does not verify: %s" % last_line(verify.stderr),
                              hint="run the same deploy again (it resends what differs)")
        self._run_steps(info, "%s-results/%s" % (info.remote_dir, stamp))  # 4. steps
        return self.summary

    def _connect(self, manifest: Any) -> RemoteInfo:
        """Probe the board; refuse it where a requested step cannot run, warn about what differs."""
        opts = self.opts
        self.info = info = probe(self.ssh, opts.remote_jetforge, self.remote_dir)
        self.remote_dir = info.remote_dir
        self.console.say("connected to %s: %s" % (self.ssh.label, info.describe()))
        if info.jetforge is None:
            if opts.runs:
                raise RemoteJetforgeMissingError("jetforge is not installed on %s (looked up %r on the board's PATH)"
                                                 % (self.ssh.label, opts.remote_jetforge),
                                                 hint=install_instructions(jetforge.__version__, opts.remote_jetforge,
                                                                           self.ssh))
            self.console.say("warning: jetforge is not installed on the board; copying only")
        else:
            self.console.say("board jetforge %s at %s" % (info.jetforge, info.jetforge_path))
            if info.jetforge.split(".")[:2] != jetforge.__version__.split(".")[:2]:
                self.console.say("warning: the board runs jetforge %s, this machine %s (bundle format %d)"
                                 % (info.jetforge, jetforge.__version__, manifest.format))
        note = check_board_prepared(manifest, info)
        if note:
            self.console.say("warning: " + note)
        if not info.is_jetson:
            self.console.say("note: the board is not a Jetson: TensorRT engines cannot be built there; "
                             "`build` reports it and `bench` runs the ONNX model on ONNX Runtime")
        check_free_space(info.free_bytes, manifest.total_bytes, self.ssh, info.remote_dir)
        return info

    def _copy(self, bundle: Any, info: RemoteInfo) -> Any:
        """Send the bundle with rsync (where both sides have it, or ``--transfer rsync``) or the chunked ssh copy."""
        opts = self.opts
        use_rsync = opts.transfer == "rsync" or (opts.transfer == "auto" and info.rsync and rsync_available_locally())
        if opts.transfer == "rsync" and not info.rsync:
            raise DeployError("rsync is not installed on %s" % self.ssh.label,
                              hint="sudo apt install rsync on the board, or use --transfer ssh")
        self.console.say("copying to %s:%s with %s" % (self.ssh.destination, info.remote_dir,
                                                       "rsync" if use_rsync else "ssh (chunked)"))
        if use_rsync:
            stats = push_rsync(self.ssh, bundle.path, info.remote_dir, bwlimit=opts.bwlimit,
                               on_progress=self.console.remote)
        else:
            stats = push_ssh(self.ssh, bundle.path, [(f.path, f.sha256) for f in bundle.manifest.files],
                             info.remote_dir, on_progress=self.console.remote)
        self.console.say("copied %d file(s), %.1f MiB sent (%.1f s)" % (stats.files_transferred,
                                                                      stats.literal_bytes / 1048576.0, stats.seconds))
        return stats

    def _run_steps(self, info: RemoteInfo, remote_results: str) -> None:
        """doctor, build, board-check, bench, app on the board, in that order, each as asked for."""
        opts = self.opts
        ssh_run(self.ssh, "mkdir -p -- %s" % rquote(remote_results), doing="create the results folder",
                remote_dir=remote_results)
        self.summary["remote_results"] = remote_results
        engine: Optional[str] = None
        built = False
        runs = list(opts.runs)
        for step in [s for s in STEPS if s in runs]:
            if step == "doctor":
                self._remote("doctor", self._jf(["doctor", "--json"], info.remote_dir,
                                                stdout_to=remote_results + "/doctor.json"), check=True)
            elif step == "build" or (step == "bench" and not built):
                engine = self._build(remote_results, info)
                built = True
            if step == "board-check":
                self._board_check(remote_results, info)
            if step == "bench":
                self._bench(engine, remote_results, info)
            elif step == "app":
                model = engine or "%s/%s" % (info.remote_dir, ONNX)
                words = expand_app_command(opts.app_command, {
                    "model": model, "out": remote_results + "/app", "bundle": info.remote_dir,
                    "config": "%s/app.yaml" % info.remote_dir})
                self._remote("app", self._jf(words, info.remote_dir), check=True)

    def _build(self, remote_results: str, info: RemoteInfo) -> Optional[str]:
        """``jetforge build`` on the board; the engine's path there, or None without TensorRT (bench uses ORT)."""
        res = self._remote("build", self._jf(["build", info.remote_dir, "--target", self.opts.target, "--json"],
                                             info.remote_dir))
        build_info = self._json(res.stdout) or {}
        write_remote = "cat > %s" % shlex.quote(remote_results + "/build.json")
        _put_text(self.ssh, write_remote, json.dumps(build_info, indent=2))
        engine: Optional[str] = None
        if res.returncode == 0:
            found = build_info.get("engine")
            engine = found if isinstance(found, str) and found.startswith("/") else None
            self.console.say("engine %s (%s)" % (engine, "loaded from the engine cache"
                                                  if build_info.get("cache") == "hit" else "built"))
        elif res.returncode == EXIT_NO_TENSORRT:
            self.console.say("TensorRT is not installed on the board: no engine; bench falls back to "
                             "ONNX Runtime (labelled in the results)")
        else:
            raise RemoteCommandError("build on %s failed (exit %d): %s" % (self.ssh.label, res.returncode,
                                                                           last_line(res.stderr)),
                                     hint="see remote.log in the results folder; `jetforge build --plan-only` "
                                          "checks the options here")
        self.summary["build"] = {"exit": res.returncode, "engine": engine,
                                 "cache": build_info.get("cache"), "tensorrt": build_info.get("tensorrt")}
        return engine

    def _board_check(self, remote_results: str, info: RemoteInfo) -> None:
        """``jetforge board-check`` on the board; its report lands in the results folder and is fetched back."""
        args = ["board-check", info.remote_dir, "--target", self.opts.target, "--json",
                "--out", remote_results + "/board-check"]
        res = self._remote("board-check", self._jf(args, info.remote_dir))
        if res.returncode not in (0, EXIT_NO_TENSORRT, 4):  # 4: an engine failed, which the report explains
            raise RemoteCommandError("board-check on %s failed (exit %d): %s" % (self.ssh.label, res.returncode,
                                                                                 last_line(res.stderr)),
                                     hint="see remote.log in the results folder")
        data = self._json(res.stdout) or {}
        self.summary["board_check"] = {"exit": res.returncode, "status": data.get("status"),
                                       "report": "board-check/board-check.json"}
        self.console.say("board-check: %s" % (data.get("status") or "exit %d" % res.returncode))

    def _bench(self, engine: Optional[str], remote_results: str, info: RemoteInfo) -> None:
        model = engine or "%s/%s" % (info.remote_dir, ONNX)
        out = remote_results + "/bench"
        args = ["bench", model, "--json", "--out", out] + list(self.opts.bench_args)
        res = self._remote("bench", self._jf(args, info.remote_dir))
        if res.returncode == 2 and "invalid choice" in res.stderr:
            # this board's jetforge predates `jetforge bench`: time ONNX Runtime with the deploy module's fallback
            py = info.python or "python3"
            fargs = ["-m", "jetforge.deploy.remote_bench", model, "--json", "--out", out]
            res = self._remote("bench (fallback module)",
                               self._command(py, fargs + list(self.opts.bench_args), info.remote_dir))
        if res.returncode != 0:
            raise RemoteCommandError("bench on %s failed (exit %d): %s" % (self.ssh.label, res.returncode,
                                                                           last_line(res.stderr)),
                                     hint="see remote.log in the results folder")
        data = self._json(res.stdout) or {}
        backend = (data.get("backend") or {})
        label = {"model": model, "backend": backend.get("backend"), "description": backend.get("description"),
                 "tensorrt": engine is not None}
        if engine is None:
            label["fallback"] = ("ONNX Runtime on the board, not TensorRT: TensorRT is not installed there"
                                 if not info.is_jetson or (self.summary.get("build") or {}).get("tensorrt") is False
                                 else "ONNX Runtime: no engine was built")
        self.summary["bench"] = dict(label, latency_ms=data.get("latency_ms"), throughput=data.get("throughput"),
                                     memory=data.get("memory"))

    # -- 5. results -----------------------------------------------------------------------------------
    def fetch(self) -> Path:
        """Bring the board's results folder back into ``results/<host>-<stamp>/`` and write deploy.json."""
        stamp = self.summary.get("started") or _stamp()
        local = Path(self.opts.results_root) / ("%s-%s" % (_safe_host(self.ssh.host), stamp))
        remote_results = self.summary.get("remote_results")
        files: List[Path] = []
        if remote_results:
            exclude = () if self.opts.fetch_video else VIDEO_PATTERNS
            files = fetch_dir(self.ssh, remote_results, local, exclude=exclude)
        local.mkdir(parents=True, exist_ok=True)
        self.summary["results"] = str(local)
        self.summary["fetched"] = sorted(str(p.relative_to(local)) for p in files)
        (local / "remote.log").write_text("\n".join(self.console.log_lines) + "\n", encoding="utf-8")
        write_json_atomic(local / "deploy.json", self.summary)
        self.results_dir = local
        return local


def _put_text(ssh: SshTarget, command: str, text: str) -> None:
    import io

    ssh_run(ssh, command, doing="write a result file", stdin_file=io.BytesIO(text.encode("utf-8")))


def deploy(bundle_path: PathLike, ssh: SshTarget, options: DeployOptions,
           console: Optional[Console] = None) -> Dict[str, Any]:
    """Copy, run and fetch (see the module docstring); returns the summary written to ``deploy.json``."""
    d = Deployment(bundle_path, ssh, options, console)
    try:
        summary = d.run()
    except BaseException:
        if d.summary.get("remote_results"):
            try:  # whatever the board already produced is still worth having, with the log
                d.fetch()
            except Exception:
                pass
        raise
    d.fetch()
    return summary
