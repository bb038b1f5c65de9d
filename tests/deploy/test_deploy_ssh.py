"""`jetforge deploy` against a real OpenSSH server on 127.0.0.1 standing in for the board.

The sshd (Debian's openssh-server) runs with a throw-away host key and user key in the test's
temporary folder, and gives the login a home folder there too (``SetEnv HOME``), so the attacks
below aim at a fake ``~/.ssh`` whose sentinel must survive; the "board's" jetforge is this
checkout's venv (``--remote-jetforge``).  It has no
TensorRT and is no Jetson, so the remote ``build`` reports that TensorRT is absent and ``bench``
runs the bundle's ONNX model on ONNX Runtime, labelled as the fallback.  Real transfers (rsync and
the chunked ssh copy), a copy killed midway and resumed, and the one-line errors for an unreachable
port, a refused key, a changed host key and a missing remote jetforge.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from test_bundle import make_cache, make_model as make_tiny_classifier  # noqa: E402  (tests/deploy is on sys.path under pytest)

SSHD = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
pytestmark = pytest.mark.skipif(
    SSHD is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None,
    reason="needs OpenSSH's sshd, ssh and ssh-keygen (Debian: apt-get install -y openssh-server openssh-client rsync)")

JETFORGE = str(Path(sys.executable).with_name("jetforge"))
HOST = "127.0.0.1"


# ---- the model and bundle ------------------------------------------------------------------------
def make_model(path: Path, pad_bytes: int = 0) -> Path:
    return make_tiny_classifier(path, pad_bytes=pad_bytes, seed=1)


def make_bundle(tmp: Path, name: str = "cam", pad_bytes: int = 0) -> Path:
    from jetforge.deploy.bundle import create_bundle

    src = tmp / ("src-" + name)
    src.mkdir()
    model = make_model(src / "model.onnx", pad_bytes)
    cache = make_cache(src / "model.calib")
    return create_bundle(model, tmp / name, ["orin-nx-16gb"], calib=[cache], tensorrt_versions=["10.3.0"]).path


# ---- the "board": a real sshd on 127.0.0.1 ----------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


class Board:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.host_key = _keygen(root / "host_key")
        self.user_key = _keygen(root / "user_key")
        self.other_key = _keygen(root / "other_key")
        (root / "authorized_keys").write_text((root / "user_key.pub").read_text())
        os.chmod(str(root / "authorized_keys"), 0o600)
        self.home = root / "home"  # the login's $HOME on the "board": ~ there never touches the real home
        self.home.mkdir()
        self.user = os.environ.get("USER") or __import__("getpass").getuser()
        config = root / "sshd_config"
        config.write_text("\n".join([
            "Port %d" % self.port, "ListenAddress %s" % HOST, "HostKey %s" % self.host_key,
            "AuthorizedKeysFile %s" % (root / "authorized_keys"), "PidFile %s" % (root / "sshd.pid"),
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "PermitRootLogin prohibit-password", "PubkeyAuthentication yes", "LogLevel ERROR", "MaxStartups 50",
            "Subsystem sftp internal-sftp", "SetEnv HOME=%s" % self.home, ""]))
        if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
            os.makedirs("/run/sshd", mode=0o755)  # sshd's privilege-separation folder (made by the service normally)
        self.log = open(str(root / "sshd.log"), "wb")
        self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=self.log, stderr=self.log)
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sshd exited: %s" % (root / "sshd.log").read_text())
            try:
                socket.create_connection((HOST, self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        self.cache = root / "board-cache"
        self.bundles = root / "board"

    def args(self, bundle, *extra: str, key: str = "", remote_dir: str = "", results: str = "",
             default_remote_dir: bool = False) -> list:
        where = [] if default_remote_dir else ["--remote-dir", remote_dir or str(self.bundles / bundle.name)]
        return ["deploy", str(bundle), "%s@%s" % (self.user, HOST), "--port", str(self.port),
                "--key", key or str(self.user_key), "--known-hosts", str(self.root / "known_hosts"),
                "--remote-jetforge", JETFORGE, "--remote-env", "JETFORGE_CACHE=%s" % self.cache,
                "--remote-env", "JETFORGE_OFFLINE=1"] + where + [
                "--results", results or str(self.root / "results")] + list(extra)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    b = Board(tmp_path_factory.mktemp("board"))
    yield b
    b.stop()


def jf(args, cwd=None, timeout=300):
    """The real CLI in a subprocess (as a user runs it)."""
    return subprocess.run([JETFORGE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                          timeout=timeout, universal_newlines=True)


def _one_line_error(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.startswith("jetforge: error:")]
    assert len(lines) == 1, stderr
    return lines[0]


# ---- the tests -----------------------------------------------------------------------------------------
def test_deploy_doctor_build_bench_and_fetch_results(board, tmp_path):
    bundle = make_bundle(tmp_path)
    results = tmp_path / "results"
    res = jf(board.args(bundle, "--run", "doctor", "--run", "build", "--run", "bench", "--bench-arg=--iterations=20",
                        "--bench-arg=--warmup=3", "--json", results=str(results)))
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    # the bundle arrived whole and verifies on the board
    remote = board.bundles / bundle.name
    assert (remote / "manifest.json").is_file() and summary["remote_dir"] == str(remote)
    assert summary["transfer"]["method"] == "rsync" and summary["transfer"]["files_transferred"] == 3  # model, sidecar, cache
    # the board's build said TensorRT is absent (exit 3) and bench fell back to ONNX Runtime, labelled
    assert summary["build"] == {"exit": 3, "engine": None, "cache": None, "tensorrt": False}
    assert summary["bench"]["tensorrt"] is False and "not TensorRT" in summary["bench"]["fallback"]
    assert summary["bench"]["backend"] == "onnxruntime"
    assert "TensorRT is not installed" in res.stderr and "[%s]" % HOST in res.stderr  # the board's log, streamed
    # results came back into results/<host>-<YYYYmmdd-HHMMSS>/
    folder = Path(summary["results"])
    assert folder.parent == results and folder.name.startswith(HOST + "-") and len(folder.name) == len(HOST) + 16
    bench = json.loads((folder / "bench" / "bench.json").read_text())
    assert bench["iterations"] == 20 and 0 < bench["latency_ms"]["p50_ms"] < 1000
    assert bench["latency_ms"]["p99_ms"] >= bench["latency_ms"]["p50_ms"]
    assert bench["memory"]["process"]["peak_rss_mib"] > 10
    assert (folder / "bench" / "latency.png").stat().st_size > 1000
    doctor = json.loads((folder / "doctor.json").read_text())
    assert doctor["probes"]["tensorrt"]["found"] is False and doctor["probes"]["onnxruntime"]["found"] is True
    build = json.loads((folder / "build.json").read_text())
    assert build["tensorrt"] is False and build["fallback"]["backend"] == "onnxruntime"
    deploy = json.loads((folder / "deploy.json").read_text())
    assert deploy["bundle"]["hash"] == summary["bundle"]["hash"] and [s["step"] for s in deploy["steps"]] == [
        "bundle verify", "doctor", "build", "bench"]
    assert "TensorRT is not installed" in (folder / "remote.log").read_text()

    # a second deploy copies nothing that did not change
    again = jf(board.args(bundle, "--json", results=str(results)))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["transfer"]["files_transferred"] == 0


def test_human_output_names_the_fallback(board, tmp_path):
    bundle = make_bundle(tmp_path, "human")
    res = jf(board.args(bundle, "--run", "bench", "--bench-arg=--iterations=5", "--bench-arg=--warmup=1"))
    assert res.returncode == 0, res.stderr
    assert "FALLBACK" in res.stdout and "latency   mean" in res.stdout and "memory    RSS" in res.stdout


def test_interrupted_copy_resumes(board, tmp_path):
    size = 24 << 20
    bundle = make_bundle(tmp_path, "big", pad_bytes=size)
    remote = board.bundles / "big"
    total = (bundle / "model.onnx").stat().st_size
    # a slow copy (rsync --bwlimit), killed once part of the model is on the board
    proc = subprocess.Popen([JETFORGE] + board.args(bundle, "--bwlimit", "3000"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    partial = 0
    while time.time() < deadline and proc.poll() is None:
        temps = [p for p in remote.glob(".model.onnx.*")] if remote.is_dir() else []
        partial = max([p.stat().st_size for p in temps] or [0])
        if partial > 4 << 20:
            break
        time.sleep(0.1)
    assert proc.poll() is None and partial > 4 << 20, "the copy was not caught midway"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # rsync on the board keeps what it received; the bundle there is visibly incomplete
    kept = remote / ".jetforge-partial" / "model.onnx"
    deadline = time.time() + 20
    while time.time() < deadline and not kept.is_file():
        time.sleep(0.1)
    assert kept.is_file() and 0 < kept.stat().st_size < total
    assert not (remote / "manifest.json").exists()
    verify = jf(["bundle", "verify", str(remote)])
    assert verify.returncode == 1 and "no manifest.json" in _one_line_error(verify.stderr)
    # the next deploy resumes: only the rest of the file is sent
    res = jf(board.args(bundle, "--json"))
    assert res.returncode == 0, res.stderr
    transfer = json.loads(res.stdout)["transfer"]
    assert transfer["matched_bytes"] >= kept_size_floor(partial) and transfer["literal_bytes"] < total - (2 << 20)
    assert jf(["bundle", "verify", str(remote)]).returncode == 0


def kept_size_floor(partial: int) -> int:
    """rsync's delta matches whole blocks of the partial file: at least half of what was seen is reused."""
    return partial // 2


def test_chunked_ssh_copy_resumes_and_checks(board, tmp_path):
    from jetforge.deploy.bundle import REMOTE_MARKER

    bundle = make_bundle(tmp_path, "chunked", pad_bytes=2 << 20)
    remote = board.bundles / "chunked"
    remote.mkdir(parents=True)
    (remote / REMOTE_MARKER).touch()  # the folder an earlier deploy made (and marked) before it was cut
    data = (bundle / "model.onnx").read_bytes()
    (remote / "model.onnx.jetforge-part").write_bytes(data[: len(data) // 2])  # an earlier copy, cut in half
    res = jf(board.args(bundle, "--transfer", "ssh", "--json"))
    assert res.returncode == 0, res.stderr
    transfer = json.loads(res.stdout)["transfer"]
    assert transfer["method"] == "ssh" and transfer["resumed_files"] == ["model.onnx"]
    assert transfer["matched_bytes"] == len(data) // 2
    assert jf(["bundle", "verify", str(remote)]).returncode == 0
    # a corrupt partial file is caught by its checksum and removed; the next run sends it whole
    (remote / "model.onnx").unlink()
    (remote / "model.onnx.jetforge-part").write_bytes(b"\0" * 1000)
    bad = jf(board.args(bundle, "--transfer", "ssh"))
    assert bad.returncode == 1 and "arrived corrupt" in _one_line_error(bad.stderr)
    assert jf(board.args(bundle, "--transfer", "ssh")).returncode == 0
    assert jf(["bundle", "verify", str(remote)]).returncode == 0


def test_unreachable_port_is_one_line(board, tmp_path):
    bundle = make_bundle(tmp_path, "unreach")
    args = board.args(bundle)
    args[args.index("--port") + 1] = str(_free_port())  # nothing listens there
    res = jf(args)
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "cannot reach" in line and "Connection refused" in line and "--port" in line


def test_refused_key_is_one_line(board, tmp_path):
    bundle = make_bundle(tmp_path, "auth")
    res = jf(board.args(bundle, key=str(board.other_key)))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "refused SSH authentication" in line and "ssh-copy-id" in line


def test_changed_host_key_is_refused(board, tmp_path):
    bundle = make_bundle(tmp_path, "hostkey")
    known = tmp_path / "known_hosts"
    fake = _keygen(tmp_path / "fake_host_key")
    known.write_text("[%s]:%d %s" % (HOST, board.port, (tmp_path / "fake_host_key.pub").read_text()))
    args = board.args(bundle)
    args[args.index("--known-hosts") + 1] = str(known)
    res = jf(args)
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "host key" in line and str(known) in line and fake.exists()


def test_missing_remote_jetforge_gives_install_instructions(board, tmp_path):
    bundle = make_bundle(tmp_path, "missing")
    args = board.args(bundle, "--run", "doctor")
    args[args.index("--remote-jetforge") + 1] = "/nonexistent/bin/jetforge"
    res = jf(args)
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "jetforge is not installed" in line and "pip install" in line
    assert "--remote-jetforge" in line


def test_fallback_bench_module_prints_bench_keys(tmp_path):
    model = make_model(tmp_path / "m.onnx")
    res = subprocess.run([sys.executable, "-m", "jetforge.deploy.remote_bench", str(model), "--iterations", "5",
                          "--warmup", "1", "--json", "--out", str(tmp_path / "r")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["latency_ms"]["count"] == 5 and data["memory"]["process"]["rss_mib"] > 0
    assert json.loads((tmp_path / "r" / "bench.json").read_text())["iterations"] == 5


# ---- security: hostile bundles and options never reach outside their folder --------------------------
def _retamper(bundle: Path, edit) -> None:
    """Edit the manifest and recompute its hash, as an attacker can (the hash detects accidents only)."""
    from jetforge.deploy.bundle import Manifest

    data = json.loads((bundle / "manifest.json").read_text())
    edit(data)
    data["bundle_hash"] = Manifest.from_dict(data).compute_hash()
    (bundle / "manifest.json").write_text(json.dumps(data))


@pytest.fixture
def fake_ssh(board):
    """The board login's ~/.ssh with a sentinel authorized_keys; yields a function that says it is untouched."""
    folder = board.home / ".ssh"
    folder.mkdir(exist_ok=True)
    (folder / "authorized_keys").write_text("ssh-ed25519 SENTINEL the board owner's key\n")
    before = sorted(os.listdir(str(folder)))

    def untouched() -> bool:
        return (sorted(os.listdir(str(folder))) == before
                and (folder / "authorized_keys").read_text() == "ssh-ed25519 SENTINEL the board owner's key\n")
    yield untouched
    shutil.rmtree(str(folder))


def test_bundle_name_cannot_move_the_copy_out_of_the_remote_base(board, tmp_path, fake_ssh):
    # the attack of the issue: name "../../.ssh" made the default remote folder ~/jetforge/bundles/../../.ssh,
    # and rsync --delete-after deleted authorized_keys there
    bundle = make_bundle(tmp_path, "evil")
    _retamper(bundle, lambda d: d.__setitem__("name", "../../.ssh"))
    res = jf(board.args(bundle, default_remote_dir=True))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "the bundle name '../../.ssh'" in line
    assert fake_ssh() and not (board.home / "jetforge").exists()  # nothing was sent anywhere
    # a plain name lands in ~/jetforge/bundles/<name> of the board login
    good = make_bundle(tmp_path, "plain")
    res = jf(board.args(good, "--json", default_remote_dir=True))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["remote_dir"] == str(board.home / "jetforge" / "bundles" / "plain")
    assert fake_ssh()


def test_remote_dir_that_is_home_or_not_a_bundle_folder_is_never_cleared(board, tmp_path, fake_ssh):
    bundle = make_bundle(tmp_path, "clear")
    res = jf(board.args(bundle, remote_dir=str(board.home)))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "the remote home or above it" in line and fake_ssh()
    res = jf(board.args(bundle, remote_dir=str(board.home / ".ssh")))  # a folder with files, not a bundle
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "is not a folder jetforge made" in line and "the copy would delete them" in line
    assert fake_ssh()


@pytest.mark.parametrize("attack", ["symlink", "hardlink", "absolute_calibration", "timing_cache"])
def test_deploy_refuses_hostile_bundles_before_sending(board, tmp_path, attack):
    bundle = make_bundle(tmp_path, "hostile")
    private = tmp_path / "private"
    private.mkdir()
    secret = private / "secret.txt"
    secret.write_text("SECRET-TOKEN private first line\n")
    if attack in ("symlink", "hardlink"):
        moved = private / "model.onnx"
        os.replace(str(bundle / "model.onnx"), str(moved))
        (os.symlink if attack == "symlink" else os.link)(str(moved), str(bundle / "model.onnx"))
    elif attack == "absolute_calibration":
        _retamper(bundle, lambda d: d["calibration"][0].__setitem__("file", str(secret)))
    else:
        _retamper(bundle, lambda d: d["build_options"].__setitem__("timing_cache", str(secret)))
    res = jf(board.args(bundle, "--run", "build"))
    line = _one_line_error(res.stderr)
    why = {"symlink": "model.onnx is a symbolic link", "hardlink": "model.onnx is a hard link",
           "absolute_calibration": "is absolute", "timing_cache": "build option timing_cache names a path"}[attack]
    assert res.returncode == 1 and why in line and "SECRET-TOKEN" not in res.stdout + res.stderr
    if attack == "absolute_calibration":
        # the path is named, cut in the middle to 80 characters when long (pytest's tmp paths often are)
        shown = re.search(r"calibration file '(.*)' is absolute", line)
        assert shown, line
        head, _, tail = shown.group(1).partition("...")
        assert shown.group(1) == str(secret) or (str(secret).startswith(head) and str(secret).endswith(tail)
                                                 and tail.endswith("secret.txt")), line
    assert not (board.bundles / "hostile").exists()  # refused here, before anything was sent
    assert secret.read_text() == "SECRET-TOKEN private first line\n"


def test_remote_env_keys_cannot_inject_commands(board, tmp_path):
    bundle = make_bundle(tmp_path, "env")
    pwned = tmp_path / "pwned"
    # the attack of the issue: the key was pasted into the remote command line unquoted
    res = jf(board.args(bundle, "--run", "doctor", "--remote-env", "X;touch %s;Y=1" % pwned))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "is not an environment variable name" in line
    assert not pwned.exists() and not (board.bundles / "env").exists()
    # values reach the board's command verbatim, whatever shell characters they hold
    from jetforge.deploy.remote import SshTarget, ssh_run
    from jetforge.deploy.workflow import Deployment, DeployOptions

    value = "a b;touch %s;$(touch %s)`touch %s`'\"" % (pwned, pwned, pwned)
    ssh = SshTarget(host=HOST, user=board.user, port=board.port, key=str(board.user_key),
                    known_hosts=str(board.root / "known_hosts"))
    d = Deployment(bundle, ssh, DeployOptions(remote_env={"JF_NOTE": value}))
    out = ssh_run(ssh, d._command("printenv", ["JF_NOTE"], str(tmp_path)), doing="print the environment")
    assert out.stdout == value + "\n" and not pwned.exists()


def test_ssh_destinations_that_are_options_are_refused(board, tmp_path):
    bundle = make_bundle(tmp_path, "opt")
    pwned = tmp_path / "pwned"
    for flag, value in (("destination", "-oProxyCommand=touch %s" % pwned),
                        ("destination", "-oProxyCommand=touch@%s" % HOST),
                        ("--jump", "-oProxyCommand=touch %s" % pwned),
                        ("destination", "nvidia@host;touch %s" % pwned)):
        args = board.args(bundle)
        if flag == "destination":  # after `--`, as a value starting with '-' reaches the command
            args = [args[0]] + args[3:] + ["--", str(bundle), value]
        else:
            args += ["--jump", value]
        res = jf(args)
        line = _one_line_error(res.stderr)
        assert res.returncode == 1 and ("starts with '-'" in line or "is not a host name" in line), line
    assert not pwned.exists() and not (board.bundles / "opt").exists()
    # `--` ends ssh's options before the destination (and the jump host's in its ProxyCommand)
    from jetforge.deploy.remote import SshTarget

    argv = SshTarget(host="board", user="nvidia", jump="me@gw:2222").ssh_argv("true")
    assert argv[-3:] == ["--", "nvidia@board", "true"] and "-W %h:%p -- me@gw" in " ".join(argv)


def test_rsync_never_reads_a_local_path_as_an_option_or_a_host(board, tmp_path):
    # a bundle folder named like an option and a host:path spec; given relative, as a user types it
    bundle = make_bundle(tmp_path, "-cam:v2")
    res = jf(board.args("./-cam:v2", "--json", remote_dir=str(board.bundles / "colon")), cwd=str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["transfer"]["files_transferred"] == 3
    assert (board.bundles / "colon" / "model.onnx").read_bytes() == (bundle / "model.onnx").read_bytes()


def test_app_command_with_unknown_fields_is_one_clear_error(board, tmp_path):
    bundle = make_bundle(tmp_path, "app")
    for template, why in (("{0}", "uses the field {0} (a positional field)"),
                          ("demo --model {model.__class__}", "uses the field {model.__class__}"),
                          ("demo --model {", "Single '{' encountered"), ('demo "x', "No closing quotation")):
        res = jf(board.args(bundle, "--run", "app", "--app-command", template))
        line = _one_line_error(res.stderr)
        assert res.returncode == 1 and why in line and "--app-command" in line, line
    assert not (board.bundles / "app").exists()  # refused before anything was sent
