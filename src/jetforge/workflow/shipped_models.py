"""The models jetforge ships: compressed by its own recipes, measured, and usable by name.

Each shipped model is a folder ``assets/shipped/<name>/`` of package data: ``model.onnx`` with its sidecar,
the INT8 calibration cache (TensorRT <= 10 and DLA) and the Q/DQ ONNX (TensorRT >= 10 GPU and 11), and
``card.json`` -- what made it (recipe, command, commit, machine), the data it was trained on, its accuracy against
its teacher with 95 % intervals, its speed where it was executed, the estimator's latency where it was not, the
result files every number comes from, and what was never executed.  The card is the single source: ``jetforge models
show NAME`` prints it, ``docs/models/NAME.md`` is its rendering (a test keeps the two equal), and a test checks each
number against the result file it names.

A shipped name is accepted wherever a command takes a model file (:data:`MODEL_ARGUMENTS`): ``jetforge app people
--detector-model ssdlite-person-192``, ``bundle create ssdlite-person-192``, ``bench``, ``estimate``,
``calibrate``, ``build``, ``info``.  A path that exists always wins over a name, so a user's own file named like a shipped
model is never replaced.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.errors import ModelError, UnknownNameError
from jetforge.fileio import sha256_file
from jetforge.assets.shipped_files import SHIPPED_MODELS
from jetforge.jsonfile import read_json

SHIPPED_DIR = SHIPPED_MODELS
CARD = "card.json"
CARD_FORMAT = 1
#: the files a shipped folder may hold, by role (the card lists those present, with their SHA-256)
FILE_ROLES = ("onnx", "sidecar", "calib", "qdq", "qdq_sidecar")
#: command -> the argument attributes that take a model file (a shipped name is resolved to its ONNX)
MODEL_ARGUMENTS: Dict[str, Tuple[str, ...]] = {
    "app": ("model", "detector_model"), "bundle": ("model",), "bench": ("model",), "estimate": ("model",),
    "calibrate": ("model", "model_opt", "detector_model"), "build": ("model",), "dla-check": ("model",),
    "info": ("model",)}


@dataclass(frozen=True)
class ShippedModel:
    """One shipped model: its folder and its card (read and checked)."""

    name: str
    folder: Path
    card: Dict[str, Any]

    def file(self, role: str) -> Optional[Path]:
        entry = self.card["files"].get(role)
        return self.folder / entry["path"] if entry else None

    @property
    def onnx(self) -> Path:
        path = self.file("onnx")
        assert path is not None  # _check_card requires it
        return path

    def verify(self) -> List[str]:
        """Problems with the shipped files (missing, or content other than the card's hash); empty = intact."""
        problems = []
        for role, entry in sorted(self.card["files"].items()):
            path = self.folder / entry["path"]
            if not path.is_file():
                problems.append("%s: %s is missing" % (role, entry["path"]))
            elif sha256_file(path) != entry["sha256"]:
                problems.append("%s: %s differs from the card's sha256" % (role, entry["path"]))
        return problems


def _check_card(card: Any, where: Path) -> Dict[str, Any]:
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise ModelError("%s is not a format-%d model card" % (where, CARD_FORMAT),
                         hint="reinstall jetforge; shipped cards are written by benchmarks/shipped_models/finish.py")
    for key, kind in (("name", str), ("task", str), ("files", dict), ("made_by", dict), ("accuracy", dict),
                      ("speed", dict), ("not_executed", list), ("results", list)):
        if not isinstance(card.get(key), kind):
            raise ModelError("model card %s: %r must be a %s" % (where, key, kind.__name__))
    files = card["files"]
    if "onnx" not in files or any(role not in FILE_ROLES for role in files):
        raise ModelError("model card %s: files must name an onnx and only %s" % (where, ", ".join(FILE_ROLES)))
    for role, entry in files.items():
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or "/" in rel or "\\" in rel or rel.startswith("."):
            raise ModelError("model card %s: files.%s.path must be a plain file name in the model's folder"
                             % (where, role))
    return card


def shipped_models(root: Path = SHIPPED_DIR) -> List[ShippedModel]:
    """Every shipped model, by name."""
    found = []
    if root.is_dir():
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and (p / CARD).is_file()):
            card = _check_card(read_json(folder / CARD, "model card", error=ModelError), folder / CARD)
            if card["name"] != folder.name:
                raise ModelError("model card %s names %r, its folder is %r" % (folder / CARD, card["name"],
                                                                               folder.name))
            found.append(ShippedModel(folder.name, folder, card))
    return found


def shipped_model(name: str, root: Path = SHIPPED_DIR) -> ShippedModel:
    models = {m.name: m for m in shipped_models(root)}
    if name not in models:
        raise UnknownNameError("shipped model", name, sorted(models))
    return models[name]


def is_shipped_name(value: Any, root: Path = SHIPPED_DIR) -> bool:
    return isinstance(value, str) and "/" not in value and not Path(value).exists() and \
        (root / value / CARD).is_file()


def resolve_model_names(command: str, args: Any, root: Path = SHIPPED_DIR) -> List[str]:
    """Replace a shipped model's name with its ONNX in ``args`` (the attributes :data:`MODEL_ARGUMENTS` names for
    ``command``); returns a note per replacement.  A shipped model whose files fail their hash is refused."""
    notes = []
    for attr in MODEL_ARGUMENTS.get(command, ()):
        value = getattr(args, attr, None)
        if is_shipped_name(value, root):
            model = shipped_model(value, root)
            problems = model.verify()
            if problems:
                raise ModelError("shipped model %s is damaged: %s" % (value, "; ".join(problems)),
                                 hint="reinstall jetforge (pip install --force-reinstall jetforge)")
            setattr(args, attr, str(model.onnx))
            notes.append("model %s: %s" % (value, model.onnx))
            calib = model.file("calib")
            if command == "bundle" and attr == "model" and calib is not None and hasattr(args, "calib") \
                    and not args.calib:
                # a shipped model's cache goes with it unless the user gives another (--calib is repeatable)
                args.calib = [str(calib)] if isinstance(args.calib, list) else str(calib)
                notes.append("calibration cache of %s: %s" % (value, calib))
    return notes


# ------------------------------------------------------------------------------------------------ rendering
def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        return "%.*f" % (digits, value)
    return "-" if value is None else str(value)


def _interval(entry: Dict[str, Any], key: str) -> str:
    value, ci = entry.get(key), entry.get(key + "_ci95")
    if value is None:
        return "not measured"
    text = "%+.3f" % value if key.startswith("minus") else "%.3f" % value
    return text + (" [%+.3f, %+.3f]" % tuple(ci) if key.startswith("minus") and ci else
                   " [%.3f, %.3f]" % tuple(ci) if ci else "")


def summary_row(model: ShippedModel) -> List[str]:
    """``models list``'s row: name, task, input, MACs, accuracy, GPU and CPU speed-up, files."""
    card = model.card
    acc = card["accuracy"]
    gpu, cpu = card["speed"].get("gpu") or {}, card["speed"].get("cpu") or {}
    return [model.name, card["task"], card.get("input", "-"),
            "%.0f M" % (card["macs"] / 1e6) if card.get("macs") else "-",
            "%s %s" % (acc.get("metric_short", ""), _fmt(acc.get("value"))),
            "%sx" % _fmt(gpu.get("speedup_batch32"), 2) if gpu.get("speedup_batch32") else "not run",
            "%sx" % _fmt(cpu.get("speedup_batch1"), 2) if cpu.get("speedup_batch1") else "not run",
            ", ".join(sorted(card["files"]))]


SUMMARY_HEADER = ["name", "task", "input", "MACs", "accuracy", "GPU b32 vs teacher", "CPU b1 vs teacher", "files"]


def render_card(model: ShippedModel) -> str:
    """The card as Markdown: ``jetforge models show NAME`` and ``docs/models/NAME.md``."""
    card = model.card
    made, acc = card["made_by"], card["accuracy"]
    lines = ["# %s" % model.name, "", card.get("summary", ""), "",
             "| | |", "|---|---|",
             "| task | %s |" % card["task"], "| input | %s |" % card.get("input", "-"),
             "| MACs | %s |" % ("%.1f M (teacher %.1f M)" % (card["macs"] / 1e6, card["teacher_macs"] / 1e6)
                                if card.get("macs") and card.get("teacher_macs") else "-"),
             "| teacher | %s |" % card.get("teacher", "-"),
             "| made by | `%s` |" % made.get("command", "-"),
             "| recipe | %s |" % made.get("recipe", "-"), "| commit | %s |" % made.get("commit", "-"),
             "| trained on | %s (%s) |" % (made.get("device", "-"), made.get("date", "-")),
             "| training data | %s |" % card.get("training_data", "-"), "",
             "## Accuracy", "", "%s, %s." % (acc.get("metric", "-"), acc.get("evaluated_on", "-")), "",
             "| | value (95 % interval) |", "|---|---|",
             "| this model | %s |" % _interval(acc, "value"), "| teacher | %s |" % _interval(acc, "teacher"),
             "| this model minus teacher | %s |" % _interval(acc, "minus_teacher"),
             "| simulated INT8 (as TensorRT computes it) | %s |" % _interval(acc, "int8"), ""]
    lines += ["## Speed (executed)", "", "| where | batch | ms | teacher ms | speed-up |", "|---|---|---|---|---|"]
    for where in ("gpu", "cpu"):
        entry = card["speed"].get(where)
        if not entry:
            lines.append("| %s | - | not executed | | |" % where)
            continue
        for batch in entry.get("batches", []):
            b = entry["batch%d" % batch]
            lines.append("| %s (%s) | %d | %s | %s | %sx |" % (where.upper(), entry.get("device", "-"), batch,
                                                              _fmt(b["ms"]), _fmt(b["teacher_ms"]),
                                                              _fmt(b["teacher_ms"] / b["ms"], 2)))
    est = card.get("estimated") or {}
    if est:
        lines += ["", "## Estimated on Jetson (jetforge estimate; not executed: no board here)", "",
                  "| target | where | precision | batch 1 ms |", "|---|---|---|---|"]
        for row in est.get("rows", []):
            lines.append("| %s | %s | %s | %s |" % (row["target"], row["where"], row["precision"],
                                                   _fmt(row.get("ms")) if row.get("ms") is not None
                                                   else row.get("note", "-")))
        if est.get("command"):
            lines += ["", "Command: `%s`" % est["command"]]
    lines += ["", "## Not executed", ""] + ["- %s" % item for item in card["not_executed"]]
    lines += ["", "## Where the numbers come from", ""] + ["- `%s`" % r for r in card["results"]]
    files = ", ".join("`%s` (%s)" % (e["path"], role) for role, e in sorted(card["files"].items()))
    lines += ["", "Files: %s." % files, ""]
    return "\n".join(lines)


def models_table(models: Sequence[ShippedModel]) -> Tuple[List[str], List[List[str]]]:
    return SUMMARY_HEADER, [summary_row(m) for m in models]


__all__ = ["CARD", "MODEL_ARGUMENTS", "SHIPPED_DIR", "ShippedModel", "is_shipped_name", "models_table",
           "render_card", "resolve_model_names", "shipped_model", "shipped_models"]
