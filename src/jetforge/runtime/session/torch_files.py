"""What a ``.pt``/``.pth``/``.pt2`` file holds, told from its bytes without running anything in it.

Four different things share these suffixes: a state dict (weights only: ``torch.save(model.state_dict())``, what
``jetforge prune`` writes as ``pruned.pt``), a pickled module (``torch.save(model)``: classes named by the pickle,
code runs when it is loaded), a TorchScript program (``torch.jit.save``) and a ``torch.export`` archive (``.pt2``).
Only the last two are programs a session can run; a state dict has no architecture.  ``bench pruned.pt`` called
a state dict "a TorchScript program" and, with ``--trust-pickle``, passed on torch's "checkpoint corrupted": the
session now says which of the four a file is and what to pass instead.

The classification reads the zip directory and the pickle's opcodes (:mod:`pickletools` lists the classes a pickle
names without importing or calling any of them), so it needs neither torch nor trust.
"""

import io
import pickletools
import zipfile
from pathlib import Path
from typing import List, Tuple

STATE_DICT = "a state dict"
PICKLED_MODULE = "a pickled module"
TORCHSCRIPT = "a TorchScript program"
EXPORT_ARCHIVE = "a torch.export archive"
UNKNOWN = "not a file PyTorch wrote"

# What the pickle of a plain state dict (or any dict of tensors) names: the mapping and tensor rebuilding.
_WEIGHTS_GLOBALS = ("collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_parameter",
                    "torch._utils._rebuild_tensor", "torch._utils._rebuild_parameter_with_state", "torch.Size",
                    "torch._tensor._rebuild_from_type_v2", "torch.device", "builtins.set", "builtins.tuple",
                    "__builtin__.set", "__builtin__.tuple")
_MAX_PICKLE_BYTES = 64 << 20  # data.pkl of a state dict is small (the tensors are separate zip members)


def _pickle_globals(data: bytes, pickles: int = 1) -> List[str]:
    """``module.name`` of every class or function the first ``pickles`` pickles in ``data`` refer to (GLOBAL and
    STACK_GLOBAL), read as opcodes: nothing is imported or called."""
    found: List[str] = []
    strings: List[str] = []
    stream = io.BytesIO(data)
    try:
        for _ in range(pickles):
            if stream.tell() >= len(data):
                break
            for op, arg, _ in pickletools.genops(stream):
                if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                    strings.append(str(arg))
                elif op.name == "GLOBAL":
                    found.append(str(arg).replace(" ", "."))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.append("%s.%s" % (strings[-2], strings[-1]))
    except Exception:  # a cut or garbled pickle, or raw storage bytes after the pickles: what was read so far
        pass
    return found


def _is_weights_global(name: str) -> bool:
    return name in _WEIGHTS_GLOBALS or (name.startswith("torch.") and name.endswith("Storage"))


def torch_file_kind(path: Path) -> Tuple[str, List[str]]:
    """(what ``path`` holds: one of the constants above, the classes a pickled object names)."""
    try:
        if not zipfile.is_zipfile(str(path)):  # torch.save's legacy format: magic, protocol, system, object pickles
            with open(str(path), "rb") as f:
                head = f.read(_MAX_PICKLE_BYTES)
            if head[:1] != b"\x80":
                return UNKNOWN, []
            named = _pickle_globals(head, pickles=4)
            others = sorted({n for n in named if not _is_weights_global(n)})
            return (PICKLED_MODULE if others else STATE_DICT), others
        with zipfile.ZipFile(str(path)) as z:
            names = z.namelist()
            if any(n == "archive_format" or n.endswith("/archive_format") for n in names):
                return EXPORT_ARCHIVE, []
            if any(n.endswith("/constants.pkl") for n in names) and any("/code/" in n for n in names):
                return TORCHSCRIPT, []
            data = [n for n in names if n.endswith("data.pkl")]
            if not data or z.getinfo(data[0]).file_size > _MAX_PICKLE_BYTES:
                return UNKNOWN, []
            named = _pickle_globals(z.read(data[0]))
    except (OSError, zipfile.BadZipFile, ValueError):
        return UNKNOWN, []
    others = sorted({n for n in named if not _is_weights_global(n)})
    return (PICKLED_MODULE if others else STATE_DICT), others


def not_a_program(path: Path, kind: str, classes: List[str]) -> Tuple[str, str]:
    """(message, fix) for a file a session cannot run as a program: a state dict or a pickled module."""
    beside = [p for p in (path.with_name("model.onnx"), path.with_suffix(".onnx")) if p.is_file()]
    onnx_route = "bench %s (the ONNX written beside it)" % beside[0] if beside else ""
    if kind == STATE_DICT:
        plan = path.with_name("model.prune.json")
        export = ("jetforge export --model ARCH%s --weights %s --out model.onnx"
                  % (" --prune-plan %s" % plan if plan.is_file() else "", path))
        return ("%s is a state dict (weights only, no architecture): there is no model in it to run" % path.name,
                "%s%s, then bench that" % (onnx_route + ", or " if onnx_route else "", export))
    shown = ", ".join(classes[:3]) + (" ..." if len(classes) > 3 else "")
    return ("%s is a pickled module (torch.save(model); it names %s), not a TorchScript program: loading it runs "
            "code stored in the file, and bench runs TorchScript, torch.export or ONNX files" % (path.name, shown),
            "%sfor a file you made yourself: jetforge export --model %s --trust-pickle --out model.onnx, then bench "
            "that" % (onnx_route + ", or " if onnx_route else "", path))


__all__ = ["EXPORT_ARCHIVE", "PICKLED_MODULE", "STATE_DICT", "TORCHSCRIPT", "UNKNOWN", "not_a_program",
           "torch_file_kind"]
