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

The frames get perceptual hashes like any evaluation set, so the calibration data is checked for
near-duplicates of them (calibrating on a whole clip that contains the held-out segments is caught).
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate import phash
from jetforge.calibrate.eval_data import EvaluationSet
from jetforge.calibrate.metrics import DetectionTarget
from jetforge.errors import CalibrationError

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


def label_set_targets(labels: Union[str, Path], model_labels: Sequence[str], samples: Optional[int] = None
                      ) -> Tuple[List[Any], List[DetectionTarget], int]:
    """(images, their :class:`DetectionTarget`, images available) of a label set
    (:func:`jetforge.vision.label_files.read_label_set`), classes mapped to the model's, ``samples`` spread evenly;
    no pixel is read (``bench --accuracy`` streams them, :func:`label_set_evaluation` holds them)."""
    from jetforge.vision.label_files import read_label_set

    label_set = read_label_set(labels)
    mapping = class_map(label_set.classes, model_labels, "labels %s" % labels)
    images = label_set.images
    available = len(images)
    if samples is not None and samples < available:
        images = [images[int(i)] for i in np.linspace(0, available - 1, int(samples)).round().astype(int)]
    targets = [DetectionTarget(im.truth.boxes, im.difficult, im.image_hw, im.group, mapping[im.truth.classes])
               for im in images]
    return images, targets, available


def read_label_image(labels: Union[str, Path], image: Any) -> np.ndarray:
    """The pixels of one :class:`~jetforge.vision.label_files.LabelledImage`, refused when OpenCV cannot decode them
    or their size is not the one the labels give (the labels belong to other images)."""
    from jetforge.runtime.image_files import read_image

    pixels = read_image(image.path)
    if pixels is None:
        raise CalibrationError("labels %s: OpenCV cannot decode the image %s" % (labels, image.path.name),
                               hint="give JPEG/PNG/BMP/WebP/TIFF images")
    if pixels.shape[:2] != tuple(image.image_hw):
        raise CalibrationError("labels %s: image %s is %dx%d but the labels say %dx%d"
                               % (labels, image.path.name, pixels.shape[1], pixels.shape[0],
                                  image.image_hw[1], image.image_hw[0]), hint="the labels belong to other images")
    return pixels


def label_set_evaluation(labels: Union[str, Path], preprocess: Any, model_labels: Sequence[str],
                         fixed_batch: Optional[int] = None, samples: Optional[int] = None, batch_size: int = 8
                         ) -> Tuple[EvaluationSet, List[DetectionTarget]]:
    """The images of a label set (:func:`label_set_targets`) as preprocessed batches, with their
    :class:`DetectionTarget`; ``samples`` spreads that many evenly."""
    from jetforge.calibrate.evaluate import preprocess_samples

    images, all_targets, available = label_set_targets(labels, model_labels, samples)
    names = ["%s#%d" % (im.path.name, i) for i, im in enumerate(images)]
    by_name = dict(zip(names, all_targets))
    pixels = {n: read_label_image(labels, im) for n, im in zip(names, images)}
    hashes = [(n, phash.perceptual_hash(pixels[n])) for n in names]
    batches, kept = preprocess_samples(((n, pixels[n]) for n in names), preprocess, batch_size=batch_size,
                                       fixed_batch=fixed_batch)
    targets = [by_name[n] for n in kept]
    limit = "all" if samples is None or samples >= available else "--eval-samples %d" % samples
    ev = EvaluationSet(batches, list(kept), [h for h in hashes if h[0] in set(kept)], available, len(kept), limit)
    return ev, targets


def detection_evaluation_set(labels: Union[str, Path], preprocess: Any, fixed_batch: Optional[int] = None,
                             samples: Optional[int] = None, assets_root: Optional[Union[str, Path]] = None,
                             batch_size: int = 8, block_frames: int = BLOCK_FRAMES, model_labels: Sequence[str] = ()
                             ) -> Tuple[EvaluationSet, List[DetectionTarget]]:
    """The held-out labelled frames as preprocessed batches, with their :class:`DetectionTarget` per frame.

    ``samples`` takes that many frames spread evenly over the held-out set; ``assets_root`` is the
    folder holding ``<asset>/<file>`` (default: jetforge's asset cache); ``model_labels``: the person class is
    mapped to the model's ``person`` (class 0 for a model without labels).
    """
    from jetforge.calibrate.evaluate import preprocess_samples
    from jetforge.vision.person_labels import load_person_labels

    person = int(class_map(["person"], list(model_labels), "the person set")[0])

    if assets_root is None:
        from jetforge.assets import asset_dir

        assets_root = asset_dir("opencv_samples").parent
    frames = load_person_labels("heldout", assets_root=assets_root, path=labels)
    available = len(frames)
    if samples is not None and samples < available:
        frames = [frames[int(i)] for i in np.linspace(0, available - 1, int(samples)).round().astype(int)]
    names = ["%s#%d" % (f.clip, f.index) for f in frames]
    hashes = [(n, phash.perceptual_hash(f.image)) for n, f in zip(names, frames)]
    batches, kept = preprocess_samples(zip(names, (f.image for f in frames)), preprocess, batch_size=batch_size,
                                       fixed_batch=fixed_batch)
    by_name = dict(zip(names, frames))
    targets = [DetectionTarget(by_name[n].boxes, by_name[n].difficult, by_name[n].image.shape[:2],
                               group="%s:%d" % (by_name[n].clip, by_name[n].index // block_frames),
                               classes=np.full(len(by_name[n].boxes), person, np.int64)) for n in kept]
    limit = "all" if samples is None or samples >= available else "--eval-samples %d" % samples
    ev = EvaluationSet(batches, list(kept), [h for h in hashes if h[0] in set(kept)], available, len(kept), limit)
    return ev, targets


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
                        samples: Optional[int] = None):
    """(evaluation set, Evaluator with the ``detection_ap`` metric, held-out note) for ``calibrate --labels``."""
    from jetforge.calibrate.evaluate import Evaluator
    from jetforge.runtime.inputs import input_contract

    from jetforge.vision.decode import decoder_for

    contract = input_contract(sidecar, "image", purpose="INT8 evaluation")
    model_labels = decoder_for(sidecar).labels  # refuses a model without a decoder before any image is read
    if is_person_box_file(labels):
        data, targets = detection_evaluation_set(labels, contract, fixed_batch, samples, model_labels=model_labels)
    else:
        data, targets = label_set_evaluation(labels, contract, model_labels, fixed_batch, samples)
    evaluator = Evaluator(model, data.batches, metrics=("detection_ap", "output_sqnr"), targets=targets,
                          metric_options={"detection_ap": {"sidecar": sidecar}})
    held = ({"split": "held-out segments of the label file (guard gaps to its training segments); no perceptual "
                      "hash check: the segments of one fixed camera look alike"} if is_person_box_file(labels) else
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


__all__ = ["BLOCK_FRAMES", "check_detection_args", "class_map", "detection_eval_lines",
           "detection_evaluation_set", "detection_evaluator", "is_detection_label_file", "is_person_box_file",
           "label_set_evaluation", "label_set_targets", "read_label_image"]
