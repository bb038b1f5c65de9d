"""``jetforge bench MODEL --accuracy LABELS``: the accuracy of the very session that was just timed.

Why the benchmark's own session: the number a Jetson user needs next to a latency is the accuracy *of that
backend* (a TensorRT engine built in FP16 or INT8, ONNX Runtime, TorchScript), not the FP32 ONNX's; opening a second
session would measure another thing.  :func:`plan_accuracy` checks everything that can be checked before the timed
run (the model's sidecar, task and decoder, the kind of label file, the input shape), so a wrong flag costs no
benchmark (a label set's classes are mapped to the model's then, a classifier's image paths resolved);
:func:`measure_accuracy` reads the labelled images after it, one batch at a time (memory does not grow with the
number of images, and none of it is in the benchmark's RSS).

**Inputs.**  Images become inputs through the sidecar's input contract, in batches of the benchmark's batch
(the feeds' axis 0: ``--batch``, ``--shapes``, ``--load-inputs`` or the engine's fixed batch).  Every batch has
that size: the last one is padded with copies of its last image and the padding's outputs are dropped, so a
fixed-batch engine takes them and a dynamic session sees only the shape it was timed at.  The contract must make
exactly the feed's per-image shape (a dynamic-size model timed at another ``--shapes`` size is refused).

**Detectors** (sidecar task ``detect``): ``LABELS`` is what ``calibrate --labels`` takes (a COCO ``.json``, a YOLO
classes ``.txt``/``.names``, Pascal VOC ``.xml`` or a folder, or jetforge's person-box file: its held-out frames),
read by :mod:`jetforge.calibrate.detection_eval`; raw outputs are decoded as
:class:`~jetforge.calibrate.metrics.DetectionAPMetric` decodes them (the sidecar's decoder at score > 0.01 and 100
detections per image, COCO's evaluation settings), so the AP is calibrate's FP32 AP when the backend computes what
ONNX Runtime does.  Reported: AP@0.5 and AP@[.5:.95] per class and their mean
(:func:`~jetforge.vision.detection_metrics.class_bootstraps`, one side), each with a 95 % percentile bootstrap
interval over images and, where the labels group frames (video clips: blocks of 10 frames), over groups.

**Classifiers** (task ``classify``): ``LABELS`` is calibrate's label list (``image<TAB>class`` lines,
:func:`~jetforge.calibrate.evaluate.label_table`); image paths are relative to ``images`` (``--accuracy-images``,
default: the label file's folder) and may not leave it.  Reported: top-1 and, with 5 classes or more, top-5
accuracy, each with a 95 % percentile bootstrap interval over images
(:func:`~jetforge.calibrate.metrics.bootstrap_ci`, 2000 resamples, seed 0).
"""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import CalibrationError, ConfigError, InputFileError, ModelError
from jetforge.progress import progress_bar

RESAMPLES = 2000  # bootstrap resamples, as calibrate's detection_ap metric
SEED = 0
CONFIDENCE = 0.95
TASKS = ("detect", "classify")


@dataclass
class AccuracyPlan:
    """What :func:`measure_accuracy` runs: checked by :func:`plan_accuracy` before the benchmark."""

    session: Any
    task: str
    labels: Path
    batch: int
    input_name: str
    input_dtype: str
    contract: Any
    metric: Any = None  # DetectionAPMetric (its decoder and contract) for a detector
    class_names: Tuple[str, ...] = ()
    samples: Optional[int] = None
    images: Optional[Path] = None
    person: bool = False  # jetforge's person-box file (its held-out frames), not a label set
    unbatched: bool = False  # the decoder's outputs hold one image without a batch axis (batch 1, never cut)
    available: int = 0  # labelled images in the file
    chosen: List[Any] = field(default_factory=list)  # a classifier's image paths, in order
    truth: List[Any] = field(default_factory=list)  # their class index
    frames: Any = None  # a detector's label set: DetectionFrames, classes mapped, no pixel read yet


def plan_accuracy(session: Any, labels: Union[str, Path], feeds: Dict[str, np.ndarray], samples: Optional[int] = None,
                  images: Optional[Union[str, Path]] = None) -> AccuracyPlan:
    """Refuse what cannot be measured, before any timed call: a model without a sidecar, another task, a label
    file of the other kind, a missing file, an input shape the contract does not make."""
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.model_facts import model_facts

    path = Path(labels)
    if not path.exists():
        raise InputFileError("--accuracy labels %s do not exist" % path,
                             hint="a COCO .json, YOLO classes .txt, VOC .xml/folder or people_boxes.json for a "
                                  "detector; an `image<TAB>class` list for a classifier")
    facts = model_facts(session)
    if facts is None:
        raise ModelError("--accuracy needs %s's sidecar (its task, input contract and classes), and it has none"
                         % session.path.name,
                         hint="write it once: jetforge export-sidecar %s --decoder NAME --classes LIST"
                              % session.path.name)
    if facts.task not in TASKS:
        raise ModelError("--accuracy measures detectors and classifiers; %s's sidecar says task %r"
                         % (session.path.name, facts.task), hint="drop --accuracy for this model")
    if len(session.inputs) != 1:
        raise ModelError("--accuracy feeds one image input; %s has %d inputs" % (session.path.name,
                                                                                len(session.inputs)))
    contract = input_contract(facts, "image", purpose="--accuracy")
    spec = session.inputs[0]
    feed = feeds[spec.name]
    if tuple(feed.shape[1:]) != tuple(contract.input_shape):
        raise ConfigError("--accuracy feeds images as the sidecar's contract makes them (%s) but the benchmark ran "
                          "%r at %s" % ("x".join(map(str, contract.input_shape)), spec.name,
                                        "x".join(map(str, feed.shape[1:]))),
                          hint="time it at the contract's size (drop the --shapes/--load-inputs size), so the "
                               "accuracy is that of the shape timed")
    plan = AccuracyPlan(session, facts.task, path, int(feed.shape[0]), spec.name, str(spec.dtype), contract,
                        class_names=tuple(facts.labels), samples=samples,
                        images=Path(images) if images is not None else None)
    if facts.task == "detect":
        _plan_detector(plan, facts, images)
    else:
        _plan_classifier(plan)
    return plan


def _plan_classifier(plan: AccuracyPlan) -> None:
    from jetforge.calibrate.evaluate import label_table
    from jetforge.calibrate.sources import evenly_spaced

    if plan.labels.is_dir() or plan.labels.suffix.lower() in (".json", ".xml"):
        raise InputFileError("--accuracy %s is a detection label set (boxes) but %s is a classifier"
                             % (plan.labels, plan.session.path.name),
                             hint="give a classification label list: one `image_path<TAB>class` per line")
    table = label_table(plan.labels, plan.class_names)  # its errors name the file and line, never the content
    if not _names_images(table):
        raise InputFileError("--accuracy %s does not name images (`image_path<TAB>class` lines)" % plan.labels,
                             hint="a YOLO classes file is a detector's label set; a classifier takes "
                                  "`image_path<TAB>class` lines")
    keys = list(table)
    keys = [keys[i] for i in evenly_spaced(len(keys), plan.samples or len(keys))]
    root = plan.images if plan.images is not None else plan.labels.parent
    plan.available, plan.chosen = len(table), _image_paths(root, keys, plan.labels)
    plan.truth = [table[k] for k in keys]


def _plan_detector(plan: AccuracyPlan, facts: Any, images: Any) -> None:
    from jetforge.calibrate.detection_eval import is_person_box_file, label_set_frames
    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.vision.decoded_detector import UNBATCHED_DECODERS

    if images is not None:
        raise ConfigError("--accuracy-images locates a classifier's images; a detector's label set names its own",
                          hint="drop --accuracy-images")
    if is_classification_list(plan.labels):
        raise InputFileError("--accuracy %s is a classification label list (image<TAB>class) but %s is a detector"
                             % (plan.labels, plan.session.path.name),
                             hint="give boxes: a COCO .json, a YOLO classes .txt, VOC .xml files or people_boxes.json")
    plan.metric = DetectionAPMetric(sidecar=facts, n_resamples=RESAMPLES, seed=SEED)  # refuses a model without decoder
    plan.unbatched = plan.metric.decoder.name in UNBATCHED_DECODERS
    if plan.unbatched and plan.batch != 1:
        raise ConfigError("decoder %s reads one image per call; the benchmark ran batch %d"
                          % (plan.metric.decoder.name, plan.batch), hint="bench it with --batch 1")
    plan.person = is_person_box_file(plan.labels)
    if not plan.person:  # the person set's frames are decoded from its clips, after the timing
        plan.frames = label_set_frames(plan.labels, plan.metric.decoder.labels, plan.samples)
        plan.available = plan.frames.available


def is_classification_list(path: Path) -> bool:
    """Whether ``path`` is a classification label list (``image<TAB>class`` lines naming images) rather than a
    detection label set (a ``.json``/``.xml`` file, a folder, a YOLO classes file: one name per line)."""
    from jetforge.calibrate.evaluate import label_table

    if path.is_dir() or path.suffix.lower() in (".json", ".xml"):
        return False
    try:
        return _names_images(label_table(path))
    except InputFileError:
        return False


def _names_images(table: Dict[str, int]) -> bool:
    from jetforge.calibrate.sources import IMAGE_EXTENSIONS

    return all("#" in k or Path(k).suffix.lower() in IMAGE_EXTENSIONS for k in table)


def measure_accuracy(plan: AccuracyPlan, progress: bool = True) -> Dict[str, Any]:
    """Run the labelled images through ``plan.session``; the ``accuracy`` block of bench's report."""
    t0 = time.perf_counter()
    if plan.task == "detect":
        block = _detector_accuracy(plan, progress)
    else:
        block = _classifier_accuracy(plan, progress)
    block.update(labels=str(plan.labels), batch=plan.batch, seconds=round(time.perf_counter() - t0, 3))
    return block


def _limit(samples: Optional[int], available: int) -> str:
    return "all" if samples is None or samples >= available else "--accuracy-samples %d" % samples


def _run_batches(plan: AccuracyPlan, batches: Iterable[np.ndarray], count: int,
                 progress: bool) -> Iterable[List[np.ndarray]]:
    """Each batch's outputs (session output order), the padding's rows dropped (module docstring)."""
    names = [t.name for t in plan.session.outputs]
    total = -(-count // plan.batch)
    for batch in progress_bar(batches, desc="accuracy", unit="batch", total=total, enabled=progress):
        n = len(batch)
        if n < plan.batch:
            batch = np.concatenate([batch, np.repeat(batch[-1:], plan.batch - n, axis=0)])
        out = plan.session.infer({plan.input_name: np.ascontiguousarray(batch, dtype=plan.input_dtype)})
        yield [np.asarray(out[k]) if plan.unbatched else np.asarray(out[k])[:n] for k in names]


def _streamed(plan: AccuracyPlan, named_images: Iterable[Tuple[str, np.ndarray]]) -> Iterable[np.ndarray]:
    """Preprocessed batches of ``plan.batch`` images (the last one may be short), read lazily."""
    from jetforge.calibrate.sources import PreprocessedBatches

    return (batch for batch, _ in PreprocessedBatches(named_images, plan.contract, plan.batch, what="labelled images"))


def _detector_accuracy(plan: AccuracyPlan, progress: bool) -> Dict[str, Any]:
    from jetforge.calibrate.detection_eval import BLOCK_FRAMES, person_set_frames

    metric = plan.metric
    frames = (person_set_frames(plan.labels, plan.samples, model_labels=metric.decoder.labels) if plan.person
              else plan.frames)  # the person set: its held-out frames, decoded from the clips (94 frames)
    targets, available = frames.targets, frames.available
    batches = _streamed(plan, frames.images())
    boxes: List[np.ndarray] = []
    scores: List[np.ndarray] = []
    classes: List[np.ndarray] = []
    for outputs in _run_batches(plan, batches, len(targets), progress):
        n = 1 if plan.unbatched else len(outputs[0])
        found = metric.detections(outputs, targets[len(boxes):len(boxes) + n])
        boxes += found[0]
        scores += found[1]
        classes += found[2]
    return dict(task="detect", format=_label_format(plan.labels, plan.person), images=len(targets),
                available=available, limit=_limit(plan.samples, available), padded=(-len(targets)) % plan.batch,
                decoder={"name": metric.decoder.name, "score_threshold": metric.decoder.options.score_threshold,
                         "max_detections": metric.decoder.options.max_detections},
                group_frames=BLOCK_FRAMES, **detection_summary(targets, (boxes, scores, classes),
                                                               metric.decoder.labels, progress))


def _label_format(path: Path, person: bool) -> str:
    if person:
        return "jetforge person boxes, held-out frames"
    if path.is_dir() or path.suffix.lower() == ".xml":
        return "Pascal VOC"
    return "COCO JSON" if path.suffix.lower() == ".json" else "YOLO"


def detection_summary(targets: Sequence[Any], detections: Tuple[List[np.ndarray], ...],
                      labels: Sequence[str], progress: bool = False) -> Dict[str, Any]:
    """AP@0.5 and AP@[.5:.95] per class present among the targets' boxes and their mean, with bootstrap intervals
    over images and (targets with groups) over groups; box counts per class.  ``progress``: a bar for a long
    bootstrap (many classes)."""
    from jetforge.vision.detection_metrics import class_bootstraps

    truth = [np.zeros(len(t.boxes), np.int64) if t.classes is None else np.asarray(t.classes, np.int64)
             for t in targets]
    kept = [~np.asarray(t.difficult, bool) for t in targets]
    present = sorted({int(c) for k, cls in zip(kept, truth) for c in cls[k]})
    if not present:
        raise CalibrationError("the %d labelled images hold no box that counts (none, or all difficult): AP is "
                               "undefined" % len(targets), hint="give labels with boxes")
    gt = ([t.boxes for t in targets], [t.difficult for t in targets], truth)
    groupings: List[Any] = [None]
    if any(t.group is not None for t in targets):
        groupings.append([t.group if t.group is not None else "image%d" % i for i, t in enumerate(targets)])
    boots = class_bootstraps(gt, detections, None, present, groupings, n_resamples=RESAMPLES, seed=SEED,
                             confidence=CONFIDENCE, progress=progress)  # matched once for both units
    by_image, by_group = boots[0], (boots[1] if len(boots) > 1 else None)

    def entry(image_block: Dict[str, Any], group_block: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        a = image_block["a"]
        out = {"ap50": a["ap50"], "ap50_ci": a["ap50_ci"], "ap": a["ap"], "ap_ci": a["ap_ci"]}
        if group_block is not None:
            out.update(ap50_group_ci=group_block["a"]["ap50_ci"], ap_group_ci=group_block["a"]["ap_ci"])
        return out

    per_class: Dict[str, Any] = {}
    for c in present:
        name = labels[c] if c < len(labels) else str(c)
        per_class[name] = dict(entry(by_image["classes"][c], by_group["classes"][c] if by_group else None),
                               boxes=int(sum(int(np.count_nonzero(cls[k] == c)) for k, cls in zip(kept, truth))),
                               images=int(sum(bool(np.any(cls[k] == c)) for k, cls in zip(kept, truth))))
    return {"boxes": int(sum(int(k.sum()) for k in kept)),
            "difficult_boxes": int(sum(int((~k).sum()) for k in kept)),
            "interval": {"method": "percentile bootstrap (numpy.percentile, linear)", "confidence": CONFIDENCE,
                         "unit": "image", "groups": by_group["units"] if by_group else None,
                         "units": by_image["units"], "n_resamples": RESAMPLES, "seed": SEED},
            "mean": entry(by_image["mean"], by_group["mean"] if by_group else None), "classes": per_class}


def _classifier_accuracy(plan: AccuracyPlan, progress: bool) -> Dict[str, Any]:
    from jetforge.calibrate.metrics import _in_topk, bootstrap_ci

    from jetforge.calibrate.detection_eval import read_label_image

    batches = _streamed(plan, ((str(p), read_label_image(plan.labels, p)) for p in plan.chosen))
    logits = np.concatenate([out[0].reshape(len(out[0]), -1)
                             for out in _run_batches(plan, batches, len(plan.chosen), progress)])
    truth = np.asarray(plan.truth, np.int64)
    width = logits.shape[1]
    if int(truth.max()) >= width or int(truth.min()) < 0:
        raise InputFileError("%s labels class %d but the model has %d outputs" % (plan.labels, int(truth.max()),
                                                                                 width),
                             hint="class indices run from 0 to %d" % (width - 1))
    top1 = (logits.argmax(axis=1) == truth).astype(np.float64)  # calibrate's accuracy: the argmax
    block: Dict[str, Any] = {"task": "classify", "format": "image<TAB>class list", "images": len(truth),
                             "available": plan.available, "limit": _limit(plan.samples, plan.available),
                             "padded": (-len(truth)) % plan.batch, "classes": width,
                             "top1": float(top1.mean()), "top1_ci": list(bootstrap_ci(top1, None, RESAMPLES, SEED,
                                                                                      CONFIDENCE)),
                             "interval": {"method": "percentile bootstrap over images", "confidence": CONFIDENCE,
                                          "n_resamples": RESAMPLES, "seed": SEED}}
    if width >= 5:
        top5 = _in_topk(logits, truth, 5).astype(np.float64)  # a class tied at 5th place counts, as calibrate's
        block.update(top5=float(top5.mean()), top5_ci=list(bootstrap_ci(top5, None, RESAMPLES, SEED, CONFIDENCE)))
    return block


def _image_paths(root: Path, keys: Sequence[str], labels: Path) -> List[Path]:
    """The images ``keys`` name under ``root``; never a path out of it, never the file's content in a message."""
    from jetforge.vision.label_files import inside

    if any("#" in k for k in keys):
        raise InputFileError("%s names video frames (clip#frame); bench --accuracy reads images" % labels,
                             hint="calibrate --eval VIDEO --labels FILE measures clips' frames")
    paths = [inside(root, k, str(labels)) for k in keys]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise InputFileError("%d of the %d images %s names are not under %s" % (len(missing), len(paths), labels, root),
                             hint="image paths are relative to the label file's folder, or to --accuracy-images DIR")
    return paths


def accuracy_lines(block: Dict[str, Any]) -> List[str]:
    """The printed accuracy block of ``jetforge bench``."""
    from jetforge.table import format_table

    head = "accuracy     %d of %d images of %s (%s, %s), batch %d%s, on the session timed above" % (
        block["images"], block["available"], block["labels"], block["format"], block["limit"], block["batch"],
        ", last batch padded with %d" % block["padded"] if block["padded"] else "")
    if block["task"] == "classify":
        top5 = (", top-5 %s" % _value(block["top5"], block["top5_ci"])) if "top5" in block else \
            " (top-5: fewer than 5 classes)"
        return [head, "             top-1 %s%s; 95%% percentile bootstrap intervals over images"
                % (_value(block["top1"], block["top1_ci"]), top5)]
    grouped = block["interval"]["groups"] is not None
    rows = [[name, str(c["boxes"]), _value(c["ap50"], c["ap50_ci"]), _value(c["ap"], c["ap_ci"])]
            + ([_ci(c["ap50_group_ci"])] if grouped else []) for name, c in block["classes"].items()]
    if len(rows) > 1:
        m = block["mean"]
        rows.append(["mean", str(block["boxes"]), _value(m["ap50"], m["ap50_ci"]), _value(m["ap"], m["ap_ci"])]
                    + ([_ci(m["ap50_group_ci"])] if grouped else []))
    headers = ["class", "boxes", "AP@0.5 [95% CI images]", "AP@[.5:.95] [CI]"] + (
        ["AP@0.5 CI, %d-frame groups" % block["group_frames"]] if grouped else [])
    return [head, "             %s decoder, score > %g, %d detections per image; %d boxes (%d difficult, not "
            "counted)" % (block["decoder"]["name"], block["decoder"]["score_threshold"],
                          block["decoder"]["max_detections"], block["boxes"], block["difficult_boxes"]),
            *("             " + line for line in format_table(headers, rows).splitlines())]


def _ci(ci: Sequence[float]) -> str:
    return "[%.3f, %.3f]" % (ci[0], ci[1])


def _value(value: float, ci: Sequence[float]) -> str:
    return "%.3f %s" % (value, _ci(ci))


__all__ = ["AccuracyPlan", "accuracy_lines", "detection_summary", "is_classification_list", "measure_accuracy",
           "plan_accuracy"]
