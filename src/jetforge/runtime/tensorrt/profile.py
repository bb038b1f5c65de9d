"""Input shapes of a build: optimization profiles (min/opt/max per input) and their checks.

The checks run twice with the same code: in the planner against the ONNX inputs (when the ``onnx``
package is there) and in the builder against TensorRT's parsed network (always).  DLA has no dynamic
shapes: every profile needs min = opt = max there, and a batch of at most 4096.
"""

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from jetforge.config import Bound
from jetforge.errors import EngineBuildError
from jetforge.runtime.tensorrt.model_info import is_dynamic

DLA_MAX_BATCH = 4096
_SHAPE_HINT = "write e.g. --shape input=1x3x224x224"
#: One dim of a shape a user gives (``--shape``, ``input_shapes``, a profile, ``--input-shape``): TensorRT 8
#: (JetPack 5) holds dims as 32-bit integers; whether the tensor fits the board is checked against its memory.
DIM = Bound(int, 1, 2 ** 31 - 1, why="TensorRT 8 holds a dim in 32 bits")


@dataclass
class ShapeRange:
    """One input's optimization-profile shapes."""

    min: List[int] = DIM.field()
    opt: List[int] = DIM.field()
    max: List[int] = DIM.field()

    @property
    def is_static(self) -> bool:
        return list(self.min) == list(self.opt) == list(self.max)

    def to_dict(self) -> Dict[str, List[int]]:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def fail(message: str, hint: str) -> None:
    """Raise the planner's one-line EngineBuildError with its fix."""
    raise EngineBuildError(message, hint=hint)


def parse_shape(text: str) -> Tuple[str, List[int]]:
    """``"input=1x3x224x224"`` -> ``("input", [1, 3, 224, 224])`` (for ``--shape``)."""
    name, sep, dims = text.partition("=")
    if not sep or not name.strip():
        raise EngineBuildError("--shape %r is not NAME=DxDxD" % text, hint=_SHAPE_HINT)
    try:
        values = [int(d) for d in re.split(r"[x,]", dims.strip()) if d]
    except ValueError:
        raise EngineBuildError("--shape %r has a non-integer dim" % text, hint=_SHAPE_HINT) from None
    if not values:
        raise EngineBuildError("--shape %r has no dims" % text, hint=_SHAPE_HINT)
    for d in values:
        DIM.check(d, "--shape %s" % text)
    return name.strip(), values


def _shape_hint(shape: Sequence[Any]) -> str:
    """A model shape with its dynamic dims as 1 (``N x 3 x 224 x 224`` -> ``1x3x224x224``)."""
    return "x".join(str(d) if isinstance(d, int) and d > 0 else "1" for d in shape)


def _check_range(where: str, name: str, rng: ShapeRange) -> None:
    """A profile entry on its own: same rank, min <= opt <= max, positive dims."""
    if not (len(rng.min) == len(rng.opt) == len(rng.max)):
        fail("%s: input %s has min/opt/max of different ranks" % (where, name),
             "give the same number of dims for min, opt and max")
    if any(a > b for a, b in zip(rng.min, rng.opt)) or any(a > b for a, b in zip(rng.opt, rng.max)):
        fail("%s: input %s needs min <= opt <= max in every dim (got %s / %s / %s)"
             % (where, name, rng.min, rng.opt, rng.max), "reorder the shapes")
    if any(d <= 0 for d in rng.min):
        fail("%s: input %s has a non-positive dim %s" % (where, name, rng.min), "use positive dims")
    for d in rng.max:
        DIM.check(d, "%s: input %s" % (where, name))


def _check_against_model(where: str, name: str, rng: ShapeRange, model_shape: Sequence[Any]) -> None:
    """A profile entry against the model's input: same rank, fixed axes kept."""
    if len(model_shape) != len(rng.min):
        fail("%s: input %s has rank %d in the model but %d in the profile"
             % (where, name, len(model_shape), len(rng.min)), "match the model's rank")
    for axis, d in enumerate(model_shape):
        if isinstance(d, int) and d > 0 and not (rng.min[axis] == rng.opt[axis] == rng.max[axis] == d):
            fail("%s: input %s axis %d is fixed to %d in the model" % (where, name, axis, d),
                 "use %d there, or re-export the model with that axis dynamic" % d)


def _check_dla(name: str, rng: ShapeRange) -> None:
    """DLA: static shapes only, batch (the dims before C, H, W) at most 4096."""
    if not rng.is_static:
        fail("DLA does not support dynamic shapes: input %s has min %s, opt %s, max %s"
             % (name, rng.min, rng.opt, rng.max),
             "give one static shape (min = opt = max), e.g. --shape %s=%s" % (name, "x".join(str(d) for d in rng.opt)))
    dims = rng.opt
    batch = 1
    for d in dims[:-3]:
        batch *= d
    if len(dims) > 3 and batch > DLA_MAX_BATCH:
        fail("DLA batch %d (input %s) exceeds the maximum of %d" % (batch, name, DLA_MAX_BATCH),
             "use a batch of at most %d on DLA" % DLA_MAX_BATCH)


def check_inputs(inputs: Optional[Sequence[Mapping[str, Any]]], profiles: Sequence[Mapping[str, ShapeRange]],
                 use_dla: bool) -> None:
    """Validate profiles against the model inputs (``inputs`` None: only the profiles themselves)."""
    by_name = {i["name"]: i for i in inputs} if inputs is not None else {}
    for number, profile in enumerate(profiles):
        where = "profile %d" % number if len(profiles) > 1 else "the shape profile"
        for name, rng in profile.items():
            if inputs is not None and name not in by_name:
                fail("%s names input %r, which the model does not have (inputs: %s)"
                     % (where, name, ", ".join(by_name) or "none"), "use the model's input names")
            _check_range(where, name, rng)
            if inputs is not None:
                _check_against_model(where, name, rng, by_name[name]["shape"])
            if use_dla:
                _check_dla(name, rng)
        for i in inputs or []:
            if is_dynamic(i["shape"]) and i["name"] not in profile:
                fail("input %s has dynamic dims %s and %s gives it no shape" % (i["name"], i["shape"], where),
                     "give --shape %s=%s (or a profile with min/opt/max)" % (i["name"], _shape_hint(i["shape"])))
    if not profiles:
        for i in inputs or []:
            if is_dynamic(i["shape"]):
                fail("input %s has dynamic dims %s and no shape was given" % (i["name"], i["shape"]),
                     "give --shape %s=%s%s" % (i["name"], _shape_hint(i["shape"]),
                                              " (DLA needs a static shape)" if use_dla else " or a profile"))
