"""The YOLOv8-layout person student a GPU call made with the recipe entry -> the shipped ``yolov8-person-192``.

``make_on_gpu.py --stage yolov8,time`` ran ``python -m jetforge.compress.recipes recipes/distill_yolov8_person.yaml``
on the GPU: the recipe distilled a student of another output layout than its teacher's (one output ``[N, 5, A]``,
read by the registered ``yolov8`` decoder as a YOLOv8/v11 export is) from the SSDLite port's decoded boxes, and
exported ``student.onnx`` with its sidecar.  This script, on the CPU, ships that file unchanged and measures it the
way ``finish.py`` measures ``ssdlite-person-192`` (:func:`benchmarks.shipped_models.finish.measure_detector`):

* person AP@0.5 on the 94 held-out labelled frames beside the port, each decoded by its own sidecar's decoder, with
  paired bootstrap intervals over frames and over 10-frame blocks;
* the INT8 stage as a user runs it: ``jetforge calibrate model.onnx --data FRAMES --labels people_boxes.json``;
* CPU latency at batch 1 (ONNX Runtime, 2 threads, models alternating);
* the GPU timing of ``make_on_gpu.py``'s time stage (FP16, CUDA graphs, batch 1 and 32, beside the port);
* MACs counted here from the run's ``student.pt`` (the recipe's own count is kept beside it);
* ``jetforge estimate`` for Orin Nano / NX / AGX.

    .venv/bin/python benchmarks/shipped_models/finish.py --device-out FILES_AT --commit C --models yolov8-person-192
"""

import json
import shutil
from pathlib import Path
from typing import Any, Dict

NAME = "yolov8-person-192"
RUN = "yolov8_person_student"
STAGE = "yolov8"  # make_on_gpu.py's stage: shipped/yolov8.json


def gpu_records(device_out: Path, gpu_name: str) -> Dict[str, Dict[str, Any]]:
    """The call's stage record and time-stage timings, as written (``--gpu-name`` only where they name no GPU)."""
    records = {key: json.loads((device_out / "shipped" / ("%s.json" % key)).read_text()) for key in (STAGE, "time")}
    for record in records.values():
        record.setdefault("environment", {})
        record["environment"]["gpu"] = record["environment"].get("gpu") or gpu_name or None
    if RUN not in records["time"]["models"]:
        raise SystemExit("%s: the time stage did not time %s (run make_on_gpu.py --stage yolov8,time)"
                         % (device_out / "shipped" / "time.json", RUN))
    return records


def finish_yolov8(device_out: Path, shipped_dir: Path, gpu_name: str = "") -> Dict[str, Any]:
    from benchmarks.detector_students.yolov8_student import train_summary
    from benchmarks.shipped_models.finish import TEACHER, copy_model, estimates, macs, measure_detector
    from jetforge.fileio import sha256_file

    run_dir = device_out / "runs" / RUN
    records = gpu_records(device_out, gpu_name)
    if records[STAGE].get("returncode"):
        raise SystemExit("the recipe stage failed on the device (exit %d): nothing to ship"
                         % records[STAGE]["returncode"])
    sidecar = json.loads((run_dir / "student.onnx.json").read_text())
    decoder = sidecar.get("extra", {}).get("decoder", {}).get("name")
    if decoder != "yolov8":
        raise SystemExit("%s names decoder %r, not yolov8: not this recipe's student" % (run_dir, decoder))
    folder = shipped_dir / NAME
    if folder.exists():
        shutil.rmtree(str(folder))
    files = copy_model(run_dir / "student.onnx", folder)
    recipe = train_summary(run_dir)
    size = int(recipe["input_size"]["student"])
    measured = measure_detector(NAME, files["onnx"])
    return dict(measured, name=NAME, kind="detector", layout="yolov8", teacher=TEACHER, train=records[STAGE],
                recipe=recipe, exported="the recipe's own student.onnx and sidecar (decoder yolov8), copied unchanged",
                gpu_timing=records["time"], estimates=estimates(files["onnx"], []), input_size=size,
                macs=macs(run_dir, size, layout="yolov8"), macs_recipe=recipe["macs"],
                shipped_onnx_sha256=sha256_file(files["onnx"]))


def yolov8_card(result: Dict[str, Any], result_file: str) -> Dict[str, Any]:
    from benchmarks.shipped_models.finish import CARD_FORMAT, TRAINING_DATA, detector_numbers, stage_command

    train, recipe = result["train"], result["recipe"]
    size = result["input_size"]
    return dict(detector_numbers(result, RUN), **{
        "format": CARD_FORMAT, "name": NAME, "task": "detect (person)",
        "summary": "A person detector of the YOLOv8 output layout: one output [N, 5, A] (cx, cy, w, h in input "
                   "pixels, the person probability), read by the registered yolov8 decoder as a YOLOv8/v11 export "
                   "is. The port's MobileNetV2 backbone up to stride 16, a new stride-32 layer, a top-down pyramid "
                   "and an anchor-free head on strides 8/16/32, distilled at %d px from the port's decoded boxes "
                   "(recipes/distill_yolov8_person.yaml: %d steps of batch %d in a %.0f s budget on the GPU). Its "
                   "teacher has another output layout (SSD anchors): the student learns from decoded boxes only."
                   % (size, recipe["steps_done"], recipe["config"]["train"]["batch"],
                      recipe["config"]["train"]["budget_s"]),
        "input": "1x3x%dx%d" % (size, size),
        "macs": result["macs"]["student"], "teacher_macs": result["macs"]["teacher"], "teacher": result["teacher"],
        "made_by": {"recipe": "recipes/distill_yolov8_person.yaml", "command": stage_command(train),
                    "commit": result["commit"], "device": result["gpu_timing"]["environment"].get("gpu"),
                    "date": train["utc"][:10], "seconds": {"recipe": train["seconds"]},
                    "export": result["exported"]},
        "training_data": TRAINING_DATA, "results": [result_file], "files": {}})
