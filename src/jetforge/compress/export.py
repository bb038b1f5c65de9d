"""Export a torch model to ONNX with its sidecar: the artifact every later stage starts from.

``model.onnx`` is written atomically (an interrupted export leaves nothing that looks
complete) with the TorchScript-based exporter (``dynamo=False``, opset 17: what
TensorRT 8.5-10.x and ONNX Runtime parse), and ``model.onnx.json`` records the task,
labels, tensors, preprocessing and provenance, stamped with the model's hash.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from jetforge.errors import CompressError, DependencyError, ModelError
from jetforge.fileio import PathLike, atomic_output
from jetforge.optional import is_available, require
from jetforge.runtime.inputs import Preprocess
from jetforge.runtime.session import open_session
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, produced_by, sidecar_path, write_sidecar

log = logging.getLogger(__name__)

DEFAULT_OPSET = 17


# The opsets an export may use.  13: the oldest whose ops TensorRT 8.5 (JetPack 5) and jetforge's Q/DQ handling
# take (per-axis QuantizeLinear); 20: the newest torch's TorchScript-based exporter writes (torch.onnx's
# ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET; tests/compress/test_export.py checks it against the installed torch).
MIN_OPSET = 13
MAX_OPSET = 20


def check_opset(opset: int) -> None:
    """An opset outside :data:`MIN_OPSET`..:data:`MAX_OPSET` is one line naming the range, before torch is
    imported (``jetforge export --opset 9`` said only "too old", after the import)."""
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise CompressError("opset %r is outside the supported range %d to %d (%d: the oldest TensorRT 8.5+ and "
                            "ONNX Runtime take; %d: the newest torch's ONNX exporter writes)"
                            % (opset, MIN_OPSET, MAX_OPSET, MIN_OPSET, MAX_OPSET),
                            hint="--opset 17 (the default; TensorRT 8.5 in JetPack 5 parses up to 17)")


def export_onnx(model: Any, path: PathLike, input_shape: Sequence[int], *, task: str = "classify",
                model_name: str = "", labels: Sequence[str] = (), preprocess: Optional[Preprocess] = None,
                input_name: str = "input", output_name: Union[str, Sequence[str]] = "logits",
                dynamic_batch: bool = True,
                opset: int = DEFAULT_OPSET, extra: Optional[Mapping[str, Any]] = None,
                provenance: Optional[Mapping[str, Any]] = None) -> ModelSidecar:
    """Export ``model`` (a ``torch.nn.Module``) to ``path`` and write ``path + ".json"``.

    ``input_shape`` includes the batch axis, e.g. ``(1, 3, 224, 224)``; with
    ``dynamic_batch`` axis 0 of the input and output is named ``"batch"``.
    ``provenance`` adds details to the sidecar's ``produced_by`` block (e.g. the
    weights file).  Returns the sidecar as written.

    A model with several outputs (a detector's boxes and scores, a tuple or list of tensors)
    needs one name per output: ``output_name=("boxes", "scores")``; each gets a dynamic batch
    axis and its own tensor entry in the sidecar.
    """
    torch = require("torch", "ONNX export")
    shape = tuple(int(d) for d in input_shape)
    if len(shape) < 2 or any(d < 1 for d in shape):
        raise CompressError("input_shape must include the batch axis and be positive, got %s" % (shape,))
    check_opset(opset)
    path = Path(path)
    was_training = bool(getattr(model, "training", False))
    model.eval()
    dummy = torch.zeros(shape, dtype=torch.float32)
    names: List[str] = [output_name] if isinstance(output_name, str) else [str(n) for n in output_name]
    outs = _checked_outputs(model, dummy, names, input_name, task, labels)
    dynamic_axes, out_specs = _output_specs(names, outs, shape, input_name, dynamic_batch)
    in_spec_shape = (["batch"] if dynamic_batch else [shape[0]]) + list(shape[1:])
    with atomic_output(path, suffix=".onnx") as tmp:
        with warnings.catch_warnings():
            # The TorchScript exporter announces its deprecation in favour of dynamo (which needs onnxscript).
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            printed: Dict[str, str] = {}
            try:
                with torch.no_grad(), unfused_attention(), _native_stdout_captured(printed):
                    torch.onnx.export(model, (dummy,), str(tmp), input_names=[input_name], output_names=names,
                                      dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True,
                                      dynamo=False)
            except Exception as err:
                log.debug("the ONNX exporter failed; what it printed:\n%s", printed.get("text", ""))
                raise export_error(err, opset) from err
        _check_onnx(tmp, path)
    if was_training:
        model.train()

    details: Dict[str, Any] = {"torch": torch.__version__.split("+")[0], "opset": opset, "exporter": "torchscript"}
    details.update(provenance or {})
    sidecar = ModelSidecar(
        task=task, model_name=model_name or type(model).__name__,
        inputs=[TensorSpec(input_name, in_spec_shape, "float32")],
        outputs=out_specs,
        preprocess=preprocess, labels=list(labels), produced_by=produced_by("export", **details),
        extra=dict(extra or {}))
    write_sidecar(path, sidecar)
    log.info("exported %s (%s) and %s", path, sidecar.model_name, sidecar_path(path).name)
    return sidecar


def _checked_outputs(model: Any, dummy: Any, names: List[str], input_name: str, task: str,
                     labels: Sequence[str]) -> List[Any]:
    """Run ``model`` on ``dummy`` and check its outputs against the names (and a classifier's against the labels)."""
    torch = require("torch", "ONNX export")
    try:
        with torch.no_grad():
            out = model(dummy)
    except Exception as err:
        raise CompressError("the model does not run on an input of shape %s: %s" % (tuple(dummy.shape), err),
                            hint="pass the input_shape the model expects, batch axis first") from err
    outs = [out] if isinstance(out, torch.Tensor) else (list(out) if isinstance(out, (tuple, list)) else None)
    if outs is None or not outs or not all(isinstance(t, torch.Tensor) for t in outs):
        raise CompressError("export expects a model whose output is a tensor or a tuple/list of tensors, got %s"
                            % type(out).__name__, hint="wrap the model so that forward returns tensors")
    if len(outs) != len(names):
        raise CompressError("the model returns %d output tensor(s) but %d output name(s) were given: %s"
                            % (len(outs), len(names), names),
                            hint="pass output_name=(...) with one name per output, in order")
    if len(set(names)) != len(names) or input_name in names:
        raise CompressError("output names must be distinct and differ from the input name, got %s" % names)
    out_shape = list(outs[0].shape)
    if task == "classify" and labels and out_shape[-1] != len(labels):
        raise CompressError("the model has %d classes but %d labels were given" % (out_shape[-1], len(labels)),
                            hint="pass the label list that belongs to these weights")
    return outs


def _output_specs(names: List[str], outs: List[Any], shape: Tuple[int, ...], input_name: str,
                  dynamic_batch: bool) -> Tuple[Optional[Dict[str, Dict[int, str]]], List[TensorSpec]]:
    """The exporter's dynamic axes and the sidecar's output tensors (a dynamic batch axis where it is one)."""
    dynamic_axes = {input_name: {0: "batch"}} if dynamic_batch else None
    out_specs = []
    for n, t in zip(names, outs):
        dims = list(t.shape)
        # one output keeps the old contract (axis 0 is the batch); of several, those whose axis 0 is the batch
        batched = dynamic_batch and len(dims) > 0 and (len(outs) == 1 or dims[0] == shape[0])
        if batched:
            dynamic_axes[n] = {0: "batch"}  # type: ignore[index]
        out_specs.append(TensorSpec(n, (["batch"] + dims[1:]) if batched else dims, "float32"))
    return dynamic_axes, out_specs


@contextlib.contextmanager
def unfused_attention() -> Iterator[None]:
    """PyTorch's fused attention fast path switched off inside the block (the previous setting restored after).

    In eval mode without gradients, ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer``
    run one fused kernel (``aten::_native_multi_head_attention``,
    ``aten::_transformer_encoder_layer_fwd``) that the ONNX exporter cannot translate and that
    op counters see as a single opaque call.  The unfused path computes the same thing with
    matmuls and a softmax, which ONNX, TensorRT and a MAC count all understand.
    """
    torch = require("torch", "switching off the fused attention path")
    mha = getattr(torch.backends, "mha", None)
    if mha is None or not hasattr(mha, "set_fastpath_enabled"):
        yield
        return
    before = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(before)


@contextlib.contextmanager
def _native_stdout_captured(found: Dict[str, str]) -> Iterator[None]:
    """Capture file descriptor 1 inside the block; replay it after a success, keep it in ``found["text"]``.

    When an export fails, the TorchScript exporter's C++ side prints the whole TorchScript IR
    graph to the process's standard output, which would bury the one-line error (and break
    ``--json`` output), so it goes to the debug log instead.
    """
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no real descriptor 1 (embedded interpreters): nothing to capture
        yield
        return
    failed = True
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield
            failed = False
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            data = sink.read()
            found["text"] = data.decode("utf-8", "replace")
            if data and not failed:
                os.write(1, data)


_OPERATOR = re.compile(r"\b([a-z_]+::[A-Za-z0-9_.]+)")  # aten::foo, prim::bar, torchvision::nms


def export_error(err: BaseException, opset: int) -> CompressError:
    """One line for an exporter failure: the operator it could not translate (when it names one) and a fix."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    first = (lines[0] if lines else type(err).__name__)[:300]
    match = _OPERATOR.search(str(err))
    hint = ("replace that operation in the model with ops ONNX opset %d has, or export with a newer opset if one "
            "has it (opset=N; jetforge export --opset N); rerun with --debug for the exporter's full message" % opset)
    if match:
        return CompressError("the ONNX exporter cannot translate operator %s (opset %d): %s"
                             % (match.group(1), opset, first), hint=hint)
    return CompressError("ONNX export failed (opset %d): %s" % (opset, first), hint=hint)


def _check_onnx(tmp: Path, final: Path) -> None:
    """Run the ONNX checker when the onnx package is there (it is with torch's export extras)."""
    try:
        onnx = require("onnx", "checking the exported model")
    except DependencyError:  # the check is a bonus: ORT parses the file later anyway
        log.debug("onnx is not installed; skipping the ONNX checker")
        return
    try:
        onnx.checker.check_model(str(tmp))
    except Exception as err:
        raise ModelError("the exported %s fails the ONNX checker: %s" % (final.name, err)) from err


def compare_with_torch(model: Any, onnx_path: PathLike, shape: Sequence[int],
                       tolerance: float = 1e-3) -> Optional[Dict[str, float]]:
    """ONNX Runtime's output vs PyTorch's on one seeded random input; a mismatch is an error, not a warning.

    ``None`` where ONNX Runtime is not installed.  The tolerance is relative to the output scale (at least 1):
    FP32 kernels of the two runtimes differ by summation order, about 1e-6 of the scale per layer.
    """
    if not is_available("onnxruntime"):
        log.info("onnxruntime is not installed: the exported model was not compared with PyTorch")
        return None
    import torch

    x = np.random.default_rng(0).standard_normal(tuple(shape)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x))
    refs = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    with open_session(onnx_path, backend="onnxruntime") as session:
        outs = session.infer({session.inputs[0].name: x})
    diffs, scales = [], []
    for r, o in zip(refs, outs.values()):
        r = r.numpy()
        diffs.append(float(np.max(np.abs(r - o))) if r.size else 0.0)
        scales.append(float(np.max(np.abs(r))) if r.size else 0.0)
    diff, scale = max(diffs), max(scales)
    if diff > tolerance * max(1.0, scale):
        raise ModelError("the exported %s disagrees with PyTorch: max |diff| %.3g at output scale %.3g"
                         % (Path(onnx_path).name, diff, scale),
                         hint="check for ops the exporter handles differently (rerun with --debug); try another --opset")
    return {"max_abs_diff": diff, "output_scale": scale}
