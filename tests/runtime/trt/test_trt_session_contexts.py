"""TrtSession's wiring of one execution context per CUDA graph, end to end on the CPU.

``TrtSession.open`` runs its real code against two stand-ins: TensorRT's context/memory API of each version
(tests/standins/tensorrt_versions_standin.py: an engine y = 2 * row sums of x, batch 1..32) and CUDA over host
memory (tests/standins/cuda_runtime_standin.py, behind jetforge's CUDA seam: real buffers, copies, stream capture
and graph replay of what was queued).  A graph replays the state its context had when it was captured, so a graph
replayed after its context was re-bound, or whose buffers moved, gives wrong outputs or fails here as on a GPU.
Not shown: TensorRT itself, its kernels and memory use, a Jetson, timing.
"""

import numpy as np
import pytest

from jetforge.runtime.cuda.policy import shape_key
from tests.standins.tensorrt_versions_standin import DEVICE_MEMORY, make_trt

BUCKETS = (1, 2, 4, 8, 16, 32)  # jetforge.apps.pipeline.batching.DEFAULT_BUCKETS


@pytest.fixture
def device():
    """The host-memory CUDA stand-in behind jetforge's CUDA layer for one test."""
    from jetforge.runtime.cuda import bindings
    from tests.standins import cuda_runtime_standin

    api = cuda_runtime_standin.make_module()
    previous = bindings.use_runtime_api(api)
    yield api.device
    bindings.use_runtime_api(previous)


@pytest.fixture
def open_engine(device, tmp_path, monkeypatch):
    """``open_engine(version, **options)`` -> (TrtSession, the TensorRT stand-in module)."""
    from jetforge.runtime.tensorrt import session as trt_session

    made = []

    def open_(version="10.1", **options):
        trt = make_trt(version, device, num_dla_cores=2)
        monkeypatch.setattr(trt_session, "load_tensorrt", lambda purpose="": trt)
        monkeypatch.setattr(trt_session, "require", lambda *args, **kwargs: None)
        path = tmp_path / "model.engine"
        path.write_bytes(b"stand-in plan")
        session = trt_session.TrtSession.open(path, **options)
        made.append(session)
        return session, trt

    yield open_
    for session in made:
        session.close()


def feed(session, batch, seed=0):
    x = np.random.default_rng(seed).standard_normal((batch, 4)).astype(np.float32)
    y = session.infer({"x": x})["y"]
    np.testing.assert_allclose(y[:, 0], 2.0 * x.sum(axis=1), rtol=1e-5, atol=1e-5)


def churn(n=100, seed=0):
    """The app's bucket sizes in a changing order: 32, 8, 32, 2, 8, 32, then random buckets, ``n`` in all."""
    rng = np.random.default_rng(seed)
    return [32, 8, 32, 2, 8, 32] + [int(b) for b in rng.choice(BUCKETS, n - 6)]


def key(batch):
    return shape_key({"x": (batch, 4)})


def set_calls(ctx):
    return [c for c in ctx.calls if c[0] in ("set_input_shape", "set_tensor_address")]


@pytest.mark.parametrize("version,made,shared", [("10.1", "USER_MANAGED", True), ("10.0", "USER_MANAGED", True),
                                                 ("8.6", "without_device_memory", True), ("none", "default", False)])
def test_batches_moving_between_buckets_capture_each_size_once_and_never_fall_back(open_engine, device, version,
                                                                                   made, shared):
    session, trt = open_engine(version)
    engine = trt.engines[0]
    allocated = dict(device.allocations)  # every buffer, at the profile's max shape, and the shared scratch
    order = churn()
    for i, batch in enumerate(order):
        feed(session, batch, seed=i)
    info = session.info()
    assert info["cuda_graph"] == "on" and info["cuda_graph_captures"] == len(BUCKETS)
    assert info["cuda_graph_contexts"] == len(BUCKETS) == info["cuda_graph_live"] and len(engine.contexts) == 6
    assert device.captures == 6 and device.launches == len(order) - 6
    assert [run[0] for run in engine.runs] == order  # every call ran its own batch, replays included
    assert device.allocations == allocated  # no buffer moved, so no graph was invalidated
    assert engine.created == [made] * 6
    for ctx in engine.contexts:
        shapes = [c for c in ctx.calls if c[0] == "set_input_shape"]
        assert len(shapes) == 1  # each context got its batch once (the primary at open: the profile max, 32)
        captured = ctx.calls.index(("execute_async_v3", "capturing"))
        assert set_calls(ctx)[-1] in ctx.calls[:captured]  # nothing was set on it after its graph was captured
    memory = [c for ctx in engine.contexts for c in ctx.calls if c[0] == "device_memory"]
    if shared:  # one scratch for all six contexts, handed to each once
        assert len(memory) == 6 and len(set(memory)) == 1 and memory[0][2] == DEVICE_MEMORY
        assert info["context_memory"].startswith("shared: one %d-byte scratch" % DEVICE_MEMORY)
        scratch = memory[0][1]
        session.close()
        assert scratch in device.freed
    else:
        assert memory == [] and info["context_memory"].startswith("own (this TensorRT has no")


def test_eviction_destroys_the_graph_of_the_evicted_key_only(open_engine, device):
    session, trt = open_engine(max_graphs=2)
    for batch in (1, 2, 1):
        feed(session, batch)
    graph_of_1 = session._graphs[key(1)]
    feed(session, 4)  # 2 is the least recently used: its graph goes, its context serves 4
    assert set(session._graphs) == {key(1), key(4)} and session._graphs[key(1)] is graph_of_1
    assert not graph_of_1.closed and len(device.execs) == 2
    launches = device.launches
    feed(session, 1)
    assert device.launches == launches + 1  # 1's graph survived and replayed
    feed(session, 2)  # 4 goes now; 2 is captured again
    info = session.info()
    assert info["cuda_graph_captures"] == 4 and info["cuda_graph_contexts"] == 2 and info["cuda_graph"] == "on"
    assert len(trt.engines[0].contexts) == 2


def test_a_buffer_reallocation_invalidates_every_graph(open_engine, device):
    session, trt = open_engine()
    for batch in BUCKETS:
        feed(session, batch)
    old_y = session._device["y"].ptr
    session._allocate({"y": 64 * 256})  # an output outgrowing its buffer
    assert session._graphs == {} and session.policy.live_keys == [] and device.execs == {}
    for i, batch in enumerate(BUCKETS + BUCKETS):
        feed(session, batch, seed=i)
    new_y = session._device["y"].ptr
    assert new_y != old_y and session.info()["cuda_graph_captures"] == 12
    for ctx in trt.engines[0].contexts:  # each context pointed at the new buffer before its graph was re-captured
        moved = ctx.calls.index(("set_tensor_address", "y", new_y))
        assert ctx.calls[moved + 1:].count(("execute_async_v3", "capturing")) == 1


@pytest.mark.parametrize("version,captures", [("8.6", 0), ("10.1", 5)])
def test_a_dla_engine_keeps_one_context_with_its_own_memory(open_engine, device, version, captures):
    session, trt = open_engine(version, dla_core=0)
    for batch in (1, 2, 1, 4, 4, 8):
        feed(session, batch)
    engine, info = trt.engines[0], session.info()
    assert engine.created == ["default"] and len(engine.contexts) == 1 and info["cuda_graph_contexts"] == 1
    assert not [c for c in engine.contexts[0].calls if c[0] == "device_memory"]
    assert info["context_memory"] == "own (one context: a DLA engine keeps one, with its own memory)"
    assert info["cuda_graph_captures"] == captures  # 10.x: tried, re-captured at each change as before
    if version == "8.6":
        assert info["cuda_graph"].startswith("fallback: DLA engines cannot be captured")


def test_graphs_off_keep_one_context(open_engine, device):
    session, trt = open_engine(cuda_graph=False)
    for batch in BUCKETS:
        feed(session, batch)
    assert trt.engines[0].created == ["default"] and session.info()["cuda_graph_contexts"] == 1
    assert session.info()["cuda_graph"] == "off" and device.captures == 0


def test_a_refused_capture_falls_back_to_one_context_and_releases_the_others(open_engine, device):
    session, trt = open_engine()
    feed(session, 1)
    feed(session, 2)
    trt.engines[0].fail_capture = True
    feed(session, 4)  # a third context, whose capture fails: graphs off for good
    info = session.info()
    assert info["cuda_graph"].startswith("fallback: the enqueue returned False while capturing")
    assert info["cuda_graph_contexts"] == 1 and info["cuda_graph_live"] == 0 and device.execs == {}
    runs = len(trt.engines[0].runs)
    for i, batch in enumerate((2, 1, 32)):
        feed(session, batch, seed=i)
    assert len(trt.engines[0].runs) == runs + 3 and len(trt.engines[0].contexts) == 3
    assert session.info()["cuda_graph_contexts"] == 1 and session._pool.primary.context is session._context


def test_more_keys_than_graphs_fall_back_after_four_captures_per_graph(open_engine, device):
    session, _ = open_engine(max_graphs=2)
    for i, batch in enumerate([1, 2, 3, 4, 5] * 3):
        feed(session, batch, seed=i)
    info = session.info()
    assert info["cuda_graph"] == "fallback: input shapes changed 8 times; each change needs a new capture"
    assert info["cuda_graph_contexts"] == 1 and info["cuda_graph_live"] == 0 and device.execs == {}


def test_device_and_host_calls_of_one_size_keep_a_context_each(open_engine, device):
    from jetforge.runtime.cuda import DeviceBuffer, PinnedBuffer
    from jetforge.runtime.tensorrt.session import DeviceTensor

    session, trt = open_engine()
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    with DeviceBuffer(x.nbytes) as dev, PinnedBuffer(x.nbytes) as pinned:
        pinned.array(x.shape, "float32")[:] = x
        dev.copy_from_host(pinned, x.nbytes)
        for _ in range(3):
            y = session.infer_device({"x": DeviceTensor(dev.ptr, x.shape, "float32")})["y"]
            np.testing.assert_allclose(y[:, 0], 2.0 * x.sum(axis=1))
            feed(session, 8)
        device_ctx = [c for c in trt.engines[0].contexts if ("set_tensor_address", "x", dev.ptr) in c.calls]
        assert len(device_ctx) == 1 and set_calls(device_ctx[0]).count(("set_tensor_address", "x", dev.ptr)) == 1
    info = session.info()
    assert info["cuda_graph_captures"] == 2 and info["cuda_graph_contexts"] == 2 and device.launches == 4


def test_when_tensorrt_makes_no_more_contexts_the_session_re_binds_the_ones_it_has(open_engine, device):
    """Out of memory for a third context: the two there serve every key, each re-bound key's graph destroyed first
    (a graph replayed after its context changed fails in the stand-in)."""
    session, trt = open_engine()
    trt.engines[0].context_limit = 2
    for i, batch in enumerate([1, 2, 4, 1, 2, 4, 4, 1]):
        feed(session, batch, seed=i)
    info = session.info()
    assert info["cuda_graph_contexts"] == 2 and info["cuda_graph_max_contexts"] == 2 and info["cuda_graph"] == "on"
    assert info["cuda_graph_captures"] == 7 and device.launches == 1 and len(session._graphs) == 2


@pytest.mark.parametrize("wait", [False, True])
def test_a_producer_rewriting_device_inputs_waits_on_the_gpu_until_the_engine_has_read_them(open_engine, device, wait):
    """The GPU path's order (apps/pipeline/gpu_ops.DeviceFrameOps): the preprocessing of batch k+1 writes the buffer
    batch k was bound from while batch k may still run on the session's stream.  Here the session's stream is late
    (its work waits until something needs it, tests/standins/cuda_runtime_standin.py) and the producer's runs at
    once: an order a GPU may take when the engine is busy.  Without ``wait_for_inputs_read`` batch A computes on
    batch B's input (the control: the stand-in shows the race); with it the producer's write waits for the engine
    and each batch gets its own sums (2 x the row sums of its own input, exactly: float32 sums of 4 small values)."""
    from jetforge.runtime import cuda
    from jetforge.runtime.tensorrt.session import DeviceTensor

    session, _ = open_engine("10.1")
    producer, buffer = cuda.Stream(), cuda.DeviceBuffer(8 * 4 * 4)
    staging = [cuda.PinnedBuffer(8 * 4 * 4) for _ in range(3)]
    rng = np.random.default_rng(7)
    batches = [rng.integers(-8, 8, (8, 4)).astype(np.float32) for _ in range(3)]

    def submit(x, host):
        if wait:
            session.wait_for_inputs_read(producer)
        host.array((8, 4), "float32")[:] = x
        buffer.copy_from_host(host, x.nbytes, producer)  # the preprocessing kernel's write, in the app
        return session.submit_device({"x": DeviceTensor(buffer.ptr, (8, 4), "float32")}, stream=producer)

    first = submit(batches[0], staging[0]).wait()["y"][:, 0]  # captures the graph (its warm-up runs at once)
    assert np.array_equal(first, 2.0 * batches[0].sum(axis=1))
    device.make_late(session._stream.handle)
    requests = [submit(x, host) for x, host in zip(batches[1:], staging[1:])]
    got = [r.wait()["y"][:, 0] for r in requests]
    assert np.array_equal(got[1], 2.0 * batches[2].sum(axis=1))
    if wait:
        assert np.array_equal(got[0], 2.0 * batches[1].sum(axis=1))
    else:  # batch 1's engine work ran after batch 2 overwrote its input
        assert np.array_equal(got[0], 2.0 * batches[2].sum(axis=1))
    for b in staging + [buffer, producer]:
        b.close()


def test_wait_for_inputs_read_before_any_call_queues_nothing(open_engine, device):
    from jetforge.runtime import cuda

    session, _ = open_engine("10.1")
    stream = cuda.Stream()
    session.wait_for_inputs_read(stream)  # nothing has been submitted: no event recorded yet, nothing to wait for
    session.wait_for_inputs_read(stream.handle)  # a raw handle is taken too
    stream.close()
