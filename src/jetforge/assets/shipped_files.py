"""Where the models jetforge ships live: package data, ``assets/shipped/<name>/`` (made by the recipes, measured).

This module only knows the folder, so every layer may find a shipped model's files (the action app's default model
is one); what a folder holds and how its card is checked is :mod:`jetforge.workflow.shipped_models`.
"""

from pathlib import Path

SHIPPED_MODELS = Path(__file__).resolve().parent / "shipped"


def shipped_model_file(name: str, filename: str = "model.onnx") -> Path:
    """``assets/shipped/<name>/<filename>`` (not checked here: :func:`jetforge.workflow.shipped_models.find_shipped`
    verifies hashes and cards)."""
    return SHIPPED_MODELS / name / filename


__all__ = ["SHIPPED_MODELS", "shipped_model_file"]
