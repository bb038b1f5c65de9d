"""Bounds, points (medians with spread), goal ratios, the table, the JSON and the plot of
``benchmarks/gpu_pipeline/pipeline_gpu.py``.

The script records every repetition raw (``results``: ``runs`` and ``bounds_runs``); this module turns them into
what the README quotes: per point the median of its repetitions with min and max, against the bound made of the
medians of the bound measurements of the same call (issue 29: one call's single number decided nothing)."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from benchmarks.common.pipeline_gpu_plan import (MIN_REPS, group_rows, median_spread, nested_medians,
                                                 rows_per_frame, scaled)

GOALS = {"render_off_ratio": 0.9, "render_on_ratio": 0.8, "cores_per_30fps_stream": 0.1}
SCHEMA = 2  # 2: points are medians of repetitions (issue 29); 1: one run per point


def bucket(n: int) -> int:
    """The padded batch of ``n`` frames (the pipeline's buckets, :data:`.pipeline_gpu_env.BUCKETS`)."""
    from benchmarks.common.pipeline_gpu_env import bucket as env_bucket

    return env_bucket(n)


def bound_medians(runs: Dict[str, Any]) -> Dict[str, Any]:
    """Each bound measurement's repetitions -> their FPS median and spread (``bounds_runs`` -> ``bounds``)."""
    out: Dict[str, Any] = {}
    for kind, per in runs.items():
        if kind == "model_only":
            out[kind] = {m: {b: median_spread(r["fps"] for r in reps) for b, reps in by.items()}
                         for m, by in per.items()}
        else:
            out[kind] = {k: median_spread(r["fps"] for r in reps) for k, reps in per.items()}
    return out


def _median(stats: Optional[Dict[str, Any]]) -> Optional[float]:
    return stats["median"] if stats else None


def point_bound(bounds: Dict[str, Any], model: str, n: int, batch: int, render: bool) -> Dict[str, Any]:
    """The slower of model alone at the point's batch and NVDEC alone of its N streams (the faster of the two ways
    that was measured: one thread a stream, or worker processes - the hardware's rate is at least that); render on:
    also the encoder pool alone.  Medians of the call's repetitions."""
    m = _median(bounds.get("model_only", {}).get(model, {}).get(str(bucket(batch))))
    decode = [_median(bounds.get(k, {}).get(str(n))) for k in ("decode_alone", "decode_alone_procs")]
    known_decode = [d for d in decode if d]
    parts: Dict[str, Optional[float]] = {"model_alone_fps": m,
                                         "decode_alone_fps": max(known_decode) if known_decode else None}
    if render:
        parts["encode_alone_fps"] = _median(bounds.get("encode_alone", {}).get(str(n)))
    known = {k: v for k, v in parts.items() if v}
    return dict(parts, fps=min(known.values()) if known else None,
                limited_by=min(known, key=lambda k: known[k]) if known else None)


def shared_bounds(beside_runs: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Dict[str, float]]:
    """``--decode-beside``'s repetitions ("<model> <N>" -> records) -> each engine's rate while the other runs flat
    out, medians: ``decode_fps`` (NVDEC of N streams beside the model), ``model_fps`` (the model beside NVDEC, in
    frames: its rows divided by the model's rows a frame) and ``fps``, the slower.  Why: the bound of the goal rows
    takes each engine alone; where the two slow each other that bound cannot be reached, and a pipeline at ~1x of
    this one is at what the shared hardware gives (both engines here run flat out, more than a pipeline needs of
    the one that does not limit it, so this is the lower of the two estimates)."""
    out: Dict[str, Dict[str, float]] = {}
    for key, reps in beside_runs.items():
        model = key.split()[0]
        decode = median_spread(r["fps"] for r in reps)["median"]
        model_fps = median_spread(r["model_fps"] for r in reps)["median"] / rows_per_frame(model)
        out[key] = {"decode_fps": decode, "model_fps": model_fps, "fps": min(decode, model_fps)}
    return out


def make_point(reps: List[Dict[str, Any]], bounds: Dict[str, Any], reps_wanted: int) -> Dict[str, Any]:
    """One point from its repetitions' rows: medians with min/max, the bound, the goals, the per-stage times (the
    per-key median over repetitions) and the host each repetition ran on."""
    first = reps[0]
    render = bool(first["render"])
    bound = point_bound(bounds, first["model"], first["streams"], first.get("max_batch") or first["streams"], render)
    fps = median_spread(r["fps"] for r in reps)
    ratio = scaled(fps, bound["fps"])
    cores = median_spread(r["cores_per_30fps_stream"] for r in reps)
    goal = GOALS["render_on_ratio"] if render else GOALS["render_off_ratio"]
    return {"model": first["model"], "streams": first["streams"], "render": render,
            "variant": str(first["variant"]).split("=")[0],
            "variant_used": sorted({str(r["variant"]) for r in reps}), "group": first.get("group", "goal"),
            "reps": len(reps), "reps_wanted": reps_wanted, "enough_reps": len(reps) >= min(MIN_REPS, reps_wanted),
            "fps": fps, "bound": bound, "ratio_to_bound": ratio, "goal_ratio": goal,
            "goal_met": None if ratio is None else ratio["median"] >= goal,
            "cores_per_30fps_stream": cores,
            "cpu_goal_met": None if render or cores is None else cores["median"] <= GOALS["cores_per_30fps_stream"],
            "latency_p99_ms_worst_stream": median_spread(r["latency_p99_ms"]["worst_stream"] for r in reps),
            "mean_batch": median_spread(r["mean_batch"] for r in reps), "max_batch": first.get("max_batch"),
            "preprocess": first.get("preprocess"), "ssd_decode": first.get("ssd_decode"),
            "source": first.get("source"),
            "cpu_ms_per_encoded_frame": median_spread(r.get("cpu_ms_per_encoded_frame") for r in reps),
            "stages_ms_per_frame": nested_medians([r.get("stages", {}) for r in reps]),
            "host": host_summary([r.get("host", {}) for r in reps]),
            "runs": [{"rep": r.get("rep"), "fps": r["fps"], "cores_per_30fps_stream": r["cores_per_30fps_stream"],
                      "frames": r["frames"], "wall_s": r["wall_s"], "order_ok": r.get("order_ok"),
                      "host": r.get("host")} for r in reps]}


def host_summary(hosts: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The CPU the repetitions ran on (model, cores) and the 1-minute load average before and after them."""
    known = [h for h in hosts if h]
    if not known:
        return {}
    return {"cpu": known[0].get("cpu"), "cores": known[0].get("cores"),
            "load1_before": median_spread(h["loadavg_before"][0] for h in known if h.get("loadavg_before")),
            "load1_after": median_spread(h["loadavg_after"][0] for h in known if h.get("loadavg_after"))}


def goals_summary(points: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The issue's goals, one line each, from the goal rows (the app's default path) and the render-on point."""
    out = []
    for p in points:
        out.append({"goal": "render %s ratio >= %.1f (median)" % ("on" if p["render"] else "off", p["goal_ratio"]),
                    "model": p["model"], "streams": p["streams"], "ratio": p["ratio_to_bound"], "reps": p["reps"],
                    "met": p["goal_met"]})
        if not p["render"]:
            out.append({"goal": "render off <= 0.1 core per 30-FPS stream (median)", "model": p["model"],
                        "streams": p["streams"], "cores": p["cores_per_30fps_stream"], "met": p["cpu_goal_met"]})
    return out


def report(res: Dict[str, Any], args: Any, tests: Dict[str, Any], machine: Dict[str, Any],
           seconds: float) -> Dict[str, Any]:
    """The committed JSON: settings, host, bounds (medians), goal points, exploratory points, skipped steps, the raw
    repetitions (``results``)."""
    bounds = bound_medians(res.get("bounds_runs", {}))
    points = [make_point(reps, bounds, args.reps) for reps in group_rows(res.get("runs", []))]
    shared = shared_bounds(res.get("bounds_runs", {}).get("decode_beside_model", {}))
    for p in points:
        key = "%s %d" % (p["model"], p["streams"])
        if key in shared and not p["render"]:
            p["shared_bound"] = shared[key]
            p["ratio_to_shared_bound"] = scaled(p["fps"], shared[key]["fps"])
    main = [p for p in points if p["group"] in ("goal", "render")]
    tiles = [p for p in points if p["group"] == "tiles"]
    return {"schema": SCHEMA, "benchmark": "pipeline_gpu", "dry_run": bool(args.dry_run), "machine": machine,
            "settings": {"streams": args.streams, "models": args.models, "reps": args.reps,
                         "seconds_per_point": args.seconds, "decode_seconds": args.decode_seconds,
                         "model_seconds": args.model_seconds, "default_variant": args.default_variant,
                         "exploratory_variants": list(args.exploratory),
                         "variant_streams": list(getattr(args, "variant_streams", []) or args.streams),
                         "render_on": bool(args.render_on),
                         "app_defaults": getattr(args, "app_defaults", {}), "budget_s": args.budget_s,
                         "encoders": args.encoders, "stream_files": "720p H.264, 900 frames (30 s): people720.mp4"},
            "gpu_tests": tests, "goals": GOALS, "goal_results": goals_summary(main + tiles), "bounds": bounds,
            "points": main, "tiles": tiles, "detector_check": res.get("detector_check", {}),
            "exploratory": [p for p in points if p["group"] == "exploratory"],
            "skipped": res.get("skipped", []), "errors": res.get("errors", []), "results": res,
            "run_seconds": seconds,
            "notes": ["every point: the median of its repetitions in this call, with min and max; repetitions of "
                      "different points interleave (rounds), so a drift of the host shows in the spread",
                      "bound: min(model alone at the point's batch, NVDEC alone of its N streams[, encoders alone]), "
                      "each the median of its repetitions in the same call; ratio spread = FPS min/max over that bound",
                      "decode alone: NVDEC sessions of the same N streams, one thread each, start-up excluded; also in "
                      "worker processes (4 streams each, frames released at once); the bound takes the faster",
                      "model alone: one static batch on device tensors, the session's CUDA graph of that size; the "
                      "model runs in a PyTorch CUDA-graph session standing in for the app's TensorRT engine",
                      "tiles (people-tilesN: `jetforge app people --detector-tiles N --decode gpu`): a frame is 1 + N^2 "
                      "input rows (the frame, then each tile, in blocks); batches as the app makes them (at most 32 "
                      "rows once padded); FPS and the model-alone bound count frames (the same rows / (1 + N^2)); "
                      "detector_check: each detector's GPU result (the SSD decoded as the app on a TensorRT engine) "
                      "against the CPU reference on the same decoded frames: the detector over the float64 reference "
                      "preprocessing, TiledPeopleDetector around it for the tiles",
                      "goal rows: the app's default host layout and options (variant auto = `jetforge app --decode "
                      "gpu`); exploratory variants are under 'exploratory', never goal rows",
                      "stages_ms_per_frame: launch/results/postprocess/sink as the app's metrics.json latency block "
                      "(its TaskOps and PipelineMetrics), feeder = the decode/feeder thread (NVDEC + ring copies) per "
                      "frame, launch_parts = the launch's own parts per batch",
                      "CPU cores per stream: process CPU seconds (getrusage, all threads) per frame x 30; host: CPU "
                      "model, usable cores, load average before and after each repetition"]}


def _f(v: Optional[float], fmt: str = "%.0f") -> str:
    return "-" if v is None else fmt % v


def _spread(s: Optional[Dict[str, Any]], fmt: str = "%.0f") -> str:
    if not s:
        return "-"
    return "%s [%s-%s]" % (fmt % s["median"], fmt % s["min"], fmt % s["max"])


def _stage(st: Dict[str, Any], name: str, key: str) -> Optional[float]:
    return st.get(name, {}).get(key)


def _wall_cpu(st: Dict[str, Any], name: str) -> str:
    return "%s/%s" % (_f(_stage(st, name, "mean_ms"), "%.2f"), _f(_stage(st, name, "cpu_ms"), "%.3f"))


def point_rows(points: List[Dict[str, Any]]) -> List[List[Any]]:
    rows = []
    for p in points:
        st, h, b = p["stages_ms_per_frame"], p["host"], p["bound"]
        load = "%s->%s" % (_f(_median(h.get("load1_before")), "%.1f"), _f(_median(h.get("load1_after")), "%.1f"))
        rows.append([p["model"], p["streams"], "on" if p["render"] else "off", "%d/%d" % (p["reps"], p["reps_wanted"]),
                     _spread(p["fps"]), _f(b["fps"]), (b["limited_by"] or "-").replace("_alone_fps", ""),
                     _spread(p["ratio_to_bound"], "%.2f"), {True: "yes", False: "no", None: "-"}[p["goal_met"]],
                     _spread(p["cores_per_30fps_stream"], "%.3f"), load,
                     _f(_stage(st, "feeder", "cpu_ms"), "%.3f"),
                     _wall_cpu(st, "launch"), _wall_cpu(st, "results"),
                     _f(_stage(st, "postprocess", "cpu_ms"), "%.3f"), ",".join(p["variant_used"])])
    return rows


HEAD = ["model", "N", "render", "reps", "FPS med [min-max]", "bound", "limited by", "ratio med [min-max]", "goal",
        "cores/30fps", "load1", "feeder CPU ms/f", "launch ms/CPU", "results ms/CPU", "post CPU ms", "variant"]


def table(doc: Dict[str, Any]) -> str:
    from jetforge.table import format_table

    m = doc["machine"]
    lines = ["host: %s, %s usable cores, GPU %s; every number a median of repetitions [min-max]"
             % (m.get("cpu", "?"), m.get("cpu_cores_usable", "?"), m.get("gpu", "none (dry run)")),
             format_table(HEAD, point_rows(doc["points"]))]
    if doc.get("tiles"):
        lines += ["", "person detector with tiles (--detector-tiles: 1 + N^2 rows a frame; FPS and bound in frames):",
                  format_table(HEAD, point_rows(doc["tiles"]))]
    for model, c in (doc.get("detector_check") or {}).items():
        whole = c.get("reference_people_whole_frame")
        lines.append("detector check %s (%d frames padded to %d, %s preprocessing, %s decode): %s; people %s vs "
                     "reference %s%s, max box %.3f px, max score %.4f (tolerance %s px, %s)"
                     % (model, len(c["frames"]), c["padded"], c["preprocess"], c["ssd_decode"],
                        "equal to the CPU reference" if c["equal"] else "DIFFERENT from the CPU reference",
                        c["people"], c["reference_people"], "" if whole is None else " (whole frame alone %s)" % whole,
                        c["max_box_px"], c["max_score"], c["tolerance"]["box_px"], c["tolerance"]["score"]))
    if doc["exploratory"]:
        lines += ["", "exploratory variants (not goal rows):", format_table(HEAD, point_rows(doc["exploratory"]))]
    b = doc["bounds"]
    lines += ["", "bounds (FPS, median [min-max]): " + "; ".join(
        ["model alone %s batch %s %s" % (mod, k, _spread(v)) for mod, by in b.get("model_only", {}).items()
         for k, v in by.items()]
        + ["%s %s streams %s" % (kind.replace("_", " "), k, _spread(v)) for kind in
           ("decode_alone", "decode_alone_procs", "decode_alone_feed", "decode_beside_model",
            "decode_beside_model_graph", "encode_alone")
           for k, v in b.get(kind, {}).items()])]
    runs = doc["results"].get("bounds_runs", {})
    beside = runs.get("decode_beside_model", {})
    for kind, how in (("decode_beside_model", "the model runs back to back, one batch a call"),
                      ("decode_beside_model_graph", "the same model work runs from one long CUDA graph, the host "
                                                    "all but idle")):
        if runs.get(kind):
            lines.append("%s (NVDEC alone while %s; medians): " % (kind.replace("_", " "), how) + "; ".join(
                _beside_text(key, reps) for key, reps in runs[kind].items()))
    if beside:
        shared = [p for p in doc["points"] + doc.get("tiles", []) + doc["exploratory"]
                  if p.get("ratio_to_shared_bound")]
        lines.append("against the shared bound (min of NVDEC beside the model and the model beside NVDEC, each the "
                     "other running flat out): " + "; ".join(
                         "%s %d streams %s %.0f FPS = %.2fx [%.2f-%.2f] of %.0f" % (
                             p["model"], p["streams"], p["variant"], p["fps"]["median"],
                             p["ratio_to_shared_bound"]["median"], p["ratio_to_shared_bound"]["min"],
                             p["ratio_to_shared_bound"]["max"], p["shared_bound"]["fps"]) for p in shared))
    pool = doc["results"].get("device_pool")
    if pool:
        lines.append("device pool (%d sessions of %s standing in for GPU + DLA): %d streams %.1f FPS, order kept %s"
                     % (pool["devices"], pool["model"], pool["streams"], pool["fps"], pool["order_ok"]))
    if doc["skipped"]:
        lines += ["", "skipped for time (--budget-s %s): %s" % (doc["settings"]["budget_s"], "; ".join(
            s["step"] for s in doc["skipped"]))]
    if doc["errors"]:
        lines += ["", "errors: %s" % json.dumps(doc["errors"])]
    return "\n".join(lines)


def _beside_text(key: str, reps: List[Dict[str, Any]]) -> str:
    """One ``--decode-beside`` key's medians; a tiled model's rows counted as frames (its rate and batch / rows)."""
    rows = rows_per_frame(key.split()[0])
    return "%s streams NVDEC %.0f FPS, model %.0f FPS at batch %d" % (
        key, median_spread(r["fps"] for r in reps)["median"],
        median_spread(r["model_fps"] for r in reps)["median"] / rows, reps[0]["batch"] // rows)


def plot(doc: Dict[str, Any], path: Path) -> Optional[Path]:
    """FPS medians (bars: min-max) against streams per model, with the bound's parts."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    points = doc["points"] + doc.get("tiles", []) + doc["exploratory"]
    models = sorted({p["model"] for p in points})
    if not models:
        return None
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        lines = sorted({(p["render"], p["variant"]) for p in points if p["model"] == model})
        for render, variant in lines:
            ps = sorted((p for p in points if p["model"] == model and p["render"] == render
                         and p["variant"] == variant and p["fps"]), key=lambda p: p["streams"])
            med = [p["fps"]["median"] for p in ps]
            err = [[m - p["fps"]["min"] for m, p in zip(med, ps)], [p["fps"]["max"] - m for m, p in zip(med, ps)]]
            ax.errorbar([p["streams"] for p in ps], med, yerr=err, fmt="s--" if render else "o-", capsize=3,
                        label="pipeline, render %s, %s" % ("on" if render else "off", variant))
        off = sorted((p for p in doc["points"] + doc.get("tiles", []) if p["model"] == model and not p["render"]),
                     key=lambda p: p["streams"])
        for key, style, label in (("model_alone_fps", ":", "model alone"), ("decode_alone_fps", "-.", "decode alone")):
            pts = [(p["streams"], p["bound"][key]) for p in off if p["bound"].get(key)]
            if pts:
                ax.plot(*zip(*pts), style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("streams")
        ax.set_ylabel("frames per second (all streams), median [min-max]")
        ax.set_title("%s, %s" % (model, doc["machine"].get("gpu", "CPU dry run")))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)
    return path


def write_outputs(doc: Dict[str, Any], out: Path, name: str) -> None:
    """``<name>.json``, ``.txt`` (the table) and ``.png`` under ``out``, each written atomically."""
    from jetforge.fileio import write_json_atomic, write_text_atomic

    text = table(doc)
    print(text, flush=True)
    write_json_atomic(out / (name + ".json"), json.loads(json.dumps(doc, default=_json_default)))
    write_text_atomic(out / (name + ".txt"), text + "\n")
    plot(doc, out / (name + ".png"))
    print("wrote %s.{json,txt,png} under %s" % (name, out), flush=True)


def report_partial(path: Path, args: Any, out: Path, died: Optional[str]) -> Dict[str, Any]:
    """The committed outputs of a call whose process died (a native crash the script could not catch) from the
    partial JSON it checkpointed after every step: ``args`` are the crashed call's flags, ``died`` what the log
    says killed it (None: the deaths are in its errors already, as ``--restarts`` records them).  Its repetitions
    are reported as they are (a point cut short shows fewer reps), marked partial."""
    from benchmarks.common.pipeline_gpu_resume import load_checkpoint

    data = load_checkpoint(path, "cannot report")
    res = data["results"]
    if died:
        res.setdefault("errors", []).append({"what": data.get("current") or "the process", "error": died})
    doc = report(res, args, data.get("gpu_tests", {}), data.get("machine", {}), float("nan"))
    doc["partial"] = True
    write_outputs(doc, out, Path(path).stem)
    return doc


def _json_default(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else str(value)


__all__ = ["GOALS", "SCHEMA", "bound_medians", "goals_summary", "host_summary", "make_point", "plot",
           "point_bound", "report", "report_partial", "shared_bounds", "table", "write_outputs"]
