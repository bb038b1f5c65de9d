"""benchmarks/gpu_pipeline/frame_copy.py on the CPU stand-in decoder: both ways of copying run, interleaved, every
repetition's frames are counted, and the JSON holds a row per stream count and way.  (The copy kernel itself is not
launched here: the stand-in's frames are in host memory; the kernel is tested in tests/runtime/gpu_kernels.)"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_pipeline import frame_copy  # noqa: E402


def test_frame_copy_runs_both_ways_and_writes_its_result(tmp_path, capsys):
    out = tmp_path / "frame_copy.json"
    assert frame_copy.main(["--dry-run", "--streams", "2", "--reps", "2", "--seconds", "0.3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["dry_run"] is True and list(doc["rows"]) == ["2"]
    assert list(doc["rows"]["2"]) == list(frame_copy.WAYS) == ["copy2d", "kernel"]
    for way in frame_copy.WAYS:
        row = doc["rows"]["2"][way]
        assert 0 < row["fps"]["min"] <= row["fps"]["median"] <= row["fps"]["max"]
        assert row["cpu_ms_per_frame"]["min"] > 0
    printed = capsys.readouterr().out
    assert printed.count("rep 1:") == 2 and printed.count("rep 2:") == 2  # interleaved: each way once a repetition


def test_the_dropping_consumer_takes_frames_until_its_time_is_up():
    consumer = frame_copy.DroppingConsumer(streams=2, seconds=60.0)
    assert consumer.waiting(0) == 0 and consumer.put_many(0, [1, 2, 3]) and consumer.frames == 3
    consumer.deadline = 0.0
    assert consumer.stopped and not consumer.put_many(1, [4])
