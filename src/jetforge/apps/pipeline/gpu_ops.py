"""What the apps' GPU path does with a batch: the task's model as a :class:`GpuModel`, and the batch ops.

* :func:`gpu_model_for` - the part of an app's task the GPU path runs, from the task's own hook
  (:meth:`jetforge.apps.pipeline.stages.Task.gpu_model`: its session, the model's input contract, and how a batch's
  raw outputs become what the task's ``postprocess`` reads); a task without one gets one clear error.  Nothing here
  names a task.
* :class:`DeviceFrameOps` - frames in GPU memory (NVDEC, jetson-utils): one NVRTC preprocessing launch per batch
  (the input contract's GPU kernel, :mod:`jetforge.runtime.cuda.kernels`) into a device buffer, then the session
  fed that buffer: the TensorRT session binds it with ``set_tensor_address`` (``submit_device``); a backend that
  takes host arrays gets one copy of the finished input batch (not of the frames).  A model with a
  :class:`~jetforge.apps.pipeline.stages.DeviceHead` (the SSD detector) on a session that hands out device outputs
  has them decoded on the GPU behind the engine (:func:`open_device_head`): only the decoder's results come back.
  Written for CUDA through cuda-python; not executed in CI (no GPU).
* :class:`HostFrameOps` - frames in host memory (OpenCV decode, or a CPU stand-in for NVDEC in tests): the
  contract's CPU preprocessing, then the session.  Same flow and outputs, so the CPU tests check the path.

A model with tiles (``GpuModel.tiles``: ``--detector-tiles``) gets each frame's tiles as extra rows of the same
batch, in blocks of one tile each (:class:`~jetforge.apps.pipeline.stages.GpuModel`): on the GPU one preprocessing
launch per block, the kernel cropping the tile out of every frame of the batch (its ``crop``: the tile is
resampled as if cut out first, at any pixel origin, NV12 chroma on the frame's grid), so no tile is ever copied;
on the host the tiles are cut (:func:`jetforge.vision.tiles.cut_tile`, views) and preprocessed like frames.
"""

import inspect
import logging
from typing import Any, List, Optional

import numpy as np

from jetforge.apps.pipeline.batching import bucket_for
from jetforge.apps.pipeline.stages import GpuModel
from jetforge.apps.pipeline.streams import BatchOps
from jetforge.apps.video.sources.gpu.frame import bgr_from_nv12, nv12_from_bgr
from jetforge.errors import ConfigError, JetforgeError
from jetforge.optional import require
from jetforge.vision.tiles import cut_tile, tile_pixels

log = logging.getLogger(__name__)


def gpu_model_for(task: Any) -> GpuModel:
    """The GPU path's view of ``task``: what its :meth:`~jetforge.apps.pipeline.stages.Task.gpu_model` hook returns;
    a task without one (None) gets one clear error naming the other ways to decode on the GPU."""
    hook = getattr(task, "gpu_model", None)
    model = hook() if callable(hook) else None
    if model is None:
        raise ConfigError("--decode gpu runs a task's model on the GPU path (GPU preprocessing, batched session); "
                          "the %s app with %s has no GPU path" % (getattr(task, "name", "?"),
                                                                  getattr(task, "model_label", "") or "its model"),
                          hint="use --decode cpu, or --source nvdec://FILE (NVDEC decode, frames copied to the CPU "
                               "pipeline)")
    return model


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
        images = [host_bgr(f) for f in frames]
        blocks = [np.stack([self._prep(im) for im in images])]
        for rect in (self.model.tiles if self.model.tiles is not None else ()):  # one block per tile (GpuModel)
            blocks.append(np.stack([self._prep(cut_tile(im, rect)) for im in images]))
        if padded > len(frames):
            blocks = [np.concatenate([x, np.repeat(x[-1:], padded - len(frames), axis=0)]) for x in blocks]
        x = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
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
        self.row_bytes = self.pre.output_nbytes // max_batch
        # the padded batch (a bucket, possibly more rows than max_batch) for every block (the frames, each tile)
        self.buffer = cuda.DeviceBuffer(self.row_bytes * bucket_for(max_batch) * model.rows_per_frame)
        self.device_input = hasattr(model.session, "submit_device") and hasattr(model.session, "wait_for_inputs_read")
        self.max_batch = max_batch
        self._copy_back: Any = None  # render on: a BatchCopyBack, made by the first batch that asks
        self.decoder = open_device_head(model, bucket_for(max_batch) * model.rows_per_frame) \
            if self.device_input else None
        # outputs that come back whole: into a pinned buffer set per batch in flight, so that queuing the next batch
        # never waits on the host for this one's outputs (a session's own output buffers are one set)
        self.output_slots: Any = None
        if self.decoder is None and self.device_input and takes_consumer(model.session):
            from jetforge.runtime.cuda.in_flight import PinnedOutputSlots

            self.output_slots = PinnedOutputSlots()
        self.kind = "GPU: NVRTC preprocessing, %s" % ("device input bound in place (set_tensor_address)"
                                                     if self.device_input else "input batch copied to the host "
                                                     "(this backend takes host arrays)")
        if self.decoder is not None:
            self.kind += "; %s" % model.device_head.kind  # type: ignore[union-attr]
        elif self.output_slots is not None:
            self.kind += "; outputs copied back per batch in flight"

    def _table(self, frames: List[Any]) -> List[Any]:
        from jetforge.runtime.cuda.kernels import Nv12Frame, PackedFrame

        if self.pre.input_format == "nv12":
            return [Nv12Frame(f.y_ptr, f.pitch, f.uv_ptr, f.pitch, f.width, f.height) for f in frames]
        return [PackedFrame(f.y_ptr, f.pitch, f.width, f.height) for f in frames]

    def launch(self, frames: List[Any], padded: int) -> Any:
        if self.device_input:
            # the previous batch may still be reading self.buffer on the session's stream (up to in_flight batches
            # are queued): this batch's preprocessing waits for it on the GPU, not the host
            self.model.session.wait_for_inputs_read(self.stream)
        preprocess_blocks(self.pre, self._table(frames), self.stream, self.buffer.ptr, self.row_bytes, padded,
                          (frames[0].height, frames[0].width), self.model.tiles)
        shape = (padded * self.model.rows_per_frame,) + tuple(self.pre.output_shape[1:])
        if self.device_input:
            from jetforge.runtime.tensorrt.session import DeviceTensor

            tensor = DeviceTensor(self.buffer.ptr, shape, self.dtype)
            consumer = self._consumer(len(frames), padded)
            extra = {} if consumer is None else {"on_device_outputs": consumer}
            return self.model.session.submit_device({self.model.input_name: tensor}, stream=self.stream, **extra)
        from jetforge.runtime.cuda.kernels.upload import download

        x = download(self.buffer, shape, self.dtype, stream=self.stream)
        return self.model.session.infer({self.model.input_name: x})

    def _consumer(self, n: int, padded: int) -> Any:
        """What the session hands its device outputs to for this batch: the device head's decoder (the frames' rows
        of each block), the per-batch output slots, or None (the session copies them back itself)."""
        if self.decoder is not None:
            rows, decoder = GpuModel.block_rows(n, padded, self.model.rows_per_frame), self.decoder
            return lambda outputs, stream: decoder.launch_outputs(outputs, rows, stream)
        return self.output_slots.launch if self.output_slots is not None else None

    def finish(self, handle: Any, frames: List[Any]) -> List[Any]:
        outputs = handle.wait() if hasattr(handle, "wait") else handle
        if self.decoder is not None:  # decoded on the GPU: one result per row of the frames' blocks
            return self.model.device_head.from_decoded(outputs, frames)  # type: ignore[union-attr]
        return self.model.to_outputs(outputs, frames)

    def host_frames(self, handle: Any, frames: List[Any]) -> List[np.ndarray]:
        """Render on: the frames in host memory for the CPU encoders, a batch of NV12 frames of one size in one
        copy kernel launch and one copy (:class:`~jetforge.apps.pipeline.copy_back.BatchCopyBack`), other batches
        frame by frame."""
        from jetforge.apps.pipeline.copy_back import BatchCopyBack

        if BatchCopyBack.takes(frames):
            if self._copy_back is None:
                self._copy_back = BatchCopyBack(self.max_batch)
            return self._copy_back(frames)
        from jetforge.apps.video.sources.gpu.open import download_nv12

        return [download_nv12(f) for f in frames]

    def close(self) -> None:
        if self._copy_back is not None:
            self._copy_back.close()
        self.stream.synchronize()
        for consumer in (self.decoder, self.output_slots):
            if consumer is not None:  # after the work still queued into its buffers
                consumer.close()
        self.pre.close()
        self.buffer.close()
        self.stream.close()


def open_device_head(model: GpuModel, max_rows: int) -> Optional[Any]:
    """The model's :class:`~jetforge.apps.pipeline.stages.DeviceHead` opened for batches of ``max_rows`` output rows,
    when its session hands device outputs to a consumer (``submit_device(on_device_outputs=)``: TensorRT) and the
    head can read them; else None (the raw outputs come back and ``to_outputs`` decodes them on the host).  A head
    whose kernel cannot be made here (no NVRTC for this GPU, ...) is logged and the host decodes: the results are
    the same, only the CPU cost differs."""
    head = model.device_head
    if head is None or not takes_consumer(model.session):
        return None
    try:
        return head.open(max_rows)
    except JetforgeError as err:
        log.warning("%s; decoding the outputs on the host instead", err.message)
        return None


def takes_consumer(session: Any) -> bool:
    """Whether ``session`` hands its outputs on the GPU to a consumer (``submit_device(on_device_outputs=)``)."""
    submit = getattr(session, "submit_device", None)
    return submit is not None and "on_device_outputs" in inspect.signature(submit).parameters


def preprocess_blocks(pre: Any, table: List[Any], stream: Any, out_ptr: int, row_bytes: int, padded: int,
                      hw: Any, tiles: Optional[np.ndarray]) -> None:
    """One preprocessing launch per block of a batch padded to ``padded`` frames (:class:`GpuModel`'s layout): the
    whole frames at row 0, tile ``k`` of every frame (the kernel's ``crop``, :func:`tile_pixels` of the frames'
    ``hw``) at block ``1 + k``; ``row_bytes`` is one input row's size.  Also what ``benchmarks/common/
    pipeline_gpu_tiles.py`` launches into its torch buffer, so the benchmark measures this layout."""
    pre.run(table, stream, out_ptr=out_ptr)
    for block, rect in enumerate(tiles if tiles is not None else (), 1):
        pre.run(table, stream, out_ptr=out_ptr + GpuModel.row(block, 0, padded) * row_bytes,
                crop=tile_pixels(hw, rect))


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


__all__ = ["AutoFrameOps", "DeviceFrameOps", "GpuModel", "HostFrameOps", "gpu_model_for", "host_bgr",
           "open_device_head", "preprocess_blocks", "takes_consumer"]
