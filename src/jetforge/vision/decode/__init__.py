"""Output decoders: a detector's raw outputs -> one :class:`~jetforge.vision.detections.Detections` per image.

:data:`DECODERS` is the registry (one module per family of layouts registers its decoders):

=================  ==========================================================================================
``ssd-tf``         SSD body, TF Object Detection API box coding, anchors from ``extra.ssd`` (:mod:`.ssd_coders`)
``ssd-torchvision`` SSD/SSDlite body, torchvision's ``BoxCoder``, anchors in ``extra.decoder.params``
``yolov5``         ``[N, A, 5 + C]`` with objectness (:mod:`.yolo`)
``yolov8``         ``[N, 4 + C, A]``, YOLOv8/v11, no objectness (:mod:`.yolo`)
``efficientnms``   TensorRT EfficientNMS's four outputs (:mod:`.nms_outputs`)
``torchvision``    a torchvision detection model exported whole: boxes, labels, scores (:mod:`.nms_outputs`)
=================  ==========================================================================================

Which decoder a model takes is recorded once in its sidecar, ``extra.decoder``: ``{"name", "options", "params"}``
(``jetforge export-sidecar MODEL.onnx --decoder NAME`` writes it for an ONNX made elsewhere; a sidecar with the
older ``extra.ssd`` block is ``ssd-tf``).  :func:`decoder_for` builds the decoder from a model's facts, or from
``name`` for a model without them, and refuses outputs the decoder cannot read, in one line that names the decoders
whose layout they do fit.  Torch-free, numpy only, Python 3.8.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.config import from_dict
from jetforge.errors import ConfigError, ModelError
from jetforge.runtime.model_facts import model_facts
from jetforge.vision.decode.base import (DECODER_EXTRA_KEY, DECODERS, DecoderOptions, OutputDecoder, options_block,
                                         to_frame)
from jetforge.vision.decode import nms_outputs, ssd_coders, yolo  # noqa: F401  (each registers its decoders)

Shapes = Sequence[Sequence[Any]]


def matching_decoders(shapes: Shapes, num_labels: Optional[int] = None) -> List[str]:
    """The registered decoders whose layout outputs of these ``shapes`` fit (``ssd-tf`` needs its sidecar block)."""
    return [n for n in DECODERS.names() if DECODERS.get(n).check_shapes(shapes, num_labels) is None]


def check_layout(name: str, shapes: Shapes, num_labels: Optional[int] = None, model: str = "the model") -> None:
    """Refuse outputs of ``shapes`` that decoder ``name`` cannot read: one line naming the decoders that fit."""
    why = DECODERS.get(name).check_shapes(shapes, num_labels)
    if why is None:
        return
    fits = [n for n in matching_decoders(shapes, num_labels) if n != name]
    raise ModelError("%s's outputs %s do not fit decoder %s (%s)" % (model, [list(s) for s in shapes], name, why),
                     hint=("its outputs fit %s: pass --decoder %s" % (", ".join(fits), fits[0])) if fits else
                     "no registered decoder reads these outputs (%s); export the detector with one of their layouts"
                     % ", ".join(DECODERS.names()))


def decoder_block(name: str, options: Optional[DecoderOptions] = None,
                  params: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The sidecar's ``extra.decoder`` block (checked: the name is registered, options and params are valid)."""
    cls = DECODERS.get(name)
    block: Dict[str, Any] = {"name": name, "options": options_block(options or DecoderOptions())}
    if params:
        if cls.Params is None:
            raise ConfigError("decoder %s takes no parameters" % name)
        from_dict(cls.Params, params, where="decoder %s params" % name)
        block["params"] = dict(params)
    return block


def _read_block(block: Any) -> Tuple[str, DecoderOptions, Dict[str, Any]]:
    if not isinstance(block, dict) or not isinstance(block.get("name"), str):
        raise ModelError("the sidecar's extra.decoder block must be an object with a decoder name",
                         hint="write it with jetforge export-sidecar MODEL --decoder NAME")
    unknown = sorted(set(block) - {"name", "options", "params"})
    if unknown:
        raise ModelError("the sidecar's extra.decoder block has unknown key %s" % unknown[0][:40],
                         hint="it holds name, options and params (docs/sidecar.md)")
    options = from_dict(DecoderOptions, block.get("options") or {}, where="extra.decoder.options")
    return block["name"], options, dict(block.get("params") or {})


def decoder_for(model: Any = None, name: Optional[str] = None, labels: Optional[Sequence[str]] = None,
                options: Optional[DecoderOptions] = None, output_specs: Optional[Sequence[Any]] = None,
                input_hw: Optional[Tuple[int, int]] = None) -> OutputDecoder:
    """The decoder of ``model`` (anything :func:`~jetforge.runtime.model_facts.model_facts` reads, or None).

    ``name`` overrides the sidecar's decoder (``--decoder`` for a foreign ONNX); ``labels`` its label list
    (``--classes``); ``options`` its thresholds; ``output_specs``/``input_hw`` stand in for a model without facts
    (``TensorSpec`` or ``{"name", "shape"}`` per output, in order).
    """
    facts = model_facts(model) if model is not None else None
    extra = dict(facts.extra) if facts is not None else {}
    block_name, block_options, params = (_read_block(extra[DECODER_EXTRA_KEY]) if DECODER_EXTRA_KEY in extra
                                         else (None, DecoderOptions(), {}))
    chosen = name or block_name or ("ssd-tf" if ssd_coders.ssd.SSD_EXTRA_KEY in extra else None)
    specs = list(output_specs) if output_specs is not None else (list(facts.outputs) if facts is not None else [])
    shapes = [_spec(s)[1] for s in specs]
    names = [_spec(s)[0] for s in specs]
    what = (facts.model_name if facts is not None and facts.model_name else "the model")
    label_list = tuple(labels) if labels is not None else tuple(facts.labels) if facts is not None else ()
    if chosen is None:
        fits = matching_decoders(shapes, len(label_list) or None)
        raise ModelError("%s names no output decoder (outputs %s)" % (what, [list(s) for s in shapes]),
                         hint=("write its sidecar once: jetforge export-sidecar MODEL.onnx --decoder %s --classes "
                               "coco80" % fits[0]) if fits else
                         "its outputs fit no registered decoder (%s)" % ", ".join(DECODERS.names()))
    cls = DECODERS.get(chosen)
    if shapes:
        check_layout(chosen, shapes, (len(label_list) or None) if cls.name != "ssd-tf" else None, what)
    if input_hw is None and facts is not None and getattr(facts.input, "kind", None) == "image":
        input_hw = (facts.input.height, facts.input.width)
    kwargs: Dict[str, Any] = {}
    if cls is ssd_coders.TfSsdDecoder:
        kwargs["spec"] = ssd_coders.ssd.spec_from_sidecar(facts)
    parsed = from_dict(cls.Params, params, where="extra.decoder.params") if cls.Params is not None else None
    if parsed is None and params:
        raise ModelError("decoder %s takes no parameters, the sidecar gives %s" % (chosen, sorted(params)[0][:40]))
    return cls(label_list, options or block_options, parsed, names, input_hw, **kwargs)


def _spec(spec: Any) -> Tuple[str, List[Any]]:
    if isinstance(spec, dict):
        return str(spec.get("name", "")), list(spec.get("shape", []))
    return spec.name, list(spec.shape)


__all__ = ["DECODERS", "DECODER_EXTRA_KEY", "DecoderOptions", "OutputDecoder", "check_layout", "decoder_block",
           "decoder_for", "matching_decoders", "to_frame"]
