"""Knowledge distillation: logit (KL with temperature) and feature (adapters) losses, frozen teacher, recipes.

>>> from jetforge.compress.distill import DistillConfig, distill          # doctest: +SKIP
>>> from jetforge.config import load_config
>>> result = distill(load_config(DistillConfig, "recipes/distill_fashion_mnist.yaml"))
"""

from jetforge.compress.distill.distill_model import DistillConfig, DistillResult, LossConfig, distill
from jetforge.compress.distill.losses import DistillModule, FeaturePair, kd_loss

__all__ = ["DistillConfig", "DistillModule", "DistillResult", "FeaturePair", "LossConfig", "distill", "kd_loss"]
