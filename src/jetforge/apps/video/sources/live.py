"""Cameras and network streams: a reader thread keeps only the newest frame(s).

A live source (:class:`LiveSource`) processes the latest picture instead of falling further behind: a
slow pipeline sees ``buffer`` frames (default 1) and each discarded frame is counted in ``dropped``.  A
live source that stops delivering reconnects with exponential back-off and gives up with a
:class:`~jetforge.errors.StreamError` naming the source and the attempts; that error is distinct from the
end of a file, which is the normal end of iteration.
"""

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Tuple

import numpy as np

from jetforge.apps.video.sources.base import Frame, SourceOptions, VideoSource
from jetforge.errors import StreamError
from jetforge.optional import require

log = logging.getLogger(__name__)

Capture = Any  # an object with read() -> (ok, image), release(), and optionally isOpened()
CaptureFactory = Callable[[], Capture]


class LiveSource(VideoSource):
    """A camera or network stream read by a background thread, newest frames first.

    ``open_capture`` returns a connected capture (``cv2.VideoCapture`` or anything
    with ``read() -> (ok, image)`` and ``release()``) or raises/returns an unopened
    one when the source cannot be reached.  Opening retries like a reconnect; when
    every attempt fails the constructor raises a StreamError, so an unreachable URL
    fails at once with one clear line.  :meth:`read` returns the newest frame not yet
    returned; it raises StreamError once the source is lost for good.  Counters:
    ``dropped`` (frames overwritten before anyone read them), ``reconnects``
    (successful reconnections), ``timeouts`` (waits of ``stall_timeout_s / 10``
    without a frame, logged as they happen).
    """

    live = True

    def __init__(self, uri: str, open_capture: CaptureFactory, options: Optional[SourceOptions] = None,
                 what: str = "stream") -> None:
        self.uri = uri
        self.what = what
        self.options = options or SourceOptions()
        self._open_capture = open_capture
        self._cond = threading.Condition()
        self._frames: Deque[Frame] = deque()
        self._error: Optional[StreamError] = None
        self._stopping = False
        self._t0 = time.perf_counter()
        self._next_index = 0
        self.dropped = 0
        self.reconnects = 0
        self._attempts_used = 0  # reconnect attempts spent since the last connection that lasted
        self.disconnects = 0
        self.timeouts = 0
        self.frame_count = None
        cap = self._connect(initial=True)
        ok, image = _read(cap)
        if not ok:
            _release(cap)
            raise StreamError("%s %s opened but delivered no frame" % (self.what, uri),
                              hint="check that the %s is streaming (e.g. with ffplay or gst-launch-1.0)" % what)
        self.height, self.width = image.shape[:2]
        fps = 0.0
        get = getattr(cap, "get", None)
        if callable(get):
            cv2 = require("cv2", "video capture")
            with _suppress():
                fps = float(get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if 0.0 < fps < 1000.0 else (self.options.fps or 0.0)
        self._push(image)
        self._thread = threading.Thread(target=self._reader, args=(cap,), name="jetforge-source", daemon=True)
        self._thread.start()

    # -- the reader thread --------------------------------------------------------------
    def _connect(self, initial: bool, used: int = 0) -> Capture:
        """Open the capture, retrying with back-off; StreamError after the last attempt.

        The first connection tries ``1 + max_reconnects`` times (once without ``reconnect``);
        a reconnection what is left of ``max_reconnects`` after ``used`` (reconnects that did not last,
        see :meth:`_reader`), each after its back-off delay.
        """
        retries = self.options.max_reconnects if self.options.reconnect else 0
        attempts = 1 + retries if initial else max(1, retries)
        last = "no reason given"
        waited = 0.0
        for attempt in range(1 + (0 if initial else used), attempts + 1):
            delay = 0.0 if (initial and attempt == 1) else self.options.backoff(attempt - 1 if initial else attempt)
            if delay:
                log.warning("%s %s: %s attempt %d/%d in %.1f s", self.what, self.uri,
                            "connection" if initial else "reconnect", attempt, attempts, delay)
                waited += delay
                if self._sleep(delay):
                    break
            try:
                cap = self._open_capture()
            except Exception as err:  # the factory's own failure: keep the reason for the message
                last = str(err).splitlines()[0] if str(err) else type(err).__name__
                continue
            opened = getattr(cap, "isOpened", None)
            if cap is not None and (opened is None or opened()):
                if not initial:
                    self.reconnects += 1
                    self._attempts_used = attempt  # counts until the connection has lasted (see _reader)
                return cap
            _release(cap)
            last = "the capture did not open"
        verb = "cannot open" if initial else "lost"
        raise StreamError("%s %s %s: %s; %d attempt%s%s" % (
            verb, self.what, self.uri, last, attempts, "" if attempts == 1 else "s",
            (" over %.2f s" % waited) if waited else ""),
            hint="check that the %s is reachable and streaming (attempts: --max-reconnects)" % self.what)

    def _sleep(self, seconds: float) -> bool:
        """Wait, waking early when the source is closed; True if closed."""
        with self._cond:
            self._cond.wait_for(lambda: self._stopping, timeout=seconds)
            return self._stopping

    def _push(self, image: np.ndarray) -> None:
        now = time.perf_counter()
        frame = Frame(index=self._next_index, timestamp=now - self._t0, image=image, captured=now)
        self._next_index += 1
        with self._cond:
            if len(self._frames) >= self.options.buffer:
                self._frames.popleft()
                self.dropped += 1
            self._frames.append(frame)
            self._cond.notify_all()

    def _reader(self, cap: Capture) -> None:
        """Read frames until closed; reconnect within the budget.

        A reconnect that opens but stops again before the connection has lasted ``stall_timeout_s`` (a camera
        that flaps, a server that stalls or sends junk after a few frames) does not refill the budget: it
        counts as one of the ``max_reconnects`` attempts, so such a source ends the run instead of keeping it
        alive forever between stalls.  A connection that lasted that long starts a new budget.
        """
        connected = time.perf_counter()
        try:
            while not self._stopping:
                ok, image = _read(cap)
                if self._stopping:
                    break
                if ok:
                    self._push(image)
                    continue
                self.disconnects += 1
                _release(cap)
                cap = None
                if not self.options.reconnect:
                    raise StreamError("%s %s stopped delivering frames" % (self.what, self.uri),
                                      hint="reconnecting is off")
                if time.perf_counter() - connected >= self.options.stall_timeout_s:
                    self._attempts_used = 0  # the last connection lasted: a fresh budget
                if self._attempts_used >= max(1, self.options.max_reconnects):
                    raise StreamError("lost %s %s: it stopped again within %.0f s of each of its last %d "
                                      "reconnects" % (self.what, self.uri, self.options.stall_timeout_s,
                                                      self._attempts_used),
                                      hint="check the %s; raise --max-reconnects to keep trying" % self.what)
                log.warning("%s %s stopped delivering frames; reconnecting", self.what, self.uri)
                cap = self._connect(initial=False, used=self._attempts_used)
                connected = time.perf_counter()
        except StreamError as err:
            with self._cond:
                self._error = err
                self._cond.notify_all()
        except Exception as err:  # a capture backend's own exception type
            with self._cond:
                self._error = StreamError("%s %s failed: %s" % (self.what, self.uri, err))
                self._cond.notify_all()
        finally:
            _release(cap)

    # -- what the consumer calls ---------------------------------------------------------
    def read(self) -> Optional[Frame]:
        """The newest frame not yet returned; None after :meth:`close`; StreamError once the source is lost."""
        step = max(0.05, self.options.stall_timeout_s / 10.0)
        waited = 0.0
        with self._cond:
            while True:
                if self._frames:
                    return self._frames.popleft()
                if self._error is not None:
                    raise self._error
                if self._stopping:
                    return None
                t0 = time.perf_counter()
                self._cond.wait(timeout=step)
                if self._frames or self._error is not None or self._stopping:
                    continue
                waited += time.perf_counter() - t0
                self.timeouts += 1
                log.warning("%s %s: no frame for %.1f s", self.what, self.uri, waited)
                if waited >= self.options.stall_timeout_s:
                    raise StreamError("%s %s delivered no frame for %.0f s" % (self.what, self.uri, waited),
                                      hint="the camera or stream stalled; check it, or raise --stall-timeout")

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def info(self) -> Dict[str, Any]:
        data = super().info()
        data.update(dropped=self.dropped, reconnects=self.reconnects, disconnects=self.disconnects,
                    timeouts=self.timeouts)
        return data


def _read(cap: Capture) -> Tuple[bool, Optional[np.ndarray]]:
    try:
        ok, image = cap.read()
    except Exception as err:  # cv2.error from a backend whose device vanished
        log.debug("capture read failed: %s", err)
        return False, None
    if not ok or image is None or getattr(image, "size", 0) == 0:
        return False, None
    return True, image


def _release(cap: Optional[Capture]) -> None:
    if cap is not None:
        with _suppress():
            cap.release()


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, Exception)


__all__ = ["Capture", "CaptureFactory", "LiveSource"]
