"""The images of a folder, in name order, one frame each (any sizes; unreadable ones skipped)."""

import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from jetforge.apps.video.sources.base import Frame, FrameDecodeError, VideoSource
from jetforge.errors import InputFileError, StreamError
from jetforge.fileio import require_dir
from jetforge.optional import require
from jetforge.runtime.image_files import MAX_IMAGE_PIXELS, ImageTooLarge, read_image

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class ImageFolderSource(VideoSource):
    """The images of a folder in name order, one frame each.

    Frame ``i`` is the ``i``-th image file in name order (``Frame.name`` is its file name), so
    events, errors and a directory listing agree.  Images may differ in size: the folder's
    ``width``/``height`` are its first readable image's, and video sinks letterbox the others.
    An image that cannot be decoded raises :class:`FrameDecodeError` naming it (the pipeline
    skips that frame and goes on) and is listed in ``skipped``, wherever it is in the folder;
    the folder is refused when it is opened only if none of its images can be decoded.
    """

    def __init__(self, folder: Union[str, "os.PathLike[str]"], fps: float = 0.0) -> None:
        self._cv2 = require("cv2", "reading images")
        self.path = require_dir(folder, "image folder")
        self.files = sorted(p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not self.files:
            raise InputFileError("image folder %s holds no images (%s)" % (self.path, ", ".join(IMAGE_SUFFIXES)))
        self.uri = str(self.path)
        self.fps = float(fps) if fps and fps > 0 else 0.0
        self.frame_count = len(self.files)
        self.skipped: List[str] = []  # names of the images that could not be decoded, in frame order
        self._index = 0
        # Find the first readable image (its size is the folder's); the unreadable ones before it are
        # remembered, not decoded again, and reported in frame order by read() like any other.
        self._unreadable: Dict[int, str] = {}  # index -> why it cannot be decoded
        self._first: Optional[Tuple[int, np.ndarray]] = None
        for index, path in enumerate(self.files):
            image, why = self._decode(path)
            if image is not None:
                self._first = (index, image)
                break
            self._unreadable[index] = why
        if self._first is None:
            reasons = sorted(set(self._unreadable.values()))
            raise StreamError("none of the %d images in %s can be decoded (%s, ...)%s"
                              % (len(self.files), self.path, ", ".join(p.name for p in self.files[:3]),
                                 ": " + reasons[0] if len(reasons) == 1 and reasons[0] else ""),
                              hint="check the files (e.g. open one in an image viewer); give a folder of "
                                   "JPEG/PNG/BMP/TIFF/WebP images of at most %d megapixels"
                                   % (MAX_IMAGE_PIXELS // 10 ** 6))
        self.height, self.width = self._first[1].shape[:2]

    def _decode(self, path: Path) -> Tuple[Optional[np.ndarray], str]:
        """(the image, "") or (None, why): an image declaring too many pixels is never decoded."""
        try:
            image = read_image(path, "image")
        except ImageTooLarge as err:
            return None, err.message
        except InputFileError as err:  # a name OpenCV cannot take
            return None, err.message
        return image, ""

    def read(self) -> Optional[Frame]:
        if self._index >= len(self.files):
            return None
        index, path = self._index, self.files[self._index]
        self._index += 1
        why = ""
        if self._first is not None and self._first[0] == index:
            image: Optional[np.ndarray] = self._first[1]
            self._first = None
        elif index in self._unreadable:
            image, why = None, self._unreadable[index]
        else:
            image, why = self._decode(path)
        if image is None:
            self.skipped.append(path.name)
            raise FrameDecodeError(why + "; it is skipped" if why else
                                   "image %s (frame %d) cannot be decoded" % (path.name, index),
                                   hint=None if why else "the file is damaged or not an image; it is skipped",
                                   index=index, name=path.name)
        timestamp = index / self.fps if self.fps else float(index)
        return Frame(index=index, timestamp=timestamp, image=image, captured=time.perf_counter(), name=path.name)

    def info(self) -> Dict[str, Any]:
        data = super().info()
        data.update(images=len(self.files), skipped=list(self.skipped))
        return data


__all__ = ["IMAGE_SUFFIXES", "ImageFolderSource"]
