"""The pure parts of benchmarks/gpu_pipeline/pipeline_gpu.py (issue 29): medians with spread, the plan's order, the
time-budget skip, and how repetitions become a point against its bound.  No timing, no GPU: every expected value is
worked out by hand from the inputs in the test (exact arithmetic on a few numbers; float comparisons to 1e-12)."""

import pytest

from benchmarks.common.pipeline_gpu_plan import (PlanSettings, Step, estimate_s, fits, group_rows, median_spread,
                                                 nested_medians, plan_steps, scaled)
from benchmarks.common.pipeline_gpu_report import bound_medians, goals_summary, make_point, point_bound


def test_median_spread_odd_even_and_missing():
    assert median_spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    # even count: the mean of the middle two; None values are left out
    assert median_spread([4.0, None, 1.0, 2.0, 10.0]) == {"median": 3.0, "min": 1.0, "max": 10.0, "n": 4}
    assert median_spread([None]) is None
    assert median_spread([]) is None


def test_scaled_turns_fps_spread_into_ratio_spread():
    s = scaled({"median": 90.0, "min": 80.0, "max": 99.0, "n": 3}, 100.0)
    assert s["median"] == pytest.approx(0.9, abs=1e-12) and s["min"] == pytest.approx(0.8, abs=1e-12)
    assert s["max"] == pytest.approx(0.99, abs=1e-12) and s["n"] == 3
    assert scaled(None, 100.0) is None and scaled({"median": 1, "min": 1, "max": 1, "n": 1}, None) is None


def test_nested_medians_per_key():
    reps = [{"feeder": {"cpu_ms": 1.0}, "launch": {"mean_ms": 5.0}},
            {"feeder": {"cpu_ms": 3.0}, "launch": {"mean_ms": 1.0}},
            {"feeder": {"cpu_ms": 2.0}}]  # a stage missing in one repetition: median of the others
    assert nested_medians(reps) == {"feeder": {"cpu_ms": 2.0}, "launch": {"mean_ms": 3.0}}


def _settings(**kw):
    base = dict(models=["classify", "people"], streams=[1, 4, 16, 32], reps=3,
                buckets_of=lambda n, v: min(32, 2 * n))
    base.update(kw)
    return PlanSettings(**base)


def test_plan_goal_rows_first_in_rounds_then_render_then_exploratory():
    steps = plan_steps(_settings(render_on=True, exploratory=["feed-pairs"]))
    groups = [s.group for s in steps]
    # every goal step comes before every render step, and those before every exploratory one
    assert groups == sorted(groups, key=["goal", "render", "exploratory"].index)
    goal = [s for s in steps if s.group == "goal"]
    pipes = [s for s in goal if s.kind == "pipeline"]
    assert len(pipes) == 2 * 4 * 3  # 2 models x 4 stream counts x 3 repetitions, render off, default variant
    assert all(s.arg[1] is False and s.arg[2] == "auto" for s in pipes)
    # rounds: every round's bounds precede its points, and round r+1 starts after round r's last point
    reps = [s.rep for s in goal]
    assert reps == sorted(reps)
    for r in range(3):
        round_steps = [s for s in goal if s.rep == r]
        first_pipe = next(i for i, s in enumerate(round_steps) if s.kind == "pipeline")
        assert {s.kind for s in round_steps[:first_pipe]} == {"model_only", "decode_alone", "decode_alone_procs"}
    # model alone at the batches the points use (buckets_of: 2n capped at 32 -> 2, 8, 32)
    assert [s.arg for s in goal if s.kind == "model_only"][0] == (2, 8, 32)
    render = [s for s in steps if s.group == "render"]
    assert [s.kind for s in render] == ["encode_alone", "pipeline", "pipeline"] * 3
    assert {s.arg for s in render if s.kind == "pipeline"} == {(16, True, "auto")}


def test_plan_without_options_has_goal_rows_only():
    steps = plan_steps(_settings(decode_procs=False))
    assert {s.group for s in steps} == {"goal"}
    assert not any(s.kind == "decode_alone_procs" for s in steps)


def test_estimate_uses_longest_earlier_repetition_else_guess():
    step = Step("pipeline", "classify", (16, False, "auto"), rep=2)
    assert estimate_s(step, {}, 7.5) == 7.5
    history = {Step("pipeline", "classify", (16, False, "auto"), rep=0).key: [4.0, 6.0]}
    assert estimate_s(step, history, 7.5) == 6.0


def test_fits_budget():
    assert fits(100.0, 20.0, 120.0)  # ends exactly at the budget
    assert not fits(100.0, 20.5, 120.0)
    assert fits(1e6, 1e6, 0.0)  # no budget


def _row(model, n, fps, rep, variant="auto=feed-pairs", render=False, cores=0.05):
    return {"model": model, "streams": n, "render": render, "variant": variant, "fps": fps, "rep": rep,
            "max_batch": 32, "cores_per_30fps_stream": cores, "frames": 100, "wall_s": 1.0, "mean_batch": 30.0,
            "latency_p99_ms": {"worst_stream": 10.0}, "stages": {"feeder": {"cpu_ms": 0.1 * (rep + 1)}},
            "host": {"cpu": "X", "cores": 16, "loadavg_before": [1.0 + rep, 0, 0], "loadavg_after": [2.0, 0, 0]}}


def test_point_from_repetitions_against_median_bound():
    bounds = bound_medians({"model_only": {"classify": {"32": [{"fps": 1200.0}, {"fps": 1000.0}, {"fps": 1100.0}]}},
                            "decode_alone": {"16": [{"fps": 900.0}, {"fps": 1000.0}, {"fps": 950.0}]},
                            "decode_alone_procs": {"16": [{"fps": 960.0}]}})
    # model alone median 1100; decode: max(median 950 one process, 960 in workers) = 960 -> bound 960, decode-limited
    b = point_bound(bounds, "classify", 16, 32, render=False)
    assert b["fps"] == 960.0 and b["limited_by"] == "decode_alone_fps" and b["model_alone_fps"] == 1100.0
    rows = [_row("classify", 16, f, r) for r, f in enumerate([864.0, 912.0, 768.0])]
    p = make_point(rows, bounds, reps_wanted=3)
    assert p["fps"] == {"median": 864.0, "min": 768.0, "max": 912.0, "n": 3}
    assert p["ratio_to_bound"]["median"] == pytest.approx(0.9, abs=1e-12)  # 864 / 960
    assert p["ratio_to_bound"]["min"] == pytest.approx(0.8, abs=1e-12)  # 768 / 960
    assert p["goal_met"] is True and p["cpu_goal_met"] is True and p["enough_reps"] is True
    assert p["variant"] == "auto" and p["stages_ms_per_frame"]["feeder"]["cpu_ms"] == pytest.approx(0.2, abs=1e-12)
    assert p["host"]["load1_before"]["median"] == 2.0 and p["host"]["cores"] == 16


def test_short_point_is_flagged_and_goals_listed():
    bounds = bound_medians({"model_only": {"people": {"32": [{"fps": 1000.0}]}}, "decode_alone": {}})
    rows = [_row("people", 32, 500.0, 0, cores=0.2)]
    p = make_point(rows, bounds, reps_wanted=3)
    assert p["enough_reps"] is False and p["goal_met"] is False and p["cpu_goal_met"] is False
    goals = goals_summary([p])
    assert [g["met"] for g in goals] == [False, False] and goals[0]["reps"] == 1


def test_group_rows_keeps_points_apart():
    rows = [_row("classify", 1, 10.0, 0, "auto=threaded-pairs"), _row("classify", 16, 9.0, 0),
            _row("classify", 1, 11.0, 1, "auto=threaded-pairs"), _row("classify", 16, 8.0, 0, "feed-pairs")]
    groups = group_rows(rows)
    assert [len(g) for g in groups] == [2, 1, 1]  # auto at 1 stream twice; auto and feed-pairs at 16 apart


def test_slim_wheel_drops_unused_members_and_their_record_lines(tmp_path):
    import zipfile

    from benchmarks.common.pipeline_gpu_prep import slim_wheel

    src = tmp_path / "w.whl"
    members = {"Pkg/__init__.py": b"x = 1\n", "Pkg/lib.so": b"\x7fELF" + bytes(range(256)),
               "samples/a.ipynb": b"{}", "benchmarks/b.py": b"", "pkg-1.data/data/src.tar.xz": b"zz"}
    record = "".join("%s,sha256=x,1\n" % n for n in members) + "pkg-1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(str(src), "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        z.writestr("pkg-1.dist-info/RECORD", record)
    out = tmp_path / "slim.whl"
    slim_wheel(src, out)
    with zipfile.ZipFile(str(out)) as z:
        assert sorted(z.namelist()) == ["Pkg/__init__.py", "Pkg/lib.so", "pkg-1.dist-info/RECORD"]
        assert z.read("Pkg/lib.so") == members["Pkg/lib.so"]  # byte for byte
        assert z.read("pkg-1.dist-info/RECORD").decode().splitlines() == [
            "Pkg/__init__.py,sha256=x,1", "Pkg/lib.so,sha256=x,1", "pkg-1.dist-info/RECORD,,"]
