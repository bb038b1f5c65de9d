"""NVDEC in worker processes, frames handed to the pipeline through CUDA IPC: :class:`IpcDecodeGroup`.

Why: one process decoding 16 streams runs 16 threads of per-frame Python (fetching from the decoder, wrapping, the
owned copy, the batcher) under the same GIL as the thread that launches each batch; on the H200 that thread spent
5-10x its CPU time waiting for the GIL, and 16 streams reached 0.68x of NVDEC's rate.  Here each worker process
(``streams_per_worker`` streams) runs PyNvVideoCodec's ThreadedDecoder per stream (:class:`.nvdec_threaded.
NvThreadedSource`) and copies every frame into its stream's ring of device buffers (:mod:`.ipc_ring`); the
pipeline's process maps the rings once and receives only ``(stream, frame index, slot, capture time)`` rows, several
frames a message, read by ONE feeder thread that puts them into the batcher a stream's run at a time.  The per-frame
work left in the pipeline's process is building a frame record and one batcher call per few frames.

The protocol (one pipe per worker, worker -> pipeline; shared integer arrays both ways):

* the worker opens and primes its sources (decoder start-up is not timed), sends ``ready`` with each stream's facts
  and ring description, and waits for ``go`` (set when the run starts);
* then, round robin over its streams, it decodes while it has credit - frame ``i`` goes to slot ``i % slots`` only
  when ``i < released[s] + slots`` (``released[s]``: frames of stream ``s`` the pipeline has finished with, written
  by :meth:`IpcDecodeGroup.release`) - waits for its copies, and sends the pass's rows in one message (``F`` +
  float64 rows); a stream's end is a row with index -1; an error is a ``C`` message;
* :meth:`IpcDecodeGroup.close` unmaps the rings, then sets ``stop``: only then does a worker free them.

``codec="nvdec"`` is PyNvVideoCodec on the GPU, executed only by ``benchmarks/gpu_pipeline/pipeline_gpu.py`` (variants
``ipc-*``).  Any other ``codec`` is an object shaped like the PyNvVideoCodec module, injected by the caller: tests pass
the CPU stand-in ``tests/standins/fake_nvdec.py``'s ``FakeNvDecoder`` (frames in host memory, so host shared memory
stands in for device memory, named so in the rings: ``kind: "host"``).  It reaches the spawned workers pickled by
reference, so it must be importable by its module and name there; no codec name here selects a stand-in.
"""

import multiprocessing as mp
import os
import pickle
import time
from multiprocessing.connection import wait as wait_for_connections
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.apps.video.sources.gpu.frame import GpuFrame
from jetforge.apps.video.sources.gpu.ipc_ring import ExportedRing, ImportedRing
from jetforge.errors import ConfigError, StreamError

GO, STOP = 0, 1  # indexes of the shared flags
ROW = 4  # stream, frame index (-1: the stream ended), slot, capture time (time.perf_counter: CLOCK_MONOTONIC)
NVDEC = "nvdec"  # PyNvVideoCodec; any other codec is an injected module-shaped object (see the module docstring)


class IpcDecodeGroup:
    """N video files decoded by worker processes (``streams_per_worker`` streams each) into shared frame rings.

    A *stream group* for :func:`jetforge.apps.pipeline.streams.run_streams`: ``streams``, ``depth``,
    :meth:`feed` (one thread puts every stream's frames into the batcher), :meth:`release` (frames done with),
    :meth:`worker_cpu_s`.  Use as a context manager or call :meth:`close`."""

    def __init__(self, paths: Sequence[Any], streams_per_worker: int = 4, slots: int = 16, fetch: int = 4,
                 buffer_size: int = 12, loop: bool = False, max_frames: int = 0, codec: Any = NVDEC,
                 gpu_id: int = 0, start_timeout_s: float = 120.0) -> None:
        if not paths:
            raise ConfigError("an IPC decode group needs at least one video")
        if streams_per_worker < 1 or fetch < 1 or slots < 2 * fetch:
            raise ConfigError("streams_per_worker and fetch must be >= 1 and slots >= 2 x fetch; got %d, %d, %d"
                              % (streams_per_worker, fetch, slots), hint="e.g. 4 streams a worker, fetch 4, 16 slots")
        if isinstance(codec, str) and codec != NVDEC:
            raise ConfigError("unknown decoder %r for the IPC decode group" % (codec,),
                              hint="%r, or a PyNvVideoCodec-shaped module object" % NVDEC)
        self.paths = [str(Path(p)) for p in paths]
        for p in self.paths:
            if not Path(p).is_file():
                raise StreamError("no such video file: %s" % p, hint="check the path of the video (--source)")
        self.streams, self.slots, self.fetch = len(self.paths), int(slots), int(fetch)
        self.depth = self.slots  # the batcher may hold every announced frame: the feeder never blocks on one stream
        self.codec, self.per_worker = codec, int(streams_per_worker)
        self._ctx = mp.get_context("spawn")  # no fork of a process that holds CUDA contexts and threads
        self._released = self._ctx.RawArray("q", self.streams)
        self._flags = self._ctx.RawArray("i", 2)
        self._rings: List[Optional[ImportedRing]] = [None] * self.streams
        self.infos: List[Dict[str, Any]] = [{} for _ in range(self.streams)]
        self._fixed: List[Dict[str, Any]] = [{} for _ in range(self.streams)]  # each stream's constant frame fields
        self._procs: List[Any] = []
        self._conns: List[Any] = []
        self._closed = False
        groups = [list(range(i, min(i + streams_per_worker, self.streams)))
                  for i in range(0, self.streams, streams_per_worker)]
        try:
            for w, group in enumerate(groups):
                recv, send = self._ctx.Pipe(duplex=False)
                jobs = [(s, self.paths[s]) for s in group]
                proc = self._ctx.Process(target=_decode_worker, name="decode-worker-%d" % w, daemon=True,
                                         args=(send, jobs, self.slots, self.fetch, int(buffer_size), bool(loop),
                                               int(max_frames), codec, int(gpu_id), self._released, self._flags,
                                               os.getpid()))
                proc.start()
                send.close()  # this process only reads; the worker's end closing is then seen as EOF
                self._procs.append(proc)
                self._conns.append(recv)
            for w, conn in enumerate(self._conns):
                self._wait_ready(w, conn, start_timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        return len(self._procs)

    # A sequence of per-stream views, so that code written for a list of sources (the app's outputs and metrics,
    # closing every source) takes the group as it is; closing any view closes the group.
    def __len__(self) -> int:
        return self.streams

    def __getitem__(self, s: int) -> "GroupStream":
        if not -self.streams <= s < self.streams:
            raise IndexError(s)
        return GroupStream(self, s % self.streams)

    def __iter__(self) -> Iterator["GroupStream"]:
        return (GroupStream(self, s) for s in range(self.streams))

    def _wait_ready(self, w: int, conn: Any, timeout_s: float) -> None:
        if not conn.poll(timeout_s):
            raise StreamError("decode worker %d did not start within %.0f s" % (w, timeout_s),
                              hint="check the decoder (PyNvVideoCodec, the GPU) or raise start_timeout_s")
        kind, payload = _control(_recv(conn, w))
        if kind != "ready":
            raise StreamError("decode worker %d failed: %s" % (w, payload),
                              hint="NVDEC decodes H.264/HEVC/AV1/VP9; convert the file, or use --decode cpu")
        for info in payload:
            s = info.pop("stream")
            ring = self._rings[s] = ImportedRing(info.pop("ring"))
            self.infos[s] = info
            self._fixed[s] = {"width": info["width"], "height": info["height"], "matrix": info["matrix"],
                              "full_range": info["full_range"], "stream": s, "on_host": ring.on_host, "layout": "nv12"}

    # ------------------------------------------------------------------------------------------- the run
    def feed(self, batcher: Any) -> None:
        """Start the workers and put every announced frame into ``batcher`` (``put_many``/``close``) until every
        stream has ended or the batcher is stopped.  Runs in one thread of the pipeline's process."""
        self._flags[GO] = 1
        open_streams = set(range(self.streams))
        conns = {conn: w for w, conn in enumerate(self._conns)}
        try:
            while open_streams and not batcher.stopped:
                ready = wait_for_connections(list(conns), timeout=0.02)
                if not ready:
                    self._check_workers(open_streams)  # nothing came for 20 ms: has a worker died?
                for conn in ready:
                    w = conns[conn]
                    try:
                        data = _recv(conn, w)
                    except StreamError:
                        del conns[conn]
                        if not conns or self._procs[w].exitcode not in (None, 0):
                            raise
                        continue
                    if data[:1] == b"C":
                        raise StreamError("decode worker %d failed: %s" % (w, _control(data)[1]))
                    if not self._put_rows(data, batcher, open_streams):
                        return
        finally:
            for s in open_streams:
                batcher.close(s)

    def _put_rows(self, data: bytes, batcher: Any, open_streams: set) -> bool:
        """One message's rows into the batcher, each stream's consecutive frames in one call; False: stopped."""
        rows = np.frombuffer(data, dtype=np.float64, offset=1).reshape(-1, ROW).tolist()
        i = 0
        while i < len(rows):
            s, frames, ended = int(rows[i][0]), [], False
            while i < len(rows) and int(rows[i][0]) == s:
                _, index, slot, captured = rows[i]
                if index < 0:
                    ended = True
                else:
                    frames.append(self._frame(s, int(index), int(slot), captured))
                i += 1
            if frames and not batcher.put_many(s, frames):
                return False
            if ended:
                batcher.close(s)
                open_streams.discard(s)
        return True

    def _frame(self, s: int, index: int, slot: int, captured: float) -> GpuFrame:
        """The :class:`GpuFrame` of one announced frame.  Built from the stream's fixed fields without the frozen
        dataclass's ``__init__`` (one ``object.__setattr__`` per field: ~7 us, a third of this thread's work per
        frame on the CPU study, benchmarks/gpu_pipeline/pipeline_gpu_host.py); the result is the same frozen record."""
        ring = self._rings[s]
        data, y_ptr, uv_ptr, pitch = ring.frame_planes(slot)  # type: ignore[union-attr]
        fixed = self._fixed[s]
        frame = object.__new__(GpuFrame)
        fields = frame.__dict__
        fields.update(fixed)
        fps = self.infos[s]["fps"]
        fields.update(index=index, timestamp=index / fps if fps else 0.0, data=data, y_ptr=y_ptr, uv_ptr=uv_ptr,
                      pitch=pitch, captured=captured)
        return frame

    def _check_workers(self, open_streams: set) -> None:
        for w, proc in enumerate(self._procs):
            if proc.exitcode not in (None, 0) and open_streams:
                raise StreamError("decode worker %d exited with code %s" % (w, proc.exitcode),
                                  hint="see its error above; a crash in the decoder or the GPU driver")

    def release(self, frames: Sequence[Any]) -> None:
        """The pipeline is done with ``frames`` (finished in order): their slots may be written again."""
        released = self._released
        for f in frames:
            released[f.stream] = f.index + 1

    def worker_cpu_s(self) -> float:
        """User + system CPU seconds of the worker processes so far (Linux ``/proc``; 0.0 where unreadable)."""
        return sum(_proc_cpu_s(p.pid) for p in self._procs if p.pid is not None)

    # ------------------------------------------------------------------------------------------- the end
    def close(self) -> None:
        """Unmap the rings (after any GPU work reading them), then let the workers free them and exit."""
        if self._closed:
            return
        self._closed = True
        if any(r is not None and not r.on_host for r in self._rings):
            from jetforge.runtime.cuda.bindings import synchronize_device

            synchronize_device()  # no kernel may still read a ring when it is unmapped
        for ring in self._rings:
            if ring is not None:
                ring.close()
        self._rings = [None] * self.streams
        self._flags[STOP] = 1
        for proc in self._procs:
            proc.join(timeout=10.0)
            if proc.is_alive():  # a hung decoder must not hang the pipeline's exit
                proc.terminate()
                proc.join(timeout=2.0)
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> "IpcDecodeGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GroupStream:
    """One stream of an :class:`IpcDecodeGroup` as a source description: ``uri``, ``path``, size, rate, ``info()``."""

    live = False

    def __init__(self, group: IpcDecodeGroup, stream: int) -> None:
        self.group, self.stream = group, stream
        info = group.infos[stream]
        self.path, self.uri = Path(group.paths[stream]), info["uri"]
        self.width, self.height, self.fps = info["width"], info["height"], info["fps"]
        self.matrix, self.full_range = info["matrix"], info["full_range"]

    def info(self) -> Dict[str, Any]:
        return {"uri": self.uri, "width": self.width, "height": self.height, "fps": self.fps,
                "decoder": "nvdec (worker process %d of %d, CUDA IPC)" % (self.stream // self.group.per_worker,
                                                                          self.group.workers)
                if self.group.codec == NVDEC
                else "%s (worker process, host shared memory)" % _codec_name(self.group.codec),
                "matrix": self.matrix, "full_range": self.full_range}

    def close(self) -> None:
        self.group.close()


def _recv(conn: Any, w: int) -> bytes:
    try:
        return conn.recv_bytes()
    except (EOFError, OSError):
        raise StreamError("decode worker %d ended without a word" % w,
                          hint="it crashed (the decoder or the GPU driver); run with --decode gpu and one stream "
                               "to see its error") from None


def _control(data: bytes) -> Tuple[str, Any]:
    return pickle.loads(data[1:]) if data[:1] == b"C" else ("frames", None)


def _proc_cpu_s(pid: int) -> float:
    try:
        fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0.0


# ------------------------------------------------------------------------------------------- the worker process
class _LazyRing:
    """A keep hook that makes the stream's :class:`ExportedRing` at the first frame (its size and memory kind:
    device frames from NVDEC, host frames from the CPU stand-in)."""

    def __init__(self, slots: int) -> None:
        self.slots, self.ring = slots, None

    def __call__(self, decoded: Any, width: int, height: int) -> Any:
        if self.ring is None:
            self.ring = ExportedRing(width, height, self.slots, on_host=bool(getattr(decoded, "on_host", False)))
        return self.ring(decoded, width, height)


def _decode_worker(conn: Any, jobs: List[Tuple[int, str]], slots: int, fetch: int, buffer_size: int, loop: bool,
                   max_frames: int, codec: Any, gpu_id: int, released: Any, flags: Any, parent: int) -> None:
    """A worker process: open and prime its streams, say ready, decode with credit until stopped (module doc)."""
    sources: List[Tuple[int, Any, _LazyRing]] = []
    try:
        try:
            sources = _open_sources(jobs, slots, fetch, buffer_size, loop, max_frames, codec, gpu_id)
            conn.send_bytes(b"C" + pickle.dumps(("ready", [_describe(s, src, ring) for s, src, ring in sources])))
        except BaseException as err:  # sent to the pipeline, which raises it as one StreamError
            _send_error(conn, err)
            return
        while not flags[GO] and not flags[STOP] and os.getppid() == parent:
            time.sleep(0.001)
        try:
            _decode_loop(conn, sources, slots, released, flags, parent)
        except BaseException as err:
            _send_error(conn, err)
        while not flags[STOP] and os.getppid() == parent:  # the rings stay until the pipeline has unmapped them
            time.sleep(0.005)
    except (BrokenPipeError, EOFError, OSError):
        pass  # the pipeline's process has gone: nothing to tell it
    finally:
        for _, src, ring in sources:
            src.close()
            if ring.ring is not None:
                ring.ring.close()


def _send_error(conn: Any, err: BaseException) -> None:
    conn.send_bytes(b"C" + pickle.dumps(("error", "%s: %s" % (type(err).__name__, err))))


def _open_sources(jobs: List[Tuple[int, str]], slots: int, fetch: int, buffer_size: int, loop: bool,
                  max_frames: int, codec: Any, gpu_id: int) -> List[Tuple[int, Any, _LazyRing]]:
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    module: Any = None if codec == NVDEC else codec  # None: NvThreadedSource loads PyNvVideoCodec
    out = []
    for s, path in jobs:
        ring = _LazyRing(slots)
        src = NvThreadedSource(path, gpu_id=gpu_id, stream=s, codec_module=module, keep=ring, loop=loop,
                               max_frames=max_frames,
                               # a worker opens its sources once and closes them as it ends (then os._exit):
                               # nothing to reuse, and its decoders ended on close as before the pool
                               options=ThreadedDecodeOptions(buffer_size=buffer_size, fetch=fetch,
                                                             reuse_decoders=False))
        out.append((s, src, ring))
        src.prime()  # the first fetch: decoder start-up before the run; frames 0..fetch-1 are in slots already
        if ring.ring is None:
            raise StreamError("%s has no frames" % path)
        ring.ring.flush()
    return out


def _describe(s: int, src: Any, ring: _LazyRing) -> Dict[str, Any]:
    return {"stream": s, "ring": ring.ring.describe(), "width": src.width, "height": src.height,  # type: ignore
            "fps": src.fps, "matrix": src.matrix, "full_range": src.full_range, "uri": src.uri}


def _decode_loop(conn: Any, sources: List[Tuple[int, Any, _LazyRing]], slots: int, released: Any, flags: Any,
                 parent: int) -> None:
    """Round robin over the streams, up to ``fetch`` frames a stream a pass within its credit; one message a pass."""
    open_streams = {s for s, _, _ in sources}
    while open_streams and not flags[STOP]:
        rows: List[float] = []
        for s, src, ring in sources:
            if s not in open_streams:
                continue
            copied_before = ring.ring.copied  # type: ignore[union-attr]
            for _ in range(src.fetch):
                if not src.buffered and src.copied + src.fetch > released[s] + slots:
                    break  # no free slots for a new fetch: wait for the pipeline to release frames
                frame = src.read()
                if frame is None:
                    rows += (s, -1.0, -1.0, 0.0)
                    open_streams.discard(s)
                    break
                rows += (s, float(frame.index), float(frame.data.slot), frame.captured)
            if ring.ring.copied != copied_before:  # type: ignore[union-attr]
                ring.ring.flush()  # type: ignore[union-attr]  # complete in memory before it is announced
        if rows:
            conn.send_bytes(b"F" + np.asarray(rows, dtype=np.float64).tobytes())
        elif os.getppid() != parent:
            return
        else:
            time.sleep(0.0002)


def _codec_name(codec: Any) -> str:
    """An injected codec's name for the sources' ``decoder`` field (its class or module name)."""
    return str(getattr(codec, "__name__", type(codec).__name__))


__all__ = ["GroupStream", "IpcDecodeGroup", "NVDEC"]
