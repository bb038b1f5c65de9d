"""The detector recipe's ``student.layout: yolov8`` run: build the YOLO-layout student, distil it, export it.

Called by :func:`jetforge.compress.distill.detection_recipe.run_recipe` once the frames and the port are loaded (so a
wrong clip folder or label file is reported before any training).  The student starts from the port's backbone
(:meth:`YoloStudent.copy_backbone`) or from ``student.init`` (an earlier yolov8-layout ``student.pt``); the teacher
is the port (:class:`PortTeacher`) or ``teacher.model`` (:class:`DecodedTeacher`).  Writes ``student.pt``,
``student.onnx`` + sidecar (``yolov8`` decoder, the person class, the port's preprocessing at the student's size)
and ``result.json`` in ``out_dir``; returns what ``result.json`` holds (the keys of the SSD path's result, so the
recipe's summary lines read both).
"""

import dataclasses
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict

import torch

from jetforge.compress.distill.detection_yolo import DecodedTeacher, PortTeacher, distill_yolo_student
from jetforge.compress.models.yolo_student import DEFAULT_IMAGE_SIZE, YoloStudent, yolo_student_from_state
from jetforge.fileio import atomic_output, sha256_file, write_json_atomic

log = logging.getLogger(__name__)

STUDENT_SOURCE = ("distilled from the teacher's decoded boxes (student.layout: yolov8, "
                  "recipes/distill_yolov8_person.yaml)")


def make_yolo_student(cfg: Any, port: Any) -> YoloStudent:
    """``student.init``'s weights, or a new student with the port's backbone, at ``student.input_size``."""
    size = int(cfg.student.input_size or DEFAULT_IMAGE_SIZE)
    if cfg.student.init is not None:
        from jetforge.compress.checkpoint import read_weights

        return yolo_student_from_state(read_weights(cfg.student.init, "student.init weights"), size,
                                       cfg.anchor_free.channels)
    return YoloStudent(size, 1, cfg.anchor_free.channels).copy_backbone(port)


def make_teacher(cfg: Any, port: Any, spec: Any, preprocess: Any, bank: Any, device: torch.device) -> Any:
    """The box teacher: the port, or ``teacher.model`` through its decoder (``teacher.class_name`` its boxes).

    On a CPU the port runs as its exported ONNX (``out_dir/teacher.onnx``, decoder ``ssd-tf``) through ONNX Runtime:
    on the 2-core machine a batch of 16 views took 0.55 s there against 8.5 s in torch eager (depthwise convs), and
    the teacher was two thirds of every step.  The boxes are the same port's (the views rounded to 8-bit pixels
    first: tests/compress/test_yolo_recipe.py bounds the difference)."""
    if cfg.teacher.model is None and device.type == "cuda":
        return PortTeacher(port, spec, cfg.cross_grid, device)
    model = cfg.teacher.model
    if model is None:
        from jetforge.compress.models.ssdlite_export import export_detector

        model = Path(cfg.out_dir) / "teacher.onnx"
        export_detector(port, spec, preprocess, model)
    return DecodedTeacher(model, bank, cfg.cross_grid, cfg.teacher.class_name, cfg.teacher.decoder)


def run_yolo_layout(cfg: Any, bank: Any, port: Any, spec: Any, preprocess: Any, device: torch.device
                    ) -> Dict[str, Any]:
    """Train and export the yolov8-layout student (module docstring)."""
    from jetforge.compress.distill.detection_student import model_macs

    student = make_yolo_student(cfg, port)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    teacher = make_teacher(cfg, port, spec, preprocess, bank, device)
    teacher_name = cfg.teacher.model or "the ssdlite_mobilenet_v2_person port"
    student_macs = model_macs(student, student.image_size)
    log.info("%d training frames on %s; yolov8-layout student %d MACs at %d px; teacher %s at %d px", len(bank),
             device, student_macs, student.image_size, teacher_name, teacher.size)
    start = time.perf_counter()
    try:
        history = distill_yolo_student(
            student, teacher, bank, cfg.views, cfg.train, cfg.anchor_free,
            on_log=lambda e: log.info("step %d loss %.4f (class %.4f, box %.4f, %d positives)", e["step"],
                                      e["loss"], e["class_bce"], e["box_giou"], e["positives"]))
    finally:
        if hasattr(teacher, "detector"):
            teacher.detector.close()
    student = student.cpu().eval()
    with atomic_output(out / "student.pt") as tmp:
        torch.save(student.state_dict(), str(tmp))
    port_macs = model_macs(port, port.image_size)
    result: Dict[str, Any] = {
        "name": cfg.name, "device": str(device), "frames": len(bank), "layout": "yolov8",
        "teacher": teacher_name, "macs": {"teacher": port_macs if cfg.teacher.model is None else None,
                                          "student": student_macs},
        "input_size": {"teacher": int(teacher.size), "student": int(student.image_size)},
        "train": history, "seconds": time.perf_counter() - start, "config": asdict(cfg),
        "files": {"student": str(out / "student.pt")}}
    if cfg.export_onnx:
        from jetforge.compress.models.yolo_export import export_yolo_student

        details = {"recipe": cfg.name, "weights": "student.pt", "weights_sha256": sha256_file(out / "student.pt"),
                   "weights_source": STUDENT_SOURCE, "teacher": Path(teacher_name).name}
        contract = dataclasses.replace(preprocess, height=student.image_size, width=student.image_size)
        export_yolo_student(student, contract, out / "student.onnx", ["person"], provenance=details)
        result["files"]["onnx"] = str(out / "student.onnx")
    write_json_atomic(out / "result.json", result)
    return result


__all__ = ["make_teacher", "make_yolo_student", "run_yolo_layout"]
