"""``jetforge demo --compare``: the person detector port beside the shipped compressed detectors.

The models are the files users get: the port exported from its verified asset (the people app's default detector)
and every shipped person detector (:mod:`jetforge.workflow.shipped_models`); the numbers are
:func:`jetforge.workflow.compare_detectors.compare_person_detectors`'s, measured now on this machine.
"""

import argparse
import logging
from pathlib import Path
from typing import Dict

from jetforge.errors import ConfigError
from jetforge.fileio import write_json_atomic
from jetforge.table import format_table
from jetforge.workflow.compare_detectors import compare_person_detectors, comparison_table
from jetforge.workflow.model_refs import ensure_person_detector
from jetforge.workflow.shipped_models import shipped_models

log = logging.getLogger(__name__)
PORT = "ssdlite-person (port)"


def person_detectors() -> Dict[str, Path]:
    """The port first (the reference), then every shipped person detector."""
    port, _ = ensure_person_detector()
    models = {PORT: Path(port)}
    for model in shipped_models():
        if model.card["task"].startswith("detect") and "person" in model.card["task"]:
            problems = model.verify()
            if problems:
                raise ConfigError("shipped model %s is damaged: %s" % (model.name, "; ".join(problems)),
                                  hint="reinstall jetforge")
            models[model.name] = model.onnx
    if len(models) < 2:
        raise ConfigError("no shipped person detector to compare with the port",
                          hint="`jetforge models list` shows what this install ships")
    return models


def run_compare(args: argparse.Namespace) -> int:
    quiet = bool(getattr(args, "quiet", False))
    result = compare_person_detectors(person_detectors(), progress=not quiet)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "compare.json", result)
    print("person detectors on %d held-out labelled frames (%s), as the people app runs them:"
          % (result["frames"], ", ".join(result["clips"])))
    print(format_table(*comparison_table(result)))
    print("AP intervals: paired bootstrap over blocks of %d consecutive frames; speed: %s, this machine."
          % (result["block_frames"], result["speed"]))
    print("written: %s" % (out / "compare.json"))
    return 0
