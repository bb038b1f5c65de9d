"""``kind: detector``: the SSDLite-MobileNetV2 person detector pruned and distilled from the original on the training
segments of the labelled clips (``recipes/distill_ssdlite_person.yaml``; :mod:`jetforge.compress.distill.
detection_recipe`).  ``--data`` is the folder holding the clips' assets.  It has no INT8 stage of its own: its
``student.onnx`` is calibrated and evaluated (person AP of FP32 and INT8) by ``jetforge calibrate``.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

from jetforge.compress.recipes.base import Recipe, Stage
from jetforge.config import load_config


def _config() -> type:
    from jetforge.compress.distill.detection_recipe import DetectorDistillConfig

    return DetectorDistillConfig


def _load(path: Optional[str], overrides: Sequence[str], data: Optional[str], resolve: bool) -> Any:
    return load_config(_config(), path, list(overrides) + (["data.assets_root=%s" % data] if data else []))


def _run(cfg: Any, data: Optional[str], progress: bool) -> Tuple[Any, bool]:
    from jetforge.compress.distill import detection_recipe

    return detection_recipe.run_recipe(cfg), True


def _summary(result: Dict[str, Any]) -> Dict[str, Any]:
    summary = {k: result[k] for k in ("name", "device", "frames", "macs", "seconds", "files")}
    summary["steps_done"] = result["train"]["steps_done"]
    return summary


def _lines(result: Dict[str, Any], cfg: Any) -> List[str]:
    summary = _summary(result)
    macs = summary["macs"]
    if macs["teacher"] is None:  # a teacher model of its own (student.layout: yolov8): its MACs are not counted
        lines = ["%s: student distilled on %s, %d step(s) on %d training frames, %.1f M MACs"
                 % (cfg.name, summary["device"], summary["steps_done"], summary["frames"], macs["student"] / 1e6)]
        return lines + ["  %-11s%s" % (k, v) for k, v in summary["files"].items()]
    lines = ["%s: student distilled on %s, %d step(s) on %d training frames, %.1f M MACs (teacher %.1f M, "
             "%.2fx fewer)" % (cfg.name, summary["device"], summary["steps_done"], summary["frames"],
                               macs["student"] / 1e6, macs["teacher"] / 1e6, macs["teacher"] / macs["student"])]
    return lines + ["  %-11s%s" % (k, v) for k, v in summary["files"].items()]


RECIPE = Recipe(
    name="detector",
    summary="the SSDLite person detector, pruned and distilled from the original",
    data="the folder holding the labelled clips' assets",
    train=Stage(config=_config, run=_run, lines=_lines, json=_summary, load=_load),
    no_int8="calibrate its student.onnx with `jetforge calibrate student.onnx --data FRAMES --labels "
            "PERSON_BOXES.json` (person AP of FP32 and INT8)",
)
