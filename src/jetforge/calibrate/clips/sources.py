"""Clips for calibrating and evaluating clip models (sidecar input kind ``clip``), cut from real videos.

A clip model's input is a window of T frames (the ``clip`` input contract of :mod:`jetforge.runtime.inputs.clip`:
``window``, the frame rate it was trained at ``fps_trained``, ``stride_trained``, crop size, colour and
normalisation), so its calibration and evaluation samples are windows, not frames.  Two ways to cut them:

* ``sliding`` -- per video, windows of T frames sampled at the model's rate (every ``round(fps / fps_trained)``-th
  frame, the action app's sampling), one window every ``stride`` sampled frames (the contract's ``stride_trained``,
  else non-overlapping windows; the caller may set it).  Every frame is cut at the whole frame at the crop's
  aspect (centred) by the contract's own ``crop`` and ``normalize``: a scene-level clip.
* ``per-track`` -- people are detected and tracked over the video and every track gives windows of T sampled
  frames in which it has a box on each.  A window is cut by ``contract.clip(frames, boxes)``, the call the action
  app makes at run time (region = the union of the boxes, enlarged), so calibration sees the crops the app feeds.
  The tracker is a factory of ``(index, frame) -> [(track_id, box), ...]`` functions, fed every decoded frame as
  the app feeds its tracker: the action app's, :func:`jetforge.vision.person_tracks.person_tracker_factory` over a
  person detector, or :func:`replay_tracks` for tracks cached earlier.  Windows
  where a track has a gap are left out (the app interpolates short gaps; that code lives in the app and is not
  copied here).

Selection is deterministic: the windows of a video are listed in (track, start) order and ``n`` are taken evenly
spread (:func:`~jetforge.calibrate.sources.evenly_spaced`), at most ``max_per_track`` per track; the budget is split
across videos as for images (:func:`~jetforge.calibrate.sources.allocate`).

A video may name a frame range, ``video.mp4@START:STOP`` (STOP excluded; either may be empty), e.g. calibration on
one segment and evaluation on a later one.  Every clip keeps its video and frame indices, so the held-out check
(:func:`clip_overlap`) is exact: how many evaluation clips overlap a calibration clip in time, and how far apart the
two sets are.  :func:`split_shared_videos` cuts a video given to both into a calibration part and a later,
evaluation part with a guard gap of one clip span.
"""

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate.quality import QualityTracker
from jetforge.calibrate.sources import Samples, VideoFile, allocate, evenly_spaced, open_source
from jetforge.errors import CalibrationError
from jetforge.fileio import expand_user
from jetforge.optional import require

log = logging.getLogger(__name__)

CLIP_MODES = ("sliding", "per-track")
_RANGE = re.compile(r"^(?P<path>.+)@(?P<start>\d*):(?P<stop>\d*)$")

Box = Sequence[float]
TrackFn = Callable[[int, np.ndarray], Sequence[Tuple[int, Box]]]
TrackerFactory = Callable[[], TrackFn]
"""Makes one tracker per video: a function from each decoded frame (its index, the BGR image), in order, to that
frame's tracks ``[(track id, (x1, y1, x2, y2)), ...]``."""


@dataclass(frozen=True)
class Window:
    """One clip to cut: its decoded-frame indices and, per track, the track's box on each (x1, y1, x2, y2)."""

    frames: Tuple[int, ...]
    boxes: Optional[np.ndarray] = None
    track: Optional[int] = None


@dataclass
class ClipSample:
    """A cut clip: the model input of one clip (what ``contract.clip`` returns), the uint8 crop of its middle
    frame (for the data-quality checks and perceptual hashes), and where it came from."""

    tensor: np.ndarray
    keyframe: np.ndarray
    video: str
    frames: Tuple[int, ...]
    track: Optional[int] = None


def clip_name(clip: ClipSample) -> str:
    """``video#first_frame`` (sliding) or ``video#first_frame:t<track>`` (per track): how labels name clips."""
    return "%s#%d" % (clip.video, clip.frames[0]) + ("" if clip.track is None else ":t%d" % clip.track)


def parse_video_range(item: Union[str, Path]) -> Tuple[Path, int, Optional[int]]:
    """``video.mp4@START:STOP`` -> (path, start, stop or None); a plain path (or one that exists) -> (path, 0, None)."""
    text = str(item)
    path = expand_user(text, "calibration data")
    match = None if path.exists() else _RANGE.match(text)
    if match is None:
        return path, 0, None
    start = int(match.group("start") or 0)
    stop = int(match.group("stop")) if match.group("stop") else None
    if stop is not None and stop <= start:
        raise CalibrationError("frame range %s is empty (STOP must be after START)" % text,
                               hint="write VIDEO@START:STOP with START < STOP, e.g. vtest.avi@0:400")
    return expand_user(match.group("path"), "calibration data"), start, stop


def frame_step(fps: float, contract: Any) -> int:
    """Every how many decoded frames one is sampled: the action app's rule, round(fps / fps_trained), at least 1."""
    return max(1, int(round((fps or contract.fps_trained) / contract.fps_trained)))


def whole_frame_region(height: int, width: int, contract: Any) -> Tuple[int, int, int, int]:
    """The largest region at the crop's aspect centred in a ``height`` x ``width`` frame (a sliding clip's crop)."""
    aspect = contract.crop_w / float(contract.crop_h)
    w, h = (height * aspect, float(height)) if width / float(height) > aspect else (float(width), width / aspect)
    x0, y0 = int(round((width - w) / 2.0)), int(round((height - h) / 2.0))
    return (x0, y0, x0 + int(round(w)), y0 + int(round(h)))


def model_frame(contract: Any, bgr: np.ndarray) -> np.ndarray:
    """A decoded frame as the contract's crops take it: grey for a grey contract, else the BGR frame itself."""
    if getattr(contract, "color", "gray") == "gray" and bgr.ndim == 3:
        cv2 = require("cv2", "cutting clips from video")
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    return bgr


def cut_clip(contract: Any, frames: Sequence[np.ndarray], window: Window) -> Tuple[np.ndarray, np.ndarray]:
    """(model input of one clip, uint8 crop of its middle frame) for ``window`` over its decoded ``frames``."""
    mid = len(frames) // 2
    if window.boxes is None:
        h, w = frames[0].shape[:2]
        region = whole_frame_region(h, w, contract)
        crops = np.stack([contract.crop(f, region) for f in frames])
        return contract.normalize(crops), crops[mid]
    tensor = contract.clip(frames, window.boxes)  # the action app's own call
    return tensor, contract.crop(frames[mid], contract.region(window.boxes))


def spaced_starts(valid: Sequence[int], stride: int) -> List[int]:
    """From sorted window starts, keep the first and then each one at least ``stride`` after the last kept."""
    kept: List[int] = []
    for p in valid:
        if not kept or p - kept[-1] >= stride:
            kept.append(p)
    return kept


class ClipVideo:
    """The clips of one video (or of a frame range of it) for one clip contract; a calibration source."""

    kind = "clips"

    def __init__(self, path: Path, contract: Any, mode: str = "sliding", stride: Optional[int] = None,
                 start: int = 0, stop: Optional[int] = None, tracker: Optional[TrackerFactory] = None,
                 max_per_track: Optional[int] = None, progress: bool = False) -> None:
        if mode not in CLIP_MODES:
            raise CalibrationError("unknown clip mode %r" % mode, hint="use %s" % " or ".join(CLIP_MODES))
        if mode == "per-track" and tracker is None:
            raise CalibrationError("per-track clips need a person tracker",
                                   hint="use `jetforge calibrate --clips per-track` (it brings the apps' detector "
                                        "and tracker) or pass tracker= to calibrate()")
        self.video = VideoFile(path)  # opens and decodes one frame: an undecodable file fails here
        cv2 = require("cv2", "cutting clips from video")
        cap = self.video._open()
        try:
            fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        finally:
            cap.release()
        self.path, self.contract, self.mode, self.tracker = path, contract, mode, tracker
        self.fps = fps
        self.step = frame_step(fps, contract)
        self.stride = int(stride or contract.stride_trained or contract.window)
        if self.stride < 1:
            raise CalibrationError("the clip stride must be at least 1, got %d" % self.stride)
        self.start = int(start)
        self.stop = min(int(stop), self.video.available) if stop is not None else self.video.available
        if self.start >= self.stop:
            raise CalibrationError("frame range %d:%s of %s is outside the video (%d frames)"
                                   % (start, "" if stop is None else stop, path, self.video.available),
                                   hint="give a START below the video's frame count")
        self.max_per_track = max_per_track
        self.progress = progress
        self._windows: Optional[List[Window]] = None

    @property
    def sampled(self) -> List[int]:
        """The decoded-frame indices the model sees (index % step == 0, as the app samples)."""
        first = -(-self.start // self.step) * self.step
        return list(range(first, self.stop, self.step))

    @property
    def span_frames(self) -> int:
        """Decoded frames one clip spans, first to last inclusive."""
        return (int(self.contract.window) - 1) * self.step + 1

    @property
    def available(self) -> int:
        return len(self.windows())

    def windows(self) -> List[Window]:
        """Every clip this video gives, in (track, start) order (per-track: runs the tracker once)."""
        if self._windows is None:
            self._windows = self._sliding() if self.mode == "sliding" else self._per_track()
        return self._windows

    def _sliding(self) -> List[Window]:
        s, t = self.sampled, int(self.contract.window)
        return [Window(tuple(s[i:i + t])) for i in range(0, len(s) - t + 1, self.stride)]

    def _per_track(self) -> List[Window]:
        t = int(self.contract.window)
        sampled = self.sampled
        out: List[Window] = []
        for tid, boxes in sorted(self.track_boxes().items()):
            valid = [p for p in sorted(boxes) if all(p + i in boxes for i in range(t))]
            starts = spaced_starts(valid, self.stride)
            if self.max_per_track is not None:
                starts = [starts[i] for i in evenly_spaced(len(starts), self.max_per_track)]
            out.extend(Window(tuple(sampled[p:p + t]), np.array([boxes[p + i] for i in range(t)], np.float64), tid)
                       for p in starts)
        return out

    def track_boxes(self) -> Dict[int, Dict[int, np.ndarray]]:
        """{track id: {position on the sampled time line: box}}: the tracker sees every frame of the range."""
        track = self.tracker()  # type: ignore[misc]  (the constructor refused per-track without one)
        position = {f: i for i, f in enumerate(self.sampled)}
        found: Dict[int, Dict[int, np.ndarray]] = {}
        bar = _bar(self.stop - self.start, "tracking %s" % self.path.name, self.progress)
        try:
            for index, frame in self.video._frames_at(range(self.start, self.stop)):
                tracks = track(index, frame)
                if bar is not None:
                    bar.update(1)
                if index in position:
                    for tid, box in tracks:
                        found.setdefault(int(tid), {})[position[index]] = np.asarray(box, np.float64).reshape(4)
        finally:
            if bar is not None:
                bar.close()
        return found

    def choose(self, n: int) -> List[Window]:
        """``n`` windows evenly spread over :meth:`windows` (all when there are fewer)."""
        w = self.windows()
        return [w[i] for i in evenly_spaced(len(w), n)]

    def iterate(self, n: int) -> Iterator[Tuple[str, ClipSample]]:
        """Yield up to ``n`` (clip name, :class:`ClipSample`); the video is decoded once, in order."""
        pending = sorted(self.choose(n), key=lambda w: (w.frames[-1], w.track if w.track is not None else -1))
        needed = sorted({i for w in pending for i in w.frames})
        frames: Dict[int, np.ndarray] = {}
        for index, frame in self.video._frames_at(needed):
            frames[index] = model_frame(self.contract, frame)
            while pending and pending[0].frames[-1] <= index:
                yield from self._emit(pending.pop(0), frames)
            low = pending[0].frames[0] if pending else index + 1
            for old in [i for i in frames if i < low]:
                del frames[old]
        for w in pending:  # the decoder stopped early (a frame count that overstated the video)
            log.warning("%s: clip at frames %d-%d skipped: the video ended before its last frame",
                        self.path, w.frames[0], w.frames[-1])

    def _emit(self, window: Window, frames: Dict[int, np.ndarray]) -> Iterator[Tuple[str, ClipSample]]:
        if any(i not in frames for i in window.frames):
            log.warning("%s: clip at frames %d-%d skipped: a frame could not be decoded", self.path,
                        window.frames[0], window.frames[-1])
            return
        tensor, key = cut_clip(self.contract, [frames[i] for i in window.frames], window)
        sample = ClipSample(tensor, key, str(self.path), window.frames, window.track)
        yield clip_name(sample), sample

    def describe(self) -> Dict[str, Any]:
        return {"path": str(self.path), "kind": "clips (%s)" % self.mode, "available": self.available,
                "frames": [self.start, self.stop], "frame_step": self.step, "stride": self.stride,
                "video_fps": round(self.fps, 3)}


def replay_tracks(tracks: Dict[int, Sequence[Tuple[int, Box]]]) -> TrackerFactory:
    """A tracker factory that replays tracks found earlier (``{frame index: [(track id, box), ...]}``, e.g. a cached
    detector + tracker run), so clips can be cut along them without running a detector again."""
    def factory() -> TrackFn:
        return lambda index, frame: tracks.get(index, ())
    return factory


def _bar(total: int, desc: str, enabled: bool) -> Any:
    return require("tqdm").tqdm(total=total, unit="frame", desc=desc, leave=False) if enabled else None


def open_clip_videos(item: Union[str, Path], contract: Any, **options: Any) -> List[ClipVideo]:
    """The clip source(s) one ``--data``/``--eval`` item names: a video (optionally ``@START:STOP``), a folder of
    videos, or a .txt list of videos; images are refused (a clip model needs consecutive frames)."""
    path, start, stop = parse_video_range(item)
    sources = open_source(path)
    images = [s for s in sources if s.kind != "video"]
    if images:
        raise CalibrationError("%s holds images, but a clip model (input kind clip) needs video: consecutive frames "
                               "at the rate it was trained at" % images[0].path,
                               hint="give video files (or a folder of videos) to --data and --eval")
    return [ClipVideo(s.path, contract, start=start, stop=stop, **options) for s in sources]


def collect_clip_sources(data: Sequence[Union[str, Path]], contract: Any, max_clips: int = 500,
                         mode: str = "sliding", stride: Optional[int] = None,
                         tracker: Optional[TrackerFactory] = None, max_per_track: Optional[int] = None,
                         progress: bool = False) -> Samples:
    """Open every item and plan how many clips each video gives (``max_clips`` in all); iterate for the clips."""
    items = [data] if isinstance(data, (str, Path)) else list(data)
    if not items:
        raise CalibrationError("no clip data given", hint="pass --data VIDEO (repeatable)")
    if max_clips < 1:
        raise CalibrationError("the number of clips must be at least 1, got %d" % max_clips)
    videos: List[ClipVideo] = []
    for item in items:
        videos.extend(open_clip_videos(item, contract, mode=mode, stride=stride, tracker=tracker,
                                       max_per_track=max_per_track, progress=progress))
    available = [v.available for v in videos]
    if not sum(available):
        v = videos[0]
        what = "no track stays" if mode == "per-track" else "none of the videos is"
        raise CalibrationError(
            "%s long enough for one clip: a clip is %d frames at %.4g fps, i.e. %d decoded frames at %s's %.4g fps "
            "(frames %d-%d used)" % (what, contract.window, contract.fps_trained, v.span_frames, v.path.name, v.fps,
                                     v.start, v.stop),
            hint="give a longer video (or a wider @START:STOP range)" + (
                ", or --clips sliding" if mode == "per-track" else ""))
    return Samples(videos, allocate(available, max_clips))  # type: ignore[arg-type]


class PreparedClips:
    """The 'preprocess' of clip samples: the clip is already the model input (batches stack clips, as the app)."""

    kind = "clip"

    @staticmethod
    def apply(sample: ClipSample) -> np.ndarray:
        return sample.tensor


PREPARED_CLIPS = PreparedClips()


class ClipQualityTracker(QualityTracker):
    """The image data-quality checks and hashes on each clip's middle-frame crop; also keeps where clips came from."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.clips: List[Tuple[str, Tuple[int, ...]]] = []

    def update(self, name: str, image: Any) -> None:
        if isinstance(image, ClipSample):
            self.clips.append((image.video, image.frames))
            image = image.keyframe
        super().update(name, image)


def clip_bytes(contract: Any) -> int:
    """Bytes of one prepared float32 clip (the evaluation's memory budget counts these)."""
    return int(4 * np.prod(contract.input_shape))


def clip_overlap(eval_clips: Sequence[Tuple[str, Tuple[int, ...]]],
                 calibration_clips: Sequence[Tuple[str, Tuple[int, ...]]]) -> Dict[str, Any]:
    """How held out the evaluation clips are: evaluation clips whose frame span (first to last frame) overlaps a
    calibration clip's span in the same video, and the smallest frame distance between the two sets in one video
    (None: no evaluation clip comes from a calibration video)."""
    by_video: Dict[str, List[Tuple[int, int]]] = {}
    for video, frames in calibration_clips:
        by_video.setdefault(str(Path(video).resolve()), []).append((frames[0], frames[-1]))
    overlapping, gap, same_video = 0, None, 0
    for video, frames in eval_clips:
        spans = by_video.get(str(Path(video).resolve()))
        if not spans:
            continue
        same_video += 1
        lo, hi = frames[0], frames[-1]
        distances = [max(a - hi, lo - b, 0) for a, b in spans]
        if any(a <= hi and lo <= b for a, b in spans):
            overlapping += 1
        d = min(distances)
        gap = d if gap is None else min(gap, d)
    return {"compared": len(eval_clips), "from_calibration_videos": same_video, "overlapping": overlapping,
            "min_gap_frames": gap}


def split_shared_videos(data: Sequence[Union[str, Path]], evaluation: Sequence[Union[str, Path]], contract: Any,
                        fraction: float = 0.5) -> Tuple[List[str], List[str], List[Dict[str, Any]]]:
    """A video given (without a frame range) to both calibration and evaluation is cut in two: calibration gets
    frames ``[0, cut)``, evaluation ``[cut + span, end)`` where ``cut`` is ``fraction`` of its frames and ``span``
    one clip's length in decoded frames (a guard gap: no evaluation clip touches a calibration clip's frames)."""
    def key(item: Union[str, Path]) -> Optional[str]:
        path, start, stop = parse_video_range(item)
        return str(path.resolve()) if path.is_file() and start == 0 and stop is None else None

    shared = {key(d) for d in data} & {key(e) for e in evaluation} - {None}
    cuts: Dict[str, Tuple[int, int]] = {}
    notes: List[Dict[str, Any]] = []
    for path in sorted(p for p in shared if p is not None):
        clips = ClipVideo(Path(path), contract)
        cut = int(clips.video.available * fraction)
        cuts[path] = (cut, cut + clips.span_frames)
        notes.append({"video": path, "calibration_frames": [0, cut],
                      "evaluation_frames": [cut + clips.span_frames, clips.video.available],
                      "guard_frames": clips.span_frames})
    new_data = [("%s@0:%d" % (d, cuts[key(d)][0])) if key(d) in cuts else str(d) for d in data]
    new_eval = [("%s@%d:" % (e, cuts[key(e)][1])) if key(e) in cuts else str(e) for e in evaluation]
    return new_data, new_eval, notes


__all__ = ["CLIP_MODES", "ClipQualityTracker", "ClipSample", "ClipVideo", "PREPARED_CLIPS", "PreparedClips",
           "TrackFn", "TrackerFactory", "Window", "clip_bytes", "clip_name", "clip_overlap", "collect_clip_sources",
           "cut_clip", "frame_step", "model_frame", "open_clip_videos", "parse_video_range", "replay_tracks",
           "spaced_starts", "split_shared_videos", "whole_frame_region"]
