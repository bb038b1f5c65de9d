"""Still photos (a folder of images) in the people and detect apps: each image's detections, counted at once.

Why: a track needs ``min_hits`` detections in consecutive frames before it counts, and unrelated photos never
give a second one, so a folder of photos used to show and count nobody.  A frame that names its image file
(:attr:`~jetforge.apps.video.sources.base.Frame.name`, set by the image-folder source only) is a photo: its
detections at or above the tracker's ``new_track`` score (the score at which a video would start a track) are
the people (in the detect app: the objects, per class) of that photo, drawn with their scores; the tracker,
lines and zones are not touched (video keeps tracking).  The per-image annotated JPEGs are written by the app's outputs
(:class:`~jetforge.apps.video.sinks.images.ImageFilesSink`, ``images/`` in ``--out``).
"""

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from jetforge.apps.pipeline.stages import draw_label
from jetforge.vision.detections import Detections

PHOTO_COLOUR = (60, 220, 60)


def is_photo(frame: Any) -> bool:
    """Whether ``frame`` is a still image of a folder (it names its file) rather than a video frame."""
    return bool(getattr(frame, "name", ""))


def photo_event(dets: Optional[Detections], confidence: Any, threshold: float) -> Dict[str, Any]:
    """The per-frame event of one photo: its people (detections with ``confidence(scores) >= threshold``)."""
    people: List[Dict[str, Any]] = []
    if dets is not None and len(dets.boxes):
        conf = np.asarray(confidence(dets.scores), dtype=np.float64)
        for box, score, c in zip(dets.boxes, dets.scores, conf):
            if c >= threshold:
                people.append({"box": [round(float(v), 1) for v in box], "score": round(float(score), 3),
                               "confidence": round(float(c), 3)})
    return {"photo": True, "detections": dets.to_list() if dets is not None else None, "tracks": [],
            "people": len(people), "people_boxes": people}


def photo_objects_event(dets: Optional[Detections], names: Sequence[str], confidence: Any,
                        threshold: float) -> Dict[str, Any]:
    """The per-frame event of one photo in the detect app: its objects (detections with ``confidence(scores) >=
    threshold``; ``names``: each detection's class) counted per class, as :func:`photo_event` counts people."""
    boxes: List[Dict[str, Any]] = []
    objects: Dict[str, int] = {}
    if dets is not None and len(dets.boxes):
        conf = np.asarray(confidence(dets.scores), dtype=np.float64)
        for box, score, c, name in zip(dets.boxes, dets.scores, conf, names):
            if c >= threshold:
                boxes.append({"class": name, "box": [round(float(v), 1) for v in box], "score": round(float(score), 3),
                              "confidence": round(float(c), 3)})
                objects[name] = objects.get(name, 0) + 1
    rows = None if dets is None else [row + [n] for row, n in zip(dets.to_list(), names)]
    return {"photo": True, "detections": rows, "tracks": [], "objects": objects, "boxes": boxes}


def draw_photo(image: np.ndarray, event: Dict[str, Any]) -> None:
    """Each counted person's (object's) box, class and confidence, and the photo's count at the top left."""
    import cv2

    found = event.get("people_boxes", event.get("boxes", []))
    for obj in found:
        x1, y1, x2, y2 = [int(round(v)) for v in obj["box"]]
        cv2.rectangle(image, (x1, y1), (x2, y2), PHOTO_COLOUR, 2)
        draw_label(image, "%s %.2f" % (obj.get("class", "person"), obj["confidence"]), (x1, max(12, y1 - 4)),
                   PHOTO_COLOUR, 0.5)
    if "objects" in event:
        head = "  ".join("%s %d" % kv for kv in sorted(event["objects"].items())) or "nothing found"
    else:
        head = "people %d" % event.get("people", 0)
    draw_label(image, head, (8, 21), (255, 255, 255), 0.6)


__all__ = ["draw_photo", "is_photo", "photo_event", "photo_objects_event"]
