"""benchmarks/gpu_pipeline/recording_cost.py at small settings: every variant runs every frame through
run_streams, the recording variants record each of them once (one_run raises otherwise), and the result files
hold what the table prints.  (Its numbers are the benchmark's, not asserted here.)"""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_pipeline import recording_cost  # noqa: E402


def test_recording_cost_runs_each_variant_and_writes_its_result(tmp_path, capsys):
    assert recording_cost.main(["--streams", "4", "--frames", "400", "--reps", "2", "--max-batch", "4",
                                "--out", str(tmp_path / "rc")]) == 0
    doc = json.loads((tmp_path / "rc.json").read_text())
    assert [r["variant"] for r in doc["rows"]] == list(recording_cost.VARIANTS)
    for v in recording_cost.VARIANTS:
        assert [run["frames"] for run in doc["runs"][v]] == [400, 400]
    assert doc["rows"][0]["recording_us_per_frame"] == 0.0
    assert "batched recording costs" in (tmp_path / "rc.txt").read_text()
    assert "wrote" in capsys.readouterr().out


def test_both_recordings_count_every_frame_of_a_run():
    # one_run raises when a recording's metrics count other than the frames run_streams finished
    for variant in ("per-frame", "batched"):
        row = recording_cost.one_run(variant, streams=3, frames=300, max_batch=4)
        assert row["frames"] == 300
