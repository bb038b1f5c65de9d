"""NvThreadedSource's ``copy_ahead`` and ``decoder_priority`` on a real GPU with real NVDEC (PyNvVideoCodec's
ThreadedDecoder) and the real DeviceFrameRing (one copy kernel launch a fetch): the frames handed out equal, byte for
byte, those of the plain reading (copies waited for right after each fetch, the decoder on its default stream).  Both decode the same H.264 clip from its start, and NVDEC's
output is deterministic, so any difference is a copy that read a decoder surface after it was reused, or a frame
out of order.  The CPU tests (test_threaded_copy_ahead.py) check the ordering with stand-ins; this checks it against
the real decoder's surface reuse and asynchronous copies, and that the decoder works on the stream it is given.

Needs a CUDA GPU, PyNvVideoCodec and an H.264 clip in ``JETFORGE_KERNEL_VIDEO`` (the GPU benchmark's
``--gpu-tests`` sets it to the clip it carries); skipped otherwise.
"""

import os

import numpy as np
import pytest

from jetforge.optional import is_available


def _ready() -> bool:
    if not (is_available("cuda.bindings.runtime") and is_available("cuda.bindings.nvrtc")
            and is_available("PyNvVideoCodec") and os.environ.get("JETFORGE_KERNEL_VIDEO")):
        return False
    from jetforge.runtime.cuda import device_count

    return device_count() > 0


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _ready(), reason="no CUDA GPU, PyNvVideoCodec or JETFORGE_KERNEL_VIDEO clip")]

FRAMES = 60  # 15 fetches of 4, the decoder's 12-frame buffer reused five times over


def _read(copy_ahead: bool = False, decoder_priority: str = "default") -> list:
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions
    from jetforge.runtime.cuda.kernels.upload import download

    # a ring as large as the clip read: no slot reused, so every frame can be downloaded after the reading
    ring = DeviceFrameRing(slots=FRAMES + 8, defer_sync=True)
    with NvThreadedSource(os.environ["JETFORGE_KERNEL_VIDEO"], keep=ring, max_frames=FRAMES,
                          options=ThreadedDecodeOptions(copy_ahead=copy_ahead,
                                                        decoder_priority=decoder_priority)) as src:
        frames = list(src)
        got = [(f.index, download(f.data.ptr, (f.height * 3 // 2, f.width), np.uint8)) for f in frames]
    return got


@pytest.mark.parametrize("how", [{"copy_ahead": True}, {"decoder_priority": "high"},
                                 {"copy_ahead": True, "decoder_priority": "high"}],
                         ids=["copy-ahead", "decoder-high-priority", "both"])
def test_frames_equal_the_plain_readings_byte_for_byte(how):
    plain, other = _read(), _read(**how)
    assert [i for i, _ in other] == list(range(FRAMES)) == [i for i, _ in plain]
    assert not np.array_equal(plain[0][1], plain[FRAMES - 1][1])  # the clip moves: equal frames mean something
    for (_, a), (_, b) in zip(plain, other):
        assert np.array_equal(a, b)


def test_a_looping_source_starts_the_clip_again_byte_for_byte():
    """Looping across the end of the clip (reconfigure_decoder): the frames after the end equal the clip's first
    frames byte for byte, the indices run on."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource
    from jetforge.runtime.cuda.kernels.upload import download

    first = _read()[:4]
    with NvThreadedSource(os.environ["JETFORGE_KERNEL_VIDEO"], keep=DeviceFrameRing(slots=16, defer_sync=True),
                          loop=True) as src:
        frames = []
        while src.passes < 2 or len(frames) < 4:
            frame = src.read()
            if src.passes == 2:  # the second pass has begun: keep its first frames
                frames.append((frame.index, download(frame.data.ptr, (frame.height * 3 // 2, frame.width), np.uint8)))
    start = frames[0][0]  # the clip's frame count: the second pass numbered on from the first
    assert start > 0 and [i for i, _ in frames] == list(range(start, start + len(frames)))
    for (_, a), (_, b) in zip(first, frames[:4]):
        assert np.array_equal(a, b)


def test_a_pooled_decoder_closed_mid_clip_reads_the_next_source_from_its_start_byte_for_byte():
    """The decoder pool on real NVDEC: a source closed after 60 frames leaves its decoder decoding ahead into its
    buffer; the next source made the same way takes that decoder (``reconfigure_decoder``) and must hand out the
    clip's frames from the first, byte for byte as a new decoder does, none left over from the closed source's pass.
    With ``reuse_decoders=False`` nothing is pooled and nothing reused."""
    from jetforge.apps.video.sources.gpu.decoder_pool import POOL

    POOL.drain()
    plain = _read()  # a new decoder (the pool was empty), pooled when the source closes mid-clip
    assert POOL.idle_count() == 1
    reused_before = POOL.reused
    again = _read()  # the pooled decoder, pointed at the clip again
    assert POOL.reused == reused_before + 1 and POOL.idle_count() == 1
    assert [i for i, _ in again] == list(range(FRAMES))
    for (_, a), (_, b) in zip(plain, again):
        assert np.array_equal(a, b)

    POOL.drain()
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec_threaded import NvThreadedSource, ThreadedDecodeOptions

    with NvThreadedSource(os.environ["JETFORGE_KERNEL_VIDEO"], keep=DeviceFrameRing(slots=16, defer_sync=True),
                          max_frames=8, options=ThreadedDecodeOptions(reuse_decoders=False)) as src:
        assert len(list(src)) == 8
    assert POOL.idle_count() == 0
