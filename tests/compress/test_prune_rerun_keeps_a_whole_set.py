"""Issue 25: a rerun of `jetforge prune` into the same --out folder that is stopped half-way (SIGTERM, SIGKILL) must
leave the first run's plan, weights, report and ONNX exactly as they were, never a mix of the two runs (pruned.pt
loads only with the plan it was pruned by); a finished rerun with fewer outputs (--no-onnx --no-plot) must not
leave the first run's model.onnx beside its new plan.  Real CLI runs in a subprocess, on resnet18 at 64x64."""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from jetforge import fileio  # noqa: E402
from jetforge.output_set import check_outputs, read_record, record_path  # noqa: E402

START_TIMEOUT_S = 180.0  # torch's import and the pruning on a shared 2-core machine; a run takes ~6 s
EXIT_TIMEOUT_S = 60.0
CLI = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "runpy.run_module('jetforge.cli.main', run_name='__main__', alter_sys=True)")
FIRST = ("model.prune.json", "pruned.pt", "prune_report.json", "prune_report.txt", "prune_report.png", "model.onnx",
         "model.onnx.json", ".prune.set.json")


def prune_argv(out: Path, *extra: str) -> List[str]:
    return [sys.executable, "-c", CLI, "prune", "--model", "resnet18", "--input-shape", "1,3,64,64", "--out", str(out),
            "-q"] + list(extra)


def snapshot(folder: Path) -> Dict[str, bytes]:
    """{name: bytes} of every file in ``folder`` (the set's record included), hidden staging folders left out."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def hidden_leftovers(folder: Path) -> List[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and not p.name.endswith(".set.json"))


def started_writing(folder: Path, before: Dict[str, bytes]) -> Callable[[], bool]:
    """True once the run has a finished output: staged in its hidden folder, or already at its final name."""
    def check() -> bool:
        staged = [p for d in folder.iterdir() if d.is_dir() and d.name.endswith(".partial")
                  for p in d.iterdir() if p.is_file() and ".part" not in p.name]
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
def first_run_master(tmp_path_factory) -> Path:
    """A finished run (--ratio 0.5, with the ONNX export and the plot), made once."""
    out = tmp_path_factory.mktemp("first") / "pruned"
    run(prune_argv(out, "--ratio", "0.5"))
    return out


@pytest.fixture
def first_run(first_run_master, tmp_path) -> Dict[str, bytes]:
    """The first run's folder copied to tmp_path/pruned for this test; the bytes of every file in it."""
    shutil.copytree(str(first_run_master), str(tmp_path / "pruned"))
    files = snapshot(tmp_path / "pruned")
    assert sorted(files) == sorted(FIRST)
    return files


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_prune_rerun_leaves_the_previous_outputs_byte_identical(tmp_path, first_run, sig):
    out = tmp_path / "pruned"
    proc = subprocess.Popen(prune_argv(out, "--ratio", "0.25", "--round-to", "16"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    err = stop_when(proc, started_writing(out, first_run), sig)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        assert all(name.endswith(".partial") for name in hidden_leftovers(out))  # the dead run's staging only
    else:
        assert proc.returncode == 130, "the run was not stopped by the signal (it finished first?): %s" % err
        assert err.strip().splitlines()[-1] == "jetforge: interrupted (SIGTERM)", err
        assert hidden_leftovers(out) == []
    assert snapshot(out) == first_run  # the plan, the weights, the report and the ONNX of the first run, unchanged
    assert check_outputs(out / "pruned.pt") is None


@pytest.mark.slow
def test_a_prune_rerun_without_onnx_removes_the_previous_model_onnx(tmp_path, first_run):
    out = tmp_path / "pruned"
    (out / "readme.txt").write_text("mine\n")
    (out / (".prune.99999999.%s.abcdefgh.partial" % fileio._host_tag())).mkdir()  # its writer is gone
    run(prune_argv(out, "--ratio", "0.25", "--no-onnx", "--no-plot"))
    files = snapshot(out)
    assert sorted(files) == [".prune.set.json", "model.prune.json", "prune_report.json", "prune_report.txt",
                             "pruned.pt", "readme.txt"]  # no model.onnx of the first run beside the new weights
    assert files["pruned.pt"] != first_run["pruned.pt"] and files["readme.txt"] == b"mine\n"
    assert hidden_leftovers(out) == []
    record = read_record(record_path(out, "prune"))
    assert record is not None and record["state"] == "complete" and "model.onnx" not in record["files"]
    assert check_outputs(out / "model.prune.json") is None
