"""The project's labelled people set (:mod:`jetforge.vision.person_labels`) as a COCO detection JSON with its frames.

:func:`export_person_coco` decodes the chosen split's labelled frames (pixels checked against the recorded hashes),
writes each as a lossless PNG (``images/<clip>/<frame>.png``, so the pixels read back are the decoded ones) and one
COCO JSON naming them: category 1 ``person``; a box ``x1, y1, x2, y2`` becomes ``bbox`` ``[x1, y1, x2 - x1, y2 - y1]``;
a ``difficult`` box is ``iscrowd: 1`` (COCO's way of saying "neither required nor counted"; jetforge's AP ignores
both alike); each image carries ``video_id`` (the clip) and ``frame_id`` so the block bootstrap groups neighbouring
frames as the person-label path does.  :func:`jetforge.vision.label_files.read_coco` reads it back to the same boxes,
flags and pixels.  numpy and OpenCV; Python 3.8.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from jetforge.errors import InputFileError
from jetforge.fileio import write_bytes_atomic, write_json_atomic
from jetforge.optional import require
from jetforge.vision.person_labels import load_person_labels

PathLike = Union[str, Path]


def person_coco(frames: List[Any], image_paths: List[str]) -> Dict[str, Any]:
    """The COCO JSON of labelled frames (with images) whose PNGs are at ``image_paths`` (relative to the JSON)."""
    images, annotations = [], []
    for image_id, (frame, file) in enumerate(zip(frames, image_paths), 1):
        h, w = frame.image.shape[:2]
        images.append({"id": image_id, "file_name": file, "width": int(w), "height": int(h),
                       "video_id": frame.clip, "frame_id": int(frame.index)})
        for box, difficult in zip(frame.boxes.tolist(), frame.difficult.tolist()):
            x1, y1, x2, y2 = (float(v) for v in box)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": 1,
                                "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1),
                                "iscrowd": int(bool(difficult))})
    return {"info": {"description": "jetforge labelled people set (vision/data/people_boxes.json)",
                     "box_format": "bbox is x, y, width, height in pixels; iscrowd 1 marks the set's difficult boxes"},
            "images": images, "annotations": annotations,
            "categories": [{"id": 1, "name": "person", "supercategory": "person"}]}


def export_person_coco(out_json: PathLike, split: Optional[str] = "heldout", assets_root: Optional[PathLike] = None,
                       labels: Optional[PathLike] = None) -> Path:
    """Write ``out_json`` and its PNG frames (``images/`` beside it); returns the JSON's path."""
    cv2 = require("cv2", "writing the people set's frames")
    if assets_root is None:
        from jetforge.assets import asset_dir

        assets_root = asset_dir("opencv_samples").parent
    frames = load_person_labels(split, assets_root=assets_root, path=labels)
    out = Path(out_json)
    paths = []
    for f in frames:
        rel = "images/%s/%06d.png" % (f.clip, f.index)
        ok, png = cv2.imencode(".png", f.image)
        if not ok:
            raise InputFileError("could not encode frame %d of %s as PNG" % (f.index, f.clip))
        write_bytes_atomic(out.parent / rel, png.tobytes())
        paths.append(rel)
    return write_json_atomic(out, person_coco(frames, paths))


__all__ = ["export_person_coco", "person_coco"]
