"""The host-memory CUDA stand-in refuses what CUDA refuses, through jetforge's own CUDA layer (runtime/cuda).

If the stand-in accepted what CUDA rejects, the board-path tests could pass on code that fails on a board; each
case here is a mistake a session could make: a copy in the wrong direction or past a buffer's end, a freed
buffer, a synchronize inside a graph capture, a graph replaying an address freed since it was captured, and any
request for GPU time (nothing here is timed).
"""

import numpy as np
import pytest

from jetforge.errors import BackendError


@pytest.fixture
def cuda(standin):
    from jetforge.runtime import cuda

    return cuda


def test_copies_round_trip_and_check_kind_and_size(cuda):
    host, dev, back = cuda.PinnedBuffer(1024), cuda.DeviceBuffer(1024), cuda.PinnedBuffer(1024)
    stream = cuda.Stream()
    host.array((256,), "float32")[:] = np.arange(256, dtype=np.float32)
    dev.copy_from_host(host, 1024, stream)
    dev.copy_to_host(back, 1024, stream)
    stream.synchronize()
    assert np.array_equal(back.array((256,), "float32"), np.arange(256, dtype=np.float32))
    assert dev.ptr % 256 == 0  # cudaMalloc's alignment, which TensorRT requires
    rt = cuda.runtime_api()
    with pytest.raises(BackendError, match="cudaErrorInvalidValue"):  # a host pointer where device memory belongs
        cuda.check(rt.cudaMemcpyAsync(host.ptr, dev.ptr, 16, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, 0), "copy")
    with pytest.raises(BackendError, match="cudaErrorIllegalAddress"):  # past the end of the allocation
        cuda.check(rt.cudaMemcpyAsync(dev.ptr + 1000, host.ptr, 100, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, 0),
                   "copy")
    ptr = dev.ptr
    dev.close()
    with pytest.raises(BackendError, match="cudaErrorIllegalAddress"):  # a freed buffer
        cuda.check(rt.cudaMemcpyAsync(ptr, host.ptr, 16, rt.cudaMemcpyKind.cudaMemcpyHostToDevice, 0), "copy")
    for b in (host, back, stream):
        b.close()


def test_a_graph_runs_its_work_only_when_launched_and_not_after_its_memory_is_freed(cuda):
    host, dev = cuda.PinnedBuffer(256), cuda.DeviceBuffer(256)
    stream = cuda.Stream()
    host.array((4,), "float32")[:] = 7.0

    def work():
        dev.fill_bytes(0, 256, stream)
        dev.copy_from_host(host, 16, stream)
        assert stream.is_capturing()
        with pytest.raises(BackendError, match="cudaErrorStreamCaptureUnsupported"):
            stream.synchronize()  # not permitted while capturing

    graph, reason = cuda.try_capture(stream, work)
    assert graph is not None, reason
    out = cuda.PinnedBuffer(256)
    dev.copy_to_host(out, 16, stream)
    assert not out.array((4,), "float32").any()  # captured, not run: the memset was recorded only
    graph.launch(stream)
    dev.copy_to_host(out, 16, stream)
    assert (out.array((4,), "float32") == 7.0).all()
    dev.close()  # the graph still holds the address it captured
    with pytest.raises(BackendError, match="cudaErrorIllegalAddress"):
        graph.launch(stream)
    graph.close()
    for b in (host, out, stream):
        b.close()


def test_no_gpu_time_is_ever_reported(cuda):
    stream, start, end = cuda.Stream(), cuda.Event(), cuda.Event()
    start.record(stream)
    end.record(stream)
    end.synchronize()
    with pytest.raises(BackendError, match="stand-in"):
        end.elapsed_ms(start)
    for x in (start, end, stream):
        x.close()


def test_a_late_stream_runs_its_work_only_when_something_needs_it_and_in_order(cuda, standin):
    """The stand-in's late streams (used to show a missing ordering between streams): work waits until a
    synchronize, an event synchronize, or another stream's wait on one of its events, and then runs in order, only as
    far as needed; other streams run at once."""
    late, eager = cuda.Stream(), cuda.Stream()
    standin.make_late(late.handle)
    dev = cuda.DeviceBuffer(256)
    host = [cuda.PinnedBuffer(256) for _ in range(3)]
    out = cuda.PinnedBuffer(256)
    for i, h in enumerate(host):
        h.array((4,), "float32")[:] = float(i + 1)
    dev.copy_from_host(host[0], 16, late)
    first = cuda.Event(timing=False).record(late)
    dev.copy_from_host(host[1], 16, late)
    dev.copy_to_host(out, 16, eager)  # eager: runs now, before the late copies
    assert not out.array((4,), "float32").any()
    eager.wait_event(first)  # drains the late stream up to the event: the first copy only
    dev.copy_to_host(out, 16, eager)
    assert (out.array((4,), "float32") == 1.0).all()
    dev.copy_from_host(host[2], 16, eager)  # overwrites before the late stream's second copy ran
    late.synchronize()  # now the second copy runs, over the eager write
    dev.copy_to_host(out, 16, eager)
    assert (out.array((4,), "float32") == 2.0).all()
    with pytest.raises(ValueError, match="default stream"):
        standin.make_late(0)
    for b in host + [out, dev, first, late, eager]:
        b.close()
