"""Distil an SSD detector on unlabeled training frames, with views cut and the teacher run on the fly.

Why on the fly: a fixed set of views (frame, mirror, a few crops) is seen hundreds of times in a
few thousand steps, and the student learns those views.  Here every step draws ``batch`` frames,
cuts each at a random place and scale (``crop_scale``; with probability ``full_frame`` the whole
frame, which is how the detector is used), mirrors half of them, jitters contrast and brightness,
and resizes to the input size on the training device.  The frozen teacher then scores exactly the
tensor the student sees (no train/target mismatch from resizing), so its per-anchor outputs are
the targets of :func:`jetforge.compress.distill.detection_losses.detection_distill_loss`: the
teacher's sigmoid scores for the class term and its box encodings, weighted by its person score,
for the box term.  This needs the student to lay out the teacher's anchors (same input size).

Resizing uses bilinear interpolation with half-pixel centres and no antialiasing, OpenCV's
``INTER_LINEAR`` (what :class:`jetforge.runtime.inputs.image.Preprocess` does at inference).

Only frames of the training segments of the labelled person set ever enter a
:class:`FrameBank` (:func:`frame_bank_from_labels`); the labels themselves are not used.
"""

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.compress.distill.detection_losses import detection_distill_loss
from jetforge.errors import CompressError
from jetforge.vision.tiles import cut_tile

log = logging.getLogger(__name__)


@dataclass
class ViewConfig:
    """How each training view is cut (the recipe's ``views`` block)."""

    full_frame: float = 0.3  # probability of the whole frame
    crop_scale: List[float] = field(default_factory=lambda: [0.4, 1.0])  # side of a crop / side of the frame
    flip: bool = True
    jitter: float = 0.2  # contrast and brightness change, as a fraction

    def __post_init__(self) -> None:
        if not 0.0 <= self.full_frame <= 1.0:
            raise ValueError("views.full_frame must be a probability in [0, 1], got %r" % self.full_frame)
        if len(self.crop_scale) != 2 or not 0.1 <= self.crop_scale[0] <= self.crop_scale[1] <= 1.0:
            raise ValueError("views.crop_scale must be [low, high] with 0.1 <= low <= high <= 1, got %r"
                             % (self.crop_scale,))
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("views.jitter must be in [0, 1), got %r" % self.jitter)


class FrameBank:
    """Decoded BGR frames (uint8, each ``(H, W, 3)``, any size) on one device, and a view sampler over them."""

    def __init__(self, frames: Sequence[np.ndarray], names: Sequence[str], preprocess: Any,
                 device: Any = "cpu") -> None:
        if not frames:
            raise CompressError("no training frames for distillation",
                                hint="check that the clips of the training segments are in the asset folder")
        if preprocess.resize != "stretch" or preprocess.layout != "nchw" or preprocess.color not in ("rgb", "bgr"):
            raise CompressError("the view sampler resizes by stretching to NCHW colour inputs; this model's "
                                "preprocessing is %s" % preprocess.describe())
        self.device = torch.device(device)
        self.frames = [torch.from_numpy(np.ascontiguousarray(f)).to(self.device) for f in frames]
        self.names = list(names)
        self.preprocess = preprocess
        channels = len(preprocess.mean)
        self._scale = float(preprocess.scale)
        self._mean = torch.tensor(preprocess.mean, dtype=torch.float32, device=self.device).view(1, channels, 1, 1)
        self._std = torch.tensor(preprocess.std, dtype=torch.float32, device=self.device).view(1, channels, 1, 1)

    def __len__(self) -> int:
        return len(self.frames)

    def normalize(self, pixels: torch.Tensor) -> torch.Tensor:
        """``(B, 3, H, W)`` float pixels in model colour order -> the model input (``(x * scale - mean) / std``)."""
        return (pixels * self._scale - self._mean) / self._std

    def full_views(self, indices: Sequence[int], size: Optional[int] = None) -> torch.Tensor:
        """The whole frames ``indices`` as model inputs (no augmentation), at ``size`` (default: the preprocess's)."""
        return self.normalize(torch.cat([self._resize(self.frames[i], size) for i in indices]))

    def _resize(self, image: torch.Tensor, size: Optional[int] = None) -> torch.Tensor:
        x = image.permute(2, 0, 1).unsqueeze(0).float()
        if self.preprocess.color == "rgb":
            x = x.flip(1)
        hw = (int(self.preprocess.height), int(self.preprocess.width)) if size is None else (int(size), int(size))
        return nn.functional.interpolate(x, size=hw, mode="bilinear", align_corners=False)

    def sample(self, batch: int, cfg: ViewConfig, rng: np.random.Generator) -> torch.Tensor:
        """``batch`` random views (module docstring) as model inputs ``(B, 3, H, W)`` float32."""
        return self.sample_sizes(batch, cfg, rng, [None])[0]

    def sample_sizes(self, batch: int, cfg: ViewConfig, rng: np.random.Generator,
                     sizes: Sequence[Optional[int]]) -> List[torch.Tensor]:
        """The same ``batch`` random views at each of ``sizes`` (``None``: the preprocess's size), one tensor each.

        Every view is cut, mirrored and jittered once and resized from the frame to each size (not from one
        size to the other), so a teacher and a student of different input sizes see the same scene as each
        would see it at inference.  The jitter's mean is the first size's.
        """
        return self._sample(batch, cfg, rng, sizes, None)[0]

    def sample_tiled(self, batch: int, cfg: ViewConfig, rng: np.random.Generator, sizes: Sequence[Optional[int]],
                     tiles: np.ndarray) -> Tuple[List[torch.Tensor], torch.Tensor, torch.Tensor]:
        """:meth:`sample_sizes`'s views (the same ones for the same ``rng``), plus each view's ``tiles``.

        ``tiles`` ``(T, 4)`` are ``[y0, x0, y1, x1]`` fractions of a view
        (:func:`jetforge.vision.tiles.tile_rects`); each is cut from the frame's pixels
        inside the view's crop, resized to the first size, mirrored and jittered with its view.  Returns the
        views (one tensor per size), the tiles ``(B * T, 3, S, S)`` view by view, and ``flipped`` ``(B,)``.
        """
        return self._sample(batch, cfg, rng, sizes, np.asarray(tiles, dtype=np.float64).reshape(-1, 4))

    def _sample(self, batch: int, cfg: ViewConfig, rng: np.random.Generator, sizes: Sequence[Optional[int]],
                tiles: Optional[np.ndarray]) -> Tuple[List[torch.Tensor], Optional[torch.Tensor], torch.Tensor]:
        views: List[List[torch.Tensor]] = [[] for _ in sizes]
        tile_views: List[torch.Tensor] = []
        flipped: List[bool] = []
        for i in rng.integers(0, len(self.frames), size=batch):
            image = self.frames[int(i)]
            h, w = int(image.shape[0]), int(image.shape[1])
            if rng.random() >= cfg.full_frame:
                side = rng.uniform(*cfg.crop_scale)
                ch = int(min(h, max(16, round(h * side * rng.uniform(0.85, 1.15)))))
                cw = int(min(w, max(16, round(w * side))))
                y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
                image = image[y0:y0 + ch, x0:x0 + cw]
            resized = [self._resize(image, size) for size in sizes]
            cut = [] if tiles is None else [self._resize(cut_tile(image, rect), sizes[0]) for rect in tiles]
            flip = bool(cfg.flip and rng.random() < 0.5)
            if flip:
                resized = [v.flip(3) for v in resized]
                cut = [v.flip(3) for v in cut]
            if cfg.jitter > 0:
                contrast = 1.0 + cfg.jitter * rng.uniform(-1, 1)
                brightness = 128.0 * cfg.jitter * rng.uniform(-1, 1)
                mean = resized[0].mean()
                resized = [((v - mean) * contrast + mean + brightness).clamp(0.0, 255.0) for v in resized]
                cut = [((v - mean) * contrast + mean + brightness).clamp(0.0, 255.0) for v in cut]
            for out, view in zip(views, resized):
                out.append(view)
            tile_views.extend(cut)
            flipped.append(flip)
        tiled = self.normalize(torch.cat(tile_views)) if tile_views else None
        return ([self.normalize(torch.cat(v)) for v in views], tiled,
                torch.tensor(flipped, dtype=torch.bool, device=self.device))


def frame_bank_from_labels(assets_root: Any, preprocess: Any, device: Any = "cpu", step: int = 1,
                           clips: Optional[Sequence[str]] = None, limit: Optional[int] = None,
                           labels: Optional[Any] = None) -> FrameBank:
    """Every ``step``-th frame of the training segments (never a held-out or guard frame) in a :class:`FrameBank`."""
    from jetforge.vision.person_labels import read_person_labels, training_frames

    split = read_person_labels(labels)
    frames: List[np.ndarray] = []
    names: List[str] = []
    for clip, index, image in training_frames(assets_root, path=labels, step=step, clips=clips):
        if split.split_of(clip, index) != "train":  # training_frames promises this; the data must never leak
            raise CompressError("%s frame %d is not in a training segment" % (clip, index))
        frames.append(image)
        names.append("%s#%d" % (clip, index))
        if limit is not None and len(frames) >= limit:
            break
    return FrameBank(frames, names, preprocess, device)


def teacher_targets(box_encodings: torch.Tensor, class_logits: torch.Tensor) -> torch.Tensor:
    """``(N, A, 8)`` targets from the teacher's outputs on the same inputs (see ``detection_losses``)."""
    if class_logits.shape[-1] != 2:
        raise CompressError("detector distillation is written for a background + person detector, got %d "
                            "class columns" % class_logits.shape[-1])
    q = torch.sigmoid(class_logits.float())
    ones = torch.ones_like(q[..., :1])
    return torch.cat([q, ones, box_encodings.float(), q[..., 1:2]], dim=-1)


@dataclass
class DetectorTrainConfig:
    """The optimisation (the recipe's ``train`` block)."""

    steps: int = 3000
    batch: int = 64
    lr: float = 5e-4
    min_lr: float = 1e-5
    warmup: int = 100
    weight_decay: float = 0.0
    class_weight: float = 1.0
    box_weight: float = 1.0
    freeze_bn: bool = False  # keep batch norms on their running statistics (small batches, e.g. on a CPU)
    budget_s: Optional[float] = None  # stop after this many seconds; the schedule then follows the clock
    seed: int = 0
    log_every: int = 100

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.lr <= 0 or self.min_lr < 0 or self.warmup < 0:
            raise ValueError("train: steps and batch >= 1, lr > 0, min_lr and warmup >= 0 are required")
        if self.batch < 2 and not self.freeze_bn:
            raise ValueError("train.batch 1 leaves batch norm one value per channel on the 1x1 maps: use a batch of "
                             "at least 2, or train.freeze_bn: true")


def learning_rate(progress: float, cfg: DetectorTrainConfig) -> float:
    """Linear warm-up over ``cfg.warmup`` steps' worth of ``progress`` (0 -> 1), then cosine to ``min_lr``."""
    warm = cfg.warmup / cfg.steps
    if progress < warm:
        return cfg.lr * max(progress, 1.0 / cfg.steps) / warm
    done = (progress - warm) / max(1e-12, 1.0 - warm)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * min(1.0, done)))


def training_progress(step: int, elapsed_s: float, cfg: DetectorTrainConfig) -> float:
    """How far the schedule is: steps done, or time spent when a time budget is nearer its end."""
    progress = step / cfg.steps
    if cfg.budget_s:
        progress = max(progress, elapsed_s / cfg.budget_s)
    return min(1.0, progress)


def distill_detector(student: nn.Module, teacher: nn.Module, bank: FrameBank, views: ViewConfig,
                     cfg: DetectorTrainConfig, on_log: Optional[Callable[[Dict[str, float]], None]] = None,
                     cross_grid: Optional[Any] = None) -> Dict[str, Any]:
    """Train ``student`` (in place) to reproduce ``teacher`` on random views of ``bank``; returns the history.

    Same grids: the teacher's per-anchor outputs are the targets (:func:`teacher_targets`).  A student of
    another input size needs ``cross_grid``, a
    :class:`jetforge.compress.distill.detection_crossgrid.CrossGridTargets`: the teacher then scores each
    view at its size, the student the same view at its own, and the targets are the teacher's decoded
    boxes re-encoded on the student's anchors.
    """
    device = bank.device
    sizes = _check_grids(student, teacher, cross_grid)
    teacher.to(device).eval()
    student.to(device).train()
    if cfg.freeze_bn:
        for m in student.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
    amp = device.type == "cuda"
    opt = torch.optim.AdamW(student.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    history: List[Dict[str, float]] = []
    start = time.perf_counter()
    step = 0
    for step in range(cfg.steps):
        progress = training_progress(step, time.perf_counter() - start, cfg)
        if progress >= 1.0:
            log.warning("distillation stopped by its time budget after %d of %d steps", step, cfg.steps)
            break
        for group in opt.param_groups:
            group["lr"] = learning_rate(progress, cfg)
        x_teacher, x_student, tiles = _views(bank, views, cfg.batch, rng, sizes, cross_grid)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            outputs = teacher(x_teacher if tiles is None else torch.cat([x_teacher, tiles[0]]))
        targets = _targets(outputs, cross_grid, None if tiles is None else tiles[1])
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            enc, logits = student(x_student)
        loss, logs = detection_distill_loss(enc.float(), logits.float(), targets, cfg.class_weight, cfg.box_weight)
        if not torch.isfinite(loss):
            raise CompressError("the distillation loss is %s at step %d" % (loss.item(), step),
                                hint="lower train.lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            entry = {"step": step, "loss": loss.item(), "class_kl": logs["class_kl"].item(),
                     "box_l1": logs["box_l1"].item(), "lr": learning_rate(progress, cfg),
                     "elapsed_s": time.perf_counter() - start}
            history.append(entry)
            if on_log is not None:
                on_log(entry)
    else:
        step = cfg.steps
    student.eval()
    return {"steps_done": step, "steps_planned": cfg.steps, "seconds": time.perf_counter() - start,
            "history": history}


def _check_grids(student: nn.Module, teacher: nn.Module, cross_grid: Optional[Any]) -> Optional[Tuple[int, int]]:
    """``None`` for same-grid distillation, else (teacher size, student size); refuses a pairing that cannot work."""
    same = tuple(getattr(student, "grid_sizes", ())) == tuple(getattr(teacher, "grid_sizes", ()))
    if cross_grid is None:
        if not same:
            raise CompressError("the student's feature maps %s differ from the teacher's %s: on-the-fly targets "
                                "need the teacher's anchors" % (getattr(student, "grid_sizes", None),
                                                               getattr(teacher, "grid_sizes", None)),
                                hint="give the student the teacher's input size, or distil through the teacher's "
                                     "boxes (detection_crossgrid.CrossGridTargets)")
        return None
    sizes = (int(cross_grid.teacher_size), int(cross_grid.student_size))
    if (int(getattr(teacher, "image_size", -1)), int(getattr(student, "image_size", -1))) != sizes:
        raise CompressError("the models' input sizes (teacher %s, student %s) are not the cross-grid targets' %s"
                            % (getattr(teacher, "image_size", None), getattr(student, "image_size", None), sizes),
                            hint="build the student spec with student_spec(teacher_spec, student.grid_sizes, size)")
    if int(getattr(student, "num_anchors", -1)) != int(cross_grid.student_anchors.shape[0]):
        raise CompressError("the student predicts %s anchors, the cross-grid targets lay out %d"
                            % (getattr(student, "num_anchors", None), cross_grid.student_anchors.shape[0]))
    return sizes


def _views(bank: FrameBank, views: ViewConfig, batch: int, rng: np.random.Generator,
           sizes: Optional[Tuple[int, int]], cross_grid: Optional[Any] = None
           ) -> Tuple[torch.Tensor, torch.Tensor, Optional[Tuple[torch.Tensor, torch.Tensor]]]:
    """(teacher's, student's) inputs -- one tensor twice for same-grid distillation, else each at its size --
    and, when the cross-grid targets use tiles, (the teacher's tile inputs, which views were mirrored)."""
    if sizes is None:
        x = bank.sample(batch, views, rng)
        return x, x, None
    if getattr(cross_grid, "tiles", None) is None:
        teacher_x, student_x = bank.sample_sizes(batch, views, rng, sizes)
        return teacher_x, student_x, None
    (teacher_x, student_x), tiles, flipped = bank.sample_tiled(batch, views, rng, sizes, cross_grid.tiles)
    return teacher_x, student_x, (tiles, flipped)


def _targets(teacher_outputs: Tuple[torch.Tensor, torch.Tensor], cross_grid: Optional[Any],
             flipped: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The ``(N, A, 8)`` targets: the teacher's per-anchor outputs, or its boxes on the student's grid (with
    ``flipped``, the outputs hold N views and then their tiles: the boxes of both, merged)."""
    if cross_grid is None:
        return teacher_targets(*teacher_outputs)
    if flipped is None:
        return cross_grid(*teacher_outputs)
    n = flipped.shape[0]
    enc, logits = teacher_outputs
    return cross_grid(enc[:n], logits[:n], (enc[n:], logits[n:], flipped))


def distill_loss_on(student: nn.Module, teacher: nn.Module, inputs: torch.Tensor,
                    cross_grid: Optional[Any] = None, student_inputs: Optional[torch.Tensor] = None) -> float:
    """The distillation loss of ``student`` against ``teacher`` on fixed inputs (both in eval mode).

    With ``cross_grid`` the student sees ``student_inputs`` (the same frames at its own size).
    """
    teacher.eval()
    student.eval()
    with torch.no_grad():
        targets = _targets(teacher(inputs), cross_grid)
        enc, logits = student(inputs if student_inputs is None else student_inputs)
        loss, _ = detection_distill_loss(enc, logits, targets)
    return float(loss)


__all__ = ["FrameBank", "DetectorTrainConfig", "ViewConfig", "distill_detector", "distill_loss_on", "frame_bank_from_labels",
           "learning_rate", "teacher_targets", "training_progress"]
