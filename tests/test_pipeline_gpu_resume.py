"""benchmarks/gpu_pipeline/pipeline_gpu.py going on after its process died (``--restarts``, ``--resume-from``;
benchmarks/common/pipeline_gpu_resume.py).

The pure parts are checked on hand-made checkpoints.  The whole loop is checked for real on the CPU dry run: the
supervisor's child (a real process running the real script) is sent SIGABRT once its checkpoint shows two
measured steps - as the native heap corruption killed device calls - and the supervisor must record the death
against the step it was in, start a new child that keeps the two steps measured (their values untouched) and runs
only the rest, and end with the whole plan measured once."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import pipeline_gpu_resume as resume  # noqa: E402

SCRIPT = ROOT / "benchmarks" / "gpu_pipeline" / "pipeline_gpu.py"


def _checkpoint(tmp_path, current="pipeline classify [1, False, 'auto'] rep 1"):
    path = tmp_path / "gpu_x_gpu-path.json"
    path.write_text(json.dumps({"partial": True, "current": current, "gpu_tests": {"returncode": 0},
                                "results": {"step_seconds": [["model_only classify [2] rep 1", 0.5],
                                                             ["decode_alone - 1 rep 1", 1.0],
                                                             ["model_only classify [2] rep 2", 0.7]],
                                            "skipped": [{"step": "encode_alone - 1 rep 1"}], "errors": []}}))
    return path


def test_a_checkpoint_gives_the_steps_done_their_times_and_the_budget_spent(tmp_path):
    res = resume.load_checkpoint(_checkpoint(tmp_path))["results"]
    assert resume.done_labels(res) == {"model_only classify [2] rep 1", "decode_alone - 1 rep 1",
                                       "model_only classify [2] rep 2", "encode_alone - 1 rep 1"}
    assert resume.history_of(res) == {"model_only classify [2]": [0.5, 0.7], "decode_alone - 1": [1.0]}
    assert resume.spent_s(res) == pytest.approx(2.2, abs=1e-12)
    (tmp_path / "final.json").write_text(json.dumps({"schema": 2, "points": []}))
    with pytest.raises(SystemExit, match="not a partial pipeline_gpu JSON"):
        resume.load_checkpoint(tmp_path / "final.json")
    with pytest.raises(SystemExit, match="cannot resume from"):
        resume.load_checkpoint(tmp_path / "missing.json")
    (tmp_path / "odd.json").write_text(json.dumps({"partial": True, "results": {"step_seconds": [["a", "x"]]}}))
    with pytest.raises(SystemExit, match="step_seconds or skipped entries are not what pipeline_gpu.py writes"):
        resume.load_checkpoint(tmp_path / "odd.json")


def test_the_child_gets_the_flags_but_the_supervisors_own_with_its_wall_time_and_checkpoint():
    argv = ["--models", "classify", "--restarts", "2", "--wall-limit-s=560", "--resume-from", "old.json", "--tag", "t"]
    assert resume.child_argv(argv, 431.4, None) == ["--models", "classify", "--tag", "t", "--restarts", "0",
                                                    "--wall-limit-s", "431"]
    assert resume.child_argv(argv, 100.0, Path("/o/c.json"))[-2:] == ["--resume-from", "/o/c.json"]
    assert resume.died(-6) and resume.died(-11) and resume.died(134) and resume.died(139)
    assert not resume.died(0) and not resume.died(1) and not resume.died(3)  # errors recorded / the wall limit
    assert not resume.died(-15) and not resume.died(-2) and not resume.died(-9) and not resume.died(143)  # stopped


def test_a_sigterm_to_the_supervisor_stops_its_child_too(tmp_path):
    """run_child in a real process with a real child: SIGTERM to the parent -> the parent exits 143 and the child
    is gone (not left running on its own until its own wall limit)."""
    pid_file = tmp_path / "child.pid"
    child = "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(120)" % str(pid_file)
    parent = subprocess.Popen([sys.executable, "-c", "import sys; sys.path.insert(0, %r); "
                               "from benchmarks.common.pipeline_gpu_resume import run_child; "
                               "run_child([sys.executable, '-c', %r])" % (str(ROOT), child)])
    deadline = time.time() + 60
    while not (pid_file.is_file() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child_pid = int(pid_file.read_text())
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 143
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child_pid, signal.SIGKILL)
        pytest.fail("the child outlived its supervisor")


def test_the_supervisor_records_each_death_and_goes_on_until_a_child_ends_or_restarts_run_out(tmp_path):
    """A fake child that dies twice then exits 0: two deaths recorded against the step named in the checkpoint,
    the second and third children resume from it; with one restart only, the second death ends it (status 4)."""
    path = _checkpoint(tmp_path)
    calls, logs = [], []

    def child(exits):
        def run(cmd):
            calls.append(cmd)
            return exits[len(calls) - 1]
        return run

    rc = resume.supervise(SCRIPT, ["--tag", "t"], path, restarts=3, wall_limit_s=0.0, log=logs.append,
                          run=child([-6, 139, 0]))
    assert rc == 0 and len(calls) == 3 and "--resume-from" not in calls[0] and calls[1][-1] == str(path)
    errors = json.loads(path.read_text())["results"]["errors"]
    assert [e["what"] for e in errors] == ["pipeline classify [1, False, 'auto'] rep 1",
                                           "the process, between steps"]  # the first death cleared "current"
    assert "signal 6" in errors[0]["error"] and "exit 139" in errors[1]["error"]
    calls.clear()
    path = _checkpoint(tmp_path)
    assert resume.supervise(SCRIPT, [], path, restarts=1, wall_limit_s=0.0, log=logs.append,
                            run=child([-11, -11])) == 4 and len(calls) == 2
    assert "not resumed" in json.loads(path.read_text())["results"]["errors"][-1]["error"]
    calls.clear()
    assert resume.supervise(SCRIPT, [], tmp_path / "none.json", restarts=3, wall_limit_s=0.0, log=logs.append,
                            run=child([-6])) == 4 and len(calls) == 1  # died before its first checkpoint
    assert "nothing to go on from" in logs[-1]


def _dry_run_carry(folder: Path, clip: Path) -> Path:
    """What ``pipeline_gpu.py --prep`` makes, as little as the dry run of MobileNetV2 needs, without the network:
    its FP16 weights from the bundled asset, and a clip (the dry run's stand-in decoder reads it with OpenCV)."""
    import shutil

    from benchmarks.common.pipeline_gpu_prep import save_half_weights

    (folder / "streams").mkdir(parents=True)
    (folder / "assets").mkdir()
    shutil.copyfile(clip, folder / "streams" / "people720.mp4")
    save_half_weights(folder / "assets", models=("classify",))
    return folder


def test_a_child_killed_mid_run_is_resumed_by_a_new_one_that_measures_only_the_rest(tmp_path, bikes_clip):
    out = tmp_path / "out"
    name = out / "pipeline_gpu_dry_run.json"
    env = dict(os.environ, OUT=str(out), PYTHONUNBUFFERED="1")
    carry = _dry_run_carry(tmp_path / "carry", bikes_clip)
    flags = ["--dry-run", "--carry", str(carry), "--models", "classify", "--streams", "1", "--reps", "1",
             "--no-decode-procs"]
    killed = {}

    def run(cmd):  # the supervisor's child, for real; the first one is killed once two steps are measured
        proc = subprocess.Popen(cmd, cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not killed:
            deadline = time.time() + 240
            while proc.poll() is None and time.time() < deadline:
                try:
                    data = json.loads(name.read_text())
                except (OSError, ValueError):
                    data = {}
                if len(data.get("results", {}).get("step_seconds", [])) >= 2 and data.get("current"):
                    proc.send_signal(signal.SIGABRT)  # as glibc's heap checks end a process
                    killed.update(steps=[list(s) for s in data["results"]["step_seconds"]], current=data["current"])
                    break
                time.sleep(0.05)
        return proc.wait(timeout=240)

    out.mkdir()
    rc = resume.supervise(SCRIPT, flags, name, restarts=1, wall_limit_s=0.0, log=lambda *a: None, run=run)
    assert killed, "the first child ended before two steps were measured"
    assert rc == 1  # the script's status with errors recorded: the death is one, and the only one (below)
    doc = json.loads(name.read_text())
    labels = [label for label, _ in doc["results"]["step_seconds"]]
    assert doc["results"]["step_seconds"][:len(killed["steps"])] == killed["steps"]  # kept, not measured again
    assert len(labels) == len(set(labels)) and killed["current"] in labels  # the killed step ran once, in child 2
    assert [e["what"] for e in doc["errors"]] == [killed["current"]] and "signal 6" in doc["errors"][0]["error"]
    assert len(doc["points"]) == 2 and all(p["reps"] == 1 for p in doc["points"])  # render off and on, measured
