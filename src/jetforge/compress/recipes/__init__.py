"""The training recipes: one registry of recipe kinds, and one way to run a recipe's stage.

A recipe file (``recipes/*.yaml``) names its kind with a ``kind:`` key (none: ``classifier``).  Each kind is one
entry of :data:`RECIPES`, a :class:`~jetforge.compress.recipes.base.Recipe`: its summary, what ``--data`` means for
it, and its stages -- ``train`` (what ``jetforge distill`` runs) and, where the kind has one, ``int8`` (what
``jetforge qat`` runs) -- each with its config class, its run, its printed summary and its JSON.

* ``classifier``: train = distillation or fine-tuning (``DistillConfig``); INT8 = QAT -> Q/DQ ONNX + DLA cache
  (``QatConfig``);
* ``detector``: train = the SSDLite person detector pruned and distilled (``DetectorDistillConfig``); no INT8
  stage (``jetforge calibrate`` its student.onnx);
* ``action3d``: train = tracks -> clips -> teacher -> pruned, distilled student (``Action3DRecipe``); INT8 = PTQ
  from clips and QAT steps on that run's models.

:func:`~jetforge.compress.recipes.base.run_recipe` is the one function that runs a stage: ``jetforge distill`` /
``jetforge qat`` call it, and so does the module entry ``python -m jetforge.compress.recipes RECIPE.yaml`` (what
``torchrun --nproc_per_node=N -m jetforge.compress.recipes RECIPE.yaml`` starts on every rank;
``python -m jetforge.compress.distill`` is the same entry under its older name).

Adding a recipe kind: a module with a ``RECIPE`` (a :class:`~jetforge.compress.recipes.base.Recipe`) and one
``RECIPES.add_lazy`` line here; ``jetforge distill --help`` and the kind check list it from the registry.
"""

from jetforge.registry import Registry

RECIPES: Registry = Registry("recipe kind")
RECIPES.add_lazy("classifier", "jetforge.compress.recipes.classifier:RECIPE",
                 "an image classifier distilled from a teacher (or fine-tuned); INT8 stage: QAT")
RECIPES.add_lazy("detector", "jetforge.compress.recipes.detector:RECIPE",
                 "the SSDLite person detector, pruned and distilled from the original")
RECIPES.add_lazy("action3d", "jetforge.compress.recipes.action3d:RECIPE",
                 "the 3D MobileNetV2 action model from person tracks; INT8 stage: PTQ from clips + QAT steps")

__all__ = ["RECIPES"]
