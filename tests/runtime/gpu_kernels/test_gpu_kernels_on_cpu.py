"""The kernels' own CUDA C, compiled for the CPU by the host C++ compiler, run through the library on real frames.

No GPU here, so :class:`FakeGpuKernel` stands in for the device: it compiles the exact source text
NVRTC gets (``sources.py``) with g++, behind a few lines that give CUDA's built-ins a CPU meaning
(``blockIdx``/``threadIdx`` set by a loop over the launch grid, ``atomicAdd`` on one thread, float ->
half through GCC's ``_Float16``, which rounds to nearest even as ``cvt.rn.f16.f32`` does), and runs
every block and thread of the launch the library asks for, with host addresses in the frame table.
So the kernel's indexing, colour maths, geometry and stores are executed, not transcribed; only the
GPU's own arithmetic (FMA contraction, ``expf``) differs.  Skipped without g++ (or a compiler that
lacks ``_Float16``).
"""

import ctypes
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.kernels import launch
from jetforge.runtime.cuda.kernels.color import BT601_LIMITED, BT709_LIMITED, ColorSpec
from jetforge.runtime.cuda.kernels.preprocess import GpuPreprocessor, Nv12Frame, PackedFrame
from jetforge.runtime.cuda.kernels.reference import bgr_to_nv12, reference_nv12, reference_packed
from jetforge.runtime.cuda.kernels.ssd import effective_threshold
from jetforge.vision.ssd_gpu import GpuSsdDecoder, candidates_reference
from jetforge.vision.ssd import SSDSpec, postprocess
from jetforge.runtime.inputs import Preprocess

CXX = shutil.which("g++")
pytestmark = [pytest.mark.skipif(CXX is None, reason="no g++ to compile the kernels' CUDA C for the CPU"),
              pytest.mark.slow]  # ~25 s on 2 shared cores: a g++ build per kernel variant, then 26 launches
FIXTURE = Path(__file__).resolve().parent / "data" / "ssd_person_vtest.npz"

CUDA_ON_CPU = r"""
#include <math.h>
#include <string.h>
#include <algorithm>
struct Dim3 { int x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
using std::min;
static inline int atomicAdd(int* p, int v) { int old = *p; *p += v; return old; }
#define JF_F32_TO_F16(h, v) do { _Float16 t_ = (_Float16)(v); memcpy(&(h), &t_, 2); } while (0)
"""

GRID_LOOP = r"""
extern "C" void run_grid(const void* args, int gx, int gy, int gz, int bx, int by, int bz) {
    blockDim = Dim3{bx, by, bz};
    for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y) for (int x = 0; x < gx; ++x)
        for (int tz = 0; tz < bz; ++tz) for (int ty = 0; ty < by; ++ty) for (int tx = 0; tx < bx; ++tx) {
            blockIdx = Dim3{x, y, z};
            threadIdx = Dim3{tx, ty, tz};
            KERNEL(*(const ARGS*)args);
        }
}
"""


class FakeGpuKernel:
    """launch.Kernel's stand-in: the same source built with g++ into a shared library, the grid run on the CPU."""

    folder: Path = Path(".")

    def __init__(self, source, name, options=()):
        args_type = {"jf_preprocess": "PreArgs", "jf_copy_nv12": "CopyArgs"}.get(name, "SsdArgs")
        text = (CUDA_ON_CPU + source + "\n#define KERNEL %s\n#define ARGS %s\n" % (name, args_type) + GRID_LOOP)
        key = hashlib.sha256(text.encode()).hexdigest()[:16]
        lib = self.folder / ("%s_%s.so" % (name, key))
        if not lib.is_file():
            src = lib.with_suffix(".cpp")
            src.write_text(text)
            # -ffp-contract=off: no fused multiply-adds, each product rounded as numpy rounds it
            proc = subprocess.run([CXX, "-O1", "-std=c++17", "-ffp-contract=off", "-shared", "-fPIC", "-o",
                                   str(lib), str(src)], capture_output=True, text=True)
            if proc.returncode:
                if "_Float16" in proc.stderr:
                    pytest.skip("this g++ has no _Float16")
                raise AssertionError("the kernel source does not compile as C++:\n" + proc.stderr[-3000:])
        self.lib = ctypes.CDLL(str(lib))
        self.lib.run_grid.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 6

    def launch(self, grid, block, args, stream=None):
        self.lib.run_grid(ctypes.addressof(args), *grid, *block)


@pytest.fixture
def cpu_gpu(monkeypatch, tmp_path_factory):
    FakeGpuKernel.folder = tmp_path_factory.getbasetemp()
    monkeypatch.setattr(launch, "Kernel", FakeGpuKernel)


def address(array: np.ndarray) -> int:
    return int(array.ctypes.data)


def nv12_in_memory(image, pad=40):
    """NV12 of a BGR frame in one host array (Y rows then UV rows, ``pad`` bytes past each row), and its handle."""
    y, uv = bgr_to_nv12(image)
    h, w = y.shape
    rows = np.zeros((h + h // 2, w + pad), np.uint8)
    rows[:h, :w], rows[h:, :w] = y, uv
    return (y, uv), rows, Nv12Frame.contiguous(address(rows), w, h, w + pad)


CONTRACTS = [Preprocess(),
             Preprocess(height=320, width=320, resize="letterbox", mean=(0.0,), std=(1.0,)),
             Preprocess(height=300, width=300, resize="stretch", color="bgr", scale=1.0, mean=(127.5,),
                        std=(127.5,)),
             Preprocess(height=96, width=128, color="gray", mean=(0.5,), std=(0.25,), layout="nhwc")]


@pytest.mark.parametrize("contract", CONTRACTS, ids=["crop", "letterbox", "stretch-bgr", "gray-nhwc"])
@pytest.mark.parametrize("color", [BT601_LIMITED, BT709_LIMITED, ColorSpec("bt709", "full")],
                         ids=["601-limited", "709-limited", "709-full"])
def test_the_kernel_source_computes_the_reference(cpu_gpu, bikes_frames, contract, color):
    frames = [nv12_in_memory(bikes_frames[i]) for i in (5, 160)]
    pre = GpuPreprocessor(contract, batch=3, color=color)
    out32 = np.zeros(pre.output_nbytes, np.uint8)
    pre.run([f[2] for f in frames], out_ptr=address(out32))
    fp32 = out32.view(np.float32).reshape(pre.output_shape)[:2]
    assert np.abs(fp32 - reference_nv12([f[0] for f in frames], contract, color)).max() <= 1e-3
    half = GpuPreprocessor(contract, batch=3, out_dtype="float16", color=color)
    out16 = np.zeros(half.output_nbytes, np.uint8)
    half.run([f[2] for f in frames], out_ptr=address(out16))
    fp16 = out16.view(np.float16).reshape(half.output_shape)[:2]
    assert np.array_equal(fp32.astype(np.float16).view(np.uint16), fp16.view(np.uint16))


@pytest.mark.parametrize("contract", CONTRACTS[:3], ids=["crop", "letterbox", "stretch-bgr"])
def test_the_kernel_source_crops_tiles_as_if_cut_out_first(cpu_gpu, bikes_frames, contract):
    """``--detector-tiles 2`` on the GPU path: each tile of a 2x2 grid (0.6 of the side; on 640x272 frames an odd
    origin, y0 = 109, and odd sizes) through the kernel's crop equals the reference of the tile cut out of the
    frame's RGB first: the tile resampled as an image of its own, its chroma on the frame's 2x2 grid."""
    from jetforge.runtime.cuda.kernels.plan import plan_for
    from jetforge.runtime.cuda.kernels.reference import normalise_reference, nv12_to_rgb, resize_reference
    from jetforge.vision.tiles import tile_pixels, tile_rects, tile_side_for

    frames = [nv12_in_memory(bikes_frames[i]) for i in (5, 160)]
    pre = GpuPreprocessor(contract, batch=2, color=BT601_LIMITED)
    odd = False
    for rect in tile_rects(2, tile_side_for(2)):
        y0, x0, y1, x1 = tile_pixels((272, 640), rect)
        odd = odd or bool(y0 % 2 or x0 % 2 or (y1 - y0) % 2)
        out = np.zeros(pre.output_nbytes, np.uint8)
        pre.run([f[2] for f in frames], out_ptr=address(out), crop=(y0, x0, y1, x1))
        got = out.view(np.float32).reshape(pre.output_shape)
        plan = plan_for(contract, (y1 - y0, x1 - x0))
        want = np.stack([normalise_reference(resize_reference(nv12_to_rgb(y, uv, BT601_LIMITED)[y0:y1, x0:x1], plan),
                                             plan) for y, uv in (f[0] for f in frames)])
        assert np.abs(got - want).max() <= 1e-3  # as the whole frames: float32 sampling against float64
    assert odd
    with pytest.raises(Exception, match="not inside"):
        pre.run([frames[0][2]], out_ptr=address(np.zeros(pre.output_nbytes, np.uint8)), crop=(0, 0, 300, 10))


@pytest.mark.parametrize("order", ["rgb", "bgr"])
def test_packed_frames_through_the_kernel_source(cpu_gpu, bikes_frames, order):
    contract = CONTRACTS[0]
    images = [bikes_frames[i] if order == "bgr" else np.ascontiguousarray(bikes_frames[i][:, :, ::-1])
              for i in (30, 75)]
    padded = [np.pad(im.reshape(im.shape[0], -1), ((0, 0), (0, 24))) for im in images]
    handles = [PackedFrame(address(p), p.shape[1], im.shape[1], im.shape[0]) for p, im in zip(padded, images)]
    pre = GpuPreprocessor(contract, batch=2, input_format=order)
    out = np.zeros(pre.output_nbytes, np.uint8)
    pre.run(handles, out_ptr=address(out))
    got = out.view(np.float32).reshape(pre.output_shape)
    assert np.abs(got - reference_packed(images, contract, order)).max() <= 1e-3


def test_the_ssd_kernel_source_gives_postprocess_detections(cpu_gpu, monkeypatch):
    """GpuSsdDecoder's launch on the fixture's real outputs, with host memory standing in for device memory."""
    from jetforge.runtime.cuda.kernels import ssd

    data = np.load(str(FIXTURE))
    enc, logits = data["enc"], data["logits"]
    spec = SSDSpec.from_dict(json.loads(str(data["spec"])))

    class HostBuffer:  # DeviceBuffer / PinnedBuffer on the host: copies are memmove, the stream is ignored
        def __init__(self, nbytes):
            self.nbytes = nbytes
            self.data = np.zeros(nbytes, np.uint8)
            self.ptr = address(self.data)

        def array(self, shape, dtype):
            return self.data[:int(np.prod(shape)) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)

        def copy_from_host(self, src, nbytes=None, stream=None):
            ctypes.memmove(self.ptr, src.ptr, self.nbytes if nbytes is None else nbytes)

        def copy_to_host(self, dst, nbytes=None, stream=None):
            ctypes.memmove(dst.ptr, self.ptr, self.nbytes if nbytes is None else nbytes)

        def fill_bytes(self, value, nbytes=None, stream=None):
            self.data[:self.nbytes if nbytes is None else nbytes] = value

        def close(self):
            pass

    monkeypatch.setattr(ssd, "DeviceBuffer", HostBuffer)
    monkeypatch.setattr(ssd, "PinnedBuffer", HostBuffer)
    monkeypatch.setattr(ssd, "_sync", lambda stream: None)
    monkeypatch.setattr("jetforge.runtime.cuda.bindings.synchronize_device", lambda: None)
    for threshold in (0.3, 0.5):
        dec = GpuSsdDecoder(spec, batch=4, prefetch_per_frame=2)
        got = dec.run(address(enc), address(logits), len(enc), stream=None, score_threshold=threshold)
        want = postprocess(enc, logits, spec, score_threshold=threshold)
        t = effective_threshold(spec, threshold)
        assert dec.last_candidates == len(candidates_reference(enc, logits, spec, t))
        assert dec.last_candidates > 4 * 2  # more than the first copy holds: the second, whole copy ran
        for g, w in zip(got, want):
            assert len(g) == len(w) > 0 and np.array_equal(g.classes, w.classes)
            assert np.abs(g.boxes - w.boxes).max() <= 1e-5 and np.abs(g.scores - w.scores).max() <= 1e-6


class PlaneView:
    """One plane of a decoded frame as PyNvVideoCodec's ``frame.cuda()`` describes it (here in host memory)."""

    def __init__(self, rows: np.ndarray):
        self.__cuda_array_interface__ = {"data": (address(rows), False), "shape": rows.shape,
                                         "strides": rows.strides, "typestr": "|u1", "version": 3}


class PitchedDecodedFrame:
    """A decoder's NV12 surface stand-in: Y and UV planes ``pitch`` bytes a row, in two separate host arrays, at an
    address ``offset`` bytes past an 8-byte boundary (0: aligned)."""

    def __init__(self, y: np.ndarray, uv: np.ndarray, pitch: int, offset: int = 0):
        h, w = y.shape
        self.memory = np.zeros(h * pitch + (h // 2) * pitch + 2 * offset + 16, np.uint8)
        base = (-address(self.memory)) % 8 + offset
        self.y = self.memory[base:base + h * pitch].reshape(h, pitch)
        start = base + h * pitch + offset
        self.uv = self.memory[start:start + (h // 2) * pitch].reshape(h // 2, pitch)
        self.y[:, :w], self.uv[:, :w] = y, uv
        self.y[:, w:], self.uv[:, w:] = 255, 255  # the pitch's padding must not reach the copy

    def cuda(self):
        return [PlaneView(self.y), PlaneView(self.uv)]


def _nv12_planes(image):
    y, uv = bgr_to_nv12(image)
    return y, uv


@pytest.mark.parametrize("size, offset", [((640, 272), 0), ((640, 272), 3), ((642, 272), 0)],
                         ids=["aligned-8-byte-units", "unaligned-source-bytes", "odd-quarter-width-bytes"])
def test_the_copy_kernel_source_makes_contiguous_nv12_copies_of_pitched_frames(cpu_gpu, bikes_frames, size, offset):
    """Nv12Copier: 35 frames (more than one launch's table of 32, so the full table launches first) with a row pitch
    wider than the rows, the planes in separate allocations, copied by the kernel source into (H*3/2, W) buffers:
    byte for byte the planes, none of the padding; 8-byte units only where every address and the width allow."""
    from jetforge.runtime.cuda.kernels.copy import Nv12Copier
    from jetforge.runtime.cuda.kernels.sources import MAX_COPIES

    w, h = size
    planes = [_nv12_planes(cv2_resize(list(bikes_frames.values())[i % len(bikes_frames)], w, h)) for i in range(MAX_COPIES + 3)]
    frames = [PitchedDecodedFrame(y, uv, pitch=w + 64 + offset, offset=offset) for y, uv in planes]
    outs = [np.full((h * 3 // 2, w), 7, np.uint8) for _ in frames]
    copier = Nv12Copier(w, h)
    units = []
    launch_of = copier.kernel.launch
    copier.kernel.launch = lambda grid, block, args, stream=None: (units.append(args.unit), launch_of(grid, block, args))
    for f, out in zip(frames, outs):
        copier.add(address(f.y), address(f.uv), f.y.strides[0], address(out))
    assert copier.pending == 3 and copier.launches == 1
    copier.launch()
    assert copier.pending == 0 and copier.launches == 2
    for (y, uv), out in zip(planes, outs):
        assert np.array_equal(out[:h], y) and np.array_equal(out[h:], uv)
    assert units == [8 if (offset == 0 and w % 8 == 0) else 1] * 2


class HostDeviceBuffer:
    """cuda.DeviceBuffer's stand-in: host bytes at an address the kernel's CPU build reads and writes."""

    made: list = []

    def __init__(self, nbytes):
        self.nbytes, self.data = nbytes, np.zeros(nbytes, np.uint8)
        self.ptr = address(self.data)
        self.closed = False
        HostDeviceBuffer.made.append(self)

    def copy_to_host(self, dst, nbytes, stream=None):
        assert nbytes <= min(self.nbytes, dst.nbytes) and stream is not None
        ctypes.memmove(dst.ptr, self.ptr, nbytes)

    def close(self):
        self.closed = True


class HostPinnedBuffer(HostDeviceBuffer):
    """cuda.PinnedBuffer's stand-in."""

    def array(self, shape, dtype):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.data[:n].view(dtype).reshape(shape)


class HostStream:
    """cuda.Stream's stand-in: counts the waits, keeps the priority it was made with."""

    syncs = 0

    def __init__(self, priority="default"):
        self.priority = priority

    def synchronize(self):
        HostStream.syncs += 1

    def close(self):
        pass


@pytest.fixture
def host_cuda(monkeypatch):
    """CUDA's device memory, pinned memory and streams replaced by the host stand-ins above; yields the buffers
    made (in order)."""
    from jetforge.runtime import cuda

    HostDeviceBuffer.made = []
    HostStream.syncs = 0
    monkeypatch.setattr(cuda, "DeviceBuffer", HostDeviceBuffer)
    monkeypatch.setattr(cuda, "PinnedBuffer", HostPinnedBuffer)
    monkeypatch.setattr(cuda, "Stream", HostStream)
    yield HostDeviceBuffer.made


def test_the_frame_ring_copies_a_fetch_in_one_launch_before_anyone_sees_it(cpu_gpu, bikes_frames, host_cuda):
    """DeviceFrameRing(defer_sync=True) queues a fetch's frames and copies them in flush() by one launch of the copy
    kernel; the owned frames survive the decoder reusing its surfaces; the ring's slots are reused in turn.  CUDA's
    memory and stream are host stand-ins, the kernel is its own source run on the CPU."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.apps.video.sources.gpu.nvdec import array_plane_pointers

    buffers = host_cuda
    w, h = 640, 272
    ring = DeviceFrameRing(slots=6, defer_sync=True)
    assert ring.batch_copy
    planes = [_nv12_planes(cv2_resize(image, w, h)) for image in list(bikes_frames.values())[:8]]
    kept = []
    for fetch in (planes[:4], planes[4:]):
        surfaces = [PitchedDecodedFrame(y, uv, pitch=768) for y, uv in fetch]
        owned = [ring(s, w, h) for s in surfaces]
        assert ring._copier.pending == len(fetch)  # queued, not copied yet
        ring.flush()
        for s in surfaces:
            s.y[:], s.uv[:] = 0, 0  # the decoder reuses its surfaces after the fetch
        kept.append([host_bytes(o.ptr, w * h * 3 // 2).reshape(-1, w).copy() for o in owned])
        assert [array_plane_pointers(o, h) for o in owned] == [(o.ptr, o.ptr + w * h, w) for o in owned]
    assert ring._copier.launches == 2 and HostStream.syncs == 2
    for (y, uv), got in zip(planes, kept[0] + kept[1]):
        assert np.array_equal(got[:h], y) and np.array_equal(got[h:], uv)
    assert len(buffers) == 6  # allocated once; the 6 frames took the slots in turn
    with pytest.raises(ConfigError, match="waits once per fetch"):
        DeviceFrameRing(slots=4, defer_sync=False, batch_copy=True)
    assert not DeviceFrameRing(slots=4).batch_copy  # a wait per frame: the two copy calls per frame, as before


def host_bytes(ptr, n):
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr))


def cv2_resize(image, w, h):
    import cv2

    return cv2.resize(image, (w, h), interpolation=cv2.INTER_AREA)


def test_a_batch_copied_back_by_one_launch_and_one_copy_equals_its_planes(cpu_gpu, bikes_frames, host_cuda):
    """BatchCopyBack (the GPU path's render-on copy back): a batch of pitched NV12 frames gathered by one launch of
    the copy kernel into one buffer, one device-to-host copy into pinned memory, one wait; each array equals its
    frame's planes byte for byte, stays as it was when the next batch reuses the buffers, and a larger batch or
    another size makes the buffers again.  CUDA's memory, pinned memory and stream are host stand-ins."""
    from types import SimpleNamespace

    from jetforge.apps.pipeline.copy_back import BatchCopyBack

    made = host_cuda

    def frames_of(images, w, h, pitch):
        planes = [_nv12_planes(cv2_resize(image, w, h)) for image in images]
        surfaces = [PitchedDecodedFrame(y, uv, pitch=pitch) for y, uv in planes]
        return planes, surfaces, [SimpleNamespace(y_ptr=address(s.y), uv_ptr=address(s.uv), pitch=pitch, width=w,
                                                  height=h) for s in surfaces]

    images = list(bikes_frames.values())
    back = BatchCopyBack(max_frames=4)
    planes, surfaces, frames = frames_of(images[:3], 640, 272, 768)
    first = back(frames)
    assert back.launches == 1 and back._copier.launches == 1 and HostStream.syncs == 1
    assert len(made) == 2  # one device buffer and one pinned buffer, for 4 frames
    second_planes, _, second = frames_of(images[3:7], 640, 272, 704)
    again = back(second)  # the same buffers, overwritten
    assert len(made) == 2 and back._copier.launches == 2
    for (y, uv), got in zip(planes + second_planes, first + again):
        assert got.shape == (272 * 3 // 2, 640)
        assert np.array_equal(got[:272], y) and np.array_equal(got[272:], uv)  # the first batch kept its bytes
    bigger_planes, _, bigger = frames_of(images[:6], 320, 180, 384)  # another size, more than max_frames
    for (y, uv), got in zip(bigger_planes, back(bigger)):
        assert np.array_equal(got[:180], y) and np.array_equal(got[180:], uv)
    assert len(made) == 4 and made[0].closed and made[1].closed
    assert back([]) == []
    with pytest.raises(ConfigError, match="one size"):
        back(frames[:1] + bigger[:1])
    back.close()
    assert made[2].closed and made[3].closed


def test_the_copy_back_takes_device_nv12_batches_of_one_size_only():
    """BatchCopyBack.takes: what the app's and the benchmark's render on send to it; the rest goes frame by frame."""
    from types import SimpleNamespace

    from jetforge.apps.pipeline.copy_back import BatchCopyBack

    def frame(w=640, h=272, y_ptr=4096, on_host=False, layout="nv12"):
        return SimpleNamespace(width=w, height=h, y_ptr=y_ptr, on_host=on_host, layout=layout)

    assert BatchCopyBack.takes([frame(), frame()])
    assert not BatchCopyBack.takes([frame(), frame(w=320, h=180)])  # two sizes
    assert not BatchCopyBack.takes([frame(), frame(on_host=True)])  # a CPU decoder's frame
    assert not BatchCopyBack.takes([frame(layout="rgb")])  # jetson-utils' packed frames
    assert not BatchCopyBack.takes([frame(y_ptr=0)])  # plane pointers not known


def test_the_frame_ring_copies_on_a_high_priority_stream_when_asked(cpu_gpu, bikes_frames, host_cuda):
    """DeviceFrameRing(copy_priority="high") makes its copy stream with the device's greatest priority (so its
    copy kernel does not queue behind a model's kernels) and copies the same bytes; an unknown priority is refused."""
    from jetforge.apps.video.sources.gpu.device_ring import DeviceFrameRing
    from jetforge.errors import ConfigError

    w, h = 640, 272
    y, uv = _nv12_planes(cv2_resize(list(bikes_frames.values())[0], w, h))
    rings = {p: DeviceFrameRing(slots=4, defer_sync=True, copy_priority=p) for p in ("default", "high")}
    surfaces = {p: PitchedDecodedFrame(y, uv, pitch=768) for p in rings}  # alive until the copies are made
    owned = {p: ring(surfaces[p], w, h) for p, ring in rings.items()}
    for ring in rings.values():
        ring.flush()
    assert rings["high"]._stream.priority == "high" and rings["default"]._stream.priority == "default"
    got = {p: next(b for b in host_cuda if b.ptr == o.ptr).data.copy() for p, o in owned.items()}
    assert np.array_equal(got["high"], got["default"])
    assert np.array_equal(got["high"][: w * h], y.reshape(-1)) and np.array_equal(got["high"][w * h:], uv.reshape(-1))
    with pytest.raises(ConfigError, match="copy priority"):
        DeviceFrameRing(copy_priority="urgent")
