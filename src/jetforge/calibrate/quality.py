"""Data-quality checks on calibration samples: too few, near-constant, noise-like.

Computed on the decoded images (grey, downsized to at most 128 px), one at a time, so memory
does not depend on the number of samples:

* **too few**: TensorRT's guidance is about 500 calibration images; fewer than
  ``min_samples`` is an error, fewer than ``recommended`` a warning;
* **near-constant**: grey-level standard deviation below ``constant_std`` (2 of 255) -- blank
  frames, lens caps, fades to black;
* **noise-like**: correlation of horizontally adjacent pixels below ``noise_corr`` (0.3); natural
  images are above 0.8, white noise is near 0.

A minority of bad samples is a warning; a majority is an error (the scales would describe the
wrong distribution).

The tracker also keeps each sample's perceptual hash (:mod:`jetforge.calibrate.phash`, from the same
grey thumbnail), so that evaluation samples can be checked for near-duplicates in the calibration set.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from jetforge.calibrate import phash
from jetforge.errors import CalibrationError

RECOMMENDED_SAMPLES = 500


@dataclass
class QualityReport:
    samples: int
    near_constant: List[str] = field(default_factory=list)
    noise_like: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, object]:
        return {"samples": self.samples, "near_constant": len(self.near_constant),
                "noise_like": len(self.noise_like), "near_constant_examples": self.near_constant[:5],
                "noise_like_examples": self.noise_like[:5], "warnings": list(self.warnings)}


class QualityTracker:
    """Accumulates per-image measures; :meth:`check` turns them into warnings or an error."""

    def __init__(self, constant_std: float = 2.0, noise_corr: float = 0.3) -> None:
        self.constant_std = constant_std
        self.noise_corr = noise_corr
        self.samples = 0
        self.near_constant: List[str] = []
        self.noise_like: List[str] = []
        self.stds: List[float] = []
        self.corrs: List[float] = []
        self.hashes: List[Tuple[str, int]] = []  # (sample name, 64-bit perceptual hash)

    @staticmethod
    def measure(image: np.ndarray) -> "tuple":
        """(grey std, horizontal neighbour correlation) of one uint8 image."""
        return QualityTracker._measure_grey(phash.grey_thumbnail(image))

    @staticmethod
    def _measure_grey(grey: np.ndarray) -> "tuple":
        g = grey.astype(np.float64)
        std = float(g.std())
        if g.shape[1] < 2 or std == 0.0:
            return std, 1.0
        a, b = g[:, :-1].ravel(), g[:, 1:].ravel()
        a = a - a.mean()
        b = b - b.mean()
        # einsum, not np.dot: a float64 dot of this size goes to OpenBLAS's threads, whose workers then
        # spin-wait for the next call and took one of a 2-core machine's cores through the whole
        # calibration (about a quarter of its CPU time)
        denom = float(np.sqrt(np.einsum("i,i->", a, a) * np.einsum("i,i->", b, b)))
        corr = float(np.einsum("i,i->", a, b) / denom) if denom > 0 else 1.0
        return std, corr

    def update(self, name: str, image: np.ndarray) -> None:
        grey = phash.grey_thumbnail(image)
        std, corr = self._measure_grey(grey)
        self.hashes.append((name, phash.hash_thumbnail(grey)))
        self.samples += 1
        self.stds.append(std)
        self.corrs.append(corr)
        if std < self.constant_std:
            self.near_constant.append(name)
        elif corr < self.noise_corr:
            self.noise_like.append(name)

    def check(self, min_samples: int = 16, recommended: int = RECOMMENDED_SAMPLES) -> QualityReport:
        report = QualityReport(self.samples, list(self.near_constant), list(self.noise_like))
        n = self.samples
        if n == 0:
            raise CalibrationError("no calibration samples could be read",
                                   hint="give a folder of images or a video OpenCV can decode")
        if n < min_samples:
            raise CalibrationError("only %d calibration samples; at least %d are needed (TensorRT suggests ~%d)"
                                   % (n, min_samples, recommended),
                                   hint="add images or video, or lower the minimum with --min-samples")
        if n < recommended:
            report.warnings.append("only %d calibration samples; TensorRT's guidance is about %d for stable "
                                   "INT8 scales" % (n, recommended))
        for kind, names, what in (("near-constant", self.near_constant, "blank or uniform frames"),
                                  ("noise-like", self.noise_like, "random noise, not natural images")):
            if not names:
                continue
            if len(names) * 2 > n:
                raise CalibrationError("%d of %d calibration samples are %s (%s), e.g. %s"
                                       % (len(names), n, kind, what, names[0]),
                                       hint="calibrate with real, representative images of the deployment scene")
            report.warnings.append("%d of %d calibration samples are %s (%s), e.g. %s"
                                   % (len(names), n, kind, what, names[0]))
        return report
