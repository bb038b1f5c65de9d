"""benchmarks/gpu_pipeline/ssd_host_cost.py at small settings: both host halves give the same detections on the person
detector's real outputs (also for a batch padded to its bucket, whose padding rows the kernel's half must drop), and
the result is written."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_pipeline import ssd_host_cost  # noqa: E402


def test_both_host_halves_agree_and_the_result_is_written(tmp_path):
    stem = tmp_path / "cost"
    assert ssd_host_cost.main(["--batches", "2,6", "--reps", "1", "--calls", "2", "--out", str(stem)]) == 0
    doc = json.loads(Path(str(stem) + ".json").read_text())
    assert [(r["batch"], r["padded"]) for r in doc["rows"]] == [(2, 2), (6, 8)]  # 6 frames: the padding rows dropped
    for r in doc["rows"]:
        assert r["same_detections"] and r["candidates"] > 0
        assert r["app_over_kernel"] == r["app_host_decode_ms_per_batch"]["median"] / r[
            "kernel_host_part_ms_per_batch"]["median"]
        # 1917 anchors x (4 box + 2 class) float32 a frame come back for the host decode; a few candidates for the kernel
        assert r["bytes_back_per_frame"]["app"] == 1917 * 6 * 4 > 10 * r["bytes_back_per_frame"]["kernel"]
    assert "host decode + NMS" in Path(str(stem) + ".txt").read_text()
