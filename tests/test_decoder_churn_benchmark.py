"""benchmarks/gpu_pipeline/decoder_churn.py on the CPU stand-in decoder: every way runs in its own child process to
the end and is reported as such; a child that dies (a signal, as the native heap corruption's abort) or hangs is
reported as died, with its abort message."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_pipeline import decoder_churn  # noqa: E402


def test_every_way_runs_its_cycles_in_a_child_and_the_result_is_written(tmp_path, monkeypatch, bikes_clip):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert decoder_churn.main(["--dry-run", "--cycles", "3", "--decoders", "2", "--clip", str(bikes_clip)]) == 0
    doc = json.loads((tmp_path / "decoder_churn_dry_run.json").read_text())
    assert [w["way"] for w in doc["ways"]] == list(decoder_churn.WAYS) == [
        "steady", "reconfigure", "recreate", "sources", "sources-noreuse", "sources-grow", "sources-grow-primed"]
    grown = sum(decoder_churn.grow_counts(2)[:3])  # 1 + 2 + 1 sources opened over the three cycles (2 decoders)
    assert decoder_churn.grow_counts(2) == [1, 2, 1, 2] and decoder_churn.grow_counts(32) == [1, 4, 16, 32]
    for w in doc["ways"]:
        assert w["exit"] == 0 and not w["died"] and w["finished"] and w["cycles"] == 3
        # every decoder restarted once a cycle; the grow ways close as many sources as they opened
        assert w["restarts"] == {"steady": 0, "sources-grow": grown, "sources-grow-primed": grown}.get(w["way"], 3 * 2)
    text = (tmp_path / "decoder_churn_dry_run.txt").read_text()
    assert "reconfigure" + " " * 9 + "0          True" in text and "sources-grow-primed 0" in text


def test_a_child_killed_by_a_signal_or_a_timeout_is_reported_as_died_with_its_message():
    err = "malloc(): unaligned tcache chunk detected\nFatal Python error: Aborted\n\nThread 0x1 (most recent call first):"
    r = decoder_churn.way_result("reconfigure", -6, "cycle 1 restarts 16\ncycle 2 restarts 32\n", err, 12.34)
    assert r["exit"] == "signal 6" and r["died"] and not r["finished"] and (r["cycles"], r["restarts"]) == (2, 32)
    assert r["last_lines"][0] == "malloc(): unaligned tcache chunk detected" and r["seconds"] == 12.3
    hung = decoder_churn.way_result("recreate", "timeout", "", "", 55.0)
    assert hung["died"] and hung["exit"] == "timeout" and hung["cycles"] == 0


def test_an_unknown_way_or_a_missing_clip_is_one_clear_error(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as err:
        decoder_churn.main(["--dry-run", "--ways", "reboot", "--clip", str(tmp_path / "none.mp4")])
    assert err.value.code == 2 and "unknown way(s) reboot" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        decoder_churn.main(["--dry-run", "--clip", str(tmp_path / "none.mp4")])
    assert "no clip at" in capsys.readouterr().err


def _churn_children(clip: Path) -> list:
    """The pids of decoder_churn children decoding ``clip`` (their command lines, read from /proc)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended while we looked
            continue
        if b"--child" in args and str(clip).encode() in args:
            pids.append(int(cmdline.parent.name))
    return pids


def test_a_sigterm_to_the_parent_stops_its_running_child_and_exits_143(tmp_path, bikes_clip):
    """In real processes: the parent runs a way with cycles enough for minutes; a SIGTERM to the parent -> exit 143
    and no child left decoding on its own (before the fix, the child ran on until its --way-timeout-s)."""
    import os
    import shutil
    import signal
    import subprocess
    import time

    import pytest

    if not Path("/proc/self/cmdline").is_file():
        pytest.skip("needs /proc to find the child process")
    clip = tmp_path / "churn_clip.mp4"  # a path of this test's own: its children are told apart from any other's
    shutil.copyfile(bikes_clip, clip)
    env = dict(os.environ, OUT=str(tmp_path))
    parent = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "gpu_pipeline" / "decoder_churn.py"),
                               "--dry-run", "--ways", "reconfigure", "--cycles", "100000", "--decoders", "1",
                               "--way-timeout-s", "300", "--clip", str(clip)], env=env)
    deadline = time.time() + 60
    while not _churn_children(clip) and time.time() < deadline and parent.poll() is None:
        time.sleep(0.05)
    children = _churn_children(clip)
    assert children, "the child never started"
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 143
    deadline = time.time() + 10
    while _churn_children(clip) and time.time() < deadline:
        time.sleep(0.05)
    left = _churn_children(clip)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "a child outlived its parent"
