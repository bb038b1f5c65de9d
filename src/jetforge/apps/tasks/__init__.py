"""The video apps (``jetforge app NAME``), one module per task: people (detection + tracking + counting),
detect (the same for any detector, per class), classification, faces, actions; their registry :data:`TASKS`.

Adding an app: a module here with a :class:`~jetforge.apps.pipeline.Task` subclass and an
:class:`~jetforge.apps.tasks.base.App` (its options and how it builds the task), and one line below.
The registry holds ``"module:Class"`` strings, so listing the apps imports none of them.
"""

from typing import Any

from jetforge.registry import Registry

TASKS: Registry[Any] = Registry("app")
TASKS.add_lazy("people", "jetforge.apps.tasks.people:PeopleApp",
               "detect, track and count people: line crossings, zone occupancy (SSDLite-MobileNetV2 CNN or OpenCV HOG)")
TASKS.add_lazy("detect", "jetforge.apps.tasks.detect:DetectApp",
               "any detector ONNX (YOLO, SSD, EfficientNMS, torchvision layouts): track and count per class")
TASKS.add_lazy("classify", "jetforge.apps.tasks.classify:ClassifyApp",
               "ImageNet classification of every frame with a real pretrained model, top-k overlay")
TASKS.add_lazy("faces", "jetforge.apps.tasks.faces:FacesApp",
               "detect and track faces with MTCNN (real facenet-pytorch weights), optional privacy blur")
TASKS.add_lazy("action", "jetforge.apps.tasks.action:ActionApp",
               "walking-direction recognition per tracked person (clip model over sliding windows, top-k over time)")


def load_app(name: str) -> Any:
    """A new instance of the app registered as ``name`` (unknown names: did-you-mean)."""
    return TASKS.get(name)()


__all__ = ["TASKS", "load_app"]
