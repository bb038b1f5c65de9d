"""Does the action app's walking-direction model work on the CNN's person tracks?  Its accuracy on the held-out part
of vtest.avi with tracks from HOG (what it was trained on) and from the SSDLite CNN, by the recipe's own rule.

    .venv/bin/python benchmarks/action_track_source.py        # -> results/action_track_source.json

The bundled model (``apps/data/action_walking_direction.onnx``) was trained by ``recipes/action_walking_direction.yaml``
on windows labelled from HOG tracks of frames 0-559 (``jetforge.compress.action.walking_direction``: link_tracks,
make_windows and its displacement rule).  Here the same linking, windows, rule and held-out split (windows starting
at frame >= 568) are built once from HOG's detections (as in training) and once from the CNN's (scores >= 0.5, and
>= 0.3), and the model's top-1 is compared with each window's rule label.  Detections start at frame 540 so tracks
have a run-in before the first held-out window.  The window sets differ (other tracks give other windows): each
accuracy is the model on the windows that detector would give it.  Needs torch (the recipe's clip normalisation).
"""

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIRST_FRAME = 540


def detections(kind: str, frames: List[np.ndarray], threshold: float = 0.0) -> List[np.ndarray]:
    """(K, 5) x1, y1, x2, y2, score per frame."""
    from tqdm import tqdm

    if kind == "hog":  # as the recipe's detect_people: no NMS, no tightening, SVM margin >= 0.3
        from jetforge.runtime.hog import HogPeopleDetector

        detector: Any = HogPeopleDetector(scale=1.05, min_score=0.3, nms_iou=None, tighten=False)
    else:
        from jetforge.apps.tasks.detectors.ssd import SsdPeopleDetector
        from jetforge.cli.model_refs import ensure_person_detector

        detector = SsdPeopleDetector(ensure_person_detector()[0], score_threshold=threshold - 1e-6)
    out = []
    for image in tqdm(frames, desc=kind, leave=False):
        d = detector(image)
        out.append(np.concatenate([d.boxes, d.scores[:, None]], axis=1).astype(np.float32))
    return out


def accuracy_on(dets: List[np.ndarray], video: Path) -> Dict[str, Any]:
    from jetforge.apps.tasks.action import WALKING_DIRECTION_MODEL as DEFAULT_MODEL  # the model this script is about
    from jetforge.compress.action.walking_direction import ActionRecipe, extract_clips, link_tracks, make_windows
    from jetforge.compress.models.action import normalize_clip
    from jetforge.runtime.session import open_session

    recipe = ActionRecipe()
    padded = [np.zeros((0, 5), np.float32)] * FIRST_FRAME + dets
    tracks = link_tracks(padded, recipe.hog.track_iou, recipe.hog.max_age)
    windows = make_windows(tracks, recipe, (768, 576))
    held_out = [w for w in windows if w.start >= recipe.split_frame + recipe.window]
    clips = extract_clips(video, held_out, recipe.window, progress=False)
    truth = np.array([recipe.labels.index(w.label) for w in held_out])
    with open_session(DEFAULT_MODEL) as session:
        name, out = session.inputs[0].name, session.outputs[0].name
        logits = np.concatenate([session.infer({name: normalize_clip(clips[i:i + 32])})[out]
                                 for i in range(0, len(clips), 32)])
    pred = logits.argmax(1)
    return {"windows": len(held_out), "accuracy": float((pred == truth).mean()),
            "support": {label: int((truth == i).sum()) for i, label in enumerate(recipe.labels)},
            "per_class_recall": {label: float((pred[truth == i] == i).mean()) if (truth == i).any() else None
                                 for i, label in enumerate(recipe.labels)}}


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "action_track_source.json"))
    args = parser.parse_args(argv)
    import cv2

    from jetforge.apps.pipeline import machine_info
    from jetforge.assets import asset_path
    from jetforge.fileio import write_json_atomic

    video = asset_path("opencv_samples", "vtest.avi")
    cap = cv2.VideoCapture(str(video))
    frames, index = [], 0
    while True:
        ok, image = cap.read()
        if not ok:
            break
        if index >= FIRST_FRAME:
            frames.append(image)
        index += 1
    cap.release()
    result: Dict[str, Any] = {"machine": machine_info(), "first_frame": FIRST_FRAME, "runs": {}}
    for name, kind, threshold in (("hog (as trained)", "hog", 0.0), ("cnn scores >= 0.5", "ssd", 0.5),
                                  ("cnn scores >= 0.3", "ssd", 0.3)):
        t0 = time.perf_counter()
        run = accuracy_on(detections(kind, frames, threshold), video)
        run["seconds"] = round(time.perf_counter() - t0, 1)
        result["runs"][name] = run
        print("%-20s %4d held-out windows  accuracy %.3f  %s" % (name, run["windows"], run["accuracy"],
                                                                 run["support"]))
    write_json_atomic(args.out, result)
    print("-> %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
