"""Bounds, goal ratios, the table, the JSON and the plot of ``benchmarks/gpu_pipeline/pipeline_gpu.py``."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

GOALS = {"render_off_ratio": 0.9, "render_on_ratio": 0.8, "cores_per_30fps_stream": 0.1}
GOAL_STREAMS_RENDER_OFF = (1, 16)  # the render-off goal names 1 and 16 streams


def bucket(n: int) -> int:
    from jetforge.apps.pipeline.batching import bucket_for

    return bucket_for(min(n, 64), (1, 2, 4, 8, 16, 32, 64))


def add_bounds(res: Dict[str, Any]) -> None:
    """Each pipeline row gets its bound (the slower of model alone at its batch and decode alone of its N streams;
    render on: also the encoder pool alone) and its ratios against the goals."""
    enc = res.get("encode_alone") or {}
    for row in res["pipeline"]:
        n, model = row["streams"], row["model"]
        m = res["model_only"].get(model, {}).get(str(bucket(row.get("max_batch") or n)))
        d = decode_bound(res, n)
        parts = {"model_alone_fps": m["fps"] if m else None, "decode_alone_fps": d}
        if row["render"]:
            parts["encode_alone_fps"] = enc.get("fps")
        known = [v for v in parts.values() if v]
        row["bound"] = dict(parts, fps=min(known) if known else None,
                            limited_by=min(parts, key=lambda k: parts[k] or float("inf")) if known else None)
        row["ratio_to_bound"] = row["fps"] / row["bound"]["fps"] if row["bound"]["fps"] else None
        goal = GOALS["render_on_ratio"] if row["render"] else GOALS["render_off_ratio"]
        row["goal_ratio"] = goal
        row["goal_met"] = row["ratio_to_bound"] is not None and row["ratio_to_bound"] >= goal
        if not row["render"]:
            row["cpu_goal_met"] = row["cores_per_30fps_stream"] <= GOALS["cores_per_30fps_stream"]


def decode_bound(res: Dict[str, Any], n: int) -> Optional[float]:
    """NVDEC alone for N streams: the faster of the two ways it was measured in the run (one thread per stream in
    one process; worker processes, 4 streams each) - the hardware's rate is at least the faster one."""
    rates = [d["fps"] for d in (res["decode_alone"].get(str(n)), res.get("decode_alone_procs", {}).get(str(n))) if d]
    return max(rates) if rates else None


def goals_summary(res: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    for row in res["pipeline"]:
        if row["render"] or row["streams"] in GOAL_STREAMS_RENDER_OFF:
            out.append({"goal": "render %s ratio >= %.1f" % ("on" if row["render"] else "off", row["goal_ratio"]),
                        "model": row["model"], "streams": row["streams"], "ratio": row["ratio_to_bound"],
                        "met": row["goal_met"]})
        if not row["render"]:
            out.append({"goal": "render off <= 0.1 core per 30-FPS stream", "model": row["model"],
                        "streams": row["streams"], "cores": row["cores_per_30fps_stream"], "met": row["cpu_goal_met"]})
    return out


def report(res: Dict[str, Any], args: Any, tests: Dict[str, Any], machine: Dict[str, Any],
           seconds: float) -> Dict[str, Any]:
    add_bounds(res)
    return {"schema": 1, "benchmark": "pipeline_gpu", "dry_run": bool(args.dry_run), "machine": machine,
            "settings": {"streams": args.streams, "models": args.models, "seconds_per_config": args.seconds,
                         "variants": list(getattr(args, "variants", ["legacy"])),
                         "encoders": args.encoders, "batch_timeout_ms": args.batch_timeout_ms,
                         "stream_files": "720p H.264, 900 frames (30 s) each: people720.mp4, bbb720.mp4"},
            "gpu_tests": tests, "goals": GOALS, "goal_results": goals_summary(res), "results": res,
            "run_seconds": seconds,
            "notes": ["decode alone: NVDEC sessions of the same N streams, one thread each, start-up excluded; "
                      "where the ipc variants ran, also in worker processes (4 streams each, frames released at once: "
                      "decode_alone_procs); the bound takes the faster of the two",
                      "model alone: one static batch on device tensors, the session's CUDA graph of that size",
                      "CPU cores per stream: process CPU seconds (getrusage, all threads) per frame x 30",
                      "render on: frames copied back once (NV12) to CPU encoder worker processes (OpenCV mp4v, "
                      "segments of every stream dealt round robin to all workers, joined in order); its FPS counts "
                      "until the last frame is encoded (run + encoder drain), fps_until_queued is without the drain"]}


def table(doc: Dict[str, Any]) -> str:
    from jetforge.table import format_table

    res = doc["results"]
    rows = []
    for r in res["pipeline"]:
        b = r["bound"]
        rows.append([r["model"], r["streams"], "on" if r["render"] else "off", "%.0f" % r["fps"],
                     _f(b.get("model_alone_fps")), _f(b.get("decode_alone_fps")), _f(b.get("encode_alone_fps")),
                     _f(b["fps"]), _f(r["ratio_to_bound"], "%.2f"), "yes" if r["goal_met"] else "no",
                     "%.3f" % r["cores_per_30fps_stream"], _f(r["latency_p50_ms"]["median_stream"], "%.1f"),
                     _f(r["latency_p99_ms"]["worst_stream"], "%.1f"), "%.1f" % r["mean_batch"],
                     _f(r.get("cpu_ms_per_encoded_frame"), "%.2f"), r.get("variant", "legacy"), r["preprocess"]])
    head = ["model", "N", "render", "FPS", "model alone", "decode alone", "encode alone", "bound", "ratio", "goal",
            "cores/30fps", "p50 ms", "p99 ms (worst)", "batch", "enc CPU ms/f", "variant", "preprocess"]
    text = format_table(head, rows)
    stages = ["", "per-frame stage times (ms): wall / CPU / GPU"]
    for r in res["pipeline"]:
        parts = ["%s %.3f/%.3f/%s" % (k, r["stage_wall_ms_per_frame"][k], r["stage_cpu_ms_per_frame"][k],
                                      _f(r["stage_gpu_ms_per_frame"].get(k), "%.3f"))
                 for k in r["stage_wall_ms_per_frame"]]
        gpu_only = ["%s GPU %.3f" % (k, v) for k, v in r["stage_gpu_ms_per_frame"].items()
                    if k not in r["stage_wall_ms_per_frame"]]
        stages.append("  %s N=%d render %s %s: %s" % (r["model"], r["streams"], "on" if r["render"] else "off",
                                                      r.get("variant", "legacy"), ", ".join(parts + gpu_only)))
        launch = r.get("launch_parts_ms_per_batch")
        if launch:
            stages.append("      launch per batch (ms wall/CPU): " + ", ".join(
                "%s %.3f/%.3f" % (k, v["wall"], v["cpu"]) for k, v in launch.items()))
    pool = res.get("device_pool")
    if pool:
        stages.append("")
        stages.append("device pool (the GPU+DLA scheduler, %d sessions of %s standing in for the engines): %d streams "
                      "%.1f FPS, batches per session %s, stream order kept: %s"
                      % (pool["devices"], pool["model"], pool["streams"], pool["fps"], pool["batches_per_device"],
                         pool["order_ok"]))
    errors = ["", "errors: %s" % json.dumps(res["errors"])] if res["errors"] else []
    return "\n".join([text] + stages + errors)


def _f(v: Optional[float], fmt: str = "%.0f") -> str:
    return "-" if v is None else fmt % v


def _family(row: Dict[str, Any]) -> str:
    """A row's variant for the plot: ``auto=ipc-pairs`` and ``auto=threaded-pairs`` are one line, ``auto``."""
    return str(row.get("variant", "legacy")).split("=")[0]


def plot(doc: Dict[str, Any], path: Path) -> Optional[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    res = doc["results"]
    models = sorted({r["model"] for r in res["pipeline"]})
    if not models:
        return None
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        variants = sorted({_family(r) for r in res["pipeline"]})
        for render, style in ((False, "o-"), (True, "s--")):
            for variant in variants:
                rows = sorted((r for r in res["pipeline"] if r["model"] == model and r["render"] == render
                               and _family(r) == variant), key=lambda r: r["streams"])
                if rows:
                    ax.plot([r["streams"] for r in rows], [r["fps"] for r in rows], style,
                            label="pipeline, render %s%s" % ("on" if render else "off",
                                                             ", " + variant if len(variants) > 1 else ""))
        off = sorted((r for r in res["pipeline"] if r["model"] == model and not r["render"]),
                     key=lambda r: r["streams"])
        for key, style, label in (("model_alone_fps", ":", "model alone"), ("decode_alone_fps", "-.", "decode alone")):
            pts = [(r["streams"], r["bound"][key]) for r in off if r["bound"].get(key)]
            if pts:
                ax.plot(*zip(*pts), style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("streams")
        ax.set_ylabel("frames per second (all streams)")
        ax.set_title("%s, %s" % (model, doc["machine"].get("gpu", "CPU dry run")))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)
    return path


def write_outputs(doc: Dict[str, Any], out: Path, name: str) -> None:
    text = table(doc)
    print(text, flush=True)
    (out / (name + ".json")).write_text(json.dumps(doc, indent=1, default=str))
    (out / (name + ".txt")).write_text(text + "\n")
    plot(doc, out / (name + ".png"))
    print("wrote %s.{json,txt,png} under %s" % (name, out), flush=True)


__all__ = ["add_bounds", "goals_summary", "plot", "report", "table", "write_outputs"]
