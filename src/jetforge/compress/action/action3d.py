"""The 3D MobileNetV2 action recipe: track-labelled clips -> inflated teacher -> pruned student distilled from it.

Steps (``recipes/action_mobilenet3d.yaml`` holds every number; :func:`run_recipe` runs them all on any
device, the CPU included at small settings; ``benchmarks/action3d/action_mobilenet3d_gpu.py`` runs the same
functions on a GPU):

1. **data** (:func:`build_data`): the people app's tracks of the video (CNN detector + tracker, cached),
   windows of ``window`` frames labelled by :class:`~jetforge.compress.action.track_clips.MotionRule`,
   split into training / held-out frame ranges with a guard gap, cut into RGB clips by the model's
   ``clip`` contract (the app's own crop);
2. **teacher** (:func:`train_clip_classifier`): :func:`~jetforge.compress.models.mobilenet3d.mobilenet3d_inflated`
   (ImageNet MobileNetV2 inflated, centre-frame init), fine-tuned with class-balanced cross-entropy, mirror
   augmentation (a mirrored "walking left" clip is "walking right") and brightness/contrast jitter;
3. **student** (:func:`prune_student`): ``jetforge.compress.prune`` on a copy of the trained teacher
   (L1 importance, MACs goal ``macs_factor``; the stem is pruned too: at 112x112 the stem's output is the
   largest activation of the net, so leaving it whole would cap the speed-up), then the same training with
   logit distillation from the teacher (``jetforge.compress.distill``'s ``kd_loss``: task CE + KD).
"""

import copy
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.compress.action.track_clips import (LABELS, MIRROR, ClipWindow, MotionRule, cut_clips,
                                                  ensure_track_cache, label_counts, make_windows, read_track_events,
                                                  rule_dict, split_windows)
from jetforge.errors import CompressError
from jetforge.runtime.inputs.clip import ClipContract

log = logging.getLogger(__name__)


@dataclass
class TrainSettings:
    epochs: int = 40
    batch_size: int = 32
    lr: float = 0.0005
    weight_decay: float = 0.01
    budget_s: float = 0.0  # stop after this many seconds (0: no limit); the device run's safety net


@dataclass
class Int8Settings:
    """The optional INT8 stage after the student is exported (:mod:`jetforge.compress.action.action3d_int8`)."""

    calibrate: bool = True  # PTQ: student.calib + student.qdq.onnx from per-track clips of the training frames
    samples: int = 256      # calibration clips (at most)
    qat_steps: int = 8      # QAT fine-tuning steps of 8 clips (0: no QAT); writes student.qat.qdq.onnx


@dataclass
class Action3DRecipe:
    """``recipes/action_mobilenet3d.yaml`` (``kind: action3d`` routes ``jetforge distill --config`` to it)."""

    kind: str = "action3d"
    name: str = "action_mobilenet3d"
    out_dir: str = "runs/action_mobilenet3d"
    tracks_dir: str = "build/action3d/people_run"  # the people app's events.jsonl (made when missing)
    tracks_max_frames: int = 0  # track only the first N frames when making the cache (0: all; tests use a few)
    window: int = 8
    crop: int = 112
    margin: float = 1.25
    stride: int = 2
    train_end: int = 520        # training clips lie wholly in frames [0, train_end)
    heldout_start: int = 545    # held-out clips wholly in [heldout_start, end): a 25-frame guard gap
    labels: List[str] = field(default_factory=lambda: list(LABELS))
    rule: MotionRule = field(default_factory=MotionRule)
    teacher: TrainSettings = field(default_factory=TrainSettings)
    student: TrainSettings = field(default_factory=TrainSettings)
    int8: Int8Settings = field(default_factory=Int8Settings)  # calibrate: false and qat_steps: 0 turn it off
    macs_factor: float = 4.0
    kd_weight: float = 0.5
    temperature: float = 4.0
    seed: int = 0
    max_clips: int = 0          # 0: all; tests use a few
    threads: int = 2

    def __post_init__(self) -> None:
        """Refuse values that would fail only after the tracks are made and the teacher trained (minutes)."""
        if self.kind != "action3d":
            raise ValueError("kind must be 'action3d' for the 3D action recipe, got %r" % (self.kind,))
        for key in ("window", "crop", "stride", "threads"):
            if getattr(self, key) < 1:
                raise ValueError("%s must be >= 1, got %r" % (key, getattr(self, key)))
        if not 0 < self.train_end < self.heldout_start:
            raise ValueError("need 0 < train_end < heldout_start (held-out clips come after the training ones), "
                             "got train_end %r, heldout_start %r" % (self.train_end, self.heldout_start))
        if self.macs_factor < 1:
            raise ValueError("macs_factor must be >= 1 (teacher MACs / student MACs), got %r" % self.macs_factor)
        if len(self.labels) < 2:
            raise ValueError("labels needs at least two classes, got %r" % (self.labels,))
        for part in ("teacher", "student"):
            if getattr(self, part).epochs < 1 or getattr(self, part).batch_size < 1:
                raise ValueError("%s.epochs and %s.batch_size must be >= 1" % (part, part))
        if self.int8.samples < 1 or self.int8.qat_steps < 0:
            raise ValueError("int8.samples must be >= 1 and int8.qat_steps >= 0, got %r, %r"
                             % (self.int8.samples, self.int8.qat_steps))

    def contract(self, fps: float) -> ClipContract:
        return ClipContract(window=self.window, crop_height=self.crop, crop_width=self.crop, margin=self.margin,
                            color="rgb", fps_trained=fps, stride_trained=self.stride)


@dataclass
class ClipData:
    contract: ClipContract
    labels: List[str]
    train: List[ClipWindow]
    heldout: List[ClipWindow]
    train_clips: np.ndarray   # uint8 (N, T, H, W, 3)
    heldout_clips: np.ndarray
    info: Dict[str, Any]

    def targets(self, windows: Sequence[ClipWindow]) -> np.ndarray:
        return np.array([self.labels.index(w.label) for w in windows], np.int64)


def video_fps(video: Path) -> Tuple[float, int]:
    import cv2

    cap = cv2.VideoCapture(str(video))
    fps, frames = float(cap.get(cv2.CAP_PROP_FPS) or 0.0), int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
    cap.release()
    if fps <= 0:
        raise CompressError("%s reports no frame rate" % video, hint="use a video file with a frame rate")
    return fps, frames


def build_data(recipe: Action3DRecipe, video: Path, events: Optional[Path] = None, progress: bool = True) -> ClipData:
    """Step 1 (module docstring): tracks -> labelled windows -> split -> uint8 RGB clips."""
    fps, frames = video_fps(video)
    events = Path(events) if events else ensure_track_cache(video, Path(recipe.tracks_dir),
                                                            recipe.tracks_max_frames)
    tracks = read_track_events(events)
    windows = make_windows(tracks, recipe.window, recipe.stride, recipe.rule, fps, recipe.labels)
    train, held = split_windows(windows, recipe.train_end, recipe.heldout_start)
    if recipe.max_clips:
        train, held = _spread(train, recipe.max_clips), _spread(held, recipe.max_clips)
    if not train or not held:
        raise CompressError("no labelled clips on one side of the split (train %d, held out %d)" % (len(train), len(held)),
                            hint="check train_end / heldout_start against the video's length")
    contract = recipe.contract(fps)
    clips = cut_clips(video, train + held, contract, progress=progress)
    info = {"video": Path(video).name, "fps": fps, "frames": frames, "tracks": len(tracks),
            "labelled_windows": len(windows), "train_frames": [0, recipe.train_end],
            "heldout_frames": [recipe.heldout_start, frames], "guard_frames": recipe.heldout_start - recipe.train_end,
            "train_counts": label_counts(train, recipe.labels), "heldout_counts": label_counts(held, recipe.labels),
            "heldout_tracks": len({w.track for w in held}), "rule": rule_dict(recipe.rule)}
    return ClipData(contract, list(recipe.labels), train, held, clips[:len(train)], clips[len(train):], info)


def _spread(windows: List[ClipWindow], n: int) -> List[ClipWindow]:
    """``n`` windows evenly spread over the list (deterministic), for small runs."""
    if len(windows) <= n:
        return windows
    return [windows[int(i)] for i in np.linspace(0, len(windows) - 1, n)]


def to_tensor(contract: ClipContract, clips: np.ndarray) -> torch.Tensor:
    """uint8 (N, T, H, W, 3) -> float32 (N, 3, T, H, W) model input (the contract's normalisation)."""
    return torch.from_numpy(contract.normalize(clips))


def mirror_map(labels: Sequence[str]) -> torch.Tensor:
    return torch.tensor([list(labels).index(MIRROR.get(lab, lab)) for lab in labels], dtype=torch.int64)


def _augment(x: torch.Tensor, y: torch.Tensor, mirror: torch.Tensor, gen: torch.Generator) -> Tuple[
        torch.Tensor, torch.Tensor]:
    """Mirror half the clips (lateral labels swap) and jitter brightness/contrast per clip."""
    n = x.shape[0]
    flip = torch.rand(n, generator=gen, device="cpu") < 0.5
    flip_d = flip.to(x.device)
    x = torch.where(flip_d.view(n, 1, 1, 1, 1), x.flip(-1), x)
    y = torch.where(flip_d, mirror.to(y.device)[y], y)
    gain = torch.empty(n, 1, 1, 1, 1).uniform_(0.8, 1.2, generator=gen).to(x.device)
    bias = torch.empty(n, 1, 1, 1, 1).uniform_(-0.2, 0.2, generator=gen).to(x.device)
    return x * gain + bias, y


def train_clip_classifier(model: nn.Module, x: torch.Tensor, y: torch.Tensor, labels: Sequence[str],
                          settings: TrainSettings, device: torch.device, teacher: Optional[nn.Module] = None,
                          kd_weight: float = 0.5, temperature: float = 4.0, seed: int = 0,
                          on_epoch: Optional[Callable[[Dict[str, Any]], None]] = None) -> List[Dict[str, Any]]:
    """Fine-tune ``model`` on clips ``x`` (N, 3, T, H, W) float32 (any device) with targets ``y``.

    With ``teacher`` (frozen, eval mode): logit distillation, ``(1 - kd_weight) * CE + kd_weight * KD`` with
    ``jetforge.compress.distill``'s ``kd_loss`` (Hinton's KL at ``temperature``, times T^2).  bfloat16 autocast
    on CUDA.  Returns one record per epoch."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model.to(device).train()
    counts = torch.bincount(y, minlength=len(labels)).double()
    weights = torch.where(counts > 0, counts.sum() / counts.clamp(min=1) / len(labels), torch.zeros_like(counts))
    ce = nn.CrossEntropyLoss(weight=weights.float().to(device))
    if teacher is not None:
        teacher.to(device).eval()
        for p in teacher.parameters():
            p.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = max(1, int(np.ceil(len(y) / settings.batch_size)))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.lr, total_steps=settings.epochs * steps_per_epoch,
                                                pct_start=0.15)
    mirror = mirror_map(labels)
    use_amp = device.type == "cuda"
    start, history = time.perf_counter(), []
    for epoch in range(settings.epochs):
        model.train()
        order = torch.randperm(len(y), generator=gen)
        total, seen = 0.0, 0
        for i in range(0, len(y), settings.batch_size):
            idx = order[i:i + settings.batch_size]
            xb, yb = _augment(x[idx].to(device, non_blocking=True), y[idx].to(device), mirror, gen)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
                if teacher is not None:
                    s = model(xb)
                    with torch.no_grad():
                        t = teacher(xb)
                    loss = (1.0 - kd_weight) * ce(s.float(), yb) + kd_weight * _kd(s, t, temperature)
                else:
                    loss = ce(model(xb).float(), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
            seen += len(idx)
        record = {"epoch": epoch + 1, "loss": total / max(1, seen), "elapsed_s": round(time.perf_counter() - start, 2)}
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
        if settings.budget_s and time.perf_counter() - start > settings.budget_s:
            log.warning("training stopped by its time budget after epoch %d of %d", epoch + 1, settings.epochs)
            record["stopped_by_budget"] = True
            break
    return history


def _kd(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    from jetforge.compress.distill.losses import kd_loss

    return kd_loss(student_logits.float(), teacher_logits.float(), temperature)


def predict(model: nn.Module, x: torch.Tensor, device: torch.device, batch: int = 32) -> np.ndarray:
    """Logits (N, classes) of ``model`` in eval mode, float32."""
    model.to(device).eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model(x[i:i + batch].to(device)).float().cpu())
    return torch.cat(out).numpy() if out else np.zeros((0, 0), np.float32)


def prune_student(teacher: nn.Module, contract: ClipContract, macs_factor: float) -> Tuple[nn.Module, Dict[str, Any]]:
    """A pruned copy of the (trained) teacher: L1 importance, MACs goal ``macs_factor``, stem pruned too."""
    from jetforge.compress.prune import prune

    student = copy.deepcopy(teacher).cpu().eval()
    for p in student.parameters():  # a teacher that was frozen for distillation gives a trainable copy
        p.requires_grad_(True)
    example = torch.zeros((1,) + tuple(contract.input_shape))
    result = prune(student, example, flops_reduction=macs_factor, importance="l1", protect_stem=False)
    totals = result.report.to_dict()["totals"]
    return result.model, {"macs_teacher": totals["macs_before"], "macs_student": totals["macs_after"],
                          "params_teacher": totals["params_before"], "params_student": totals["params_after"],
                          "macs_factor_goal": macs_factor, "macs_factor": totals["macs_before"] / totals["macs_after"],
                          "importance": "l1", "stem_pruned": True}


def recipe_dict(recipe: Action3DRecipe) -> Dict[str, Any]:
    return asdict(recipe)


__all__ = ["Action3DRecipe", "ClipData", "Int8Settings", "TrainSettings", "build_data", "mirror_map", "predict", "prune_student",
           "recipe_dict", "to_tensor", "train_clip_classifier", "video_fps"]
