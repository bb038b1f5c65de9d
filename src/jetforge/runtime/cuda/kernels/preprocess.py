"""GPU preprocessing: decoded frames on the GPU -> the model's input batch, in ONE fused kernel launch.

Why a kernel of our own: on a Jetson the CPU is the bottleneck long before the GPU or DLA
(decode, colour conversion, resize and normalisation in OpenCV cost milliseconds per frame on
ARM cores), and JetPack has no torch to do this on the GPU.  Frames decoded by NVDEC (desktop:
PyNvVideoCodec) or the Jetson decoders (NvBufSurface) are NV12 in GPU memory; this kernel turns a
batch of them into the normalised NCHW FP32/FP16 tensor the model's input contract asks for
(:mod:`jetforge.runtime.inputs`, the same geometry as the CPU path: see :mod:`.plan`), reading each
frame pixel it needs once and writing the batch once.  The frame table (device pointers and pitches)
is a kernel parameter, so :meth:`GpuPreprocessor.run` is one ``cuLaunchKernel`` and no copy, and can
be captured in a CUDA graph.  Packed RGB/BGR frames (CPU-decoded frames uploaded once, or
PyNvVideoCodec's RGB output) use the same kernel compiled for that format.

>>> pre = GpuPreprocessor(contract, batch=16, out_dtype="float16", color=ColorSpec("bt709"))  # doctest: +SKIP
>>> ptr = pre.run([Nv12Frame.contiguous(frame_ptr, 1280, 720, pitch)], stream)              # doctest: +SKIP
"""

import ctypes
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from jetforge.errors import ConfigError
from jetforge.runtime.cuda.kernels.color import ColorSpec
from jetforge.runtime.cuda.kernels.plan import KernelPlan, check_input_format, check_out_dtype, plan_for
from jetforge.runtime.cuda.kernels.sources import MAX_FRAMES, PREPROCESS_KERNEL, preprocess_source
from jetforge.runtime.cuda.memory import DeviceBuffer, nbytes_of

BLOCK = (32, 8, 1)


@dataclass(frozen=True)
class Nv12Frame:
    """An NV12 frame in GPU memory: a Y plane and an interleaved UV plane (half height), pitch-linear."""

    y_ptr: int
    y_pitch: int
    uv_ptr: int
    uv_pitch: int
    width: int
    height: int

    @classmethod
    def contiguous(cls, ptr: int, width: int, height: int, pitch: int) -> "Nv12Frame":
        """NV12 in one allocation: ``height`` Y rows, then ``height / 2`` UV rows, all of ``pitch`` bytes."""
        return cls(int(ptr), int(pitch), int(ptr) + int(pitch) * int(height), int(pitch), int(width), int(height))

    def table_entry(self) -> Tuple[int, int, int, int]:
        return self.y_ptr, self.uv_ptr, self.y_pitch, self.uv_pitch


@dataclass(frozen=True)
class PackedFrame:
    """An HxWx3 uint8 frame (RGB or BGR, as the preprocessor's ``input_format`` says) in GPU memory."""

    ptr: int
    pitch: int
    width: int
    height: int

    def table_entry(self) -> Tuple[int, int, int, int]:
        return self.ptr, 0, self.pitch, 0


class _FrameRef(ctypes.Structure):
    _fields_ = [("plane0", ctypes.c_uint64), ("plane1", ctypes.c_uint64), ("pitch0", ctypes.c_int32),
                ("pitch1", ctypes.c_int32)]


class PreArgs(ctypes.Structure):
    """Mirror of the kernel's ``struct PreArgs`` (:data:`.sources.PREPROCESS_SOURCE`), field for field."""

    _fields_ = ([("frames", _FrameRef * MAX_FRAMES), ("out", ctypes.c_uint64), ("scale_x", ctypes.c_double),
                 ("scale_y", ctypes.c_double)]
                + [(n, ctypes.c_int32) for n in ("count", "src_w", "src_h", "out_w", "out_h", "fp16", "region_x0",
                                                 "region_y0", "region_x1", "region_y1", "shift_x", "shift_y")]
                + [(n, ctypes.c_float) for n in ("y_offset", "cy", "crv", "cgu", "cgv", "cbu",
                                                 "a0", "a1", "a2", "b0", "b1", "b2", "pad")]
                + [("crop_x", ctypes.c_int32), ("crop_y", ctypes.c_int32), ("reserved", ctypes.c_int32)])


def fill_args(args: PreArgs, plan: KernelPlan, color: ColorSpec, fp16: bool) -> None:
    """The frame-independent fields of ``args`` from the plan and the stream's colour description."""
    k = color.coefficients()
    args.src_w, args.src_h, args.out_w, args.out_h = plan.src_w, plan.src_h, plan.out_w, plan.out_h
    args.fp16 = int(fp16)
    args.region_x0, args.region_y0, args.region_x1, args.region_y1 = plan.region
    args.shift_x, args.shift_y = plan.shift
    args.scale_x, args.scale_y = plan.scale
    args.y_offset, args.cy, args.crv, args.cgu, args.cgv, args.cbu = k.y_offset, k.cy, k.crv, k.cgu, k.cgv, k.cbu
    args.a0, args.a1, args.a2 = plan.a
    args.b0, args.b1, args.b2 = plan.b
    args.pad = plan.pad_value


class GpuPreprocessor:
    """Batches of up to ``batch`` same-size frames -> the model's input tensor, on the GPU.

    ``contract`` is the model's image input contract (``input_contract(sidecar, "image")``);
    ``out_dtype`` defaults to the contract's dtype; ``input_format`` is ``nv12`` (decoder output),
    ``rgb`` or ``bgr`` (packed uint8); ``color`` is the stream's YUV description (NV12 only).
    The kernel is compiled for the current GPU on construction (once per process and source).
    One thread at a time: :meth:`run` fills a launch-argument struct it keeps per frame size (the launch
    copies it, so reusing it after ``run`` returns is safe); give each pipeline thread its own preprocessor.
    """

    def __init__(self, contract: Any, batch: int, out_dtype: Optional[str] = None, input_format: str = "nv12",
                 color: ColorSpec = ColorSpec()) -> None:
        from jetforge.runtime.cuda.kernels.launch import Kernel

        if not 1 <= int(batch) <= MAX_FRAMES:
            raise ConfigError("GPU preprocessing batch must be 1..%d, got %s" % (MAX_FRAMES, batch),
                              hint="split larger batches into several launches")
        plan_for(contract, (contract.height, contract.width))  # rejects a contract the kernel cannot serve
        self.contract = contract
        self.batch = int(batch)
        self.out_dtype = check_out_dtype(out_dtype or contract.dtype)
        self.input_format = check_input_format(input_format)
        self.color = color
        self.kernel = Kernel(preprocess_source(self.input_format, contract.color, contract.layout == "nhwc"),
                             PREPROCESS_KERNEL)
        self.output_shape = self._shape(self.batch)
        self.output_nbytes = nbytes_of(self.output_shape, self.out_dtype)
        self._output: Optional[DeviceBuffer] = None
        self._args: Dict[Tuple[int, ...], PreArgs] = {}

    def _shape(self, n: int) -> Tuple[int, ...]:
        c = self.contract
        return (n, c.height, c.width, c.channels) if c.layout == "nhwc" else (n, c.channels, c.height, c.width)

    @property
    def output(self) -> DeviceBuffer:
        """The device buffer the batch is written to when ``run`` gets no ``out_ptr`` (allocated on first use)."""
        if self._output is None:
            self._output = DeviceBuffer(self.output_nbytes)
        return self._output

    def plan(self, frame_hw: Tuple[int, int]) -> KernelPlan:
        return plan_for(self.contract, frame_hw)

    def _args_for(self, frame_hw: Tuple[int, int], crop: Tuple[int, int, int, int]) -> PreArgs:
        key = tuple(frame_hw) + tuple(crop)
        args = self._args.get(key)
        if args is None:
            y0, x0, y1, x1 = crop
            args = self._args[key] = PreArgs()
            fill_args(args, self.plan((y1 - y0, x1 - x0)), self.color, self.out_dtype == "float16")
            args.crop_x, args.crop_y = x0, y0
        return args

    def run(self, frames: Sequence[Any], stream: Any = None, out_ptr: Optional[int] = None,
            crop: Optional[Tuple[int, int, int, int]] = None) -> int:
        """Queue the kernel for ``frames`` (Nv12Frame or PackedFrame, one size) on ``stream``; return the output pointer.

        Output row ``i`` is frame ``i``; rows past ``len(frames)`` are left as they were.  Nothing
        is synchronised: the output is ready when the stream reaches this point.  ``crop``: ``(y0, x0, y1, x1)``
        frame pixels (:func:`jetforge.vision.tiles.tile_pixels`): the model sees that tile of each frame as if it
        had been cut out first (the tiles of ``--detector-tiles``); any origin and size, NV12 included.
        """
        frames = list(frames)
        if not 1 <= len(frames) <= self.batch:
            raise ConfigError("GPU preprocessing got %d frames; this preprocessor takes 1..%d"
                              % (len(frames), self.batch), hint="make the preprocessor with a larger batch")
        want = Nv12Frame if self.input_format == "nv12" else PackedFrame
        hw = (frames[0].height, frames[0].width)
        for f in frames:
            if not isinstance(f, want):
                raise ConfigError("this preprocessor reads %s frames, got a %s" % (self.input_format, type(f).__name__),
                                  hint="make one GpuPreprocessor per frame format")
            if (f.height, f.width) != hw:
                raise ConfigError("frames of one batch must have one size, got %dx%d and %dx%d"
                                  % (hw[1], hw[0], f.width, f.height), hint="batch streams of one size together")
        if self.input_format == "nv12" and (hw[0] % 2 or hw[1] % 2):
            raise ConfigError("an NV12 frame has an even size, got %dx%d" % (hw[1], hw[0]))
        crop = (0, 0, hw[0], hw[1]) if crop is None else tuple(int(v) for v in crop)
        if not (0 <= crop[0] < crop[2] <= hw[0] and 0 <= crop[1] < crop[3] <= hw[1]):
            raise ConfigError("crop %r (y0, x0, y1, x1) is not inside the %dx%d frames" % (crop, hw[1], hw[0]))
        args = self._args_for(hw, crop)  # type: ignore[arg-type]
        for i, f in enumerate(frames):
            entry = args.frames[i]
            entry.plane0, entry.plane1, entry.pitch0, entry.pitch1 = f.table_entry()
        args.count = len(frames)
        args.out = int(out_ptr) if out_ptr is not None else self.output.ptr
        c = self.contract
        grid = ((c.width + BLOCK[0] - 1) // BLOCK[0], (c.height + BLOCK[1] - 1) // BLOCK[1], len(frames))
        self.kernel.launch(grid, BLOCK, args, stream)
        return int(args.out)

    def close(self) -> None:
        if self._output is not None:
            self._output.close()
            self._output = None

    def __enter__(self) -> "GpuPreprocessor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["GpuPreprocessor", "Nv12Frame", "PackedFrame", "PreArgs", "fill_args"]
