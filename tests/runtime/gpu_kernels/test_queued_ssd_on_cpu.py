"""QueuedSsdDecoder (the app's SSD decoding on the GPU for batches in flight) on the CPU: the kernel's CUDA C built by
g++ (test_gpu_kernels_on_cpu.FakeGpuKernel), host memory standing in for device and pinned memory, events and
streams that have nothing to wait for (every launch and copy here completes when it is queued).

What it shows: the slots (batches launched, not yet collected, each read back from its own list), the rows a padded
and tiled batch keeps (:func:`jetforge.vision.ssd_gpu.rows_of`), the second copy when a batch has more candidates
than were prefetched, and that a launch with every slot taken waits for a collect.  Each result must equal
``vision.ssd.postprocess`` of the same rows (boxes within 1e-5, scores within 1e-6: the kernel's float32 arithmetic
against numpy's, as the existing kernel test bounds them).  Stream order on a real GPU: tests/board_path/
test_gpu_standin.py; on the CPU stand-in for CUDA: tests/runtime/trt/test_trt_session_device_outputs.py.
"""

import ctypes
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from jetforge.apps.pipeline.stages import GpuModel
from jetforge.runtime.cuda.kernels import launch
from jetforge.vision.ssd import SSDSpec, postprocess
from jetforge.vision.ssd_gpu import QueuedSsdDecoder, rows_of
from tests.runtime.gpu_kernels.test_gpu_kernels_on_cpu import CXX, FakeGpuKernel

pytestmark = pytest.mark.skipif(CXX is None, reason="no g++ to compile the kernel's CUDA C for the CPU")
FIXTURE = Path(__file__).resolve().parent / "data" / "ssd_person_vtest.npz"


class HostBuffer:
    """DeviceBuffer / PinnedBuffer on the host: copies are memmove at once, the stream is ignored."""

    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.data = np.zeros(nbytes, np.uint8)
        self.ptr = int(self.data.ctypes.data)

    def array(self, shape, dtype):
        return self.data[:int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)

    def copy_from_host(self, src, nbytes=None, stream=None):
        ctypes.memmove(self.ptr, src.ptr, self.nbytes if nbytes is None else nbytes)

    def copy_to_host(self, dst, nbytes=None, stream=None):
        HostBuffer.copies += 1
        ctypes.memmove(dst.ptr, self.ptr, self.nbytes if nbytes is None else nbytes)

    def fill_bytes(self, value, nbytes=None, stream=None):
        self.data[:self.nbytes if nbytes is None else nbytes] = value

    def close(self):
        pass


class NoWait:
    """cuda.Event / cuda.Stream with nothing to wait for."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        return self

    def synchronize(self):
        pass

    def close(self):
        pass


@pytest.fixture
def host_gpu(monkeypatch, tmp_path_factory):
    from jetforge.runtime import cuda
    from jetforge.runtime.cuda.kernels import ssd

    FakeGpuKernel.folder = tmp_path_factory.getbasetemp()
    monkeypatch.setattr(launch, "Kernel", FakeGpuKernel)
    HostBuffer.copies = 0
    monkeypatch.setattr(ssd, "DeviceBuffer", HostBuffer)
    monkeypatch.setattr(ssd, "PinnedBuffer", HostBuffer)
    monkeypatch.setattr(ssd, "_sync", lambda stream: None)
    monkeypatch.setattr("jetforge.runtime.cuda.bindings.synchronize_device", lambda: None)
    monkeypatch.setattr(cuda, "Event", NoWait)
    monkeypatch.setattr(cuda, "Stream", NoWait)


@pytest.fixture(scope="module")
def fixture_outputs():
    data = np.load(str(FIXTURE))
    return data["enc"], data["logits"], SSDSpec.from_dict(json.loads(str(data["spec"])))


def padded_tiled_batch(enc, logits, order, padded, blocks):
    """Output rows as the GPU path lays them out: ``blocks`` blocks of ``padded`` rows, the frames' rows (taken from
    the fixture's in ``order``, block by block) first in each block, the padding repeating the block's last frame."""
    n = len(order) // blocks
    e = np.empty((padded * blocks,) + enc.shape[1:], np.float32)
    g = np.empty((padded * blocks,) + logits.shape[1:], np.float32)
    for b in range(blocks):
        src = order[b * n:(b + 1) * n]
        src = src + [src[-1]] * (padded - n)
        e[b * padded:(b + 1) * padded], g[b * padded:(b + 1) * padded] = enc[src], logits[src]
    return e, g, GpuModel.block_rows(n, padded, blocks)


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w) and np.array_equal(g.classes, w.classes)
        if len(w):
            assert np.abs(g.boxes - w.boxes).max() <= 1e-5 and np.abs(g.scores - w.scores).max() <= 1e-6


def test_batches_in_flight_each_read_back_from_its_own_slot(host_gpu, fixture_outputs):
    """Three padded, tiled batches through two slots (launch A, launch B, collect B, launch C into B's slot, collect
    A, collect C): each equals postprocess of its own frames' rows, in block-major order."""
    enc, logits, spec = fixture_outputs
    dec = QueuedSsdDecoder(spec, rows=12, slots=2, score_threshold=0.3)
    orders = [[0, 1, 2, 3, 2, 1], [3, 0, 1, 2, 0, 3], [1, 1, 3, 0, 2, 2]]  # 3 frames x 2 blocks, padded to 4
    batches = [padded_tiled_batch(enc, logits, o, 4, 2) for o in orders]
    want = [postprocess(enc[o], logits[o], spec, score_threshold=0.3) for o in orders]

    def launch_(i):
        e, g, rows = batches[i]
        assert rows == [0, 1, 2, 4, 5, 6]
        return dec.launch(e.ctypes.data, g.ctypes.data, len(e), rows, stream=None)

    a, b = launch_(0), launch_(1)
    assert_same(b(), want[1])
    c = launch_(2)
    assert_same(a(), want[0])
    assert_same(c(), want[2])
    assert sum(len(d) for w in want for d in w) > 0
    dec.close()


def test_more_candidates_than_prefetched_are_copied_back_in_a_second_copy(host_gpu, fixture_outputs):
    enc, logits, spec = fixture_outputs
    dec = QueuedSsdDecoder(spec, rows=4, slots=1, score_threshold=0.3, prefetch_per_frame=2)
    result = dec.launch(enc.ctypes.data, logits.ctypes.data, 4, [0, 1, 2, 3], stream=None)
    got = result()
    assert dec.kernel.last_candidates > 4 * 2 and HostBuffer.copies == 2  # the prefetch, then the whole list
    assert_same(got, postprocess(enc, logits, spec, score_threshold=0.3))
    dec.close()


def test_a_launch_with_every_slot_taken_waits_until_one_is_collected(host_gpu, fixture_outputs):
    """The pipeline holds at most in_flight + 2 batches; should it hold more, a launch waits for a collect rather
    than overwrite a slot whose candidates were not read yet.  (The check only fails if the launch returns before
    the collect: no timing is asserted.)"""
    enc, logits, spec = fixture_outputs
    dec = QueuedSsdDecoder(spec, rows=4, slots=1, score_threshold=0.3)
    first = dec.launch(enc.ctypes.data, logits.ctypes.data, 4, [0, 1, 2, 3], stream=None)
    launched = threading.Event()
    second = []

    def launch_second():
        second.append(dec.launch(enc.ctypes.data, logits.ctypes.data, 4, [3, 2, 1, 0], stream=None))
        launched.set()

    worker = threading.Thread(target=launch_second, daemon=True)
    worker.start()
    assert not launched.wait(0.3)  # blocked: the only slot holds the first batch's candidates
    want = postprocess(enc, logits, spec, score_threshold=0.3)
    assert_same(first(), want)
    assert launched.wait(30)
    worker.join(30)
    assert_same(second[0](), want[::-1])  # the rows in the order asked for
    dec.close()


def test_rows_of_keeps_the_frames_rows_renumbered_and_drops_the_padding():
    records = np.zeros((5, 8), np.float32)
    ids = records.view(np.int32)
    ids[:, 0] = [10, 11, 12, 13, 14]  # anchors
    ids[:, 1] = [0, 3, 4, 7, 5]  # output rows: 3 and 7 are padding of a 2-frame batch padded to 4, 2 blocks
    kept = rows_of(records, GpuModel.block_rows(2, 4, 2), 8)  # rows [0, 1, 4, 5]
    assert kept.view(np.int32)[:, 0].tolist() == [10, 12, 14]
    assert kept.view(np.int32)[:, 1].tolist() == [0, 2, 3]
    assert records.view(np.int32)[:, 1].tolist() == [0, 3, 4, 7, 5]  # the input is not changed
