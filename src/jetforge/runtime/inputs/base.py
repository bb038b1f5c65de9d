"""The model-input contract: what a model's input is made of, as one object built from its sidecar.

A model's sidecar records how raw data (video frames, as OpenCV decodes them) become its input
tensors.  That recipe is an :class:`InputContract` of a registered *kind*:

* ``image``  -- one frame -> one tensor (resize/crop/letterbox, colour order, scale/mean/std, layout):
  classifiers, the SSD detector, MTCNN's RNet/ONet crops (:mod:`jetforge.runtime.inputs.image`);
* ``clip``   -- a window of frames of one tracked object -> one tensor (the action model)
  (:mod:`jetforge.runtime.inputs.clip`);
* ``image_pyramid`` -- one frame -> one tensor per pyramid level (MTCNN's PNet)
  (:mod:`jetforge.runtime.inputs.pyramid`).

Every consumer (calibration, evaluation, QAT, the apps' tasks, the SSD detector, bundles, the
DeepStream export) calls :func:`input_contract` on the model's sidecar instead of reading fields
itself, so the tensors a model is calibrated on, evaluated on and fed on the device are made by the
same code.  Each kind has a numpy path (the reference) and a fused OpenCV path (:meth:`fused`: the
apps' fast path, checked against the numpy path in the tests).

Adding a kind is one module with a class like the ones here, registered with
``@INPUT_KINDS.register("name")`` and imported by ``jetforge/runtime/inputs/__init__.py``
(docs/architecture.md, "Where to add an input kind").  Torch-free, Python 3.8.
"""

from typing import Any, Callable, Dict, Optional, Sequence, Type, Union

from jetforge.errors import ModelError
from jetforge.registry import Registry


class InputContract:
    """How raw data becomes a model's input tensors; subclasses are frozen dataclasses of one kind.

    ``kind`` is the registry name (written to the sidecar's ``input`` block).  ``to_dict`` and
    ``from_dict`` give the block's fields (without ``kind``; :func:`contract_to_dict` adds it);
    ``from_dict`` rejects unknown fields with a did-you-mean.  ``fused()`` returns the OpenCV fast
    path: a callable with the same signature and (to float rounding) the same result as the numpy path.
    """

    kind = ""

    def to_dict(self) -> Dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "InputContract":
        from jetforge.config import from_dict

        return from_dict(cls, data, where="input (%s)" % cls.kind)

    def fused(self) -> Callable[..., Any]:
        raise NotImplementedError

    def describe(self) -> str:
        """One line for logs and reports."""
        return "%s input %s" % (self.kind, self.to_dict())


INPUT_KINDS: "Registry[Type[InputContract]]" = Registry("model input kind")


def contract_to_dict(contract: InputContract) -> Dict[str, Any]:
    """The sidecar's ``input`` block: ``{"kind": ..., <the kind's fields>}``."""
    block: Dict[str, Any] = {"kind": contract.kind}
    block.update(contract.to_dict())
    return block


def contract_from_dict(block: Dict[str, Any]) -> InputContract:
    """The contract of a sidecar's ``input`` block (an unknown kind names the known ones)."""
    if not isinstance(block, dict):
        raise TypeError("input must be a JSON object")
    fields = dict(block)
    kind = fields.pop("kind", None)
    if not isinstance(kind, str):
        raise TypeError("input.kind must be one of %s" % ", ".join(INPUT_KINDS.names()))
    return INPUT_KINDS.get(kind).from_dict(fields)


def input_contract(sidecar: Any, kind: Union[None, str, Sequence[str]] = None,
                   purpose: str = "this step") -> InputContract:
    """The input contract recorded in ``sidecar`` (a model sidecar, or an engine sidecar: its embedded model's).

    The same contract as ``jetforge.runtime.model_facts.model_facts(x).input`` (that accessor sits above the
    sidecar module, which imports this one, so the engine case is read here by its ``model`` attribute).
    ``kind`` (a name or several) is what the caller can feed; another kind, or a sidecar without a
    contract, is a :class:`~jetforge.errors.ModelError` that says what ``purpose`` needed.
    """
    facts = getattr(sidecar, "model", None) or sidecar  # an engine sidecar embeds its model's sidecar
    contract: Optional[InputContract] = getattr(facts, "input", None) if facts is not None else None
    wanted = (kind,) if isinstance(kind, str) else tuple(kind or ())
    if contract is None:
        raise ModelError("the model's sidecar records no input contract (how frames become its input), so %s "
                         "cannot prepare its inputs" % purpose,
                         hint="export the model with jetforge (it writes the contract), or add an \"input\" block "
                              "to its .json sidecar (docs/sidecar.md)")
    if wanted and contract.kind not in wanted:
        raise ModelError("%s needs a model with %s input, but the sidecar describes %s input"
                         % (purpose, " or ".join(wanted), contract.kind),
                         hint="use a model whose sidecar has input kind %s" % " or ".join(wanted))
    return contract


__all__ = ["INPUT_KINDS", "InputContract", "contract_from_dict", "contract_to_dict", "input_contract"]
