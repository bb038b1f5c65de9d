"""Turn the models a GPU call made with the recipes into shipped models: files, measurements, card.

``make_on_gpu.py`` ran the recipe entry on the GPU and timed the results; this script, here on the CPU, takes the
returned folder and for each model:

1. copies the recipe's own ``student.onnx`` and sidecar into ``src/jetforge/assets/shipped/NAME/`` unchanged
   (``model.onnx``; the bytes the recipe exported, hash checked);
2. calibrates it with the user's command, ``jetforge calibrate model.onnx --data FRAMES ...`` (``model.calib`` for
   TensorRT <= 10 and DLA, ``model.qdq.onnx`` for TensorRT >= 10 GPU), evaluated as TensorRT computes INT8;
3. measures accuracy against the teacher on held-out data with paired 95 % bootstrap intervals, and CPU latency
   at batch 1 (ONNX Runtime, 2 threads, models alternating);
4. asks ``jetforge estimate`` for Orin Nano / NX / AGX (GPU FP16 and INT8, DLA INT8 where the board has one);
5. writes the result JSON (``results/<device>_<date>_<name>.json``), ``card.json`` from it and
   ``docs/models/NAME.md`` (the card's rendering).

    .venv/bin/python benchmarks/shipped_models/finish.py --device-out FILES_AT --commit C [--models NAME,...]

(``--models action-mobilenet3d``: ``finish_action.py``; ``--models yolov8-person-192``: ``finish_yolov8.py``.)
"""

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()
from jetforge.fileio import sha256_file  # noqa: E402
from jetforge.workflow.shipped_models import CARD, CARD_FORMAT, SHIPPED_DIR, ShippedModel, render_card  # noqa: E402

DOCS = ROOT / "docs" / "models"
WORK = ROOT / "build" / "shipped_finish"
ESTIMATE_TARGETS = ("orin-nano-8gb", "orin-nx-16gb", "agx-orin-64gb")
NOT_EXECUTED_TRT = ("TensorRT engines (FP16, INT8) and their latency: no TensorRT runs on the GPU here (TensorRT-RTX "
                    "builds on the CPU only); the board path ran in CI on a TensorRT stand-in executing the ONNX",
                    "DLA: no Jetson here; the DLA rows are jetforge estimate's predictions",
                    "INT8 arithmetic on a GPU: the INT8 accuracy is the simulated arithmetic (ONNX Runtime, "
                    "TensorRT's rounding), not an INT8 engine")


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def jetforge_cli(args: List[str]) -> Tuple[int, str]:
    """Run the user's command (a subprocess of this checkout's jetforge); exit code and stdout."""
    proc = subprocess.run([sys.executable, "-m", "jetforge"] + args, cwd=str(ROOT), stdout=subprocess.PIPE,
                          universal_newlines=True)
    return proc.returncode, proc.stdout


def copy_model(src_onnx: Path, folder: Path) -> Dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / "model.onnx"
    shutil.copyfile(str(src_onnx), str(dst))
    shutil.copyfile(str(src_onnx) + ".json", str(dst) + ".json")
    assert sha256_file(dst) == sha256_file(src_onnx)
    return {"onnx": dst, "sidecar": Path(str(dst) + ".json")}


def shown(path: Path) -> str:
    """A path as a command names it: from the checkout's root where it lies inside (a ``--trial`` folder may not)."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def calibrate(model: Path, data: Path, extra: List[str]) -> Dict[str, Any]:
    """``jetforge calibrate`` as a user runs it; the report it writes."""
    args = ["calibrate", shown(model), "--data", str(data), "--no-plots"] + extra
    t0 = time.perf_counter()
    code, _ = jetforge_cli(args)
    if code:
        raise SystemExit("jetforge %s failed (exit %d)" % (" ".join(args), code))
    report = json.loads(Path(str(model)[:-len(".onnx")] + ".calib.json").read_text())
    return {"command": "jetforge " + " ".join(args), "seconds": round(time.perf_counter() - t0, 1),
            "report": report}


def estimates(model: Path, batch_shape: List[str]) -> Dict[str, Any]:
    rows = []
    for target in ESTIMATE_TARGETS:
        for where, precision, dla in (("GPU", "fp16", None), ("GPU", "int8", None), ("DLA 0", "int8", "0")):
            args = ["estimate", shown(model), "--target", target, "--precision", precision,
                    "--json"] + batch_shape + (["--dla-core", dla] if dla else [])
            code, out = jetforge_cli(args)
            if code:
                rows.append({"target": target, "where": where, "precision": precision, "ms": None,
                             "note": "refused by estimate (exit %d): %s" % (code, "the board has no DLA" if dla else "see the command")})
                continue
            data = json.loads(out)
            ms = first_latency_ms(data)
            rows.append({"target": target, "where": where, "precision": precision, "ms": ms})
    return {"command": "jetforge estimate MODEL --target T --precision P [--dla-core 0] --json", "rows": rows}


def first_latency_ms(data: Dict[str, Any]) -> Any:
    for key in ("per_batch", "batches"):
        if key in data and data[key]:
            first = data[key][0] if isinstance(data[key], list) else next(iter(data[key].values()))
            for k in ("latency_ms", "ms", "total_ms"):
                if k in first:
                    return float(first[k])
    for k in ("latency_ms", "total_ms"):
        if k in data:
            return float(data[k])
    return None


# ------------------------------------------------------------------------------------------------ detector
TEACHER = "ssdlite-person (the port of the TF Object Detection API's ssdlite_mobilenet_v2 person detector, 300 px)"
TRAINING_DATA = ("the training segments of jetforge's labelled person set (vtest.avi, bikes.mp4, carphone); the "
                 "teacher's boxes are the only supervision, no label is used")
AP_GOAL = 0.03  # the detector students' goal: AP@0.5 within this of the teacher by the 95 % bound


def measure_detector(name: str, onnx: Path) -> Dict[str, Any]:
    """A shipped person detector beside the port, here on the CPU: person AP on the held-out labelled frames with
    paired bootstrap intervals (frames, 10-frame blocks), CPU latency at batch 1 (models alternating), and the INT8
    stage as a user runs it (``jetforge calibrate`` on training frames, ``--labels`` for FP32 vs simulated INT8 AP).
    Each model is decoded by its own sidecar's decoder, so any registered output layout is measured the same way."""
    from benchmarks.detector_students.detector_student import ap_rows, calibration_frames, detections, \
        heldout_frames, latency, sessions
    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.runtime.sidecar import read_sidecar
    from jetforge.workflow.model_refs import ensure_person_detector

    teacher, _ = ensure_person_detector()
    paths = {"teacher": Path(teacher), name: onnx}
    sess = sessions(paths)
    frames, groups = heldout_frames()
    metrics = {n: DetectionAPMetric(sidecar=read_sidecar(p)) for n, p in paths.items()}
    dets = {n: detections(s, metrics[n], frames, metrics[n].preprocess) for n, s in sess.items()}
    ap = ap_rows(dets, frames, groups, resamples=10000)
    inputs = {n: metrics[n].preprocess.apply(frames[0].image)[None] for n in sess}
    cpu = latency(sess, inputs, rounds=15, per_round=4)
    calib = calibrate(onnx, calibration_frames(WORK / "calibration_frames", step=4),
                      ["--samples", "140", "--labels", "src/jetforge/vision/data/people_boxes.json"])
    return {"ap": ap, "cpu_latency": cpu, "int8": calib, "heldout_frames": len(frames)}


def finish_detector(device_out: Path, name: str, run: str, teacher_name: str) -> Dict[str, Any]:
    run_dir = device_out / "runs" / run
    folder = SHIPPED_DIR / name
    if folder.exists():
        shutil.rmtree(str(folder))
    train = json.loads((device_out / "shipped" / ("%s.json" % stage_of(run))).read_text())
    if (run_dir / "student.onnx").is_file():
        files = copy_model(run_dir / "student.onnx", folder)
        exported = "the recipe's own student.onnx, copied unchanged"
    else:  # the run ended after student.pt (make_on_gpu's JSON says how): the recipe module's exporter, here
        files = export_recipe_student(run_dir / "student.pt", folder, run, train)
        exported = ("the recipe run's student.pt exported here by jetforge.compress.distill.detection_recipe."
                    "export_student_detector (the run stopped after writing student.pt: exit %d)" % train["returncode"])
    measured = measure_detector(name, files["onnx"])
    timing = json.loads((device_out / "shipped" / "time.json").read_text())
    size = 192 if run.endswith("_192") else 300
    est = estimates(files["onnx"], [])
    first = json.loads((device_out / "shipped" / "detector300.json").read_text())
    return dict(measured, name=name, kind="detector", teacher=teacher_name, train=train, train_first=first,
                exported=exported, gpu_timing=timing, estimates=est, input_size=size, macs=macs(run_dir, size),
                shipped_onnx_sha256=sha256_file(files["onnx"]))


def export_recipe_student(weights: Path, folder: Path, run: str, train: Dict[str, Any]) -> Dict[str, Path]:
    from jetforge.compress.distill.detection_recipe import STUDENT_SOURCE, export_student_detector

    folder.mkdir(parents=True, exist_ok=True)
    size = 192 if run.endswith("_192") else 300
    export_student_detector(str(weights), str(folder / "model.onnx"), input_size=size,
                            provenance={"recipe": run, "weights": "student.pt", "weights_sha256": sha256_file(weights),
                                        "weights_source": STUDENT_SOURCE, "made_on": train["environment"].get("gpu")})
    return {"onnx": folder / "model.onnx", "sidecar": folder / "model.onnx.json"}


def macs(run_dir: Path, size: Any, layout: str = "ssd") -> Dict[str, int]:
    """The port's and the student's MACs, counted here from the run's ``student.pt`` rebuilt in its layout."""
    from jetforge.assets import asset_path
    from jetforge.compress.checkpoint import read_weights
    from jetforge.compress.distill.detection_student import detector_from_state, model_macs
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.yolo_student import yolo_student_from_state

    teacher = load_from_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    rebuild = {"ssd": detector_from_state, "yolov8": yolo_student_from_state}[layout]
    student = rebuild(read_weights(str(run_dir / "student.pt"), "student"), int(size))
    return {"teacher": model_macs(teacher, teacher.image_size), "student": model_macs(student, int(size))}


def stage_of(run: str) -> str:
    return {"ssdlite_person_student": "detector300", "ssdlite_person_student_192": "lowres",
            "action_mobilenet3d": "action"}[run]


def stage_command(stage: Dict[str, Any]) -> str:
    """The recipe entry as the device call ran it, with paths made relative (the device's checkout differs)."""
    import re

    words = ["python" if w.endswith(("python", "python3")) else w for w in stage["command"]]
    words = [re.sub(r"^(\w+=)?\S*?/build/shipped_carry/", r"\1build/shipped_carry/", w) for w in words]
    return " ".join(re.sub(r"=\S*?/runs/", "=runs/", w) for w in words if w != "--json")


def detector_numbers(result: Dict[str, Any], student_run: str, teacher_run: str = "ssdlite_person_port"
                     ) -> Dict[str, Any]:
    """A detector card's measured part, read from its result: accuracy (AP@0.5 beside the port, paired intervals,
    simulated INT8), speed (the GPU call's timings of ``student_run`` and ``teacher_run``; CPU here), the Jetson
    estimates, and what was not executed (with the AP goal where its bound does not show it)."""
    name, ap = result["name"], result["ap"]
    student, teacher = ap[name], ap["teacher"]
    det_int8 = result["int8"]["report"]["evaluation"]["int8"]["metrics"]["detection_ap"]
    timing = result["gpu_timing"]["models"]
    gpu = {"device": result["gpu_timing"]["environment"].get("gpu"), "batches": [1, 32]}
    for b in (1, 32):
        gpu["batch%d" % b] = {"ms": timing[student_run]["batch%d" % b]["median_ms"],
                              "teacher_ms": timing[teacher_run]["batch%d" % b]["median_ms"]}
    gpu["speedup_batch32"] = gpu["batch32"]["teacher_ms"] / gpu["batch32"]["ms"]
    cpu_lat = result["cpu_latency"]
    cpu = {"device": "2-core %s VM, ONNX Runtime, 2 threads" % result["machine"]["cpu"], "batches": [1],
           "batch1": {"ms": cpu_lat[name]["median_ms"], "teacher_ms": cpu_lat["teacher"]["median_ms"]},
           "speedup_batch1": cpu_lat["teacher"]["median_ms"] / cpu_lat[name]["median_ms"]}
    frames_low, blocks_low = student["minus_teacher"]["ap50_ci"][0], student["minus_teacher_blocks"]["ap50_ci"][0]
    goal_shown = min(frames_low, blocks_low) >= -AP_GOAL
    evaluated_on = ("the %d held-out labelled frames; intervals: bootstrap over frames, the difference paired (over "
                    "10-frame blocks the difference's interval is [%+.3f, %+.3f])"
                    % ((result["heldout_frames"],) + tuple(student["minus_teacher_blocks"]["ap50_ci"])))
    if goal_shown:
        evaluated_on += ("; the AP goal (within %.2f of the teacher by the 95 %% bound) is shown: the difference's "
                         "lower bounds are %+.3f (frames) and %+.3f (blocks)" % (AP_GOAL, frames_low, blocks_low))
    return {
        "accuracy": {"metric": "person AP@0.5 of every detection the model decodes (calibrate's detection metric; "
                               "`jetforge demo --compare` reports AP at the people app's score threshold)",
                     "metric_short": "AP@0.5", "evaluated_on": evaluated_on,
                     "value": student["ap50"], "value_ci95": list(student["ap50_ci"]),
                     "teacher": teacher["ap50"], "teacher_ci95": list(teacher["ap50_ci"]),
                     "minus_teacher": student["minus_teacher"]["ap50"],
                     "minus_teacher_ci95": list(student["minus_teacher"]["ap50_ci"]),
                     "int8": det_int8["ap50_int8"]},
        "speed": {"gpu": gpu, "cpu": cpu},
        "estimated": result["estimates"],
        "not_executed": list(NOT_EXECUTED_TRT) + ([] if goal_shown else [
            "the AP goal (within %.2f of the teacher by the 95 %% bound): not shown - the interval is too wide on "
            "%d held-out frames" % (AP_GOAL, result["heldout_frames"])]),
    }


def detector_card(result: Dict[str, Any], result_file: str) -> Dict[str, Any]:
    first, second = result["train_first"], result["train"]
    return dict(detector_numbers(result, "ssdlite_person_student_192"), **{
        "format": CARD_FORMAT, "name": result["name"], "task": "detect (person)",
        "summary": "The SSDLite-MobileNetV2 person detector pruned to 1/2.5 of its MACs at 300 px and distilled from "
                   "the port (recipes/distill_ssdlite_person.yaml), then distilled again at 192 px from a tiled "
                   "teacher on its own anchor grid (recipes/distill_ssdlite_person_lowres.yaml). Both trainings "
                   "ran on the GPU with a time budget that fits one device call: short runs.",
        "input": "1x3x%dx%d" % (result["input_size"], result["input_size"]),
        "macs": result["macs"]["student"], "teacher_macs": result["macs"]["teacher"], "teacher": result["teacher"],
        "made_by": {"recipe": "recipes/distill_ssdlite_person.yaml, then recipes/distill_ssdlite_person_lowres.yaml",
                    "command": "%s && %s" % (stage_command(first), stage_command(second)),
                    "commit": result["commit"], "device": result["gpu_timing"]["environment"].get("gpu"),
                    "date": second["utc"][:10], "seconds": {"300px": first["seconds"], "192px": second["seconds"]},
                    "export": result["exported"]},
        "training_data": TRAINING_DATA, "results": [result_file], "files": {}})


def attach_files(card: Dict[str, Any], folder: Path) -> Dict[str, Any]:
    roles = {"onnx": "model.onnx", "sidecar": "model.onnx.json", "calib": "model.calib", "qdq": "model.qdq.onnx",
             "qdq_sidecar": "model.qdq.onnx.json"}
    card["files"] = {role: {"path": f, "sha256": sha256_file(folder / f)} for role, f in roles.items()
                     if (folder / f).is_file()}
    for extra in folder.iterdir():
        if extra.name not in roles.values() and extra.name != CARD:
            if extra.is_dir():
                shutil.rmtree(str(extra))
            else:
                extra.unlink()  # the calibration report stays in the result JSON; the folder ships model files
    return card


def write_card(card: Dict[str, Any], folder: Path, docs: Path = DOCS) -> None:
    (folder / CARD).write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    (docs / ("%s.md" % card["name"])).write_text(render_card(ShippedModel(card["name"], folder, card)))


def machine() -> Dict[str, Any]:
    return {"cpu": platform.processor() or platform.machine(), "host": platform.node(),
            "note": "2-core CPU shared with other jobs; CPU ratios measured side by side in one run"}


def ship(result: Dict[str, Any], card_of: Any, shipped_dir: Path, trial: str) -> None:
    """The result JSON, then the card (from it) and docs/models/NAME.md (``trial``: all of it into that folder)."""
    out = (Path(trial).resolve() / ("%s.json" % result["name"]) if trial
           else result_path(__file__, result["name"]).with_suffix(".json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, sort_keys=True, default=float) + "\n")
    folder = shipped_dir / result["name"]
    card = attach_files(card_of(result, str(out.relative_to(ROOT)) if not trial else str(out)), folder)
    write_card(card, folder, Path(trial) if trial else DOCS)
    log(render_card(ShippedModel(card["name"], folder, card)))


def refresh_estimates(name: str) -> None:
    """A shipped model's Jetson estimates again, with today's estimator (``jetforge estimate`` changes with its
    efficiency sets): the result JSON's ``estimates`` replaced (the earlier ones kept under ``estimates_before``,
    with the commit that refreshed them), then the card and its page rebuilt from that result. Nothing measured
    changes."""
    folder = SHIPPED_DIR / name
    card = json.loads((folder / CARD).read_text())
    out = ROOT / card["results"][0]
    result = json.loads(out.read_text())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=str(ROOT), stdout=subprocess.PIPE,
                            universal_newlines=True).stdout.strip()
    result["estimates_before"] = result["estimates"]
    result["estimates"] = dict(estimates(folder / "model.onnx", []), refreshed_at_commit=commit,
                               refreshed_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    out.write_text(json.dumps(result, indent=1, sort_keys=True, default=float) + "\n")
    card = card_maker(name)(result, card["results"][0])
    write_card(attach_files(card, folder), folder)
    log(render_card(ShippedModel(name, folder, card)))


def card_maker(name: str) -> Callable[[Dict[str, Any], str], Dict[str, Any]]:
    """The function that turns a shipped model's result JSON into its card."""
    from benchmarks.shipped_models.finish_action import action_card
    from benchmarks.shipped_models.finish_yolov8 import yolov8_card

    cards = {"ssdlite-person-192": detector_card, "yolov8-person-192": yolov8_card,
             "action-mobilenet3d": lambda r, f: action_card(r, f, stage_command, CARD_FORMAT, list(NOT_EXECUTED_TRT))}
    if name not in cards:
        raise SystemExit("unknown shipped model %r (%s)" % (name, ", ".join(cards)))
    return cards[name]


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    if argv is None and "--refresh-estimates" in sys.argv:  # its own small command: no device output needed
        q = argparse.ArgumentParser(description=refresh_estimates.__doc__.split("\n\n")[0])
        q.add_argument("--refresh-estimates", required=True, metavar="NAME[,NAME]")
        for name in filter(None, q.parse_args().refresh_estimates.split(",")):
            refresh_estimates(name)
        return 0
    p.add_argument("--device-out", required=True, help="the device call's files (runs/, shipped/)")
    p.add_argument("--commit", required=True, help="the commit the device call ran (prepare.json)")
    p.add_argument("--models", default="ssdlite-person-192", help="comma-separated: ssdlite-person-192, "
                                                                  "yolov8-person-192, action-mobilenet3d")
    p.add_argument("--tracks", default=str(ROOT / "build" / "shipped_carry" / "action_tracks"),
                   help="the person tracks the device call's action stage used (make_on_gpu.py --prepare)")
    p.add_argument("--gpu-name", default="", help="the device's GPU, where the call's files do not name it")
    p.add_argument("--trial", default="", metavar="DIR",
                   help="write the shipped folder, card, docs page and result JSON into DIR instead of the repository "
                        "(a check of a dry run's output)")
    args = p.parse_args(argv)
    device_out = Path(args.device_out)
    shipped_dir = Path(args.trial).resolve() / "shipped" if args.trial else SHIPPED_DIR
    for name in filter(None, args.models.split(",")):
        card = card_maker(name)
        if name == "ssdlite-person-192":
            result = finish_detector(device_out, name, "ssdlite_person_student_192", TEACHER)
        elif name == "yolov8-person-192":
            from benchmarks.shipped_models.finish_yolov8 import finish_yolov8

            result = finish_yolov8(device_out, shipped_dir, args.gpu_name)
        else:
            from benchmarks.shipped_models.finish_action import finish_action

            result = finish_action(device_out, Path(args.tracks), estimates, shipped_dir, args.gpu_name)
        result.update(commit=args.commit, machine=machine())
        ship(result, card, shipped_dir, args.trial)
    return 0


if __name__ == "__main__":
    sys.exit(main())
