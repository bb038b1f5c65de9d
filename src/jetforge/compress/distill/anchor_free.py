"""Anchor-free targets and losses for the YOLO-layout student: the teacher's decoded boxes -> per-point targets.

The student predicts, at every cell centre ("point") of its three strides, four distances to a box's sides and C
class logits (:class:`jetforge.compress.models.yolo_student.YoloStudent`).  Its targets come from the teacher's
*decoded* boxes (after NMS, with their scores), as the SSD cross-grid path's do, so any detector with a registered
decoder can teach it.  Assignment, FCOS-style (Tian et al. 2019) with centre sampling, kept simple on purpose:

1. **inside**: a point may take a box when it lies inside the box and within ``centre_radius`` strides of the box's
   centre on both axes (centre sampling: the points near the middle see the object best);
2. **scale**: and when the box's largest point-to-side distance fits the point's level: at most ``4`` strides on
   stride 8, ``4``-``8`` strides' worth on stride 16 (32 to 64 px), above that on stride 32 (``scale_ranges``,
   in pixels; each level takes the sizes its receptive field suits);
3. **ambiguity**: a point that may take several boxes takes the smallest (FCOS's rule: the large box has other
   points);
4. **no box left out**: a box that got no point (tiny, or its centre between cells) takes the point of its level
   nearest to its centre, if that point is free -- a person the teacher saw should not become background.

Losses, normalised by the summed teacher scores of the positives (at least 1 per image, as the SSD path's soft
"number of positives"):

* **class**: binary cross-entropy with logits on every point and class; a positive's target is the teacher's
  score of its box, times -- with ``iou_aware`` -- the IoU of the student's current box with it (detached; the
  IoU-aware classification score of VarifocalNet, Zhang et al. 2021: the probability then ranks boxes by how well
  they fit, which is what AP counts and what a layout without objectness must do with its one score); negatives
  have target 0;
* **box**: GIoU loss (Rezatofighi et al. 2019) of each positive's box, weighted by its box's teacher score.

``loss = class_weight * class + box_weight * box``.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import torch
from torch import nn

from jetforge.errors import CompressError


@dataclass
class AnchorFreeConfig:
    """The YOLO-layout student's assignment and head (the recipe's ``anchor_free`` block)."""

    centre_radius: float = 2.5  # strides around a box's centre where points may take it
    scale_ranges: List[float] = field(default_factory=lambda: [32.0, 64.0])  # px: stride 8 up to the first, ...
    iou_aware: bool = True  # positives' class targets are teacher score x IoU (module docstring)
    channels: int = 64  # the neck's and heads' width
    freeze_blocks: int = 6  # the first MobileNetV2 blocks (and the stem) keep the port's weights: faster steps

    def __post_init__(self) -> None:
        if not 0.5 <= self.centre_radius <= 10.0:
            raise ValueError("anchor_free.centre_radius must be 0.5..10 strides, got %r" % self.centre_radius)
        if len(self.scale_ranges) != 2 or not 0 < self.scale_ranges[0] < self.scale_ranges[1]:
            raise ValueError("anchor_free.scale_ranges must be two increasing pixel sizes [s8_max, s16_max], got %r"
                             % (self.scale_ranges,))
        if not 8 <= self.channels <= 512 or not 0 <= self.freeze_blocks <= 13:
            raise ValueError("anchor_free.channels must be 8..512 and freeze_blocks 0..13")


def box_area(boxes: torch.Tensor) -> torch.Tensor:
    return (boxes[..., 2] - boxes[..., 0]).clamp(min=0) * (boxes[..., 3] - boxes[..., 1]).clamp(min=0)


def paired_iou(a: torch.Tensor, b: torch.Tensor, generalized: bool = False) -> torch.Tensor:
    """IoU (or GIoU) of boxes ``a[i]`` and ``b[i]`` (``x1, y1, x2, y2``), elementwise over ``(..., 4)``."""
    lt, rb = torch.maximum(a[..., :2], b[..., :2]), torch.minimum(a[..., 2:], b[..., 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    union = box_area(a) + box_area(b) - inter
    iou = inter / union.clamp(min=1e-9)
    if not generalized:
        return iou
    hull = (torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2])).clamp(min=0).prod(-1)
    return iou - (hull - union) / hull.clamp(min=1e-9)


def level_limits(strides: torch.Tensor, cfg: AnchorFreeConfig) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per point, the (exclusive low, inclusive high) of the largest side distance its level takes (step 2)."""
    levels = sorted(set(strides.tolist()))
    if len(levels) != 3:
        raise CompressError("the anchor-free assignment is written for three strides, got %s" % levels)
    bounds = [0.0] + [float(v) for v in cfg.scale_ranges] + [float("inf")]
    level = torch.bucketize(strides, torch.tensor(levels, dtype=strides.dtype, device=strides.device))
    edges = torch.tensor(bounds, dtype=strides.dtype, device=strides.device)
    return edges[level], edges[level + 1]


def assign_points(points: torch.Tensor, strides: torch.Tensor, boxes: torch.Tensor, valid: torch.Tensor,
                  cfg: AnchorFreeConfig) -> torch.Tensor:
    """``(N, A)`` box index per point, -1 for background (module docstring, steps 1-4).

    ``points`` ``(A, 2)`` x, y and ``strides`` ``(A,)`` in input pixels; ``boxes`` ``(N, K, 4)`` x1, y1, x2, y2 in
    input pixels, ``valid`` ``(N, K)``.
    """
    n, k = valid.shape
    a = points.shape[0]
    if k == 0:
        return torch.full((n, a), -1, dtype=torch.long, device=points.device)
    px, py = points[:, 0].view(1, a, 1), points[:, 1].view(1, a, 1)
    x1, y1, x2, y2 = (boxes[..., i].unsqueeze(1) for i in range(4))  # (N, 1, K)
    sides = torch.stack([px - x1, py - y1, x2 - px, y2 - py], dim=-1)  # (N, A, K, 4)
    radius = (cfg.centre_radius * strides).view(1, a, 1)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    near = ((px - cx).abs() <= radius) & ((py - cy).abs() <= radius)
    low, high = level_limits(strides, cfg)
    reach = sides.max(dim=-1).values
    fits = (reach > low.view(1, a, 1)) & (reach <= high.view(1, a, 1))
    ok = (sides.min(dim=-1).values > 0) & near & fits & valid.unsqueeze(1)  # (N, A, K)
    area = torch.where(ok, box_area(boxes).unsqueeze(1).expand(-1, a, -1), torch.full_like(reach, float("inf")))
    smallest = area.min(dim=2)
    matches = torch.where(torch.isfinite(smallest.values), smallest.indices, torch.full_like(smallest.indices, -1))
    # step 4: a box with no point takes the nearest point of its level, if free
    got = torch.zeros(n, k, dtype=torch.bool, device=points.device)
    got.scatter_(1, matches.clamp(min=0), matches >= 0)
    half = torch.maximum(x2 - x1, y2 - y1) / 2  # the largest side distance from the centre, (N, 1, K)
    own_level = (half > low.view(1, a, 1)) & (half <= high.view(1, a, 1))
    dist = torch.where(own_level, (px - cx) ** 2 + (py - cy) ** 2, torch.full_like(reach, float("inf")))
    nearest = dist.min(dim=1).indices  # (N, K)
    orphan = valid & ~got & torch.isfinite(dist.min(dim=1).values)
    for b in range(n):  # few orphans per image; boxes in priority order, so the first box keeps a shared point
        for j in torch.nonzero(orphan[b]).flatten().tolist():
            p = int(nearest[b, j])
            if matches[b, p] < 0:
                matches[b, p] = j
    return matches


def anchor_free_loss(dist: torch.Tensor, logits: torch.Tensor, points: torch.Tensor, strides: torch.Tensor,
                     boxes: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor, cfg: AnchorFreeConfig,
                     class_weight: float = 1.0, box_weight: float = 1.0
                     ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """``(loss, logs)`` of the student's ``dist`` ``(N, A, 4)`` and ``logits`` ``(N, A, 1)`` against the teacher's
    ``boxes`` ``(N, K, 4)`` (input pixels, priority order), ``scores`` and ``valid`` ``(N, K)`` (module docstring).

    The teacher's boxes are one class (its person boxes); a student of several classes is not trained here.
    """
    if logits.shape[-1] != 1:
        raise CompressError("the anchor-free distillation trains a one-class (person) student, got %d classes"
                            % logits.shape[-1])
    match = assign_points(points, strides, boxes, valid, cfg)
    positive = match >= 0
    index = match.clamp(min=0)
    target_box = torch.gather(boxes, 1, index.unsqueeze(-1).expand(-1, -1, 4))
    q = torch.where(positive, torch.gather(scores, 1, index), torch.zeros_like(scores[:, :1]).expand_as(index))
    pred_box = torch.cat([points - dist[..., :2], points + dist[..., 2:]], dim=-1)
    if cfg.iou_aware:
        target = q * paired_iou(pred_box.detach(), target_box).clamp(min=0) * positive
    else:
        target = q * positive
    normaliser = torch.clamp(q.sum(), min=float(len(boxes)))
    cls = nn.functional.binary_cross_entropy_with_logits(logits[..., 0].float(), target.float(),
                                                         reduction="sum") / normaliser
    giou = paired_iou(pred_box.float(), target_box.float(), generalized=True)
    box = ((1.0 - giou) * q * positive).sum() / normaliser
    loss = class_weight * cls + box_weight * box
    return loss, {"class_bce": cls.detach(), "box_giou": box.detach(), "positives": positive.sum().detach()}


__all__ = ["AnchorFreeConfig", "anchor_free_loss", "assign_points", "box_area", "level_limits", "paired_iou"]
