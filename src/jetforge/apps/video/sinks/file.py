"""Sinks: an MP4 file (OpenCV VideoWriter) and a JSON-lines event log, both written atomically.

Frames and events go to a temporary file next to the target, which replaces the
target only when the sink is closed normally; an exception or Ctrl-C while
writing leaves the previous file (or nothing), never half a video.

A video has one frame size, fixed by its first frame (or given up front); sources
need not (a folder of photos).  A frame of another size is letterboxed into the
video's size by :func:`fit_frame` (scaled to fit, aspect kept, grey bars) and
counted in ``letterboxed``: every frame reaches the video, none is refused.
"""

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Dict, Optional, TextIO, Tuple

import numpy as np

from jetforge.errors import StreamError
from jetforge.fileio import PathLike, atomic_output
from jetforge.optional import require

log = logging.getLogger(__name__)


def fit_frame(image: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """``image`` as a frame of ``size`` (width, height): itself if it fits, else letterboxed into it.

    The geometry is preprocessing's letterbox (:meth:`~jetforge.runtime.inputs.Preprocess.resize_crop`),
    so the picture is scaled to fit whole, its aspect kept, and centred on grey bars.
    """
    width, height = int(size[0]), int(size[1])
    if image.shape[1] == width and image.shape[0] == height:
        return image
    from jetforge.runtime.inputs import Preprocess

    return Preprocess(height=height, width=width, resize="letterbox", interpolation="area").resize_crop(image)


class CloseOrAbortOnExit:
    """``with sink:`` closes it when the block ends normally and aborts it on an error, so a half-written output
    never looks whole (the one rule of every sink and of :class:`~.outputs.Outputs`)."""

    def close(self) -> None:
        raise NotImplementedError

    def abort(self, exc: Optional[BaseException] = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        if exc is None:
            self.close()
        else:
            self.abort(exc)


class _AtomicSink(CloseOrAbortOnExit):
    """Common open/commit/abort logic around :func:`jetforge.fileio.atomic_output`."""

    def __init__(self, path: PathLike, suffix: str) -> None:
        self.path = Path(path)
        self._stack = contextlib.ExitStack()
        self.tmp_path: Path = self._stack.enter_context(atomic_output(self.path, suffix=suffix))
        self._done = False

    def _release(self) -> None:
        """Flush and close the underlying writer (subclasses)."""

    def close(self) -> None:
        """Finish writing and move the file into place."""
        if self._done:
            return
        self._done = True
        try:
            self._release()
        except BaseException as err:
            self._stack.__exit__(type(err), err, err.__traceback__)
            raise
        self._stack.close()

    def abort(self, exc: Optional[BaseException] = None) -> None:
        """Discard what was written; the target path is left as it was."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(Exception):
            self._release()
        err = exc or StreamError("sink %s aborted" % self.path)
        self._stack.__exit__(type(err), err, err.__traceback__)

class Mp4Sink(_AtomicSink):
    """Frames (HxWx3 uint8 BGR) -> an MP4 file with the ``mp4v`` codec.

    The writer opens on the first frame when ``size`` (width, height) is not given; later
    frames of another size are letterboxed into it (:func:`fit_frame`, counted in ``letterboxed``).
    """

    def __init__(self, path: PathLike, fps: float, size: Optional[Tuple[int, int]] = None,
                 fourcc: str = "mp4v") -> None:
        self._cv2 = require("cv2", "writing MP4 video")
        if not fps or fps <= 0:
            raise StreamError("cannot write %s: frame rate must be positive, got %r" % (path, fps))
        if len(fourcc) != 4:
            raise StreamError("fourcc must be 4 characters, got %r" % fourcc)
        self.fps = float(fps)
        self.fourcc = fourcc
        self.size: Optional[Tuple[int, int]] = None
        self.frames = 0
        self.letterboxed = 0  # frames of another size fitted into the video's
        self._writer: Any = None
        super().__init__(path, suffix=".mp4")
        if size is not None:
            self._open(size)

    def _open(self, size: Tuple[int, int]) -> None:
        cv2 = self._cv2
        writer = cv2.VideoWriter(str(self.tmp_path), cv2.VideoWriter_fourcc(*self.fourcc), self.fps,
                                 (int(size[0]), int(size[1])))
        if not writer.isOpened():
            writer.release()
            err = StreamError("OpenCV cannot write %s with codec %s at %dx%d"
                              % (self.path.name, self.fourcc, size[0], size[1]),
                              hint="this OpenCV build lacks an MP4 encoder; use --no-video")
            self.abort(err)
            raise err
        self._writer = writer
        self.size = (int(size[0]), int(size[1]))

    def write(self, image: np.ndarray) -> None:
        if self._done:
            raise StreamError("MP4 sink %s is already closed" % self.path.name)
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise StreamError("MP4 sink expects HxWx3 uint8 BGR frames, got %s"
                              % (getattr(image, "shape", type(image).__name__),))
        wh = (int(image.shape[1]), int(image.shape[0]))
        if self._writer is None:
            self._open(wh)
        elif wh != self.size:
            image = fit_frame(image, self.size)  # type: ignore[arg-type]
            self.letterboxed += 1
        self._writer.write(image)
        self.frames += 1

    def _release(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
        if self.frames == 0:
            raise StreamError("no frames were written to %s" % self.path.name)


class JsonLinesSink(_AtomicSink):
    """One JSON object per line (``.jsonl``): per-frame events for other tools to read."""

    def __init__(self, path: PathLike) -> None:
        super().__init__(path, suffix=".jsonl")
        self._file: Optional[TextIO] = open(str(self.tmp_path), "w", encoding="utf-8")
        self.count = 0

    def write(self, event: Dict[str, Any]) -> None:
        if self._file is None:
            raise StreamError("event sink %s is already closed" % self.path.name)
        self._file.write(json.dumps(event, default=_json_default, separators=(",", ":")) + "\n")
        self.count += 1

    def _release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
