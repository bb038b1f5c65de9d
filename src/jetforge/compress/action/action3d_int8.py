"""INT8 for the 3D action model: post-training calibration from clips and a few QAT steps, both evaluated on the
held-out clips in simulated TensorRT INT8 arithmetic.

Used by the recipe's optional ``int8`` stage (:func:`jetforge.compress.action.mobilenet3d_recipe.run_recipe`) and
by ``benchmarks/action3d/action_mobilenet3d.py`` (the bundled model's numbers):

* :func:`int8_ptq`: ``jetforge.calibrate.calibrate`` of the exported student ONNX from per-track clips of the
  *training* frames ``[0, train_end)`` along the cached tracks (``clips=ClipOptions(mode="per-track")`` replaying
  the people app's tracks), which writes ``NAME.calib`` and ``NAME.qdq.onnx`` beside the model;
* :func:`int8_qat`: ``jetforge.compress.qat`` on the student (BN folded, fake-quantised, ranges from training
  clips by entropy), ``steps`` fine-tuning steps of 8 clips with logit distillation from the teacher (every other
  batch mirrored, lateral labels swapped), exported with Q/DQ;
* :func:`heldout_evaluator`: the ``clip_accuracy`` metric (accuracy FP32 / INT8 and the paired difference,
  intervals resampling whole tracks) over the held-out clips.
"""

import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np


def heldout_batches(data: Any, batch: int = 16) -> List[np.ndarray]:
    """The held-out clips, normalised by the model's ``clip`` contract, in batches of ``batch``."""
    x = data.contract.normalize(data.heldout_clips)
    return [x[i:i + batch] for i in range(0, len(x), batch)]


def heldout_evaluator(path: Path, data: Any, batches: Optional[List[np.ndarray]] = None) -> Any:
    """A :class:`jetforge.calibrate.evaluate.Evaluator` of the FP32 model ``path`` on the held-out clips, with the
    ``clip_accuracy`` metric grouped by track."""
    from jetforge.calibrate.evaluate import Evaluator

    groups = ["t%d" % w.track for w in data.heldout]
    return Evaluator(str(path), batches if batches is not None else heldout_batches(data),
                     labels=data.targets(data.heldout), metrics=("classification", "clip_accuracy"),
                     metric_options={"clip_accuracy": {"groups": groups}})


def int8_ptq(path: Path, recipe: Any, tracks: Mapping[int, Mapping[int, Any]], evaluator: Any, samples: int = 256,
             video: Optional[Path] = None) -> Dict[str, Any]:
    """Calibrate ``path`` from per-track clips of the training frames ``[0, recipe.train_end)`` of ``video`` (default:
    the vtest.avi asset) along ``tracks`` ({track: {frame: box}}), evaluate the Q/DQ model on the held-out clips."""
    from jetforge.calibrate.calibrate_model import calibrate
    from jetforge.calibrate.clips.calibration import ClipOptions
    from jetforge.calibrate.clips.sources import replay_tracks

    if video is None:
        from jetforge.assets import asset_path

        video = asset_path("opencv_samples", "vtest.avi")
    by_frame: Dict[int, List[Tuple[int, Tuple[float, ...]]]] = {}
    for tid, boxes in tracks.items():
        for f, box in boxes.items():
            by_frame.setdefault(f, []).append((tid, tuple(float(v) for v in box)))
    t0 = time.perf_counter()
    result = calibrate(path, ["%s@0:%d" % (video, recipe.train_end)], samples=samples, min_samples=min(16, samples),
                       batch_size=8, plots=False, progress=False,
                       clips=ClipOptions(mode="per-track", tracker=replay_tracks(by_frame)))
    res = evaluator.evaluate(str(result.qdq_path))
    return {"calibration": {"algorithm": result.algorithm, "clips": result.samples, "frames": [0, recipe.train_end],
                            "seconds": round(time.perf_counter() - t0, 1), "qdq": result.qdq_path.name,
                            "cache": result.cache_path.name},
            "clip_accuracy": res.metrics["clip_accuracy"], "agreement": res.agreement}


def int8_qat(teacher: Any, student: Any, data: Any, evaluator: Any, folder: Path, steps: int,
             name: str = "student.qat.qdq.onnx") -> Dict[str, Any]:
    """QAT of ``student`` (a copy; BN folded, fake-quantised; ranges from up to 128 training clips; ``steps``
    fine-tuning steps with logit distillation from ``teacher``), exported to ``folder/name`` with Q/DQ and
    evaluated like the calibrated model.  Both models are torch modules; CPU."""
    import torch

    from jetforge.compress.action.action3d import mirror_map
    from jetforge.compress.distill.losses import kd_loss
    from jetforge.compress.qat import calibrate_qat, export_qdq_onnx, prepare_qat

    t0 = time.perf_counter()
    teacher = teacher.cpu().eval()
    qmodel = prepare_qat(student.cpu().eval())
    x = torch.from_numpy(data.contract.normalize(data.train_clips))
    y = torch.from_numpy(data.targets(data.train))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    calibrate_qat(qmodel, [x[order[i:i + 8]] for i in range(0, min(len(x), 128), 8)], "entropy")
    opt = torch.optim.AdamW([p for p in qmodel.parameters() if p.requires_grad], lr=1e-5)
    mirror, losses = mirror_map(data.labels), []
    qmodel.train()
    for step in range(steps):
        idx = order[(step * 8) % len(x):(step * 8) % len(x) + 8]
        xb, yb = x[idx], y[idx]
        if step % 2:
            xb, yb = xb.flip(-1), mirror[yb]
        with torch.no_grad():
            t = teacher(xb)
        s = qmodel(xb)
        loss = 0.5 * torch.nn.functional.cross_entropy(s, yb) + 0.5 * kd_loss(s, t, 4.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    qmodel.eval()
    path = Path(folder) / name
    export_qdq_onnx(qmodel, path, (1,) + tuple(data.contract.input_shape))
    res = evaluator.evaluate(str(path))
    return {"steps": steps, "batch": 8, "lr": 1e-5, "loss_first_last": [losses[0], losses[-1]] if losses else None,
            "seconds": round(time.perf_counter() - t0, 1), "qdq": path.name,
            "clip_accuracy": res.metrics["clip_accuracy"], "agreement": res.agreement}


__all__ = ["heldout_batches", "heldout_evaluator", "int8_ptq", "int8_qat"]
