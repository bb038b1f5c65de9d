"""What :func:`~jetforge.calibrate.calibrate_model.calibrate` is asked to do, as one validated dataclass.

:class:`CalibrateOptions` holds every choice of a calibration run, with three sections: ``evaluation`` (the
held-out INT8 check), ``mixed_precision`` (the FP16 layers search) and ``clips`` (how a clip model's clips are
cut).  It loads like the build options (:func:`load_calibrate_options`: defaults <- a YAML file <- ``--set``
overrides, unknown keys refused with a did-you-mean, see :mod:`jetforge.config`), so ``jetforge calibrate
--config calib.yaml --set evaluation.samples=200`` works, and ``calibrate(model, data, options)`` is the call.

A YAML file, with every key at its default (``jetforge calibrate MODEL --data D --print-config`` prints this)::

    tensorrt_version: '10.3'      # the cache header's TensorRT: a release of targets/jetpack.yaml
    algorithm: percentile         # see calibrate.algorithms (ALGORITHMS)
    percentile: 99.99             # for algorithm percentile, in (0, 100]
    samples: 500
    min_samples: 16
    batch_size: 8
    video_sampling: uniform       # or scene
    cache_algorithm: EntropyCalibration2
    out: null                     # MODEL.calib beside the model; a folder (existing, or ending in /) holds it
    qdq: true
    report: true
    plots: true                   # true, false or all
    check_build: false
    providers: null
    progress: true
    evaluation: {data: [], labels: null, samples: null, int8_kernels: false, sensitivity: null}
    mixed_precision: {bound: null, metric: agreement_confident}
    clips: {mode: null, stride: null, max_per_track: null}

The person detector that finds the tracks of per-track clips is not an option here: it is an object the
caller opens (``jetforge calibrate --detector``), passed to ``calibrate(..., tracker=...)``.

Each value is checked when the object is made (a range, a name, a known TensorRT release), so a wrong value is
one line before any sample is read; combinations that need the data (labels without evaluation data, a label
file) are checked by ``calibrate()`` itself, still before the statistics pass.
"""

import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from jetforge.calibrate.algorithms import ALGORITHMS, DEFAULT_ALGORITHM
from jetforge.calibrate.cache.format import ALGORITHM_TOKENS, DEFAULT_TOKEN, stamp_version
from jetforge.calibrate.quality import RECOMMENDED_SAMPLES
from jetforge.calibrate.sources import SAMPLINGS
from jetforge.config import Bound, check_bounds, load_config
from jetforge.errors import ConfigError, UnknownNameError

DEFAULT_TENSORRT = "10.3"
#: ``percentile``: the share of |x| kept inside the range; 100 keeps the largest |x|, 0 keeps nothing.
PERCENTILE = Bound(float, 0.0, 100.0, low_open=True, why="a percentile of |x|; 100 is the largest |x|")


@dataclass
class EvaluationOptions:
    """INT8 against FP32 on held-out data (``--eval``, ``--labels``, ``--eval-samples``, ``--int8-kernels``,
    ``--sensitivity``); off while ``data`` is empty and no person-box ``labels`` file is given."""

    data: List[str] = field(default_factory=list)
    labels: Optional[str] = None
    samples: Optional[int] = None  # None: every sample (memory permitting)
    int8_kernels: bool = False
    sensitivity: Optional[str] = None

    def __post_init__(self) -> None:
        if self.samples is not None and self.samples < 1:
            raise ConfigError("evaluation.samples must be at least 1, got %d" % self.samples,
                              hint="leave --eval-samples out to use every sample")
        if self.sensitivity is not None:
            from jetforge.calibrate.sensitivity import SENSITIVITY_METHODS

            if self.sensitivity not in SENSITIVITY_METHODS:
                raise UnknownNameError("sensitivity method", self.sensitivity, SENSITIVITY_METHODS)


@dataclass
class MixedPrecisionOptions:
    """Keep the fewest most INT8-sensitive layers in FP16 for which ``metric`` meets ``bound`` (None: off)."""

    bound: Optional[float] = None
    metric: str = "agreement_confident"

    def __post_init__(self) -> None:
        from jetforge.calibrate.mixed import METRICS

        if self.metric not in METRICS:
            raise UnknownNameError("mixed-precision metric", self.metric, METRICS)
        if self.bound is not None and not math.isfinite(self.bound):
            raise ConfigError("the mixed-precision bound must be a number, got %r" % self.bound,
                              hint="e.g. --mixed-precision 0.98")


@dataclass
class ClipSettings:
    """How a clip model's clips are cut: ``mode`` sliding or per-track (None: sliding, the sidecar's stride)."""

    mode: Optional[str] = None
    stride: Optional[int] = None
    max_per_track: Optional[int] = None

    def __post_init__(self) -> None:
        from jetforge.calibrate.clips.sources import CLIP_MODES

        if self.mode is not None and self.mode not in CLIP_MODES:
            raise UnknownNameError("clip mode", self.mode, CLIP_MODES)
        if self.stride is not None and self.stride < 1:
            raise ConfigError("clips.stride must be at least 1, got %d" % self.stride)
        if self.max_per_track is not None:
            if self.mode != "per-track":
                raise ConfigError("--clips-per-track (clips.max_per_track) and the other per-track settings go with "
                                  "--clips per-track (clips.mode: per-track)", hint="add --clips per-track, or drop it")
            if self.max_per_track < 1:
                raise ConfigError("at most %d clips per track leaves none" % self.max_per_track,
                                  hint="give a positive number, or leave it out for no cap")

    @property
    def given(self) -> bool:
        """Whether any clip setting was given (else a clip model gets the default sliding windows)."""
        return self.mode is not None or self.stride is not None

    def runtime(self, tracker: Any = None) -> Any:
        """The :class:`~jetforge.calibrate.clips.calibration.ClipOptions` of a run (None when nothing was given),
        with ``tracker``, the per-track tracker factory."""
        if not self.given:
            return None
        from jetforge.calibrate.clips.calibration import ClipOptions

        return ClipOptions(mode=self.mode or "sliding", stride=self.stride, max_per_track=self.max_per_track,
                           tracker=tracker)


@dataclass
class CalibrateOptions:
    """Every choice of one calibration run; see the module docstring for the keys and their defaults."""

    tensorrt_version: str = DEFAULT_TENSORRT
    algorithm: str = DEFAULT_ALGORITHM
    percentile: float = PERCENTILE.field(99.99)
    samples: int = RECOMMENDED_SAMPLES
    min_samples: int = 16
    batch_size: int = 8
    video_sampling: str = "uniform"
    cache_algorithm: str = DEFAULT_TOKEN
    out: Optional[str] = None
    qdq: bool = True
    report: bool = True
    plots: Union[bool, str] = True
    check_build: bool = False
    providers: Optional[List[str]] = None
    progress: bool = True
    evaluation: EvaluationOptions = field(default_factory=EvaluationOptions)
    mixed_precision: MixedPrecisionOptions = field(default_factory=MixedPrecisionOptions)
    clips: ClipSettings = field(default_factory=ClipSettings)

    def __post_init__(self) -> None:
        stamp_version(self.tensorrt_version)  # a release of the JetPack table, else no TensorRT reads the cache
        ALGORITHMS.get(self.algorithm)
        check_bounds(self)  # percentile (the loader checked it too, naming the key)
        for name in ("samples", "min_samples", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError("%s must be at least 1, got %d" % (name, getattr(self, name)),
                                  hint="--%s takes a positive number" % name.replace("_", "-"))
        if self.video_sampling not in SAMPLINGS:
            raise UnknownNameError("video sampling", self.video_sampling, SAMPLINGS)
        if self.cache_algorithm not in ALGORITHM_TOKENS:
            raise UnknownNameError("cache algorithm token", self.cache_algorithm, ALGORITHM_TOKENS)
        if not (isinstance(self.plots, bool) or self.plots == "all"):
            raise ConfigError("plots must be true, false or all, got %r" % (self.plots,))

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> "CalibrateOptions":
        """The options the keyword form of ``calibrate()`` names (its keywords before the options existed:
        ``trt_version=``, ``eval_data=``, ``mixed_precision=0.98``, ...); an unknown keyword is a TypeError."""
        top: Dict[str, Any] = {}
        sections: Dict[str, Dict[str, Any]] = {"evaluation": {}, "mixed_precision": {}}
        for key, value in keywords.items():
            if isinstance(value, os.PathLike):
                value = os.fspath(value)
            if key == "eval_data":
                value = [] if value is None else [value] if isinstance(value, str) else [os.fspath(v) for v in value]
            if key in KEYWORDS:
                section, name = KEYWORDS[key]
                (sections[section] if section else top)[name] = value
            elif key in _TOP_FIELDS:
                top[key] = value
            else:
                raise TypeError("calibrate() got an unexpected keyword argument %r" % key)
        return cls(evaluation=EvaluationOptions(**sections["evaluation"]),
                   mixed_precision=MixedPrecisionOptions(**sections["mixed_precision"]), **top)


# The keyword form's names that moved into a section (or were renamed): keyword -> (section, field).
KEYWORDS = {"trt_version": ("", "tensorrt_version"), "eval_data": ("evaluation", "data"),
            "labels": ("evaluation", "labels"), "eval_samples": ("evaluation", "samples"),
            "int8_kernels": ("evaluation", "int8_kernels"), "sensitivity": ("evaluation", "sensitivity"),
            "mixed_precision": ("mixed_precision", "bound"), "mixed_metric": ("mixed_precision", "metric")}
_TOP_FIELDS = {f.name for f in fields(CalibrateOptions)} - {"evaluation", "mixed_precision", "clips"}


def resolve_options(options: Optional[CalibrateOptions], keywords: Mapping[str, Any]) -> CalibrateOptions:
    """The one options object of a ``calibrate()`` call: ``options``, or the keyword form's (never both)."""
    if options is not None:
        if not isinstance(options, CalibrateOptions):
            raise TypeError("calibrate()'s third argument is a CalibrateOptions, got %s" % type(options).__name__)
        if keywords:
            raise TypeError("calibrate() takes options or keyword options, not both (got %s)"
                            % ", ".join(sorted(keywords)))
        return options
    return CalibrateOptions.from_keywords(keywords)


def load_calibrate_options(path: Optional[str] = None, overrides: Sequence[str] = (),
                           final: Optional[Mapping[str, Any]] = None) -> CalibrateOptions:
    """CalibrateOptions from defaults <- YAML ``path`` <- ``--set`` overrides <- ``final`` (command-line flags)."""
    return load_config(CalibrateOptions, path, overrides, final=final)


__all__ = ["CalibrateOptions", "ClipSettings", "EvaluationOptions", "KEYWORDS", "MixedPrecisionOptions",
           "load_calibrate_options", "resolve_options"]
