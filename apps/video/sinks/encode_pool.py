"""Annotated video without a hardware encoder: CPU encoding in worker processes, off the critical path.

Why: MP4 encoding is the most expensive per-frame CPU stage of the apps (4.7 ms a frame on the H200's host,
far more on a Jetson's cores) and a GPU without NVENC (data-centre Hopper, Jetson Orin Nano) cannot do it.
Encoding inside the pipeline thread caps the whole pipeline at one core's encoding rate; :class:`EncoderPool`
moves it to ``workers`` processes (no GIL shared with the pipeline), so the pipeline only copies each frame
to be encoded back once (NV12, 1.5 bytes a pixel) into shared memory and goes on.

* Stream ``s`` is encoded by worker ``s % workers``, which owns that stream's writer and receives its frames
  through one FIFO queue: every stream's frames are written in order.
* Each worker has ``slots`` shared-memory frame buffers; :meth:`EncoderPool.submit` waits for a free one
  (back-pressure: encoding slower than the pipeline slows the pipeline down, it never drops frames or grows
  memory).
* The worker converts NV12 -> BGR, draws the frame's event (detection boxes, the top-1 label), and writes
  ``stream_<s>.mp4`` (OpenCV ``mp4v``) under ``out_dir`` - written to a temporary name and renamed when closed.
* :meth:`EncoderPool.close` returns each worker's frames and CPU seconds (CPU-ms per encoded frame).
"""

import multiprocessing as mp
import os
import queue
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from jetforge.errors import ConfigError, StreamError

_STOP = "stop"


class EncoderPool:
    """``workers`` encoder processes for frames of ``width`` x ``height`` (NV12 or BGR) at ``fps``."""

    def __init__(self, out_dir: Any, width: int, height: int, fps: float = 30.0, workers: int = 4,
                 slots: int = 2, codec: str = "mp4v", layout: str = "nv12") -> None:
        if workers < 1 or slots < 1:
            raise ConfigError("an encoder pool needs at least one worker and one slot")
        if width % 2 or height % 2:
            raise ConfigError("encoded frames need an even size, got %dx%d" % (width, height))
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.width, self.height, self.fps, self.workers = int(width), int(height), float(fps), int(workers)
        if layout not in ("nv12", "bgr"):
            raise ConfigError("encoder pool frames are nv12 or bgr, got %r" % (layout,))
        self.layout = layout
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
        for w in range(self.workers):
            mem = shared_memory.SharedMemory(create=True, size=self.slot_bytes * slots)
            tasks, free = ctx.Queue(), ctx.Queue()
            for k in range(slots):
                free.put(k)
            proc = ctx.Process(target=_worker_main, name="encoder-%d" % w, daemon=True,
                               args=(mem.name, self.slot_bytes, tasks, free, self._results, str(self.out_dir),
                                     self.width, self.height, self.fps, codec))
            proc.start()
            self._memories.append(mem)
            self._tasks.append(tasks)
            self._free.append(free)
            self._procs.append(proc)

    def _slot_view(self, worker: int, slot: int, nbytes: int) -> np.ndarray:
        buf = self._memories[worker].buf
        return np.ndarray((nbytes,), dtype=np.uint8, buffer=buf, offset=slot * self.slot_bytes)

    def submit(self, stream: int, image: np.ndarray, event: Optional[Dict[str, Any]] = None) -> None:
        """Queue one frame of ``stream`` (the pool's layout: NV12 (H*3/2, W) or BGR (H, W, 3) uint8) with its event
        for drawing."""
        if self._closed:
            raise StreamError("the encoder pool is closed")
        data = np.ascontiguousarray(image).reshape(-1)
        if data.size != self.slot_bytes:
            raise StreamError("frame of %d bytes for an encoder pool of %dx%d %s frames (%d bytes)"
                              % (data.size, self.width, self.height, self.layout, self.slot_bytes))
        w = stream % self.workers
        slot = self._wait_slot(w)
        self._slot_view(w, slot, data.size)[:] = data
        self._tasks[w].put((slot, int(stream), self.layout, data.size, _drawable(event)))
        self.submitted += 1

    def _wait_slot(self, worker: int) -> int:
        while True:
            try:
                return int(self._free[worker].get(timeout=5.0))
            except queue.Empty:
                if not self._procs[worker].is_alive():
                    raise StreamError("encoder worker %d stopped (exit code %s)"
                                      % (worker, self._procs[worker].exitcode)) from None

    def close(self) -> List[Dict[str, Any]]:
        """Finish every stream's file; per worker: frames written, CPU seconds, files."""
        if self._closed:
            return []
        self._closed = True
        for tasks in self._tasks:
            tasks.put(_STOP)
        results: List[Dict[str, Any]] = []
        for proc in self._procs:
            proc.join(timeout=120.0)
        while len(results) < len(self._procs):
            try:
                results.append(self._results.get(timeout=1.0))
            except queue.Empty:
                break
        for mem in self._memories:
            mem.close()
            mem.unlink()
        errors = [r["error"] for r in results if r.get("error")]
        if errors:
            raise StreamError("encoder worker failed: %s" % errors[0])
        return sorted(results, key=lambda r: r["worker"])

    def __enter__(self) -> "EncoderPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def _worker_main(mem_name: str, slot_bytes: int, tasks: Any, free: Any, results: Any, out_dir: str,
                 width: int, height: int, fps: float, codec: str) -> None:
    """One encoder process: NV12/BGR slots -> annotated frames -> one MP4 per stream it owns."""
    import cv2

    cv2.setNumThreads(1)
    mem = shared_memory.SharedMemory(name=mem_name)
    writers: Dict[int, Tuple[Any, Path, Path]] = {}
    frames, error = 0, ""
    c0 = time.process_time()
    try:
        while True:
            task = tasks.get()
            if task == _STOP:
                break
            slot, stream, layout, nbytes, draw = task
            raw = np.ndarray((nbytes,), dtype=np.uint8, buffer=mem.buf, offset=slot * slot_bytes)
            if layout == "nv12":
                image = cv2.cvtColor(raw.reshape(height * 3 // 2, width), cv2.COLOR_YUV2BGR_NV12)
            else:
                image = raw.reshape(height, width, 3).copy()
            del raw
            free.put(slot)
            _draw(cv2, image, draw)
            writer = writers.get(stream) or _open_writer(cv2, writers, stream, out_dir, width, height, fps, codec)
            writer[0].write(image)
            frames += 1
    except Exception as err:  # reported to the parent, which raises it as a StreamError
        error = "%s: %s" % (type(err).__name__, err)
    finally:
        files = []
        for writer, tmp, final in writers.values():
            writer.release()
            if not error:
                os.replace(str(tmp), str(final))
                files.append(str(final))
        mem.close()
        results.put({"worker": int(mp.current_process().name.split("-")[-1]), "frames": frames,
                     "cpu_s": time.process_time() - c0, "files": files, "error": error})


def _open_writer(cv2: Any, writers: Dict[int, Tuple[Any, Path, Path]], stream: int, out_dir: str, width: int,
                 height: int, fps: float, codec: str) -> Tuple[Any, Path, Path]:
    final = Path(out_dir) / ("stream_%d.mp4" % stream)
    tmp = final.with_name(final.stem + ".partial.mp4")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*codec), fps or 30.0, (width, height))
    if not writer.isOpened():
        raise RuntimeError("OpenCV cannot write %s with codec %s" % (tmp, codec))
    writers[stream] = (writer, tmp, final)
    return writers[stream]


def _draw(cv2: Any, image: np.ndarray, draw: Dict[str, Any]) -> None:
    for x1, y1, x2, y2 in draw.get("boxes", ()):
        cv2.rectangle(image, (int(x1), int(y1)), (int(x2), int(y2)), (0, 220, 0), 2)
    if draw.get("label"):
        cv2.putText(image, draw["label"], (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 3, cv2.LINE_AA)
        cv2.putText(image, draw["label"], (10, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 1, cv2.LINE_AA)


__all__ = ["EncoderPool"]
