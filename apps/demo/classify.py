"""Moved to :mod:`jetforge.apps.tasks.classify` (the classify app); kept so that old imports work."""

from jetforge.apps.tasks.classify import (ClassifyHead, ClassifyTask, Prediction, draw_overlay,  # noqa: F401
                                          resolve_model_contract, run_classify, softmax)

__all__ = ["ClassifyHead", "ClassifyTask", "Prediction", "draw_overlay", "resolve_model_contract", "run_classify",
           "softmax"]
