"""Calibration samples: image folders, video files, lists of paths -> uint8 BGR images.

``--data`` may name, any number of times:

* a folder: its images (recursively; ``.jpg .jpeg .png .bmp .webp .tif .tiff .ppm .pgm``), or,
  if it holds no image, its videos;
* a video file (anything OpenCV decodes): frames sampled ``uniform``-ly over the whole clip, or
  at ``scene`` changes (a frame is kept when its 32x32 grey thumbnail differs from the last kept
  one by more than ``scene_threshold`` grey levels on average);
* an image file;
* a ``.txt`` list of image/video paths, one per line (relative to the list's folder; ``#`` comments).

The sample budget is split evenly across the sources; a source with fewer samples than its share
passes the rest on.  Images are decoded lazily, one at a time, so memory does not grow with the
number of samples.  Every way of getting nothing (empty folder, undecodable video, unreadable
list) is a :class:`~jetforge.errors.CalibrationError` naming the path.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import CalibrationError, InputFileError
from jetforge.fileio import expand_user, opencv_path
from jetforge.optional import require
from jetforge.runtime.image_files import ImageTooLarge, read_image

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm", ".pbm")
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".flv", ".ts",
                    ".y4m", ".ogv", ".3gp")
LIST_EXTENSIONS = (".txt", ".lst", ".list")
SAMPLINGS = ("uniform", "scene")


def _cv2():
    return require("cv2", "reading calibration images and videos")


def evenly_spaced(n_available: int, n_wanted: int) -> List[int]:
    """``n_wanted`` indices spread over ``range(n_available)`` (all of them when there are fewer)."""
    if n_wanted >= n_available:
        return list(range(n_available))
    if n_wanted <= 0:
        return []
    return sorted(set(int(i) for i in np.linspace(0, n_available - 1, n_wanted).round()))


# --------------------------------------------------------------------------- sources
class Source:
    """One place samples come from; ``available`` is how many it can give (an estimate for videos)."""

    path: Path
    kind = ""

    @property
    def available(self) -> int:
        raise NotImplementedError

    def iterate(self, n: int) -> Iterator[Tuple[str, np.ndarray]]:
        """Yield up to ``n`` (sample name, uint8 BGR image) pairs."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"path": str(self.path), "kind": self.kind, "available": self.available}


class ImageFiles(Source):
    kind = "images"

    def __init__(self, paths: Sequence[Path], origin: Path) -> None:
        self.paths = list(paths)
        self.path = origin

    @property
    def available(self) -> int:
        return len(self.paths)

    def iterate(self, n: int) -> Iterator[Tuple[str, np.ndarray]]:
        _cv2()  # a missing OpenCV is named before the first image
        chosen = [self.paths[i] for i in evenly_spaced(len(self.paths), n)]
        unreadable = 0
        for p in chosen:
            try:  # an image declaring too many pixels is skipped from its header, never decoded
                image = read_image(p, "calibration image")
            except ImageTooLarge as err:
                unreadable += 1
                log.warning("skipping: %s", err.message)
                continue
            if image is None:
                unreadable += 1
                log.warning("skipping %s: OpenCV cannot decode it as an image", p)
                continue
            yield str(p), image
        if chosen and unreadable == len(chosen):
            raise CalibrationError("none of the %d image files from %s could be decoded" % (len(chosen), self.path),
                                   hint="check that the files are real images (jpg, png, ...)")


class VideoFile(Source):
    kind = "video"

    def __init__(self, path: Path, sampling: str = "uniform", scene_threshold: float = 12.0) -> None:
        if sampling not in SAMPLINGS:
            raise CalibrationError("unknown video sampling %r" % sampling, hint="use uniform or scene")
        self.path = path
        self.sampling = sampling
        self.scene_threshold = float(scene_threshold)
        self._frames = self._probe()

    def _open(self):
        cv2 = _cv2()
        cap = cv2.VideoCapture(opencv_path(self.path, "video"))
        if not cap.isOpened():
            raise CalibrationError("cannot open video %s: OpenCV has no decoder for it or the file is damaged"
                                   % self.path, hint="convert it to H.264 MP4 (ffmpeg -i IN -c:v libx264 OUT.mp4) "
                                                     "or give a folder of images")
        return cap

    def _probe(self) -> int:
        cv2 = _cv2()
        cap = self._open()
        try:
            ok, frame = cap.read()
            if not ok or frame is None:
                raise CalibrationError("cannot decode any frame of video %s" % self.path,
                                       hint="convert it to H.264 MP4 (ffmpeg -i IN -c:v libx264 OUT.mp4) or give "
                                            "a folder of images")
            count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        finally:
            cap.release()
        return max(count, 1)

    @property
    def available(self) -> int:
        return self._frames

    def _frames_at(self, wanted: Sequence[int]) -> Iterator[Tuple[int, np.ndarray]]:
        """Decode sequentially (seeking is unreliable across codecs), returning frames in ``wanted``."""
        want = set(wanted)
        last = max(want) if want else -1
        cap = self._open()
        try:
            index = 0
            while index <= last:
                if not cap.grab():
                    break
                if index in want:
                    ok, frame = cap.retrieve()
                    if ok and frame is not None:
                        yield index, frame
                index += 1
        finally:
            cap.release()

    def scene_frames(self) -> List[int]:
        """Indices of frames that differ from the last kept one (the first frame is always kept)."""
        cv2 = _cv2()
        cap = self._open()
        kept: List[int] = []
        ref: Optional[np.ndarray] = None
        try:
            index = 0
            while cap.grab():
                ok, frame = cap.retrieve()
                if ok and frame is not None:
                    grey = frame if frame.ndim == 2 else cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
                    thumb = cv2.resize(grey, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float32)
                    if ref is None or float(np.mean(np.abs(thumb - ref))) > self.scene_threshold:
                        kept.append(index)
                        ref = thumb
                index += 1
        finally:
            cap.release()
        self._frames = max(index, 1)
        return kept

    def iterate(self, n: int) -> Iterator[Tuple[str, np.ndarray]]:
        if self.sampling == "scene":
            candidates = self.scene_frames()
            if len(candidates) < n:
                log.info("%s: %d scene changes for %d wanted samples; filling with evenly spaced frames",
                         self.path, len(candidates), n)
                extra = [i for i in evenly_spaced(self._frames, n) if i not in set(candidates)]
                candidates = sorted(set(candidates) | set(extra[:n - len(candidates)]))
            wanted = [candidates[i] for i in evenly_spaced(len(candidates), n)]
        else:
            wanted = evenly_spaced(self._frames, n)
        got = 0
        for index, frame in self._frames_at(wanted):
            got += 1
            yield "%s#%d" % (self.path, index), frame
        if got == 0 and wanted:
            raise CalibrationError("cannot decode frames of video %s" % self.path,
                                   hint="convert it to H.264 MP4 or give a folder of images")


# --------------------------------------------------------------------------- discovery
def _is_image(p: Path) -> bool:
    return p.suffix.lower() in IMAGE_EXTENSIONS


def _is_video(p: Path) -> bool:
    return p.suffix.lower() in VIDEO_EXTENSIONS


def _files_under(folder: Path) -> List[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))


def open_source(item: Union[str, Path], sampling: str = "uniform", scene_threshold: float = 12.0) -> List[Source]:
    """The source(s) one ``--data`` argument names."""
    path = expand_user(item, "calibration data")
    if not path.exists():
        raise InputFileError("calibration data %s does not exist" % path,
                             hint="give a folder of images, a video file or a .txt list of paths")
    if path.is_dir():
        files = _files_under(path)
        images = [p for p in files if _is_image(p)]
        if images:
            return [ImageFiles(images, path)]
        videos = [p for p in files if _is_video(p)]
        if videos:
            return [VideoFile(v, sampling, scene_threshold) for v in videos]
        raise CalibrationError("calibration folder %s has no images or videos (looked for %s)"
                               % (path, " ".join(IMAGE_EXTENSIONS[:5]) + " ..."),
                               hint="put a few hundred representative images (TensorRT suggests ~500) in it")
    if _is_image(path):
        return [ImageFiles([path], path)]
    if path.suffix.lower() in LIST_EXTENSIONS:
        return _from_list(path, sampling, scene_threshold)
    # anything else is tried as a video: OpenCV decides
    return [VideoFile(path, sampling, scene_threshold)]


def _from_list(path: Path, sampling: str, scene_threshold: float) -> List[Source]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise CalibrationError("cannot read the path list %s: %s" % (path, err),
                               hint="give a UTF-8 text file with one image or video path per line") from err
    images: List[Path] = []
    sources: List[Source] = []
    missing = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        p = expand_user(line, "a path in %s" % path)
        if not p.is_absolute():
            p = path.parent / p
        if not p.is_file():
            missing.append(str(p))
        elif _is_image(p):
            images.append(p)
        else:
            sources.append(VideoFile(p, sampling, scene_threshold))
    if missing:
        raise CalibrationError("path list %s names %d missing file(s), first: %s" % (path, len(missing), missing[0]),
                               hint="fix or remove those lines (relative paths are relative to the list's folder)")
    if images:
        sources.insert(0, ImageFiles(images, path))
    if not sources:
        raise CalibrationError("path list %s names no files" % path, hint="put one image or video path per line")
    return sources


@dataclass
class Samples:
    """All sources of one calibration run, with the number of samples to draw from each."""

    sources: List[Source]
    plan: List[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return int(sum(self.plan))

    def __iter__(self) -> Iterator[Tuple[str, np.ndarray]]:
        for source, n in zip(self.sources, self.plan):
            if n > 0:
                for item in source.iterate(n):
                    yield item

    def describe(self) -> List[dict]:
        return [dict(s.describe(), planned=n) for s, n in zip(self.sources, self.plan)]


def allocate(available: Sequence[int], budget: int) -> List[int]:
    """Split ``budget`` evenly over sources, passing on what a small source cannot use."""
    plan = [0] * len(available)
    left = budget
    open_ = [i for i, a in enumerate(available) if a > 0]
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for i in list(open_):
            take = min(share, available[i] - plan[i], left)
            plan[i] += take
            left -= take
            if plan[i] >= available[i]:
                open_.remove(i)
            if left == 0:
                break
    return plan


def collect_sources(data: Union[str, Path, Sequence[Union[str, Path]]], max_samples: int = 500,
                    sampling: str = "uniform", scene_threshold: float = 12.0) -> Samples:
    """Open every ``--data`` item and plan how many samples each gives (``max_samples`` in all)."""
    items = [data] if isinstance(data, (str, Path)) else list(data)
    if not items:
        raise CalibrationError("no calibration data given", hint="pass --data FOLDER_OR_VIDEO (repeatable)")
    if max_samples < 1:
        raise CalibrationError("the number of samples must be at least 1, got %d" % max_samples)
    sources: List[Source] = []
    for item in items:
        sources.extend(open_source(item, sampling, scene_threshold))
    plan = allocate([s.available for s in sources], max_samples)
    return Samples(sources, plan)


class PreprocessedBatches:
    """``(name, uint8 BGR image)`` samples -> ``(batch, names)`` through the model's image input contract.

    Batches hold ``batch_size`` samples, or the model's fixed batch when it has one (``fixed_batch``);
    a last partial batch a fixed-batch model cannot take is dropped with a warning and counted in
    :attr:`dropped`.  ``on_sample(name, image)`` sees every sample before it is prepared (the quality
    tracker, perceptual hashes).  Calibration statistics and evaluation batch their samples here, so
    both feed the model exactly what ``contract.apply`` (:mod:`jetforge.runtime.inputs`) makes.
    """

    def __init__(self, samples: Iterable[Tuple[str, np.ndarray]], contract: Any, batch_size: int,
                 fixed_batch: Optional[int] = None, what: str = "samples",
                 on_sample: Optional[Callable[[str, np.ndarray], None]] = None) -> None:
        if fixed_batch is not None and fixed_batch != batch_size:
            log.info("the model's input has a fixed batch of %d; using it instead of %d", fixed_batch, batch_size)
        self.samples, self.contract = samples, contract
        self.batch_size = int(fixed_batch or batch_size)
        self.fixed_batch, self.what, self.on_sample = fixed_batch, what, on_sample
        self.dropped = 0

    def __iter__(self) -> Iterator[Tuple[np.ndarray, List[str]]]:
        pending: List[np.ndarray] = []
        names: List[str] = []
        for name, image in self.samples:
            if self.on_sample is not None:
                self.on_sample(name, image)
            pending.append(self.contract.apply(image))
            names.append(name)
            if len(pending) == self.batch_size:
                yield np.stack(pending), names
                pending, names = [], []
        if pending:
            if self.fixed_batch and len(pending) != self.fixed_batch:
                self.dropped = len(pending)
                log.warning("dropping the last %d %s: the model's batch is fixed at %d", len(pending), self.what,
                            self.fixed_batch)
            else:
                yield np.stack(pending), names
