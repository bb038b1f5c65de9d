"""Per-image outputs of a folder of photos: one annotated JPEG per input image, named after it.

Why: a folder of unrelated photos is not a video; its user looks at each photo with its boxes.  The sink writes
``<folder>/<stem>.jpg`` for the input ``<stem>.<ext>`` (``<stem>.<ext>.jpg`` where two inputs share a stem), each
atomically (a temporary name, then a rename), and never drops one.  Names come from the source's file names
(plain names of the folder's own files, never a path): nothing is written outside ``folder``.
"""

from pathlib import Path
from typing import Any, Dict, Optional, Set

import numpy as np

from jetforge.errors import StreamError
from jetforge.fileio import PathLike, atomic_output
from jetforge.optional import require


class ImageFilesSink:
    """Annotated frames -> ``folder/<image stem>.jpg`` (see the module)."""

    kind = "images"

    def __init__(self, folder: PathLike, quality: int = 90) -> None:
        self._cv2 = require("cv2", "writing annotated images")
        self.folder = Path(folder)
        self.quality = int(quality)
        self.frames = 0
        self._used: Set[str] = set()

    def output_name(self, name: str) -> str:
        """The JPEG's file name for an input image's file name (the stem, made unique)."""
        plain = Path(name).name
        if not plain or plain in (".", ".."):
            raise StreamError("image name %r cannot name an output file" % name)
        out = Path(plain).stem + ".jpg"
        if out in self._used:
            out = plain + ".jpg"
        self._used.add(out)
        return out

    def write_named(self, image: np.ndarray, name: str) -> Path:
        """Write one annotated image for the input image ``name``; returns its path."""
        target = self.folder / self.output_name(name or "frame_%06d" % self.frames)
        with atomic_output(target, suffix=".jpg") as tmp:
            ok, buf = self._cv2.imencode(".jpg", image, [int(self._cv2.IMWRITE_JPEG_QUALITY), self.quality])
            if not ok:
                raise StreamError("OpenCV could not encode %s as JPEG" % target.name)
            tmp.write_bytes(buf.tobytes())
        self.frames += 1
        return target

    def report(self) -> Dict[str, Any]:
        return {"uri": str(self.folder), "kind": self.kind, "frames": self.frames, "dropped": 0}

    def close(self) -> None:
        """Nothing is held open: every image is complete once written."""

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close()


__all__ = ["ImageFilesSink"]
