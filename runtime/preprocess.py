"""Moved to :mod:`jetforge.runtime.inputs.image` (the ``image`` input kind); this name stays while imports move."""

from jetforge.runtime.inputs.image import (COLORS, IMAGENET_TFLITE, IMAGENET_TORCHVISION, LAYOUTS,  # noqa: F401
                                           RESIZE_MODES, FusedImage, Preprocess, ResizePlan, known_presets)
