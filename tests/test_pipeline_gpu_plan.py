"""The pure parts of benchmarks/gpu_pipeline/pipeline_gpu.py (issue 29): medians with spread, the plan's order, the
time-budget skip, and how repetitions become a point against its bound.  No timing, no GPU: every expected value is
worked out by hand from the inputs in the test (exact arithmetic on a few numbers; float comparisons to 1e-12)."""

from argparse import Namespace

import pytest

from benchmarks.common.pipeline_gpu_plan import (PlanSettings, Step, base_model, estimate_s, fits, group_rows,
                                                 known_model, median_spread, nested_medians, plan_steps,
                                                 rows_per_frame, scaled, tile_grid_of)
from benchmarks.common.pipeline_gpu_report import bound_medians, goals_summary, make_point, point_bound, report, table


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
                buckets_of=lambda n, v, m: min(32, 2 * n) if rows_per_frame(m) == 1 else min(4, 2 * n))
    base.update(kw)
    return PlanSettings(**base)


def test_plan_goal_rows_first_in_rounds_then_render_then_exploratory():
    steps = plan_steps(_settings(render_on=True, exploratory=["feed-pairs"]))
    groups = [s.group for s in steps]
    # every goal step comes before the detector's check against the CPU reference, then render, then exploratory
    assert groups == sorted(groups, key=["goal", "check", "render", "exploratory"].index)
    assert [(s.kind, s.model) for s in steps if s.group == "check"] == [("detector_check", "people")]
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
    """...and the detector's one check against the CPU reference (no option turns the check off)."""
    steps = plan_steps(_settings(decode_procs=False))
    assert {s.group for s in steps} == {"goal", "check"}
    assert [s.kind for s in steps if s.group == "check"] == ["detector_check"]
    assert not any(s.kind == "decode_alone_procs" for s in steps)


def test_tiled_model_names():
    assert [tile_grid_of(m) for m in ("people-tiles2", "people-tiles4", "people", "classify")] == [2, 4, 0, 0]
    assert base_model("people-tiles2") == "people" and base_model("classify") == "classify"
    assert rows_per_frame("people-tiles2") == 5 and rows_per_frame("people-tiles3") == 10
    assert rows_per_frame("people") == 1
    assert all(known_model(m) for m in ("classify", "people", "people-tiles2"))
    assert not any(known_model(m) for m in ("people-tiles1", "people-tiles5", "classify-tiles2", "ssd"))


def test_tiles_come_after_the_goal_rows_which_stay_as_they_were():
    """With people-tiles2 the goal rows are step for step the plan without it; then each detector's check against the
    CPU reference once (the plain and the tiled), the tiled detector's rounds (model alone at its own batches, its
    four points), then render on and the exploratory variants, neither of which runs the tiled model."""
    plain = plan_steps(_settings())
    steps = plan_steps(_settings(models=["classify", "people", "people-tiles2"], render_on=True,
                                 exploratory=["feed-pairs"]))
    groups = [s.group for s in steps]
    assert groups == sorted(groups, key=["goal", "check", "tiles", "render", "exploratory"].index)
    assert [s for s in steps if s.group == "goal"] == [s for s in plain if s.group == "goal"]
    assert [s for s in steps if s.group == "check"] == [Step("detector_check", m, None, 0, "check")
                                                        for m in ("people", "people-tiles2")]
    tiles = [s for s in steps if s.group == "tiles"]
    assert [s.kind for s in tiles] == (["model_only"] + ["pipeline"] * 4) * 3
    # its batches: buckets_of(n, variant, model) for the tiled model (2n capped at 4 frames -> 2, 4)
    assert {s.arg for s in tiles if s.kind == "model_only"} == {(2, 4)}
    assert [s.arg for s in tiles if s.kind == "pipeline"][:4] == [(n, False, "auto") for n in (1, 4, 16, 32)]
    assert [s.rep for s in tiles] == [0] * 5 + [1] * 5 + [2] * 5
    assert all(s.model != "people-tiles2" for s in steps if s.group in ("goal", "render", "exploratory"))


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


def test_tiled_point_against_its_per_frame_bound_in_the_report():
    """A tiled point's bound is its model alone at its padded batch of frames (stored per frame: rows / 5) against
    NVDEC alone; the report puts it in its own list and table with the check's line."""
    bounds = {"model_only": {"people-tiles2": {"4": [{"fps": 200.0}, {"fps": 220.0}, {"fps": 210.0}]}},
              "decode_alone": {"16": [{"fps": 900.0}]}}
    rows = [dict(_row("people-tiles2", 16, f, r), max_batch=4, group="tiles") for r, f in enumerate([189.0, 168.0,
                                                                                                   199.5])]
    check = {"people": [3, 3, 3], "reference_people": [3, 3, 3], "reference_people_whole_frame": [2, 2, 3],
             "max_box_px": 0.01, "max_score": 1e-4, "tolerance": {"box_px": 0.5, "score": 0.005}, "equal": True,
             "frames": [0, 1, 2], "padded": 4, "preprocess": "nvrtc-kernel", "ssd_decode": "gpu"}
    args = Namespace(dry_run=False, streams=[16], models=["people-tiles2"], reps=3, seconds=3.0, decode_seconds=3.0,
                     model_seconds=0.5, default_variant="auto", exploratory=[], render_on=False, budget_s=420.0,
                     encoders=8)
    doc = report({"bounds_runs": bounds, "runs": rows, "detector_check": {"people-tiles2": check}}, args, {}, {}, 1.0)
    assert doc["points"] == [] and len(doc["tiles"]) == 1
    p = doc["tiles"][0]
    assert p["bound"]["fps"] == 210.0 and p["bound"]["limited_by"] == "model_alone_fps"  # median 210 < 900
    assert p["ratio_to_bound"]["median"] == pytest.approx(0.9, abs=1e-12)  # 189 / 210
    assert p["ratio_to_bound"]["min"] == pytest.approx(0.8, abs=1e-12)  # 168 / 210
    assert [g["model"] for g in doc["goal_results"]] == ["people-tiles2"] * 2
    text = table(doc)
    assert "person detector with tiles" in text and "people-tiles2  16" in text
    assert "detector check people-tiles2 (3 frames padded to 4, nvrtc-kernel preprocessing, gpu decode): equal to " \
           "the CPU reference" in text


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


def test_an_untimed_variant_is_its_own_point_with_the_same_layout():
    """``--variants auto-untimed``: the default layout without the app's per-frame stage timing (the measurement
    harness's own A/B) -- the same decode layout as ``auto`` for every stream count, its repetitions never merged into
    the goal rows' point, and an unknown base name refused."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_pipeline" / "pipeline_gpu.py"
    spec = importlib.util.spec_from_file_location("pipeline_gpu_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for n in (1, 4, 16, 32):
        assert module.resolve_variant("auto-untimed", n) == module.resolve_variant("auto", n)
    assert module.split_untimed("feed-pairs-untimed") == ("feed-pairs", False)
    assert module.split_untimed("auto") == ("auto", True)
    timed = {"model": "classify", "streams": 16, "render": False, "variant": module.variant_label("auto", 16)}
    untimed = dict(timed, variant=module.variant_label("auto-untimed", 16))
    assert untimed["variant"].startswith("auto-untimed=") and len(group_rows([timed, untimed])) == 2
    with pytest.raises(SystemExit):
        module.parse_args(["--variants", "nosuch-untimed"])


def test_plan_variant_streams_limit_only_the_exploratory_rows():
    """``--variant-streams 16,32``: the variants' points and their model-alone bound at those stream counts only;
    the goal rows keep every stream count."""
    steps = plan_steps(_settings(exploratory=["feed-pairs-fine4"], variant_streams=[16, 32]))
    goal_pipes = {s.arg[0] for s in steps if s.group == "goal" and s.kind == "pipeline"}
    assert goal_pipes == {1, 4, 16, 32}
    var = [s for s in steps if s.group == "exploratory"]
    assert {s.arg[0] for s in var if s.kind == "pipeline"} == {16, 32}
    assert len([s for s in var if s.kind == "pipeline"]) == 2 * 2 * 3  # 2 models x 2 stream counts x 3 reps
    # model alone at the buckets of 16 and 32 streams only (min(32, 2n) -> 32 for both: not 2 and 8)
    assert {(s.model, s.arg) for s in var if s.kind == "model_only"} == {("classify", (32,)), ("people", (32,))}
    # empty: every stream count, as before
    every = plan_steps(_settings(exploratory=["feed-pairs-fine4"]))
    assert {s.arg[0] for s in every if s.group == "exploratory" and s.kind == "pipeline"} == {1, 4, 16, 32}


def test_plan_variants_render_on_beside_the_default_when_asked():
    """--render-on with --variants: each variant also renders at the render-on stream count (16), in the exploratory
    group after the default path's render-on rounds, so a render-side change (the copy back) has its A/B."""
    steps = plan_steps(_settings(render_on=True, exploratory=["feed-pairs-stackcopy"], variant_streams=[16]))
    on = [s for s in steps if s.kind == "pipeline" and s.arg[1] is True]
    assert {(s.group, s.arg[2]) for s in on} == {("render", "auto"), ("exploratory", "feed-pairs-stackcopy")}
    assert all(s.arg[0] == 16 for s in on)
    assert len([s for s in on if s.group == "exploratory"]) == 2 * 3  # 2 models x 3 repetitions
    last_render = max(i for i, s in enumerate(steps) if s.group == "render")
    assert all(i > last_render for i, s in enumerate(steps) if s.group == "exploratory")
    assert not [s for s in plan_steps(_settings(exploratory=["feed-pairs-stackcopy"])) if s.kind == "pipeline"
                and s.arg[1] is True]  # no --render-on: no render-on step at all


def test_plan_decode_feed_runs_at_the_variant_streams_before_the_variants():
    """``--decode-feed``: NVDEC alone the feed layout's way, a repetition per round at ``variant_streams`` only, in
    the exploratory group ahead of the variants' points; never without the flag, and never a goal-row bound."""
    steps = plan_steps(_settings(decode_feed=True, exploratory=["feed-pairs-buf32"], variant_streams=[16]))
    feed = [s for s in steps if s.kind == "decode_alone_feed"]
    assert [(s.arg, s.rep, s.group) for s in feed] == [(16, 0, "exploratory"), (16, 1, "exploratory"),
                                                        (16, 2, "exploratory")]
    first_variant = min(i for i, s in enumerate(steps) if s.kind == "pipeline" and s.group == "exploratory")
    assert max(steps.index(s) for s in feed) < first_variant
    assert not any(s.kind == "decode_alone_feed" for s in plan_steps(_settings(variant_streams=[16])))
    # not part of any point's bound: point_bound reads NVDEC alone and its worker-process form only
    b = point_bound({"decode_alone": {"16": {"median": 900.0}}, "decode_alone_feed": {"16": {"median": 500.0}},
                     "model_only": {"classify": {"32": {"median": 2000.0}}}}, "classify", 16, 32, False)
    assert b["fps"] == 900.0 and b["limited_by"] == "decode_alone_fps"


def test_plan_decode_beside_runs_each_model_at_the_variant_streams():
    """``--decode-beside``: NVDEC alone beside each model (the tiled detector too, after the others), a repetition
    per round at ``variant_streams`` only, exploratory; absent without the flag."""
    steps = plan_steps(_settings(decode_beside=True, variant_streams=[16, 32]))
    beside = [(s.model, s.arg, s.rep) for s in steps if s.kind == "decode_beside_model"]
    assert beside == [(m, n, r) for r in range(3) for m in ("classify", "people") for n in (16, 32)]
    tiled = plan_steps(_settings(models=["people", "people-tiles2"], decode_beside=True, variant_streams=[1, 4]))
    assert [(s.model, s.arg) for s in tiled if s.kind == "decode_beside_model" and s.rep == 0] == [
        ("people", 1), ("people", 4), ("people-tiles2", 1), ("people-tiles2", 4)]
    assert all(s.group == "exploratory" for s in steps if s.kind == "decode_beside_model")
    assert not any(s.kind == "decode_beside_model" for s in plan_steps(_settings(variant_streams=[16])))


def _args(**kw):
    base = dict(dry_run=False, streams=[16], models=["classify"], reps=3, seconds=3.0, decode_seconds=3.0,
                model_seconds=0.5, default_variant="auto", exploratory=[], render_on=False, budget_s=420.0, encoders=8)
    return Namespace(**dict(base, **kw))


def test_shared_bound_is_the_slower_engine_beside_the_other_and_points_get_their_ratio_to_it():
    """--decode-beside's records -> per "<model> <N>": NVDEC's median beside the model, the model's median beside
    NVDEC (in frames: a tiled model's rows / 5) and the slower; a render-off point at that N gets its ratio to it."""
    from benchmarks.common.pipeline_gpu_report import shared_bounds

    beside = {"classify 16": [{"fps": 860.0, "model_fps": 1000.0, "batch": 32}, {"fps": 880.0, "model_fps": 1040.0,
                                                                                 "batch": 32},
                              {"fps": 870.0, "model_fps": 1020.0, "batch": 32}],
              "people-tiles2 16": [{"fps": 800.0, "model_fps": 1000.0, "batch": 4}]}
    shared = shared_bounds(beside)
    assert shared["classify 16"] == {"decode_fps": 870.0, "model_fps": 1020.0, "fps": 870.0}
    assert shared["people-tiles2 16"] == {"decode_fps": 800.0, "model_fps": 200.0, "fps": 200.0}  # 1000 rows / 5
    bounds = {"model_only": {"classify": {"32": [{"fps": 1200.0}]}}, "decode_alone": {"16": [{"fps": 1000.0}]},
              "decode_beside_model": beside}
    rows = [_row("classify", 16, f, r) for r, f in enumerate([870.0, 861.3, 878.7])]
    doc = report({"bounds_runs": bounds, "runs": rows}, _args(), {}, {}, 1.0)
    p = doc["points"][0]
    assert p["ratio_to_bound"]["median"] == pytest.approx(0.87, abs=1e-12)  # 870 / min(1200, 1000)
    assert p["ratio_to_shared_bound"]["median"] == pytest.approx(1.0, abs=1e-12)  # 870 / 870
    assert p["ratio_to_shared_bound"]["min"] == pytest.approx(0.99, abs=1e-12)  # 861.3 / 870
    assert "classify 16 streams auto 870 FPS = 1.00x [0.99-1.01] of 870" in table(doc)


def test_report_partial_turns_a_died_calls_checkpoint_into_its_outputs_marked_partial(tmp_path):
    """A checkpointed partial JSON (what the script writes after every step) -> json/txt/png beside it, the points
    as far as they got, the death recorded as an error; anything else is refused by name."""
    import json

    from benchmarks.common.pipeline_gpu_report import report_partial

    bounds = {"model_only": {"classify": {"32": [{"fps": 1200.0}]}}, "decode_alone": {"16": [{"fps": 1000.0}]}}
    rows = [_row("classify", 16, f, r) for r, f in enumerate([900.0, 880.0])]
    path = tmp_path / "gpu_x_gpu-path.json"
    path.write_text(json.dumps({"partial": True, "machine": {"gpu": "G"}, "gpu_tests": {"returncode": 0},
                                "results": {"bounds_runs": bounds, "runs": rows, "errors": []}}))
    doc = report_partial(path, _args(), tmp_path, "malloc(): corrupted")
    assert doc["partial"] is True and doc["errors"] == [{"what": "the process", "error": "malloc(): corrupted"}]
    assert doc["points"][0]["reps"] == 2 and doc["points"][0]["fps"]["median"] == 890.0
    assert json.loads(path.read_text())["partial"] is True and (tmp_path / "gpu_x_gpu-path.txt").is_file()
    (tmp_path / "done.json").write_text(json.dumps({"schema": 2, "points": []}))
    with pytest.raises(SystemExit, match="not a partial pipeline_gpu JSON"):
        report_partial(tmp_path / "done.json", _args(), tmp_path, "x")


def test_plan_decode_beside_graph_runs_beside_the_one_call_form_in_each_round():
    """``--decode-beside-graph``: NVDEC beside the model run from one long CUDA graph, at ``variant_streams``, in the
    same rounds as ``--decode-beside``'s steps (each pair side by side), exploratory; it also runs on its own."""
    steps = plan_steps(_settings(decode_beside=True, decode_beside_graph=True, variant_streams=[16]))
    pairs = [(s.kind, s.model, s.rep) for s in steps if s.kind.startswith("decode_beside")]
    assert pairs == [(k, m, r) for r in range(3) for m in ("classify", "people")
                     for k in ("decode_beside_model", "decode_beside_model_graph")]
    alone = [s for s in plan_steps(_settings(decode_beside_graph=True, variant_streams=[16]))
             if s.kind.startswith("decode_beside")]
    assert {s.kind for s in alone} == {"decode_beside_model_graph"} and len(alone) == 6
    assert all(s.group == "exploratory" for s in alone)



def test_a_hostdecode_variant_runs_only_the_detector_and_names_its_layout():
    """``--variants auto-hostdecode``: the detector's boxes decoded on the host beside the goal rows, which decode them
    on the GPU as the app on a TensorRT engine does; MobileNetV2 has nothing to decode and is left out.  The suffix combines with
    ``-untimed`` in either order and resolves to the app's layout."""
    from benchmarks.common.pipeline_gpu_variants import resolve_variant, split_variant, variant_label

    steps = plan_steps(_settings(exploratory=["auto-hostdecode"], variant_streams=[16]))
    runs = {(s.model, s.arg) for s in steps if s.kind == "pipeline" and s.group == "exploratory"}
    assert runs == {("people", (16, False, "auto-hostdecode"))}
    assert split_variant("auto-hostdecode") == ("auto", True, True)
    assert split_variant("auto-untimed-hostdecode") == split_variant("auto-hostdecode-untimed") == ("auto", False, True)
    assert split_variant("feed-pairs") == ("feed-pairs", True, False)
    assert resolve_variant("auto-hostdecode", 16) == "feed-pairs"
    assert variant_label("auto-hostdecode", 16) == "auto-hostdecode=feed-pairs"


def test_the_decoder_priority_variant_of_the_one_stream_layout(monkeypatch):
    """``threaded-pairs-decprio`` is the app's 1-stream layout with one change, the ThreadedDecoders' own GPU work
    on a stream of the device's greatest priority; the sources it opens hand each decoder such a stream (CUDA over
    host memory, tests/standins; the decoder a stand-in that records what it was given)."""
    from benchmarks.common.pipeline_gpu_measure import open_sources
    from benchmarks.common.pipeline_gpu_variants import VARIANTS
    from jetforge.apps.video.sources.gpu import decoder_pool, nvdec_threaded
    from jetforge.assets import asset_path
    from jetforge.runtime.cuda import bindings
    from tests.standins import cuda_runtime_standin
    from tests.standins.fake_nvdec import FakeNvDecoder, FakeThreadedDecoder

    changed = {k: v for k, v in VARIANTS["threaded-pairs-decprio"].items() if VARIANTS["threaded-pairs"].get(k) != v}
    assert changed == {"decoder_priority": "high"}
    made = []

    class Recording(FakeThreadedDecoder):
        def __init__(self, *args, **kwargs):
            made.append(kwargs)
            super().__init__(*args, **kwargs)

    codec = type("Codec", (), {"ThreadedDecoder": Recording, "CreateDemuxer": FakeNvDecoder.CreateDemuxer})
    pool = decoder_pool.ThreadedDecoderPool()  # the sources' closes pool their decoders here, drained below
    monkeypatch.setattr(nvdec_threaded, "POOL", pool)
    api = cuda_runtime_standin.make_module()
    previous = bindings.use_runtime_api(api)
    try:
        sources = open_sources([asset_path("opencv_samples", "vtest.avi")], 2, codec, keep=None, threaded=True,
                               decoder_priority="high")
        assert [s.options.decoder_priority for s in sources] == ["high", "high"]
        assert len(made) == 2 and all(isinstance(k.get("cuda_stream"), int) and k["cuda_stream"] for k in made)
        for s in sources:
            s.close()
        assert pool.drain() == 2  # ended, and their streams closed, while the stand-in is still in place
    finally:
        bindings.use_runtime_api(previous)
