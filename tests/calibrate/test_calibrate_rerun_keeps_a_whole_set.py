"""Issue 25: a rerun of `jetforge calibrate` into the same outputs that is stopped half-way (SIGTERM, SIGKILL) must
leave the first run's files exactly as they were, never a mix of the two runs; a finished rerun with fewer outputs
(--no-qdq --no-plots) must not leave the first run's others beside its own.  Real CLI runs in a subprocess."""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest

from jetforge.output_set import check_outputs, read_record, record_path

START_TIMEOUT_S = 120.0  # imports and the model on a shared 2-core machine; a run takes ~2 s
EXIT_TIMEOUT_S = 60.0

# The CLI as `python -m jetforge.cli.main` runs it, SIGINT as a terminal delivers it (a background job inherits it
# ignored); tests/apps/test_stop_signals.py says why.
CLI = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "runpy.run_module('jetforge.cli.main', run_name='__main__', alter_sys=True)")


def calibrate_argv(model: Path, data: Path, *extra: str) -> List[str]:
    return [sys.executable, "-c", CLI, "calibrate", str(model), "--data", str(data), "--samples", "16",
            "--batch-size", "8", "-q"] + list(extra)


def snapshot(folder: Path) -> Dict[str, bytes]:
    """{relative path: bytes} of every file under ``folder`` outside hidden staging folders (the set's record
    included: it must not change either)."""
    files = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts[:-1]):
            files[rel.as_posix()] = p.read_bytes()
    return files


def hidden_leftovers(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and not p.name.endswith(".set.json"))


def started_writing(folder: Path, before: Dict[str, bytes]) -> Callable[[], bool]:
    """True once the run has a finished output: staged in its hidden folder, or already at its final name."""
    def check() -> bool:
        staged = [p for d in folder.iterdir() if d.is_dir() and d.name.endswith(".partial")
                  for p in d.rglob("*") if p.is_file() and ".part" not in p.name]
        return bool(staged) or snapshot(folder) != before
    return check


def stop_when(proc: "subprocess.Popen[str]", ready: Callable[[], bool], sig: int) -> str:
    """Send ``sig`` as soon as ``ready()`` holds (polled, not a fixed sleep); the run's stderr."""
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not ready():
            if proc.poll() is not None:
                raise AssertionError("the run ended before it wrote anything: %s" % (proc.communicate(),))
            if time.monotonic() > deadline:
                raise AssertionError("the run wrote nothing within %.0f s" % START_TIMEOUT_S)
            time.sleep(0.005)
        proc.send_signal(sig)
        return proc.communicate(timeout=EXIT_TIMEOUT_S)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run(argv: List[str]) -> str:
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=START_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def first_run_master(tiny_model_master, image_dir, tmp_path_factory) -> Path:
    """A finished default run (cache, Q/DQ ONNX + sidecar, report, plots) beside a copy of the model, made once."""
    folder = tmp_path_factory.mktemp("first_run")
    for name in ("tiny.onnx", "tiny.onnx.json"):
        shutil.copy(str(tiny_model_master.parent / name), str(folder / name))
    run(calibrate_argv(folder / "tiny.onnx", image_dir))
    return folder


@pytest.fixture
def first_run(first_run_master, tmp_path) -> Dict[str, bytes]:
    """The first run's folder copied for this test (tmp_path/run/tiny.onnx ...); the bytes of every file in it."""
    shutil.copytree(str(first_run_master), str(tmp_path / "run"))
    files = snapshot(tmp_path / "run")
    for name in ("tiny.calib", "tiny.qdq.onnx", "tiny.qdq.onnx.json", "tiny.calib.json", "tiny.calib.plots/overview.png",
                 ".tiny.calib.set.json"):
        assert name in files, sorted(files)
    return files


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_calibrate_rerun_leaves_the_previous_outputs_byte_identical(tmp_path, image_dir, first_run, sig):
    folder = tmp_path / "run"
    tiny_model = folder / "tiny.onnx"
    proc = subprocess.Popen(calibrate_argv(tiny_model, image_dir, "--algorithm", "max", "--trt", "8.6.2",
                                           "--all-plots"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    err = stop_when(proc, started_writing(folder, first_run), sig)
    assert proc.returncode == 130, "the run was not stopped by the signal (it finished first?): %s" % err
    assert err.strip().splitlines()[-1].startswith("jetforge: interrupted"), err
    assert "Traceback" not in err
    assert snapshot(folder) == first_run  # every file of the first run as it was, none of the second
    assert hidden_leftovers(folder) == []  # nothing staged is left behind
    assert check_outputs(folder / "tiny.calib") is None


@pytest.mark.slow
def test_a_killed_calibrate_rerun_leaves_the_previous_outputs_and_the_next_run_cleans_up(tmp_path, image_dir,
                                                                                        first_run):
    folder = tmp_path / "run"
    tiny_model = folder / "tiny.onnx"
    proc = subprocess.Popen(calibrate_argv(tiny_model, image_dir, "--algorithm", "max", "--all-plots"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    stop_when(proc, started_writing(folder, first_run), signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    assert snapshot(folder) == first_run  # the kill came before the files were moved: the first set is whole
    assert check_outputs(folder / "tiny.qdq.onnx") is None
    assert all(name.endswith(".partial") for name in hidden_leftovers(folder))  # only the dead run's staging
    run(calibrate_argv(tiny_model, image_dir, "--no-plots"))  # the next run removes it
    assert hidden_leftovers(folder) == []


@pytest.mark.slow
def test_a_rerun_with_fewer_outputs_removes_the_previous_runs_others(tmp_path, image_dir, first_run):
    folder = tmp_path / "run"
    tiny_model = folder / "tiny.onnx"
    mine = folder / "notes.txt"
    mine.write_text("not an output of calibrate\n")
    run(calibrate_argv(tiny_model, image_dir, "--no-qdq", "--no-plots", "--algorithm", "max"))
    files = snapshot(folder)
    assert sorted(files) == [".tiny.calib.set.json", "notes.txt", "tiny.calib", "tiny.calib.json", "tiny.onnx",
                             "tiny.onnx.json"]  # no Q/DQ model or plots of the first run beside the new cache
    assert files["tiny.calib"] != first_run["tiny.calib"] and files["notes.txt"] == mine.read_bytes()
    record = read_record(record_path(folder, "tiny.calib"))
    assert record is not None and record["state"] == "complete"
    assert sorted(record["files"]) == ["tiny.calib", "tiny.calib.json"]
    assert check_outputs(folder / "tiny.calib") is None and not (folder / "tiny.calib.plots").exists()

