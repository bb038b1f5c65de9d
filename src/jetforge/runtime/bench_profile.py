"""What ``jetforge bench`` writes besides its summary: per-call times (``--export-times``) and a per-layer profile
(``--profile``), in the spirit of trtexec's ``--exportTimes`` and ``--exportProfile``.

* **Times**: one object per timed call, ``startMs``/``endMs`` (host clock, from the start of the steady state) and
  ``latencyMs``, the fields of trtexec's file that a host clock measures (trtexec adds H2D/compute/D2H per call from
  CUDA events; jetforge's steady state times whole calls, its stage split is a separate pass).
* **Profile**: ONNX Runtime's own profiler (``SessionOptions.enable_profiling``), run as a separate pass on a
  second session -- as trtexec's ``--separateProfileRun`` -- so profiling never slows the timed calls.  Its
  Chrome-trace events (``cat: "Node"``, ``<node>_kernel_time``, ``dur`` in microseconds, ``args.op_name``) are summed
  per node and per operator type, over the calls after the warm-up only (each call is one ``model_run`` event;
  a node event belongs to the call whose span holds it).  TensorRT's per-layer profile (``IProfiler``) is not
  wired into jetforge's TensorRT backend: for an engine the command refuses ``--profile`` and names trtexec's
  equivalent.
"""

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from jetforge.errors import BackendError
from jetforge.fileio import PathLike, write_json_atomic

KERNEL_SUFFIX = "_kernel_time"


def export_times(times_s: Sequence[Tuple[float, float]], path: PathLike) -> Path:
    """Write ``[{"startMs", "endMs", "latencyMs"}, ...]`` (one per timed call) atomically to ``path``."""
    rows = [{"startMs": round(1000.0 * a, 6), "endMs": round(1000.0 * b, 6), "latencyMs": round(1000.0 * (b - a), 6)}
            for a, b in times_s]
    return write_json_atomic(path, rows)


def summarize_ort_trace(events: Sequence[Mapping[str, Any]], skip_runs: int) -> Dict[str, Any]:
    """Per-node and per-operator time of an ONNX Runtime trace, the first ``skip_runs`` calls left out."""
    runs = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    kept = runs[skip_runs:]
    if not kept:
        raise BackendError("ONNX Runtime's profile holds %d calls, none after the %d warm-up calls"
                           % (len(runs), skip_runs), hint="profile more iterations")
    begin = kept[0][0]
    nodes: Dict[str, Dict[str, Any]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX) or float(e.get("ts", -1)) < begin:
            continue
        node = name[:-len(KERNEL_SUFFIX)]
        entry = nodes.setdefault(node, {"name": node, "op": str((e.get("args") or {}).get("op_name", "?")),
                                        "times_us": []})
        entry["times_us"].append(float(e.get("dur", 0)))
    calls = len(kept)
    total_ms = sum(sum(n["times_us"]) for n in nodes.values()) / 1000.0
    by_node = [_row(n["name"], n["op"], n["times_us"], calls, total_ms) for n in nodes.values()]
    by_node.sort(key=lambda r: -r["total_ms"])
    ops: Dict[str, List[float]] = {}
    for n in nodes.values():
        ops.setdefault(n["op"], []).extend(n["times_us"])
    by_op = [_row(op, op, t, calls, total_ms) for op, t in ops.items()]
    by_op.sort(key=lambda r: -r["total_ms"])
    run_ms = [1e-3 * (b - a) for a, b in kept]
    return {"source": "ONNX Runtime profiler (a separate pass, as trtexec --separateProfileRun)", "calls": calls,
            "node_time_ms": total_ms, "mean_call_ms": float(np.mean(run_ms)), "by_op": by_op, "by_node": by_node}


def _row(name: str, op: str, times_us: List[float], calls: int, total_ms: float) -> Dict[str, Any]:
    ms = sum(times_us) / 1000.0
    row = {"name": name, "op": op, "total_ms": ms, "ms_per_call": ms / calls,
           "percentage": 100.0 * ms / total_ms if total_ms > 0 else 0.0}
    if name == op:
        row.pop("op")
        row["nodes_runs"] = len(times_us)
    return row


def profile_onnx(model: PathLike, feeds: Dict[str, np.ndarray], iterations: int, warmup: int = 1,
                 **options: Any) -> Dict[str, Any]:
    """Run ``model`` ``warmup + iterations`` times on a profiling ONNX Runtime session; the per-node summary.

    ``options`` are the benchmark session's (threads, providers), so the profile is of the same configuration.
    The trace is written to a temporary folder and removed."""
    from jetforge.runtime.session import open_session

    folder = tempfile.mkdtemp(prefix="jetforge-profile-")
    try:
        with open_session(model, backend="onnxruntime", profile_prefix=str(Path(folder) / "ort"),
                          **options) as session:
            for _ in range(warmup + iterations):
                session.infer(feeds)
            trace = session.end_profiling()  # type: ignore[attr-defined]
        with open(str(trace), encoding="utf-8") as f:
            events = json.load(f)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summarize_ort_trace(events, warmup)


def write_profile(summary: Dict[str, Any], path: PathLike) -> Path:
    return write_json_atomic(path, summary)


def format_profile(summary: Dict[str, Any], top: int = 8) -> str:
    """The printed part of a profile: the operator types taking the most time."""
    lines = ["profile      %d calls, %.3f ms of node time per call (%s)" % (
        summary["calls"], summary["node_time_ms"] / summary["calls"], summary["source"])]
    for row in summary["by_op"][:top]:
        lines.append("  %-24s %8.3f ms/call  %5.1f %%" % (row["name"], row["ms_per_call"], row["percentage"]))
    return "\n".join(lines)


__all__ = ["export_times", "format_profile", "profile_onnx", "summarize_ort_trace", "write_profile"]
