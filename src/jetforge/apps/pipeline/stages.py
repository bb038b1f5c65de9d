"""The typed pieces a pipeline is made of: the per-frame :class:`Item`, the :class:`Task` interface,
and reusable stages (a session-backed batched model; the fused preprocessing is the image input kind's).

A task plugs four callables into the pipeline; each is usable on its own, outside it:

====================  ========================================================  =====================
stage                 signature                                                 runs
====================  ========================================================  =====================
``preprocess``        ``(Frame) -> input``  (a tensor without batch axis, or    preprocess thread
                      anything the model stage accepts)
``infer``             ``(List[input]) -> List[output]``  one output per input   infer thread, batched
                                                                                across streams
``postprocess``       ``(Item) -> Dict`` the frame's event (``item.output`` is  postprocess thread, in
                      the model output; may keep per-stream state)              frame order per stream
``annotate``          ``(image, Item, status) -> None`` draws in place          sink thread
====================  ========================================================  =====================

Torch-free; OpenCV is imported inside the functions that use it.
"""

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.video.sources.base import Frame
from jetforge.runtime.inputs.image import FusedImage

log = logging.getLogger(__name__)


@dataclass
class Item:
    """One frame on its way through the pipeline, with what each stage made of it and when."""

    frame: Frame
    stream: int = 0
    t_start: float = 0.0  # perf_counter when its decode began
    t_decoded: float = 0.0  # perf_counter when the frame was captured/decoded
    input: Any = None  # what preprocess made of it
    output: Any = None  # the model's output for this frame
    event: Optional[Dict[str, Any]] = None  # what postprocess made of it
    times: Dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    cpu: Dict[str, float] = field(default_factory=dict)  # stage -> CPU seconds of the stage's thread
    t_result: float = 0.0  # perf_counter when postprocess finished


@dataclass(frozen=True)
class Status:
    """What the overlay shows about the run so far."""

    fps: float = 0.0
    latency_ms: float = 0.0
    frames: int = 0
    dropped: int = 0
    errors: int = 0
    label: str = ""


Outputs = Dict[str, np.ndarray]


@dataclass
class GpuModel:
    """The part of a task the GPU path (``jetforge app NAME --decode gpu``) runs: ``session`` fed whole frames
    preprocessed on the GPU by ``contract`` (the model's input contract, the CPU path's own), and
    ``to_outputs(batch outputs, frames) -> item.output per frame`` (what the task's ``postprocess`` reads; None for
    a frame the task skips).

    ``tiles``: the ``(T, 4)`` tile rects (fractions ``y0, x0, y1, x1``, :func:`jetforge.vision.tiles.tile_rects`) the
    model also sees of every frame (``--detector-tiles``), or None.  With tiles a batch of ``n`` frames padded to
    ``padded`` is ``padded * (1 + T)`` input rows in blocks: rows ``[0, padded)`` the whole frames, block ``1 + k``
    (rows ``[(1 + k) * padded, (2 + k) * padded)``) tile ``k`` of each frame, frame ``i`` at row ``i`` of each block
    (:meth:`row`): one block is one preprocessing launch of one size, and ``to_outputs`` merges each frame's rows."""

    session: Any
    contract: Any
    to_outputs: Callable[[Outputs, List[Any]], List[Any]]
    tiles: Optional[np.ndarray] = None
    device_head: Optional["DeviceHead"] = None

    @property
    def input_name(self) -> str:
        return str(self.session.inputs[0].name)

    @property
    def rows_per_frame(self) -> int:
        """Input rows a frame takes: 1, or 1 + its tiles."""
        return 1 + (0 if self.tiles is None else len(self.tiles))

    @staticmethod
    def row(block: int, frame: int, padded: int) -> int:
        """The input row of ``frame``'s ``block`` (0: the whole frame, 1 + k: tile k) in a batch padded to ``padded``."""
        return block * padded + frame

    @staticmethod
    def block_rows(n: int, padded: int, blocks: int) -> List[int]:
        """The rows of ``n`` frames' ``blocks`` in a batch padded to ``padded``, block-major: entry ``b * n + i`` is
        frame ``i``'s block ``b`` (the order a task's merge of tiles reads)."""
        return [GpuModel.row(b, i, padded) for b in range(blocks) for i in range(n)]


@dataclass(frozen=True)
class DeviceHead:
    """A model's raw outputs decoded where they are, on the GPU, instead of copied back whole (the SSD detector's
    boxes: :class:`jetforge.vision.ssd_gpu.QueuedSsdDecoder`).  Used by the GPU path when its session hands out
    device outputs (TensorRT's ``submit_device(on_device_outputs=)``); other sessions get ``to_outputs``.

    ``open(max_rows)``: a decoder for batches of up to that many output rows, with ``launch_outputs(outputs, rows,
    stream) -> result()`` and ``close()``; or None when this session's outputs cannot be read in place (their
    dtype).  ``from_decoded(result, frames)``: what ``result()`` gave for the frames' rows -> item.output per frame,
    as ``to_outputs`` gives it.  ``kind``: said in the path's description."""

    open: Callable[[int], Any]
    from_decoded: Callable[[Any, List[Any]], List[Any]]
    kind: str


def split_per_frame(outputs: Outputs, frames: List[Any]) -> List[Dict[str, np.ndarray]]:
    """Row i of every output for frame i: what a task whose ``infer`` is a :class:`SessionModel` reads."""
    return [{name: value[i] for name, value in outputs.items()} for i in range(len(frames))]


class Task:
    """A vision task as pipeline stages; subclass it and override what differs.

    ``name`` names the task in events and metrics, ``model_label`` says honestly what
    computes the results (shown on the video and in the summary).
    """

    name = "task"
    model_label = ""
    status_label = ""  # short text for the video's status bar (default: model_label)

    def preprocess(self, frame: Frame) -> Any:
        return frame.image

    def infer(self, inputs: List[Any]) -> List[Any]:
        raise NotImplementedError

    def postprocess(self, item: Item) -> Dict[str, Any]:
        return {}

    def annotate(self, image: np.ndarray, item: Item, status: Status) -> None:
        draw_status(image, status)

    def warmup(self, frame: Frame) -> None:
        """Run the stages once outside the measurement (allocators, lazy initialisation)."""
        self.infer([self.preprocess(frame)])

    def gpu_model(self) -> Optional[GpuModel]:
        """How this task runs on the GPU path (``--decode gpu``), or None (the default): it has no GPU path.

        The GPU path batches frames from every stream, preprocesses them on the GPU by the returned contract and
        feeds the session; the returned ``to_outputs`` turns a batch's raw outputs into this task's ``item.output``
        per frame, after which ``postprocess`` runs as on the CPU path.  A configuration the GPU path cannot honour
        raises a ConfigError naming the fix."""
        return None

    def summary(self) -> Dict[str, Any]:
        """Task-level results for metrics.json (counts, top classes, ...)."""
        return {}

    def info(self) -> Dict[str, Any]:
        """What computed the results (model, backend) for metrics.json."""
        return {"task": self.name, "model": self.model_label}


FusedPreprocess = FusedImage
"""The image input kind's fused OpenCV path (:meth:`jetforge.runtime.inputs.Preprocess.fused`), under its old name."""


class SessionModel:
    """A :class:`~jetforge.runtime.session.Session` as the batched ``infer`` stage of a task.

    ``inputs`` (tensors of one frame each) are stacked into one batch when the model's
    batch axis is dynamic, else run one by one; the outputs are split back per frame as
    ``{output name: array without batch axis}``.

    Safe to call from several threads (the pipeline's ``infer_workers``): ONNX Runtime's
    ``InferenceSession.run`` is thread-safe and runs concurrently; other backends hold one
    execution context and device buffers per session, so their calls are serialised by a lock.
    The session's ``last_timing`` is not per call when shared; the pipeline times each call itself.
    """

    CONCURRENT_BACKENDS = ("onnxruntime",)

    def __init__(self, session: Any) -> None:
        self.session = session
        if len(session.inputs) != 1:
            from jetforge.errors import ModelError

            raise ModelError("%s has %d inputs; the pipeline feeds one image tensor"
                             % (session.path.name, len(session.inputs)))
        self.input_name = session.inputs[0].name
        first = session.inputs[0].shape[0] if session.inputs[0].shape else 1
        self.max_batch = first if isinstance(first, int) and first > 0 else None  # None: dynamic
        concurrent = getattr(session, "name", "") in self.CONCURRENT_BACKENDS
        self._lock: Optional[Any] = None if concurrent else threading.Lock()

    def __call__(self, inputs: Sequence[np.ndarray]) -> List[Dict[str, np.ndarray]]:
        if not inputs:
            return []
        if self.max_batch is not None and len(inputs) > self.max_batch:
            out: List[Dict[str, np.ndarray]] = []
            for i in range(0, len(inputs), self.max_batch):
                out += self(inputs[i:i + self.max_batch])
            return out
        batch = np.stack(inputs) if len(inputs) > 1 else np.asarray(inputs[0])[None]
        if self._lock is None:
            outputs = self.session.infer({self.input_name: batch})
        else:
            with self._lock:
                outputs = self.session.infer({self.input_name: batch})
        return [{name: value[i] for name, value in outputs.items()} for i in range(len(inputs))]


def track_colour(track_id: int) -> Tuple[int, int, int]:
    """A stable, bright colour per track id, so one person keeps one colour for the whole video."""
    rng = np.random.default_rng(track_id * 7919 + 17)
    c = rng.integers(60, 256, size=3)
    return int(c[0]), int(c[1]), int(c[2])


FONT_REFERENCE_WIDTH = 640  # a frame this wide draws overlay text at the size its caller names


def overlay_scale(width: int, base: float = 0.6) -> float:
    """The font scale for a frame ``width`` pixels wide: ``base`` at 640 px, in proportion to the width (0.25..1.2),
    so that text takes the same share of a 160 px thumbnail as of a 1920 px frame."""
    return min(1.2, max(0.25, base * width / float(FONT_REFERENCE_WIDTH)))


def fit_scale(text: str, width: int, scale: float, thickness: int = 1) -> float:
    """``scale``, made smaller where ``text`` would not fit ``width`` pixels with its margins (never cut off)."""
    import cv2

    pad = text_padding(scale)
    text_w = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)[0][0]
    room = max(1, width - 2 * pad)
    return scale * room / float(text_w) if text_w > room else scale


def text_padding(scale: float) -> int:
    return max(2, int(round(6 * scale)))


def draw_banner(image: np.ndarray, text: str, base: float = 0.6) -> Tuple[int, int, int, int]:
    """One line of text on a darkened strip at the top left, scaled with the frame and shrunk to fit its width;
    returns the strip (x0, y0, x1, y1), always inside the frame."""
    import cv2

    h, w = image.shape[:2]
    scale = fit_scale(text, w, overlay_scale(w, base))
    (text_w, text_h), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    pad = text_padding(scale)
    box = (0, 0, min(w, text_w + 2 * pad), min(h, text_h + baseline + 2 * pad))
    region = image[box[1]:box[3], box[0]:box[2]]
    region //= 3
    cv2.putText(image, text, (pad, pad + text_h), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1, cv2.LINE_AA)
    return box


def draw_label(image: np.ndarray, text: str, org: Tuple[int, int], colour: Tuple[int, int, int],
               scale: float = 0.45) -> Tuple[int, int, int, int]:
    """Text with a dark outline, readable on any background; draws in place.  ``scale`` is the size on a 640 px
    frame (in proportion on others); the text is shrunk to the frame's width and moved inside it where ``org``
    (its bottom left) would put it over an edge.  Returns the label's box (x0, y0, x1, y1)."""
    import cv2

    h, w = image.shape[:2]
    scale = fit_scale(text, w, overlay_scale(w, scale), 3)
    (text_w, text_h), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 3)
    x = min(max(1, int(org[0])), max(1, w - text_w - 1))
    y = min(max(text_h + 1, int(org[1])), max(text_h + 1, h - baseline - 1))
    cv2.putText(image, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(image, text, (x, y), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, 1, cv2.LINE_AA)
    return x - 1, y - text_h - 1, x + text_w + 1, y + baseline + 1


def draw_status(image: np.ndarray, status: Status) -> None:
    """The status bar along the bottom: FPS, latency, frames, drops and errors, and what runs the model; the text
    scales with the frame and shrinks to fit its width (on a small frame the model's name goes first)."""
    import cv2

    h, w = image.shape[:2]
    scale = overlay_scale(w, 0.45)
    parts = ["%.1f FPS" % status.fps if status.fps else "-- FPS"]
    if status.latency_ms:
        parts.append("latency %.0f ms" % status.latency_ms)
    parts.append("frame %d" % status.frames)
    if status.dropped:
        parts.append("dropped %d" % status.dropped)
    if status.errors:
        parts.append("errors %d" % status.errors)
    text = " | ".join(parts + ([status.label] if status.label else []))
    if status.label and fit_scale(text, w, scale) < 0.7 * scale:  # too small to read: the numbers matter more
        text = " | ".join(parts)
    scale = fit_scale(text, w, scale)
    (_, text_h), baseline = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
    pad = text_padding(scale)
    bar = min(h, text_h + baseline + 2 * pad)
    region = image[h - bar:h, :]
    region //= 3
    cv2.putText(image, text, (pad, h - pad - baseline), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), 1,
                cv2.LINE_AA)


__all__ = ["FusedPreprocess", "DeviceHead", "GpuModel", "Item", "SessionModel", "Status", "Task", "draw_banner", "draw_label",
           "draw_status", "fit_scale", "overlay_scale", "split_per_frame"]
