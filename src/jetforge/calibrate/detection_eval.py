"""Evaluation frames for a detector's INT8 check: the held-out frames of a person-box label file.

``jetforge calibrate det.onnx --data TRAINING_FRAMES --labels people_boxes.json`` evaluates a
detector (sidecar task ``detect``) on the label file's *held-out* frames (decoded from the asset
cache, pixels checked against the recorded hashes) with the ``detection_ap`` metric
(:class:`jetforge.calibrate.metrics.DetectionAPMetric`): person AP@0.5 and AP@[.5:.95] of FP32 and
simulated INT8, and the paired bootstrap interval of the difference, over frames and over blocks of
``block_frames`` consecutive frames of one clip (neighbouring frames are correlated).

The frames get perceptual hashes like any evaluation set, so the calibration data is checked for
near-duplicates of them (calibrating on a whole clip that contains the held-out segments is caught).
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from jetforge.calibrate import phash
from jetforge.calibrate.eval_data import EvaluationSet
from jetforge.calibrate.metrics import DetectionTarget

BLOCK_FRAMES = 10


def is_person_label_file(path: Union[str, Path]) -> bool:
    """Whether ``path`` looks like a person-box label file (JSON) rather than a classification label list."""
    return Path(path).suffix.lower() == ".json"


def detection_evaluation_set(labels: Union[str, Path], preprocess: Any, fixed_batch: Optional[int] = None,
                             samples: Optional[int] = None, assets_root: Optional[Union[str, Path]] = None,
                             batch_size: int = 8, block_frames: int = BLOCK_FRAMES
                             ) -> Tuple[EvaluationSet, List[DetectionTarget]]:
    """The held-out labelled frames as preprocessed batches, with their :class:`DetectionTarget` per frame.

    ``samples`` takes that many frames spread evenly over the held-out set; ``assets_root`` is the
    folder holding ``<asset>/<file>`` (default: jetforge's asset cache).
    """
    from jetforge.calibrate.evaluate import preprocess_samples
    from jetforge.vision.person_labels import load_person_labels

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
                               group="%s:%d" % (by_name[n].clip, by_name[n].index // block_frames)) for n in kept]
    limit = "all" if samples is None or samples >= available else "--eval-samples %d" % samples
    ev = EvaluationSet(batches, list(kept), [h for h in hashes if h[0] in set(kept)], available, len(kept), limit)
    return ev, targets


def check_detection_args(labels: Union[str, Path], eval_items: List[Any], mixed_precision: Any,
                         sensitivity: Any) -> None:
    """Refuse what ``calibrate`` cannot do for a detector evaluated on a person-box file (before any slow step)."""
    from jetforge.errors import CalibrationError
    from jetforge.fileio import require_file
    from jetforge.vision.person_labels import DEFAULT_LABELS

    require_file(labels, "person-box label file", hint="e.g. jetforge's own set, %s" % DEFAULT_LABELS)
    if eval_items or mixed_precision is not None or sensitivity:
        raise CalibrationError("a detector is evaluated on the held-out frames of its --labels file; --eval, "
                               "--mixed-precision and --sensitivity do not apply to it yet",
                               hint="drop --eval/--mixed-precision/--sensitivity")


def detection_evaluator(model: Any, sidecar: Any, labels: Union[str, Path], fixed_batch: Optional[int] = None,
                        samples: Optional[int] = None):
    """(evaluation set, Evaluator with the ``detection_ap`` metric, held-out note) for ``calibrate --labels``."""
    from jetforge.calibrate.evaluate import Evaluator
    from jetforge.runtime.inputs import input_contract

    contract = input_contract(sidecar, "image", purpose="INT8 evaluation")
    data, targets = detection_evaluation_set(labels, contract, fixed_batch, samples)
    evaluator = Evaluator(model, data.batches, metrics=("detection_ap", "output_sqnr"), targets=targets,
                          metric_options={"detection_ap": {"sidecar": sidecar}})
    held = {"split": "held-out segments of the label file (guard gaps to its training segments); no perceptual "
                     "hash check: the segments of one fixed camera look alike"}
    return data, evaluator, held


def detection_eval_lines(label: str, det: Dict[str, Any]) -> List[str]:
    """Printable lines of a ``detection_ap`` metric block (FP32 vs ``label``, the difference and its intervals)."""
    block = (", %d-frame blocks [%+.3f, %+.3f]" % (BLOCK_FRAMES, det["ap50_diff_block_ci_low"],
                                                   det["ap50_diff_block_ci_high"])
             if det.get("ap50_diff_block_ci_low") is not None else "")
    return ["person AP@0.5 on %d frames: FP32 %.3f, %s %.3f, difference %+.3f (95%% CI frames [%+.3f, %+.3f]%s)"
            % (det["frames"], det["ap50_fp32"], label, det["ap50_int8"], det["ap50_diff"],
               det["ap50_diff_ci_low"], det["ap50_diff_ci_high"], block),
            "person AP@[.5:.95]: FP32 %.3f, %s %.3f, difference %+.3f (95%% CI [%+.3f, %+.3f])"
            % (det["ap_fp32"], label, det["ap_int8"], det["ap_diff"], det["ap_diff_ci_low"], det["ap_diff_ci_high"])]


__all__ = ["BLOCK_FRAMES", "check_detection_args", "detection_eval_lines", "detection_evaluation_set",
           "detection_evaluator", "is_person_label_file"]
