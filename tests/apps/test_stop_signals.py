"""Stopping a run from outside, through the real `jetforge` CLI in a subprocess, as systemd, docker and
users do it: SIGTERM and SIGINT close the outputs and exit 130; a SIGKILL leaves hidden temporary
files that the next run to the same folder removes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jetforge.cli.main import EXIT_INTERRUPTED, Terminated, stop_signals_as_interrupt

STARTUP_TIMEOUT_S = 120.0  # imports and model loading on a shared 2-core machine; a real run needs ~3 s
EXIT_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def vtest_clip() -> Path:
    from jetforge.assets import asset_path

    return asset_path("opencv_samples", "vtest.avi")


# The CLI module run as `python -m jetforge.cli.main` would run it, with Ctrl-C as a terminal delivers it: a suite
# started in the background (`nohup ... &`, a CI runner's job) hands its children SIGINT *ignored*, and Python then
# never installs its KeyboardInterrupt handler - the run would finish as if no signal had come.
CLI_WITH_CTRL_C = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                   "runpy.run_module('jetforge.cli.main', run_name='__main__', alter_sys=True)")


def _start_people(clip, out, max_frames, app="people"):
    argv = [sys.executable, "-c", CLI_WITH_CTRL_C, "app", app, "--source", str(clip), "--out", str(out),
            "--max-frames", str(max_frames), "--no-plots", "-q"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def _parts(out):
    return sorted(p.name for p in Path(out).iterdir() if ".part" in p.name) if Path(out).is_dir() else []


def _wait_for_written_events(proc, out):
    """Wait until the first frame has reached the sinks (its event is written before its picture).

    The video's temporary file grows from the first frame on; the events' file is buffered by
    Python and would show its first bytes only after some 8 KiB (20-odd frames).
    """
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError("the run ended before it was signalled: %s" % (proc.communicate(),))
        if any(name.startswith(".annotated.mp4.") and (Path(out) / name).stat().st_size > 0 for name in _parts(out)):
            return
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("no events were written within %.0f s" % STARTUP_TIMEOUT_S)


def _video_frames(path):
    import cv2

    cap = cv2.VideoCapture(str(path))
    assert cap.isOpened(), path
    count = 0
    while cap.read()[0]:
        count += 1
    cap.release()
    return count


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_closes_the_outputs_of_a_running_app(tmp_path, vtest_clip, sig):
    out = tmp_path / "out"
    proc = _start_people(vtest_clip, out, max_frames=600)  # far more than it gets through before the signal
    _wait_for_written_events(proc, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
    assert proc.returncode == EXIT_INTERRUPTED == 130, err
    assert "jetforge: interrupted" + (" (SIGTERM)" if sig == signal.SIGTERM else "") in err
    assert _parts(out) == []
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "interrupted"
    assert metrics["ended_by"] == ("Terminated" if sig == signal.SIGTERM else "KeyboardInterrupt")
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    per_frame = [e for e in events if e["type"] == "people"]
    frames = metrics["frames"]
    assert 0 < frames < 600 and len(per_frame) == frames
    assert [e["frame"] for e in per_frame] == list(range(frames))  # in order, none lost, none invented
    assert _video_frames(out / "annotated.mp4") == frames == metrics["video"][0]["frames"]


@pytest.mark.slow
def test_a_killed_run_leaves_hidden_files_that_the_next_run_removes(tmp_path, vtest_clip):
    out = tmp_path / "out"
    proc = _start_people(vtest_clip, out, max_frames=600)
    _wait_for_written_events(proc, out)
    proc.kill()  # SIGKILL: no handler runs, nothing can clean up
    proc.communicate(timeout=EXIT_TIMEOUT_S)
    left = _parts(out)
    assert any(n.startswith(".events.jsonl.%d." % proc.pid) for n in left)
    assert any(n.startswith(".annotated.mp4.%d." % proc.pid) for n in left)
    assert not (out / "events.jsonl").exists() and not (out / "metrics.json").exists()
    rerun = _start_people(vtest_clip, out, max_frames=3)
    _, err = rerun.communicate(timeout=STARTUP_TIMEOUT_S)
    assert rerun.returncode == 0, err
    assert _parts(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["annotated.mp4", "events.jsonl", "metrics.json"]
    assert json.loads((out / "metrics.json").read_text())["frames"] == 3


def test_sigterm_raises_the_interrupt_once_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals_as_interrupt():
        with pytest.raises(KeyboardInterrupt) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler interrupts the sleep
        assert isinstance(caught.value, Terminated)
        os.kill(os.getpid(), signal.SIGTERM)  # a second one while stopping: a message, no second interrupt
        time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.slow
@pytest.mark.parametrize("app", ["classify", "people"])
def test_two_ctrl_c_in_quick_succession_still_write_the_metrics(tmp_path, vtest_clip, app):
    """Two Ctrl-C 50 ms apart: the second used to interrupt the cleanup the first started (exit 130, no metrics)."""
    out = tmp_path / "out"
    proc = _start_people(vtest_clip, out, max_frames=600, app=app)
    _wait_for_written_events(proc, out)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
    assert proc.returncode == EXIT_INTERRUPTED, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "interrupted" and _parts(out) == []
    assert _video_frames(out / "annotated.mp4") == metrics["frames"] > 0


def test_a_second_ctrl_c_while_stopping_does_not_interrupt_the_cleanup():
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stop_signals_as_interrupt():
            cleaned = False
            with pytest.raises(KeyboardInterrupt) as caught:
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(5)  # the handler interrupts the sleep
                finally:
                    os.kill(os.getpid(), signal.SIGINT)  # the impatient second Ctrl-C, inside the cleanup
                    os.kill(os.getpid(), signal.SIGTERM)  # and a SIGTERM for good measure
                    time.sleep(0.05)
                    cleaned = True
            assert cleaned and not isinstance(caught.value, Terminated)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_inherited_ignored_ctrl_c_stays_ignored():
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_signals_as_interrupt():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


class _StopsInsideDel:
    """An object whose ``__del__`` waits for a stop signal sent to this process: the interrupt is then raised where
    Python cannot propagate it (printed as "Exception ignored"), as a SIGINT arriving during an import's module-lock
    callback was in one test-suite run."""

    def __init__(self, signum):
        self.signum = signum

    def __del__(self):
        os.kill(os.getpid(), self.signum)
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # the handler runs in here, between bytecodes
            pass


@pytest.mark.parametrize("signum,kind", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_stop_whose_interrupt_python_ignored_is_raised_again_where_it_can_propagate(signum, kind):
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stop_signals_as_interrupt():
            with pytest.raises(kind) as caught:
                _StopsInsideDel(signum)  # dropped at once: __del__ runs, its interrupt is ignored there
                time.sleep(5)  # without the re-raise the run would go on (and end) here
            assert type(caught.value) is kind
            os.kill(os.getpid(), signal.SIGINT)  # after that, a further signal only says "already stopping"
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
