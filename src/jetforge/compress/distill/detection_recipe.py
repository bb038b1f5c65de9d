"""A detector distillation recipe end to end: prune the SSDLite person detector, distil it, export it.

``jetforge distill --config recipes/distill_ssdlite_person.yaml [--set k=v ...]``, or ``python -m
jetforge.compress.recipes recipes/distill_ssdlite_person.yaml`` (``kind: detector`` in the recipe says which runner
it is for: :mod:`jetforge.compress.recipes.detector`).

1. the teacher: the port of the ``ssdlite_mobilenet_v2_person`` asset's frozen graph;
2. the student: the teacher pruned to ``1 / student.macs_factor`` of its MACs by jetforge
   (``student.pruner: jetforge``, L1) or Torch-Pruning (``torch_pruning``: needs the package), or the
   state dict ``student.init`` (e.g. the ``student.pt`` of an earlier run: no pruning then);
   ``student.input_size`` (default: the teacher's 300) sets the size it runs at -- the conv body is
   resolution-agnostic, so the same weights start it at any size;
3. distillation on the training segments of the labelled person set
   (:mod:`jetforge.compress.distill.detection_train`), on CUDA when present (``device: auto``); a student
   of another input size has another anchor grid and learns the teacher's decoded boxes re-encoded on its
   anchors (:mod:`jetforge.compress.distill.detection_crossgrid`, the ``cross_grid`` block);
4. ``student.pt`` (a plain state dict: :func:`detection_student.detector_from_state` rebuilds it),
   ``student.onnx`` + sidecar (``export_detector``: the teacher's SSD spec and preprocessing at the
   student's input size, its own anchors) and ``result.json`` in ``out_dir``.

``student.layout: yolov8`` makes a student of another output layout instead: the anchor-free
:class:`jetforge.compress.models.yolo_student.YoloStudent` (the port's backbone, a new head; one
``[N, 4 + C, A]`` output read by the registered ``yolov8`` decoder), trained on the teacher's *decoded* boxes
(:mod:`jetforge.compress.distill.detection_yolo`, the ``anchor_free`` block).  Its teacher is the port, or with
``teacher.model`` any detector model whose sidecar (or ``teacher.decoder``) names a registered decoder, its
``teacher.class_name`` boxes the targets.  ``recipes/distill_yolov8_person.yaml``.
"""

import copy
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from jetforge.compress.distill.anchor_free import AnchorFreeConfig
from jetforge.compress.distill.detection_crossgrid import CrossGridConfig
from jetforge.compress.distill.detection_train import DetectorTrainConfig, ViewConfig
from jetforge.errors import ConfigError
from jetforge.fileio import atomic_output, sha256_file, write_json_atomic

log = logging.getLogger(__name__)

PRUNERS = ("jetforge", "torch_pruning")
LAYOUTS = ("ssd", "yolov8")  # the student's output layout: the port's SSD, or one YOLOv8-style output
STUDENT_MODEL_NAME = "ssdlite_mobilenet_v2_person_student"  # what the apps print for a distilled student
STUDENT_SOURCE = "distilled from the ssdlite_mobilenet_v2_person port (recipes/distill_ssdlite_person.yaml)"


@dataclass
class FramesConfig:
    """Which training frames (the recipe's ``data`` block): always the training segments of the label file."""

    labels: Optional[str] = None  # person label file; None = jetforge's own set (vision/data/people_boxes.json)
    assets_root: Optional[str] = None  # folder holding <asset>/<file>; None = jetforge's asset cache
    clips: Optional[List[str]] = None  # None = every clip of the label file
    frame_step: int = 1
    limit: Optional[int] = None  # at most this many frames (smoke runs)

    def __post_init__(self) -> None:
        if self.frame_step < 1 or (self.limit is not None and self.limit < 1):
            raise ValueError("data.frame_step and data.limit must be at least 1")


@dataclass
class TeacherConfig:
    """The teacher (the recipe's ``teacher`` block): the port, or any detector model with a registered decoder."""

    model: Optional[str] = None  # None: the SSDLite port; else a detector ONNX/engine (yolov8-layout students only)
    decoder: Optional[str] = None  # the decoder of a model whose sidecar names none (as app detect's --decoder)
    class_name: str = "person"  # the teacher's class the student learns


@dataclass
class StudentConfig:
    layout: str = "ssd"  # ssd: the pruned port; yolov8: the anchor-free YOLO-layout student
    pruner: str = "jetforge"
    macs_factor: float = 2.5  # teacher MACs / student MACs (at the teacher's input size)
    input_size: Optional[int] = None  # pixels (square); None = the teacher's (300)
    init: Optional[str] = None  # a student's state dict to start from instead of pruning the teacher

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError("student.layout must be one of %s, got %r" % (", ".join(LAYOUTS), self.layout))
        if self.layout == "yolov8" and self.input_size is not None and self.input_size % 32:
            raise ValueError("a yolov8-layout student's input_size must be a multiple of 32 (e.g. 192), got %r"
                             % self.input_size)
        if self.pruner not in PRUNERS:
            raise ValueError("student.pruner must be one of %s, got %r" % (", ".join(PRUNERS), self.pruner))
        if not self.macs_factor >= 1.0:
            raise ValueError("student.macs_factor must be >= 1, got %r" % self.macs_factor)
        if self.input_size is not None and not 64 <= self.input_size <= 1024:
            raise ValueError("student.input_size must be 64..1024 pixels (or null: the teacher's), got %r"
                             % self.input_size)


@dataclass
class DetectorDistillConfig:
    kind: str = "detector"
    name: str = "ssdlite_person_student"
    out_dir: str = "runs/ssdlite_person_student"
    data: FramesConfig = field(default_factory=FramesConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    student: StudentConfig = field(default_factory=StudentConfig)
    views: ViewConfig = field(default_factory=ViewConfig)
    train: DetectorTrainConfig = field(default_factory=DetectorTrainConfig)
    cross_grid: CrossGridConfig = field(default_factory=CrossGridConfig)  # used when the input sizes differ
    anchor_free: AnchorFreeConfig = field(default_factory=AnchorFreeConfig)  # used by student.layout: yolov8
    device: str = "auto"
    export_onnx: bool = True

    def __post_init__(self) -> None:
        if self.kind != "detector":
            raise ValueError("kind must be 'detector' for a detector distillation recipe, got %r" % self.kind)
        if self.teacher.model is not None and self.student.layout != "yolov8":
            raise ValueError("teacher.model is for student.layout: yolov8 (an SSD student is the port pruned: its "
                             "teacher is the port); set teacher.model: null or student.layout: yolov8")


def make_student(teacher: Any, cfg: StudentConfig) -> Any:
    """The student: ``cfg.init``'s weights, or the teacher pruned to ``1 / macs_factor`` of its MACs (a copy); at
    ``cfg.input_size``."""
    from jetforge.compress.distill.detection_student import (detector_from_state, model_macs, prune_detector,
                                                             torch_pruning_for_macs)

    size = cfg.input_size or teacher.image_size
    if cfg.init is not None:
        from jetforge.compress.checkpoint import read_weights

        return detector_from_state(read_weights(cfg.init, "student.init weights"), size)
    student = copy.deepcopy(teacher)
    prune_detector(student, flops_reduction=cfg.macs_factor, latency_aware=False)
    if cfg.pruner != "jetforge":
        from jetforge.optional import require

        require("torch_pruning", "the Torch-Pruning student (pip install torch-pruning==1.6.1)")
        student = torch_pruning_for_macs(teacher, model_macs(student, student.image_size))[0]
    return student if size == teacher.image_size else detector_from_state(student.state_dict(), size)


def run_recipe(cfg: DetectorDistillConfig) -> Dict[str, Any]:
    """Run the recipe (module docstring); returns what ``result.json`` holds."""
    import torch

    from jetforge.assets import asset_dir, asset_path
    from jetforge.compress.distill.detection_student import model_macs
    from jetforge.compress.distill.detection_crossgrid import CrossGridTargets, student_contract
    from jetforge.compress.distill.detection_train import distill_detector, frame_bank_from_labels
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec
    from jetforge.output_set import check_output_folder

    if cfg.device not in ("auto", "cpu", "cuda") and not cfg.device.startswith("cuda:"):
        raise ConfigError("device must be auto, cpu or cuda[:N], got %r" % cfg.device)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device %s: this torch sees no CUDA GPU" % cfg.device,
                          hint="use device: auto (CUDA when present) or device: cpu")
    check_output_folder(cfg.out_dir, "out_dir", hint="set out_dir to a folder, e.g. --set out_dir=runs/%s" % cfg.name)
    if cfg.student.init is not None and Path(cfg.student.init).resolve().parent == Path(cfg.out_dir).resolve():
        raise ConfigError("out_dir %s holds student.init %s: this run would overwrite its own starting weights"
                          % (cfg.out_dir, cfg.student.init), hint="set out_dir to a new folder")
    if cfg.student.init is not None and not Path(cfg.student.init).is_file():
        raise ConfigError("student.init %s is not a file" % cfg.student.init,
                          hint="give the student.pt of an earlier run, or null to prune the teacher")
    if cfg.teacher.model is not None and not Path(cfg.teacher.model).is_file():
        raise ConfigError("teacher.model %s is not a file" % cfg.teacher.model,
                          hint="give a detector ONNX (or engine) with a sidecar naming its decoder, or null for the "
                               "SSDLite port")
    if cfg.data.assets_root is not None and not Path(cfg.data.assets_root).is_dir():
        raise ConfigError("data.assets_root %s is not a folder" % cfg.data.assets_root,
                          hint="give the folder holding the clips' assets (e.g. opencv_samples/vtest.avi), or "
                               "null for jetforge's asset cache")
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device)
    weights = asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb")
    graph = load_graphdef(weights)
    g = SSDGraph(graph)
    spec, preprocess = read_spec(g), read_preprocess(g)
    root = cfg.data.assets_root or asset_dir("opencv_samples").parent
    # the frames first: a wrong clip folder or label file is reported before minutes of pruning
    bank = frame_bank_from_labels(root, preprocess, device, step=cfg.data.frame_step, clips=cfg.data.clips,
                                  limit=cfg.data.limit, labels=cfg.data.labels)
    teacher = load_from_graphdef(weights, graph=graph)
    if cfg.student.layout == "yolov8":
        from jetforge.compress.distill.detection_yolo_recipe import run_yolo_layout

        return run_yolo_layout(cfg, bank, teacher, spec, preprocess, device)
    student = make_student(teacher, cfg.student)
    student_spec_, student_preprocess = student_contract(spec, preprocess, student)
    cross = None if student.image_size == teacher.image_size else CrossGridTargets(
        spec, student_spec_, cfg.cross_grid, device)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log.info("%d training frames on %s; student %d MACs at %d px (teacher %d at %d px)%s", len(bank), device,
             model_macs(student, student.image_size), student.image_size, model_macs(teacher, teacher.image_size),
             teacher.image_size, "; cross-grid targets" if cross else "")
    start = time.perf_counter()
    history = distill_detector(student, teacher, bank, cfg.views, cfg.train, cross_grid=cross,
                               on_log=lambda e: log.info("step %d loss %.4f (class %.4f, box %.4f)", e["step"],
                                                         e["loss"], e["class_kl"], e["box_l1"]))
    student = student.cpu().eval()
    with atomic_output(out / "student.pt") as tmp:
        torch.save(student.state_dict(), str(tmp))
    result: Dict[str, Any] = {"name": cfg.name, "device": str(device), "frames": len(bank),
                              "macs": {"teacher": model_macs(teacher, teacher.image_size),
                                       "student": model_macs(student, student.image_size)},
                              "input_size": {"teacher": int(teacher.image_size), "student": int(student.image_size)},
                              "train": history, "seconds": time.perf_counter() - start, "config": asdict(cfg),
                              "files": {"student": str(out / "student.pt")}}
    if cfg.export_onnx:
        from jetforge.compress.models.ssdlite_export import export_detector

        details = {"recipe": cfg.name, "weights": "student.pt", "weights_sha256": sha256_file(out / "student.pt"),
                   "weights_source": STUDENT_SOURCE}  # the student's own weights, not the teacher's graph
        name_student_export(export_detector(student, student_spec_, student_preprocess, out / "student.onnx",
                                            provenance=details), out / "student.onnx")
        result["files"]["onnx"] = str(out / "student.onnx")
    write_json_atomic(out / "result.json", result)
    return result


def export_student_detector(weights: Any, out: Any, provenance: Optional[Dict[str, Any]] = None,
                            input_size: Optional[int] = None) -> Dict[str, Any]:
    """A distilled student's state dict (``student.pt``) -> ONNX body + sidecar, for the people app.

    The exporter contract of the CLI's person-detector table (``exporter(weights_path, out_path,
    provenance=...)``): the student is rebuilt from its weights alone (``detector_from_state``, read
    weights-only), and gets the teacher's SSD spec and preprocessing, read from the teacher's frozen graph
    in the asset cache, at ``input_size`` (default: the teacher's; a state dict does not say the size it
    was trained at, its ``result.json`` does) with the anchors of that size.
    """
    from jetforge.assets import asset_path
    from jetforge.compress.checkpoint import read_weights
    from jetforge.compress.distill.detection_crossgrid import student_contract
    from jetforge.compress.distill.detection_student import detector_from_state
    from jetforge.compress.models.ssdlite_export import export_detector
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec
    g = SSDGraph(load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb")))
    spec, preprocess = read_spec(g), read_preprocess(g)
    student = detector_from_state(read_weights(weights, "distilled detector weights"), input_size or preprocess.height)
    spec, preprocess = student_contract(spec, preprocess, student)
    details = {"weights": Path(weights).name, "weights_sha256": sha256_file(weights), "weights_source": STUDENT_SOURCE}
    details.update(provenance or {})
    sidecar = name_student_export(export_detector(student, spec, preprocess, out, provenance=details), out)
    return {"model": student, "sidecar": sidecar, "spec": spec, "onnx": Path(out)}


def name_student_export(sidecar: Any, path: Any, name: str = STUDENT_MODEL_NAME) -> Any:
    """Give an exported student its own ``model_name`` (``export_detector`` writes the teacher's), so apps say which."""
    from jetforge.runtime.sidecar import write_sidecar

    sidecar.model_name = name
    write_sidecar(path, sidecar)
    return sidecar


__all__ = ["DetectorDistillConfig", "FramesConfig", "LAYOUTS", "PRUNERS", "TeacherConfig", "STUDENT_MODEL_NAME",
           "StudentConfig",
           "export_student_detector", "make_student", "name_student_export", "run_recipe"]
