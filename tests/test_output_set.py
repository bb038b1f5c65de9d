"""jetforge.output_set (issue 25): the files of one run are moved into place together once all are written; a stop
before or during the move leaves the previous set as it was; a SIGKILL between two renames is told from a whole set
by readers and by the next run, in one line; a run with fewer files removes the previous set's others, and only
those; what a killed run left behind is removed by the next one."""

import logging
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import pytest

from jetforge import fileio, output_set
from jetforge.output_set import OutputSet, check_outputs, read_record, record_path, verify


def snapshot(folder: Path) -> Dict[str, bytes]:
    """{relative path: bytes} of every file under ``folder`` outside hidden staging folders (records included)."""
    files = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts[:-1]):
            files[rel.as_posix()] = p.read_bytes()
    return files


def hidden_folders(folder: Path):
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name.startswith("."))


def write_set(folder: Path, files: Dict[str, bytes], name: str = "model.calib", **kw) -> OutputSet:
    with OutputSet(folder, name, **kw) as out:
        for rel, data in files.items():
            p = out.path(rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            fileio.write_bytes_atomic(p, data)  # what the writers do: atomic_output inside the staging folder
    return out


FIRST = {"model.calib": b"cache 1", "model.qdq.onnx": b"qdq 1", "model.qdq.onnx.json": b"sidecar 1",
         "model.calib.json": b"report 1", "model.calib.plots/overview.png": b"png 1",
         "model.calib.plots/histograms_00.png": b"page 1"}
SECOND = {"model.calib": b"cache 2", "model.qdq.onnx": b"qdq 2", "model.qdq.onnx.json": b"sidecar 2",
          "model.calib.json": b"report 2", "model.mixed.qdq.onnx": b"mixed 2"}


def test_a_committed_set_has_every_file_in_place_and_a_record_of_their_hashes(tmp_path):
    out = write_set(tmp_path, FIRST)
    files = snapshot(tmp_path)
    assert {k: v for k, v in files.items() if k in FIRST} == FIRST
    record = read_record(record_path(tmp_path, "model.calib"))
    assert record["state"] == "complete" and record["name"] == "model.calib"
    assert record["files"] == {k: fileio.sha256_file(tmp_path / k) for k in FIRST} == out.committed
    assert hidden_folders(tmp_path) == []  # the staging folder is gone
    assert check_outputs(tmp_path / "model.qdq.onnx") is None
    assert check_outputs(tmp_path / "model.calib.plots" / "overview.png") is None  # a member in a sub-folder


def test_staged_paths_keep_their_names_and_relocate_to_the_final_folder(tmp_path):
    with OutputSet(tmp_path, "model.calib") as out:
        staged = out.path("model.qdq.onnx")
        assert staged.parent == out.staging and staged.name == "model.qdq.onnx"  # a sidecar's name still matches
        assert out.final(staged) == tmp_path / "model.qdq.onnx"
        report = {"qdq": str(staged), "plots": [out.path("p/a.png")], "note": "wrote %s" % staged, "n": 3}
        assert out.relocate(report) == {"qdq": str(tmp_path / "model.qdq.onnx"), "plots": [tmp_path / "p" / "a.png"],
                                        "note": "wrote %s" % (tmp_path / "model.qdq.onnx"), "n": 3}
        staged.write_bytes(b"x")
    with pytest.raises(ValueError):
        with OutputSet(tmp_path, "model.calib") as out:
            out.path("../escape")


def test_a_bad_final_place_fails_before_the_work(tmp_path):
    (tmp_path / "model.calib").mkdir()
    with pytest.raises(fileio.InputFileError, match="it is a folder"):
        with OutputSet(tmp_path, "x") as out:
            out.path("model.calib")
    assert hidden_folders(tmp_path) == []


@pytest.mark.parametrize("stop", [RuntimeError("the writer failed"), KeyboardInterrupt()], ids=["error", "Ctrl-C"])
def test_a_stop_while_writing_leaves_the_previous_set_byte_identical(tmp_path, stop):
    write_set(tmp_path, FIRST)
    before = snapshot(tmp_path)
    with pytest.raises(type(stop)):
        with OutputSet(tmp_path, "model.calib") as out:
            fileio.write_bytes_atomic(out.path("model.calib"), b"cache 2")
            fileio.write_bytes_atomic(out.path("model.mixed.qdq.onnx"), b"mixed 2")
            raise stop
    assert snapshot(tmp_path) == before  # record included
    assert hidden_folders(tmp_path) == []


@pytest.mark.parametrize("stop", [OSError("disk gone"), KeyboardInterrupt()], ids=["OSError", "SIGTERM"])
@pytest.mark.parametrize("at", [1, 3, 5])
def test_a_stop_between_two_renames_puts_the_previous_set_back(tmp_path, monkeypatch, stop, at):
    """The commit itself is interrupted (an error, or Ctrl-C/SIGTERM raised between two renames): every move is
    undone, so the folder, the record and the sub-folders are as before."""
    write_set(tmp_path, {k: v for k, v in FIRST.items() if "plots" not in k})  # the new run adds a plots folder
    before = snapshot(tmp_path)
    calls = []
    real = output_set._replace

    def failing(source, final):
        calls.append(final)
        if len(calls) == at:
            raise stop
        real(source, final)

    monkeypatch.setattr(output_set, "_replace", failing)
    with pytest.raises(type(stop)):
        write_set(tmp_path, dict(FIRST, **{"model.calib.plots/extra.png": b"new"}))
    assert snapshot(tmp_path) == before
    assert hidden_folders(tmp_path) == [] and not (tmp_path / "model.calib.plots").exists()


def test_a_rerun_with_fewer_files_removes_the_previous_sets_own_and_nothing_else(tmp_path, caplog):
    write_set(tmp_path, FIRST)
    (tmp_path / "notes.txt").write_bytes(b"mine")
    (tmp_path / "model.calib.plots" / "mine.png").write_bytes(b"mine too")  # the user's file in the plots folder
    (tmp_path / "model.qdq.onnx.json").write_bytes(b"edited by hand")  # changed since: no longer the set's
    with caplog.at_level(logging.INFO, logger="jetforge.output_set"):
        out = write_set(tmp_path, {"model.calib": b"cache 2", "model.calib.json": b"report 2"})
    files = snapshot(tmp_path)
    assert sorted(files) == [".model.calib.set.json", "model.calib", "model.calib.json",
                             "model.calib.plots/mine.png", "model.qdq.onnx.json", "notes.txt"]
    assert files["model.qdq.onnx.json"] == b"edited by hand" and files["notes.txt"] == b"mine"
    assert out.removed == ["model.calib.plots/histograms_00.png", "model.calib.plots/overview.png", "model.qdq.onnx"]
    assert "kept %s" % (tmp_path / "model.qdq.onnx.json") in caplog.text
    write_set(tmp_path, {"model.calib": b"cache 3"})  # the plots folder, empty of the set's files, stays for mine.png
    assert (tmp_path / "model.calib.plots" / "mine.png").is_file() and not (tmp_path / "model.calib.json").exists()


def test_a_folder_the_previous_set_leaves_empty_is_removed(tmp_path):
    write_set(tmp_path, FIRST)
    write_set(tmp_path, {"model.calib": b"cache 2"})
    assert sorted(snapshot(tmp_path)) == [".model.calib.set.json", "model.calib"]
    assert not (tmp_path / "model.calib.plots").exists()


def test_an_input_is_never_removed_as_a_left_over(tmp_path):
    write_set(tmp_path, FIRST)
    qdq = tmp_path / "model.qdq.onnx"
    write_set(tmp_path, {"model.calib": b"cache 2"}, keep=[qdq, None])
    assert qdq.read_bytes() == b"qdq 1"
    assert "model.qdq.onnx" not in read_record(record_path(tmp_path, "model.calib"))["files"]


# A writer of SECOND over FIRST that is SIGKILLed right before its rename number AT (1: before any), or (AT 0) after
# every rename and removal, right before its record says "complete".
KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from jetforge import fileio, output_set
    folder, at = sys.argv[1], int(sys.argv[2])
    calls = []
    real_replace, real_record = output_set._replace, output_set.OutputSet._write_record
    def dying(source, final):
        calls.append(final)
        if len(calls) == at:
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(source, final)
    def dying_record(self, state, *args):
        if state == "complete" and at == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        real_record(self, state, *args)
    output_set._replace, output_set.OutputSet._write_record = dying, dying_record
    with output_set.OutputSet(folder, "model.calib") as out:
        for name, data in %r.items():
            fileio.write_bytes_atomic(out.path(name), data)
""" % (SECOND,))


def kill_while_committing(folder: Path, at: int) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(folder), str(at)], stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_kill_between_two_renames_is_told_in_one_line_and_the_next_run_replaces_the_mix(tmp_path, caplog):
    write_set(tmp_path, FIRST)
    kill_while_committing(tmp_path, at=3)  # two new files in place, the others still the first run's
    files = snapshot(tmp_path)
    assert files["model.calib"] == b"cache 2" and files["model.qdq.onnx.json"] == b"sidecar 1"  # mixed on disk
    problem = check_outputs(tmp_path / "model.calib")
    assert problem is not None and "\n" not in problem and "mixed outputs" in problem
    assert "2 of its 5 new files" in problem and "rerun" in problem
    assert check_outputs(tmp_path / "model.calib.plots" / "overview.png") == problem  # any member tells
    assert verify(tmp_path, "model.calib") == problem
    assert hidden_folders(tmp_path)  # the killed run's staging and set-aside folders
    with caplog.at_level(logging.WARNING, logger="jetforge.output_set"):
        write_set(tmp_path, {"model.calib": b"cache 3", "model.calib.json": b"report 3"})
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        problem + " (this run replaces all of them)"]
    assert sorted(snapshot(tmp_path)) == [".model.calib.set.json", "model.calib", "model.calib.json"]
    assert hidden_folders(tmp_path) == []  # the dead writer's folders are removed
    assert check_outputs(tmp_path / "model.calib") is None


@pytest.mark.parametrize("at", [1, 0], ids=["before the first rename", "after the last rename"])
def test_a_kill_before_or_after_all_renames_is_not_called_mixed(tmp_path, at):
    """Killed before its first rename the set is still the previous one; after its last, it is the new one (its
    record still says it was being replaced): readers take either as whole."""
    write_set(tmp_path, FIRST)
    kill_while_committing(tmp_path, at=at)
    expected = FIRST if at == 1 else SECOND
    assert {k: v for k, v in snapshot(tmp_path).items() if k in expected} == expected
    assert read_record(record_path(tmp_path, "model.calib"))["state"] == "committing"
    assert check_outputs(tmp_path / "model.calib") is None


def test_a_run_killed_while_writing_leaves_only_a_hidden_folder_that_the_next_run_removes(tmp_path):
    write_set(tmp_path, FIRST)
    before = snapshot(tmp_path)
    script = ("import os, signal, sys\nfrom jetforge import fileio, output_set\n"
              "with output_set.OutputSet(sys.argv[1], 'model.calib') as out:\n"
              "    fileio.write_bytes_atomic(out.path('model.calib'), b'cache 2')\n"
              "    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=120).returncode == -signal.SIGKILL
    assert snapshot(tmp_path) == before
    leftovers = hidden_folders(tmp_path)
    assert len(leftovers) == 1 and leftovers[0].startswith(".model.calib.") and leftovers[0].endswith(".partial")
    old_style = tmp_path / (".model.calib.99999999.%s.abcdefgh.part.calib" % fileio._host_tag())
    old_style.write_bytes(b"half a cache")  # what a writer killed before output sets existed left next to the file
    write_set(tmp_path, SECOND)
    assert hidden_folders(tmp_path) == [] and not old_style.exists()


def test_a_reader_is_told_when_a_member_changed_after_the_set_was_written(tmp_path):
    write_set(tmp_path, FIRST)
    (tmp_path / "model.calib").write_bytes(b"retargeted by hand")
    problem = check_outputs(tmp_path / "model.qdq.onnx")
    assert problem is not None and "\n" not in problem and "changed or disappeared" in problem and "model.calib" in problem
    assert check_outputs(tmp_path / "notes.txt") is None  # a file of no set
