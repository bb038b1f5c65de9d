"""Several outputs of one app run behind one object: :func:`open_sinks` -> :class:`Outputs`.

The app shell calls ``outputs.frame(stream, image, name)`` for every annotated frame, ``outputs.event(record)``
for every record it writes to ``events.jsonl``, ``outputs.report()`` for ``metrics.json`` (each sink's frames or
events and drops) and ``close()`` / ``abort(exc)`` at the end.  Which frames go where, stated once:

* a file (``out.mp4``) gets every frame of its stream; with several sources ``out.mp4`` becomes ``out_<k>.mp4``
  for stream ``k``; files never drop and their write errors end the run like any other output file's;
* a live output drops what its client cannot take (counted): ``http://@:PORT`` and ``rtsp://@:PORT/NAME`` serve
  every stream (the page shows one tile per stream, ``/stream/<k>.mjpg``; RTSP mounts ``/NAME/<k>`` when there are
  several streams, ``/NAME`` for one); ``display`` and a pushed ``rtsp://HOST``/``rtp://`` stream take stream 0's
  frames; an ``mqtt`` output gets every event of every stream;
* a failing live output is closed with one warning and counted in its ``errors``; the run goes on;
* with an image folder as a source, ``images_dir`` gets one annotated JPEG per input image
  (:class:`~jetforge.apps.video.sinks.images.ImageFilesSink`).
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlparse

import numpy as np

from jetforge.apps.video.sinks.file import CloseOrAbortOnExit
from jetforge.apps.video.sinks.images import ImageFilesSink
from jetforge.apps.video.sinks.live import LiveStats
from jetforge.apps.video.sinks.uri import SINKS, open_video_sink
from jetforge.apps.video.sources.uri import uri_to_path
from jetforge.errors import ConfigError
from jetforge.fileio import check_not_input, check_output_path

log = logging.getLogger(__name__)

StreamShape = Tuple[float, Optional[Tuple[int, int]]]  # (fps, (width, height)) of one source
ALL_STREAMS = -1  # a slot whose sink takes every stream's frames: ``write(image, stream)``
SERVES_ALL = ("http", "rtsp")  # the kinds that serve every stream (rtsp only as a server here: rtsp://@...)


@dataclass
class _Slot:
    """One opened output: which stream's frames it takes (None: events only; :data:`ALL_STREAMS`: every stream's,
    through ``write(image, stream)``), whether it is a file."""

    uri: str
    sink: Any
    stream: Optional[int]
    is_file: bool
    errors: int = 0
    failed: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def stream_path(path: Path, stream: int, streams: int) -> Path:
    """``out.mp4`` for one stream; ``out_<k>.mp4`` for stream ``k`` of several."""
    return path if streams == 1 else path.with_name("%s_%d%s" % (path.stem, stream, path.suffix))


def output_kind(uri: str) -> str:
    """The registry scheme of an output URI (a plain path is ``file``)."""
    scheme = urlparse(uri).scheme.lower()
    if scheme in SINKS:
        return scheme
    if uri_to_path(uri) is None:
        raise ConfigError("output %r: unknown scheme %s://" % (uri, scheme),
                          hint="use a .mp4 path or one of %s" % ", ".join(s + "://" for s in SINKS if s != "file"))
    return "file"


def open_sinks(uris: Sequence[str], streams: Sequence[StreamShape], title: str = "jetforge",
               images_dir: Optional[Path] = None, inputs: Sequence[Any] = ()) -> "Outputs":
    """Open every output of ``uris`` (see the module) for sources of ``streams`` shapes; all or none: when one
    fails to open, those already opened are closed and the error (one line naming the URI) is raised."""
    if len(set(uris)) != len(uris):
        raise ConfigError("the same --output is given twice", hint="give each output once")
    opened: List[_Slot] = []
    try:
        for uri in uris:
            opened += _open_one(str(uri), streams, title, inputs)
    except BaseException:
        for slot in opened:
            slot.sink.abort(None)
        raise
    images = ImageFilesSink(images_dir) if images_dir is not None else None
    return Outputs(opened, images)


def _open_one(uri: str, streams: Sequence[StreamShape], title: str, inputs: Sequence[Any]) -> List[_Slot]:
    kind = output_kind(uri)
    if kind != "file":
        fps, size = streams[0]
        if kind in SERVES_ALL and (kind == "http" or urlparse(uri).netloc.startswith("@")):
            sizes = [s for _, s in streams]
            return [_Slot(uri, open_video_sink(uri, fps, size, title=title, sizes=sizes), ALL_STREAMS, False)]
        stream = None if kind == "mqtt" else 0
        return [_Slot(uri, open_video_sink(uri, fps, size, title=title), stream, False)]
    path = Path(str(uri_to_path(uri)))
    slots = []
    for k, (fps, size) in enumerate(streams):
        target = stream_path(path, k, len(streams))
        check_not_input(target, [p for p in inputs if p is not None])
        check_output_path(target)
        slots.append(_Slot(str(target), open_video_sink(str(target), fps, None, title=title), k, True))
    return slots


class Outputs(CloseOrAbortOnExit):
    """The opened outputs of a run (see the module); ``stats`` are the live numbers the http page shows."""

    def __init__(self, slots: List[_Slot], images: Optional[ImageFilesSink] = None) -> None:
        self.slots = slots
        self.images = images
        self.stats = LiveStats()
        for slot in slots:
            if hasattr(slot.sink, "stats"):
                slot.sink.stats = self.stats

    @property
    def stop_requested(self) -> bool:
        """A window closed by its user asks the run to stop."""
        return any(getattr(s.sink, "closed_by_user", False) for s in self.slots)

    @property
    def files(self) -> List[Path]:
        """The video files written so far."""
        return [Path(s.uri) for s in self.slots if s.is_file and getattr(s.sink, "frames", 0)]

    def _frame_slots(self, stream: int) -> List[_Slot]:
        """The open outputs that take ``stream``'s frames."""
        return [s for s in self.slots
                if s.failed is None and hasattr(s.sink, "write") and s.stream in (stream, ALL_STREAMS)]

    def takes_frames(self, stream: int) -> bool:
        """Whether an open output takes ``stream``'s frames at all (decided once, when a run starts)."""
        return bool(self._frame_slots(stream))

    def wants_frames(self, stream: int) -> bool:
        """Whether an open output would use ``stream``'s frame now (the GPU path copies a frame back and draws it
        only then): a file or window always, a live page only while someone watches (its sink's ``wants``)."""
        return any(not hasattr(s.sink, "wants") or s.sink.wants(stream) for s in self._frame_slots(stream))

    def frame(self, stream: int, image: np.ndarray, name: str = "") -> None:
        """One annotated frame of ``stream`` (``name``: its image file, for a folder of photos)."""
        if self.images is not None and name:
            self.images.write_named(image, name)
        for slot in self.slots:
            if slot.failed is None and hasattr(slot.sink, "write"):
                if slot.stream == stream:
                    self._call(slot, slot.sink.write, image)
                elif slot.stream == ALL_STREAMS:
                    self._call(slot, lambda im: slot.sink.write(im, stream), image)

    def event(self, record: Dict[str, Any]) -> None:
        """One record of ``events.jsonl``: the live numbers, and every events output."""
        self.stats.record(record)
        for slot in self.slots:
            if slot.failed is None and hasattr(slot.sink, "write_event"):
                self._call(slot, slot.sink.write_event, record)

    def _call(self, slot: _Slot, method: Any, arg: Any) -> None:
        if slot.is_file:
            method(arg)  # a file that cannot be written ends the run: its frames must not go missing silently
            return
        try:
            method(arg)
        except Exception as err:  # a live output failing must not end the run
            slot.errors += 1
            slot.failed = str(err)
            log.warning("output %s failed and is closed: %s", slot.uri, err)
            try:
                slot.sink.abort(err)
            except Exception:  # already broken
                pass

    def report(self) -> List[Dict[str, Any]]:
        """Each output's part of ``metrics.json``: what it took, what it dropped, which encoder wrote a file."""
        out = []
        for slot in self.slots:
            sink = slot.sink
            entry = dict(sink.report()) if hasattr(sink, "report") else {"uri": slot.uri}
            entry.setdefault("uri", slot.uri)
            entry.setdefault("kind", "file" if slot.is_file else output_kind(slot.uri))
            entry.setdefault("dropped", 0)
            for name in ("frames", "letterboxed", "encoder", "size"):
                if hasattr(sink, name) and name not in entry:
                    value = getattr(sink, name)
                    entry[name] = list(value) if isinstance(value, tuple) else value
            if slot.stream is not None:
                entry["stream"] = "all" if slot.stream == ALL_STREAMS else slot.stream
            entry["errors"] = slot.errors
            if slot.failed:
                entry["failed"] = slot.failed
            out.append(entry)
        if self.images is not None:
            out.append(self.images.report())
        return out

    def close(self) -> None:
        """Close every output; files keep what was written (a file without frames is removed)."""
        first: Optional[BaseException] = None
        for slot in self.slots:
            try:
                if slot.is_file and not getattr(slot.sink, "frames", 1):
                    slot.sink.abort(None)
                elif slot.failed is None:
                    slot.sink.close()
            except Exception as err:  # close the others before raising
                first = first or err
        if first is not None:
            raise first

    def abort(self, exc: Optional[BaseException] = None) -> None:
        for slot in self.slots:
            try:
                slot.sink.abort(exc)
            except Exception:
                pass


__all__ = ["ALL_STREAMS", "Outputs", "open_sinks", "output_kind", "stream_path"]
