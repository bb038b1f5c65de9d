"""The board-side ownership test and claim (deploy/remote/owner.py) run by this machine's POSIX ``sh``
(dash on Debian, as a board's /bin/sh), without ssh: which folder states count as jetforge's, and that
the claim writes the path-bound marker only where it may and deletes nothing elsewhere."""

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from jetforge.deploy.remote.owner import MARKER_HEADER, claim_script, marker_text, ownership_script

MARKER = ".jetforge-bundle"
SH = shutil.which("sh")
pytestmark = pytest.mark.skipif(SH is None, reason="needs a POSIX sh")


def state_of(folder: Path) -> str:
    script = "R=%s\n%secho \"$st\"" % (shlex.quote(str(folder)), ownership_script())
    return subprocess.run([SH, "-c", script], stdout=subprocess.PIPE, universal_newlines=True,
                          check=True).stdout.strip()


def make(tmp: Path, name: str, files=(), marker=None) -> Path:
    folder = tmp / name
    folder.mkdir()
    for f in files:
        (folder / f).write_text("user data %s\n" % f)
    if marker is not None:
        (folder / MARKER).write_text(marker)
    return folder


def test_only_jetforge_marker_naming_the_folder_proves_ownership(tmp_path):
    odd = "it's $x \\n *"  # quotes, a dollar, a backslash-n (printf/echo), a glob
    marked = make(tmp_path, odd, ["model.onnx"])
    (marked / MARKER).write_text(marker_text(str(marked)))
    assert state_of(marked) == "marked"
    assert state_of(make(tmp_path, "empty")) == "empty"
    assert state_of(make(tmp_path, "legacy", ["model.onnx"], marker="")) == "legacy"
    copied = make(tmp_path, "copied", ["notes.txt"], marker=(marked / MARKER).read_text())
    assert state_of(copied) == "foreign"
    assert state_of(make(tmp_path, "handmade", ["notes.txt"], marker="mine\n")) == "foreign"
    assert state_of(make(tmp_path, "header-only", ["a"], marker=MARKER_HEADER + "\n")) == "foreign"
    linked = make(tmp_path, "linked", ["notes.txt"])
    os.symlink(str(marked / MARKER), str(linked / MARKER))
    assert state_of(linked) == "foreign"
    assert state_of(make(tmp_path, "myapp", ["manifest.json", "notes.txt"])) == "unmarked"
    assert state_of(make(tmp_path, "photos", ["a.jpg"])) == "other"
    hidden = make(tmp_path, "hidden", [".profile"])
    assert state_of(hidden) == "other"  # a hidden file is a file: the folder is not empty


def run_claim(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([SH, "-c", claim_script(str(folder), "manifest.json")], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


@pytest.mark.parametrize("kind", ["empty", "legacy", "marked"])
def test_claim_marks_jetforge_folders_and_removes_only_their_manifest(tmp_path, kind):
    folder = make(tmp_path, "f b", ["manifest.json", "model.onnx"] if kind != "empty" else [],
                  marker={"empty": None, "legacy": "", "marked": None}[kind])
    if kind == "marked":
        (folder / MARKER).write_text(marker_text(str(folder)))
    res = run_claim(folder)
    assert res.returncode == 0, res.stderr
    assert (folder / MARKER).read_text() == marker_text(str(folder))
    assert not (folder / "manifest.json").exists()  # sent again last
    if kind != "empty":
        assert (folder / "model.onnx").is_file()


@pytest.mark.parametrize("kind", ["unmarked", "other", "copied"])
def test_claim_refuses_other_folders_and_changes_nothing(tmp_path, kind):
    source = make(tmp_path, "source")
    (source / MARKER).write_text(marker_text(str(source)))
    files = ["manifest.json", "notes.txt"] if kind == "unmarked" else ["notes.txt"]
    folder = make(tmp_path, kind, files, marker=(source / MARKER).read_text() if kind == "copied" else None)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    res = run_claim(folder)
    assert res.returncode == 3 and res.stdout.strip() == "owner=%s" % ("foreign" if kind == "copied" else kind)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
