"""``TrtSession.submit_device(on_device_outputs=)``: the engine's outputs handed, on the GPU, to a consumer that queues
its own work behind the engine (the people app's SSD decoding on the GPU), end to end on the CPU stand-ins.

The stand-ins are those of test_trt_session_contexts.py (an engine y = 2 * row sums of x; CUDA over host memory).
The session's stream is made *late* (its work waits until something needs it): an order a GPU may take while the
engine is busy.  A consumer that queues its read of the outputs on the session's stream gets each batch's own
outputs although the next batch was queued before it was collected; the control, the same read on a stream of its
own, reads the buffers before the engine wrote them -- the ordering these tests are for.  Exact comparisons: float32
sums of 4 small integers.  Not shown: TensorRT, a GPU (tests/board_path/test_gpu_standin.py runs this on real CUDA).
"""

import numpy as np
import pytest

from tests.runtime.trt.test_trt_session_contexts import device, feed, open_engine  # noqa: F401 - fixtures

pytest.importorskip("onnx")


def copying_consumer(own_stream=None):
    """A consumer that copies output ``y`` back into a pinned buffer of its own, on the session's stream (or, the
    control, on ``own_stream``), and records an event; its result waits for the event."""
    from jetforge.runtime import cuda
    from jetforge.runtime.cuda.memory import copy_device_to_host

    made = []

    def on_device_outputs(outputs, stream):
        y = outputs["y"]
        nbytes = int(np.prod(y.shape)) * np.dtype(y.dtype).itemsize
        pinned, done = cuda.PinnedBuffer(nbytes), cuda.Event(timing=False)
        where = stream if own_stream is None else own_stream
        copy_device_to_host(pinned, y.ptr, nbytes, where)
        done.record(where)
        made.append((pinned, done))

        def result():
            done.synchronize()
            return pinned.array(y.shape, y.dtype).copy()

        return result

    return on_device_outputs, made


@pytest.mark.parametrize("own_stream", [False, True], ids=["on-the-session-stream", "control-own-stream"])
def test_a_consumer_reads_each_batch_outputs_behind_the_engine(open_engine, device, own_stream):
    """Two input buffers (the graph key includes the input address, so each is captured once first: a capture runs
    at once), then both rewritten and submitted on the late stream before either is collected."""
    from jetforge.runtime import cuda
    from jetforge.runtime.tensorrt.session import DeviceTensor

    session, _ = open_engine("10.1")
    rng = np.random.default_rng(3)
    warm, batches = ([rng.integers(-8, 8, (8, 4)).astype(np.float32) for _ in range(2)] for _ in range(2))
    inputs = [cuda.DeviceBuffer(8 * 4 * 4) for _ in range(2)]
    staging = [cuda.PinnedBuffer(8 * 4 * 4) for _ in range(2)]
    other = cuda.Stream()
    consumer, made = copying_consumer(other if own_stream else None)

    def write(xs):
        for x, dev, host in zip(xs, inputs, staging):
            host.array(x.shape, "float32")[:] = x
            dev.copy_from_host(host, x.nbytes)

    def submit(dev):
        return session.submit_device({"x": DeviceTensor(dev.ptr, (8, 4), "float32")}, on_device_outputs=consumer)

    write(warm)
    for x, dev in zip(warm, inputs):  # each key's first call captures its graph (and runs at once)
        assert np.array_equal(submit(dev).wait()[:, 0], 2.0 * x.sum(axis=1))
    write(batches)
    device.make_late(session._stream.handle)
    requests = [submit(dev) for dev in inputs]  # graph launches, both queued before either is collected
    assert session._pending is None  # nothing was queued for the session's own host buffers
    got = [r.wait()[:, 0] for r in requests]
    if own_stream:  # read before the late engine wrote them: the last warm-up's sums, twice
        assert all(np.array_equal(g, 2.0 * warm[1].sum(axis=1)) for g in got)
    else:
        assert all(np.array_equal(g, 2.0 * x.sum(axis=1)) for g, x in zip(got, batches))
    assert session.info()["cuda_graph_captures"] == 2
    feed(session, 8)  # a host call afterwards still gets its own outputs back
    for buf in inputs + staging + [p for p, _ in made] + [e for _, e in made] + [other]:
        buf.close()


def test_device_outputs_carry_the_call_shapes_and_the_session_buffers(open_engine, device):
    from jetforge.runtime import cuda
    from jetforge.runtime.tensorrt.session import DeviceTensor

    session, _ = open_engine("10.1")
    seen = []
    x = np.ones((4, 4), np.float32)
    with cuda.DeviceBuffer(x.nbytes) as dev, cuda.PinnedBuffer(x.nbytes) as host:
        host.array(x.shape, "float32")[:] = x
        dev.copy_from_host(host, x.nbytes)

        def consumer(outputs, stream):
            seen.append((outputs, stream))
            return lambda: "decoded"

        assert session.submit_device({"x": DeviceTensor(dev.ptr, (4, 4), "float32")},
                                     on_device_outputs=consumer).wait() == "decoded"
    (outputs, stream), = seen
    assert sorted(outputs) == ["y"] and stream is session._stream
    assert outputs["y"] == DeviceTensor(session._device["y"].ptr, (4, 1), "float32")


def test_pinned_output_slots_give_each_batch_in_flight_its_own_outputs(open_engine, device):
    """The GPU path's outputs for a model decoded on the host (MobileNetV2): PinnedOutputSlots as the consumer, the
    session's stream late, three batches queued before any is collected -- each gets its own outputs (2 x its row
    sums), although the session's own single set of pinned buffers is never used (its pending call stays None:
    queuing a batch did not wait for the previous one's outputs)."""
    from jetforge.runtime import cuda
    from jetforge.runtime.cuda.in_flight import PinnedOutputSlots
    from jetforge.runtime.tensorrt.session import DeviceTensor

    session, _ = open_engine("10.1")
    rng = np.random.default_rng(5)
    warm, batches = ([rng.integers(-8, 8, (8, 4)).astype(np.float32) for _ in range(3)] for _ in range(2))
    inputs = [cuda.DeviceBuffer(8 * 4 * 4) for _ in range(3)]
    staging = [cuda.PinnedBuffer(8 * 4 * 4) for _ in range(3)]
    slots = PinnedOutputSlots(slots=3)

    def write(xs):
        for x, dev, host in zip(xs, inputs, staging):
            host.array(x.shape, "float32")[:] = x
            dev.copy_from_host(host, x.nbytes)

    def submit(dev):
        return session.submit_device({"x": DeviceTensor(dev.ptr, (8, 4), "float32")}, on_device_outputs=slots.launch)

    write(warm)
    for x, dev in zip(warm, inputs):
        assert np.array_equal(submit(dev).wait()["y"][:, 0], 2.0 * x.sum(axis=1))
    write(batches)
    device.make_late(session._stream.handle)
    requests = [submit(dev) for dev in inputs]
    assert session._pending is None
    for x, request in zip(batches, requests):
        y = request.wait()["y"]
        assert y.shape == (8, 1) and np.array_equal(y[:, 0], 2.0 * x.sum(axis=1))
    slots.close()
    for buf in inputs + staging:
        buf.close()


def test_a_slot_pool_hands_out_each_slot_once_until_it_is_released():
    import threading

    from jetforge.errors import ConfigError
    from jetforge.runtime.cuda.in_flight import SlotPool

    pool = SlotPool(2)
    held = {pool.acquire(), pool.acquire()}
    assert held == {0, 1}
    got, taken = [], threading.Event()
    worker = threading.Thread(target=lambda: (got.append(pool.acquire()), taken.set()), daemon=True)
    worker.start()
    assert not taken.wait(0.3)  # both held: the third acquire waits (only fails if it returns early)
    pool.release(1)
    assert taken.wait(30) and got == [1]
    worker.join(30)
    with pytest.raises(ConfigError, match="at least 1 slot"):
        SlotPool(0)
