"""The person detector's tiles (``--detector-tiles N``) in ``benchmarks/gpu_pipeline/pipeline_gpu.py`` (issue 29): the
model ``people-tilesN`` (``people-tiles2`` is the point the README shows) is the SSD person detector run as
``jetforge app people --detector-tiles N --decode gpu`` runs it.

What makes it the app's path and not a copy of it:

* the tiles are :class:`~jetforge.vision.tiles.TiledPeopleDetector`'s ``rects`` (the detector object is built here,
  with the app's defaults for ``edge`` and ``merge_iou``), and a batch is the app's layout
  (:class:`~jetforge.apps.pipeline.stages.GpuModel`: the whole frames, then one block of rows per tile);
* the preprocessing is :func:`jetforge.apps.pipeline.gpu_ops.preprocess_blocks` - the NVRTC kernel once per block,
  cropping the tile out of every frame - writing into the benchmark's torch buffer (:class:`TiledF2Preprocess`);
  the torch fallback (and ``--dry-run`` on the CPU) cuts the same pixels (:class:`TiledTorchPreprocess`);
* the head reads the rows :func:`~jetforge.apps.tasks.people.tile_block_rows` names, decodes them (F2's GPU decoder,
  or the host's batched decode as the app's ``to_outputs``) and merges each frame with
  :func:`~jetforge.apps.tasks.people.merge_tile_blocks`, the app's own merge (:class:`TiledSsdHead`);
* a batch takes the frames the app gives it (:func:`jetforge.apps.pipeline.gpu_app.default_max_batch`: at most 32
  input rows once padded, so 4 frames = 20 rows with a 2x2 grid); FPS counts frames, the model-alone bound runs the
  same rows and is given per frame (:func:`per_frame`).

:func:`detector_check` holds the detectors' GPU results (tiled or not) to the CPU reference path: :class:`ReferenceSsd`
(the GPU kernels' float64 numpy reference preprocessing, the same model, the CPU detector's per-image SSD decode),
inside :class:`TiledPeopleDetector` itself for the tiles, on the same decoded frames.
"""

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from benchmarks.common.pipeline_gpu_ops import (F2Preprocess, SsdHead, TorchNv12Preprocess, ssd_decode_label,
                                                ssd_outputs)
from benchmarks.common.pipeline_gpu_plan import rows_per_frame, tile_grid_of
from jetforge.apps.pipeline.stages import GpuModel
from jetforge.errors import BackendError
from jetforge.vision.detections import Detections
from jetforge.vision.tiles import TiledPeopleDetector, tile_pixels

CHECK_FRAMES = 3  # frames of the check's batch: padded to 4, so the tile blocks start at rows 4, 8, 12, 16
# test_gpu_tiles.py's bounds for the same comparison: an SSD box moves a small fraction of a pixel and a score far
# less than 0.01 between two preprocessings equal to float32 rounding (kernel vs reference: 1e-3 of a normalised value)
BOX_TOL_PX, SCORE_TOL = 0.5, 0.005


def per_frame(result: Dict[str, Any], rows: int) -> Dict[str, Any]:
    """A model-alone measurement of ``rows`` x frames input rows as frames: FPS divided by ``rows`` (the pipeline's FPS
    counts frames), the measured rows kept beside it."""
    if rows == 1:
        return result
    return dict(result, batch=result["batch"] // rows, rows=result["batch"], rows_per_frame=rows,
                rows_fps=result["fps"], fps=result["fps"] / rows)


class TiledTorchPreprocess(TorchNv12Preprocess):
    """The torch fallback with tiles: the frames' NV12 -> RGB once, then block 0 the whole frames and block ``1 + k``
    tile ``k`` cut out of them (:func:`tile_pixels`, the pixels the kernel's crop reads), each resized as the
    contract says for its size, at :meth:`GpuModel.row`'s offsets."""

    def __init__(self, torch: Any, contract: Any, max_batch: int, device: str, rects: np.ndarray) -> None:
        self.rects, self.blocks = rects, 1 + len(rects)
        super().__init__(torch, contract, max_batch * self.blocks, device)

    def __call__(self, frames: List[Any], padded: int) -> Any:
        rgb, n = self.rgb(frames), len(frames)
        hw = (frames[0].height, frames[0].width)
        crops = [(0, 0) + hw] + [tile_pixels(hw, r) for r in self.rects]
        for block, (y0, x0, y1, x1) in enumerate(crops):
            row = GpuModel.row(block, 0, padded)
            self.out[row:row + n] = self.fit(rgb[:, :, y0:y1, x0:x1])
        return self.out[:padded * self.blocks]


class TiledF2Preprocess(F2Preprocess):
    """F2's NVRTC kernel with tiles: :func:`~jetforge.apps.pipeline.gpu_ops.preprocess_blocks` (the app's launches,
    one per block) into a torch buffer of ``max_batch x (1 + tiles)`` rows."""

    def __init__(self, torch: Any, contract: Any, max_batch: int, device: str, rects: np.ndarray) -> None:
        self.rects, self.blocks = rects, 1 + len(rects)
        super().__init__(torch, contract, max_batch, device, rows=max_batch * self.blocks,
                         fallback=TiledTorchPreprocess(torch, contract, max_batch, device, rects))

    def __call__(self, frames: List[Any], padded: int) -> Any:
        from jetforge.apps.pipeline.gpu_ops import preprocess_blocks

        pre = self.kernel(frames)
        if pre is None:
            return self._fallback(frames, padded)
        row_bytes = self.out[0].numel() * self.out.element_size()
        preprocess_blocks(pre, self.table(frames), self.torch.cuda.current_stream().cuda_stream, self.out.data_ptr(),
                          row_bytes, padded, (frames[0].height, frames[0].width), self.rects)
        return self.out[:padded * self.blocks]


class TiledSsdHead(SsdHead):
    """The SSD outputs of a tiled batch -> one merged set of boxes per frame, as the app's ``to_outputs`` makes them:
    the frames' rows (:func:`~jetforge.apps.tasks.people.tile_block_rows`) decoded as the SSD point decodes
    (:meth:`SsdHead.decode`: the app's queued GPU decoding of every padded row, the frames' rows kept; or, gathered on
    the device first, the host's ``postprocess_batch``), each frame
    merged by :func:`~jetforge.apps.tasks.people.merge_tile_blocks` with ``tiled``'s rects, edge and merge IoU."""

    def __init__(self, tiled: TiledPeopleDetector, spec: Any, contract: Any, threshold: float,
                 gpu_decoder: Optional[Any] = None, torch: Any = None) -> None:
        super().__init__(spec, contract, (contract.height, contract.width), threshold, gpu_decoder, torch)
        self.tiled, self.blocks = tiled, 1 + len(tiled.rects)
        self._rows: Dict[Any, Any] = {}  # (n, padded, device) -> the rows as an index tensor (made once each)

    def _index(self, n: int, padded: int, device: Any) -> Any:
        from jetforge.apps.tasks.people import tile_block_rows

        key = (n, padded, str(device))
        if key not in self._rows:
            self._rows[key] = self.torch.tensor(tile_block_rows(n, padded, self.blocks), device=device)
        return self._rows[key]

    def to_host(self, outs: Dict[str, Any], n: int) -> Any:
        enc, logits = ssd_outputs(outs)
        if self.gpu is not None:  # as the app: every padded row decoded on the GPU, the frames' rows kept
            from jetforge.apps.tasks.people import tile_block_rows

            return self.launch_decode(enc, logits, tile_block_rows(n, len(enc) // self.blocks, self.blocks))
        rows = self._index(n, len(enc) // self.blocks, enc.device)
        enc, logits = enc.index_select(0, rows).float(), logits.index_select(0, rows).float()  # new tensors
        return "host", enc.to("cpu", non_blocking=True), logits.to("cpu", non_blocking=True)

    def detections(self, host: Any, frames: List[Any]) -> List[Detections]:
        """Each frame's merged detections in its pixels (after the launch's copies finished)."""
        from jetforge.apps.tasks.people import merge_tile_blocks

        found, n = self.decode(host), len(frames)
        return [merge_tile_blocks(found, n, i, (f.height, f.width), self.tiled, self.contract)
                for i, f in enumerate(frames)]

    def events(self, host: Any, frames: List[Any]) -> List[Dict[str, Any]]:
        return [{"stream": f.stream, "frame": f.index, "people": len(d.boxes), "boxes_xyxy": d.boxes.round(1),
                 "scores": d.scores.round(3)} for f, d in zip(frames, self.detections(host, frames))]


class ReferenceSsd:
    """The CPU reference of the detector for :class:`TiledPeopleDetector` to wrap: images (float64 RGB of the decoded
    NV12, any size: a frame or a tile cut out of it) -> :class:`Detections` in their pixels.  Preprocessing is the GPU
    kernels' float64 numpy reference (``runtime.cuda.kernels.reference``: the kernel's maths without rounding, held
    to OpenCV's CPU path by its tests); the model is the benchmark's session (so the check sees the tiles, the
    layout and the merge, not two devices' arithmetic); the decode is the CPU detector's per-image
    ``vision.ssd.postprocess``, not the batched decode the head runs.  ``pad_to``: rows the session is fed (a
    shape whose CUDA graph exists)."""

    def __init__(self, torch: Any, session: Any, contract: Any, spec: Any, threshold: float, device: str,
                 pad_to: int = 0) -> None:
        self.torch, self.session, self.contract, self.spec = torch, session, contract, spec
        self.threshold, self.device, self.pad_to = threshold, device, pad_to
        self.anchors = spec.anchors()

    def detect_batch(self, images: Sequence[np.ndarray]) -> List[Detections]:
        from jetforge.runtime.cuda.kernels.plan import plan_for
        from jetforge.runtime.cuda.kernels.reference import normalise_reference, resize_reference
        from jetforge.vision.ssd import postprocess

        plans = [plan_for(self.contract, im.shape[:2]) for im in images]
        x = np.stack([normalise_reference(resize_reference(im, p), p) for im, p in zip(images, plans)])
        if self.pad_to > len(x):
            x = np.concatenate([x, np.zeros((self.pad_to - len(x),) + x.shape[1:])])
        outs = self.session.infer_tensors({self.session.inputs[0].name: self.torch.from_numpy(
            x.astype(np.float32)).to(self.device)})
        enc, logits = (t[:len(images)].float().cpu().numpy() for t in ssd_outputs(outs))
        found = postprocess(enc, logits, self.spec, score_threshold=self.threshold, anchors=self.anchors)
        hw = (self.contract.height, self.contract.width)
        return [d.to_detections(self.contract.geometry(im.shape[:2]), hw) for im, d in zip(images, found)]


def tiled_ops(env: Any, model: str, batch: int, nonblocking: bool, threshold: float,
              gpu_decoder: Optional[Any]) -> Any:
    """The benchmark's batch ops for ``people-tilesN``: the tiled preprocessing (kernel, else torch), the session with
    :func:`rows_per_frame` rows a frame, the tiled head (decoding on the GPU with ``gpu_decoder``, else the host)."""
    from benchmarks.common.pipeline_gpu_env import bucket
    from benchmarks.common.pipeline_gpu_ops import TorchStreamOps

    _, contract, spec = env.models[model]
    frames = bucket(batch)  # the padded batch: rows up to frames x (1 + tiles)
    tiled = TiledPeopleDetector(ReferenceSsd(env.torch, env.sessions[model], contract, spec, threshold, env.device,
                                             pad_to=frames * rows_per_frame(model)), grid=tile_grid_of(model))
    pre: Any = None
    if not env.args.dry_run and not env.args.torch_preprocess:
        try:
            pre = TiledF2Preprocess(env.torch, contract, frames, env.device, tiled.rects)
            env.pre_kind[model] = "nvrtc-kernel"
        except Exception as err:  # the kernel package missing or failing: measured with the fallback, said so
            print("F2 preprocessing kernel unavailable (%s: %s); torch fallback" % (type(err).__name__, err))
    if pre is None:
        pre = TiledTorchPreprocess(env.torch, contract, frames, env.device, tiled.rects)
        env.pre_kind[model] = "torch-fallback"
    head = TiledSsdHead(tiled, spec, contract, threshold, gpu_decoder=gpu_decoder, torch=env.torch)
    return TorchStreamOps(env.torch, env.sessions[model], pre, head, env.device, nonblocking=nonblocking)


def compare(got: Sequence[Detections], want: Sequence[Detections]) -> Dict[str, Any]:
    """Per frame: the same number of people, and after sorting both by box the largest box (px) and score gaps."""
    box, score, same = 0.0, 0.0, True
    for g, w in zip(got, want):
        if len(g.boxes) != len(w.boxes):
            same = False
            continue
        if len(g.boxes):
            og, ow = np.lexsort(g.boxes.T[::-1]), np.lexsort(w.boxes.T[::-1])
            box = max(box, float(np.abs(g.boxes[og] - w.boxes[ow]).max()))
            score = max(score, float(np.abs(g.scores[og] - w.scores[ow]).max()))
    people = [len(g.boxes) for g in got]
    equal = same and len(got) == len(want) and sum(people) > 0 and box <= BOX_TOL_PX and score <= SCORE_TOL
    return {"people": people, "reference_people": [len(w.boxes) for w in want], "max_box_px": box,
            "max_score": score, "tolerance": {"box_px": BOX_TOL_PX, "score": SCORE_TOL}, "equal": bool(equal)}


def detector_check(env: Any, model: str, frames: int = CHECK_FRAMES) -> Dict[str, Any]:
    """A detector's GPU result against the CPU reference on ``frames`` decoded frames of the point's stream, in one
    batch padded to the points' batch from 2 streams on (4 frames): the benchmark's ops (the kernel's preprocessing,
    and crops for the tiles; the session; the SSD decoded as the goal rows decode it; the tiles merged) vs
    :class:`ReferenceSsd` (wrapped in :class:`TiledPeopleDetector` for ``people-tilesN``) on the same frames' NV12
    (copied back), converted with their colour description.  Why: the goal rows' results are the app's path, never
    checked by their timing alone; a GPU path that got faster by being wrong shows here."""
    from benchmarks.common.pipeline_gpu_env import batch_of, bucket, capture_graphs
    from benchmarks.common.pipeline_gpu_measure import open_sources
    from benchmarks.common.pipeline_gpu_ops import keep_hook
    from jetforge.runtime.cuda.kernels.color import ColorSpec
    from jetforge.runtime.cuda.kernels.reference import nv12_to_rgb

    rows = rows_per_frame(model)
    padded = bucket(batch_of(2, 2, rows))  # the batch of the points from 2 streams on
    source = open_sources([env.streams[model]], 1, env.codec, keep=keep_hook(env.torch, env.device))[0]
    try:
        batch = [source.read() for _ in range(frames)]
    finally:
        source.close()  # the frames are owned copies
    _, contract, spec = env.models[model]
    capture_graphs(env, env.sessions[model], contract, padded, rows)
    ops = env.ops(model, 2, False, 2)
    handle = ops.launch(batch, padded)
    if env.device.startswith("cuda"):
        env.torch.cuda.synchronize()
    got = ops.head.detections(handle[-1], batch)
    images = []
    for f, nv12 in zip(batch, ops.host_frames(handle, batch)):
        color = ColorSpec(f.matrix, "full" if f.full_range else "limited")
        images.append(nv12_to_rgb(nv12[:f.height], nv12[f.height:], color))
    tiled = getattr(ops.head, "tiled", None)
    extra: Dict[str, Any] = {"tiles": 0}
    if tiled is not None:
        want = tiled.detect_batch(images)
        whole = tiled.inner.detect_batch(images)  # what the tiles add: people the whole frame alone misses
        extra = {"tiles": len(tiled.rects), "reference_people_whole_frame": [len(w.boxes) for w in whole]}
    else:
        want = ReferenceSsd(env.torch, env.sessions[model], contract, spec, ops.head.threshold, env.device,
                            pad_to=padded).detect_batch(images)
    return dict(compare(got, want), **extra, model=model, frames=[f.index for f in batch], padded=padded,
                rows=padded * rows, preprocess=getattr(ops.pre, "kind", env.pre_kind.get(model)),
                ssd_decode=ssd_decode_label(ops.head),
                colour="%s %s range" % (batch[0].matrix, "full" if batch[0].full_range else "limited"))


def run_detector_check(env: Any, res: Dict[str, Any], model: str) -> None:
    """:func:`detector_check` into ``res["detector_check"][model]``, logged; a difference is an error of the run."""
    r = detector_check(env, model)
    res.setdefault("detector_check", {})[model] = r
    print("detector check %s: %s people per frame, reference %s, max box %.3f px, max score %.4f -> %s"
          % (model, r["people"], r["reference_people"], r["max_box_px"], r["max_score"],
             "equal" if r["equal"] else "DIFFERENT"), flush=True)
    if not r["equal"]:
        raise BackendError("the GPU path's detections differ from the CPU reference (%s)" % model,
                           hint="see detector_check in the JSON; the app's own tests are tests/apps/test_gpu_tiles.py "
                                "and tests/board_path/test_people_gpu_path_standin.py")


__all__ = ["BOX_TOL_PX", "CHECK_FRAMES", "ReferenceSsd", "SCORE_TOL", "TiledF2Preprocess", "TiledSsdHead",
           "TiledTorchPreprocess", "compare", "detector_check", "per_frame", "run_detector_check", "tiled_ops"]
