"""benchmarks/gpu_pipeline/across_calls.py on the committed H100 calls of 2026-12-07: the median of the calls' medians
and the pooled spread, checked against numbers worked out here from the same files with the standard library; bad
inputs give one clear error and exit 1."""

import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.gpu_pipeline import across_calls  # noqa: E402

RESULTS = ROOT / "benchmarks" / "gpu_pipeline" / "results"
CALLS = [RESULTS / ("nvidia-h100_2026-12-07_gpu-path-full%s.json" % s) for s in ("", "2", "3")]


def _point(doc, model, streams, render):
    return next(p for p in doc["points"] + doc.get("tiles", [])
                if (p["model"], p["streams"], p["render"]) == (model, streams, render))


def test_the_summary_of_three_calls_matches_medians_worked_out_from_the_files(tmp_path, capsys):
    assert across_calls.main([str(p) for p in CALLS] + ["--out", str(tmp_path)]) == 0
    out = tmp_path / "nvidia-h100_2026-12-07_gpu-path-across-calls"
    doc = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".txt").read_text().startswith("NVIDIA H100 80GB HBM3; 3 calls")
    assert out.with_suffix(".png").stat().st_size > 10000
    raw = [json.loads(p.read_text()) for p in CALLS]
    for row in doc["points"]:
        key = (row["model"], row["streams"], row["render"])
        points = [_point(d, *key) for d in raw]
        medians = [statistics.median(r["fps"] / p["bound"]["fps"] for r in p["runs"]) for p in points]
        every = [r["fps"] / p["bound"]["fps"] for p in points for r in p["runs"]]
        # the calls' own medians are the medians of their repetitions' ratios (3 each: no averaging of a middle pair)
        assert [c["ratio"]["median"] for c in row["per_call"]] == pytest.approx(medians, rel=1e-12)
        assert row["ratio_median_of_call_medians"] == pytest.approx(statistics.median(medians), rel=1e-12)
        assert (row["ratio_every_rep"]["min"], row["ratio_every_rep"]["max"]) == pytest.approx((min(every), max(every)))
        assert row["ratio_every_rep"]["n"] == len(every) == 9
        assert row["goal_met"] == (statistics.median(medians) >= row["goal_ratio"])
        assert row["calls_meeting_goal"] == sum(m >= row["goal_ratio"] for m in medians)
        shared = [statistics.median(r["fps"] / p["shared_bound"]["fps"] for r in p["runs"]) for p in points
                  if p.get("shared_bound")]  # --decode-beside ran at 16 streams only in these calls
        assert len(shared) == (3 if key in (("classify", 16, False), ("people", 16, False)) else 0)
        if shared:
            assert row["shared_ratio_call_medians"]["median"] == pytest.approx(statistics.median(shared), rel=1e-12)
        else:
            assert row["shared_ratio_call_medians"] is None
    keys = [(r["model"], r["streams"], r["render"]) for r in doc["points"]]
    assert ("people-tiles2", 32, False) in keys and ("classify", 16, True) in keys and len(keys) == 14
    assert [c["cpu"] for c in doc["calls"]] == ["Intel(R) Xeon(R) Processor"] * 3
    assert "signal 6" in doc["calls"][1]["errors"][0]["error"]  # the call whose child aborted says so


def test_bad_inputs_are_one_clear_error_and_exit_1(tmp_path, capsys):
    assert across_calls.main([str(CALLS[0]), "--out", str(tmp_path)]) == 1
    assert "one call gives nothing to compare" in capsys.readouterr().err
    other = json.loads(CALLS[1].read_text())
    other["machine"]["gpu"] = "NVIDIA H200"
    (tmp_path / "h200.json").write_text(json.dumps(other))
    assert across_calls.main([str(CALLS[0]), str(tmp_path / "h200.json"), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "ran on different GPUs (NVIDIA H100 80GB HBM3, NVIDIA H200)" in err and err.count("\n") == 1
    (tmp_path / "broken.json").write_text("{not json")
    assert across_calls.main([str(CALLS[0]), str(tmp_path / "broken.json")]) == 1
    assert "is not JSON" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"benchmark": "recording_cost"}))
    assert across_calls.main([str(CALLS[0]), str(tmp_path / "other.json")]) == 1
    assert "not a pipeline_gpu.py result" in capsys.readouterr().err
    assert across_calls.main([str(CALLS[0]), str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err
    mixed = json.loads(CALLS[1].read_text())
    for point in mixed["points"]:  # a later call of the same GPU whose detector decoded on the host
        if point["model"] == "people":
            point["ssd_decode"] = "host (as the app with a session that takes host arrays)"
    (tmp_path / "mixed.json").write_text(json.dumps(mixed))
    assert across_calls.main([str(CALLS[0]), str(tmp_path / "mixed.json"), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "decoded people's boxes in different ways" in err and err.count("\n") == 1
    cut = json.loads(CALLS[1].read_text())
    del cut["points"][0]["bound"]  # a hand-edited result: a point without its bound
    (tmp_path / "cut.json").write_text(json.dumps(cut))
    assert across_calls.main([str(CALLS[0]), str(tmp_path / "cut.json")]) == 1
    err = capsys.readouterr().err
    assert "is missing or has a wrong value" in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.glob("*across-calls*"))  # nothing written for a refused input
