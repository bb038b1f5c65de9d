"""Every torch file jetforge reads goes through here: weights only, unless the user opts in by name.

Why: ``torch.load`` unpickles, and a pickle may call any Python function while it is being
read -- a ``.pt`` downloaded from a stranger can run a shell command the moment it is opened.
``torch.load(weights_only=True)`` restricts the unpickler to tensors and plain containers
(dict, list, tuple, str, numbers), which is all a state dict or a jetforge training checkpoint
holds, so that is how every file is read by default.  Two kinds of file can still run code:

* a whole pickled module (``torch.save(model)``): unpickling it imports and calls whatever
  the file names;
* a ``torch.export`` archive (``.pt2``): ``torch.export.load`` unpickles parts of it (tensor
  subclasses, opaque constants, and the example inputs whenever they fail the weights-only
  reader) and feeds expression strings stored in it to ``sympy.sympify``, which evaluates them.

Both are loaded only when the caller passes ``trusted=True`` (the CLI's ``--trust-pickle``, a
recipe's ``model.trust_pickle: true``), with a warning each time.  The safe route that the
refusal names instead is a state dict plus the architecture's name (and, for a pruned model,
the ``model.prune.json`` that jetforge prune wrote), see :func:`jetforge.compress.models.model_from_weights`.

A file that is empty, cut off, random bytes, text or another format becomes one
:class:`~jetforge.errors.ModelError` naming the file and the fix, never a raw
``UnpicklingError``/``EOFError``/``RuntimeError``.
"""

import logging
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from jetforge.errors import CompressError, ModelError
from jetforge.fileio import PathLike, require_file
from jetforge.optional import require

log = logging.getLogger(__name__)

TRUST_FLAG = "--trust-pickle"
SAFE_ROUTE = ("save the weights with torch.save(model.state_dict(), PATH) and pass --model ARCH --weights PATH "
              "(plus --prune-plan model.prune.json for a model pruned by jetforge prune)")
TRAINING_FORMAT = "jetforge-train-1"  # the "format" key of a jetforge training checkpoint (compress.train.loop)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class PickledObjectsError(ModelError):
    """The file holds pickled Python objects (classes, functions), not only weights."""

    def __init__(self, message: str, *, hint: Optional[str] = None, names: Optional[List[str]] = None) -> None:
        super().__init__(message, hint=hint)
        self.names = list(names or [])


def read_weights(path: PathLike, what: str = "checkpoint", opt_in: Optional[str] = TRUST_FLAG,
                 safe_route: str = SAFE_ROUTE) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; every failure one line naming the file and the fix.

    ``opt_in`` (e.g. ``--trust-pickle``; None where there is none) and ``safe_route`` are named in
    the refusal of a file that holds pickled objects, so the message tells the user of *this*
    command what to do.
    """
    torch = require("torch", "reading PyTorch checkpoints")
    p = require_file(path, what)
    if p.stat().st_size == 0:
        raise ModelError("%s %s is empty (0 bytes)" % (what, p),
                         hint="the copy or download was cut off, or the writer was killed: write or fetch it again")
    try:
        with warnings.catch_warnings():  # torch warns about a TorchScript zip before refusing it; the refusal says it
            warnings.filterwarnings("ignore", message=".*TorchScript archive.*")
            return torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, EOFError, RuntimeError, KeyError, ValueError...
        raise explain_load_failure(p, err, what, opt_in, safe_route) from err


def explain_load_failure(path: Path, err: BaseException, what: str, opt_in: Optional[str] = TRUST_FLAG,
                         safe_route: str = SAFE_ROUTE) -> ModelError:
    """The one-line error for a file ``torch.load(weights_only=True)`` refused."""
    text = _ANSI.sub("", str(err))
    if isinstance(err, pickle.UnpicklingError) and re.search(r"Unsupported (global|class)", text):
        names = _unsafe_globals(path, text)
        return PickledObjectsError(
            "%s %s holds pickled Python objects (%s), not only weights; jetforge does not unpickle them by "
            "default because unpickling runs code the file chooses" % (what, path, ", ".join(names[:3]) or "?"),
            hint="%s; or, only for a file you made yourself, add %s" % (safe_route, opt_in) if opt_in else safe_route,
            names=names)
    if "TorchScript" in text:
        return ModelError("%s %s is a TorchScript archive (torch.jit.save), not a checkpoint of weights" % (what, path),
                          hint=safe_route)
    if _is_export_archive(path):
        return ModelError("%s %s is a torch.export archive, not a checkpoint of weights" % (what, path),
                          hint="name it with the .pt2 suffix where a model is expected, or " + safe_route)
    return ModelError("%s %s is damaged or not a PyTorch checkpoint (%s)" % (what, path, _reason(err, text)),
                      hint="a cut-off copy or download looks like this: copy or fetch it again, or save it again "
                           "with torch.save(model.state_dict(), PATH)")


def _reason(err: BaseException, text: str) -> str:
    """The part of torch's message that says what went wrong, short enough for one line."""
    m = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", text, re.S)
    line = (m.group(1) if m else text).strip().splitlines()
    reason = line[0].strip() if line else ""
    reason = reason.split(". This is an internal miniz error")[0]
    if len(reason) > 120:
        reason = reason[:117] + "..."
    return "%s: %s" % (type(err).__name__, reason) if reason else type(err).__name__


def _unsafe_globals(path: Path, text: str) -> List[str]:
    """The classes/functions the pickle names, found statically (nothing is executed)."""
    import torch

    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)  # torch >= 2.5
    if finder is not None:
        try:
            return sorted(finder(str(path)))
        except Exception as err:  # legacy (non-zip) format: fall back to the name in torch's message
            log.debug("static scan of %s failed: %s", path, err)
    return sorted(set(re.findall(r"GLOBAL ([\w.]+)", text)))


def _is_export_archive(path: Path) -> bool:
    try:
        with zipfile.ZipFile(str(path)) as z:
            return any(n.endswith("/archive_format") or n == "archive_format" for n in z.namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def load_trusted(path: PathLike, what: str = "checkpoint", opt_in: str = TRUST_FLAG,
                 safe_route: str = SAFE_ROUTE) -> Any:
    """Read ``path`` weights-only if it can be; unpickle it fully, with a warning, only if it must be.

    Only for files the user vouched for with ``opt_in``: a damaged file is still a clear error.
    """
    try:
        return read_weights(path, what, opt_in, safe_route)
    except PickledObjectsError as refused:
        torch = require("torch", "reading PyTorch checkpoints")
        log.warning("%s %s: unpickling it in full because of %s -- any code it holds (%s) runs now; do this only "
                    "for files you made yourself", what, path, opt_in, ", ".join(refused.names[:3]) or "?")
        try:
            return torch.load(str(path), map_location="cpu", weights_only=False)
        except Exception as err:
            raise ModelError("cannot unpickle %s %s: %s" % (what, path, _reason(err, str(err))),
                             hint="the module that defines the model's classes must be importable (PYTHONPATH); "
                                  "or " + safe_route) from err


# ---------------------------------------------------------------------------------------- state dicts
def state_dict_in(obj: Any, path: PathLike, what: str = "weights file") -> Dict[str, Any]:
    """The model weights inside what a file held: a plain state dict, a jetforge training checkpoint
    (its ``model``), ``{"state_dict": ...}``/``{"model_state_dict": ...}`` as common trainers write them,
    or (trusted files only) a whole module."""
    torch = require("torch", "reading PyTorch checkpoints")
    if isinstance(obj, torch.nn.Module):
        return dict(obj.state_dict())
    if isinstance(obj, Mapping):
        if obj.get("format") == TRAINING_FORMAT and isinstance(obj.get("model"), Mapping):
            return dict(obj["model"])
        if obj and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
            return dict(obj)
        for key in ("state_dict", "model_state_dict"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                return dict(inner)
        keys = ", ".join(sorted(str(k) for k in obj)[:6]) or "none"
        raise ModelError("%s %s holds a dict without model weights (keys: %s)" % (what, path, keys),
                         hint="give a file written with torch.save(model.state_dict(), PATH), or last.pt/best.pt "
                              "of a jetforge run")
    raise ModelError("%s %s holds a %s, not model weights" % (what, path, type(obj).__name__),
                     hint="give a file written with torch.save(model.state_dict(), PATH)")


def load_state_dict(path: PathLike, what: str = "weights file", trusted: bool = False,
                    opt_in: str = TRUST_FLAG, safe_route: str = SAFE_ROUTE) -> Dict[str, Any]:
    """The state dict stored at ``path`` (see :func:`state_dict_in`), read weights-only unless ``trusted``."""
    obj = (load_trusted(path, what, opt_in, safe_route) if trusted
           else read_weights(path, what, opt_in, safe_route))
    return state_dict_in(obj, path, what)


def load_into(model: Any, state: Mapping[str, Any], path: PathLike, arch: str) -> Any:
    """``model.load_state_dict(state, strict=True)`` with a mismatch as one line naming the fix."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        first = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        detail = first[1] if len(first) > 1 else (first[0] if first else "")
        plan = Path(path).parent / "model.prune.json"
        hint = ("these look like pruned weights: add --prune-plan %s" % plan if plan.is_file() and "size mismatch"
                in str(err) else "name the architecture the weights were trained with; weights of a pruned model "
                "also need --prune-plan model.prune.json from jetforge prune")
        raise ModelError("weights %s do not fit the %s architecture: %s" % (path, arch, detail[:240]),
                         hint=hint) from err
    return model


# ---------------------------------------------------------------------------------------- whole models
def load_model_file(path: PathLike, trusted: bool = False, opt_in: str = TRUST_FLAG) -> Tuple[Any, Dict[str, Any]]:
    """A whole model stored in a file, ``(module in eval mode, facts)``, only when ``trusted``.

    ``.pt2``: a ``torch.export`` archive (facts: ``input_shape`` of its example input).  Anything
    else: a pickled module (``torch.save(model)``).  Without ``trusted`` a pickled module is
    refused after a weights-only read (which also tells a damaged file and a state dict apart),
    and an archive is refused before torch opens it.
    """
    p = require_file(path, "model file")
    if p.suffix.lower() == ".pt2":
        return _load_export_archive(p, trusted, opt_in)
    try:
        obj = read_weights(p, "model file", opt_in)
    except PickledObjectsError:
        if not trusted:
            raise
        obj = load_trusted(p, "model file", opt_in)
    torch = require("torch", "reading PyTorch models")
    if not isinstance(obj, torch.nn.Module):
        kind = "a state dict" if isinstance(obj, Mapping) else "a %s" % type(obj).__name__
        raise ModelError("%s holds weights (%s), not a whole model" % (p, kind), hint=weights_route_hint(p))
    return obj.eval(), {"name": p.stem}


def weights_route_hint(path: Path) -> str:
    """How to load a weights file: the exact command line when jetforge prune's plan lies beside it."""
    plan = path.parent / "model.prune.json"
    if plan.is_file():
        try:
            from jetforge.compress.prune.plan import PrunePlan

            arch = PrunePlan.load(plan).meta.get("model") or "ARCH"
        except Exception:  # the hint is a convenience; a bad plan is reported when it is used
            arch = "ARCH"
        return "pass --model %s --prune-plan %s --weights %s" % (arch, plan, path)
    return "pass the architecture and the weights: --model ARCH --weights %s" % path


def _load_export_archive(path: Path, trusted: bool, opt_in: str) -> Tuple[Any, Dict[str, Any]]:
    try:
        with zipfile.ZipFile(str(path)) as z:
            is_archive = any(n.endswith("archive_format") for n in z.namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise ModelError("model file %s is damaged or not a torch.export archive (%s)" % (path, err),
                         hint="save it again with torch.export.save(torch.export.export(model, args), PATH)") from err
    if not is_archive:
        raise ModelError("model file %s is a zip file but not a torch.export archive" % path,
                         hint="save it with torch.export.save(torch.export.export(model, args), PATH)")
    if not trusted:
        raise PickledObjectsError(
            "%s is a torch.export archive: torch.export.load unpickles parts of it and evaluates expressions stored "
            "in it, so opening it can run code the file chooses; jetforge does not open these by default" % path,
            hint="%s; or, only for an archive you made yourself, add %s" % (SAFE_ROUTE, opt_in))
    torch = require("torch", "reading torch.export archives")
    log.warning("%s: opening a torch.export archive because of %s -- code it holds may run; do this only for "
                "archives you made yourself", path, opt_in)
    try:
        program = torch.export.load(str(path))
        module = _FrozenMode.wrap(program.module())
    except Exception as err:
        raise ModelError("cannot load torch.export archive %s: %s" % (path, _reason(err, str(err))),
                         hint="save it again with torch.export.save using this torch (%s)"
                              % torch.__version__.split("+")[0]) from err
    return module, _program_facts(program, path)


def _program_facts(program: Any, path: Path) -> Dict[str, Any]:
    """The input shape of the archive's example input, and a fixed batch for the ONNX export.

    jetforge's exporter traces the program's module, and the trace records the batch size of
    its example as a constant in reshapes (measured: a program exported with a dynamic batch
    axis gave an ONNX that fails at another batch), so the ONNX of an archive keeps one batch.
    """
    import torch

    facts: Dict[str, Any] = {"name": path.stem, "dynamic_batch": False}
    args = (program.example_inputs or ((), {}))[0]
    if len(args) == 1 and isinstance(args[0], torch.Tensor):
        facts["input_shape"] = tuple(int(d) for d in args[0].shape)
    return facts


class _FrozenMode:
    """An exported program's module, usable where an ``nn.Module`` is expected (export, bench).

    The graph was fixed in the mode it was exported in (export it from ``model.eval()``), and
    its module refuses ``eval()``/``train()``; the wrapper makes those calls change nothing.
    """

    @staticmethod
    def wrap(graph_module: Any) -> Any:
        import torch

        class ExportedProgramModule(torch.nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.program = inner
                self.training = False

            def train(self, mode: bool = True) -> "ExportedProgramModule":
                return self  # the program's mode was fixed when it was exported

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                return self.program(*args, **kwargs)

        return ExportedProgramModule(graph_module)


# ---------------------------------------------------------------------------------------- writing
def check_weights_only_loadable(path: PathLike, what: str = "checkpoint") -> None:
    """Refuse a file just written by ``torch.save`` that weights-only reading would reject.

    Called on the temporary file before it replaces the real one, so a checkpoint that could not
    be resumed without unpickling is never written; the scan is static (pickletools), cheap and
    uses torch's own allow-list.
    """
    torch = require("torch", "writing checkpoints")
    finder = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if finder is None:  # torch < 2.5: nothing to scan with; reading still refuses such a file clearly
        return
    unsafe = sorted(finder(str(path)))
    if unsafe:
        raise CompressError("the %s would hold pickled Python objects (%s), which jetforge does not read back"
                            % (what, ", ".join(unsafe[:3])),
                            hint="keep checkpoint contents to tensors, dicts, lists, strings and numbers "
                                 "(convert numpy values with float()/int(), paths with str())")


__all__ = ["PickledObjectsError", "SAFE_ROUTE", "TRAINING_FORMAT", "TRUST_FLAG", "check_weights_only_loadable",
           "explain_load_failure", "load_into", "load_model_file", "load_state_dict", "load_trusted",
           "read_weights", "state_dict_in", "weights_route_hint"]
