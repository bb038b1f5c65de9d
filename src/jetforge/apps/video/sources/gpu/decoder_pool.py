"""Idle PyNvVideoCodec ThreadedDecoders kept for reuse: :class:`ThreadedDecoderPool`, one per process (:data:`POOL`).

Why: ending a ThreadedDecoder and making a new one, over and over in one process, kills the process.
``benchmarks/gpu_pipeline/decoder_churn.py`` on an H100 (PyNvVideoCodec 2.2.4, 2026-12-07) ran 16 decoders that were
ended and made again each round: the process died in 3 runs of 3, within 1 to 13 rounds (SIGABRT with
``malloc(): unaligned tcache chunk detected``; an uncaught ``PyNvVCException`` in ``HandlePictureDisplay``; SIGSEGV).
The same 16 decoders pointed at their file again with ``reconfigure_decoder`` survived 120 rounds (1,920 restarts)
in 2 runs of 2, and the control that never restarts survived too.  The GPU-path benchmark, which closes and opens
sources between its points, had died the same ways in 5 of ~18 device calls.

So a closed NvThreadedSource hands its decoder here instead of ending it, and the next source made the same way takes
it and points it at its own file with ``reconfigure_decoder`` (PyNvVideoCodec's documented way to decode a new source
with an existing decoder).  Decoders are only ended when the pool is full (:attr:`ThreadedDecoderPool.limit`),
drained, or the process exits normally (``atexit``).  An idle decoder keeps decoding ahead into its buffer until it
is full, then waits; it holds that buffer's GPU memory until it is reused or ended.

A decoder made on a stream of its own (``decoder_priority="high"``) is pooled with that stream: the stream is closed
only after the decoder that uses it is ended.
"""

import atexit
import threading
from typing import Any, Dict, Hashable, List, Optional, Tuple

DEFAULT_LIMIT = 64  # idle decoders a process keeps (the benchmark's largest point opens 32 streams)

Pooled = Tuple[Any, Optional[Any]]  # (decoder, the stream it was made on, or None)


class ThreadedDecoderPool:
    """Idle decoders by how they were made (``key``: the codec module itself, GPU, buffer size, stream
    priority)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = int(limit)
        self._idle: Dict[Hashable, List[Pooled]] = {}
        self._lock = threading.Lock()
        self.reused = 0  # decoders handed out again: how often an end() + new was avoided

    def take(self, key: Hashable) -> Optional[Pooled]:
        """An idle decoder made as ``key`` says (and its stream), or None: the caller makes a new one."""
        with self._lock:
            idle = self._idle.get(key)
            if not idle:
                return None
            self.reused += 1
            return idle.pop()

    def give(self, key: Hashable, decoder: Any, stream: Optional[Any] = None) -> None:
        """Keep ``decoder`` for the next source made as ``key`` says; a full pool ends it (and closes its stream)."""
        with self._lock:
            if self.idle_count() < self.limit:
                self._idle.setdefault(key, []).append((decoder, stream))
                return
        end_decoder(decoder, stream)

    def idle_count(self) -> int:
        return sum(len(v) for v in self._idle.values())

    def drain(self) -> int:
        """End every idle decoder (and close its stream): the number ended."""
        with self._lock:
            idle = [p for v in self._idle.values() for p in v]
            self._idle.clear()
        for decoder, stream in idle:
            end_decoder(decoder, stream)
        return len(idle)


def end_decoder(decoder: Any, stream: Optional[Any] = None) -> None:
    """End a decoder, then close the stream it was made on (after it: the decoder used it until it ended)."""
    if hasattr(decoder, "end"):
        decoder.end()
    if stream is not None:
        stream.close()


POOL = ThreadedDecoderPool()
# At a normal exit the idle decoders are ended (their native threads stopped) before the interpreter tears down, as
# each source's close did before the pool, rather than left to destructors during finalisation.
atexit.register(POOL.drain)

__all__ = ["DEFAULT_LIMIT", "POOL", "ThreadedDecoderPool", "end_decoder"]
