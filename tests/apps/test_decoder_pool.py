"""The process's ThreadedDecoder pool (``decoder_pool.POOL``) on the CPU stand-in decoder: a closed NvThreadedSource's
decoder is pointed at the next source's file instead of being ended and made again (the churn that killed processes
on an H100: results/nvidia-h100_2026-12-07_decoder-churn*.txt); the next source reads its own file's frames, pixel for
pixel; only a decoder made the same way is reused; a failed decoder, a full pool or ``reuse_decoders=False`` end it."""

from typing import Any, List

import numpy as np
import pytest

from jetforge.apps.video.sources.gpu.decoder_pool import POOL, ThreadedDecoderPool
from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions
from jetforge.errors import StreamError
from tests.standins.fake_nvdec import FakeNvDecoder, FakeThreadedDecoder

pytest.importorskip("cv2")


class CountingNvDecoder(FakeNvDecoder):
    """The fake PyNvVideoCodec, recording what happens to its ThreadedDecoders: made, pointed at a file, ended."""

    events: List[Any] = []

    class ThreadedDecoder(FakeThreadedDecoder):
        def __init__(self, enc_file_path: str, buffer_size: int, **kw: Any) -> None:
            CountingNvDecoder.events.append(("new", id(self)))
            super().__init__(enc_file_path, buffer_size, **kw)

        def reconfigure_decoder(self, new_source: str, start_frame: int = 0) -> None:
            if hasattr(self, "_packets"):  # not the constructor's own first call
                CountingNvDecoder.events.append(("reconfigure", id(self), str(new_source)))
            super().reconfigure_decoder(new_source, start_frame)

        def end(self) -> None:
            CountingNvDecoder.events.append(("end", id(self)))
            super().end()


def _copy(d: Any, w: int, h: int) -> np.ndarray:
    return np.asarray(d).copy()


def _read(clip: Any, frames: int, codec: Any = CountingNvDecoder, **options: Any) -> List[np.ndarray]:
    with NvThreadedSource(clip, codec_module=codec, keep=_copy, max_frames=frames,
                          options=ThreadedDecodeOptions(**options)) as src:
        return [np.asarray(f.data).copy() for f in src]


def _plain(clip: Any, frames: int) -> List[np.ndarray]:
    """The file's frames read by a decoder of its own (not pooled): the reference."""
    return _read(clip, frames, codec=FakeNvDecoder, reuse_decoders=False)


def test_the_next_source_reuses_a_closed_sources_decoder_and_reads_its_own_file(bikes_clip, held_out_clip):
    CountingNvDecoder.events = []
    first = _read(bikes_clip, 6)
    second = _read(held_out_clip, 6)  # another file, another size: the pooled decoder pointed at it
    made = [e for e in CountingNvDecoder.events if e[0] == "new"]
    assert len(made) == 1 and not any(e[0] == "end" for e in CountingNvDecoder.events)
    assert ("reconfigure", made[0][1], str(held_out_clip)) in CountingNvDecoder.events
    assert POOL.reused >= 1 and POOL.idle_count() >= 1
    for got, want in ((first, _plain(bikes_clip, 6)), (second, _plain(held_out_clip, 6))):
        assert len(got) == 6 and all(np.array_equal(g, w) for g, w in zip(got, want))
    assert second[0].shape != first[0].shape  # the second file's own size, not the first's


def test_only_a_decoder_made_the_same_way_is_reused(bikes_clip):
    CountingNvDecoder.events = []
    _read(bikes_clip, 2, buffer_size=12)
    _read(bikes_clip, 2, buffer_size=8)  # another buffer size: another decoder
    _read(bikes_clip, 2, buffer_size=12)  # the first one again
    assert [e[0] for e in CountingNvDecoder.events] == ["new", "new", "reconfigure"]


def test_without_reuse_a_closed_sources_decoder_is_ended(bikes_clip):
    CountingNvDecoder.events = []
    _read(bikes_clip, 2, reuse_decoders=False)
    _read(bikes_clip, 2, reuse_decoders=False)
    assert [e[0] for e in CountingNvDecoder.events] == ["new", "end", "new", "end"]
    assert POOL.idle_count() == 0


def test_a_decoder_that_failed_is_ended_not_pooled(bikes_clip):
    class Failing(CountingNvDecoder):
        class ThreadedDecoder(CountingNvDecoder.ThreadedDecoder):
            def get_batch_frames(self, batch_size: int) -> Any:
                raise RuntimeError("HandlePictureDisplay : decode error")

    CountingNvDecoder.events = []
    with pytest.raises(RuntimeError, match="decode error"):
        _read(bikes_clip, 2, codec=Failing)
    assert [e[0] for e in CountingNvDecoder.events] == ["new", "end"] and POOL.idle_count() == 0


def test_a_pooled_decoder_that_cannot_take_the_next_file_is_ended_with_one_clear_error(bikes_clip, tmp_path):
    class Refusing(CountingNvDecoder):
        class ThreadedDecoder(CountingNvDecoder.ThreadedDecoder):
            def reconfigure_decoder(self, new_source: str, start_frame: int = 0) -> None:
                if hasattr(self, "_packets"):
                    raise RuntimeError("unsupported stream")
                super().reconfigure_decoder(new_source, start_frame)

    CountingNvDecoder.events = []
    _read(bikes_clip, 2, codec=Refusing)
    with pytest.raises(StreamError, match="NVDEC cannot decode .*unsupported stream"):
        _read(bikes_clip, 2, codec=Refusing)
    assert [e[0] for e in CountingNvDecoder.events] == ["new", "end"] and POOL.idle_count() == 0


def test_a_full_pool_ends_what_it_cannot_keep_and_drain_ends_the_rest():
    ended: List[int] = []

    class Decoder:
        def __init__(self, n: int) -> None:
            self.n = n

        def end(self) -> None:
            ended.append(self.n)

    class Stream:
        closed = False

        def close(self) -> None:
            assert ended, "a stream is closed only after the decoder made on it ended"
            Stream.closed = True

    pool = ThreadedDecoderPool(limit=2)
    for n in range(3):
        pool.give("k", Decoder(n))
    assert ended == [2] and pool.idle_count() == 2
    assert pool.take("other") is None and pool.take("k")[0].n == 1 and pool.reused == 1
    pool.give("k", Decoder(9), Stream())
    assert pool.drain() == 2 and sorted(ended) == [0, 2, 9] and Stream.closed and pool.idle_count() == 0


@pytest.fixture
def standin_runtime():
    from jetforge.runtime.cuda import bindings
    from tests.standins import cuda_runtime_standin

    previous = bindings.use_runtime_api(cuda_runtime_standin.make_module())
    yield cuda_runtime_standin
    bindings.use_runtime_api(previous)


def test_a_high_priority_decoder_is_pooled_with_its_stream_and_the_stream_closed_after_it(bikes_clip,
                                                                                        standin_runtime):
    src = NvThreadedSource(bikes_clip, codec_module=CountingNvDecoder, keep=_copy, max_frames=2,
                           options=ThreadedDecodeOptions(decoder_priority="high"))
    stream = src._decoder_stream
    src.close()
    assert stream.priority == standin_runtime.GREATEST_PRIORITY  # still open: its decoder is pooled, not ended
    with NvThreadedSource(bikes_clip, codec_module=CountingNvDecoder, keep=_copy, max_frames=2,
                          options=ThreadedDecodeOptions(decoder_priority="high")) as again:
        assert again._decoder_stream is stream
    assert POOL.drain() == 1
    with pytest.raises(ValueError, match="destroyed"):
        stream.priority  # noqa: B018 - closed after its decoder ended


def test_idle_decoders_are_ended_at_a_normal_exit(tmp_path):
    """A real interpreter: a decoder left in the pool is ended when the process exits (atexit), before teardown."""
    import subprocess
    import sys
    from pathlib import Path

    marker = tmp_path / "ended"
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from jetforge.apps.video.sources.gpu.decoder_pool import POOL\n"
            "class Decoder:\n"
            "    def end(self):\n"
            "        open(%r, 'w').write('ended')\n"
            "POOL.give('k', Decoder())\n" % (str(Path(__file__).resolve().parents[2] / "src"), str(marker)))
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
    assert marker.read_text() == "ended"
