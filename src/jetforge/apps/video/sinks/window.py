"""An on-screen window (OpenCV HighGUI); it fails when created where no display or GUI exists, never on a frame."""

import os
from typing import Optional

import numpy as np

from jetforge.errors import StreamError
from jetforge.optional import require


def has_display() -> bool:
    """Whether a window can be shown: a display server to talk to (X11 or Wayland on Linux)."""
    if os.name == "nt" or os.uname().sysname == "Darwin":  # type: ignore[attr-defined]
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def opencv_has_gui() -> bool:
    """Whether this OpenCV build has a HighGUI backend (headless wheels have none)."""
    cv2 = require("cv2", "showing video")
    for line in cv2.getBuildInformation().splitlines():
        text = line.strip()
        if text.startswith("GUI:"):
            return "NONE" not in text.upper()
    return False


class WindowSink:
    """Frames shown in an OpenCV window; closing the window or pressing q/Esc sets :attr:`closed_by_user`."""

    def __init__(self, title: str = "jetforge") -> None:
        self._cv2 = require("cv2", "showing video")
        if not has_display():
            raise StreamError("cannot open a window: no display (DISPLAY/WAYLAND_DISPLAY are not set)",
                              hint="drop --display on a headless machine; the MP4 and events are still written")
        if not opencv_has_gui():
            raise StreamError("cannot open a window: this OpenCV (%s) is built without a GUI (a headless wheel)"
                              % self._cv2.__version__,
                              hint="pip install opencv-python instead of opencv-python-headless, or drop --display")
        self.title = title
        self.closed_by_user = False
        self.frames = 0
        self._cv2.namedWindow(title, self._cv2.WINDOW_NORMAL)

    def write(self, image: np.ndarray) -> None:
        self._cv2.imshow(self.title, image)
        self.frames += 1
        key = self._cv2.waitKey(1) & 0xFF
        if key in (ord("q"), 27):
            self.closed_by_user = True

    def close(self) -> None:
        try:
            self._cv2.destroyWindow(self.title)
        except Exception:  # the user already closed it
            pass

    def abort(self, exc: Optional[BaseException] = None) -> None:
        self.close()

    def __enter__(self) -> "WindowSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["WindowSink", "has_display", "opencv_has_gui"]
