"""Distil a YOLO-layout student from any detector through the teacher's decoded boxes (``student.layout: yolov8``).

The teacher is the SSDLite port (torch, decoded by its box coder and batched Fast NMS on the training device, as
the cross-grid path does: :class:`PortTeacher`) or any detector model with a registered output decoder
(:class:`DecodedTeacher`: an ONNX or engine read by :class:`jetforge.vision.decoded_detector.DecodedDetector`, its
own input contract and decoder, its person class).  Either way the student never sees the teacher's raw outputs,
only its boxes and scores, so the two may have any layouts.

Every step (:func:`distill_yolo_student`): the frame bank cuts ``batch`` views (crop, mirror, jitter) and resizes
each to the teacher's and the student's input sizes; the teacher's boxes on its view (normalised to the view) are
scaled to the student's input pixels; :func:`jetforge.compress.distill.anchor_free.anchor_free_loss` assigns them
to the student's points and scores its boxes and class probabilities.  The schedule (warm-up, cosine, time budget)
is the SSD path's (:func:`jetforge.compress.distill.detection_train.learning_rate`).
"""

import logging
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.compress.distill.anchor_free import AnchorFreeConfig, anchor_free_loss
from jetforge.compress.distill.detection_crossgrid import CrossGridConfig, anchors_tensor, decode_boxes, fast_nms
from jetforge.compress.distill.detection_train import (DetectorTrainConfig, FrameBank, ViewConfig, learning_rate,
                                                       training_progress)
from jetforge.errors import CompressError

log = logging.getLogger(__name__)


class PortTeacher:
    """The SSD port as a box teacher: ``boxes(x)`` -> normalised ``x1, y1, x2, y2`` ``(N, K, 4)``, scores, valid."""

    def __init__(self, model: nn.Module, spec: Any, cfg: CrossGridConfig, device: torch.device) -> None:
        self.model = model.to(device).eval()
        self.size = int(model.image_size)
        self.cfg = cfg
        self.anchors = anchors_tensor(spec, device)
        self.scale_factors = tuple(spec.scale_factors)

    def boxes(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            enc, logits = self.model(x)
            yxyx = decode_boxes(enc.float(), self.anchors, self.scale_factors)
            scores = torch.sigmoid(logits.float()[..., 1])
            boxes, scores, valid = fast_nms(yxyx, scores, self.cfg.nms_iou, self.cfg.min_score, self.cfg.max_boxes,
                                            self.cfg.pre_nms)
        return boxes[..., [1, 0, 3, 2]].clamp(0.0, 1.0), scores, valid


class DecodedTeacher:
    """Any detector model with a registered decoder as a box teacher (module docstring); ``class_name`` its class
    the student learns.  Views arrive as the frame bank's normalised tensors and go back to BGR pixels, so the
    teacher applies its own input contract (letterbox or stretch, its colour order and scaling)."""

    def __init__(self, model_path: Any, bank: FrameBank, cfg: CrossGridConfig, class_name: str = "person",
                 decoder: Optional[str] = None, threads: Optional[int] = None) -> None:
        from jetforge.vision.decode import DecoderOptions
        from jetforge.vision.decoded_detector import DecodedDetector

        self.detector = DecodedDetector(model_path, decoder=decoder, threads=threads)
        labels = self.detector.labels
        if labels and class_name not in labels:
            self.detector.close()
            raise CompressError("the teacher %s has no class %r (its classes: %s)"
                                % (model_path, class_name, ", ".join(labels[:8]) + (" ..." if len(labels) > 8 else "")),
                                hint="set teacher.class_name to one of the teacher's class names")
        self.class_index = labels.index(class_name) if labels else 0
        self.detector.decoder.options = DecoderOptions(score_threshold=cfg.min_score, iou_threshold=cfg.nms_iou,
                                                       max_detections=cfg.max_boxes)
        self.size = max(self.detector.contract.height, self.detector.contract.width)
        self.cfg = cfg
        self.bank = bank

    def boxes(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pre = self.bank.preprocess
        mean = torch.tensor(pre.mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(pre.std, device=x.device).view(1, -1, 1, 1)
        pixels = ((x * std + mean) / float(pre.scale)).clamp(0, 255).round().to(torch.uint8)
        if pre.color == "rgb":
            pixels = pixels.flip(1)
        frames = [np.ascontiguousarray(p) for p in pixels.permute(0, 2, 3, 1).cpu().numpy()]
        found = self.detector.detect_batch(frames)
        n, k = len(frames), self.cfg.max_boxes
        boxes, scores = torch.zeros(n, k, 4), torch.zeros(n, k)
        valid = torch.zeros(n, k, dtype=torch.bool)
        for i, (det, frame) in enumerate(zip(found, frames)):
            keep = np.flatnonzero(det.classes == self.class_index)[:k]  # the decoder sorts by score
            h, w = frame.shape[:2]
            boxes[i, :len(keep)] = torch.from_numpy(det.boxes[keep] / np.array([w, h, w, h], np.float32))
            scores[i, :len(keep)] = torch.from_numpy(det.scores[keep].astype(np.float32))
            valid[i, :len(keep)] = True
        return boxes.to(x.device), scores.to(x.device), valid.to(x.device)


def freeze_backbone(student: nn.Module, blocks: int) -> None:
    """Keep the stem and the first ``blocks`` MobileNetV2 blocks at the port's weights (no gradients, BN frozen)."""
    frozen = [student.conv] + list(student.blocks)[:blocks]
    for module in frozen:
        module.eval()
        for p in module.parameters():
            p.requires_grad_(False)


def distill_yolo_student(student: nn.Module, teacher: Any, bank: FrameBank, views: ViewConfig,
                         cfg: DetectorTrainConfig, anchor_free: AnchorFreeConfig,
                         on_log: Optional[Callable[[Dict[str, float]], None]] = None) -> Dict[str, Any]:
    """Train ``student`` (a :class:`~jetforge.compress.models.yolo_student.YoloStudent`, in place) on ``teacher``'s
    boxes over random views of ``bank`` (module docstring); returns the history."""
    device = bank.device
    student.to(device).train()
    freeze_backbone(student, anchor_free.freeze_blocks)
    if cfg.freeze_bn:
        for m in student.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    history: List[Dict[str, float]] = []
    start = time.perf_counter()
    sizes = [teacher.size, student.image_size]
    step = cfg.steps
    for i in range(cfg.steps):
        progress = training_progress(i, time.perf_counter() - start, cfg)
        if progress >= 1.0:
            log.warning("distillation stopped by its time budget after %d of %d steps", i, cfg.steps)
            step = i
            break
        for group in opt.param_groups:
            group["lr"] = learning_rate(progress, cfg)
        x_teacher, x_student = bank.sample_sizes(cfg.batch, views, rng, sizes)
        boxes, scores, valid = teacher.boxes(x_teacher)
        dist, logits = student.raw(x_student)
        loss, logs = anchor_free_loss(dist.float(), logits.float(), student.points, student.point_strides,
                                      boxes * float(student.image_size), scores, valid, anchor_free,
                                      cfg.class_weight, cfg.box_weight)
        if not torch.isfinite(loss):
            raise CompressError("the distillation loss is %s at step %d" % (loss.item(), i), hint="lower train.lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i % cfg.log_every == 0 or i == cfg.steps - 1:
            entry = {"step": i, "loss": loss.item(), "class_bce": logs["class_bce"].item(),
                     "box_giou": logs["box_giou"].item(), "positives": float(logs["positives"]),
                     "lr": learning_rate(progress, cfg), "elapsed_s": time.perf_counter() - start}
            history.append(entry)
            if on_log is not None:
                on_log(entry)
    student.eval()
    return {"steps_done": step, "steps_planned": cfg.steps, "seconds": time.perf_counter() - start,
            "history": history}


__all__ = ["DecodedTeacher", "PortTeacher", "distill_yolo_student", "freeze_backbone"]
