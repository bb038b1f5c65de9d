"""The cuda-python layer for real on a CUDA GPU: buffers, copies, stream, events, graph capture and replay.

The stream work is plain CUDA (memcpy, memset) and a CuPy kernel launched on our stream, not
TensorRT: TensorRT does not exist on the GPU machine, and this layer must work on its own.
Skipped without a CUDA device ("no CUDA GPU").
"""

import numpy as np
import pytest

from jetforge.errors import BackendError
from jetforge.optional import is_available


def _gpu():
    if not is_available("cuda.bindings.runtime") and not is_available("cuda.cudart"):
        return False
    from jetforge.runtime.cuda import device_count

    return device_count() > 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _gpu(), reason="no CUDA GPU")]


@pytest.fixture
def cuda():
    from jetforge.runtime import cuda

    return cuda


@pytest.fixture
def stream(cuda):
    with cuda.Stream() as s:
        yield s


def test_round_trip_through_device_memory(cuda, stream):
    x = np.arange(4096, dtype=np.float32).reshape(64, 64)
    with cuda.PinnedBuffer(x.nbytes) as host_in, cuda.PinnedBuffer(x.nbytes) as host_out, \
            cuda.DeviceBuffer(x.nbytes) as a, cuda.DeviceBuffer(x.nbytes) as b:
        host_in.array(x.shape, x.dtype)[...] = x
        host_out.array(x.shape, x.dtype)[...] = -1
        a.copy_from_host(host_in, stream=stream)
        b.copy_from_device(a, stream=stream)
        b.copy_to_host(host_out, stream=stream)
        stream.synchronize()
        assert np.array_equal(host_out.array(x.shape, x.dtype), x)
        assert stream.query()


def test_memset_and_partial_copy(cuda, stream):
    with cuda.DeviceBuffer(1024) as d, cuda.PinnedBuffer(1024) as h:
        d.fill_bytes(7, stream=stream)
        d.fill_bytes(0, nbytes=512, stream=stream)
        d.copy_to_host(h, stream=stream)
        stream.synchronize()
        got = h.array((1024,), np.uint8)
        assert (got[:512] == 0).all() and (got[512:] == 7).all()


def test_event_timing_of_a_large_copy(cuda, stream):
    n = 256 << 20  # 256 MiB: long enough to time
    with cuda.DeviceBuffer(n) as a, cuda.DeviceBuffer(n) as b, cuda.Event() as start, cuda.Event() as end:
        a.fill_bytes(1, stream=stream)
        start.record(stream)
        for _ in range(4):
            b.copy_from_device(a, stream=stream)
        end.record(stream)
        end.synchronize()
        assert end.query()
        ms = end.elapsed_ms(start)
        # 4 copies of 256 MiB read+written: a few ms on any recent GPU, far below a second
        assert 0.01 < ms < 1000.0


def test_graph_capture_records_and_replays_copies(cuda, stream):
    x = np.arange(1000, dtype=np.float32)
    with cuda.PinnedBuffer(x.nbytes) as h_in, cuda.PinnedBuffer(x.nbytes) as h_out, \
            cuda.DeviceBuffer(x.nbytes) as a, cuda.DeviceBuffer(x.nbytes) as b:
        h_in.array(x.shape, x.dtype)[...] = x
        with cuda.GraphCapture(stream) as capture:
            assert stream.is_capturing()
            a.copy_from_host(h_in, stream=stream)
            b.copy_from_device(a, stream=stream)
            b.copy_to_host(h_out, stream=stream)
        assert not stream.is_capturing()
        stream.synchronize()
        # nothing ran during capture
        assert not np.array_equal(h_out.array(x.shape, x.dtype), x) or x.sum() == 0
        graph = capture.graph
        for k in range(3):  # the graph reads the pinned input at replay time
            h_in.array(x.shape, x.dtype)[...] = x * (k + 2)
            graph.launch(stream)
            stream.synchronize()
            assert np.array_equal(h_out.array(x.shape, x.dtype), x * (k + 2))
        assert graph.launches == 3
        graph.close()
        assert graph.closed
        with pytest.raises(BackendError, match="destroyed"):
            graph.launch(stream)


def test_graph_capture_of_a_kernel_on_our_stream(cuda, stream):
    cp = pytest.importorskip("cupy", reason="the kernel test launches a CuPy kernel on our stream")
    n = 1 << 16
    with cuda.DeviceBuffer(n * 4) as dx, cuda.DeviceBuffer(n * 4) as dy, cuda.PinnedBuffer(n * 4) as hx, \
            cuda.PinnedBuffer(n * 4) as hy:
        def view(buf):
            mem = cp.cuda.UnownedMemory(buf.ptr, buf.nbytes, buf)
            return cp.ndarray((n,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(mem, 0))

        x, y = view(dx), view(dy)
        kernel = cp.ElementwiseKernel("float32 x", "float32 y", "y = 2.0f * x + 1.0f", "jetforge_affine")
        from_external = getattr(cp.cuda.Stream, "from_external", None)  # CuPy >= 14: the stream protocol
        ext = from_external(stream) if from_external is not None else cp.cuda.ExternalStream(int(stream))

        def work():
            dx.copy_from_host(hx, stream=stream)
            with ext:
                kernel(x, y)
            dy.copy_to_host(hy, stream=stream)

        graph, reason = cuda.try_capture(stream, work)
        assert graph is not None, reason
        for k in range(3):
            src = np.random.default_rng(k).standard_normal(n).astype(np.float32)
            hx.array((n,), np.float32)[...] = src
            graph.launch(stream)
            stream.synchronize()
            np.testing.assert_allclose(hy.array((n,), np.float32), 2 * src + 1, rtol=1e-6)
        graph.close()


def test_refused_capture_reports_the_reason_and_the_stream_stays_usable(cuda, stream):
    with cuda.DeviceBuffer(256) as d, cuda.PinnedBuffer(256) as h:
        graph, reason = cuda.try_capture(stream, lambda: (d.fill_bytes(1, stream=stream), stream.synchronize()))
        assert graph is None
        assert "cudaStreamSynchronize" in reason and "Capture" in reason
        assert not stream.is_capturing()
        # plain work goes on (the sticky error was cleared)
        d.fill_bytes(3, stream=stream)
        d.copy_to_host(h, stream=stream)
        stream.synchronize()
        assert (h.array((256,), np.uint8) == 3).all()
        # work that returns False (TensorRT's execute_async_v3 on failure) is a failed capture too
        graph, reason = cuda.try_capture(stream, lambda: False)
        assert graph is None and "returned False" in reason


def test_capture_context_manager_propagates_the_failure(cuda, stream):
    with pytest.raises(BackendError) as info:
        with cuda.GraphCapture(stream):
            stream.synchronize()
    assert "cudaStreamSynchronize failed" in str(info.value)
    assert not stream.is_capturing()
    stream.synchronize()


def test_cuda_errors_name_the_call(cuda):
    with pytest.raises(BackendError) as info:
        cuda.DeviceBuffer(1 << 60)
    text = str(info.value)
    assert "cudaMalloc failed: cudaErrorMemoryAllocation (2)" in text and "free GPU memory" in text


def test_buffers_refuse_use_after_close_and_oversized_views(cuda):
    d = cuda.DeviceBuffer(64)
    h = cuda.PinnedBuffer(64)
    with pytest.raises(BackendError, match="needs 256 bytes"):
        h.array((64,), np.float32)
    d.close()
    h.close()
    d.close()  # idempotent
    with pytest.raises(BackendError, match="freed"):
        d.ptr
    with pytest.raises(BackendError, match="freed"):
        h.array((1,), np.uint8)
