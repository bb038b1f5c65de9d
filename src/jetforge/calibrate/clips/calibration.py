"""How :func:`~jetforge.calibrate.calibrate_model.calibrate` feeds a clip model: clip sources, held-out evaluation.

``calibrate()`` takes the same path for every model -- statistics, the registered range algorithms, cache, Q/DQ
ONNX, report, plots, simulated-INT8 evaluation -- and asks this module only *what the samples are*:

* an image model (sidecar input kind ``image``): sampled frames and images, prepared by its image contract
  (:mod:`jetforge.calibrate.sources`);
* a clip model (input kind ``clip``): clips cut by :mod:`jetforge.calibrate.clips.sources` (sliding windows per
  video, or per track), already the model's input, so the statistics pass stacks them into batches as the action
  app does.  The data-quality checks and perceptual hashes run on each clip's middle-frame crop.

Evaluation of a clip model reports the ``classification`` metric (agreement, KL, SQNR, accuracy) and
``clip_accuracy`` (agreement and labelled accuracy with bootstrap intervals, by track for per-track clips).
**Held out** means no evaluation clip overlaps a calibration clip in time (:func:`clip_overlap`, exact from the
clips' frame indices): other videos, or a later segment of the same video.  A video given to both ``--data`` and
``--eval`` is split automatically (:func:`split_shared_videos`: first half for calibration, the rest after a guard
gap of one clip for evaluation).  A fixed camera's frames look alike in any perceptual hash, so for clips the hash
check is reported for information and the frame check decides.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from jetforge.calibrate import phash
from jetforge.calibrate.clips.sources import (CLIP_MODES, PREPARED_CLIPS, ClipQualityTracker, ClipSample, ClipVideo,
                                             TrackerFactory, clip_bytes, clip_name, clip_overlap,
                                             collect_clip_sources, open_clip_videos, split_shared_videos)
from jetforge.calibrate.eval_data import ALL, EVAL_MEMORY_BYTES, EvaluationSet, evaluation_set, how_many
from jetforge.calibrate.quality import QualityTracker
from jetforge.calibrate.sources import Samples, allocate, collect_sources
from jetforge.errors import CalibrationError

log = logging.getLogger(__name__)

CLIP_METRICS = ("classification", "clip_accuracy")


@dataclass
class ClipOptions:
    """How clips are cut for a clip model (see :mod:`jetforge.calibrate.clips.sources`).

    ``mode``: ``sliding`` or ``per-track``; ``stride``: sampled frames between windows (default: the contract's
    ``stride_trained``, else one window); ``tracker``: the per-track tracker factory (the action app's tracks:
    :func:`jetforge.vision.person_tracks.person_tracker_factory` over a person detector; or
    :func:`~jetforge.calibrate.clips.sources.replay_tracks`); ``max_per_track``: cap on one track's clips; ``split``:
    the fraction of a shared video that goes to calibration.
    """

    mode: str = "sliding"
    stride: Optional[int] = None
    tracker: Optional[TrackerFactory] = None
    max_per_track: Optional[int] = None
    split: float = 0.5
    # filled by calibration_inputs(): what calibration saw, for the held-out check of the evaluation
    seen: Optional[ClipQualityTracker] = None
    split_notes: List[Dict[str, Any]] = field(default_factory=list)
    opened: Dict[str, List[ClipVideo]] = field(default_factory=dict)  # per item, so tracks are found once
    progress: bool = False

    def __post_init__(self) -> None:
        if self.mode not in CLIP_MODES:
            raise CalibrationError("unknown clip mode %r" % self.mode, hint="use %s" % " or ".join(CLIP_MODES))
        if self.stride is not None and self.stride < 1:
            raise CalibrationError("the clip stride must be at least 1, got %d" % self.stride)
        if self.max_per_track is not None and self.max_per_track < 1:
            raise CalibrationError("at most %d clips per track leaves none" % self.max_per_track,
                                   hint="give a positive number, or leave it out for no cap")
        if not 0.0 < self.split < 1.0:
            raise CalibrationError("the calibration share of a shared video must be in (0, 1), got %r" % self.split)

    def videos(self, item: Union[str, Path], contract: Any) -> List[ClipVideo]:
        """The clip sources of one ``--data``/``--eval`` item, opened once."""
        key = str(item)
        if key not in self.opened:
            self.opened[key] = open_clip_videos(item, contract, mode=self.mode, stride=self.stride,
                                                tracker=self.tracker, max_per_track=self.max_per_track,
                                                progress=self.progress)
        return self.opened[key]

    def eval_videos(self, items: Sequence[Union[str, Path]], contract: Any) -> List[ClipVideo]:
        """The evaluation videos; an evaluation set without one clip fails here (before calibration runs)."""
        videos = [v for item in items for v in self.videos(item, contract)]
        if not sum(v.available for v in videos):
            raise CalibrationError("the evaluation videos give no clip of %d frames (%s)"
                                   % (contract.window, ", ".join(map(str, items))),
                                   hint="give a longer --eval video or frame range")
        return videos


@dataclass
class CalibrationInputs:
    """What the statistics pass reads: the planned samples, how each becomes the model input, the quality tracker."""

    source: Samples
    preprocess: Any
    quality: QualityTracker
    eval_items: List[Any]
    clips: Optional[ClipOptions] = None


def check_clip_shape(sidecar: Any, contract: Any) -> None:
    """The clip the contract makes must be what the model takes (a wrong window or colour fails here, by name)."""
    inputs = list(getattr(sidecar, "inputs", None) or [])
    if len(inputs) != 1:
        return  # the statistics pass names a model without exactly one input
    want = list(inputs[0].shape[1:])
    got = list(contract.input_shape)
    if len(want) != len(got) or any(isinstance(w, int) and w > 0 and w != g for w, g in zip(want, got)):
        raise CalibrationError("the sidecar's clip contract (%s) makes clips of shape %s but model input %s takes %s"
                               % (contract.describe(), "x".join(map(str, got)), inputs[0].name,
                                  "x".join(str(w) if isinstance(w, int) and w > 0 else "?" for w in want)),
                               hint="fix window, crop_height, crop_width or color in the sidecar's input block to "
                                    "what the model was trained on (grey clips are (T, H, W), rgb (3, T, H, W))")


def calibration_inputs(sidecar: Any, contract: Any, clips: Optional[ClipOptions], data_items: List[Any],
                       eval_items: List[Any], samples: int, video_sampling: str, progress: bool) -> CalibrationInputs:
    """The calibration samples for ``contract``'s kind; bad combinations fail here, before any model runs."""
    if contract.kind != "clip":
        if clips is not None:
            raise CalibrationError("clip options (--clips, --clip-stride) apply to clip models, but this model's "
                                   "sidecar describes %s input" % contract.kind,
                                   hint="drop --clips for an image model, or give a model whose sidecar has input "
                                        "kind clip")
        source = collect_sources(data_items, max_samples=samples, sampling=video_sampling)
        return CalibrationInputs(source, contract, QualityTracker(), eval_items)
    if video_sampling != "uniform":
        raise CalibrationError("--video-sampling %s picks single frames for image models; a clip model takes "
                               "consecutive frames" % video_sampling,
                               hint="drop --video-sampling; choose how clips are cut with --clips sliding|per-track")
    check_clip_shape(sidecar, contract)
    opts = clips or ClipOptions()
    opts.progress = progress
    data_items, eval_items, opts.split_notes = split_shared_videos(data_items, eval_items, contract, opts.split)
    for note in opts.split_notes:
        log.info("%s is both calibration and evaluation data: calibration on frames %d-%d, evaluation on %d-%d "
                 "(a guard of %d frames)", note["video"], note["calibration_frames"][0],
                 note["calibration_frames"][1] - 1, note["evaluation_frames"][0], note["evaluation_frames"][1] - 1,
                 note["guard_frames"])
    if eval_items:
        opts.eval_videos(eval_items, contract)
    source = collect_clip_sources(data_items, contract, samples, opts.mode, opts.stride, opts.tracker,
                                  opts.max_per_track, progress)
    opts.seen = ClipQualityTracker()
    return CalibrationInputs(source, PREPARED_CLIPS, opts.seen, eval_items, opts)


@dataclass
class ClipEvaluationSet(EvaluationSet):
    """An :class:`EvaluationSet` of clips, with each clip's video, frames and track."""

    clips: List[Tuple[str, Tuple[int, ...]]] = field(default_factory=list)
    groups: List[str] = field(default_factory=list)


def gather_clips(items: Sequence[Union[str, Path]], contract: Any, clips: ClipOptions,
                 fixed_batch: Optional[int] = None, samples: Optional[int] = ALL, batch_size: int = 16,
                 memory_bytes: int = EVAL_MEMORY_BYTES) -> ClipEvaluationSet:
    """Every evaluation clip (unless ``samples`` or memory limits), cut, hashed (middle-frame crop) and batched."""
    videos = clips.eval_videos(items, contract)
    available = int(sum(v.available for v in videos))
    wanted, limit, capped = how_many(available, clip_bytes(contract), samples, memory_bytes)
    source = Samples(videos, allocate([v.available for v in videos], min(wanted, available)))  # type: ignore
    meta: Dict[str, Tuple[str, Tuple[int, ...], Optional[int]]] = {}

    def keyframe(clip: ClipSample) -> Any:
        meta[clip_name(clip)] = (clip.video, clip.frames, clip.track)
        return clip.keyframe

    ev: ClipEvaluationSet = evaluation_set(  # type: ignore[assignment]  (make= builds a ClipEvaluationSet)
        source, PREPARED_CLIPS, available, limit, capped, fixed_batch, batch_size, keyframe, ClipEvaluationSet)
    ev.clips = [(meta[n][0], meta[n][1]) for n in ev.names]
    ev.groups = [("%s:t%d" % (meta[n][0], meta[n][2])) if meta[n][2] is not None else n for n in ev.names]
    return ev


def clip_evaluator(model: Any, sidecar: Any, contract: Any, items: Sequence[Any], labels: Any,
                   samples: Optional[int], clips: Optional[ClipOptions] = None
                   ) -> Tuple[ClipEvaluationSet, Any, Dict[str, Any], bool]:
    """(evaluation clips, their :class:`~jetforge.calibrate.evaluate.Evaluator`, the held-out block, held out?)."""
    from jetforge.calibrate import evaluate as ev
    from jetforge.calibrate.stats import fixed_batch

    clips = clips or ClipOptions()
    data = gather_clips(items, contract, clips, fixed_batch(model), samples)
    y = ev.read_labels(labels, data.names, sidecar.labels) if labels is not None else None
    evaluator = ev.Evaluator(model, data.batches, labels=y, metrics=CLIP_METRICS,
                             metric_options={"clip_accuracy": {"groups": data.groups}})
    seen = clips.seen.clips if clips.seen is not None else []
    overlap = clip_overlap(data.clips, seen)
    hashes = phash.near_duplicates(data.hashes, clips.seen.hashes if clips.seen is not None else [])
    held = {"split": clips.split_notes or "as given (other videos or explicit frame ranges)",
            "clip_overlap": overlap, "rule": "held out = no evaluation clip overlaps a calibration clip in time",
            "keyframe_near_duplicates": hashes,
            "keyframe_note": "a fixed camera's frames look alike in a perceptual hash; reported, not used"}
    held_out = overlap["overlapping"] == 0
    if not held_out:
        msg = ("NOT held out: %d of %d evaluation clips overlap calibration clips in time"
               % (overlap["overlapping"], overlap["compared"]))
        data.warnings.append(msg)
        log.warning("%s", msg)
    return data, evaluator, held, held_out


def clip_lines(metrics: Optional[Dict[str, Any]]) -> List[str]:
    """Printable lines of a ``clip_accuracy`` block (none without one)."""
    if not metrics:
        return []
    m = metrics
    lines = ["clips: INT8 top-1 agreement with FP32 %.3f [%.3f, %.3f] on %d clips (%d groups)"
             % (m["agreement"], m["agreement_ci_low"], m["agreement_ci_high"], m["clips"], m["groups"])]
    if m.get("labelled"):
        lines.append("clip accuracy on %d labelled: FP32 %.3f, INT8 %.3f, difference %+.3f [%+.3f, %+.3f] (95%% "
                     "bootstrap)" % (m["labelled"], m["accuracy_fp32"], m["accuracy_int8"], m["accuracy_diff"],
                                     m["accuracy_diff_ci_low"], m["accuracy_diff_ci_high"]))
    return lines


__all__ = ["CLIP_METRICS", "CalibrationInputs", "ClipEvaluationSet", "ClipOptions", "calibration_inputs",
           "check_clip_shape", "clip_evaluator", "clip_lines", "gather_clips"]
