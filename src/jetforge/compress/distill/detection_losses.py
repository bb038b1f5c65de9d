"""Distillation losses for SSD detectors: per-anchor class scores (binary KL) and box encodings (smooth L1).

The student predicts, for every anchor, class logits (background, person; each a sigmoid, as the
TF Object Detection API's SSD heads) and a box encoding ``[ty, tx, th, tw]`` (faster-rcnn coder,
scale factors 10/10/5/5).  The targets, ``(A, 8)`` per image
(:func:`jetforge.compress.distill.detection_train.teacher_targets`), carry soft class probabilities ``q``, a class
weight (0 = ignore the anchor), the target encoding and a box weight:

* **class term**: for each anchor and class column, the binary KL divergence
  ``q log(q / p) + (1 - q) log((1 - q) / (1 - p))`` with ``p = sigmoid(student logit)``, computed
  as ``BCE_with_logits(s, q) - H(q)`` (the same gradient as soft-target BCE, but 0 when the student
  equals the teacher, so the logged value says how far it is);
* **box term**: ``smooth_l1(s_enc - t_enc)`` (beta 1, SSD's choice for encodings of this scale)
  summed over the four coordinates and weighted by the box weight -- the teacher's confidence that
  a person is there, so the student copies the teacher's boxes where the teacher sees people and is
  not pulled towards the arbitrary encodings the teacher outputs on background;
* both sums are divided by the batch's total box weight (at least 1 per image): the "number of
  positives" normaliser of SSD, soft, so the loss scale does not depend on how crowded the frames are.

``loss = class_weight * class_term + box_weight * box_term``.  A student identical to the teacher has
loss 0 up to float rounding (checked by the tests with the real detector on real frames).
"""

from typing import Dict, Tuple

import torch
from torch import nn

from jetforge.errors import CompressError


def binary_kl_with_logits(student_logits: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Elementwise KL(Bernoulli(q) || Bernoulli(sigmoid(s))), stable for any logit and q in [0, 1]."""
    q = q.float()
    bce = nn.functional.binary_cross_entropy_with_logits(student_logits.float(), q, reduction="none")
    entropy = -(torch.xlogy(q, q) + torch.xlogy(1 - q, 1 - q))
    return bce - entropy


def detection_distill_loss(box_encodings: torch.Tensor, class_logits: torch.Tensor, targets: torch.Tensor,
                           class_weight: float = 1.0, box_weight: float = 1.0
                           ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """``(loss, logs)`` of student outputs ``(N, A, 4)``, ``(N, A, 2)`` against targets ``(N, A, 8)`` (module doc)."""
    if targets.shape[:2] != box_encodings.shape[:2] or targets.shape[-1] != 8 or class_logits.shape[-1] != 2:
        raise CompressError("student outputs %s / %s do not fit targets %s"
                            % (tuple(box_encodings.shape), tuple(class_logits.shape), tuple(targets.shape)),
                            hint="the targets were made for other anchors: rebuild them for the student's input size")
    q, keep = targets[..., 0:2], targets[..., 2:3]
    t_enc, w_box = targets[..., 3:7], targets[..., 7]
    normaliser = torch.clamp(w_box.sum(), min=float(len(targets)))
    cls = (binary_kl_with_logits(class_logits, q) * keep).sum() / normaliser
    diff = nn.functional.smooth_l1_loss(box_encodings.float(), t_enc.float(), reduction="none", beta=1.0).sum(-1)
    box = (diff * w_box).sum() / normaliser
    loss = class_weight * cls + box_weight * box
    return loss, {"class_kl": cls.detach(), "box_l1": box.detach()}


class DetectionDistillModule(nn.Module):
    """``forward(x, targets) -> (loss, logs)`` for :class:`jetforge.compress.train.Trainer`.

    The teacher is not here: its outputs were computed once and live in the targets.
    """

    def __init__(self, student: nn.Module, class_weight: float = 1.0, box_weight: float = 1.0) -> None:
        super().__init__()
        if class_weight < 0 or box_weight < 0 or class_weight + box_weight == 0:
            raise CompressError("detection loss weights must be >= 0 and not both 0 (class %r, box %r)"
                                % (class_weight, box_weight))
        self.student = student
        self.class_weight = float(class_weight)
        self.box_weight = float(box_weight)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        enc, logits = self.student(x)
        return detection_distill_loss(enc, logits, targets, self.class_weight, self.box_weight)


__all__ = ["DetectionDistillModule", "binary_kl_with_logits", "detection_distill_loss"]
