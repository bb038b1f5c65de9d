"""The GPU-path benchmark's points across several device calls on one kind of GPU.

Why: issue 29 found the spread between device calls (and hosts) as large as the remaining gap to the goals, so one
call's number decides nothing.  ``pipeline_gpu.py`` gives each point as the median of its repetitions inside one
call; this script puts several such calls side by side and gives, per point, the number the README quotes: the
median of the calls' medians, with the min-max over every repetition of every call.

    .venv/bin/python benchmarks/gpu_pipeline/across_calls.py results/A.json results/B.json results/C.json \\
        --tag gpu-path-across-calls

Points: the goal rows (render off, the app's default path), the render-on rows and the detector's tiles; the
exploratory variants are left out (they are not the app's path).  A goal is met when the median of the call medians
reaches it; how many calls met it on their own is given beside it.  The calls must come from one kind of GPU
(their hosts may differ: each call's CPU and load are listed).  Writes ``<gpu>_<date>_<tag>.{json,txt,png}``
next to the first input (``--out`` elsewhere); the date is the inputs' (their file names), else today.
"""

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import gpu_slug, result_name, today, use_checkout  # noqa: E402
from benchmarks.common.pipeline_gpu_plan import median_spread  # noqa: E402

use_checkout(subprocesses=False)

from jetforge.errors import InputFileError  # noqa: E402

SCHEMA = 1
DATE_IN_NAME = re.compile(r"_(\d{4}-\d{2}-\d{2})(_|\.)")
Key = Tuple[str, int, bool]  # (model, streams, render)


def load_call(path: Path) -> Dict[str, Any]:
    """One ``pipeline_gpu.py`` result (schema 2: medians of repetitions), checked enough to be summarised."""
    try:
        doc = json.loads(path.read_text())
    except OSError as err:
        raise InputFileError("cannot read %s: %s" % (path, err.strerror or err),
                             hint="give the JSON files pipeline_gpu.py wrote") from None
    except ValueError as err:
        raise InputFileError("%s is not JSON (%s)" % (path, err), hint="give the JSON files pipeline_gpu.py wrote") \
            from None
    if not isinstance(doc, dict) or doc.get("benchmark") != "pipeline_gpu" or doc.get("schema") != 2:
        raise InputFileError("%s is not a pipeline_gpu.py result with repetitions (schema 2)" % path,
                             hint="give results written by pipeline_gpu.py since 2026-12-07 (schema 2)")
    if doc.get("dry_run"):
        raise InputFileError("%s is a CPU dry run, not a device call" % path,
                             hint="give the results of device calls")
    return doc


def call_points(doc: Dict[str, Any]) -> Dict[Key, Dict[str, Any]]:
    """A call's goal, render-on and tiles points by (model, streams, render)."""
    return {(p["model"], int(p["streams"]), bool(p["render"])): p
            for p in list(doc.get("points", [])) + list(doc.get("tiles", [])) if p.get("ratio_to_bound")}


def rep_ratios(point: Dict[str, Any]) -> List[float]:
    """Each repetition's FPS over the point's bound (the bound is the same call's medians, as in the point)."""
    bound = point["bound"]["fps"]
    return [r["fps"] / bound for r in point.get("runs", []) if r.get("fps") is not None and bound]


def _stages(point: Dict[str, Any]) -> Dict[str, Optional[float]]:
    stages = point.get("stages_ms_per_frame") or {}
    launch, results, feeder = stages.get("launch") or {}, stages.get("results") or {}, stages.get("feeder") or {}
    return {"feeder_cpu_ms_per_frame": feeder.get("cpu_ms"), "launch_ms": launch.get("mean_ms"),
            "launch_cpu_ms": launch.get("cpu_ms"), "results_ms": results.get("mean_ms"),
            "results_cpu_ms": results.get("cpu_ms"), "mean_batch": (point.get("mean_batch") or {}).get("median")}


#: what a detector point's ``ssd_decode`` was before the field existed: every device call until 2026-12-08 decoded
#: the SSD's boxes with the GPU kernel, synchronously in the results thread
EARLIER_SSD_DECODE = "gpu kernel in the results thread (before 2026-12-08)"


def ssd_decode_of(point: Dict[str, Any]) -> Optional[str]:
    """How a point decoded the detector's boxes (None for a model without SSD outputs)."""
    if point.get("ssd_decode"):
        return str(point["ssd_decode"])
    return EARLIER_SSD_DECODE if str(point.get("model", "")).startswith("people") else None


def check_same_decoding(present: Sequence[Any]) -> None:
    """The calls of one point must have decoded the detector's boxes the same way: a median over different paths
    would describe none of them."""
    ways = sorted({str(ssd_decode_of(p)) for _, p in present})
    if len(ways) > 1:
        raise InputFileError("the calls decoded %s's boxes in different ways (%s)" % (present[0][1]["model"],
                                                                                     "; ".join(ways)),
                             hint="summarise the calls made with the same code path (see ssd_decode in each "
                                  "result)")


def summarise(calls: Sequence[Dict[str, Any]], names: Sequence[str]) -> List[Dict[str, Any]]:
    """Per point: each call's median [min-max], the median of the call medians, the min-max of every repetition."""
    per_call = [call_points(doc) for doc in calls]
    keys: List[Key] = []
    for points in per_call:
        keys += [k for k in points if k not in keys]
    rows = []
    for key in keys:
        present = [(name, points[key]) for name, points in zip(names, per_call) if key in points]
        check_same_decoding(present)
        goal = present[0][1]["goal_ratio"]
        call_medians = [p["ratio_to_bound"]["median"] for _, p in present]
        of_medians = median_spread(call_medians)
        cores = median_spread((p.get("cores_per_30fps_stream") or {}).get("median") for _, p in present)
        rows.append({
            "model": key[0], "streams": key[1], "render": key[2], "group": present[0][1].get("group", "goal"),
            "ssd_decode": ssd_decode_of(present[0][1]),
            "calls": len(present), "goal_ratio": goal,
            "ratio_median_of_call_medians": of_medians["median"],
            "ratio_call_medians": of_medians,
            "ratio_every_rep": median_spread(x for _, p in present for x in rep_ratios(p)),
            "goal_met": of_medians["median"] >= goal,
            "calls_meeting_goal": sum(m >= goal for m in call_medians),
            "shared_ratio_call_medians": median_spread((p.get("ratio_to_shared_bound") or {}).get("median")
                                                       for _, p in present),
            "cores_per_30fps_stream_median_of_call_medians": cores["median"] if cores else None,
            "cpu_goal_met": None if key[2] or cores is None else cores["median"] <= 0.1,
            "per_call": [{"call": name, "ratio": p["ratio_to_bound"], "fps": p["fps"], "bound_fps": p["bound"]["fps"],
                          "limited_by": p["bound"].get("limited_by"), "variant_used": p.get("variant_used"),
                          "reps": p.get("reps"), "stages": _stages(p),
                          "ratio_to_shared_bound": p.get("ratio_to_shared_bound"),
                          "cores_per_30fps_stream": (p.get("cores_per_30fps_stream") or {}).get("median")}
                         for name, p in present]})
    return rows


def calls_info(calls: Sequence[Dict[str, Any]], names: Sequence[str]) -> List[Dict[str, Any]]:
    """Each call's host (CPU, cores, load before and after the call) and what went wrong in it."""
    out = []
    for name, doc in zip(names, calls):
        m = doc.get("machine", {})
        out.append({"call": name, "gpu": m.get("gpu"), "cpu": m.get("cpu"), "cores": m.get("cpu_cores_usable"),
                    "loadavg_start": m.get("loadavg_start"), "loadavg_end": m.get("loadavg_end"),
                    "errors": doc.get("errors", []), "skipped": [s.get("step") for s in doc.get("skipped", [])]})
    return out


def table(doc: Dict[str, Any]) -> str:
    head = "%-14s %3s %-6s %5s %-18s %-18s %-10s %-9s %-7s %-6s  %s" % (
        "model", "N", "render", "calls", "median of medians", "every rep min-max", "goal", "calls met", "shared",
        "cores", "each call: median [min-max]")
    lines = ["%s; %d calls; a point's number is the median of the calls' medians (each call: the median of its "
             "repetitions)" % (doc["gpu"], len(doc["calls"]))]
    lines += ["  %s: %s, %s cores, load %s -> %s%s" % (
        c["call"], c["cpu"], c["cores"], _load(c["loadavg_start"]), _load(c["loadavg_end"]),
        "; errors: %s" % "; ".join(e.get("error", "") for e in c["errors"]) if c["errors"] else "")
        for c in doc["calls"]]
    lines += ["shared: the median of the calls' ratios to the shared bound (NVDEC and the model each beside the other "
              "running flat out, --decode-beside) / how many calls measured it", "", head, "-" * len(head)]
    for r in doc["points"]:
        every = r["ratio_every_rep"]
        shared = r["shared_ratio_call_medians"]
        lines.append("%-14s %3d %-6s %5d %-18s %-18s %-10s %-9s %-7s %-6s  %s" % (
            r["model"], r["streams"], "on" if r["render"] else "off", r["calls"],
            "%.2f" % r["ratio_median_of_call_medians"], "[%.2f-%.2f]" % (every["min"], every["max"]) if every else "-",
            ">= %.1f %s" % (r["goal_ratio"], "yes" if r["goal_met"] else "no"),
            "%d of %d" % (r["calls_meeting_goal"], r["calls"]),
            "%.2f/%d" % (shared["median"], shared["n"]) if shared else "-",
            "%.3f" % r["cores_per_30fps_stream_median_of_call_medians"]
            if r["cores_per_30fps_stream_median_of_call_medians"] is not None else "-",
            "  ".join("%.2f [%.2f-%.2f]" % (c["ratio"]["median"], c["ratio"]["min"], c["ratio"]["max"])
                      for c in r["per_call"])))
    return "\n".join(lines)


def _short(name: str) -> str:
    """A call's file stem without its ``<device>_<date>_`` (the plot's legend)."""
    return DATE_IN_NAME.split(name)[-1] or name


def _load(values: Optional[Sequence[float]]) -> str:
    return "%.1f" % values[0] if values else "-"


def plot(doc: Dict[str, Any], path: Path) -> Optional[Path]:
    """Ratio to the bound against streams, one panel a model: each call's median [min-max] side by side, the median
    of the medians as a bar, the goal as a line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    models = list(dict.fromkeys(r["model"] for r in doc["points"]))
    if not models:
        return None
    names = [c["call"] for c in doc["calls"]]
    fig, axes = plt.subplots(1, len(models), figsize=(5.5 * len(models), 4.2), squeeze=False, sharey=True)
    for ax, model in zip(axes[0], models):
        rows = [r for r in doc["points"] if r["model"] == model]
        xs = sorted({(r["render"], r["streams"]) for r in rows})
        pos = {x: i for i, x in enumerate(xs)}
        for j, name in enumerate(names):
            pts = [(pos[(r["render"], r["streams"])] + 0.12 * (j - (len(names) - 1) / 2), c["ratio"])
                   for r in rows for c in r["per_call"] if c["call"] == name]
            if pts:
                med = [q["median"] for _, q in pts]
                ax.errorbar([x for x, _ in pts], med, fmt="o", capsize=2, ms=4, label=_short(name),
                            yerr=[[m - q["min"] for m, (_, q) in zip(med, pts)],
                                  [q["max"] - m for m, (_, q) in zip(med, pts)]])
        for r in rows:
            x = pos[(r["render"], r["streams"])]
            ax.hlines(r["ratio_median_of_call_medians"], x - 0.3, x + 0.3, colors="k", lw=2)
            ax.hlines(r["goal_ratio"], x - 0.4, x + 0.4, colors="r", linestyles="dotted")
        ax.set_xticks(range(len(xs)))
        ax.set_xticklabels(["%d%s" % (n, " on" if on else "") for on, n in xs])
        ax.set_xlabel("streams (\"on\": render on)")
        ax.set_title(model)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("ratio to the bound")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("GPU video path across %d calls, %s: dots each call's median [min-max], black the median of the "
                 "calls' medians, red dotted the goal" % (len(names), doc["gpu"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)
    return path


def build(paths: Sequence[Path]) -> Dict[str, Any]:
    """The summary of ``paths`` (one kind of GPU, at least two calls)."""
    if len(paths) < 2:
        raise InputFileError("one call gives nothing to compare: %d file given" % len(paths),
                             hint="give two or more pipeline_gpu.py results of the same GPU")
    calls = [load_call(p) for p in paths]
    gpus = sorted({str((doc.get("machine") or {}).get("gpu")) for doc in calls})
    if len(gpus) != 1:
        raise InputFileError("the calls ran on different GPUs (%s)" % ", ".join(gpus),
                             hint="summarise the calls of one kind of GPU at a time")
    names = [p.stem for p in paths]
    try:
        points, info = summarise(calls, names), calls_info(calls, names)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as err:  # a hand-edited or cut file
        raise InputFileError("a result is missing or has a wrong value where a point or its bound should be "
                             "(%s: %s)" % (type(err).__name__, err),
                             hint="give the JSON files pipeline_gpu.py wrote, unchanged") from None
    return {"benchmark": "pipeline_gpu_across_calls", "schema": SCHEMA, "gpu": gpus[0],
            "inputs": [p.name for p in paths], "calls": info, "points": points,
            "method": "per point: each call's median of its repetitions (ratio to that call's bound); the number "
                      "quoted is the median of those medians; every rep min-max pools every repetition of every "
                      "call; a goal is met when the median of the medians reaches it"}


def output_name(doc: Dict[str, Any], paths: Sequence[Path], tag: str) -> str:
    dates = sorted({m.group(1) for m in (DATE_IN_NAME.search(p.name) for p in paths) if m})
    return result_name(tag, device=gpu_slug(doc["gpu"]), date=dates[-1] if dates else today(), suffix="")


def main(argv: Any = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="pipeline_gpu.py JSON results of one kind of GPU")
    ap.add_argument("--tag", default="gpu-path-across-calls")
    ap.add_argument("--out", type=Path, default=None, help="folder to write to (default: the first input's)")
    args = ap.parse_args(argv)
    try:
        doc = build(args.results)
    except InputFileError as err:
        print("error: %s" % err.one_line(), file=sys.stderr)
        return 1
    from jetforge.fileio import write_json_atomic, write_text_atomic

    out = args.out or args.results[0].parent
    out.mkdir(parents=True, exist_ok=True)
    name = output_name(doc, args.results, args.tag)
    text = table(doc)
    print(text, flush=True)
    write_json_atomic(out / (name + ".json"), doc)
    write_text_atomic(out / (name + ".txt"), text + "\n")
    plot(doc, out / (name + ".png"))
    print("wrote %s.{json,txt,png} under %s" % (name, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
