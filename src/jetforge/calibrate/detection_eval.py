"""Evaluation frames for a detector's INT8 check: your labelled images, or the held-out frames of the person set.

``jetforge calibrate det.onnx --data TRAINING_FRAMES --labels LABELS`` evaluates a detector (sidecar task
``detect``, its output decoder named in the sidecar) with the ``detection_ap`` metric
(:class:`jetforge.calibrate.metrics.DetectionAPMetric`): AP@0.5 and AP@[.5:.95] per class and their mean, of FP32
and simulated INT8, and the paired bootstrap interval of the difference, over images and, where the labels group
them (video frames), over blocks of ``block_frames`` consecutive frames.  ``LABELS`` is

* a label set of :mod:`jetforge.vision.label_files`: COCO ``.json``, a YOLO classes ``.txt``/``.names`` with its
  images and labels, Pascal VOC ``.xml`` or a folder of them; every image is evaluated, its classes mapped to the
  model's by name (a class the model does not have is an error naming it);
* jetforge's person-box file (``people_boxes.json``, format ``jetforge-person-boxes/1``): its *held-out* frames,
  decoded from the asset cache with their pixels checked against the recorded hashes.

The frames are read lazily (:class:`DetectionFrames`): calibrate's evaluation
(:mod:`jetforge.calibrate.detection_stream`) and ``bench --accuracy`` read, run and score them one batch at a time,
so memory does not grow with the size of the label set.  They get perceptual hashes as they pass, like any
evaluation set; the held-out claim rests on the file's split (the report's ``held_out_check`` says which), not on a
near-duplicate check against the calibration data.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate.eval_data import EvaluationSet
from jetforge.calibrate.metrics import DetectionTarget
from jetforge.errors import CalibrationError, InputFileError

BLOCK_FRAMES = 10


def is_detection_label_file(path: Union[str, Path]) -> bool:
    """Whether ``path`` names detection labels (a label set or the person-box file) rather than a classification
    label list; asked only for a model whose task is ``detect``."""
    from jetforge.vision.label_files import is_label_set_path

    return is_label_set_path(path)


def is_person_box_file(path: Union[str, Path]) -> bool:
    """Whether ``path`` is jetforge's person-box file (evaluated on its held-out frames), not a label set."""
    from jetforge.jsonfile import read_json
    from jetforge.vision.person_labels import FORMAT

    if Path(path).suffix.lower() != ".json":
        return False
    data = read_json(path, "detection labels")
    return isinstance(data, dict) and data.get("format") == FORMAT


def class_map(names: Sequence[str], model_labels: Sequence[str], where: str) -> np.ndarray:
    """Index of each label-set class in the model's label list (by name); a class the model lacks is an error."""
    if not model_labels:
        if len(names) == 1:
            return np.zeros(1, np.int64)
        raise CalibrationError("%s has %d classes but the model's sidecar names none" % (where, len(names)),
                               hint="write the model's classes into its sidecar: jetforge export-sidecar MODEL "
                                    "--decoder NAME --classes LIST")
    missing = [n for n in names if n not in model_labels]
    if missing:
        raise CalibrationError("%s has %d classes and %d of them are not among the model's %d (e.g. %r)"
                               % (where, len(names), len(missing), len(model_labels), missing[0][:40]),
                               hint="the labels and the model disagree on the class list: give labels of the "
                                    "model's classes, or the model's own class names (--classes at export-sidecar)")
    return np.asarray([list(model_labels).index(n) for n in names], np.int64)


@dataclass
class DetectionFrames:
    """The frames of a detector's evaluation before their pixels are needed: names, ground truth, and a reader.

    Why a reader: a label set can be large (COCO val2017's 5,000 images are about 25 GB decoded), so its images are
    read one at a time as the evaluation reaches them (:meth:`images`), never all together; ``bench --accuracy``
    and calibrate's streamed evaluation (:mod:`jetforge.calibrate.detection_stream`) both take them from here.
    """

    names: List[str]
    targets: List[DetectionTarget]
    available: int  # labelled frames in the file, before ``samples`` spread a subset
    read: Callable[[int], np.ndarray]  # the BGR pixels of frame i

    def images(self) -> Iterator[Tuple[str, np.ndarray]]:
        """(name, BGR pixels) of every frame in order, each read when asked for."""
        for i, name in enumerate(self.names):
            yield name, self.read(i)


def _spread(items: List[Any], samples: Optional[int]) -> List[Any]:
    """``samples`` of ``items`` spread evenly (all of them without ``samples``)."""
    if samples is None or samples >= len(items):
        return items
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, int(samples)).round().astype(int)]


def label_set_frames(labels: Union[str, Path], model_labels: Sequence[str], samples: Optional[int] = None
                     ) -> DetectionFrames:
    """The images of a label set (:func:`jetforge.vision.label_files.read_label_set`), classes mapped to the model's,
    ``samples`` spread evenly; no pixel is read here (:func:`read_label_image` reads each when it is reached)."""
    from jetforge.vision.label_files import read_label_set

    label_set = read_label_set(labels)
    mapping = class_map(label_set.classes, model_labels, "labels %s" % labels)
    images = _spread(label_set.images, samples)
    targets = [DetectionTarget(im.truth.boxes, im.difficult, im.image_hw, im.group, mapping[im.truth.classes])
               for im in images]
    return DetectionFrames(["%s#%d" % (im.path.name, i) for i, im in enumerate(images)], targets,
                           len(label_set.images), lambda i: read_label_image(labels, images[i].path,
                                                                             images[i].image_hw))


def read_label_image(labels: Union[str, Path], path: Path, image_hw: Optional[Sequence[int]] = None) -> np.ndarray:
    """The pixels of an image a label file names (a label set's image, a classifier's ``image<TAB>class`` line),
    refused when OpenCV cannot decode them or, given ``image_hw``, their size is not the one the labels give (the
    labels belong to other images)."""
    from jetforge.runtime.image_files import read_image

    pixels = read_image(path)
    if pixels is None:
        raise InputFileError("labels %s: OpenCV cannot decode the image %s" % (labels, Path(path).name),
                             hint="give JPEG/PNG/BMP/WebP/TIFF images")
    if image_hw is not None and pixels.shape[:2] != tuple(image_hw):
        raise InputFileError("labels %s: image %s is %dx%d but the labels say %dx%d"
                             % (labels, Path(path).name, pixels.shape[1], pixels.shape[0], image_hw[1], image_hw[0]),
                             hint="the labels belong to other images")
    return pixels


def person_set_frames(labels: Union[str, Path], samples: Optional[int] = None,
                      assets_root: Optional[Union[str, Path]] = None, block_frames: int = BLOCK_FRAMES,
                      model_labels: Sequence[str] = ()) -> DetectionFrames:
    """The held-out labelled frames of jetforge's person-box file, with their :class:`DetectionTarget`.

    ``samples`` takes that many frames spread evenly over the held-out set; ``assets_root`` is the folder holding
    ``<asset>/<file>`` (default: jetforge's asset cache); ``model_labels``: the person class is mapped to the model's
    ``person`` (class 0 for a model without labels).  The frames are decoded from their clips here (sequential
    decoding, pixels checked against the recorded hashes) and held: the set is jetforge's own, 94 frames.
    """
    from jetforge.vision.person_labels import load_person_labels

    person = int(class_map(["person"], list(model_labels), "the person set")[0])
    if assets_root is None:
        from jetforge.assets import asset_dir

        assets_root = asset_dir("opencv_samples").parent
    everything = load_person_labels("heldout", assets_root=assets_root, path=labels)
    frames = _spread(everything, samples)
    targets = [DetectionTarget(f.boxes, f.difficult, f.image.shape[:2],
                               group="%s:%d" % (f.clip, f.index // block_frames),
                               classes=np.full(len(f.boxes), person, np.int64)) for f in frames]
    return DetectionFrames(["%s#%d" % (f.clip, f.index) for f in frames], targets, len(everything),
                           lambda i: frames[i].image)


def check_detection_args(labels: Union[str, Path], eval_items: List[Any], mixed_precision: Any,
                         sensitivity: Any) -> None:
    """Refuse what ``calibrate`` cannot do for a detector evaluated on a person-box file (before any slow step)."""
    from jetforge.vision.person_labels import DEFAULT_LABELS

    if not Path(labels).exists():
        raise CalibrationError("detection labels %s do not exist" % labels,
                               hint="a COCO .json, a YOLO classes .txt, VOC .xml files, or jetforge's person set %s"
                                    % DEFAULT_LABELS)
    if eval_items or mixed_precision is not None or sensitivity:
        raise CalibrationError("a detector is evaluated on the images of its --labels file; --eval, "
                               "--mixed-precision and --sensitivity do not apply to it yet",
                               hint="drop --eval/--mixed-precision/--sensitivity")


def detection_evaluator(model: Any, sidecar: Any, labels: Union[str, Path], fixed_batch: Optional[int] = None,
                        samples: Optional[int] = None, progress: bool = False, batch_size: int = 8):
    """(evaluation set, evaluator, held-out note) for ``calibrate --labels``: a
    :class:`~jetforge.calibrate.detection_stream.DetectionEvaluator`, which reads, runs and scores the frames one
    batch at a time when it evaluates a candidate (the evaluation set holds their names, and their perceptual hashes
    once a candidate was evaluated, but no batch)."""
    from jetforge.calibrate.detection_stream import DetectionEvaluator
    from jetforge.calibrate.metrics import DetectionAPMetric
    from jetforge.runtime.inputs import input_contract

    contract = input_contract(sidecar, "image", purpose="INT8 evaluation")
    metric = DetectionAPMetric(sidecar=sidecar, progress=progress)  # refuses a model without a decoder first
    person = is_person_box_file(labels)
    frames = (person_set_frames(labels, samples, model_labels=metric.decoder.labels) if person else
              label_set_frames(labels, metric.decoder.labels, samples))
    evaluator = DetectionEvaluator(model, frames, contract, metric, fixed_batch, batch_size, progress=progress)
    limit = "all" if samples is None or samples >= frames.available else "--eval-samples %d" % samples
    data = EvaluationSet([], frames.names[:evaluator.samples], evaluator.hashes, frames.available,
                         evaluator.samples, limit)
    held = ({"split": "held-out segments of the label file (guard gaps to its training segments); no perceptual "
                      "hash check: the segments of one fixed camera look alike"} if person else
            {"split": "the label file's images (keep them out of --data: calibrating on them makes the numbers "
                      "optimistic)"})
    return data, evaluator, held


def detection_eval_lines(label: str, det: Dict[str, Any]) -> List[str]:
    """Printable lines of a ``detection_ap`` metric block (FP32 vs ``label``, the difference and its intervals)."""
    block = (", %d-frame blocks [%+.3f, %+.3f]" % (BLOCK_FRAMES, det["ap50_diff_block_ci_low"],
                                                   det["ap50_diff_block_ci_high"])
             if det.get("ap50_diff_block_ci_low") is not None else "")
    per_class = sorted({k.split("/")[1] for k in det if k.startswith("class/")})
    what = "%s AP" % per_class[0] if len(per_class) == 1 else "mean AP over %d classes" % len(per_class)
    lines = ["%s@0.5 on %d frames: FP32 %.3f, %s %.3f, difference %+.3f (95%% CI frames [%+.3f, %+.3f]%s)"
             % (what, det["frames"], det["ap50_fp32"], label, det["ap50_int8"], det["ap50_diff"],
                det["ap50_diff_ci_low"], det["ap50_diff_ci_high"], block),
             "%s@[.5:.95]: FP32 %.3f, %s %.3f, difference %+.3f (95%% CI [%+.3f, %+.3f])"
             % (what, det["ap_fp32"], label, det["ap_int8"], det["ap_diff"], det["ap_diff_ci_low"],
                det["ap_diff_ci_high"])]
    if len(per_class) > 1:
        lines += ["  %s AP@0.5: FP32 %.3f, %s %.3f, difference %+.3f (95%% CI [%+.3f, %+.3f])"
                  % (c, det["class/%s/ap50_fp32" % c], label, det["class/%s/ap50_int8" % c],
                     det["class/%s/ap50_diff" % c], det["class/%s/ap50_diff_ci_low" % c],
                     det["class/%s/ap50_diff_ci_high" % c]) for c in per_class]
    return lines


__all__ = ["BLOCK_FRAMES", "DetectionFrames", "check_detection_args", "class_map", "detection_eval_lines",
           "detection_evaluator", "is_detection_label_file", "is_person_box_file", "label_set_frames",
           "person_set_frames", "read_label_image"]
