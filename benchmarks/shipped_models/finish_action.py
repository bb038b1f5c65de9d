"""The action model a GPU call made with the recipe entry -> the shipped ``action-mobilenet3d``: files, numbers, card.

``make_on_gpu.py --stage action,time`` ran ``python -m jetforge.compress.recipes recipes/action_mobilenet3d.yaml``
on the GPU: the recipe trained the inflated 3D MobileNetV2 teacher on clips labelled from the person tracks of
vtest.avi, pruned it (L1, MACs / 4), distilled the student from it, exported both to ONNX and ran its own INT8 stage
(``student.calib`` + ``student.qdq.onnx``, calibrated from clips of the training frames).  This script, on the
CPU, ships those files unchanged and measures them:

* held-out accuracy (the clips wholly inside frames 545-794, 25 guard frames after training) of the teacher and the
  student in ONNX Runtime FP32, with the paired student - teacher difference; 95 % percentile bootstrap over whole
  tracks (clips of one person are not independent);
* the simulated TensorRT INT8 accuracy the recipe's INT8 stage measured;
* CPU latency at batch 1 (ONNX Runtime, 2 threads, models alternating run by run);
* the GPU timing of ``make_on_gpu.py``'s time stage (FP16, CUDA graphs, batch 1 and 32);
* ``jetforge estimate`` for Orin Nano / NX / AGX (GPU FP16 and INT8, DLA INT8).

    .venv/bin/python benchmarks/shipped_models/finish.py --device-out FILES_AT --commit C --models action-mobilenet3d
"""

import json
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

NAME = "action-mobilenet3d"
RUN = "action_mobilenet3d"


def read_action_data(tracks_dir: Path) -> Any:
    """The recipe's clips of vtest.avi, labelled from the person tracks the device call used (carried)."""
    from jetforge.assets import asset_path
    from jetforge.compress.action.action3d import Action3DRecipe, build_data
    from jetforge.config import load_config

    recipe_file = Path(__file__).resolve().parents[2] / "recipes" / "action_mobilenet3d.yaml"
    recipe = load_config(Action3DRecipe, str(recipe_file), [])
    recipe.tracks_dir = str(tracks_dir)
    return build_data(recipe, asset_path("opencv_samples", "vtest.avi"), progress=False)


def heldout_accuracy(paths: Dict[str, Path], data: Any) -> Dict[str, Any]:
    """Teacher and student FP32 accuracy on the held-out clips and the paired difference (bootstrap over tracks)."""
    from benchmarks.action3d.action_mobilenet3d import accuracy_block, fp32_logits
    from jetforge.compress.action.action3d_int8 import heldout_batches
    from jetforge.compress.action.mobilenet3d_recipe import heldout_accuracy as per_class

    batches = heldout_batches(data)
    logits = {k: fp32_logits(paths[k], batches) for k in ("teacher", "student")}
    y = data.targets(data.heldout)
    block = accuracy_block(logits, y, ["t%d" % w.track for w in data.heldout])
    block["per_class"] = {k: per_class(logits[k], data) for k in ("teacher", "student")}
    return block


def cpu_latency(paths: Dict[str, Path], rounds: int = 9, per_round: int = 3) -> Dict[str, Any]:
    import onnxruntime as ort

    from benchmarks.detector_students.detector_student import latency

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = {k: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for k, p in paths.items()}
    rng = np.random.default_rng(0)
    inputs = {k: rng.standard_normal([1] + [int(d) for d in s.get_inputs()[0].shape[1:]]).astype(np.float32)
              for k, s in sess.items()}
    return latency(sess, inputs, rounds, per_round)


def copy_shipped(run_dir: Path, folder: Path) -> Dict[str, Path]:
    """The recipe's student, its calibration cache and Q/DQ ONNX (with sidecars), byte for byte."""
    from jetforge.fileio import sha256_file

    if folder.exists():
        shutil.rmtree(str(folder))
    folder.mkdir(parents=True)
    pairs = {"student.onnx": "model.onnx", "student.onnx.json": "model.onnx.json", "student.calib": "model.calib",
             "student.qdq.onnx": "model.qdq.onnx", "student.qdq.onnx.json": "model.qdq.onnx.json"}
    out = {}
    for src, dst in pairs.items():
        if (run_dir / src).is_file():
            shutil.copyfile(str(run_dir / src), str(folder / dst))
            assert sha256_file(folder / dst) == sha256_file(run_dir / src)
            out[dst] = folder / dst
    return out


def from_make_log(device_out: Path) -> Dict[str, Any]:
    """The action stage's record and the GPU timing parsed from ``make.log``, for a call that returned only some
    files (before ``--pack``: ``shipped/action.json`` and ``time.json`` were left out): the command, its seconds and
    exit code, and the time stage's medians (its min/max stayed on the device)."""
    import re

    text = (device_out / "make.log").read_text()
    command = re.search(r"stage action: (.+)", text).group(1).split()
    done = re.search(r"stage action: exit (\d+) after (\d+) s", text)
    timing: Dict[str, Any] = {}
    for batch, line in re.findall(r"action batch (\d+): (.+)", text):
        for name, ms in re.findall(r"(action_\w+) ([\d.]+) ms", line):
            timing.setdefault(name, {"group": "action"})["batch%s" % batch] = {"median_ms": float(ms)}
    gpu = re.search(r"^(NVIDIA [^\n]+)$", (device_out / "gpu_tests.log").read_text() + "\n" + text, re.M)
    env = {"gpu": gpu.group(1) if gpu else None}
    parsed = "parsed from the device call's make.log (the call returned a limited number of files)"
    return {"action": {"command": command, "returncode": int(done.group(1)), "seconds": float(done.group(2)),
                       "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((device_out / "make.log").stat().st_mtime)),
                       "environment": env, "source": parsed},
            "time": {"models": timing, "environment": env, "source": parsed,
                     "method": "FP16, channels-last 3D, replayed CUDA graphs; models alternating per round; median"}}


def stage_records(device_out: Path, gpu_name: str) -> Dict[str, Dict[str, Any]]:
    """``shipped/action.json`` and ``time.json`` as the call wrote them, else parsed from its ``make.log``."""
    shipped = device_out / "shipped"
    if (shipped / "action.json").is_file() and (shipped / "time.json").is_file():
        return {"action": json.loads((shipped / "action.json").read_text()),
                "time": json.loads((shipped / "time.json").read_text())}
    records = from_make_log(device_out)
    for r in records.values():
        r["environment"]["gpu"] = r["environment"]["gpu"] or gpu_name
    return records


def finish_action(device_out: Path, tracks_dir: Path, estimates: Any, shipped_dir: Path,
                  gpu_name: str = "") -> Dict[str, Any]:
    from jetforge.fileio import sha256_file

    run_dir = device_out / "runs" / RUN
    records = stage_records(device_out, gpu_name)
    train = records["action"]
    report = json.loads((run_dir / "report.json").read_text())  # the recipe's full report (--json prints a summary)
    files = copy_shipped(run_dir, shipped_dir / NAME)
    data = read_action_data(tracks_dir)
    paths = {"teacher": run_dir / "teacher.onnx", "student": files["model.onnx"]}
    accuracy = heldout_accuracy(paths, data)
    timing = records["time"]
    window = int(report["recipe"]["window"])
    crop = int(report["recipe"]["crop"])
    return {"name": NAME, "kind": "action3d", "train": train, "recipe_report": report, "accuracy": accuracy,
            "gpu_timing": timing, "cpu_latency": cpu_latency(paths),
            "estimates": estimates(files["model.onnx"], []), "input": [1, 3, window, crop, crop],
            "macs": {"teacher": report["prune"]["macs_teacher"], "student": report["prune"]["macs_student"]},
            "data": report["data"], "shipped_onnx_sha256": sha256_file(files["model.onnx"])}


def export_note(train: Dict[str, Any], report: Dict[str, Any]) -> str:
    if not train.get("returncode"):
        return "the recipe's own student.onnx, student.calib and student.qdq.onnx, copied unchanged"
    return ("the recipe's own student.onnx, copied unchanged (exported on the GPU before the recipe's INT8 stage "
            "stopped: onnx-graphsurgeon was missing on that machine); student.calib and student.qdq.onnx from the "
            "recipe's INT8 stage rerun here on the run's student with `jetforge qat --config "
            "recipes/action_mobilenet3d.yaml --set out_dir=RUN --set int8.qat_steps=0` (PTQ, %s calibration clips; "
            "QAT skipped: the call did not return teacher.pt)" % report.get("int8", {}).get("ptq", {}).get(
                "calibration", {}).get("clips", "?"))


def action_card(result: Dict[str, Any], result_file: str, stage_command: Any, card_format: int,
                not_executed: List[str]) -> Dict[str, Any]:
    acc, report, train = result["accuracy"], result["recipe_report"], result["train"]
    timing = result["gpu_timing"]["models"]
    gpu_name = result["gpu_timing"]["environment"].get("gpu")
    gpu: Dict[str, Any] = {"device": gpu_name, "batches": [1, 32]}
    for b in (1, 32):
        gpu["batch%d" % b] = {"ms": timing["action_student"]["batch%d" % b]["median_ms"],
                              "teacher_ms": timing["action_teacher"]["batch%d" % b]["median_ms"]}
    gpu["speedup_batch32"] = gpu["batch32"]["teacher_ms"] / gpu["batch32"]["ms"]
    cpu_lat = result["cpu_latency"]
    cpu = {"device": "2-core %s VM, ONNX Runtime, 2 threads" % result["machine"]["cpu"], "batches": [1],
           "batch1": {"ms": cpu_lat["student"]["median_ms"], "teacher_ms": cpu_lat["teacher"]["median_ms"]},
           "speedup_batch1": cpu_lat["teacher"]["median_ms"] / cpu_lat["student"]["median_ms"]}
    ptq = report.get("int8", {}).get("ptq", {}).get("clip_accuracy", {})
    return {
        "format": card_format, "name": NAME, "task": "action (a tracked person's motion, %d classes)" % len(
            report["recipe"]["labels"]), "classes": list(report["recipe"]["labels"]),
        "summary": "A 3D MobileNetV2 (ImageNet MobileNetV2 inflated to 3D) trained on clips of vtest.avi labelled by "
                   "a motion rule from the CNN person detector's tracks, pruned by L1 to 1/%.1f of its MACs and "
                   "distilled from itself (recipes/action_mobilenet3d.yaml). Its accuracy is agreement with that rule "
                   "on one scene, not a general action-recognition result." % report["prune"]["macs_factor"],
        "input": "x".join(str(d) for d in result["input"]),
        "macs": result["macs"]["student"], "teacher_macs": result["macs"]["teacher"],
        "teacher": "the recipe's own teacher: the full-width inflated 3D MobileNetV2, fine-tuned on the same clips",
        "made_by": {"recipe": "recipes/action_mobilenet3d.yaml", "command": stage_command(train),
                    "commit": result["commit"], "device": gpu_name, "date": train["utc"][:10],
                    "seconds": {"recipe": train["seconds"]},
                    "export": export_note(train, report)},
        "training_data": "clips of vtest.avi frames 0-519 (8 frames, 112x112 crops around one person's track), "
                         "labelled by the recipe's velocity rule from the person detector's tracks",
        "accuracy": {"metric": "held-out clip accuracy (agreement with the motion rule)", "metric_short": "accuracy",
                     "evaluated_on": "the %d held-out clips of %d tracks (frames %d-%d); intervals: 95 %% bootstrap "
                                     "over whole tracks, the difference paired"
                                     % (acc["clips"], acc["tracks"], result["data"]["heldout_frames"][0],
                                        result["data"]["heldout_frames"][1] - 1),
                     "value": acc["student"]["accuracy"], "value_ci95": list(acc["student"]["ci"]),
                     "teacher": acc["teacher"]["accuracy"], "teacher_ci95": list(acc["teacher"]["ci"]),
                     "minus_teacher": acc["student_minus_teacher"]["value"],
                     "minus_teacher_ci95": list(acc["student_minus_teacher"]["ci"]),
                     "int8": ptq.get("accuracy_int8")},
        "speed": {"gpu": gpu, "cpu": cpu},
        "estimated": result["estimates"],
        "not_executed": list(not_executed),
        "results": [result_file],
        "files": {},
    }
