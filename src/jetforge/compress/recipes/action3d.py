"""``kind: action3d``: the 3D MobileNetV2 action model (``recipes/action_mobilenet3d.yaml``;
:mod:`jetforge.compress.action.mobilenet3d_recipe`).  Train stage: person tracks -> labelled clips -> teacher ->
pruned, distilled student, then the recipe's int8 settings; INT8 stage: PTQ from per-track clips and QAT steps on
the teacher.pt and student.pt that the train stage left in ``out_dir``.  ``--data`` is the video (default: the
vtest.avi asset), checked before any track, clip or training work.
"""

from typing import Any, Dict, List, Optional, Tuple

from jetforge.compress.recipes.base import Recipe, Stage

TRAIN_KEYS = ("what_it_recognizes", "teacher", "student", "prune", "int8", "seconds", "files")
INT8_KEYS = ("what_it_recognizes", "student", "int8", "files")


def _config() -> type:
    from jetforge.compress.action.action3d import Action3DRecipe

    return Action3DRecipe


def _train(cfg: Any, data: Optional[str], progress: bool) -> Tuple[Any, bool]:
    from jetforge.compress.action import mobilenet3d_recipe as runner

    return runner.run_recipe(cfg, runner.recipe_video(data), progress=progress), True


def _int8_load(path: Optional[str], overrides: List[str], data: Optional[str], resolve: bool) -> Any:
    """The INT8 stage's recipe: the file and ``--set``s, with the settings that decided the trained models taken
    from the run in ``out_dir`` (:func:`~jetforge.compress.action.mobilenet3d_recipe.with_trained_settings`)."""
    from jetforge.config import load_config

    cfg = load_config(_config(), path, overrides)
    if not resolve:
        return cfg
    from jetforge.compress.action.mobilenet3d_recipe import with_trained_settings

    return with_trained_settings(cfg, overrides)


def _int8(cfg: Any, data: Optional[str], progress: bool) -> Tuple[Any, bool]:
    from jetforge.compress.action import mobilenet3d_recipe as runner

    return runner.run_int8_stage(cfg, runner.recipe_video(data), progress=progress), True


def _lines(report: Dict[str, Any], cfg: Any) -> List[str]:
    from jetforge.compress.action.mobilenet3d_recipe import summary_lines

    return summary_lines(report, cfg)


def _keys(keys: Tuple[str, ...]) -> Any:
    def pick(report: Dict[str, Any]) -> Dict[str, Any]:  # with the int8 stage on, its held-out accuracies too
        return {k: report[k] for k in keys if k in report}
    return pick


RECIPE = Recipe(
    name="action3d",
    summary="the 3D MobileNetV2 action model from person tracks; INT8 stage: PTQ from clips + QAT steps",
    data="the video the clips are cut from (default: the vtest.avi asset)",
    train=Stage(config=_config, run=_train, lines=_lines, json=_keys(TRAIN_KEYS)),
    int8=Stage(config=_config, run=_int8, lines=_lines, json=_keys(INT8_KEYS), load=_int8_load),
)
