"""Distillation targets for a student whose anchor grid is not the teacher's: through the teacher's decoded boxes.

A student that runs at a smaller input (e.g. 192 px where the teacher runs at 300 px) has other
feature-map sizes (12x12 instead of 19x19 for the first map), so the teacher's per-anchor outputs
have no anchor-by-anchor counterpart in the student and
:func:`jetforge.compress.distill.detection_train.teacher_targets` does not apply.  The conv body
itself is resolution-agnostic (the same weights run at any size), only the anchors change, so the
student starts from the teacher's (or a 300 px student's) weights and learns the new grid here:

1. the teacher scores the view at its own input size and its outputs are **decoded** into boxes
   (the faster-rcnn box coder of the port, :func:`decode_boxes`) with person scores;
2. boxes scoring at least ``min_score`` (low-score ones included: they are soft targets, and AP
   counts them) go through per-image NMS (:func:`fast_nms`), at most ``max_boxes`` kept;
3. they are **matched** to the student's anchors as the TF Object Detection API's SSD training does
   (``argmax_matcher``: an anchor is matched to the box of highest IoU if that IoU is >= ``iou_match``
   (0.5, no ignore band), and every box also takes its best anchor -- ``force_match_for_each_row`` --;
   where two boxes want one anchor the higher-scoring box gets it and the other its best free anchor,
   :func:`match_anchors`);
4. the targets, in the ``(N, A, 8)`` layout of
   :func:`jetforge.compress.distill.detection_losses.detection_distill_loss`: the person probability
   of a matched anchor is its box's teacher score (0 for unmatched anchors: background; the background
   column gets ``1 - q``), its box encoding is the box **re-encoded** on the student's anchor
   (:func:`encode_boxes`, the inverse of the decoding), weighted by the box's score, as the
   same-grid loss weights boxes by the teacher's confidence.

Both models see the same view (the same crop, flip and jitter; each resized from the frame to its own
input size: :meth:`jetforge.compress.distill.detection_train.FrameBank.sample_sizes`).  With
``tile_grid`` > 0 the teacher also scores zoomed tiles of each view and step 1's boxes are the merge of
both (:mod:`jetforge.compress.distill.detection_tiles`): a sharper teacher for small people.

Fast NMS (Bolya et al., YOLACT, 2019) is used instead of greedy NMS because it runs on the whole
batch at once on the GPU: a box is dropped when a higher-scoring box overlaps it by more than the
threshold, whether or not that box was itself dropped, so it may drop a few more boxes than greedy
NMS does -- for soft targets that means slightly fewer duplicate low-score boxes.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np
import torch

from jetforge.compress.distill.detection_tiles import tile_boxes_in_view, tiles_in_view
from jetforge.errors import CompressError
from jetforge.vision.ssd import AnchorLayer, SSDSpec
from jetforge.vision.tiles import MAX_TILE_GRID, tile_rects


def student_spec(teacher_spec: SSDSpec, grid_sizes: Sequence[Tuple[int, int]], image_size: int) -> SSDSpec:
    """The teacher's SSD spec laid out on the student's feature maps: same scales and aspect ratios, other grids.

    Anchors are in normalised coordinates, so each layer keeps the teacher's boxes and only its cell grid
    changes; decoding, scores and NMS settings are the teacher's.
    """
    if len(grid_sizes) != len(teacher_spec.layers):
        raise CompressError("the student predicts on %d feature maps, the teacher on %d"
                            % (len(grid_sizes), len(teacher_spec.layers)))
    layers = tuple(AnchorLayer(int(rows), int(cols), layer.scales, layer.aspect_ratios)
                   for (rows, cols), layer in zip(grid_sizes, teacher_spec.layers))
    return dataclasses.replace(teacher_spec, layers=layers, image_size=(int(image_size), int(image_size)))


def student_contract(teacher_spec: SSDSpec, teacher_preprocess: Any, student: Any) -> Tuple[SSDSpec, Any]:
    """The SSD spec and input contract a student exports with: the teacher's, at the student's input size.

    A student at the teacher's size gets the teacher's spec and preprocessing unchanged; at another size
    its sidecar must say that size (the apps resize frames to it) and carry anchors on its own grid.
    """
    size = int(student.image_size)
    if (size, size) == tuple(teacher_spec.image_size):
        return teacher_spec, teacher_preprocess
    return (student_spec(teacher_spec, student.grid_sizes, size),
            dataclasses.replace(teacher_preprocess, height=size, width=size))


def anchors_tensor(spec: SSDSpec, device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """``(A, 4)`` float32 anchors of ``spec`` (``[ymin, xmin, ymax, xmax]``, normalised) on ``device``."""
    return torch.from_numpy(np.ascontiguousarray(spec.anchors())).to(device)


def _centre_form(boxes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    h = boxes[..., 2] - boxes[..., 0]
    w = boxes[..., 3] - boxes[..., 1]
    return boxes[..., 0] + h / 2, boxes[..., 1] + w / 2, h, w


def decode_boxes(encodings: torch.Tensor, anchors: torch.Tensor,
                 scale_factors: Sequence[float] = (10.0, 10.0, 5.0, 5.0)) -> torch.Tensor:
    """Faster-rcnn decoding in torch (as :func:`jetforge.vision.ssd.decode_boxes`): ``(..., A, 4)`` boxes."""
    yca, xca, ha, wa = _centre_form(anchors)
    ty, tx, th, tw = (encodings[..., i] / float(scale_factors[i]) for i in range(4))
    yc, xc = ty * ha + yca, tx * wa + xca
    h, w = torch.exp(th) * ha, torch.exp(tw) * wa
    return torch.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], dim=-1)


def encode_boxes(boxes: torch.Tensor, anchors: torch.Tensor,
                 scale_factors: Sequence[float] = (10.0, 10.0, 5.0, 5.0), eps: float = 1e-8) -> torch.Tensor:
    """The inverse of :func:`decode_boxes`: boxes ``(..., A, 4)`` on anchors ``(A, 4)`` -> ``[ty, tx, th, tw]``.

    TF's coder adds ``eps`` (1e-8) to heights and widths before the logarithm and the divisions, so a
    degenerate box gives a finite (very negative) size encoding; so does this one.
    """
    yca, xca, ha, wa = _centre_form(anchors)
    yc, xc, h, w = _centre_form(boxes)
    ha, wa, h, w = ha + eps, wa + eps, h + eps, w + eps
    return torch.stack([(yc - yca) / ha * float(scale_factors[0]), (xc - xca) / wa * float(scale_factors[1]),
                        torch.log(h / ha) * float(scale_factors[2]), torch.log(w / wa) * float(scale_factors[3])],
                       dim=-1)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of every box of ``a`` ``(..., M, 4)`` with every box of ``b`` ``(..., K, 4)``: ``(..., M, K)``.

    Boxes are ``[ymin, xmin, ymax, xmax]``; an empty union (two empty boxes) gives 0.
    """
    a, b = a.unsqueeze(-2), b.unsqueeze(-3)
    ih = (torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])).clamp(min=0)
    iw = (torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])).clamp(min=0)
    inter = ih * iw
    area_a = (a[..., 2] - a[..., 0]).clamp(min=0) * (a[..., 3] - a[..., 1]).clamp(min=0)
    area_b = (b[..., 2] - b[..., 0]).clamp(min=0) * (b[..., 3] - b[..., 1]).clamp(min=0)
    union = area_a + area_b - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-12), torch.zeros_like(inter))


def fast_nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float, min_score: float,
             max_boxes: int, pre_nms: int = 200) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batched Fast NMS (module docstring): ``(N, A, 4)``, ``(N, A)`` -> ``(N, K, 4)``, ``(N, K)``, valid ``(N, K)``.

    The ``pre_nms`` highest scores of each image take part (those below ``min_score`` never do); a box is
    dropped when a higher-scoring one overlaps it by more than ``iou_threshold``; the ``max_boxes``
    highest survivors are returned in descending score order (ties: the lower anchor index first),
    padded with zero boxes of score 0 and ``valid`` False.
    """
    k = min(int(pre_nms), scores.shape[1])
    # a stable descending sort: equal scores keep anchor order, so the result does not depend on the device
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    top_scores = torch.gather(scores, 1, order)
    top_boxes = torch.gather(boxes, 1, order.unsqueeze(-1).expand(-1, -1, 4))
    iou = box_iou(top_boxes, top_boxes).triu(diagonal=1)  # [i, j]: i scores higher than j
    keep = (iou.max(dim=1).values <= iou_threshold) & (top_scores >= min_score)
    kept_scores = torch.where(keep, top_scores, torch.full_like(top_scores, -1.0))
    k_out = min(int(max_boxes), k)
    rank = torch.sort(kept_scores, dim=1, descending=True, stable=True).indices[:, :k_out]
    out_scores = torch.gather(kept_scores, 1, rank)
    out_boxes = torch.gather(top_boxes, 1, rank.unsqueeze(-1).expand(-1, -1, 4))
    valid = out_scores >= 0
    return (torch.where(valid.unsqueeze(-1), out_boxes, torch.zeros_like(out_boxes)),
            torch.where(valid, out_scores, torch.zeros_like(out_scores)), valid)


def match_anchors(boxes: torch.Tensor, valid: torch.Tensor, anchors: torch.Tensor,
                  iou_match: float = 0.5, rounds: int = 8) -> torch.Tensor:
    """SSD's argmax matching with a forced anchor per box: ``(N, A)`` box index per anchor, -1 unmatched.

    ``boxes`` ``(N, K, 4)`` in priority order, ``valid`` ``(N, K)`` marks real boxes, ``anchors`` ``(A, 4)``.
    An anchor takes the box of highest IoU if that IoU is >= ``iou_match``; then every box forces its
    anchor of highest IoU (over 0) to itself.  Where two boxes want the same anchor, the first box takes
    it and the other takes its best anchor still free, in up to ``rounds`` rounds -- unlike TF's
    ``argmax_matcher``, which drops the second box: on a student's coarser grid two people side by side
    often share a best anchor, and a distillation target should not turn a person the teacher saw into
    background.
    """
    n, k = valid.shape
    a = anchors.shape[0]
    if k == 0:
        return torch.full((n, a), -1, dtype=torch.long, device=anchors.device)
    iou = box_iou(anchors.unsqueeze(0).expand(n, -1, -1), boxes)  # (N, A, K)
    iou = torch.where(valid.unsqueeze(1), iou, torch.full_like(iou, -1.0))
    best_iou, best_box = iou.max(dim=2)
    matches = torch.where(best_iou >= iou_match, best_box, torch.full_like(best_box, -1))
    box_ids = torch.arange(k, device=anchors.device).view(1, k, 1)
    anchor_ids = torch.arange(a, device=anchors.device)
    taken = torch.zeros(n, a, dtype=torch.bool, device=anchors.device)
    pending = valid.clone()
    for _ in range(rounds):
        free_iou = torch.where(taken.unsqueeze(-1) | ~pending.unsqueeze(1), torch.full_like(iou, -1.0), iou)
        best_free, best_anchor = free_iou.max(dim=1)  # (N, K): each pending box's best free anchor (first on ties)
        wants = (best_anchor.unsqueeze(-1) == anchor_ids) & (pending & (best_free > 0)).unsqueeze(-1)  # (N, K, A)
        forced = wants.any(dim=1)
        if not bool(forced.any()):
            break
        winner = wants.float().argmax(dim=1)  # (N, A): the first box (highest priority) wanting the anchor
        matches = torch.where(forced, winner, matches)
        taken |= forced
        pending &= ~(wants & (winner.unsqueeze(1) == box_ids)).any(dim=2)
        pending &= best_free > 0  # a box overlapping no free anchor stops asking
    return matches


@dataclass
class CrossGridConfig:
    """How the teacher's boxes become the student's targets (the recipe's ``cross_grid`` block)."""

    min_score: float = 0.01  # teacher boxes scoring less are background (the detection_ap metric's floor)
    nms_iou: float = 0.6  # the port's NMS threshold
    max_boxes: int = 100
    pre_nms: int = 200
    iou_match: float = 0.5  # the SSD matcher's threshold
    # the teacher also on zoomed tiles of each view (detection_tiles): 0 = off, n = an n x n grid of tiles
    tile_grid: int = 0
    tile_side: float = 0.6  # a tile's side / the view's side
    tile_merge_iou: float = 0.5  # NMS over the view's and its tiles' boxes
    tile_edge: float = 0.01  # a tile box this close to an inner tile edge is a cut person: dropped

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_score < 1.0 and 0.0 < self.nms_iou <= 1.0 and 0.0 < self.iou_match <= 1.0):
            raise ValueError("cross_grid: min_score in [0, 1), nms_iou and iou_match in (0, 1] are required")
        if self.max_boxes < 1 or self.pre_nms < self.max_boxes:
            raise ValueError("cross_grid: max_boxes >= 1 and pre_nms >= max_boxes are required")
        if self.tile_grid == 1 or not 0 <= self.tile_grid <= MAX_TILE_GRID:
            raise ValueError("cross_grid: tile_grid is 0 (no tiles) or 2..%d, got %r" % (MAX_TILE_GRID, self.tile_grid))
        if self.tile_grid and not 1.0 / self.tile_grid < self.tile_side < 1.0:
            raise ValueError("cross_grid: tile_side must be in (1/tile_grid, 1) so tiles overlap and zoom, got %r"
                             % self.tile_side)
        if not (0.0 < self.tile_merge_iou <= 1.0 and 0.0 <= self.tile_edge < 0.5):
            raise ValueError("cross_grid: tile_merge_iou in (0, 1] and tile_edge in [0, 0.5) are required")


class CrossGridTargets:
    """``targets(teacher_encodings, teacher_logits) -> (N, A_student, 8)`` (module docstring, steps 1-4)."""

    def __init__(self, teacher_spec: SSDSpec, student_spec_: SSDSpec, cfg: CrossGridConfig,
                 device: torch.device = torch.device("cpu")) -> None:
        if teacher_spec.num_classes != 2 or student_spec_.num_classes != 2:
            raise CompressError("cross-grid distillation is written for a background + person detector")
        self.cfg = cfg
        self.scale_factors = tuple(teacher_spec.scale_factors)
        self.student_scale_factors = tuple(student_spec_.scale_factors)
        self.teacher_anchors = anchors_tensor(teacher_spec, device)
        self.student_anchors = anchors_tensor(student_spec_, device)
        self.teacher_size = int(teacher_spec.image_size[0])
        self.student_size = int(student_spec_.image_size[0])
        # (T, 4) tiles of a view, normalised (None: the teacher sees the whole view only); the sampler cuts them
        # from the numpy rects, the merge maps boxes with the tensor (made once, not every step)
        self.tiles = None if not cfg.tile_grid else tile_rects(cfg.tile_grid, cfg.tile_side)
        self._tile_tensor = None if self.tiles is None else torch.as_tensor(self.tiles, dtype=torch.float32,
                                                                            device=device)

    def teacher_boxes(self, encodings: torch.Tensor, logits: torch.Tensor
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The teacher's detections after NMS: boxes ``(N, K, 4)``, scores ``(N, K)``, valid ``(N, K)``."""
        boxes = decode_boxes(encodings.float(), self.teacher_anchors, self.scale_factors)
        scores = torch.sigmoid(logits.float()[..., 1])
        return fast_nms(boxes, scores, self.cfg.nms_iou, self.cfg.min_score, self.cfg.max_boxes, self.cfg.pre_nms)

    def tiled_teacher_boxes(self, encodings: torch.Tensor, logits: torch.Tensor, tile_encodings: torch.Tensor,
                            tile_logits: torch.Tensor, flipped: torch.Tensor
                            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The teacher's boxes on N views merged with its boxes on their tiles (``(N * T, ...)`` outputs, view by
        view; ``flipped`` ``(N,)`` says which views were mirrored): see :mod:`detection_tiles`."""
        if self.tiles is None:
            raise CompressError("tile outputs given, but cross_grid.tile_grid is 0")
        n, t = encodings.shape[0], self.tiles.shape[0]
        if tile_encodings.shape[0] != n * t or flipped.shape != (n,):
            raise CompressError("%d views need %d tiles and %d flip flags, got %d and %s"
                                % (n, n * t, n, tile_encodings.shape[0], tuple(flipped.shape)))
        boxes, scores, valid = self.teacher_boxes(encodings, logits)
        t_boxes, t_scores, t_valid = self.teacher_boxes(tile_encodings, tile_logits)
        k = t_boxes.shape[1]
        where = tiles_in_view(self._tile_tensor.to(boxes.device), flipped.to(boxes.device))
        t_boxes, t_valid = tile_boxes_in_view(t_boxes.view(n, t, k, 4), t_valid.view(n, t, k), where,
                                              self.cfg.tile_edge)
        all_boxes = torch.cat([boxes, t_boxes.reshape(n, t * k, 4)], dim=1)
        all_valid = torch.cat([valid, t_valid.reshape(n, t * k)], dim=1)
        all_scores = torch.where(all_valid, torch.cat([scores, t_scores.view(n, t * k)], dim=1),
                                 torch.full_like(all_valid, -1.0, dtype=scores.dtype))
        return fast_nms(all_boxes, all_scores, self.cfg.tile_merge_iou, self.cfg.min_score, self.cfg.max_boxes,
                        all_boxes.shape[1])

    def __call__(self, encodings: torch.Tensor, logits: torch.Tensor,
                 tiles: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Targets from the teacher's outputs on the views, and with ``tiles`` = (encodings, logits, flipped) of
        its outputs on their tiles, from the merged boxes of both."""
        if encodings.shape[1] != self.teacher_anchors.shape[0]:
            raise CompressError("the teacher output %d anchors, its spec lays out %d"
                                % (encodings.shape[1], self.teacher_anchors.shape[0]))
        if tiles is None:
            boxes, scores, valid = self.teacher_boxes(encodings, logits)
        else:
            boxes, scores, valid = self.tiled_teacher_boxes(encodings, logits, *tiles)
        return self.targets_from_boxes(boxes, scores, valid)

    def targets_from_boxes(self, boxes: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Boxes ``(N, K, 4)`` in priority order with scores and validity -> ``(N, A_student, 8)`` targets."""
        match = match_anchors(boxes, valid, self.student_anchors, self.cfg.iou_match)  # (N, A)
        matched = match >= 0
        index = match.clamp(min=0)
        q = torch.where(matched, torch.gather(scores, 1, index), torch.zeros_like(index, dtype=scores.dtype))
        box = torch.gather(boxes, 1, index.unsqueeze(-1).expand(-1, -1, 4))
        enc = encode_boxes(box, self.student_anchors, self.student_scale_factors)
        enc = torch.where(matched.unsqueeze(-1), enc, torch.zeros_like(enc))
        q = q.unsqueeze(-1)
        return torch.cat([1.0 - q, q, torch.ones_like(q), enc, q], dim=-1)


__all__ = ["CrossGridConfig", "CrossGridTargets", "anchors_tensor", "box_iou", "decode_boxes", "encode_boxes",
           "fast_nms", "match_anchors", "student_contract", "student_spec"]
