"""Annotated video without a hardware encoder: CPU encoding in worker processes, off the critical path.

Why: MP4 encoding is the most expensive per-frame CPU stage of the apps (4.7 ms a frame on the H200's host,
far more on a Jetson's cores) and a GPU without NVENC (data-centre Hopper, Jetson Orin Nano) cannot do it.
Encoding inside the pipeline thread caps the whole pipeline at one core's encoding rate; :class:`EncoderPool`
moves it to ``workers`` processes (no GIL shared with the pipeline), so the pipeline only copies each frame
to be encoded back once (NV12, 1.5 bytes a pixel) into shared memory and goes on.

Every worker serves every stream, so one stream can use all of them (the first version pinned a stream to one
worker: fewer streams than workers left workers idle).  A video encoder is sequential within its output, so a
stream is cut into **segments** of ``segment_frames`` frames, each an independent, self-contained piece (it
starts with a key frame and its own headers):

* segment k of any stream goes to the next worker in turn (round robin over all segments of all streams); a
  worker encodes its segments one after the other into ``.segments/stream_<s>.<k>.mpg`` (OpenCV, ``mp4v`` =
  MPEG-4 Part 2 video in an MPEG program stream);
* the pool's collector thread (the reordering sink) appends the finished segments of each stream to that
  stream's file **in segment order**, whatever order the workers finish them in.  MPEG program streams are
  joined by plain concatenation (the MPEG systems layer allows it; FFmpeg and OpenCV read the result as one
  video, and ``ffmpeg -i stream_0.mpg -c copy stream_0.mp4`` remuxes it to MP4);
* ``stream_<s>.mpg`` is written under a temporary name and published (renamed) when the pool closes without
  error.

Flow control: each worker has ``slots`` shared-memory frame buffers; a reader thread in the worker copies a
frame out of its slot at once (so :meth:`EncoderPool.submit` waits only for that copy, not for the encoding)
into a queue of at most ``segment_frames + slots`` frames, which the worker's encoding thread converts NV12 ->
BGR, annotates (boxes, the top-1 label) and encodes.  Encoding slower than the pipeline therefore slows the
pipeline down; it never drops frames or grows memory without bound.  :meth:`EncoderPool.close` returns each
worker's frames, segments and CPU seconds (CPU-ms per encoded frame).
"""

import multiprocessing as mp
import os
import queue
import threading
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from jetforge.errors import ConfigError, StreamError

_STOP = "stop"
_END = "end"
SUFFIX = ".mpg"  # MPEG program stream: segments join by concatenation


class EncoderPool:
    """``workers`` encoder processes for frames of ``width`` x ``height`` (NV12 or BGR) at ``fps``; streams are
    cut into segments of ``segment_frames`` frames shared round robin among the workers (see the module)."""

    def __init__(self, out_dir: Any, width: int, height: int, fps: float = 30.0, workers: int = 4,
                 slots: int = 2, codec: str = "mp4v", layout: str = "nv12", segment_frames: int = 30) -> None:
        if workers < 1 or slots < 1 or segment_frames < 1:
            raise ConfigError("an encoder pool needs at least one worker, one slot and one frame per segment")
        if width % 2 or height % 2:
            raise ConfigError("encoded frames need an even size, got %dx%d" % (width, height))
        if layout not in ("nv12", "bgr"):
            raise ConfigError("encoder pool frames are nv12 or bgr, got %r" % (layout,))
        self.out_dir = Path(out_dir)
        self.segment_dir = self.out_dir / ".segments"
        self.segment_dir.mkdir(parents=True, exist_ok=True)
        self.width, self.height, self.fps, self.workers = int(width), int(height), float(fps), int(workers)
        self.layout, self.segment_frames = layout, int(segment_frames)
        self.slot_bytes = self.width * self.height * 3 // (1 if layout == "bgr" else 2)  # NV12: 1.5 bytes a pixel
        _check_shared_memory(self.slot_bytes * slots * workers)
        ctx = mp.get_context("spawn")  # no fork of a process that holds CUDA contexts and threads
        self._memories: List[shared_memory.SharedMemory] = []
        self._tasks: List[Any] = []
        self._free: List[Any] = []
        self._procs: List[Any] = []
        self._results = ctx.Queue()
        self._closed = False
        self.submitted = 0
        self._open: Dict[int, Tuple[int, int, int]] = {}  # stream -> (segment, worker, frames so far)
        self._next_segment: Dict[int, int] = {}
        self._turn = 0
        self._assembler = SegmentAssembler(self.out_dir, self.segment_dir)
        settings = (str(self.segment_dir), self.width, self.height, self.fps, codec, self.segment_frames + slots)
        for w in range(self.workers):
            mem = shared_memory.SharedMemory(create=True, size=self.slot_bytes * slots)
            tasks, free = ctx.Queue(), ctx.Queue()
            for k in range(slots):
                free.put(k)
            proc = ctx.Process(target=_worker_main, name="encoder-%d" % w, daemon=True,
                               args=(mem.name, self.slot_bytes, tasks, free, self._results, settings))
            proc.start()
            self._memories.append(mem)
            self._tasks.append(tasks)
            self._free.append(free)
            self._procs.append(proc)
        self._collector = threading.Thread(target=self._assembler.collect, args=(self._results, self.workers),
                                           name="encoder-collector", daemon=True)
        self._collector.start()

    def _slot_view(self, worker: int, slot: int, nbytes: int) -> np.ndarray:
        buf = self._memories[worker].buf
        return np.ndarray((nbytes,), dtype=np.uint8, buffer=buf, offset=slot * self.slot_bytes)

    def submit(self, stream: int, image: np.ndarray, event: Optional[Dict[str, Any]] = None) -> None:
        """Queue one frame of ``stream`` (the pool's layout: NV12 (H*3/2, W) or BGR (H, W, 3) uint8) with its event
        for drawing; frames of one stream are submitted in their order."""
        if self._closed:
            raise StreamError("the encoder pool is closed")
        self._assembler.raise_error()
        data = np.ascontiguousarray(image).reshape(-1)
        if data.size != self.slot_bytes:
            raise StreamError("frame of %d bytes for an encoder pool of %dx%d %s frames (%d bytes)"
                              % (data.size, self.width, self.height, self.layout, self.slot_bytes))
        stream = int(stream)
        segment, w, count = self._open.get(stream) or self._start_segment(stream)
        slot = self._wait_slot(w)
        self._slot_view(w, slot, data.size)[:] = data
        self._tasks[w].put((slot, stream, segment, self.layout, data.size, _drawable(event)))
        self.submitted += 1
        if count + 1 >= self.segment_frames:
            self._end_segment(stream)
        else:
            self._open[stream] = (segment, w, count + 1)

    def _start_segment(self, stream: int) -> Tuple[int, int, int]:
        """The stream's next segment goes to the next worker in turn."""
        segment = self._next_segment.get(stream, 0)
        self._next_segment[stream] = segment + 1
        w = self._turn
        self._turn = (self._turn + 1) % self.workers
        self._open[stream] = (segment, w, 0)
        return self._open[stream]

    def _end_segment(self, stream: int) -> None:
        segment, w, _ = self._open.pop(stream)
        self._tasks[w].put((_END, stream, segment))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until every worker has started (a benchmark's timing should not include process start-up)."""
        deadline = time.perf_counter() + timeout
        while not self._assembler.ready.wait(0.2):
            self._assembler.raise_error()
            dead = [w for w, p in enumerate(self._procs) if not p.is_alive()]
            if dead or time.perf_counter() > deadline:
                raise StreamError("encoder workers %s did not start" % (dead or "(time-out)"),
                                  hint="check that OpenCV imports in a fresh Python process")

    def _wait_slot(self, worker: int) -> int:
        while True:
            try:
                return int(self._free[worker].get(timeout=5.0))
            except queue.Empty:
                if not self._procs[worker].is_alive():
                    raise StreamError("encoder worker %d stopped (exit code %s)"
                                      % (worker, self._procs[worker].exitcode)) from None
                self._assembler.raise_error()

    def close(self, publish: bool = True) -> List[Dict[str, Any]]:
        """Finish every stream's file and publish it (``publish=False``: the run failed, remove them); per
        worker: frames written, segments, CPU seconds."""
        if self._closed:
            return []
        self._closed = True
        for stream in list(self._open):
            self._end_segment(stream)
        for tasks in self._tasks:
            tasks.put(_STOP)
        for proc in self._procs:
            proc.join(timeout=120.0)
        self._collector.join(timeout=30.0)
        self._assembler.stopped = True
        for mem in self._memories:
            mem.close()
            mem.unlink()
        return self._assembler.finish(self._next_segment, publish=publish)

    def __enter__(self) -> "EncoderPool":
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.close(publish=exc_type is None)


class SegmentAssembler:
    """The reordering sink: finished segments (any order, from any worker) -> each stream's file in order."""

    def __init__(self, out_dir: Path, segment_dir: Path) -> None:
        self.out_dir, self.segment_dir = out_dir, segment_dir
        self._done: Dict[int, Dict[int, str]] = {}  # stream -> {segment: file}
        self._next: Dict[int, int] = {}
        self._handles: Dict[int, Any] = {}
        self.workers: List[Dict[str, Any]] = []
        self.errors: List[str] = []
        self.stopped = False  # set by the pool when its workers are gone without reporting
        self.ready = threading.Event()  # every worker has started (imported OpenCV, attached its memory)
        self._started = 0
        self._lock = threading.Lock()

    def collect(self, results: Any, workers: int) -> None:
        """Runs in the pool's collector thread until every worker has reported its end."""
        while len(self.workers) < workers and not self.stopped:
            try:
                msg = results.get(timeout=1.0)
            except queue.Empty:
                continue
            except (EOFError, OSError):  # the queue's pipe closed: the workers are gone
                break
            with self._lock:
                if msg.get("ready") is not None:
                    self._started += 1
                    if self._started == workers:
                        self.ready.set()
                elif msg.get("segment") is not None:
                    self.add(int(msg["stream"]), int(msg["segment"]), msg["file"])
                else:
                    self.workers.append(msg)
                    if msg.get("error"):
                        self.errors.append(msg["error"])

    def add(self, stream: int, segment: int, path: str) -> None:
        """Record a finished segment and append every segment of ``stream`` that is now next in order."""
        self._done.setdefault(stream, {})[segment] = path
        nxt = self._next.get(stream, 0)
        pending = self._done[stream]
        while nxt in pending:
            self._append(stream, pending.pop(nxt))
            nxt += 1
        self._next[stream] = nxt

    def _append(self, stream: int, path: str) -> None:
        handle = self._handles.get(stream)
        if handle is None:
            handle = self._handles[stream] = open(str(self._partial(stream)), "wb")
        with open(path, "rb") as seg:
            while True:
                block = seg.read(1 << 20)
                if not block:
                    break
                handle.write(block)
        os.remove(path)

    def _partial(self, stream: int) -> Path:
        return self.out_dir / ("stream_%d.partial%s" % (stream, SUFFIX))

    def raise_error(self) -> None:
        if self.errors:
            raise StreamError("encoder worker failed: %s" % self.errors[0])

    def finish(self, segments: Dict[int, int], publish: bool) -> List[Dict[str, Any]]:
        """Close the streams' files; publish them when every segment arrived and no worker failed."""
        with self._lock:
            missing = {s: n - self._next.get(s, 0) for s, n in segments.items() if self._next.get(s, 0) < n}
            for handle in self._handles.values():
                handle.close()
            ok = publish and not self.errors and not missing
            files = []
            for s in sorted(self._handles):
                if ok:
                    final = self.out_dir / ("stream_%d%s" % (s, SUFFIX))
                    os.replace(str(self._partial(s)), str(final))
                    files.append(str(final))
                else:
                    self._partial(s).unlink()
            _remove_tree(self.segment_dir)
            if not publish:  # the run failed: its own error is the one to report
                return sorted(self.workers, key=lambda r: r["worker"])
            self.raise_error()
            if missing:
                raise StreamError("encoder pool closed with segments missing (stream: count) %s" % missing,
                                  hint="an encoder worker stopped early; see the log above")
            for w in self.workers:
                w["files"] = files
            return sorted(self.workers, key=lambda r: r["worker"])


def _remove_tree(folder: Path) -> None:
    for path in folder.glob("*"):
        path.unlink()
    try:
        folder.rmdir()
    except OSError:  # not empty (another pool's files) or already gone
        pass


def _check_shared_memory(nbytes: int) -> None:
    """A clear error instead of a bus error: shared memory lives in /dev/shm, which containers often keep small."""
    import shutil

    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError:  # no /dev/shm (not Linux): the platform's own shared memory
        return
    if free < nbytes + (16 << 20):
        raise StreamError("the encoder pool needs %.0f MiB of shared memory; /dev/shm has %.0f MiB free"
                          % (nbytes / 2 ** 20, free / 2 ** 20),
                          hint="use fewer encoder workers, or a larger /dev/shm (docker run --shm-size=1g)")


def _drawable(event: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The parts of an event the worker draws: boxes (x1, y1, x2, y2 pixels) and one label."""
    if not event:
        return {}
    out: Dict[str, Any] = {}
    boxes = event.get("boxes_xyxy")
    if boxes is not None and len(boxes):
        out["boxes"] = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    if event.get("label"):
        out["label"] = str(event["label"])
    return out


def _worker_main(mem_name: str, slot_bytes: int, tasks: Any, free: Any, results: Any, settings: Tuple) -> None:
    """One encoder process: a reader (this thread) copies frames out of the shared slots at once; the encoding
    thread annotates and encodes them segment by segment."""
    import signal

    import cv2

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent closes the pool
    cv2.setNumThreads(1)
    mem = shared_memory.SharedMemory(name=mem_name)
    local: "queue.Queue[Any]" = queue.Queue(maxsize=int(settings[5]))
    encoder = _SegmentEncoder(cv2, results, settings)
    thread = threading.Thread(target=encoder.run, args=(local,), name="encode", daemon=True)
    c0 = time.process_time()
    thread.start()
    results.put({"ready": int(mp.current_process().name.split("-")[-1])})
    try:
        while not encoder.error:
            task = tasks.get()
            if task == _STOP:
                break
            if task[0] == _END:
                local.put(task)
                continue
            slot, stream, segment, layout, nbytes, draw = task
            raw = np.array(np.ndarray((nbytes,), dtype=np.uint8, buffer=mem.buf, offset=slot * slot_bytes))
            free.put(slot)
            _put(local, (stream, segment, layout, raw, draw), encoder)
    except Exception as err:  # reported to the parent, which raises it as a StreamError
        encoder.error = encoder.error or "%s: %s" % (type(err).__name__, err)
    finally:
        _put(local, None, encoder)
        thread.join()
        mem.close()
        results.put({"worker": int(mp.current_process().name.split("-")[-1]), "frames": encoder.frames,
                     "segments": encoder.segments, "cpu_s": time.process_time() - c0, "error": encoder.error})


def _put(local: "queue.Queue[Any]", item: Any, encoder: "_SegmentEncoder") -> None:
    """Put into the bounded local queue unless the encoding thread has failed (then nothing drains it)."""
    while not encoder.error:
        try:
            local.put(item, timeout=0.5)
            return
        except queue.Full:
            continue


class _SegmentEncoder:
    """The encoding thread of one worker: one writer per open segment (a worker may hold segments of several
    streams at once: segments of all streams are dealt round robin), one file per segment."""

    def __init__(self, cv2: Any, results: Any, settings: Tuple) -> None:
        self.cv2, self.results = cv2, results
        self.folder, self.width, self.height, self.fps, self.codec, _ = settings
        self.frames = self.segments = 0
        self.error = ""
        self._writers: Dict[Tuple[int, int], Any] = {}

    def run(self, local: "queue.Queue[Any]") -> None:
        cv2 = self.cv2
        try:
            while True:
                item = local.get()
                if item is None:
                    break
                if item[0] == _END:
                    self._close_segment((item[1], item[2]))
                    continue
                stream, segment, layout, raw, draw = item
                if layout == "nv12":
                    image = cv2.cvtColor(raw.reshape(self.height * 3 // 2, self.width), cv2.COLOR_YUV2BGR_NV12)
                else:
                    image = raw.reshape(self.height, self.width, 3)
                _draw(cv2, image, draw)
                self._writer_for((stream, segment)).write(image)
                self.frames += 1
        except Exception as err:  # the worker reports it
            self.error = "%s: %s" % (type(err).__name__, err)
        finally:
            for writer in self._writers.values():
                writer.release()

    def _path(self, key: Tuple[int, int]) -> str:
        return os.path.join(self.folder, "stream_%d.%06d%s" % (key[0], key[1], SUFFIX))

    def _writer_for(self, key: Tuple[int, int]) -> Any:
        writer = self._writers.get(key)
        if writer is None:
            writer = self._writers[key] = _open_writer(self.cv2, self._path(key), self.width, self.height,
                                                       self.fps, self.codec)
        return writer

    def _close_segment(self, key: Tuple[int, int]) -> None:
        self._writers.pop(key).release()  # a segment ends only after its first frame: its writer exists
        self.segments += 1
        self.results.put({"segment": key[1], "stream": key[0], "file": self._path(key)})


def _open_writer(cv2: Any, path: str, width: int, height: int, fps: float, codec: str) -> Any:
    """An OpenCV writer; its FFmpeg backend prints a one-line note about the codec tag for program streams
    (the tag is not stored there, the video is MPEG-4 Part 2 all the same), so stderr is muted while it opens."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*codec), fps or 30.0, (width, height))
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    if not writer.isOpened():
        raise RuntimeError("OpenCV cannot write %s with codec %s" % (path, codec))
    return writer


def draw_event(image: np.ndarray, event: Optional[Dict[str, Any]]) -> None:
    """Draw a GPU-path frame's event (``boxes_xyxy``, ``label``) on ``image`` in place, as the encoder workers do: the
    GPU path's live outputs and ``--output`` files show the same overlay as its ``stream_<s>.mpg``."""
    import cv2

    _draw(cv2, image, _drawable(event))


def _draw(cv2: Any, image: np.ndarray, draw: Dict[str, Any]) -> None:
    for x1, y1, x2, y2 in draw.get("boxes", ()):
        cv2.rectangle(image, (int(x1), int(y1)), (int(x2), int(y2)), (0, 220, 0), 2)
    if draw.get("label"):
        cv2.putText(image, draw["label"], (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 3, cv2.LINE_AA)
        cv2.putText(image, draw["label"], (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 1, cv2.LINE_AA)


__all__ = ["draw_event", "EncoderPool", "SegmentAssembler", "SUFFIX"]
