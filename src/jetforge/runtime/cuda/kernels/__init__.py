"""GPU kernels of the video path, compiled at run time with NVRTC through cuda-python (no torch).

Why: JetPack has no torch, and on a Jetson the CPU, not the GPU, limits a video app; these kernels
keep decoded frames on the GPU from the decoder to the model (:class:`GpuPreprocessor`: NV12 or
packed RGB/BGR -> the model input contract's tensor, one fused launch per batch) and send back only
the detector's candidates (:class:`GpuSsdKernel`; the SSD decoder's host half on them is
:class:`jetforge.vision.ssd_gpu.GpuSsdDecoder`).  NVRTC compiles without a GPU, so CI compiles
every kernel for the boards' architectures; the float64 numpy reference of the same maths
(:mod:`.reference`) is what the kernels are tested against on a GPU.

Importing this package imports no CUDA library; cuda-python is loaded when a kernel is first made.
"""

from jetforge.runtime.cuda.kernels.color import BT601_LIMITED, BT709_LIMITED, ColorSpec  # noqa: F401
from jetforge.runtime.cuda.kernels.plan import KernelPlan, plan_for  # noqa: F401
from jetforge.runtime.cuda.kernels.preprocess import GpuPreprocessor, Nv12Frame, PackedFrame  # noqa: F401
from jetforge.runtime.cuda.kernels.ssd import GpuSsdKernel  # noqa: F401

__all__ = ["BT601_LIMITED", "BT709_LIMITED", "ColorSpec", "GpuPreprocessor", "GpuSsdKernel", "KernelPlan",
           "Nv12Frame", "PackedFrame", "plan_for"]
