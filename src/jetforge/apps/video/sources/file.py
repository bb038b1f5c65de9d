"""A video file decoded with OpenCV, frame by frame (never drops a frame)."""

import logging
import os
import time
from typing import Any, Optional, Union

from jetforge.apps.video.sources.base import Frame, VideoSource
from jetforge.errors import StreamError
from jetforge.fileio import opencv_path, require_file
from jetforge.optional import require

log = logging.getLogger(__name__)


class FileSource(VideoSource):
    """A video file decoded with OpenCV (FFmpeg on desktops; JetPack's OpenCV on a Jetson).

    ``loop=True`` plays the file again from the start each time it ends (soak tests, demos): frame
    numbers and timestamps keep increasing across passes and ``frame_count`` is None (unbounded).
    A pass that ends early (a truncated file) stops the loop and is reported like any truncation.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], loop: bool = False) -> None:
        cv2 = require("cv2", "reading video files")
        self.loop = bool(loop)
        self.passes = 1  # passes started (loop)
        self._pass_start = 0  # frame index where this pass began
        self._offset = 0.0  # seconds played by the passes before this one
        self._last_timestamp = 0.0
        self.path = require_file(path, "video file", hint="check the path of the video (--video or --source)")
        self.uri = str(self.path)
        self._cv2 = cv2
        cap = cv2.VideoCapture(opencv_path(self.path, "video file"))
        if not cap.isOpened():
            cap.release()
            raise StreamError("cannot decode video %s: OpenCV could not open it (not a video file, or its codec "
                              "is missing from this OpenCV build)" % self.path,
                              hint="check the file with `ffprobe`, or convert it to H.264 MP4")
        self._cap: Any = cap
        self.width = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH))
        self.height = int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if 0.0 < fps < 1000.0 else 0.0
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        self._pass_frames = count if count > 0 else None  # what the header announces for one pass
        self.frame_count = None if self.loop else self._pass_frames
        self._index = 0
        # Decode the first frame now so that an undecodable file fails at open, not mid-pipeline.
        self._pending = self._decode()
        if self._pending is None:
            self.close()
            raise StreamError("video %s contains no decodable frames" % self.path,
                              hint="the file is damaged or uses a codec this OpenCV cannot decode")
        self.width, self.height = self._pending.size

    def _decode(self) -> Optional[Frame]:
        if self._cap is None:
            return None
        ok, image = self._cap.read()
        if not ok or image is None:
            return None
        ms = float(self._cap.get(self._cv2.CAP_PROP_POS_MSEC))
        in_pass = self._index - self._pass_start
        # The FFmpeg backend reports the presentation time of the frame just read; others may not.
        if ms > 0.0 or in_pass == 0:
            timestamp = ms / 1000.0
        else:
            timestamp = in_pass / self.fps if self.fps > 0 else 0.0
        timestamp += self._offset
        frame = Frame(index=self._index, timestamp=timestamp, image=image, captured=time.perf_counter())
        self._last_timestamp = timestamp
        self._index += 1
        return frame

    def _restart(self) -> Optional[Frame]:
        """Open the file again for the next pass of a loop; None when it yields nothing this time."""
        self._cap.release()
        self._cap = self._cv2.VideoCapture(opencv_path(self.path, "video file"))
        if not self._cap.isOpened():
            return None
        self._offset = self._last_timestamp + (1.0 / self.fps if self.fps > 0 else 0.0)
        self._pass_start = self._index
        self.passes += 1
        return self._decode()

    def read(self) -> Optional[Frame]:
        if self._pending is not None:
            frame, self._pending = self._pending, None
            return frame
        frame = self._decode()
        if frame is None and self._cap is not None:
            played = self._index - self._pass_start
            if self._pass_frames is not None and played < self._pass_frames - 1:
                self.truncated = ("video %s ended after %d of the %d frames its header announces (the file is "
                                  "truncated or damaged)" % (self.path.name, played, self._pass_frames))
                log.warning("%s", self.truncated)
            elif self.loop and played > 0:
                frame = self._restart()
                if frame is not None:
                    return frame
            self.close()
        return frame

    def close(self) -> None:
        if getattr(self, "_cap", None) is not None:
            self._cap.release()
            self._cap = None


__all__ = ["FileSource"]
