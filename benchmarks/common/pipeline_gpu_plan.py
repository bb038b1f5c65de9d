"""The matrix of ``benchmarks/gpu_pipeline/pipeline_gpu.py`` as data (issue 29): which steps run in which order, which
are skipped for time, and how repetitions become one point (median with its spread).

Pure functions (no timing, no GPU) so that the tests check them: a single call's number decided nothing in the
earlier runs (the spread between calls was as large as the gap to the goal), so every point is the MEDIAN of
``reps`` repetitions inside one call, reported with its min and max; the bounds are measured in every round of the
same call, and the goal rows (the app's default host layout, render off) come first so that a call cut short still
brings them back.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from benchmarks.common.pipeline_gpu_variants import split_variant

GOAL_STREAMS = (1, 4, 16, 32)  # issue 29: render off at 1 / 4 / 16 / 32 streams, both models
RENDER_ON_STREAMS = 16  # issue 29: render on at 16 streams (optional: --render-on)
MIN_REPS = 3  # issue 29: the median of at least 3 repetitions inside one call
MODELS = ("classify", "people")  # the goal rows' models
TILED = re.compile(r"^(people)-tiles([2-4])$")  # the person detector with --detector-tiles N (2..MAX_TILE_GRID)


def tile_grid_of(model: str) -> int:
    """N of ``people-tilesN`` (the person detector on the frame and an NxN grid of tiles), else 0."""
    m = TILED.match(model)
    return int(m.group(2)) if m else 0


def base_model(model: str) -> str:
    """The model a name runs: ``people`` for ``people-tilesN``, else the name itself."""
    m = TILED.match(model)
    return m.group(1) if m else model


def decodes_ssd(model: str) -> bool:
    """Whether the model's outputs are an SSD's (the person detector, tiled or not): the ones a ``-hostdecode``
    variant decodes on the host."""
    return base_model(model) == "people"


def rows_per_frame(model: str) -> int:
    """Input rows one frame takes: 1, or 1 + N^2 for ``people-tilesN`` (the frame and its tiles)."""
    grid = tile_grid_of(model)
    return 1 + grid * grid if grid else 1


def known_model(model: str) -> bool:
    return model in MODELS or bool(tile_grid_of(model))


@dataclass(frozen=True)
class Step:
    """One measurement: ``kind`` (model_only, decode_alone, decode_alone_procs, decode_alone_feed, decode_beside_model,
    decode_beside_model_graph, encode_alone, pipeline,
    detector_check, device_pool), ``model`` (or None), ``arg`` (batches; streams; (streams, render, variant)), ``rep``
    (0-based) and ``group``: ``goal`` (render off, the app's default path, and their bounds), ``tiles`` (the person
    detector with tiles, ``people-tilesN``: its check against the CPU reference, its model-alone bound, its points),
    ``render`` (the optional render-on point and the encoders' bound) or ``exploratory`` (other host layouts,
    recorded apart)."""

    kind: str
    model: Optional[str]
    arg: Any
    rep: int = 0
    group: str = "goal"

    @property
    def key(self) -> str:
        """The step without its repetition: what a repetition's measured time predicts."""
        arg = list(self.arg) if isinstance(self.arg, (list, tuple)) else self.arg
        return "%s %s %s" % (self.kind, self.model or "-", arg)

    @property
    def label(self) -> str:
        return "%s rep %d" % (self.key, self.rep + 1)


@dataclass
class PlanSettings:
    """What :func:`plan_steps` needs from the command line."""

    models: Sequence[str]
    streams: Sequence[int]
    reps: int = MIN_REPS
    default_variant: str = "auto"
    exploratory: Sequence[str] = ()
    # the stream counts the exploratory variants run at (empty: every one of ``streams``): an A/B that only changes
    # large batches need not spend a device call's minutes on 1 and 4 streams
    variant_streams: Sequence[int] = ()
    render_on: bool = False
    decode_procs: bool = True
    # NVDEC alone the way the feed layout decodes (ThreadedDecoders read by one thread, frames dropped at once) at
    # ``variant_streams``: whether the decode layout itself, not the pipeline behind it, holds a point under the bound
    decode_feed: bool = False
    # NVDEC alone while each model runs back to back on the SMs, at ``variant_streams``: whether the two engines slow
    # each other down, which min(model alone, NVDEC alone) as a bound does not count
    decode_beside: bool = False
    # NVDEC beside the same model work run from one long CUDA graph (the host all but idle), at
    # ``variant_streams``: whether the host's side of running the model (its launch thread) is what slows NVDEC
    decode_beside_graph: bool = False
    device_pool: int = 0
    # the padded batch (frames) of a point: (streams, variant, model) -> bucket
    buckets_of: Callable[[int, str, str], int] = field(default=lambda n, variant, model: n)


def plan_steps(s: PlanSettings) -> List[Step]:
    """Every step in priority order.  Rounds of the goal rows first (round r: each model's model-alone bound at the
    batches its points use, NVDEC alone for every stream count, then every render-off point of the default path),
    so repetitions of one point are spread over the call (a drift of the host shows in the spread, not in one
    point); then each detector's check against the CPU reference once (``people``, ``people-tilesN``); then the tiled
    detector (``people-tilesN`` in ``models``: rounds of its model-alone bound and its render-off points; the NVDEC bounds are the goal rounds'); then the
    render-on rounds (if asked); then the exploratory variants (render off at ``variant_streams``, and render on at
    the render-on rounds' stream count when those are asked for), led by the feed layout's NVDEC alone if asked
    (``decode_feed``) and NVDEC beside each model (``decode_beside``); the device-pool stand-in last."""
    steps: List[Step] = []
    streams = sorted(set(s.streams), key=lambda n: (n not in GOAL_STREAMS, n))
    models = [m for m in s.models if not tile_grid_of(m)]
    tiled = [m for m in s.models if tile_grid_of(m)]

    def bound(model: str, variant: str, rep: int, group: str, at: Sequence[int] = streams) -> Step:
        return Step("model_only", model, tuple(sorted({s.buckets_of(n, variant, model) for n in at})), rep, group)

    variant_streams = [n for n in streams if n in s.variant_streams] if s.variant_streams else streams

    for rep in range(s.reps):
        steps += [bound(m, s.default_variant, rep, "goal") for m in models]
        steps += [Step("decode_alone", None, n, rep) for n in streams]
        if s.decode_procs:
            steps += [Step("decode_alone_procs", None, n, rep) for n in streams]
        steps += [Step("pipeline", m, (n, False, s.default_variant), rep) for m in models for n in streams]
    # each detector's GPU result against the CPU reference once (the SSD decoded as the app on a TensorRT engine)
    steps += [Step("detector_check", m, None, 0, "check") for m in models + tiled if decodes_ssd(m)]
    for rep in range(s.reps):
        for model in tiled:
            steps.append(bound(model, s.default_variant, rep, "tiles"))
            steps += [Step("pipeline", model, (n, False, s.default_variant), rep, "tiles") for n in streams]
    n_on = RENDER_ON_STREAMS if RENDER_ON_STREAMS in streams else max(streams)
    if s.render_on and models:
        for rep in range(s.reps):
            steps.append(Step("encode_alone", None, n_on, rep, "render"))
            steps += [Step("pipeline", m, (n_on, True, s.default_variant), rep, "render") for m in models]
    if s.decode_feed:
        for rep in range(s.reps):
            steps += [Step("decode_alone_feed", None, n, rep, "exploratory") for n in variant_streams]
    beside = (["decode_beside_model"] if s.decode_beside else []) + (["decode_beside_model_graph"]
                                                                    if s.decode_beside_graph else [])
    for rep in range(s.reps if beside else 0):  # the two forms side by side in each round
        steps += [Step(kind, m, n, rep, "exploratory") for m in models + tiled for n in variant_streams
                  for kind in beside]
    for variant in s.exploratory:
        for rep in range(s.reps):
            for model in models:
                if split_variant(variant)[2] and not decodes_ssd(model):
                    continue  # no SSD boxes to decode: the same point as the goal row's
                steps.append(bound(model, variant, rep, "exploratory", variant_streams))
                steps += [Step("pipeline", model, (n, False, variant), rep, "exploratory") for n in variant_streams]
                if s.render_on:  # a variant's render on beside the default's (its copy back, its sink)
                    steps.append(Step("pipeline", model, (n_on, True, variant), rep, "exploratory"))
    if s.device_pool and "classify" in s.models:
        steps.append(Step("device_pool", "classify", max(streams), 0, "exploratory"))
    return steps


def guess_s(step: Step, seconds: float, decode_seconds: float, encode_seconds: float, model_seconds: float) -> float:
    """A first estimate of a step's wall time, before any repetition of it ran (then the measured time predicts):
    the timed seconds plus opening its decoders (~0.05 s a stream), worker processes or encoders (~3 s)."""
    if step.kind == "model_only":
        return len(step.arg) * (model_seconds + 0.5) + 1.0
    if step.kind in ("decode_alone", "decode_alone_feed", "decode_beside_model"):
        return decode_seconds + 0.5 + 0.05 * step.arg
    if step.kind == "decode_beside_model_graph":  # and the graph's capture
        return decode_seconds + 2.0 + 0.05 * step.arg
    if step.kind == "decode_alone_procs":
        return decode_seconds + 3.0 + 0.05 * step.arg
    if step.kind == "encode_alone":
        return encode_seconds + 3.0
    if step.kind == "detector_check":  # one decoded batch, its graphs, the float64 reference of 3 frames (x 5 tiled)
        return 10.0
    n, render = (step.arg[0], step.arg[1]) if step.kind == "pipeline" else (step.arg, False)
    return seconds + 1.0 + 0.05 * n + (6.0 if render else 0.0)


def estimate_s(step: Step, history: Dict[str, List[float]], guess: float) -> float:
    """The longest measured time of an earlier repetition of the same step, else ``guess``."""
    seen = history.get(step.key)
    return max(seen) if seen else guess


def fits(elapsed_s: float, estimate: float, budget_s: float) -> bool:
    """Whether a step of ``estimate`` seconds, started ``elapsed_s`` into the measuring, ends within ``budget_s``
    (0 or less: no budget)."""
    return budget_s <= 0 or elapsed_s + estimate <= budget_s


def median_spread(values: Iterable[Optional[float]]) -> Optional[Dict[str, Any]]:
    """``{"median", "min", "max", "n"}`` of the values that exist (None when there are none).  The median of an even
    count is the mean of the middle two."""
    xs = sorted(float(v) for v in values if v is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid])
    return {"median": med, "min": xs[0], "max": xs[-1], "n": len(xs)}


def scaled(stats: Optional[Dict[str, Any]], by: Optional[float]) -> Optional[Dict[str, Any]]:
    """``stats`` (of :func:`median_spread`) divided by ``by``: an FPS spread as a ratio-to-bound spread."""
    if stats is None or not by:
        return None
    return {"median": stats["median"] / by, "min": stats["min"] / by, "max": stats["max"] / by, "n": stats["n"]}


def point_key(row: Dict[str, Any]) -> Tuple[str, int, bool, str]:
    """Which point a repetition's row belongs to (its variant without what ``auto`` resolved to)."""
    return row["model"], int(row["streams"]), bool(row["render"]), str(row["variant"]).split("=")[0]


def group_rows(rows: Sequence[Dict[str, Any]]) -> List[List[Dict[str, Any]]]:
    """Repetitions grouped by point, in the order the points first ran."""
    groups: Dict[Tuple[str, int, bool, str], List[Dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(point_key(row), []).append(row)
    return list(groups.values())


def nested_medians(dicts: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The per-key median of numbers nested in dicts of the same shape (per-stage times of each repetition): a
    key missing in some repetitions takes the median of those that have it."""
    out: Dict[str, Any] = {}
    keys: List[str] = []
    for d in dicts:
        keys += [k for k in d if k not in keys]
    for k in keys:
        values = [d[k] for d in dicts if k in d and d[k] is not None]
        if values and all(isinstance(v, dict) for v in values):
            out[k] = nested_medians(values)
        elif values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[k] = median_spread(values)["median"]  # type: ignore[index]
    return out


__all__ = ["GOAL_STREAMS", "MIN_REPS", "MODELS", "PlanSettings", "RENDER_ON_STREAMS", "Step", "base_model",
           "decodes_ssd", "estimate_s", "fits", "group_rows", "guess_s", "known_model", "median_spread",
           "nested_medians", "plan_steps", "point_key", "rows_per_frame", "scaled", "tile_grid_of"]
