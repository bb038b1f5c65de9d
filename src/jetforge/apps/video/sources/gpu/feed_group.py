"""Many sources read by ONE thread: :class:`SourceFeedGroup`, a stream group for ``run_streams``.

Why: with one decode thread per stream, 16 streams are 16 threads contending for the GIL with the thread that
launches each batch (on the H200 that thread spent 5-10x its CPU time waiting).  Here one feeder thread serves every
stream: round robin, it reads a fetch's worth of frames (PyNvVideoCodec's ThreadedDecoder decodes ahead in its own
native thread, so a read rarely waits) from each stream that has room in the batcher and hands them over in one
call.  The per-frame work is unchanged; what goes is the contention of 16 threads for one lock.  The alternative
that also removes the per-frame work from this process is :class:`~.ipc_decode.IpcDecodeGroup` (worker processes).

A stream has room when the batcher holds at most ``depth - fetch`` of its frames, so the feeder never blocks on one
full stream while others starve.  The sources' ``keep`` rings must hold the frames waiting in the batcher, those in
flight and one fetch: give them ``depth + in_flight x per_stream + fetch`` slots or more.
"""

import time
from typing import Any, Iterator, List, Sequence

from jetforge.errors import ConfigError


class SourceFeedGroup:
    """``sources`` (each with ``read()``, ``close()`` and ``fetch``; frames numbered by stream) fed by one thread."""

    def __init__(self, sources: Sequence[Any], depth: int = 8) -> None:
        if not sources:
            raise ConfigError("a feed group needs at least one source")
        self.sources: List[Any] = list(sources)
        self.streams = len(self.sources)
        self.fetch = max(int(getattr(src, "fetch", 1)) for src in self.sources)
        if depth < self.fetch:
            raise ConfigError("feed group depth %d is less than one fetch (%d frames)" % (depth, self.fetch),
                              hint="make depth at least the sources' fetch")
        self.depth = int(depth)

    def feed(self, batcher: Any) -> None:
        """Read every stream round robin into ``batcher`` until all have ended or it is stopped."""
        open_streams = list(range(self.streams))
        try:
            while open_streams and not batcher.stopped:
                progressed = False
                for s in list(open_streams):
                    if self.depth - batcher.waiting(s) < self.fetch:
                        continue  # this stream is ahead: the others go first
                    frames = self._read(s)
                    if frames and not batcher.put_many(s, frames):
                        return
                    if len(frames) < self.fetch:
                        open_streams.remove(s)
                        batcher.close(s)
                    progressed = True
                if not progressed:
                    time.sleep(0.0002)  # every stream is full: let the launch thread take a batch
        finally:
            for s in open_streams:
                batcher.close(s)

    def _read(self, s: int) -> List[Any]:
        src, frames = self.sources[s], []
        for _ in range(self.fetch):
            frame = src.read()
            if frame is None:
                break
            frames.append(frame)
        return frames

    # A sequence of its sources, so that code written for a list of sources takes the group as it is.
    def __len__(self) -> int:
        return self.streams

    def __getitem__(self, s: int) -> Any:
        return self.sources[s]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.sources)

    def release(self, frames: Sequence[Any]) -> None:
        """Nothing to do: the sources' rings are sized for the frames in the pipeline (module docstring)."""

    def close(self) -> None:
        for src in self.sources:
            src.close()

    def __enter__(self) -> "SourceFeedGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["SourceFeedGroup"]
