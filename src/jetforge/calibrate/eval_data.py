"""Evaluation samples for ``calibrate --eval``: every sample by default, said out loud, checked for leaks.

**How many.**  By default every sample the ``--eval`` data holds is used (every image of a folder or
list, every frame of a video), because a user who points at 2,000 held-out images expects numbers on
2,000 images.  The preprocessed inputs are held in memory for the whole evaluation, so the one limit
is memory: past :data:`EVAL_MEMORY_BYTES` of preprocessed input (about 3,500 images at 224x224x3)
the samples are spread evenly over the data and a warning says how many of how many are used.  An
explicit ``samples`` (``--eval-samples N``) takes N evenly spread samples.  Either way the log and
the report's ``evaluation.samples`` block state ``used`` of ``available`` and why.

**Held out?**  Every evaluation sample gets a perceptual hash (:mod:`jetforge.calibrate.phash`); the
report counts the evaluation samples with a near-duplicate among the calibration samples (consecutive
frames of one clip, a photo copied into both folders), and warns when there is any: folder paths
alone do not make a held-out set.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.calibrate import phash
from jetforge.calibrate.sources import collect_sources

log = logging.getLogger(__name__)

EVAL_MEMORY_BYTES = 2 << 30  # preprocessed evaluation inputs held at once
ALL = None                   # ``samples`` meaning "every sample"


@dataclass
class EvaluationSet:
    """Preprocessed batches, sample names and perceptual hashes, in collection order."""

    batches: List[np.ndarray]
    names: List[str]
    hashes: List[Tuple[str, int]]
    available: int
    used: int
    limit: str
    near_duplicates: Optional[Dict[str, object]] = None
    warnings: List[str] = field(default_factory=list)

    def describe(self) -> Dict[str, object]:
        return {"used": self.used, "available": self.available, "limit": self.limit}


def sample_bytes(preprocess) -> int:
    """Bytes of one preprocessed float32 input."""
    return int(4 * preprocess.channels * preprocess.height * preprocess.width)


def gather(items: Sequence[Union[str, Path]], preprocess, fixed_batch: Optional[int] = None,
           samples: Optional[int] = ALL, video_sampling: str = "uniform", batch_size: int = 16,
           memory_bytes: int = EVAL_MEMORY_BYTES) -> EvaluationSet:
    """Decode, hash and preprocess the evaluation samples (all of them unless ``samples`` or memory limits)."""
    probe = collect_sources(list(items), max_samples=1, sampling=video_sampling)
    available = int(sum(s.available for s in probe.sources))
    wanted, limit, capped = how_many(available, sample_bytes(preprocess), samples, memory_bytes)
    source = collect_sources(list(items), max_samples=max(1, min(wanted, available)), sampling=video_sampling)
    return evaluation_set(source, preprocess, available, limit, capped, fixed_batch, batch_size)


def how_many(available: int, one_sample_bytes: int, samples: Optional[int] = ALL,
             memory_bytes: int = EVAL_MEMORY_BYTES) -> Tuple[int, str, bool]:
    """(samples to use, why, whether memory capped them): ``samples`` if given, else all that fit in memory."""
    cap = max(1, int(memory_bytes // max(1, one_sample_bytes)))
    if samples is not None:
        return int(samples), "--eval-samples %d" % samples, False
    if available > cap:
        return cap, ("memory: %d preprocessed samples fit in %.1f GiB; --eval-samples N sets another number"
                     % (cap, memory_bytes / float(1 << 30))), True
    return available, "all", False


def evaluation_set(source: Iterable[Tuple[str, Any]], preprocess, available: int, limit: str, capped: bool,
                   fixed_batch: Optional[int] = None, batch_size: int = 16,
                   image_of: Callable[[Any], np.ndarray] = lambda sample: sample,
                   make: Callable[..., EvaluationSet] = EvaluationSet) -> EvaluationSet:
    """Hash (on ``image_of(sample)``) and prepare the ``(name, sample)`` pairs of ``source`` into an evaluation set
    (``make``: :class:`EvaluationSet` or a subclass); says how many of how many, and warns when memory capped it."""
    from jetforge.calibrate.evaluate import preprocess_samples

    hashes: List[Tuple[str, int]] = []

    def hashed():
        for name, sample in source:
            hashes.append((name, phash.perceptual_hash(image_of(sample))))
            yield name, sample

    batches, names = preprocess_samples(hashed(), preprocess, batch_size=batch_size, fixed_batch=fixed_batch)
    kept = set(names)
    ev = make(batches, names, [h for h in hashes if h[0] in kept], available, len(names), limit)
    message = "evaluation: %d of %d available samples (%s)" % (ev.used, ev.available, limit)
    if capped:
        ev.warnings.append(message)
        log.warning("%s", message)
    else:
        log.info("%s", message)
    return ev


def evaluation_batches(data: Union[str, Path, Sequence[Union[str, Path]]], preprocess, model=None,
                       samples: Optional[int] = ALL, video_sampling: str = "uniform", batch_size: int = 16):
    """Preprocessed evaluation batches and sample names from images/videos (every sample unless ``samples``)."""
    from jetforge.calibrate.stats import fixed_batch

    items = [data] if isinstance(data, (str, Path)) else list(data)
    ev = gather(items, preprocess, fixed_batch(model) if model is not None else None, samples, video_sampling,
                batch_size)
    return ev.batches, ev.names


def check_held_out(ev: EvaluationSet, calibration_hashes: Sequence[Tuple[str, int]],
                   threshold: int = phash.NEAR_DUPLICATE_BITS) -> Dict[str, object]:
    """Count evaluation samples with a near-duplicate calibration sample; warn when there is any."""
    block = phash.near_duplicates(ev.hashes, list(calibration_hashes), threshold=threshold)
    ev.near_duplicates = block
    line = phash.describe(block)
    if line:
        ev.warnings.append(line)
        log.warning("%s", line)
    return block
