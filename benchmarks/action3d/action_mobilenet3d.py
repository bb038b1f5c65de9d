"""The 3D MobileNetV2 action model measured like the reference: pruned student vs unpruned teacher, side by side.

Takes the H200 run's checkpoints (``benchmarks/action3d/action_mobilenet3d_gpu.py``: ``teacher.pt``, ``student.pt`` and its
timing JSON) and, here on the CPU:

* exports both to ONNX with the ``clip`` sidecar (and 16-frame copies: the same weights, a standard 16x112x112 clip);
* held-out accuracy in FP32 (ONNX Runtime) on the clips of frames 545-794, with percentile bootstrap intervals that
  resample whole tracks (clips of one track overlap in time), and the paired student - teacher difference;
* INT8: post-training calibration from clips (``jetforge.calibrate.calibrate`` with per-track clips of the *training*
  frames 0-519 along the cached tracks) and QAT (``jetforge.compress.qat``: BN folded, fake-quantised fine-tuning on
  training clips, Q/DQ export), each evaluated on the held-out clips in simulated TensorRT INT8 arithmetic (the
  ``clip_accuracy`` metric: accuracy FP32 / INT8 and the paired difference, intervals by track);
* ONNX Runtime FP32 latency at batch 1 on this CPU, teacher and student alternating per round (median);
* memory = weight bytes at the deployed precision (INT8; FP16 beside it) + peak activation bytes, from the
  roofline estimator's memory model (``jetforge.runtime.estimate``), at 8 and 16 frames;
* the H200 numbers from the device JSON (FP16 CUDA graph, batch 32 and 1, measured GPU-memory increase).

Goals (issue 17): student >= 2x faster than the teacher on the H200 (batch 32) and on the CPU (batch 1), memory at
most half, held-out accuracy within 2 points.  Writes ``results/<device>_<date>_student-vs-teacher.{json,png,txt}``.
The model the app ships is no longer installed from here: it is the recipe's own output, made on a GPU by
``benchmarks/shipped_models/make_on_gpu.py`` and measured by ``finish.py`` (``jetforge models show action-mobilenet3d``).

    .venv/bin/python benchmarks/action3d/action_mobilenet3d.py --device-out DEVICE_OUT/action3d   (the device run's $OUT folder, copied here)
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

from jetforge.compress.action import action3d_int8  # noqa: E402
from jetforge.compress.action.action3d_int8 import heldout_batches, heldout_evaluator, int8_ptq  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "action_mobilenet3d.yaml"
TARGET = "orin-nx-16gb"
CARRIED_TEACHER = ROOT / "build" / "action3d_device" / "teacher_trained.pt"
#: which of the device run's students this run measures (``--student``; the run may hold several)
STUDENT = {"name": "student"}
GOALS = {"gpu_speedup_b32": 2.0, "cpu_speedup_b1": 2.0, "memory_ratio_max": 0.5, "accuracy_drop_max": 0.02}


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def load_data(progress: bool = True) -> Any:
    from jetforge.assets import asset_path
    from jetforge.compress.action.action3d import Action3DRecipe, build_data
    from jetforge.config import load_config

    recipe = load_config(Action3DRecipe, str(RECIPE), [])
    recipe.tracks_dir = str(ROOT / recipe.tracks_dir)
    return recipe, build_data(recipe, asset_path("opencv_samples", "vtest.avi"), progress=progress)


def checkpoint(device_out: Path, name: str) -> Path:
    """The state dict of ``teacher`` or ``student`` (the student named by --student); a teacher carried to the
    device from an earlier run (not sent back) is read from the carry folder."""
    if name == "student":
        return device_out / ("%s.pt" % STUDENT["name"])
    return device_out / "teacher.pt" if (device_out / "teacher.pt").is_file() else CARRIED_TEACHER


def export_models(device_out: Path, data: Any, folder: Path) -> Dict[str, Path]:
    import torch

    from jetforge.compress.action.mobilenet3d_recipe import export_action_model
    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in ("teacher", "student"):
        model = mobilenet3d_from_state(torch.load(str(checkpoint(device_out, name)), map_location="cpu",
                                                  weights_only=True)).eval()
        paths[name] = export_action_model(model, folder / ("%s.onnx" % name), data, "action_mobilenet3d_%s" % name)
        paths[name + "_t16"] = export_action_model(model, folder / ("%s_t16.onnx" % name), data,
                                                   "action_mobilenet3d_%s_t16" % name, window=16)
    return paths


def fp32_logits(path: Path, batches: Sequence[np.ndarray]) -> np.ndarray:
    """ONNX Runtime FP32 logits; kept beside the model keyed by the model's and the inputs' hashes (the teacher is
    the same in every run, so a later run does not pay for it again)."""
    import hashlib

    from jetforge.fileio import sha256_file
    from jetforge.runtime.session import open_session

    digest = hashlib.sha256()
    digest.update(sha256_file(path).encode())
    for b in batches:
        digest.update(np.ascontiguousarray(b).tobytes())
    cache = path.with_suffix(".logits.%s.npy" % digest.hexdigest()[:16])
    if cache.is_file():
        return np.load(str(cache))
    with open_session(path, threads=2) as s:
        out = np.concatenate([s.infer({s.inputs[0].name: b})[s.outputs[0].name] for b in batches])
    np.save(str(cache), out)
    return out


def accuracy_block(logits: Dict[str, np.ndarray], y: np.ndarray, groups: List[str]) -> Dict[str, Any]:
    """Accuracy of each model and the paired student - teacher difference, bootstrap intervals over tracks."""
    from jetforge.calibrate.metrics import bootstrap_ci

    right = {k: (v.argmax(1) == y).astype(np.float64) for k, v in logits.items()}
    out: Dict[str, Any] = {"clips": int(len(y)), "tracks": len(set(groups)), "interval": "95 % percentile bootstrap, "
                           "2000 resamples of whole tracks"}
    for k, r in right.items():
        low, high = bootstrap_ci(r, groups, 2000, 0, 0.95)
        out[k] = {"accuracy": float(r.mean()), "ci": [low, high]}
    d = right["student"] - right["teacher"]
    low, high = bootstrap_ci(d, groups, 2000, 0, 0.95)
    out["student_minus_teacher"] = {"value": float(d.mean()), "ci": [low, high]}
    return out


def int8_qat(device_out: Path, data: Any, evaluator: Any, folder: Path, steps: int) -> Dict[str, Any]:
    """QAT of the device run's student with logit distillation from its teacher
    (:func:`jetforge.compress.action.action3d_int8.int8_qat`), evaluated like the calibrated model."""
    import torch

    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state

    models = {n: mobilenet3d_from_state(torch.load(str(checkpoint(device_out, n)), map_location="cpu",
                                                   weights_only=True)).eval() for n in ("teacher", "student")}
    return action3d_int8.int8_qat(models["teacher"], models["student"], data, evaluator, folder, steps)


def cpu_latency(paths: Dict[str, Path], rounds: int, reps: int) -> Dict[str, Any]:
    """ONNX Runtime FP32 batch 1, 2 threads; teacher and student alternate within each round; median ms."""
    from jetforge.runtime.session import open_session

    out: Dict[str, Any] = {}
    for suffix in ("", "_t16"):
        sessions = {k: open_session(paths[k + suffix], threads=2) for k in ("teacher", "student")}
        feeds = {}
        for k, s in sessions.items():
            shape = [1] + [int(d) for d in s.inputs[0].shape[1:]]
            feeds[k] = {s.inputs[0].name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            s.infer(feeds[k])
        samples: Dict[str, List[float]] = {k: [] for k in sessions}
        for r in range(rounds):
            for k in (("teacher", "student") if r % 2 == 0 else ("student", "teacher")):
                t0 = time.perf_counter()
                for _ in range(reps):
                    sessions[k].infer(feeds[k])
                samples[k].append(1000.0 * (time.perf_counter() - t0) / reps)
        for s in sessions.values():
            s.close()
        key = "T16" if suffix else "T8"
        out[key] = {k: {"ms": statistics.median(v), "rounds_ms": [round(t, 2) for t in v]} for k, v in samples.items()}
        out[key]["speedup"] = out[key]["teacher"]["ms"] / out[key]["student"]["ms"]
    return out


def memory_model(paths: Dict[str, Path]) -> Dict[str, Any]:
    """Weights at the deployed precision + peak activations (the estimator's memory model), batch 1."""
    from jetforge.runtime.estimate.result import estimate
    from jetforge.targets.loader import get_target

    target = get_target(TARGET)
    out: Dict[str, Any] = {"target": TARGET, "definition": "weight bytes at the precision + peak activation bytes "
                           "(liveness over the engine's kernels), batch 1; from jetforge.runtime.estimate"}
    for key, suffix in (("T8", ""), ("T16", "_t16")):
        out[key] = {}
        for precision in ("int8", "fp16"):
            row = {}
            for k in ("teacher", "student"):
                mem = estimate(paths[k + suffix], target, precision=precision, batches=(1,)).batches[0].memory
                row[k] = {"weights_bytes": mem.weights, "activations_peak_bytes": mem.activations_peak,
                          "memory_bytes": mem.weights + mem.activations_peak}
            row["ratio"] = row["student"]["memory_bytes"] / row["teacher"]["memory_bytes"]
            out[key][precision] = row
    return out


def gpu_block(device_out: Path) -> Dict[str, Any]:
    """The H200 numbers: per shape and batch, each model at its faster memory layout."""
    path = device_out / "action3d_gpu_timing.json"
    if not path.is_file():
        path = device_out / "action3d_gpu.json"
    raw = json.loads(path.read_text())
    timing = raw.get("timing", raw)
    runs = timing.get("runs", {})
    out: Dict[str, Any] = {"method": timing.get("method"), "memory_fp16": timing.get("memory_fp16", {}), "best": {}}
    for key in sorted({"_".join(k.split("_", 2)[:2]) for k in runs}):  # T8_b32_ncdhw -> T8_b32
        cands = {k: v for k, v in runs.items() if k.startswith(key + "_")}
        best = {m: min((v[n]["ms_per_batch"], k.split("_", 2)[2]) for k, v in cands.items())
                for m, n in (("teacher", "teacher"), ("student", STUDENT["name"]))}
        out["best"][key] = {m: {"ms_per_batch": best[m][0], "layout": best[m][1]} for m in best}
        out["best"][key]["speedup"] = best["teacher"][0] / best["student"][0]
    return out


def goals(result: Dict[str, Any]) -> List[Dict[str, Any]]:
    acc = result["accuracy_fp32"]["student_minus_teacher"]
    rows = [{"goal": "held-out accuracy within 2 points (FP32, student - teacher)", "value": acc["value"],
             "ci": acc["ci"], "met": acc["value"] >= -GOALS["accuracy_drop_max"]}]
    cpu = result["cpu_latency"]
    for key in ("T8", "T16"):
        rows.append({"goal": "CPU ONNX Runtime FP32 batch 1 >= 2x faster (%s)" % key, "value": cpu[key]["speedup"],
                     "met": cpu[key]["speedup"] >= GOALS["cpu_speedup_b1"]})
        mem = result["memory"][key]["int8"]
        rows.append({"goal": "memory (INT8 weights + peak activations) at most half (%s)" % key, "value": mem["ratio"],
                     "met": mem["ratio"] <= GOALS["memory_ratio_max"]})
        gpu = result.get("gpu", {}).get("best", {}).get("%s_b32" % key)
        if gpu:
            rows.append({"goal": "H200 FP16 CUDA graph batch 32 >= 2x faster (%s)" % key, "value": gpu["speedup"],
                         "met": gpu["speedup"] >= GOALS["gpu_speedup_b32"]})
    return rows


def table(result: Dict[str, Any]) -> str:
    acc, mem, cpu = result["accuracy_fp32"], result["memory"], result["cpu_latency"]
    gpu = result.get("gpu", {}).get("best", {})
    lines = ["%-44s %14s %14s %9s" % ("", "teacher", "student", "ratio")]

    def row(name: str, t: float, s: float, fmt: str = "%14.3f", ratio: Optional[float] = None) -> None:
        r = (t / s) if ratio is None else ratio
        lines.append(("%-44s " + fmt + " " + fmt + " %8.2fx") % (name, t, s, r))

    row("MACs per 8-frame clip (M)", result["macs"]["teacher"] / 1e6, result["macs"]["student"] / 1e6, "%14.1f")
    row("held-out accuracy FP32 (%d clips)" % acc["clips"], acc["teacher"]["accuracy"], acc["student"]["accuracy"],
        ratio=acc["student"]["accuracy"] / max(1e-9, acc["teacher"]["accuracy"]))
    for name in ("ptq", "qat"):
        block = result.get("int8", {}).get(name, {}).get("student", {}).get("clip_accuracy")
        if block:
            lines.append("%-44s %14s %14.3f" % ("held-out accuracy simulated INT8 (%s)" % name.upper(), "",
                                               block["accuracy_int8"]))
    for key in ("T8", "T16"):
        row("CPU ORT FP32 batch 1 ms (%s)" % key, cpu[key]["teacher"]["ms"], cpu[key]["student"]["ms"], "%14.1f")
        for b in (32, 1):
            g = gpu.get("%s_b%d" % (key, b))
            if g:
                row("H200 FP16 CUDA graph batch %d ms (%s)" % (b, key), g["teacher"]["ms_per_batch"],
                    g["student"]["ms_per_batch"])
        m = mem[key]["int8"]
        row("memory INT8 weights+peak act. MB (%s)" % key, m["teacher"]["memory_bytes"] / 1e6,
            m["student"]["memory_bytes"] / 1e6, "%14.2f", ratio=m["ratio"])
    lines.append("")
    for g in result["goals"]:
        lines.append("%-5s %s: %.3f%s" % ("MET" if g["met"] else "MISS", g["goal"], g["value"],
                                          ("  (95%% CI %.3f .. %.3f)" % tuple(g["ci"])) if g.get("ci") else ""))
    return "\n".join(lines)


def plot(result: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, values = [], []
    for g in result["goals"]:
        if "accuracy" in g["goal"]:
            continue
        names.append(g["goal"].replace(" >= 2x faster", "").replace(" at most half", ""))
        values.append(g["value"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colours = ["tab:green" if ("memory" not in n and v >= 2) or ("memory" in n and v <= 0.5) else "tab:red"
               for n, v in zip(names, values)]
    ax.barh(range(len(names)), values, color=colours)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.axvline(2.0, color="k", lw=0.8, ls="--")
    ax.axvline(0.5, color="k", lw=0.8, ls=":")
    acc = result["accuracy_fp32"]
    ax.set_title("3D MobileNetV2 action model: pruned student vs teacher (speed-up x, memory ratio)\n"
                 "held-out accuracy FP32 teacher %.3f, student %.3f (diff %.3f, 95%% CI %.3f..%.3f)" % (
                     acc["teacher"]["accuracy"], acc["student"]["accuracy"], acc["student_minus_teacher"]["value"],
                     *acc["student_minus_teacher"]["ci"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    plt.close(fig)


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device-out", required=True, help="the device run's output folder (teacher.pt, student.pt, ...)")
    p.add_argument("--work", default=str(ROOT / "build" / "action3d" / "bench"))
    p.add_argument("--out", default=None, help="results stem: .json, .txt, .png (default results/<device>_<date>_"
                                                "student-vs-teacher; with --limit a temporary folder)")
    p.add_argument("--student", default="student", help="which student of the device run (student, student_m4, ...)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--qat-steps", type=int, default=40)
    p.add_argument("--skip-int8", action="store_true")
    p.add_argument("--teacher-int8-from", default="", help="take the teacher's INT8 block from this earlier result "
                                                           "JSON (same teacher checkpoint) instead of calibrating it again")
    p.add_argument("--limit", type=int, default=0, help="a quick check of the script: at most N held-out clips, "
                                                         "N calibration clips (recorded in the JSON; not a result)")
    args = p.parse_args(argv)
    from jetforge.apps.pipeline import machine_info
    from jetforge.compress.action.track_clips import read_track_events
    from jetforge.fileio import write_json_atomic

    if args.out is None:
        args.out = str(Path(tempfile.mkdtemp(prefix="jetforge-action3d-limit-")) / "action_mobilenet3d") \
            if args.limit else str(result_path(__file__, "student-vs-teacher", suffix=""))
    device_out, work, results = Path(args.device_out), Path(args.work), Path(args.out)
    STUDENT["name"] = args.student
    recipe, data = load_data()
    if args.limit:
        keep = np.linspace(0, len(data.heldout) - 1, min(args.limit, len(data.heldout))).astype(int)
        data.heldout, data.heldout_clips = [data.heldout[i] for i in keep], data.heldout_clips[keep]
    paths = export_models(device_out, data, work)
    y = data.targets(data.heldout)
    groups = ["t%d" % w.track for w in data.heldout]
    batches = heldout_batches(data)
    logits = {k: fp32_logits(paths[k], batches) for k in ("teacher", "student")}
    device = json.loads((device_out / "action3d_gpu.json").read_text())
    result: Dict[str, Any] = {
        "limit": args.limit or None, "machine": machine_info(), "shared_machine": "2-core VM shared by ~7 engineers (load average in the JSON)",
        "data": data.info, "labels": data.labels, "contract": data.contract.to_dict(),
        "what": "agreement with a motion rule on one scene (vtest.avi), not a general action-recognition result",
        "student": STUDENT["name"], "prune": device["models"][STUDENT["name"]]["prune"],
        "macs": {"teacher": device["models"][STUDENT["name"]]["prune"]["macs_teacher"],
                 "student": device["models"][STUDENT["name"]]["prune"]["macs_student"]},
        "params": {"teacher": device["models"][STUDENT["name"]]["prune"]["params_teacher"],
                   "student": device["models"][STUDENT["name"]]["prune"]["params_student"]},
        "device_training": {k: {"epochs": len(v["train"]), "last_loss": v["train"][-1].get("loss"),
                                "heldout_accuracy_torch_on_device": v["heldout_accuracy_torch"]}
                            for k, v in device["models"].items()},
        "accuracy_fp32": accuracy_block(logits, y, groups)}
    from jetforge.compress.action.mobilenet3d_recipe import heldout_accuracy

    result["heldout_teacher"], result["heldout_student"] = (heldout_accuracy(logits[k], data)
                                                            for k in ("teacher", "student"))
    log("FP32 held-out: teacher %.3f student %.3f" % (result["accuracy_fp32"]["teacher"]["accuracy"],
                                                      result["accuracy_fp32"]["student"]["accuracy"]))
    result["gpu"] = gpu_block(device_out)
    result["memory"] = memory_model(paths)
    result["cpu_latency"] = cpu_latency(paths, args.rounds, args.reps)
    log("CPU batch 1: %s" % {k: round(v["speedup"], 2) for k, v in result["cpu_latency"].items()})
    finish(result, results)  # everything but INT8 first: a run stopped during INT8 keeps its table
    if not args.skip_int8:
        tracks = read_track_events(ROOT / recipe.tracks_dir / "events.jsonl")
        result["int8"] = {"arithmetic": "simulated TensorRT INT8 (jetforge.calibrate int8sim)", "ptq": {}, "qat": {}}
        for k in ("student", "teacher"):
            if k == "teacher" and args.teacher_int8_from:
                earlier = json.loads(Path(args.teacher_int8_from).read_text())
                result["int8"]["ptq"][k] = dict(earlier["int8"]["ptq"]["teacher"], reused_from=args.teacher_int8_from)
                continue
            ev = heldout_evaluator(paths[k], data, batches)
            try:
                result["int8"]["ptq"][k] = int8_ptq(paths[k], recipe, tracks, ev, args.limit or 256)
                log("PTQ %s: %s" % (k, result["int8"]["ptq"][k]["clip_accuracy"]))
            except Exception as err:  # reported, never hidden: the run keeps its other numbers
                result["int8"]["ptq"][k] = {"error": "%s: %s" % (type(err).__name__, err)}
                log("PTQ %s failed: %s" % (k, err))
            if k == "student" and args.qat_steps:
                try:
                    result["int8"]["qat"][k] = int8_qat(device_out, data, ev, work, args.qat_steps)
                    log("QAT %s: %s" % (k, result["int8"]["qat"][k]["clip_accuracy"]))
                except Exception as err:
                    result["int8"]["qat"][k] = {"error": "%s: %s" % (type(err).__name__, err)}
                    log("QAT failed: %s" % err)
            finish(result, results)
    print(finish(result, results))
    return 0


def finish(result: Dict[str, Any], stem: Path) -> str:
    """Goals, JSON, table and plot (``stem``.json/.txt/.png) from what the run has so far (called again after every
    INT8 step)."""
    from jetforge.fileio import write_json_atomic

    result["goals"] = goals(result)
    stem.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(Path(str(stem) + ".json"), result)
    text = table(result)
    Path(str(stem) + ".txt").write_text(text + "\n")
    plot(result, Path(str(stem) + ".png"))
    return text


if __name__ == "__main__":
    sys.exit(main())
