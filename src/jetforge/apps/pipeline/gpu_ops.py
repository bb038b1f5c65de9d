"""What the apps' GPU path does with a batch: the task's model as a :class:`GpuModel`, and the batch ops.

* :func:`gpu_model_for` - the part of an app's task the GPU path runs: its session, the model's input contract
  (built from the sidecar, as the CPU path's) and how a batch's raw outputs become what the task's
  ``postprocess`` reads (``item.output``).  The classify app and the people app's CNN detector have one; other
  tasks get one clear error naming the other ways to decode on the GPU.
* :class:`DeviceFrameOps` - frames in GPU memory (NVDEC, jetson-utils): one NVRTC preprocessing launch per batch
  into a device buffer, then the session fed that buffer: the TensorRT session binds it with
  ``set_tensor_address`` (``submit_device``); a backend that takes host arrays gets one copy of the finished input
  batch (not of the frames).  Written for CUDA through cuda-python; not executed in CI (no GPU).
* :class:`HostFrameOps` - frames in host memory (OpenCV decode, or :class:`FakeNvDecoder` standing in for NVDEC):
  the contract's CPU preprocessing, then the session.  Same flow and outputs, so the CPU tests check the path.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from jetforge.apps.pipeline.streams import BatchOps
from jetforge.apps.video.sources.gpu_frame import bgr_from_nv12, nv12_from_bgr
from jetforge.errors import ConfigError
from jetforge.optional import require

Outputs = Dict[str, np.ndarray]


@dataclass
class GpuModel:
    """A task's model as the GPU path runs it: ``to_outputs(batch outputs, frames) -> item.output per frame``;
    ``runs_on(frame)``: whether the task wants the model's answer for that frame (``--detect-every``)."""

    session: Any
    contract: Any
    to_outputs: Callable[[Outputs, List[Any]], List[Any]]
    runs_on: Callable[[Any], bool] = lambda frame: True

    @property
    def input_name(self) -> str:
        return str(self.session.inputs[0].name)


def gpu_model_for(task: Any) -> GpuModel:
    """The GPU path's view of ``task`` (duck-typed: the apps layer's tasks are not imported here)."""
    if getattr(task, "name", "") == "classify" and hasattr(task, "preprocessing") and hasattr(task, "session"):
        return GpuModel(task.session, task.preprocessing, _split_per_frame)
    detector = getattr(task, "detector", None)
    if getattr(detector, "tile_grid", 0):  # the GPU path feeds whole frames to the session: tiles would be ignored
        raise ConfigError("--detector-tiles runs on the CPU path only: --decode gpu feeds whole frames to the model",
                          hint="drop --detector-tiles, or use --decode cpu")
    if getattr(task, "name", "") == "people" and hasattr(detector, "session"):
        return _ssd_model(task, detector)
    raise ConfigError("--decode gpu runs the whole GPU path (GPU preprocessing, batched session) for the classify "
                      "app and the people app's CNN detector, not for %s" % (
                          "the HOG detector" if getattr(task, "name", "") == "people" else
                          "the %s app" % getattr(task, "name", "?")),
                      hint="use --decode cpu, or --source nvdec://FILE (NVDEC decode, frames copied to the CPU "
                           "pipeline)")


def _split_per_frame(outputs: Outputs, frames: List[Any]) -> List[Any]:
    """Row i of every output for frame i: what the classify task's ``postprocess`` reads."""
    return [{name: value[i] for name, value in outputs.items()} for i in range(len(frames))]


def _ssd_model(task: Any, detector: Any) -> GpuModel:
    """The people app's SSD person detector: raw outputs -> person Detections in each frame's pixels."""
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.model_facts import model_facts
    from jetforge.vision.ssd import spec_from_sidecar
    from jetforge.vision.ssd_batch import postprocess_batch

    session = detector.session
    facts = model_facts(session)  # an ONNX model's or an engine's (embedded) model facts
    contract = input_contract(facts, "image", purpose="the people app's GPU path")
    spec = spec_from_sidecar(facts)
    anchors = spec.anchors()
    names = [t.name for t in session.outputs[:2]]
    threshold = float(getattr(detector, "score_threshold", 0.5))
    every = max(1, int(getattr(task, "detect_every", 1)))

    def to_outputs(outputs: Outputs, frames: List[Any]) -> List[Any]:
        n = len(frames)
        found = postprocess_batch(outputs[names[0]][:n], outputs[names[1]][:n], spec, score_threshold=threshold,
                                  anchors=anchors)
        out: List[Any] = []
        for frame, det in zip(frames, found):
            if frame.index % every:
                out.append(None)  # a frame the detector skips: the tracks coast, as on the CPU path
                continue
            # what the people task's detectors hand it: Detections in the frame's pixels
            out.append(det.to_detections(contract.geometry((frame.height, frame.width)),
                                         (contract.height, contract.width)))
        return out

    return GpuModel(session, contract, to_outputs, lambda frame: frame.index % every == 0)


def host_bgr(frame: Any) -> np.ndarray:
    """A host frame as BGR: NV12 converted (BT.601, as OpenCV's own decode), BGR as it is."""
    import cv2

    if frame.layout == "bgr":
        return frame.data
    if frame.layout == "rgb":
        return frame.data[..., ::-1]
    return bgr_from_nv12(cv2, frame.host_nv12())


class HostFrameOps(BatchOps):
    """Frames in host memory: the contract's fused CPU preprocessing per frame, one session call per batch."""

    kind = "host frames: OpenCV preprocessing"

    def __init__(self, model: GpuModel) -> None:
        self.model = model
        self._prep = model.contract.fused()

    def launch(self, frames: List[Any], padded: int) -> Any:
        x = np.stack([self._prep(host_bgr(f)) for f in frames])
        if padded > len(frames):
            x = np.concatenate([x, np.repeat(x[-1:], padded - len(frames), axis=0)])
        return self.model.session.infer({self.model.input_name: x})

    def finish(self, handle: Any, frames: List[Any]) -> List[Any]:
        return self.model.to_outputs(handle, frames)

    def host_frames(self, handle: Any, frames: List[Any]) -> List[np.ndarray]:
        import cv2

        return [nv12_from_bgr(cv2, f.data) if f.layout == "bgr" else f.host_nv12() for f in frames]


class DeviceFrameOps(BatchOps):
    """Frames in GPU memory: NV12 -> the model's input in one NVRTC launch per batch, into a device buffer the
    session reads in place (not executed in CI: needs a GPU)."""

    def __init__(self, model: GpuModel, max_batch: int, first: Any) -> None:
        require("cuda", "the GPU video path (CUDA streams and buffers through cuda-python)")
        from jetforge.runtime import cuda
        from jetforge.runtime.cuda.kernels import ColorSpec, GpuPreprocessor

        self.model = model
        spec = model.session.inputs[0]
        self.dtype = str(spec.dtype) if str(spec.dtype) in ("float32", "float16") else "float32"
        self.pre = GpuPreprocessor(model.contract, batch=max_batch, out_dtype=self.dtype, input_format=first.layout,
                                   color=ColorSpec(first.matrix, "full" if first.full_range else "limited"))
        self.stream = cuda.Stream()
        self.buffer = cuda.DeviceBuffer(self.pre.output_nbytes)
        self.device_input = hasattr(model.session, "submit_device")
        self.kind = "GPU: NVRTC preprocessing, %s" % ("device input bound in place (set_tensor_address)"
                                                     if self.device_input else "input batch copied to the host "
                                                     "(this backend takes host arrays)")

    def _table(self, frames: List[Any]) -> List[Any]:
        from jetforge.runtime.cuda.kernels import Nv12Frame, PackedFrame

        if self.pre.input_format == "nv12":
            return [Nv12Frame(f.y_ptr, f.pitch, f.uv_ptr, f.pitch, f.width, f.height) for f in frames]
        return [PackedFrame(f.y_ptr, f.pitch, f.width, f.height) for f in frames]

    def launch(self, frames: List[Any], padded: int) -> Any:
        self.pre.run(self._table(frames), self.stream, out_ptr=self.buffer.ptr)
        shape = (padded,) + tuple(self.pre.output_shape[1:])
        if self.device_input:
            from jetforge.runtime.tensorrt.session import DeviceTensor

            tensor = DeviceTensor(self.buffer.ptr, shape, self.dtype)
            return self.model.session.submit_device({self.model.input_name: tensor}, stream=self.stream)
        from jetforge.runtime.cuda.kernels.upload import download

        x = download(self.buffer, shape, self.dtype, stream=self.stream)
        return self.model.session.infer({self.model.input_name: x})

    def finish(self, handle: Any, frames: List[Any]) -> List[Any]:
        outputs = handle.wait() if hasattr(handle, "wait") else handle
        return self.model.to_outputs(outputs, frames)

    def host_frames(self, handle: Any, frames: List[Any]) -> List[np.ndarray]:
        from jetforge.apps.video.sources.gpu import download_nv12

        return [download_nv12(f) for f in frames]  # render on: one copy back per frame, for the CPU encoders

    def close(self) -> None:
        self.stream.synchronize()
        self.pre.close()
        self.buffer.close()
        self.stream.close()


class AutoFrameOps(BatchOps):
    """Picks :class:`DeviceFrameOps` or :class:`HostFrameOps` from the first batch's frames (a source hands out
    device frames, or host frames when a CPU decoder or a stand-in decodes)."""

    def __init__(self, model: GpuModel, max_batch: int) -> None:
        self.model, self.max_batch = model, max_batch
        self.ops: Optional[BatchOps] = None

    @property
    def kind(self) -> str:
        return getattr(self.ops, "kind", "not started")

    def _for(self, frames: List[Any]) -> BatchOps:
        if self.ops is None:
            first = frames[0]
            self.ops = HostFrameOps(self.model) if first.on_host else DeviceFrameOps(self.model, self.max_batch, first)
        return self.ops

    def launch(self, frames: List[Any], padded: int) -> Any:
        return self._for(frames).launch(frames, padded)

    def finish(self, handle: Any, frames: List[Any]) -> List[Any]:
        return self._for(frames).finish(handle, frames)

    def host_frames(self, handle: Any, frames: List[Any]) -> List[np.ndarray]:
        return self._for(frames).host_frames(handle, frames)

    def close(self) -> None:
        if hasattr(self.ops, "close"):
            self.ops.close()  # type: ignore[union-attr]


__all__ = ["AutoFrameOps", "DeviceFrameOps", "GpuModel", "HostFrameOps", "gpu_model_for", "host_bgr"]
