"""NVDEC with demuxing and decoding in the library's own native thread: :class:`NvThreadedSource`.

Why: with one Python thread per stream calling the demuxer and ``Decode`` for every packet, 16 streams are 16
threads taking the GIL thousands of times a second; the H200 runs showed the pipeline's launch thread waiting for
the GIL, not for the GPU (16 streams at 0.47x of NVDEC's rate).  PyNvVideoCodec's ``ThreadedDecoder`` demuxes and
decodes in a C++ thread into a buffer of ``buffer_size`` frames; Python fetches them ``fetch`` at a time
(``get_batch_frames``), so the per-packet Python calls disappear.  Every fetched frame is handed to ``keep`` at
once (an owned copy: the decoder's buffer is reused), then served one by one like :class:`.nvdec.NvDecSource`.

API used (PyNvVideoCodec 2.x): ``ThreadedDecoder(path, buffer_size, gpu_id=, use_device_memory=True)``,
``get_batch_frames(n)`` (an empty list at the end), ``reconfigure_decoder(path)`` (start again: ``loop``),
``end()``.  The stream's size, rate and colour description come from a demuxer opened once, as NvDecSource reads
them.  Executed on the H200 by ``benchmarks/gpu_pipeline/pipeline_gpu.py`` (variant ``threaded``) only.

``copy_ahead``: with a keep hook that can launch its copies and wait for them apart (``launch()``/``wait()``:
:class:`~.device_ring.DeviceFrameRing`), the next fetch is taken and its copies launched as soon as a fetch is handed
out, and waited for only when its frames are handed out in turn, one fetch later.  Why: with a model's kernels
on the GPU the copies of a fetch queue behind them, and a feeder serving 16 streams that waits for each fetch's
copies right away is not fetching meanwhile; a fetch later, they are long done.  A decoder's frames stay valid until
its next ``get_batch_frames``, which comes only after their copies were waited for, so nothing is read after the
decoder reused it.  The ring holds one more fetch per stream (give it ``fetch`` more slots).
"""

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, Optional, Union

from jetforge.apps.video.sources.gpu.decoder_pool import POOL, end_decoder
from jetforge.apps.video.sources.gpu.frame import GpuFrame, GpuFrameReader, full_range_from_code, matrix_from_code
from jetforge.apps.video.sources.gpu import nvdec as nvdec
from jetforge.apps.video.sources.gpu.nvdec import KeepHook, _call, _call_first, frame_from_decoded
from jetforge.errors import ConfigError, StreamError
from jetforge.fileio import require_file
from jetforge.runtime.cuda.stream import check_priority

DEFAULT_FETCH = 4  # frames a get_batch_frames call takes: one wait (and one copy launch) per 4 frames


@dataclass(frozen=True)
class ThreadedDecodeOptions:
    """How an :class:`NvThreadedSource` decodes: one value, so that the app, the worker processes and the benchmark's
    variants hand the same tuning around instead of a growing list of keyword arguments.

    ``buffer_size``: frames the ThreadedDecoder decodes ahead; ``fetch``: frames a ``get_batch_frames`` call takes
    (at most ``buffer_size``); ``copy_ahead``: each fetch's owned copies waited for a fetch later (module docstring);
    ``decoder_priority``: the decoder's own GPU work on a stream of this priority ("default": the decoder's default
    stream); ``reuse_decoders``: a closed source's decoder goes to the process's pool and the next source made the
    same way points it at its own file, instead of an end() and a new decoder (:mod:`.decoder_pool`: the churn that
    killed processes)."""

    buffer_size: int = 12
    fetch: int = DEFAULT_FETCH
    copy_ahead: bool = False
    decoder_priority: str = "default"
    reuse_decoders: bool = True

    def __post_init__(self) -> None:
        if int(self.buffer_size) < 1 or int(self.fetch) < 1:
            raise ConfigError("a threaded decoder needs buffer_size and fetch of at least 1 frame (got %s and %s)"
                              % (self.buffer_size, self.fetch))
        check_priority(self.decoder_priority, "decoder stream priority")

    @property
    def frames_per_fetch(self) -> int:
        """The frames one fetch takes: ``fetch``, at most the decoder's buffer."""
        return min(int(self.fetch), int(self.buffer_size))


def ring_slots_for(slots: int, copy_ahead: bool, fetch: int = DEFAULT_FETCH) -> int:
    """The owned-copy ring a source needs: ``slots`` (the frames a pipeline holds), and with ``copy_ahead`` the fetch
    copied ahead as well."""
    return int(slots) + (int(fetch) if copy_ahead else 0)


class NvThreadedSource(GpuFrameReader):
    """A video file decoded by NVDEC in PyNvVideoCodec's background thread; yields :class:`GpuFrame` (NV12)."""

    live = False

    def __init__(self, path: Union[str, "os.PathLike[str]"], gpu_id: int = 0, stream: int = 0,
                 codec_module: Optional[Any] = None, keep: Optional[KeepHook] = None, loop: bool = False,
                 max_frames: int = 0, options: Optional[ThreadedDecodeOptions] = None) -> None:
        self.options = options = options if options is not None else ThreadedDecodeOptions()
        apart = callable(getattr(keep, "launch", None)) and callable(getattr(keep, "wait", None))
        if options.copy_ahead and not apart:
            raise ConfigError("copying a fetch ahead needs a keep hook that launches its copies and waits for them "
                              "apart (launch() and wait())",
                              hint="give NvThreadedSource keep=DeviceFrameRing(defer_sync=True), or copy_ahead=False")
        self.path = require_file(path, "video file", hint="check the path of the video (--source)")
        self.uri = "nvdec://" + str(self.path)
        self._nvc = codec_module if codec_module is not None else nvdec.load_pynvvideocodec()
        self.gpu_id, self.stream, self.loop, self.max_frames = int(gpu_id), int(stream), bool(loop), int(max_frames)
        # decoder_priority "high": the decoder's own GPU work (mapping each decoded picture and copying it into its
        # buffer, on the stream it is given) on a stream of the device's greatest priority, so that it does not
        # queue behind a model's kernels for the SMs; "default": the decoder's default (the legacy stream)
        self.decoder_priority = options.decoder_priority
        self._decoder_stream: Optional[Any] = None
        self._keep, self.fetch = keep, options.frames_per_fetch
        self._buffer_size = int(options.buffer_size)
        self._pending: Deque[GpuFrame] = deque()
        self.copy_ahead = bool(options.copy_ahead)
        self._ahead: Deque[GpuFrame] = deque()  # copy_ahead: the next fetch, its copies launched, not yet waited for
        self._index, self.passes, self._failed = 0, 1, False
        self.reset_waits()
        try:
            demuxer = self._nvc.CreateDemuxer(filename=str(self.path))  # the stream's facts, read once
            self.width = int(_call_first(demuxer, ("Width", "GetWidth")))
            self.height = int(_call_first(demuxer, ("Height", "GetHeight")))
            fps = float(demuxer.FrameRate() or 0.0)
            self.matrix = matrix_from_code(_call(demuxer, "ColorSpace"), self.height)
            self.full_range = full_range_from_code(_call(demuxer, "ColorRange"))
            del demuxer
            self._decoder = self._reuse_or_open_decoder()
        except (RuntimeError, ValueError, OSError) as err:
            if self._decoder_stream is not None:  # made for a decoder that did not open
                self._decoder_stream.close()
                self._decoder_stream = None
            raise StreamError("NVDEC cannot decode %s: %s" % (self.path, err),
                              hint="NVDEC decodes H.264/HEVC/AV1/VP9; convert the file, or use --decode cpu") from None
        self.fps = fps if 0.0 < fps < 1000.0 else 0.0
        self.frame_count: Optional[int] = None

    def _decoder_stream_arg(self) -> Dict[str, Any]:
        if self.decoder_priority == "default":
            return {}
        from jetforge.runtime.cuda import Stream

        self._decoder_stream = Stream(priority=self.decoder_priority)
        return {"cuda_stream": int(self._decoder_stream)}

    def _pool_key(self) -> Any:
        """How this source's decoder was made: only a decoder made the same way is reused for it."""
        return (self._nvc, self.gpu_id, self._buffer_size, self.decoder_priority)

    def _reuse_or_open_decoder(self) -> Any:
        """An idle decoder of the pool pointed at this file (``reconfigure_decoder``), else a new one."""
        pooled = POOL.take(self._pool_key()) if self.options.reuse_decoders else None
        if pooled is None:
            return self._nvc.ThreadedDecoder(str(self.path), self._buffer_size, gpu_id=self.gpu_id,
                                             use_device_memory=True, **self._decoder_stream_arg())
        decoder, self._decoder_stream = pooled
        try:
            decoder.reconfigure_decoder(str(self.path))
        except BaseException:  # not pooled again: a decoder that failed is ended, its stream closed
            stream, self._decoder_stream = self._decoder_stream, None
            end_decoder(decoder, stream)
            raise
        return decoder

    def _restart(self) -> None:
        """The clip again (``loop``), by pointing the decoder at it again: no copy still reads the old pass's frames
        here (each fetch's copies were waited for before this fetch).  Never end() and a new decoder: that killed the
        process on an H100 within 1-13 rounds of 16 decoders (``benchmarks/gpu_pipeline/decoder_churn.py``), where
        ``reconfigure_decoder`` survived 1,920 restarts."""
        self._decoder.reconfigure_decoder(str(self.path))
        self.passes += 1

    def reset_waits(self) -> None:
        """Zero the counters of where a reader's time goes (two clock reads a fetch): ``decode_wait_s`` in
        get_batch_frames for decoded frames, ``copy_wait_s`` in the keep hook's once-a-fetch wait for the owned
        copies, over ``fetches`` fetches -- the feeder's per-stage split (a benchmark resets them after priming)."""
        self.fetches, self.decode_wait_s, self.copy_wait_s = 0, 0.0, 0.0

    def prime(self) -> None:
        """Fetch the first frames, so that decoder start-up is not counted in a timed run."""
        self._refill()

    def _refill(self) -> bool:
        if self.copy_ahead:
            return self._refill_ahead()
        if not self._fetch(self._pending):
            return False
        self._timed_wait(getattr(self._keep, "flush", None))  # a hook that waits once per fetch: copies complete
        return True

    def _refill_ahead(self) -> bool:
        """Hand out the fetch copied ahead (waiting for its copies, by now usually done), then fetch the next one and
        launch its copies without waiting (module docstring)."""
        if not self._ahead and not self._fetch_ahead():
            return False
        self._timed_wait(self._keep.wait)
        self._pending.extend(self._ahead)
        self._ahead.clear()
        self._fetch_ahead()  # the end of the stream is found at the next refill, with nothing ahead
        return True

    def _fetch_ahead(self) -> bool:
        if not self._fetch(self._ahead):
            return False
        self._keep.launch()
        return True

    def _fetch(self, into: Deque[GpuFrame]) -> bool:
        """The next ``fetch`` frames, each handed to ``keep`` (its owned copy, made or queued), appended to ``into``;
        False at the end of a stream that does not loop."""
        while True:
            t0 = time.perf_counter()
            try:
                frames = self._decoder.get_batch_frames(self.fetch)
            except BaseException:
                self._failed = True  # its decoder is ended at close, not pooled
                raise
            now = time.perf_counter()
            self.decode_wait_s += now - t0
            if frames:
                self.fetches += 1
                into.extend(self._wrap(f, now) for f in frames)
                return True
            if not self.loop:
                return False
            self._restart()

    def _timed_wait(self, wait: Optional[Any]) -> None:
        if callable(wait):
            t0 = time.perf_counter()
            wait()
            self.copy_wait_s += time.perf_counter() - t0

    def read(self) -> Optional[GpuFrame]:
        if self.max_frames and self._index >= self.max_frames:
            return None
        if not self._pending and not self._refill():
            return None
        frame = self._pending.popleft()
        self._index += 1
        return frame

    @property
    def copied(self) -> int:
        """Frames taken from the decoder so far (read, fetched and waiting, or copied ahead): the next frame's
        index."""
        return self._index + len(self._pending) + len(self._ahead)

    @property
    def buffered(self) -> int:
        """Frames fetched (and kept) but not yet read: a read with none buffered fetches up to ``fetch`` more."""
        return len(self._pending)

    def _wrap(self, decoded: Any, captured: float) -> GpuFrame:
        return frame_from_decoded(self, decoded, self.copied, captured)

    def close(self) -> None:
        if self._ahead:  # copies still reading the decoder's frames: done before the decoder ends
            self._keep.wait()
        self._pending.clear()
        self._ahead.clear()
        decoder, self._decoder = getattr(self, "_decoder", None), None
        stream, self._decoder_stream = getattr(self, "_decoder_stream", None), None
        if decoder is not None:
            if self.options.reuse_decoders and not self._failed:
                POOL.give(self._pool_key(), decoder, stream)  # for the next source made this way
            else:
                end_decoder(decoder, stream)  # the stream after the decoder that used it
        release = getattr(self._keep, "close", None)
        if callable(release):
            release()

    def info(self) -> Dict[str, Any]:
        return {"uri": self.uri, "width": self.width, "height": self.height, "fps": self.fps,
                "decoder": "nvdec (threaded)", "matrix": self.matrix, "full_range": self.full_range,
                "gpu_id": self.gpu_id}


__all__ = ["DEFAULT_FETCH", "NvThreadedSource", "ThreadedDecodeOptions", "ring_slots_for"]
