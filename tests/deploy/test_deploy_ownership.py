"""Issue 25, "Data lost": `jetforge deploy` deletes only inside a board folder it created and marked.

Against a real OpenSSH server on 127.0.0.1 standing in for the board (the :class:`Board` of
test_deploy_ssh: its own host key, user key and a home folder in the test's temporary folder).

* a folder holding a ``manifest.json`` is not a jetforge folder (``~/myapp`` lost its files);
* a ``--remote-dir`` holding a newline (CR, tab, other control characters) is refused here, before
  any connection: the probe checked ``~/projects/victim<newline>new`` but rsync wrote to ``~/projects/victim``;
* the probe and the copy address the same folder (the probe's resolved path is where rsync writes);
* a folder jetforge marked (now, or with the empty marker of earlier versions) is still reused, stale
  files of the previous bundle removed; a marker copied into another folder proves nothing there;
* ``--results`` that is a file, or below one, is refused before any remote work.
"""

import json
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from test_deploy_ssh import HOST, SSHD, Board, _one_line_error, jf, make_bundle  # noqa: E402

pytestmark = pytest.mark.skipif(
    SSHD is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None,
    reason="needs OpenSSH's sshd, ssh and ssh-keygen (Debian: apt-get install -y openssh-server openssh-client rsync)")

MARKER = ".jetforge-bundle"


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    b = Board(tmp_path_factory.mktemp("board"))
    yield b
    b.stop()


def snapshot(folder: Path) -> dict:
    """Every entry under ``folder`` (relative path -> bytes, or None for a folder)."""
    found = {}
    for root, dirs, files in os.walk(str(folder)):
        for name in dirs + files:
            path = Path(root) / name
            found[str(path.relative_to(folder))] = None if path.is_dir() else path.read_bytes()
    return found


def user_folder(where: Path, manifest: bool = True) -> dict:
    """A user's folder with files of their own (``manifest.json`` among them unless told); its snapshot."""
    (where / "sub").mkdir(parents=True)
    if manifest:
        (where / "manifest.json").write_text('{"app": "mine", "version": 3}\n')
    (where / "notes.txt").write_text("the user's notes\n")
    (where / "sub" / "data.bin").write_bytes(os.urandom(4096))
    return snapshot(where)


def dead_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def offline(args: list) -> list:
    """The same deploy aimed at a port where nothing listens: an error other than "cannot reach" came first."""
    args = list(args)
    args[args.index("--port") + 1] = str(dead_port())
    return args


# ---- a folder is the deploy's only by its marker ---------------------------------------------------------
def test_folder_holding_a_manifest_json_is_not_taken_for_a_bundle_folder(board, tmp_path):
    # the finding: `deploy --remote-dir ~/myapp` where ~/myapp holds manifest.json deleted its other files
    bundle = make_bundle(tmp_path, "myapp")
    myapp = board.home / "myapp"
    before = user_folder(myapp)
    res = jf(board.args(bundle, remote_dir="~/myapp"))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and ("~/myapp" in line or str(myapp) in line), line
    assert "manifest.json" in line and "remove" in line and "--remote-dir" in line, line
    assert snapshot(myapp) == before  # every file still there, byte for byte; no marker written
    # a folder with files and no manifest.json is refused as well
    other = board.home / "photos"
    before = user_folder(other, manifest=False)
    res = jf(board.args(bundle, remote_dir="~/photos"))
    assert res.returncode == 1 and "not a folder jetforge made" in _one_line_error(res.stderr)
    assert snapshot(other) == before


def test_bundle_folder_of_the_first_jetforge_without_a_marker_is_not_adopted(board, tmp_path):
    # jetforge's first deploy wrote manifest.json and no marker: such a folder cannot be told from ~/myapp
    bundle = make_bundle(tmp_path, "unmarked")
    remote = board.bundles / "unmarked"
    shutil.copytree(str(bundle), str(remote))
    (remote / "old-engine.plan").write_bytes(b"x" * 100)
    before = snapshot(remote)
    res = jf(board.args(bundle))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "no jetforge marker" in line and "rm -r" in line, line
    assert snapshot(remote) == before


@pytest.mark.parametrize("kind", ["new", "legacy"])
def test_folder_jetforge_marked_is_reused_and_stale_files_removed(board, tmp_path, kind):
    from jetforge.deploy.bundle import create_bundle
    from test_deploy_ssh import make_model

    first = make_bundle(tmp_path, "reuse-" + kind)  # model, sidecar and a calibration cache
    remote = board.bundles / ("reuse-" + kind)
    if kind == "new":
        res = jf(board.args(first, "--json"))
        assert res.returncode == 0, res.stderr
        assert (remote / MARKER).read_text().splitlines()[1] == str(remote)  # the marker names its folder
    else:  # what jetforge wrote before the marker named its folder: the bundle and an empty marker
        shutil.copytree(str(first), str(remote))
        (remote / MARKER).touch()
    assert (remote / "calib").is_dir()
    # the next bundle has no calibration cache: the old one is removed from the board's folder
    src = tmp_path / "second-src"
    src.mkdir()
    second = create_bundle(make_model(src / "model.onnx"), tmp_path / "second", ["orin-nx-16gb"],
                           tensorrt_versions=["10.3.0"]).path
    res = jf(board.args(second, "--json", remote_dir=str(remote)))
    assert res.returncode == 0, res.stderr
    assert not (remote / "calib").exists() and jf(["bundle", "verify", str(remote)]).returncode == 0
    assert (remote / MARKER).read_text().splitlines()[1] == str(remote)  # an empty marker is upgraded


def test_marker_copied_into_another_folder_does_not_make_it_owned(board, tmp_path):
    bundle = make_bundle(tmp_path, "marked")
    res = jf(board.args(bundle))
    assert res.returncode == 0, res.stderr
    victim = board.home / "victim-copy"
    user_folder(victim)
    shutil.copy2(str(board.bundles / "marked" / MARKER), str(victim / MARKER))
    before = snapshot(victim)
    res = jf(board.args(bundle, remote_dir=str(victim)))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "marker" in line and str(board.bundles / "marked") in line, line
    assert snapshot(victim) == before


def test_remote_home_and_root_are_never_claimed_even_when_marked(board, tmp_path):
    bundle = make_bundle(tmp_path, "homemark")
    (board.home / MARKER).write_text("jetforge deploy folder v1\n%s\n" % board.home)
    try:
        for where in (str(board.home), "~", "~/", "/"):
            res = jf(board.args(bundle, remote_dir=where))
            line = _one_line_error(res.stderr)
            assert res.returncode == 1 and ("home" in line or "root" in line), line
    finally:
        (board.home / MARKER).unlink()


# ---- the probe and the copy agree on the folder ---------------------------------------------------------
@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u2028"])
def test_remote_dir_with_control_characters_is_refused_before_connecting(board, tmp_path, char):
    # the finding: $'~/projects/victim\nnew' was probed as a new empty folder, then rsync wrote to (and deleted
    # in) ~/projects/victim
    bundle = make_bundle(tmp_path, "ctl")
    victim = board.home / "projects" / "victim"
    if not victim.exists():
        user_folder(victim, manifest=False)
    before = snapshot(board.home / "projects")
    value = "~/projects/victim%snew" % char
    started = time.time()
    for args in (offline(board.args(bundle, remote_dir=value)), board.args(bundle, remote_dir=value)):
        res = jf(args)
        line = _one_line_error(res.stderr)
        assert res.returncode == 1 and "--remote-dir" in line and repr(char)[1:-1] in line, line
        assert "cannot reach" not in line and "control character" in line
    assert time.time() - started < 30
    assert snapshot(board.home / "projects") == before  # victim untouched, no new folder


def test_remote_dir_with_dot_dot_or_nul_is_refused_locally():
    from jetforge.deploy.workflow import DeployOptions
    from jetforge.errors import JetforgeError

    for value, why in (("~/a/../b", "'..'"), ("/data/./x", "'.'"), ("~/x\x00y", "control character"), ("", "empty")):
        with pytest.raises(JetforgeError) as err:
            DeployOptions(remote_dir=value).check()
        assert why in str(err.value) and "--remote-dir" in str(err.value), str(err.value)


def test_probe_resolves_the_folder_rsync_writes_to(board, tmp_path):
    from jetforge.deploy.remote import SshTarget, probe

    bundle = make_bundle(tmp_path, "same")
    real = board.home / "odd place" / "it's $HOME * [x] \\n -lead "  # a trailing space, a backslash, shell words
    real.mkdir(parents=True)
    (board.home / "link to it").symlink_to(real)
    value = "~/link to it/"
    ssh = SshTarget(host=HOST, user=board.user, port=board.port, key=str(board.user_key),
                    known_hosts=str(board.root / "known_hosts"))
    info = probe(ssh, "jetforge", value)
    assert info.remote_dir == str(real)  # resolved: the link followed, as rsync will see it
    res = jf(board.args(bundle, "--json", remote_dir=value))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["remote_dir"] == info.remote_dir
    assert (real / "model.onnx").read_bytes() == (bundle / "model.onnx").read_bytes()
    assert (real / MARKER).read_text().splitlines()[1] == str(real)
    # nothing landed beside it but the results folder the steps write to
    assert sorted(p.name for p in (board.home / "odd place").iterdir()) == [real.name, real.name + "-results"]


# ---- local outputs are checked before any remote work ----------------------------------------------------
@pytest.mark.parametrize("where", ["file", "below_file"])
def test_results_that_is_a_file_is_refused_before_any_remote_work(board, tmp_path, where):
    bundle = make_bundle(tmp_path, "res-" + where)
    blocker = tmp_path / "results.txt"
    blocker.write_text("not a folder\n")
    results = blocker if where == "file" else blocker / "sub"
    for args in (offline(board.args(bundle, results=str(results))), board.args(bundle, results=str(results))):
        started = time.time()
        res = jf(args)
        line = _one_line_error(res.stderr)
        assert res.returncode == 1 and "--results" in line and "is a file" in line, line
        assert time.time() - started < 20
    assert blocker.read_text() == "not a folder\n" and not (board.bundles / ("res-" + where)).exists()


def test_results_inside_the_bundle_is_refused(board, tmp_path):
    bundle = make_bundle(tmp_path, "res-inside")
    res = jf(offline(board.args(bundle, results=str(bundle / "results"))))
    line = _one_line_error(res.stderr)
    assert res.returncode == 1 and "--results" in line and "inside the bundle" in line, line
    assert not (bundle / "results").exists()
