"""What :func:`~jetforge.compress.prune.prune_model.prune` is asked to do, as one validated dataclass.

:class:`PruneOptions` holds every choice of a pruning run that is data (numbers, names, lists); it loads like the
build options (:func:`load_prune_options`: defaults <- a YAML file <- ``--set`` overrides, unknown keys refused
with a did-you-mean, see :mod:`jetforge.config`), so ``jetforge prune --config prune.yaml --set min_keep=0.2``
works, and ``prune(model, example, options)`` is the call.  What is not data stays a keyword of ``prune()``:
``data`` and ``loss_fn`` (for criteria that need gradients), ``latency_fn`` (the measuring backend) and
``latency_table`` (a table measured before).

A YAML file, with every key at its default (``jetforge prune ... --print-config`` prints the resolved one)::

    ratio: null                 # exactly one goal: ratio in [0, 1), or a factor >= 1 of the three below
    flops_reduction: null
    params_reduction: null
    latency_reduction: null
    importance: l1              # compress.prune.importance (CRITERIA)
    global_ranking: false
    round_to: null              # default: the target's channel multiple, else 8
    target: null                # a profile name, or auto (this machine)
    protect: []
    protect_stem: true
    min_keep: 0.1
    overrides: {}               # module -> ratio of its own
    seed: 0
    measure_latency: false
    inplace: true
    latency_aware: false
    latency_levels: [0.75, 0.5, 0.25]
    max_latency_iterations: 8
    strict: false               # raise when a latency goal is missed (else keep the fastest model found, warned;
                                # `jetforge prune --strict` instead saves that model, then exits 1)

Each value is checked when the object is made; that exactly one goal is given, and that the options fit together,
is :meth:`PruneOptions.goal` (called by ``prune()``, and by ``jetforge prune`` before the model is loaded).
"""

import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence

from jetforge.compress.prune.latency import DEFAULT_LEVELS
from jetforge.config import load_config
from jetforge.errors import ConfigError

GOALS = ("ratio", "flops_reduction", "params_reduction", "latency_reduction")


@dataclass
class PruneOptions:
    """Every choice of one pruning run that is data; see the module docstring for the keys and defaults."""

    ratio: Optional[float] = None
    flops_reduction: Optional[float] = None
    params_reduction: Optional[float] = None
    latency_reduction: Optional[float] = None
    importance: str = "l1"
    global_ranking: bool = False
    round_to: Optional[int] = None
    target: Optional[str] = None
    protect: List[str] = field(default_factory=list)
    protect_stem: bool = True
    min_keep: float = 0.1
    overrides: Dict[str, float] = field(default_factory=dict)
    seed: int = 0
    measure_latency: bool = False
    inplace: bool = True
    latency_aware: bool = False
    latency_levels: List[float] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    max_latency_iterations: int = 8
    strict: bool = False
    # what times the latency-aware search's cuts: estimate (the estimator on --target's board; the default when the
    # target is a Jetson board), measured (a local CUDA GPU, or latency_table_file from the board) or cpu (ONNX
    # Runtime here; the default otherwise); see compress/prune/latency_sources.py
    latency_source: Optional[str] = None
    latency_precision: Optional[str] = None      # the estimate's precision (default INT8 where the GPU has it)
    latency_table_file: Optional[str] = None     # measured: a prune_report.json (its latency_table) from the board

    def __post_init__(self) -> None:
        from jetforge.compress.prune.importance import CRITERIA

        for k in ("flops_reduction", "params_reduction", "latency_reduction"):
            value = getattr(self, k)
            if value is not None and not (math.isfinite(value) and value >= 1.0):
                raise ConfigError("%s must be a factor >= 1 (2.0 = half), got %r" % (k, value))
        if self.ratio is not None and not (math.isfinite(self.ratio) and 0.0 <= self.ratio < 1.0):
            raise ConfigError("ratio must be in [0, 1), got %r" % (self.ratio,),
                              hint="the fraction of coupled channels to remove, e.g. ratio=0.5")
        if not 0.0 <= self.min_keep <= 1.0:
            raise ConfigError("min_keep must be in [0, 1], got %r" % self.min_keep)
        if self.round_to is not None and self.round_to < 1:
            raise ConfigError("round_to must be at least 1, got %d" % self.round_to, hint="e.g. round_to=8")
        CRITERIA.get(self.importance)

    def goal(self) -> str:
        """The one goal given (``"ratio"``, ``"flops_reduction"``, ...), after checking the options fit together."""
        given = [k for k in GOALS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ConfigError("give exactly one pruning goal, got %s" % (", ".join(given) or "none"),
                              hint="ratio=0.5, flops_reduction=2.0, params_reduction=2.0 or latency_reduction=1.5 "
                                   "(jetforge prune: --ratio, --flops-reduction, --params-reduction or "
                                   "--latency-reduction)")
        if self.latency_source is not None and self.latency_source not in ("estimate", "measured", "cpu"):
            from jetforge.errors import UnknownNameError

            raise UnknownNameError("latency_source", self.latency_source, ["estimate", "measured", "cpu"])
        if self.latency_aware and self.ratio is not None:
            raise ConfigError("latency_aware needs a flops_reduction, params_reduction or latency_reduction goal, "
                              "not a ratio", hint="e.g. flops_reduction=2.0, latency_aware=True")
        if self.latency_aware and (not self.latency_levels or any(not 0.0 < f < 1.0 for f in self.latency_levels)):
            raise ConfigError("latency_levels must be kept fractions in (0, 1), got %r" % (list(self.latency_levels),))
        return given[0]

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> "PruneOptions":
        """The options of the keyword form ``prune(model, x, flops_reduction=2.0, ...)``; an unknown keyword is a
        TypeError, as for any Python function."""
        names = {f.name for f in fields(cls)}
        for key in keywords:
            if key not in names:
                raise TypeError("prune() got an unexpected keyword argument %r" % key)
        values = dict(keywords)
        for key in ("protect", "latency_levels"):
            if key in values and values[key] is not None:
                values[key] = list(values[key])
        if values.get("overrides") is None:
            values.pop("overrides", None)
        return cls(**values)


def resolve_options(options: Optional[PruneOptions], keywords: Mapping[str, Any]) -> PruneOptions:
    """The one options object of a ``prune()`` call: ``options``, or the keyword form's (never both)."""
    if options is not None:
        if not isinstance(options, PruneOptions):
            raise TypeError("prune()'s third argument is a PruneOptions, got %s" % type(options).__name__)
        if keywords:
            raise TypeError("prune() takes options or keyword options, not both (got %s)" % ", ".join(sorted(keywords)))
        return options
    return PruneOptions.from_keywords(keywords)


def load_prune_options(path: Optional[str] = None, overrides: Sequence[str] = (),
                       final: Optional[Mapping[str, Any]] = None) -> PruneOptions:
    """PruneOptions from defaults <- YAML ``path`` <- ``--set`` overrides <- ``final`` (command-line flags)."""
    return load_config(PruneOptions, path, overrides, final=final)


__all__ = ["DEFAULT_LEVELS", "GOALS", "PruneOptions", "load_prune_options", "resolve_options"]
