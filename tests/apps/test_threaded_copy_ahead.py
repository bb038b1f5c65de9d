"""NvThreadedSource on the CPU: ``copy_ahead`` (a fetch's owned copies waited for a fetch later, never after the
decoder may have reused the frames they read), ``decoder_priority`` (the decoder's own stream) and looping (the
decoder pointed at its clip again).

The stand-ins: a ThreadedDecoder whose frames live in ``fetch`` surfaces that every ``get_batch_frames`` overwrites
(the least a real decoder promises: a frame is valid until the next call), and a keep hook whose copies only
happen in ``wait()`` (a GPU copy finishes at the latest when it is waited for).  With those, a source that fetched
again before waiting for the last fetch's copies would hand out the wrong pixels; the control test shows the
stand-ins catch exactly that.  The decoder's stream comes from the host-memory CUDA runtime stand-in.
"""

from typing import Any, List

import numpy as np
import pytest

from jetforge.apps.video.sources.gpu.decoder_pool import POOL
from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions
from jetforge.errors import ConfigError
from tests.standins.fake_nvdec import FakeDecodedFrame, FakeNvDecoder, FakeThreadedDecoder

pytest.importorskip("cv2")


class ReusingThreadedDecoder(FakeThreadedDecoder):
    """Frames handed out in ``batch_size`` surfaces that the next ``get_batch_frames`` overwrites in place."""

    def get_batch_frames(self, batch_size: int) -> List[FakeDecodedFrame]:
        fresh = super().get_batch_frames(batch_size)
        surfaces = getattr(self, "_surfaces", [])
        while len(surfaces) < len(fresh):
            surfaces.append(FakeDecodedFrame(np.zeros_like(fresh[0].nv12), 0))
        self._surfaces = surfaces
        for surface, frame in zip(surfaces, fresh):
            surface.nv12[...] = frame.nv12  # the decoder writes its next frames where the last ones were
            surface.pts = frame.pts
        return surfaces[:len(fresh)]


class ReusingNvDecoder(FakeNvDecoder):
    ThreadedDecoder = ReusingThreadedDecoder


class LateCopyKeep:
    """A keep hook like DeviceFrameRing(defer_sync=True) whose copies are made in wait(), not before: an owned slot
    per frame, filled from the decoder's surface only when waited for; it records what is called, in order."""

    def __init__(self, slots: int = 16) -> None:
        self.slots = [None] * slots
        self.next = 0
        self.queued: List[Any] = []
        self.events: List[str] = []

    def __call__(self, decoded: Any, width: int, height: int) -> np.ndarray:
        slot = np.empty_like(decoded.nv12)
        self.queued.append((decoded.nv12, slot))
        self.events.append("copy")
        return slot

    def launch(self) -> None:
        self.events.append("launch")

    def wait(self) -> None:
        self.events.append("wait")
        for surface, slot in self.queued:
            slot[...] = surface
        self.queued = []


def _reference(clip: Any, frames: int) -> List[np.ndarray]:
    with NvThreadedSource(clip, codec_module=FakeNvDecoder, keep=lambda d, w, h: np.asarray(d).copy(),
                          max_frames=frames) as src:
        return [np.asarray(f.data).copy() for f in src]


def test_copy_ahead_hands_out_the_decoders_pixels_in_order(bikes_clip):
    """30 frames read with the next fetch copied ahead equal the plain reading's, indices 0..29."""
    expected = _reference(bikes_clip, 30)
    keep = LateCopyKeep()
    with NvThreadedSource(bikes_clip, codec_module=ReusingNvDecoder, keep=keep, max_frames=30,
                          options=ThreadedDecodeOptions(fetch=4, copy_ahead=True)) as src:
        got = [(f.index, np.asarray(f.data).copy()) for f in src]
        assert src.fetches == 9  # 8 fetches read (30 frames, 4 a fetch) + the one copied ahead
    assert [i for i, _ in got] == list(range(30))
    assert all(np.array_equal(pixels, expected[i]) for i, pixels in got)


def test_copy_ahead_waits_for_a_fetch_before_the_decoder_is_called_again(bikes_clip):
    """The order of calls: each fetch's copies queued and launched; the wait for them comes before the next
    get_batch_frames and before any of their frames is read; close waits for the fetch still ahead."""
    keep = LateCopyKeep()
    with NvThreadedSource(bikes_clip, codec_module=ReusingNvDecoder, keep=keep, max_frames=10,
                          options=ThreadedDecodeOptions(fetch=4, copy_ahead=True)) as src:
        for _ in src:
            keep.events.append("read")
    fetch = ["copy"] * 4 + ["launch"]
    assert keep.events == (fetch + ["wait"] + fetch + ["read"] * 4 + ["wait"] + fetch + ["read"] * 4
                           + ["wait"] + fetch + ["read"] * 2 + ["wait"])


def test_the_stand_ins_catch_a_fetch_made_before_the_last_fetchs_copies_were_waited_for(bikes_clip):
    """Control: with these stand-ins, copying after the decoder's next call gives the NEXT frames' pixels, so the
    tests above would fail if copy_ahead fetched before it waited."""
    expected = _reference(bikes_clip, 8)
    decoder, keep = ReusingThreadedDecoder(str(bikes_clip), 12), LateCopyKeep()
    first = [keep(f, 0, 0) for f in decoder.get_batch_frames(4)]
    decoder.get_batch_frames(4)  # the next call before the wait: the surfaces now hold frames 4..7
    keep.wait()
    assert all(np.array_equal(first[i], expected[4 + i]) for i in range(4))
    assert not np.array_equal(first[0], expected[0])


def test_copy_ahead_at_the_end_of_a_looping_stream_keeps_numbering(bikes_clip):
    """A looping source copying ahead goes on across the end of the clip (250 frames) without a gap or a repeat
    in its indices, and its pixels start over with the clip's."""
    expected = _reference(bikes_clip, 4)
    with NvThreadedSource(bikes_clip, codec_module=ReusingNvDecoder, keep=LateCopyKeep(), loop=True, max_frames=258,
                          options=ThreadedDecodeOptions(fetch=4, copy_ahead=True)) as src:
        frames = [(f.index, np.asarray(f.data).copy()) for f in src]
        assert src.passes == 2
    assert [i for i, _ in frames] == list(range(258))
    assert all(np.array_equal(frames[250 + i][1], expected[i]) for i in range(4))


def test_copy_ahead_without_a_keep_that_launches_and_waits_apart_is_refused(bikes_clip):
    with pytest.raises(ConfigError, match="launch\\(\\) and wait\\(\\)"):
        NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, keep=lambda d, w, h: d,
                         options=ThreadedDecodeOptions(copy_ahead=True))


# --------------------------------------------------------------------------------------- the decoder's own stream
@pytest.fixture
def standin_runtime():
    from jetforge.runtime.cuda import bindings
    from tests.standins import cuda_runtime_standin

    previous = bindings.use_runtime_api(cuda_runtime_standin.make_module())
    yield cuda_runtime_standin
    bindings.use_runtime_api(previous)


class StreamRecordingNvDecoder(FakeNvDecoder):
    """The fake PyNvVideoCodec, recording the ``cuda_stream`` each ThreadedDecoder is made with."""

    streams: List[Any] = []

    class ThreadedDecoder(FakeThreadedDecoder):
        def __init__(self, enc_file_path: str, buffer_size: int, cuda_stream: int = 0, **kw: Any) -> None:
            StreamRecordingNvDecoder.streams.append(cuda_stream)
            super().__init__(enc_file_path, buffer_size, **kw)


def test_a_high_priority_decoder_gets_its_own_stream_of_the_greatest_priority_closed_after_it(bikes_clip,
                                                                                             standin_runtime):
    """decoder_priority "high": the ThreadedDecoder is given a stream of the device's greatest priority (the CUDA
    stand-in's range), which the source closes after ending the decoder (``reuse_decoders=False``: not pooled);
    "default" passes none (the decoder's own default, the legacy stream)."""
    StreamRecordingNvDecoder.streams = []
    src = NvThreadedSource(bikes_clip, codec_module=StreamRecordingNvDecoder, keep=lambda d, w, h: np.asarray(d).copy(),
                           max_frames=4, options=ThreadedDecodeOptions(decoder_priority="high", reuse_decoders=False))
    stream = src._decoder_stream
    assert stream.priority == standin_runtime.GREATEST_PRIORITY
    assert StreamRecordingNvDecoder.streams == [int(stream)] and int(stream) != 0
    assert len(list(src)) == 4
    src.close()
    with pytest.raises(ValueError, match="destroyed"):
        stream.priority  # noqa: B018 - closed with the source
    with NvThreadedSource(bikes_clip, codec_module=StreamRecordingNvDecoder, keep=lambda d, w, h: d,
                          max_frames=1) as plain:
        assert plain._decoder_stream is None
    assert StreamRecordingNvDecoder.streams[1:] == [0]


def test_an_unknown_decoder_priority_is_refused_by_name(bikes_clip):
    with pytest.raises(ConfigError, match="decoder stream priority 'top' is not one of default, high"):
        NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, options=ThreadedDecodeOptions(decoder_priority="top"))


def test_a_decoder_that_does_not_open_leaves_no_stream_behind(bikes_clip, standin_runtime, monkeypatch):
    """The high-priority stream made for a decoder that then fails to open is closed with the one clear error."""
    from jetforge.errors import StreamError
    from jetforge.runtime.cuda import stream as stream_module

    made = []
    real = stream_module.Stream

    class Recording(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    class Refusing(StreamRecordingNvDecoder):
        class ThreadedDecoder:
            def __init__(self, *a, **kw):
                raise RuntimeError("no decoder for this codec")

    monkeypatch.setattr("jetforge.runtime.cuda.Stream", Recording)
    with pytest.raises(StreamError, match="NVDEC cannot decode .*no decoder for this codec"):
        NvThreadedSource(bikes_clip, codec_module=Refusing, keep=lambda d, w, h: d,
                         options=ThreadedDecodeOptions(decoder_priority="high"))
    assert len(made) == 1
    with pytest.raises(ValueError, match="destroyed"):
        made[0].priority  # noqa: B018 - closed


# --------------------------------------------------------------------------------------- starting the clip again
class RestartRecordingNvDecoder(FakeNvDecoder):
    """The fake PyNvVideoCodec, recording every ThreadedDecoder made, ended and reconfigured."""

    events: List[str] = []

    class ThreadedDecoder(FakeThreadedDecoder):
        def __init__(self, *a: Any, **kw: Any) -> None:
            RestartRecordingNvDecoder.events.append("new")
            super().__init__(*a, **kw)

        def reconfigure_decoder(self, new_source: str, start_frame: int = 0) -> None:
            if hasattr(self, "_packets"):  # not the constructor's own first call
                RestartRecordingNvDecoder.events.append("reconfigure")
            super().reconfigure_decoder(new_source, start_frame)

        def end(self) -> None:
            RestartRecordingNvDecoder.events.append("end")
            super().end()


def test_a_looping_source_starts_again_by_reconfiguring_its_decoder_with_its_numbering_and_pixels(bikes_clip):
    """258 frames of the 250-frame clip, looping: the second pass comes from reconfigure_decoder on the same decoder
    (never end() and a new one: decoder_churn.py), the indices run on without a gap and the pixels start over."""
    expected = _reference(bikes_clip, 4)
    RestartRecordingNvDecoder.events = []
    with NvThreadedSource(bikes_clip, codec_module=RestartRecordingNvDecoder, keep=lambda d, w, h: np.asarray(d).copy(),
                          loop=True, max_frames=258) as src:
        frames = [(f.index, np.asarray(f.data).copy()) for f in src]
        assert src.passes == 2
    assert [i for i, _ in frames] == list(range(258))
    assert all(np.array_equal(frames[250 + i][1], expected[i]) for i in range(4))
    restart = ["reconfigure"]
    assert RestartRecordingNvDecoder.events == ["new"] + restart  # closed: its decoder is pooled, not ended
    POOL.drain()  # (with the reference reading's decoder)
    assert RestartRecordingNvDecoder.events == ["new"] + restart + ["end"]  # ended when the pool is drained


def test_threaded_decode_options_are_checked_when_made_and_a_fetch_is_at_most_the_decoders_buffer():
    from jetforge.apps.video.sources.gpu.nvdec_threaded import DEFAULT_FETCH

    assert ThreadedDecodeOptions().frames_per_fetch == DEFAULT_FETCH
    assert ThreadedDecodeOptions(buffer_size=3, fetch=8).frames_per_fetch == 3  # at most what is buffered
    for bad in ({"fetch": 0}, {"buffer_size": 0}):
        with pytest.raises(ConfigError, match="at least 1 frame"):
            ThreadedDecodeOptions(**bad)
    with pytest.raises(ConfigError, match="decoder stream priority 'top'"):
        ThreadedDecodeOptions(decoder_priority="top")


def test_a_source_takes_its_fetch_from_its_options(bikes_clip):
    """One fetch per ``frames_per_fetch`` frames read (the stand-in decoder's get_batch_frames calls)."""
    with NvThreadedSource(bikes_clip, codec_module=FakeNvDecoder, keep=lambda d, w, h: np.asarray(d).copy(),
                          max_frames=12, options=ThreadedDecodeOptions(buffer_size=3, fetch=8)) as src:
        assert sum(1 for _ in iter(src.read, None)) == 12
        assert src.fetch == 3 and src.fetches == 4
