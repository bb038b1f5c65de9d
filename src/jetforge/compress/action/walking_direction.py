"""Train the walking-direction action model on vtest.avi with labels derived from real person tracks.

No pretrained action model and no labelled action video can be had offline (none is in the
PyPI or Debian packages that jetforge's assets come from), so the labels are *derived*, by a transparent rule, from
real pedestrian tracks:

1. OpenCV's HOG people detector (Dalal-Triggs) runs on every frame of vtest.avi (fixed
   camera, 768x576, 10 fps) and a greedy IoU tracker links the boxes into tracks.
2. Every window of ``window`` consecutive frames of a track (at most ``max_gap`` missed
   frames, filled by linear interpolation) gets a label from the track's own motion:
   least-squares slopes of the box centre x and the box bottom y over the window, times
   the window length, divided by the median box height, give the displacement (dx, dy)
   in body heights.  ``speed = hypot(dx, dy)``.

   * ``walking left`` / ``walking right``: speed >= ``moving_min`` and |dx| >= ``dominance`` * |dy|
     (sign of dx: left/right in the image);
   * ``no lateral motion``: speed < ``still_max``.  In vtest this is people standing *and* people
     walking straight toward or away from the camera (the elevated view foreshortens that motion
     to a few pixels per window; checked by eye on the crops), so the class means exactly "the
     person's box hardly moves in the image", not "standing";
   * anything else (slow drift, diagonal motion, the rare fast vertical walker) is *not labelled*
     and used neither for training nor for evaluation.

3. The model (:class:`jetforge.compress.models.action.ActionNet`) sees only pixels: the grey
   crops of a fixed region (the union of the window's boxes) over the window.  It learns to
   tell the direction of motion of the person in the crop from appearance and motion.
4. Train on the windows that end before ``split_frame``; evaluate on windows that start at or
   after ``split_frame + window`` (disjoint frames, later in the clip); report accuracy, the
   majority-class baseline, per-class recall and the confusion matrix.

Run: ``python -m jetforge.compress.action.walking_direction --recipe recipes/action_walking_direction.yaml
--video "$(jetforge assets path opencv_samples vtest.avi)"``.
"""

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.runtime.boxes import greedy_match, iou_matrix
from jetforge.runtime.hog import HogPeopleDetector

from jetforge.errors import CompressError, InputFileError
from jetforge.fileio import require_file, write_json_atomic

log = logging.getLogger(__name__)

LABELS = ["walking left", "walking right", "no lateral motion"]
STILL = "no lateral motion"


@dataclass
class LabelRule:
    """Thresholds of the label rule, in body heights moved over one window."""

    still_max: float = 0.12
    moving_min: float = 0.25
    dominance: float = 1.5


@dataclass
class HogOptions:
    win_stride: int = 8
    padding: int = 8
    scale: float = 1.05
    min_weight: float = 0.3  # SVM score of a kept detection
    track_iou: float = 0.3
    max_age: int = 3          # frames a track survives without a detection


@dataclass
class ActionRecipe:
    """Everything the training run depends on (recipes/action_walking_direction.yaml)."""

    name: str = "action_walking_direction"
    video: str = ""
    out_dir: str = "runs/action_walking_direction"
    window: int = 8
    stride: int = 2
    max_gap: int = 2
    split_frame: int = 560
    labels: List[str] = field(default_factory=lambda: list(LABELS))
    rule: LabelRule = field(default_factory=LabelRule)
    hog: HogOptions = field(default_factory=HogOptions)
    epochs: int = 25
    batch_size: int = 64
    lr: float = 0.003
    weight_decay: float = 0.0005
    seed: int = 0
    threads: int = 2
    mirror_augment: bool = True


# ------------------------------------------------------------------------------------------------
# Step 1: real person tracks
# ------------------------------------------------------------------------------------------------

def detect_people(video: Path, hog_opts: HogOptions, progress: bool = True) -> Tuple[List[np.ndarray], Dict[str, Any]]:
    """HOG people boxes (K, 5: x1, y1, x2, y2, score) for every frame of ``video``."""
    import cv2

    cap = cv2.VideoCapture(str(video))
    if not cap.isOpened():
        raise InputFileError("cannot decode %s" % video)
    # the people app's detector without its NMS and box tightening: every window HOG reports, as trained
    hog = HogPeopleDetector(scale=hog_opts.scale, win_stride=hog_opts.win_stride, padding=hog_opts.padding,
                            min_score=hog_opts.min_weight, nms_iou=None, tighten=False)
    out: List[np.ndarray] = []
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
    info = {"width": int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), "height": int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
            "fps": float(cap.get(cv2.CAP_PROP_FPS) or 0.0)}
    bar = _bar(total, "HOG people", progress)
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        found = hog(frame)
        out.append(np.concatenate([found.boxes, found.scores[:, None]], axis=1).astype(np.float32))
        if bar is not None:
            bar.update(1)
    cap.release()
    if bar is not None:
        bar.close()
    info["frames"] = len(out)
    return out, info


def link_tracks(detections: Sequence[np.ndarray], iou_min: float, max_age: int) -> List[Dict[int, np.ndarray]]:
    """Greedy IoU association: each track is {frame: box (4,)}.  Unmatched boxes start tracks."""
    tracks: List[Dict[int, np.ndarray]] = []
    active: List[int] = []
    for f, boxes in enumerate(detections):
        active = [t for t in active if f - max(tracks[t]) <= max_age]
        last = np.array([tracks[t][max(tracks[t])] for t in active]).reshape(-1, 4)
        iou = iou_matrix(last, boxes[:, :4])
        pairs, _, new = greedy_match(iou, iou_min)
        for i, j in pairs:
            tracks[active[i]][f] = boxes[j, :4].astype(np.float64)
        for j in new:
            tracks.append({f: boxes[j, :4].astype(np.float64)})
            active.append(len(tracks) - 1)
    return tracks


# ------------------------------------------------------------------------------------------------
# Step 2: windows and their labels
# ------------------------------------------------------------------------------------------------

def window_boxes(track: Dict[int, np.ndarray], start: int, window: int, max_gap: int) -> Optional[np.ndarray]:
    """(window, 4) boxes of ``track`` for frames start..start+window-1, gaps filled linearly; None if not covered."""
    frames = [f for f in range(start, start + window) if f in track]
    if not frames or frames[0] != start or frames[-1] != start + window - 1:
        return None
    if window - len(frames) > max_gap:
        return None
    known = np.array([track[f] for f in frames])
    t = np.arange(start, start + window)
    return np.stack([np.interp(t, frames, known[:, k]) for k in range(4)], axis=1)


def motion_of(boxes: np.ndarray) -> Tuple[float, float, float]:
    """(dx, dy, height): least-squares displacement of the box centre x and bottom y over the window, in pixels
    per window, and the median box height."""
    t = np.arange(len(boxes), dtype=np.float64)
    t -= t.mean()
    cx = (boxes[:, 0] + boxes[:, 2]) / 2.0
    by = boxes[:, 3]
    denom = float((t * t).sum())
    span = len(boxes) - 1
    dx = float((t * (cx - cx.mean())).sum() / denom) * span
    dy = float((t * (by - by.mean())).sum() / denom) * span
    return dx, dy, float(np.median(boxes[:, 3] - boxes[:, 1]))


def label_window(boxes: np.ndarray, rule: LabelRule) -> Optional[str]:
    """The label of one window of boxes by the documented rule, or None (not labelled)."""
    dx, dy, h = motion_of(boxes)
    if h <= 0:
        return None
    dx, dy = dx / h, dy / h
    speed = float(np.hypot(dx, dy))
    if speed < rule.still_max:
        return STILL
    if speed >= rule.moving_min and abs(dx) >= rule.dominance * abs(dy):
        return "walking right" if dx > 0 else "walking left"
    return None


@dataclass
class Window:
    track: int
    start: int
    label: str
    region: Tuple[int, int, int, int]


def make_windows(tracks: Sequence[Dict[int, np.ndarray]], recipe: ActionRecipe,
                 frame_wh: Tuple[int, int]) -> List[Window]:
    from jetforge.compress.models.action import window_region

    out: List[Window] = []
    for tid, track in enumerate(tracks):
        if len(track) < recipe.window:
            continue
        first, last = min(track), max(track)
        for start in range(first, last - recipe.window + 2, recipe.stride):
            boxes = window_boxes(track, start, recipe.window, recipe.max_gap)
            if boxes is None:
                continue
            label = label_window(boxes, recipe.rule)
            if label is None or label not in recipe.labels:
                continue
            out.append(Window(tid, start, label, window_region(boxes, frame_wh)))
    return out


def extract_clips(video: Path, windows: Sequence[Window], window: int, progress: bool = True) -> np.ndarray:
    """(N, window, CROP_H, CROP_W) uint8 grey crops for every window, in one pass over the video."""
    import cv2

    from jetforge.compress.models.action import CROP_H, CROP_W, crop_gray

    clips = np.zeros((len(windows), window, CROP_H, CROP_W), np.uint8)
    by_frame: Dict[int, List[Tuple[int, int]]] = {}
    for i, w in enumerate(windows):
        for k in range(window):
            by_frame.setdefault(w.start + k, []).append((i, k))
    cap = cv2.VideoCapture(str(video))
    f = 0
    last = max(by_frame) if by_frame else -1
    while f <= last:
        ok, frame = cap.read()
        if not ok:
            break
        if f in by_frame:
            gray = cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
            for i, k in by_frame[f]:
                clips[i, k] = crop_gray(gray, windows[i].region)
        f += 1
    cap.release()
    return clips


# ------------------------------------------------------------------------------------------------
# Step 3: training and evaluation
# ------------------------------------------------------------------------------------------------

MIRROR = {"walking left": "walking right", "walking right": "walking left"}


def train(recipe: ActionRecipe, clips: np.ndarray, y: np.ndarray, progress: bool = True) -> Any:
    import torch

    from jetforge.compress.models.action import ActionNet, normalize_clip

    torch.manual_seed(recipe.seed)
    rng = np.random.default_rng(recipe.seed)
    labels = recipe.labels
    x = normalize_clip(clips)
    y = y.astype(np.int64)
    if recipe.mirror_augment:
        mirror_map = np.array([labels.index(MIRROR.get(lab, lab)) for lab in labels])
        x = np.concatenate([x, x[..., ::-1]], axis=0)
        y = np.concatenate([y, mirror_map[y]], axis=0)
    x_t = torch.from_numpy(np.ascontiguousarray(x))
    y_t = torch.from_numpy(y)
    counts = np.bincount(y, minlength=len(labels)).astype(np.float64)
    weights = torch.tensor(np.where(counts > 0, counts.sum() / np.maximum(counts, 1) / len(labels), 0.0),
                           dtype=torch.float32)
    model = ActionNet(classes=len(labels), window=recipe.window)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    steps = recipe.epochs * int(np.ceil(len(y) / recipe.batch_size))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=recipe.lr, total_steps=max(1, steps))
    loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
    bar = _bar(recipe.epochs, "train", progress)
    for epoch in range(recipe.epochs):
        model.train()
        order = torch.from_numpy(rng.permutation(len(y)))
        total = 0.0
        for i in range(0, len(y), recipe.batch_size):
            idx = order[i:i + recipe.batch_size]
            xb = x_t[idx]
            # brightness/contrast jitter: the model must not key on a person's clothing brightness alone
            gain = torch.empty(len(idx), 1, 1, 1).uniform_(0.8, 1.2)
            bias = torch.empty(len(idx), 1, 1, 1).uniform_(-0.3, 0.3)
            loss = loss_fn(model(xb * gain + bias), y_t[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.item()) * len(idx)
        log.info("epoch %d: loss %.4f", epoch + 1, total / len(y))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return model.eval()


def evaluate(model: Any, clips: np.ndarray, y: np.ndarray, labels: Sequence[str],
             train_y: np.ndarray) -> Dict[str, Any]:
    import torch

    from jetforge.compress.models.action import normalize_clip

    with torch.no_grad():
        logits = model(torch.from_numpy(normalize_clip(clips))).numpy() if len(clips) else np.zeros((0, len(labels)))
    pred = logits.argmax(1)
    n = len(labels)
    confusion = np.zeros((n, n), np.int64)
    for t, p in zip(y, pred):
        confusion[t, p] += 1
    majority = int(np.bincount(train_y, minlength=n).argmax())
    support = confusion.sum(1)
    return {
        "windows": int(len(y)),
        "accuracy": float((pred == y).mean()) if len(y) else 0.0,
        "majority_class": labels[majority],
        "majority_baseline_accuracy": float((y == majority).mean()) if len(y) else 0.0,
        "balanced_accuracy": float(np.mean([confusion[i, i] / support[i] for i in range(n) if support[i]]))
        if len(y) else 0.0,
        "per_class_recall": {labels[i]: (float(confusion[i, i] / support[i]) if support[i] else None)
                             for i in range(n)},
        "support": {labels[i]: int(support[i]) for i in range(n)},
        "confusion": confusion.tolist(),
    }


def run_recipe(recipe: ActionRecipe, video: Optional[Path] = None, out: Optional[Path] = None,
               progress: bool = True) -> Dict[str, Any]:
    """Detect, track, label, train, evaluate and export; returns the report (also written as report.json)."""
    import torch

    from jetforge.compress.export import export_onnx
    from jetforge.compress.models.action import CROP_H, CROP_W, MARGIN, MEAN, STD

    t0 = time.perf_counter()
    video = require_file(video or recipe.video, "training video",
                         hint='pass --video "$(jetforge assets path opencv_samples vtest.avi)"')
    out_dir = Path(recipe.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = Path(out) if out else out_dir / (recipe.name + ".onnx")
    torch.set_num_threads(max(1, recipe.threads))

    cache = out_dir / "hog_detections.npz"
    detections = None
    if cache.is_file():
        data = np.load(str(cache), allow_pickle=False)
        if str(data["key"]) == _hog_key(video, recipe.hog):
            detections = [data["f%d" % i] for i in range(int(data["frames"]))]
            info = json.loads(str(data["info"]))
    if detections is None:
        detections, info = detect_people(video, recipe.hog, progress)
        np.savez_compressed(str(cache), key=_hog_key(video, recipe.hog), frames=len(detections),
                            info=json.dumps(info), **{"f%d" % i: d for i, d in enumerate(detections)})
    tracks = link_tracks(detections, recipe.hog.track_iou, recipe.hog.max_age)
    windows = make_windows(tracks, recipe, (info["width"], info["height"]))
    train_w = [w for w in windows if w.start + recipe.window <= recipe.split_frame]
    test_w = [w for w in windows if w.start >= recipe.split_frame + recipe.window]
    if not train_w or not test_w:
        raise CompressError("no labelled windows on one side of split_frame=%d (train %d, test %d)"
                            % (recipe.split_frame, len(train_w), len(test_w)))
    labels = recipe.labels
    clips = extract_clips(video, train_w + test_w, recipe.window, progress)
    y = np.array([labels.index(w.label) for w in train_w + test_w], np.int64)
    x_train, y_train = clips[:len(train_w)], y[:len(train_w)]
    x_test, y_test = clips[len(train_w):], y[len(train_w):]
    t_data = time.perf_counter() - t0

    model = train(recipe, x_train, y_train, progress)
    t_train = time.perf_counter() - t0 - t_data
    report = {
        "recipe": _recipe_dict(recipe),
        "video": {"name": video.name, "frames": info["frames"], "width": info["width"], "height": info["height"],
                  "fps": info["fps"]},
        "what_it_recognizes": "the direction of motion of one tracked person over %d frames (%.1f s at %g fps) "
                              "in a fixed-camera view like vtest.avi: %s" % (
                                  recipe.window, recipe.window / (info["fps"] or 10.0), info["fps"] or 10.0,
                                  ", ".join(labels)),
        "labels_from": "HOG person tracks on the same video, by the rule in jetforge.compress.action.walking_direction "
                       "(displacement of box centre x / box bottom y over the window, in body heights)",
        "tracks": len(tracks),
        "windows": {"labelled": len(windows), "train": len(train_w), "test": len(test_w),
                    "train_frames": [0, recipe.split_frame],
                    "test_frames": [recipe.split_frame + recipe.window, info["frames"]]},
        "train": evaluate(model, x_train, y_train, labels, y_train),
        "test": evaluate(model, x_test, y_test, labels, y_train),
        "seconds": {"data": round(t_data, 1), "train": round(t_train, 1)},
    }
    contract = {"window": recipe.window, "crop_height": CROP_H, "crop_width": CROP_W, "margin": MARGIN,
                "gray_mean": MEAN, "gray_std": STD, "color": "gray", "region": "union of the track's boxes over "
                "the window, scaled by margin, at aspect crop_width:crop_height, grey 128 outside the frame",
                "fps_trained": info["fps"], "stride_trained": recipe.stride}
    export_onnx(model, model_path, (1, recipe.window, CROP_H, CROP_W), task="action", model_name=recipe.name,
                labels=labels, input_name="clip", output_name="logits",
                extra={"clip": contract, "label_rule": asdict(recipe.rule), "evaluation": {
                    "test_accuracy": report["test"]["accuracy"],
                    "majority_baseline": report["test"]["majority_baseline_accuracy"],
                    "test_windows": report["test"]["windows"], "what": report["what_it_recognizes"]}},
                provenance={"recipe": recipe.name, "seed": recipe.seed, "video": video.name,
                            "trained_on_frames": [0, recipe.split_frame]})
    report["model"] = str(model_path)
    write_json_atomic(out_dir / "report.json", report)
    return report


def _hog_key(video: Path, opts: HogOptions) -> str:
    from jetforge.fileio import sha256_file

    return sha256_file(video)[:16] + json.dumps(asdict(opts), sort_keys=True)


def _recipe_dict(recipe: ActionRecipe) -> Dict[str, Any]:
    d = asdict(recipe)
    d.pop("video", None)
    return d


def _bar(total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total or None, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


def load_recipe(path: Optional[str], overrides: Sequence[str] = ()) -> ActionRecipe:
    from jetforge.config import load_config

    return load_config(ActionRecipe, path, list(overrides))


PROG = "python -m jetforge.compress.action.walking_direction"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The module's command line (:mod:`jetforge.entry`: a usage or recipe error is one line and exit 1; Ctrl-C and
    SIGTERM stop it with exit 130, leaving no half-written model: outputs are written atomically)."""
    from jetforge.entry import run_entry

    return run_entry(PROG, lambda: _main(argv))


def _main(argv: Optional[Sequence[str]]) -> int:
    from jetforge.entry import ArgumentParser

    parser = ArgumentParser(
        prog=PROG,
        description="Train the walking-direction action model on vtest.avi with labels derived from HOG tracks.",
        epilog='example:\n  python -m jetforge.compress.action.walking_direction '
               '--recipe recipes/action_walking_direction.yaml \\\n'
               '      --video "$(jetforge assets path opencv_samples vtest.avi)" --out action.onnx',
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", metavar="YAML", help="recipe file (default: built-in defaults)")
    parser.add_argument("--video", metavar="PATH", help="vtest.avi (overrides the recipe's video)")
    parser.add_argument("--out", metavar="ONNX", help="model file to write (default: OUT_DIR/NAME.onnx)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], dest="overrides",
                        help="override a recipe option, e.g. --set epochs=10")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(levelname).1s %(name)s: %(message)s")
    recipe = load_recipe(args.recipe, args.overrides)
    report = run_recipe(recipe, Path(args.video) if args.video else None, Path(args.out) if args.out else None,
                        progress=not args.quiet)
    test = report["test"]
    print("recognizes  %s" % report["what_it_recognizes"])
    print("windows     train %d, test %d (test frames %s)" % (report["windows"]["train"], report["windows"]["test"],
                                                                report["windows"]["test_frames"]))
    print("test        accuracy %.3f, balanced %.3f; majority class %r alone: %.3f"
          % (test["accuracy"], test["balanced_accuracy"], test["majority_class"], test["majority_baseline_accuracy"]))
    print("wrote       %s (+ .json sidecar), %s" % (report["model"], Path(recipe.out_dir) / "report.json"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
