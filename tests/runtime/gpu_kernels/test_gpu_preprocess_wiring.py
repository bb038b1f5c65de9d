"""GpuPreprocessor's host side on any CPU: the launch it queues, run by FakeKernel, a numpy transcription of the kernel.

No GPU here, so :class:`FakeKernel` stands in for the compiled kernel: it reads the same ctypes
argument struct the real launch passes, the compile-time macros of the same source, and frame
bytes from :class:`FakeDeviceMemory` at the device pointers of the frame table, and computes what
``jf_preprocess`` computes, line for line, in float32.  That checks the frame table, pitches, the
geometry/colour/normalisation fields, the grid, ``out_ptr`` and the FP16 flag against the float64
reference; the CUDA C itself is checked on a GPU (test_kernels_gpu.py).
"""

import re

import numpy as np
import pytest

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.kernels import launch
from jetforge.runtime.cuda.kernels.color import BT709_LIMITED, ColorSpec
from jetforge.runtime.cuda.kernels.preprocess import GpuPreprocessor, Nv12Frame, PackedFrame
from jetforge.runtime.cuda.kernels.reference import bgr_to_nv12, reference_nv12, reference_packed
from jetforge.runtime.inputs import Preprocess

cv2 = pytest.importorskip("cv2")
f32 = np.float32


class FakeDeviceMemory:
    """Byte arrays at made-up device addresses."""

    def __init__(self):
        self.blocks = {}
        self.next = 0x7F0000000000

    def put(self, data: np.ndarray) -> int:
        ptr = self.next
        self.blocks[ptr] = np.ascontiguousarray(data).reshape(-1).view(np.uint8).copy()
        self.next += (len(self.blocks[ptr]) + 0xFFFF) & ~0xFFFF
        return ptr

    def locate(self, ptr: int):
        for base, block in self.blocks.items():
            if base <= ptr < base + len(block):
                return block, ptr - base
        raise AssertionError("the kernel would read unmapped device memory at %#x" % ptr)


class FakeKernel:
    """The preprocessing kernel in numpy (float32, as the CUDA C: one output pixel per (x, y), all of the batch)."""

    memory = None
    launches = []

    def __init__(self, source, name, options=()):
        self.macros = {k: int(v) for k, v in re.findall(r"#define (IN_FORMAT|OUT_ORDER|NHWC) (\d+)", source)}

    def launch(self, grid, block, args, stream=None):
        FakeKernel.launches.append((grid, block, args.count))
        assert grid[0] * block[0] >= args.out_w and grid[1] * block[1] >= args.out_h and grid[2] == args.count
        ox = np.arange(args.out_w)[None, :]
        oy = np.arange(args.out_h)[:, None]
        fx = np.clip((ox + args.shift_x + 0.5) * args.scale_x - 0.5, 0, args.src_w - 1)  # double, as the kernel
        fy = np.clip((oy + args.shift_y + 0.5) * args.scale_y - 0.5, 0, args.src_h - 1)
        x0, y0 = fx.astype(np.int64), fy.astype(np.int64)
        x1, y1 = np.minimum(x0 + 1, args.src_w - 1), np.minimum(y0 + 1, args.src_h - 1)
        ax, ay = (fx - x0).astype(f32), (fy - y0).astype(f32)
        inside = (ox >= args.region_x0) & (ox < args.region_x1) & (oy >= args.region_y0) & (oy < args.region_y1)
        for n in range(args.count):
            f = args.frames[n]
            c00, c01 = self.fetch(f, args, x0, y0), self.fetch(f, args, x1, y0)
            c10, c11 = self.fetch(f, args, x0, y1), self.fetch(f, args, x1, y1)
            top = [a + (b - a) * ax for a, b in zip(c00, c01)]
            bottom = [a + (b - a) * ax for a, b in zip(c10, c11)]
            r, g, b = [np.where(inside, t + (u - t) * ay, f32(args.pad)).astype(f32) for t, u in zip(top, bottom)]
            order = self.macros["OUT_ORDER"]
            planes = ([f32(0.299) * r + f32(0.587) * g + f32(0.114) * b] if order == 2
                      else [b, g, r] if order == 1 else [r, g, b])
            values = [p * f32(a) + f32(c) for p, a, c in zip(planes, (args.a0, args.a1, args.a2),
                                                            (args.b0, args.b1, args.b2))]
            self.store(args, n, np.stack(values, axis=-1 if self.macros["NHWC"] else 0))

    def fetch(self, f, args, x, y):
        if self.macros["IN_FORMAT"] == 0:
            ymem, yoff = self.memory.locate(f.plane0)
            uvmem, uvoff = self.memory.locate(f.plane1)
            luma = ymem[yoff + y * f.pitch0 + x].astype(f32)
            u = uvmem[uvoff + (y >> 1) * f.pitch1 + (x & ~1)].astype(f32) - f32(128)
            v = uvmem[uvoff + (y >> 1) * f.pitch1 + (x & ~1) + 1].astype(f32) - f32(128)
            yy = f32(args.cy) * (luma - f32(args.y_offset))
            return [np.clip(c, 0, 255).astype(f32) for c in (yy + f32(args.crv) * v,
                                                              yy + f32(args.cgu) * u + f32(args.cgv) * v,
                                                              yy + f32(args.cbu) * u)]
        mem, off = self.memory.locate(f.plane0)
        px = [mem[off + y * f.pitch0 + 3 * x + k].astype(f32) for k in range(3)]
        return px if self.macros["IN_FORMAT"] == 1 else px[::-1]

    def store(self, args, n, tensor):
        mem, off = self.memory.locate(args.out)
        dtype = np.float16 if args.fp16 else np.float32
        data = tensor.astype(dtype).reshape(-1).view(np.uint8)
        start = off + n * len(data)
        mem[start:start + len(data)] = data


@pytest.fixture
def fake(monkeypatch):
    FakeKernel.memory = FakeDeviceMemory()
    FakeKernel.launches = []
    monkeypatch.setattr(launch, "Kernel", FakeKernel)
    return FakeKernel.memory


def read_output(memory, ptr, shape, dtype):
    mem, off = memory.locate(ptr)
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return mem[off:off + n].view(dtype).reshape(shape)


def nv12_frame(memory, image, pad=48):
    y, uv = bgr_to_nv12(image)
    h, w = y.shape
    pitch = w + pad
    rows = np.zeros((h + h // 2, pitch), np.uint8)
    rows[:h, :w], rows[h:, :w] = y, uv
    return (y, uv), Nv12Frame.contiguous(memory.put(rows), w, h, pitch)


@pytest.mark.parametrize("contract", [Preprocess(), Preprocess(height=320, width=320, resize="letterbox"),
                                      Preprocess(height=64, width=96, resize="stretch", color="gray", layout="nhwc",
                                                 mean=(0.5,), std=(0.25,))],
                         ids=["crop", "letterbox", "gray-nhwc"])
def test_nv12_launch_computes_the_reference(fake, bikes_frames, contract):
    frames = [nv12_frame(fake, bikes_frames[i]) for i in (5, 140, 175)]
    pre = GpuPreprocessor(contract, batch=4, color=BT709_LIMITED)
    out_ptr = fake.put(np.zeros(pre.output_nbytes, np.uint8))
    assert pre.run([f[1] for f in frames], stream=None, out_ptr=out_ptr) == out_ptr
    got = read_output(fake, out_ptr, (3,) + pre.output_shape[1:], np.float32)
    assert np.abs(got - reference_nv12([f[0] for f in frames], contract, BT709_LIMITED)).max() <= 1e-3
    grid, block, count = FakeKernel.launches[-1]
    assert count == 3 and grid[2] == 3


def test_fp16_and_packed_bgr_launch(fake, bikes_frames):
    contract = Preprocess(height=300, width=300, resize="stretch", color="bgr", scale=1.0, mean=(127.5,),
                          std=(127.5,))
    image = bikes_frames[30]
    ptr = fake.put(np.pad(image.reshape(image.shape[0], -1), ((0, 0), (0, 16))))
    frame = PackedFrame(ptr, image.shape[1] * 3 + 16, image.shape[1], image.shape[0])
    pre = GpuPreprocessor(contract, batch=1, out_dtype="float16", input_format="bgr")
    out_ptr = fake.put(np.zeros(pre.output_nbytes, np.uint8))
    pre.run([frame], out_ptr=out_ptr)
    got = read_output(fake, out_ptr, pre.output_shape, np.float16)
    # FP16 keeps 11 significant bits: values of |x| <= 1 round by <= 2^-11
    assert np.abs(got.astype(np.float64) - reference_packed([image], contract, "bgr")).max() <= 1e-3 + 2.0 ** -11


def test_run_rejects_what_the_kernel_cannot_do(fake, bikes_frames):
    (_, a) = nv12_frame(fake, bikes_frames[5])
    (_, b) = nv12_frame(fake, np.ascontiguousarray(bikes_frames[5][:200, :300]))
    pre = GpuPreprocessor(Preprocess(), batch=2, color=ColorSpec("bt601", "full"))
    with pytest.raises(ConfigError, match="one size"):
        pre.run([a, b], out_ptr=1)
    with pytest.raises(ConfigError, match="1..2"):
        pre.run([a, a, a], out_ptr=1)
    with pytest.raises(ConfigError, match="reads nv12 frames"):
        pre.run([PackedFrame(1, 3, 1, 1)], out_ptr=1)
    with pytest.raises(ConfigError, match="even size"):
        pre.run([Nv12Frame(1, 4, 2, 4, 3, 3)], out_ptr=1)
    with pytest.raises(ConfigError, match="batch must be"):
        GpuPreprocessor(Preprocess(), batch=65)
