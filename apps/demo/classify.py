"""The classification pipeline of ``jetforge demo``: source -> preprocess -> infer -> top-k -> overlay -> sinks.

Every stage is timed per frame (decode, preprocess, infer, postprocess, encode; the
overlay drawing counts as postprocess) and summarised with
:mod:`jetforge.runtime.measure`, so the printed FPS and latency percentiles are the
measured ones.  The backend is reported as the session states it (e.g.
"ONNX Runtime 1.32.0 CPUExecutionProvider, 2 threads").  Torch-free.
"""

import datetime
import logging
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

import jetforge
from jetforge.errors import ModelError
from jetforge.fileio import check_not_input, sha256_file, write_json_atomic
from jetforge.runtime.measure import StageTimer, fps as frames_per_second, latency_stats, memory_info, reset_peak_rss
from jetforge.runtime.preprocess import IMAGENET_TORCHVISION, Preprocess
from jetforge.runtime.session import Session

log = logging.getLogger(__name__)

STAGES = ("decode", "preprocess", "infer", "postprocess", "encode")
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
        top = np.argpartition(-probs, k - 1)[:k]
        top = top[np.argsort(-probs[top], kind="stable")]
        return [Prediction(int(i), self.label(int(i)), float(probs[i])) for i in top]

    def label(self, index: int) -> str:
        return self.labels[index] if 0 <= index < len(self.labels) else "class %d" % index


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - np.max(x))
    return e / e.sum()


def draw_overlay(image: np.ndarray, predictions: Sequence[Prediction], fps: Optional[float], backend: str,
                 preprocess: Optional[Preprocess] = None) -> None:
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
    scale = min(1.2, max(0.4, w / 1000.0))
    thick = 1 if scale < 0.8 else 2
    font = cv2.FONT_HERSHEY_SIMPLEX
    line_h = int(32 * scale) + 4
    lines = ["%d. %s  %.0f%%" % (i + 1, p.label, 100.0 * p.prob) for i, p in enumerate(predictions[:OVERLAY_TOP_K])]
    width = max([cv2.getTextSize(t, font, scale, thick)[0][0] for t in lines] + [1]) + 16
    _shade(image, 0, 0, min(w, width), min(h, line_h * len(lines) + 10))
    for i, text in enumerate(lines):
        colour = (80, 255, 80) if i == 0 else (235, 235, 235)
        cv2.putText(image, text, (8, line_h * (i + 1)), font, scale, colour, thick, cv2.LINE_AA)
    status = ("%.1f FPS | %s" % (fps, backend)) if fps else backend
    small = scale * 0.8
    _shade(image, 0, h - line_h - 4, w, h)
    cv2.putText(image, status, (8, h - 10), font, small, (255, 255, 255), 1, cv2.LINE_AA)


def _shade(image: np.ndarray, x0: int, y0: int, x1: int, y1: int) -> None:
    region = image[max(0, y0):y1, max(0, x0):x1]
    region //= 3  # darken to a third: text stays readable on any background


@dataclass
class DemoOutputs:
    out_dir: Path
    video: Optional[Path]
    events: Path
    metrics: Path

    @classmethod
    def in_dir(cls, out_dir: Path, write_video: bool) -> "DemoOutputs":
        return cls(out_dir=out_dir, video=out_dir / "annotated.mp4" if write_video else None,
                   events=out_dir / "events.jsonl", metrics=out_dir / "metrics.json")


@dataclass
class DemoResult:
    metrics: Dict[str, Any]
    outputs: DemoOutputs
    top1_counts: List[Tuple[str, int]] = field(default_factory=list)


def resolve_model_contract(session: Session) -> Tuple[Preprocess, List[str], List[str]]:
    """(preprocess, labels, notes) for a classification session, from its sidecar or ImageNet defaults."""
    from jetforge.apps.labels import load_labels

    notes: List[str] = []
    sidecar = session.sidecar
    if len(session.inputs) != 1 or len(session.outputs) < 1:
        raise ModelError("the classify demo needs a model with one image input, %s has %d inputs"
                         % (session.path.name, len(session.inputs)))
    classes = session.outputs[0].shape[-1] if session.outputs[0].shape else None
    if sidecar is not None:
        if sidecar.task != "classify":
            raise ModelError("%s is a %r model; the demo classifies images" % (session.path.name, sidecar.task),
                             hint="give a classification model (sidecar task \"classify\")")
        preprocess = sidecar.preprocess or IMAGENET_TORCHVISION
        labels = list(sidecar.labels)
        if sidecar.preprocess is None:
            notes.append("sidecar has no preprocessing; assuming torchvision ImageNet preprocessing")
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


def machine_info() -> Dict[str, Any]:
    """Where the numbers were measured."""
    from jetforge.runtime.session import default_threads

    info: Dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "python": platform.python_version(), "cpu_cores_usable": default_threads()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/device-tree/model", "rb") as f:
            info["board"] = f.read().rstrip(b"\x00").decode("ascii", "replace")
    except OSError:
        pass
    try:
        import cv2

        info["opencv"] = cv2.__version__
    except ImportError:  # pragma: no cover - a core dependency
        pass
    info["numpy"] = np.__version__
    return info


def run_classify(source: Any, session: Session, out_dir: Path, *, max_frames: Optional[int] = None,
                 write_video: bool = True, progress: bool = True, model_label: str = "",
                 model_exported: bool = False, notes: Sequence[str] = ()) -> DemoResult:
    """Classify every frame of ``source`` (up to ``max_frames``) and write video, events and metrics."""
    from jetforge.apps.progress import progress_bar
    from jetforge.apps.video import JsonLinesSink, Mp4Sink

    preprocess, labels, contract_notes = resolve_model_contract(session)
    notes = list(notes) + contract_notes
    head = ClassifyHead(labels, EVENT_TOP_K)
    input_name = session.inputs[0].name
    output_name = session.outputs[0].name
    backend_text = session.describe()
    outputs = DemoOutputs.in_dir(Path(out_dir), write_video)
    inputs = [getattr(source, "path", None), session.path]
    for target in (outputs.video, outputs.events, outputs.metrics):
        if target is not None:
            check_not_input(target, inputs)

    # One warm-up run outside the measurement: ORT allocates its arena on the first call.
    session.infer({input_name: np.zeros((1,) + preprocess.input_shape, dtype=np.dtype(preprocess.dtype))})
    peak_scope = "pipeline" if reset_peak_rss() else "process"

    limit = source.frame_count if source.frame_count is not None else None
    if max_frames is not None:
        limit = max_frames if limit is None else min(limit, max_frames)
    timer = StageTimer()
    e2e: List[float] = []
    counts: Dict[str, int] = {}
    fps_shown: Optional[float] = None
    frames = 0
    video_sink = Mp4Sink(outputs.video, source.fps or 25.0) if outputs.video is not None else None
    event_sink = JsonLinesSink(outputs.events)
    ticks = range(limit) if limit is not None else _forever()
    try:
        t_start = time.perf_counter()
        for _ in progress_bar(ticks, desc="demo", unit="frame", total=limit, enabled=progress):
            t0 = time.perf_counter()
            frame = source.read()
            t1 = time.perf_counter()
            if frame is None:
                break
            tensor = preprocess.apply(frame.image)[None]
            t2 = time.perf_counter()
            logits = session.infer({input_name: tensor})[output_name]
            t3 = time.perf_counter()
            preds = head(logits[0])
            image = frame.image
            if video_sink is not None:
                draw_overlay(image, preds, fps_shown, backend_text, preprocess)
            t4 = time.perf_counter()
            if video_sink is not None:
                video_sink.write(image)
            event_sink.write({"frame": frame.index, "t": round(frame.timestamp, 4),
                              "top": [p.to_dict() for p in preds],
                              "latency_ms": round((t4 - t0) * 1000.0, 3)})
            t5 = time.perf_counter()
            for name, dt in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                timer.add(name, dt)
            e2e.append(t5 - t0)
            frames += 1
            counts[preds[0].label] = counts.get(preds[0].label, 0) + 1
            # The overlay shows a smoothed running FPS of the frames before this one.
            inst = 1.0 / max(t5 - t0, 1e-9)
            fps_shown = inst if fps_shown is None else 0.9 * fps_shown + 0.1 * inst
        wall = time.perf_counter() - t_start
    except BaseException as err:
        if video_sink is not None:
            video_sink.abort(err)
        event_sink.abort(err)
        raise
    if video_sink is not None:
        video_sink.close()
    event_sink.close()
    if frames == 0:
        raise ModelError("no frames were processed")  # pragma: no cover - a source always has a first frame

    memory = memory_info().to_dict()
    memory["scope"] = peak_scope
    top1 = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    stats = timer.to_dict()
    metrics: Dict[str, Any] = {
        "jetforge_version": jetforge.__version__,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "task": "classify",
        "frames": frames,
        "wall_s": wall,
        "fps": frames_per_second(frames, wall),
        "latency_ms": {"end_to_end": latency_stats(e2e).to_dict(), "stages": {s: stats[s] for s in STAGES}},
        "memory": memory,
        "backend": session.info(),
        "model": {"path": str(session.path), "name": model_label or (session.sidecar.model_name if session.sidecar
                                                                    else session.path.stem),
                  "sha256": session.sidecar.content_sha256 if session.sidecar and session.sidecar.content_sha256
                  else sha256_file(session.path),
                  "inputs": [t.to_dict() for t in session.inputs], "outputs": [t.to_dict() for t in session.outputs],
                  "preprocess": preprocess.to_dict(), "exported_in_this_run": model_exported},
        "clip": dict(source.info(), name=Path(str(source.uri)).name),
        "machine": machine_info(),
        "warmup_runs": 1,
        "top1_counts": [[label, n] for label, n in top1[:10]],
        "outputs": {"video": str(outputs.video) if outputs.video else None, "events": str(outputs.events),
                    "metrics": str(outputs.metrics)},
        "notes": notes,
    }
    write_json_atomic(outputs.metrics, metrics)
    return DemoResult(metrics=metrics, outputs=outputs, top1_counts=top1)


def _forever():
    i = 0
    while True:
        yield i
        i += 1


__all__ = ["ClassifyHead", "DemoOutputs", "DemoResult", "Prediction", "draw_overlay",
           "machine_info", "resolve_model_contract", "run_classify", "softmax"]
