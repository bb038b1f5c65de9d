"""What the live outputs share: the run's live numbers (:class:`LiveStats`) and a one-slot hand-off
(:class:`KeyedDropSlot`, one pending item per stream; :class:`DropSlot`, its one-key form) that never makes
the pipeline wait.

Why: a live output (a browser, an RTSP client, an MQTT broker) runs at its own pace; the pipeline must not.
The pipeline thread puts each item into a :class:`DropSlot` and returns at once; the output's own thread takes
the newest item.  An item replaced before it was taken is counted in ``dropped``; files never use this
(they keep every frame).
"""

import collections
import threading
import time
from typing import Any, Deque, Dict, Generic, Optional, Tuple, TypeVar

T = TypeVar("T")


class KeyedDropSlot(Generic[T]):
    """One pending item per key (a live output serving several streams): a stream's new
    item replaces only that stream's pending one (counted in ``dropped``), and the consumer takes the keys in the
    order their pending items arrived, so a busy stream never starves the others."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: "collections.OrderedDict[Any, T]" = collections.OrderedDict()
        self._closed = False
        self.put_count = 0
        self.dropped = 0

    def put(self, key: Any, item: T) -> None:
        with self._cond:
            if key in self._items:
                self.dropped += 1
            self._items[key] = item  # a replaced key keeps its place in the line
            self.put_count += 1
            self._cond.notify()

    def take(self, timeout: float = 0.5) -> Optional[Tuple[Any, T]]:
        """The oldest pending ``(key, item)``, waiting up to ``timeout`` s; None on a timeout or once closed."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            if not self._items:
                return None
            return self._items.popitem(last=False)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed


class DropSlot(KeyedDropSlot[T]):
    """One pending item between a producer that never waits and a consumer thread; replaced items are drops
    (:class:`KeyedDropSlot` with a single key)."""

    def put(self, item: T) -> None:  # type: ignore[override]
        """Hand ``item`` over; a pending one not taken yet is replaced and counted in ``dropped``."""
        super().put(None, item)

    def take(self, timeout: float = 0.5) -> Optional[T]:  # type: ignore[override]
        """The pending item, waiting up to ``timeout`` s; None on a timeout or once closed and empty."""
        pair = super().take(timeout)
        return None if pair is None else pair[1]


class LiveStats:
    """The numbers a live page shows, from the per-frame records the app writes: frames, FPS over the last
    ``window_s`` seconds, frame-to-result latency (last and median of the window), and the record's scalar
    counters (``people``, line counts, ...).  Thread-safe: the pipeline updates, the servers read."""

    def __init__(self, window_s: float = 2.0, clock: Any = time.perf_counter) -> None:
        self.window_s = float(window_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._times: Deque[Tuple[float, float]] = collections.deque()  # (time, latency ms)
        self._frames = 0
        self._events = 0
        self._counters: Dict[str, Any] = {}
        self._task = ""
        self._started = clock()

    def record(self, record: Dict[str, Any]) -> None:
        """Take one record of events.jsonl: a per-frame record updates the rates and counters."""
        with self._lock:
            if "latency_ms" not in record:  # a discrete event (line_cross, ...) or a skipped frame
                self._events += 1
                return
            now = self._clock()
            self._frames += 1
            self._task = str(record.get("type", self._task))
            self._times.append((now, float(record["latency_ms"])))
            while self._times and now - self._times[0][0] > self.window_s:
                self._times.popleft()
            self._counters = flat_counters(record)

    def snapshot(self) -> Dict[str, Any]:
        """A JSON-ready dict: ``frames``, ``fps``, ``latency_ms`` (last, median), ``counters``, ``uptime_s``."""
        with self._lock:
            times = list(self._times)
            fps = 0.0
            if len(times) > 1 and times[-1][0] > times[0][0]:
                fps = (len(times) - 1) / (times[-1][0] - times[0][0])
            lat = sorted(t[1] for t in times)
            return {"task": self._task, "frames": self._frames, "events": self._events, "fps": round(fps, 2),
                    "latency_ms": {"last": round(times[-1][1], 2) if times else None,
                                   "median": round(lat[len(lat) // 2], 2) if lat else None},
                    "counters": dict(self._counters), "uptime_s": round(self._clock() - self._started, 1)}


def flat_counters(record: Dict[str, Any], prefix: str = "", depth: int = 0) -> Dict[str, Any]:
    """The numbers of a per-frame record, nested dicts flattened (``counts.line1.forward``), bookkeeping left out."""
    skip = {"stream", "frame", "t", "latency_ms"}
    out: Dict[str, Any] = {}
    for key, value in record.items():
        if key in skip and not prefix:
            continue
        name = prefix + str(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[name] = value
        elif isinstance(value, str) and not prefix and key in ("label", "action", "top1"):
            out[name] = value
        elif isinstance(value, dict) and depth < 2:
            out.update(flat_counters(value, name + ".", depth + 1))
    return out


__all__ = ["DropSlot", "KeyedDropSlot", "LiveStats", "flat_counters"]
