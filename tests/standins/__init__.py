"""Stand-ins for hardware and libraries that CI does not have, for tests only; each is named as a stand-in.

:func:`standin_tensorrt` puts the TensorRT stand-in (:mod:`.tensorrt_standin`) where ``import tensorrt`` finds it
and the host-memory CUDA stand-in (:mod:`.cuda_runtime_standin`) behind jetforge's one CUDA seam
(:func:`jetforge.runtime.cuda.bindings.use_runtime_api`), for the length of a ``with`` block, and restores both.
"""

import contextlib
import sys
from typing import Any, Iterator, Optional

_DEVICE: Optional[Any] = None


def active_cuda_device() -> Any:
    """The stand-in CUDA device the TensorRT stand-in reads and writes (only inside :func:`standin_tensorrt`)."""
    if _DEVICE is None:
        raise RuntimeError("the TensorRT stand-in runs only inside tests.standins.standin_tensorrt()")
    return _DEVICE


@contextlib.contextmanager
def standin_tensorrt(real_cuda: bool = False) -> Iterator[Any]:
    """``import tensorrt`` gives the stand-in and CUDA calls go to host memory; yields the stand-in CUDA device.

    ``real_cuda``: keep cuda-python (a GPU machine): real buffers, streams and graphs, only TensorRT stood in for
    (:mod:`.cuda_bridge_standin`); yields the bridge."""
    global _DEVICE
    from jetforge.runtime.cuda import bindings

    from tests.standins import cuda_runtime_standin, tensorrt_standin

    saved_module = sys.modules.get("tensorrt")
    sys.modules["tensorrt"] = tensorrt_standin
    if real_cuda:
        from tests.standins.cuda_bridge_standin import RealCudaBridge

        device, previous = RealCudaBridge(), None
    else:
        api = cuda_runtime_standin.make_module()
        device, previous = api.device, bindings.use_runtime_api(api)
    _DEVICE = device
    try:
        yield device
    finally:
        _DEVICE = None
        if real_cuda:
            device.close()
        else:
            bindings.use_runtime_api(previous)
        if saved_module is None:
            sys.modules.pop("tensorrt", None)
        else:
            sys.modules["tensorrt"] = saved_module
