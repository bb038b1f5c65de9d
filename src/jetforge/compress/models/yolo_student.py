"""A small anchor-free person detector whose ONNX has the YOLOv8 output layout, to distil from any detector.

Why this model: jetforge's detector students were all SSDs (the port's layout); a Jetson user's own detector is
most often a YOLOv8-style export.  This student is the second real layout the recipes make
(:mod:`jetforge.compress.distill.detection_yolo`), and its ONNX runs through the registered ``yolov8`` decoder like
any export made elsewhere.  The layout is written from its published description only (one output
``[N, 4 + C, A]``: per candidate column ``cx, cy, w, h`` in model-input pixels, then C class probabilities, no
objectness); no code of the project that defines it is used.

The architecture:

* **backbone**: the SSDLite port's MobileNetV2 (its detection-trained weights, copied from the teacher) up to
  block 12 (stride 16, 96 channels) plus block 13's expansion (576 channels, the port's first SSD feature map);
  stride 8 is block 5's output (32 channels);
* **stride 32**: one new SSDLite-style layer on the 576-channel map (1x1 to 128, 3x3 depthwise stride 2, 1x1 to
  256) -- the MobileNetV2 stages past block 13 hold most of its weights and are left out, which keeps the student
  small;
* **neck**: a top-down pyramid: a 1x1 lateral per level to ``channels``, each level plus the coarser one
  upsampled (nearest, to the static size);
* **head** per level: two depthwise-separable 3x3 layers, then a 1x1 box conv (4 distances) and a 1x1 class conv
  (C logits).  The box is FCOS's: distances from the cell centre to the left, top, right and bottom sides,
  ``softplus(raw) * stride`` pixels (positive, smooth, no distribution head).

:meth:`YoloStudent.raw` gives what training needs (distances in pixels, class logits, the points);
``forward`` gives the exported layout; :func:`reference_detections` is the model's own decode in torch (sides
directly from the distances, greedy NMS), the reference the ``yolov8`` decoder of its ONNX is checked against.
"""

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from jetforge.compress.models.ssdlite_mobilenet_v2 import ConvBN, SSDLiteMobileNetV2, _out
from jetforge.errors import CompressError

STRIDE8_BLOCK = 5  # MobileNetV2's last stride-8 block (32 channels)
STRIDE16_BLOCK = 12  # its last stride-16 block (96 channels); block 13's expansion (576) is the port's first map
DEFAULT_IMAGE_SIZE = 192  # the recipe's student input when student.input_size is null
PRIOR = 0.01  # the class bias starts every probability at this (RetinaNet's prior: no flood of early positives)


class SeparableConv(nn.Module):
    """3x3 depthwise (BN, ReLU6) then 1x1 (BN, ReLU6): the SSDLite building block."""

    def __init__(self, in_ch: int, out_ch: int, size: Tuple[int, int], stride: int = 1) -> None:
        super().__init__()
        self.depthwise = ConvBN(in_ch, in_ch, 3, stride, size, "", depthwise=True)
        self.pointwise = ConvBN(in_ch, out_ch, 1, 1, _out(size, stride), "")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))


class Head(nn.Module):
    """One level's head: two separable layers, then box distances (4) and class logits (C)."""

    def __init__(self, channels: int, num_classes: int, size: Tuple[int, int]) -> None:
        super().__init__()
        self.body = nn.Sequential(SeparableConv(channels, channels, size), SeparableConv(channels, channels, size))
        self.box = nn.Conv2d(channels, 4, 1)
        self.cls = nn.Conv2d(channels, num_classes, 1)
        nn.init.constant_(self.box.bias, 1.0)  # softplus(1) ~ 1.3 strides from the centre to each side
        nn.init.constant_(self.cls.bias, float(-np.log((1 - PRIOR) / PRIOR)))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        y = self.body(x)
        return self.box(y), self.cls(y)


class YoloStudent(nn.Module):
    """The student (module docstring): ``(N, 3, S, S)`` preprocessed input -> ``(N, 4 + C, A)``."""

    def __init__(self, image_size: int = DEFAULT_IMAGE_SIZE, num_classes: int = 1, channels: int = 64) -> None:
        super().__init__()
        if image_size % 32:
            raise CompressError("the YOLO-layout student's input size must be a multiple of 32, got %d" % image_size,
                                hint="use e.g. 192, 224, 256 or 320")
        self.image_size, self.num_classes, self.channels = int(image_size), int(num_classes), int(channels)
        port = SSDLiteMobileNetV2(image_size=image_size)  # the backbone's modules at this size (SAME padding)
        self.conv = port.conv
        self.blocks = nn.ModuleList(list(port.blocks)[:STRIDE16_BLOCK + 1])
        self.expand = port.blocks[STRIDE16_BLOCK + 1].expand
        s = image_size
        self.grid_sizes: Tuple[Tuple[int, int], ...] = ((s // 8, s // 8), (s // 16, s // 16), (s // 32, s // 32))
        self.strides = (8, 16, 32)
        g8, g16, g32 = self.grid_sizes
        self.down = nn.Sequential(ConvBN(576, 128, 1, 1, g16, ""), SeparableConv(128, 256, g16, stride=2))
        self.laterals = nn.ModuleList([ConvBN(cin, channels, 1, 1, g, "")
                                       for cin, g in zip((32, 576, 256), self.grid_sizes)])
        self.heads = nn.ModuleList([Head(channels, num_classes, g) for g in self.grid_sizes])
        points, strides = anchor_points(self.grid_sizes, self.strides)
        self.register_buffer("points", points, persistent=False)
        self.register_buffer("point_strides", strides, persistent=False)

    @property
    def num_anchors(self) -> int:
        return int(self.points.shape[0])

    def copy_backbone(self, teacher: SSDLiteMobileNetV2) -> "YoloStudent":
        """Start the backbone from the port's (unpruned) weights: they were trained to find people."""
        own = self.state_dict()
        taken = {k: v for k, v in teacher.state_dict().items()
                 if k in own and (k.startswith(("conv.", "blocks.%d.expand." % (STRIDE16_BLOCK + 1)))
                                  or (k.startswith("blocks.") and int(k.split(".")[1]) <= STRIDE16_BLOCK))}
        renamed = {k.replace("blocks.%d.expand." % (STRIDE16_BLOCK + 1), "expand."): v for k, v in taken.items()}
        mismatch = [k for k, v in renamed.items() if own[k].shape != v.shape]
        if mismatch or not renamed:
            raise CompressError("the teacher's backbone does not fit the YOLO-layout student (%s)"
                                % (mismatch[0] if mismatch else "no shared weights"),
                                hint="the student copies the unpruned port's MobileNetV2; give the port as teacher")
        self.load_state_dict(renamed, strict=False)
        return self

    def levels(self, x: torch.Tensor) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """(box distances before softplus, class logits) per level, each ``(N, k, H, W)``."""
        x = self.conv(x)
        c8 = x
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i == STRIDE8_BLOCK:
                c8 = x
        c16 = self.expand(x)
        c32 = self.down(c16)
        lat = [layer(c) for layer, c in zip(self.laterals, (c8, c16, c32))]
        p32 = lat[2]
        p16 = lat[1] + nn.functional.interpolate(p32, size=self.grid_sizes[1], mode="nearest")
        p8 = lat[0] + nn.functional.interpolate(p16, size=self.grid_sizes[0], mode="nearest")
        return [head(p) for head, p in zip(self.heads, (p8, p16, p32))]

    def raw(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Distances ``(N, A, 4)`` (left, top, right, bottom; input pixels) and class logits ``(N, A, C)``."""
        dists, logits = [], []
        for (box, cls), stride in zip(self.levels(x), self.strides):
            n = box.shape[0]
            dists.append(nn.functional.softplus(box).flatten(2).transpose(1, 2) * float(stride))
            logits.append(cls.reshape(n, self.num_classes, -1).transpose(1, 2))
        return torch.cat(dists, dim=1), torch.cat(logits, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The exported layout ``(N, 4 + C, A)``: cx, cy, w, h (input pixels), class probabilities."""
        dist, logits = self.raw(x)
        px, py = self.points[:, 0], self.points[:, 1]
        left, top, right, bottom = dist.unbind(-1)
        cx, cy = px + (right - left) / 2, py + (bottom - top) / 2
        box = torch.stack([cx, cy, left + right, top + bottom], dim=1)
        return torch.cat([box, torch.sigmoid(logits).transpose(1, 2)], dim=1)


def anchor_points(grid_sizes: Sequence[Tuple[int, int]], strides: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Cell centres ``(A, 2)`` (x, y input pixels) level by level, row by row, and each one's stride ``(A,)``."""
    points, steps = [], []
    for (h, w), s in zip(grid_sizes, strides):
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                indexing="ij")
        points.append(torch.stack([(xs.flatten() + 0.5) * s, (ys.flatten() + 0.5) * s], dim=1))
        steps.append(torch.full((h * w,), float(s)))
    return torch.cat(points), torch.cat(steps)


def boxes_from_distances(points: torch.Tensor, dist: torch.Tensor) -> torch.Tensor:
    """``x1, y1, x2, y2`` ``(..., A, 4)`` from the points ``(A, 2)`` and distances ``(..., A, 4)``."""
    return torch.cat([points - dist[..., :2], points + dist[..., 2:]], dim=-1)


def yolo_student_from_state(state: Dict[str, Any], image_size: int, channels: int = 64) -> YoloStudent:
    """Rebuild a student from its plain state dict (``student.pt``), in eval mode; the class count is the head's."""
    num_classes = int(state["heads.0.cls.weight"].shape[0]) if "heads.0.cls.weight" in state else 1
    model = YoloStudent(image_size, num_classes, channels)
    try:
        model.load_state_dict(dict(state), strict=True)
    except RuntimeError as err:
        raise CompressError("these weights are not a YOLO-layout student's at %d px with %d channels: %s"
                            % (image_size, channels, str(err).splitlines()[0]),
                            hint="give the student.pt of a student.layout: yolov8 run and its input size") from None
    return model.eval()


def reference_detections(model: YoloStudent, x: torch.Tensor, frames_hw: Sequence[Tuple[int, int]],
                         score_threshold: float, iou_threshold: float, max_detections: int = 300) -> List[Any]:
    """The model's own decode (the reference for its exported ONNX): per image, class-aware greedy NMS over the
    sides read straight from the distances, stretched back to each frame, clipped; :class:`Detections` in frame
    pixels."""
    from jetforge.vision.boxes import nms
    from jetforge.vision.detections import Detections

    model.eval()
    with torch.no_grad():
        dist, logits = model.raw(x)
        boxes = boxes_from_distances(model.points, dist).numpy()  # float32, as the model computes (and ranks)
        probs = torch.sigmoid(logits).numpy()
    found = []
    for b, p, (h, w) in zip(boxes, probs, frames_hw):
        classes = p.argmax(axis=1)
        scores = p[np.arange(len(p)), classes]
        keep = scores > score_threshold
        b, scores, classes = b[keep], scores[keep], classes[keep]
        chosen = nms(b, scores, iou_threshold, None, max_detections, classes=classes)
        scale = np.array([w / model.image_size, h / model.image_size] * 2)
        out = np.clip(b[chosen] * scale, 0, [w, h, w, h])
        area = (out[:, 2] - out[:, 0]) * (out[:, 3] - out[:, 1])
        kept = area > 0
        found.append(Detections(out[kept].astype(np.float32), scores[chosen][kept].astype(np.float32),
                                classes[chosen][kept].astype(np.int64)))
    return found


__all__ = ["DEFAULT_IMAGE_SIZE", "YoloStudent", "anchor_points", "boxes_from_distances", "reference_detections",
           "yolo_student_from_state"]
