"""``jetforge export-config triton BUNDLE``: a Triton Inference Server model repository from a bundle.

Layout written (``NAME`` is the model's name)::

    NAME/config.pbtxt           platform tensorrt_plan (or onnxruntime_onnx), max_batch_size, dynamic batching,
                                instance groups, inputs/outputs with dims and data types from the sidecar
    NAME/1/model.onnx           (onnxruntime_onnx) the bundle's model; (tensorrt_plan) built on the board into
                                NAME/1/model.plan by build_engines.sh
    NAME/labels.txt             classifier labels (label_filename of the output)
    build_engines.sh            the trtexec commands that build the plan files on the board (batch profile 1..max)

For the SSD detector the repository is an ensemble (Triton's ``ensemble`` platform): ``NAME_body`` (the
network) feeds ``NAME_postprocess`` (a Python-backend model, ``model.py`` =
:mod:`jetforge.deploy.triton.ssd_model`, that decodes and runs NMS with
:func:`jetforge.vision.ssd.postprocess`), and ``NAME`` exposes ``input`` and the padded
detections.  ``config.pbtxt`` is protobuf text format; :func:`to_pbtxt` writes it from plain
dicts, and the tests parse every file with Triton's own ``model_config.proto`` (from the
``tritonclient`` package).  Not executed under Triton here.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.deploy.generated_names import pbtxt_string, shell_command, tensor_name
from jetforge.errors import ConfigError

PLATFORMS = ("tensorrt_plan", "onnxruntime_onnx")
DTYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "int32": "TYPE_INT32", "int64": "TYPE_INT64",
          "int8": "TYPE_INT8", "uint8": "TYPE_UINT8", "bool": "TYPE_BOOL", "float64": "TYPE_FP64"}
MODEL_FILES = {"tensorrt_plan": "model.plan", "onnxruntime_onnx": "model.onnx"}
DETECTION_OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
# Larger is a typo, not a plan: a Jetson's memory holds far fewer images per batch, and trtexec would be asked
# for a profile that large (--max-batch 1000000000 used to be written as given).
MAX_BATCH_SIZE = 4096


class TritonConfigError(ConfigError):
    """A Triton model repository cannot be made from this bundle with these options."""


class Enum(str):
    """A protobuf enum value: written bare (``TYPE_FP32``), not quoted."""


@dataclass
class TritonOptions:
    """What ``export-config triton`` takes besides the bundle and the output folder."""

    platform: str = "tensorrt_plan"
    max_batch_size: int = 8
    preferred_batch_sizes: Sequence[int] = ()      # default: powers of two from max/2 up to max
    max_queue_delay_us: int = 100
    instances: int = 1
    precision: Optional[str] = None                # plan precision for build_engines.sh (default: the bundle's)
    dla_core: Optional[int] = None
    score_threshold: float = 0.01                  # detector postprocess (see vision.ssd.postprocess)
    name: Optional[str] = None

    def check(self) -> None:
        if self.platform not in PLATFORMS:
            raise TritonConfigError("unknown Triton platform %r" % self.platform, hint="use one of %s" % ", ".join(PLATFORMS))
        if self.max_batch_size < 1:
            raise TritonConfigError("max batch size must be at least 1, got %d" % self.max_batch_size)
        if self.max_batch_size > MAX_BATCH_SIZE:
            raise TritonConfigError("max batch size %d is above %d" % (self.max_batch_size, MAX_BATCH_SIZE),
                                    hint="give --max-batch 1..%d" % MAX_BATCH_SIZE)
        if not 0.0 <= self.score_threshold <= 1.0:
            raise TritonConfigError("score threshold %r is outside [0, 1]" % self.score_threshold)
        if self.dla_core is not None and self.dla_core < 0:
            raise TritonConfigError("DLA core must be 0 or more, got %d" % self.dla_core, hint="--dla-core 0 or 1")
        if self.instances < 1:
            raise TritonConfigError("instance count must be at least 1")
        for size in self.preferred_sizes():
            if not 1 <= size <= self.max_batch_size:
                raise TritonConfigError("preferred batch size %d is outside 1..%d" % (size, self.max_batch_size),
                                        hint="give sizes up to --max-batch")
        if self.max_queue_delay_us < 0:
            raise TritonConfigError("max queue delay must not be negative")

    def preferred_sizes(self) -> List[int]:
        if self.preferred_batch_sizes:
            return sorted(set(int(s) for s in self.preferred_batch_sizes))
        sizes, s = [], self.max_batch_size
        while s >= max(1, self.max_batch_size // 2) and s >= 1:
            sizes.append(s)
            s //= 2
        return sorted(set(sizes))


# ------------------------------------------------------------------------------------------------
# protobuf text format
# ------------------------------------------------------------------------------------------------
def _scalar(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return pbtxt_string(value)  # \\ and \" escaped, UTF-8 kept; control characters refused
    raise TypeError("cannot write %r in protobuf text format" % (value,))


def to_pbtxt(message: Dict[str, Any], indent: int = 0) -> str:
    """Protobuf text format of ``message``: dict = message, list = repeated field, ``Enum`` = enum value."""
    pad = "  " * indent
    lines: List[str] = []
    for key, value in message.items():
        items = value if isinstance(value, list) else [value]
        if isinstance(value, list) and value and not isinstance(value[0], dict):
            lines.append("%s%s: [ %s ]" % (pad, key, ", ".join(_scalar(v) for v in value)))
            continue
        for item in items:
            if isinstance(item, dict):
                lines.append("%s%s {" % (pad, key))
                lines.append(to_pbtxt(item, indent + 1).rstrip("\n"))
                lines.append("%s}" % pad)
            else:
                lines.append("%s%s: %s" % (pad, key, _scalar(item)))
    return "\n".join(line for line in lines if line != "") + "\n"


# ------------------------------------------------------------------------------------------------
# configs
# ------------------------------------------------------------------------------------------------
def tensor(name: str, dtype: str, dims: Sequence[int], label_filename: Optional[str] = None) -> Dict[str, Any]:
    if dtype not in DTYPES:
        raise TritonConfigError("tensor %s has data type %s, which Triton's config does not name" % (name, dtype))
    out: Dict[str, Any] = {"name": name, "data_type": Enum(DTYPES[dtype]), "dims": [int(d) for d in dims]}
    if label_filename:
        out["label_filename"] = label_filename
    return out


def per_item_dims(spec: Any, what: str) -> List[int]:
    """A sidecar tensor's dims without the batch axis; every other axis must be static."""
    dims = list(spec.shape[1:])
    if any(not isinstance(d, int) or d < 1 for d in dims):
        raise TritonConfigError("%s %s has dynamic axes %s besides the batch" % (what, spec.name, spec.shape),
                                hint="export with static image sizes")
    batch = spec.shape[0] if spec.shape else None
    if isinstance(batch, int) and batch > 0:
        raise TritonConfigError("%s %s has a fixed batch of %d: Triton's dynamic batching needs a dynamic batch axis"
                                % (what, spec.name, batch), hint="export without --static-batch")
    return [int(d) for d in dims]


def model_config(name: str, platform: str, opts: TritonOptions, inputs: List[Dict[str, Any]],
                 outputs: List[Dict[str, Any]], gpu: bool = True, backend: Optional[str] = None,
                 batching: bool = True) -> Dict[str, Any]:
    config: Dict[str, Any] = {"name": name}
    if backend:
        config["backend"] = backend
    else:
        config["platform"] = platform
    config["max_batch_size"] = opts.max_batch_size
    config["input"] = inputs
    config["output"] = outputs
    if batching:
        config["dynamic_batching"] = {"preferred_batch_size": opts.preferred_sizes(),
                                      "max_queue_delay_microseconds": opts.max_queue_delay_us}
    group: Dict[str, Any] = {"count": opts.instances, "kind": Enum("KIND_GPU" if gpu else "KIND_CPU")}
    if gpu and opts.dla_core is not None:  # Triton's documented way to run a plan on a DLA core (Jetson)
        group["secondary_devices"] = [{"kind": Enum("KIND_NVDLA"), "device_id": int(opts.dla_core)}]
    config["instance_group"] = [group]
    return config


def postprocess_config(name: str, opts: TritonOptions, spec: Any, body_outputs: Sequence[Any]) -> Dict[str, Any]:
    """The Python-backend model: raw SSD outputs in, detections padded to ``max_total`` out."""
    inputs = [tensor(t.name, t.dtype, per_item_dims(t, "output")) for t in body_outputs]
    k = spec.max_total
    outputs = [tensor("num_detections", "int32", [1]), tensor("detection_boxes", "float32", [k, 4]),
               tensor("detection_scores", "float32", [k]), tensor("detection_classes", "int32", [k])]
    config = model_config(name, "", opts, inputs, outputs, gpu=False, backend="python")
    config["parameters"] = [{"key": "score_threshold", "value": {"string_value": repr(float(opts.score_threshold))}}]
    return config


def ensemble_config(name: str, opts: TritonOptions, body: Dict[str, Any], post: Dict[str, Any]) -> Dict[str, Any]:
    """``input`` -> body -> postprocess -> detections, tensors mapped by name."""
    steps = [{"model_name": body["name"], "model_version": -1,
              "input_map": [{"key": t["name"], "value": t["name"]} for t in body["input"]],
              "output_map": [{"key": t["name"], "value": t["name"]} for t in body["output"]]},
             {"model_name": post["name"], "model_version": -1,
              "input_map": [{"key": t["name"], "value": t["name"]} for t in post["input"]],
              "output_map": [{"key": t["name"], "value": t["name"]} for t in post["output"]]}]
    return {"name": name, "platform": "ensemble", "max_batch_size": opts.max_batch_size, "input": body["input"],
            "output": post["output"], "ensemble_scheduling": {"step": steps}}


def check_ensemble(configs: Sequence[Dict[str, Any]]) -> List[str]:
    """What Triton checks when it loads an ensemble: steps name models of the repository, every tensor
    is produced before it is consumed with the same type and dims, and batch sizes fit."""
    by_name = {c["name"]: c for c in configs}
    problems: List[str] = []
    for ens in [c for c in configs if c.get("platform") == "ensemble"]:
        available: Dict[str, Tuple[str, List[int]]] = {t["name"]: (t["data_type"], t["dims"]) for t in ens["input"]}
        for step in ens["ensemble_scheduling"]["step"]:
            model = by_name.get(step["model_name"])
            if model is None:
                problems.append("ensemble %s uses model %s, which the repository lacks" % (ens["name"], step["model_name"]))
                continue
            if model["max_batch_size"] < ens["max_batch_size"]:
                problems.append("model %s batches %d, less than the ensemble's %d" % (
                    model["name"], model["max_batch_size"], ens["max_batch_size"]))
            wanted = {t["name"]: (t["data_type"], t["dims"]) for t in model["input"]}
            for m in step["input_map"]:
                if m["value"] not in available:
                    problems.append("step %s reads %s before anything produces it" % (model["name"], m["value"]))
                elif wanted.get(m["key"]) != available[m["value"]]:
                    problems.append("step %s input %s expects %s, gets %s" % (
                        model["name"], m["key"], wanted.get(m["key"]), available[m["value"]]))
            produced = {t["name"]: (t["data_type"], t["dims"]) for t in model["output"]}
            for m in step["output_map"]:
                if m["key"] not in produced:
                    problems.append("model %s has no output %s" % (model["name"], m["key"]))
                else:
                    available[m["value"]] = produced[m["key"]]
        for t in ens["output"]:
            if available.get(t["name"]) != (t["data_type"], t["dims"]):
                problems.append("ensemble output %s is not produced as declared" % t["name"])
    return problems


def trtexec_command(onnx: str, plan: str, input_name: str, dims: Sequence[int], max_batch: int, precision: str,
                    calib: Optional[str], dla_core: Optional[int]) -> str:
    """The documented trtexec build of a plan with a batch profile 1..max (explicit batch, dynamic first axis).

    One sh command line: the input name must be a plain tensor name (trtexec splits ``--minShapes`` on
    ``,`` and on the last ``:``, and reads ``'`` as quoting), and every word is shell-quoted as well.
    """
    tensor_name(input_name, "input", "build_engines.sh (trtexec --minShapes)")
    shape = lambda n: "%s:%s" % (input_name, "x".join(str(d) for d in [n] + list(dims)))  # noqa: E731
    opt = max(1, max_batch // 2)
    words = ["trtexec", "--onnx=%s" % onnx, "--saveEngine=%s" % plan, "--minShapes=%s" % shape(1),
             "--optShapes=%s" % shape(opt), "--maxShapes=%s" % shape(max_batch)]
    if precision in ("fp16", "int8", "best"):
        words.append("--fp16")
    if precision in ("int8", "best"):
        words.append("--int8")
        if calib:
            words.append("--calib=%s" % calib)
    if dla_core is not None:
        words += ["--useDLACore=%d" % dla_core, "--allowGPUFallback"]
    return shell_command(words)


__all__ = ["DETECTION_OUTPUTS", "Enum", "MAX_BATCH_SIZE", "MODEL_FILES", "PLATFORMS", "TritonConfigError", "TritonOptions",
           "check_ensemble", "ensemble_config", "model_config", "per_item_dims", "postprocess_config", "tensor",
           "to_pbtxt", "trtexec_command"]
