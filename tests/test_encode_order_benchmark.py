"""The render-on bound's frame order (benchmarks/common/pipeline_gpu_measure.encode_frame) and
benchmarks/gpu_pipeline/encode_order.py at small settings on a real clip and the real encoder pool."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common.pipeline_gpu_measure import encode_frame  # noqa: E402
from benchmarks.gpu_pipeline import encode_order  # noqa: E402


def test_per_stream_order_gives_each_stream_its_frames_in_order_and_shared_does_not():
    streams, frames = 16, 30
    seen = {}
    for n in range(streams * 40):
        s, i = encode_frame(n, streams, frames)
        seen.setdefault(s, []).append(i)
    assert sorted(seen) == list(range(streams))
    for indices in seen.values():  # 0, 1, 2, ... 29, 0, 1, ...: the clip in order, looped
        assert indices == [k % frames for k in range(40)]
    shared = [encode_frame(n, streams, frames, "shared") for n in range(streams * 3)]
    assert [i for s, i in shared if s == 1] == [1, 17, 3]  # every 16th frame of the clip, wrapped at 30
    with pytest.raises(ValueError, match="frame order 'random'"):
        encode_frame(0, 2, 2, "random")


def test_the_benchmark_runs_both_orders_interleaved_and_writes_its_result(tmp_path, bikes_clip):
    stem = tmp_path / "order"
    assert encode_order.main(["--clip", str(bikes_clip), "--workers", "1", "--streams", "2", "--seconds", "0.5",
                              "--reps", "1", "--out", str(stem)]) == 0
    doc = json.loads(Path(str(stem) + ".json").read_text())
    assert set(doc["runs"]) == {"per-stream", "shared"}
    for order, runs in doc["runs"].items():
        assert len(runs) == 1 and runs[0]["frames"] > 0 and runs[0]["frame_order"] == order
    assert doc["fps_per_stream_over_shared"] == pytest.approx(
        doc["runs"]["per-stream"][0]["fps"] / doc["runs"]["shared"][0]["fps"])
    assert "per-stream order:" in Path(str(stem) + ".txt").read_text()


def test_a_missing_clip_is_one_clear_error(tmp_path, capsys):
    assert encode_order.main(["--clip", str(tmp_path / "none.mp4")]) == 1
    assert "no clip at" in capsys.readouterr().err


def _children(pid):
    """The pids of ``pid``'s child processes (Linux /proc; empty where the kernel does not list them)."""
    found = []
    for task in Path("/proc/%d/task" % pid).glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except OSError:
            pass
    return found


def test_a_sigterm_stops_the_run_and_its_encoder_workers_and_exits_143(tmp_path, bikes_clip):
    import os
    import signal
    import subprocess
    import time

    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "gpu_pipeline" / "encode_order.py"), "--clip",
                             str(bikes_clip), "--workers", "1", "--streams", "2", "--seconds", "60", "--reps", "1",
                             "--out", str(tmp_path / "order")], stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "stderr.txt").open("wb"))  # a file: an orphaned worker can't hold it
    deadline, workers = time.monotonic() + 60, []
    while time.monotonic() < deadline and not workers:  # the encoder pool's worker process has started
        workers = _children(proc.pid)
        time.sleep(0.2)
    if not workers:
        proc.kill()
        pytest.skip("this kernel does not list child processes in /proc")
    time.sleep(2.0)  # encoding
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "stderr.txt").read_text()[-2000:]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % w) for w in workers):
        time.sleep(0.1)
    alive = [w for w in workers if os.path.exists("/proc/%d" % w)
             and "Z" not in Path("/proc/%d/stat" % w).read_text().split()[2]]
    assert not alive  # no encoder worker left running
    assert not (tmp_path / "order.json").exists()  # a stopped run writes no result
