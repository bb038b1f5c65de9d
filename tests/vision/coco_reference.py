"""pycocotools as an independent reference for jetforge.vision.detection_metrics (never a project dependency).

pycocotools is used from this interpreter if it imports, else from the interpreter named by
``$PYCOCOTOOLS_PYTHON`` (e.g. a throwaway venv: ``python -m venv /tmp/coco && /tmp/coco/bin/pip
install pycocotools numpy``), through a subprocess and JSON; :func:`available` says whether either works.

`difficult` boxes become COCO *ignored* boxes: ``iscrowd=0`` and an ``area`` of -1, outside every
area range, which COCOeval ignores exactly as detection_metrics ignores difficult boxes (ignored
boxes keep the plain IoU and are matched at most once; ``iscrowd=1`` would change both).
"""

import json
import os
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

SCRIPT = r"""
import json, sys, contextlib, io
import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

def run(data):
    coco = COCO()
    coco.dataset = data["gt"]
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        dt = coco.loadRes(data["dt"]) if data["dt"] else COCO()
        ev = COCOeval(coco, dt, "bbox")
        ev.params.imgIds = sorted(img["id"] for img in data["gt"]["images"])
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    prec = ev.eval["precision"][:, :, 0, 0, 2]  # T x R, category 0, area 'all', maxDets 100
    per_t = [float(np.mean(p)) if np.all(p > -1) else float("nan") for p in prec]
    return {"per_threshold": per_t, "stats0": float(ev.stats[0]), "stats1": float(ev.stats[1])}

print(json.dumps(run(json.load(sys.stdin))))
"""


def _python() -> Optional[List[str]]:
    try:
        import pycocotools.cocoeval  # noqa: F401

        return [sys.executable]
    except ImportError:
        pass
    other = os.environ.get("PYCOCOTOOLS_PYTHON")
    if other and os.path.exists(other):
        probe = subprocess.run([other, "-c", "import pycocotools.cocoeval"], capture_output=True)
        if probe.returncode == 0:
            return [other]
    return None


def available() -> bool:
    return _python() is not None


def to_coco(gt_boxes: Sequence[np.ndarray], gt_difficult: Sequence[np.ndarray], det_boxes: Sequence[np.ndarray],
            det_scores: Sequence[np.ndarray]) -> Dict[str, object]:
    images, anns, dets = [], [], []
    for f, (gb, gd, db, ds) in enumerate(zip(gt_boxes, gt_difficult, det_boxes, det_scores)):
        images.append({"id": f + 1, "width": 1000, "height": 1000})
        for b, d in zip(np.asarray(gb, float).reshape(-1, 4), np.asarray(gd, bool).reshape(-1)):
            w, h = b[2] - b[0], b[3] - b[1]
            anns.append({"id": len(anns) + 1, "image_id": f + 1, "category_id": 1, "iscrowd": 0,
                         "bbox": [float(b[0]), float(b[1]), float(w), float(h)],
                         "area": -1.0 if d else float(w * h)})
        for b, s in zip(np.asarray(db, float).reshape(-1, 4), np.asarray(ds, float).reshape(-1)):
            dets.append({"image_id": f + 1, "category_id": 1, "score": float(s),
                         "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]})
    return {"gt": {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "person"}]}, "dt": dets}


def coco_ap(gt_boxes, gt_difficult, det_boxes, det_scores) -> Dict[str, object]:
    """pycocotools' AP per IoU threshold (0.50..0.95) and its stats[0] (AP@[.5:.95]) and stats[1] (AP@0.5)."""
    python = _python()
    if python is None:
        raise RuntimeError("pycocotools is not available")
    data = json.dumps(to_coco(gt_boxes, gt_difficult, det_boxes, det_scores))
    done = subprocess.run(python + ["-c", SCRIPT], input=data, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError("pycocotools failed: %s" % done.stderr[-2000:])
    return json.loads(done.stdout)
