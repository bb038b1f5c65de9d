"""Distil a lower-resolution SSDLite person student on the CPU, with the teacher's work and the frozen stem cached.

The GPU route (``detector_student_gpu.py``: views cut on the fly, the teacher run every step) needs an
H200 for minutes; on a shared 2-core CPU the same schedule would take days.  This script makes the
CPU run affordable with two caches built once:

1. **views**: ``--views`` random views of the training-segment frames (crops, mirrors, jitter; the
   recipe's view settings), each cut once and resized from the frame to both input sizes
   (:meth:`~jetforge.compress.distill.detection_train.FrameBank.sample_sizes`);
2. **teacher targets**: the teacher scores each view at 300 px *once*; its decoded boxes are re-encoded
   on the student's anchors (:class:`~jetforge.compress.distill.detection_crossgrid.CrossGridTargets`)
   and kept, ``(A, 8)`` per view;
3. **frozen stem**: the student's layers up to block ``--freeze-through`` (the high-resolution maps,
   where a CPU spends most of a backward pass) keep the weights they start from (a 300 px student's:
   the body is resolution-agnostic) and run once per view; their output is cached in FP16.

Training then runs only the rest of the student (later blocks, extra layers, predictors; batch norms
in training mode) on the cached features for ``--minutes``, with the recipe's loss
(:func:`~jetforge.compress.distill.detection_losses.detection_distill_loss`) and its warm-up + cosine
schedule following the clock.  It trades the GPU route's fresh views every step and a fully trained
stem for being runnable here; the result says so.  Writes ``student_<name>.pt`` (a full state dict,
``detector_from_state`` rebuilds it at ``--size``) and ``detector_student_lowres_cpu.json`` (history,
timings, settings, the machine and its load) to ``--out``; ``benchmarks/detector_students/detector_student.py --gpu-dir
<out> --students <name>`` measures it (it reads the size from the JSON).

    nice -n 5 .venv/bin/python benchmarks/detector_students/detector_student_lowres_cpu.py --name jf192 --size 192 \\
        --init build/detector_student_cpu/trained/student_jetforge.pt --minutes 45
    .venv/bin/python benchmarks/detector_students/detector_student_lowres_cpu.py --dry-run      # ~1 min: 8 views, 2 steps
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import use_checkout  # noqa: E402

use_checkout()

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCHEMA = 1


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def stem_and_rest(model: Any, freeze_through: int) -> Tuple[Any, Any]:
    """``stem(x) -> h`` (conv + blocks ``0..freeze_through``) and ``rest(h) -> (encodings, logits)`` of one model.

    The split must lie before the first feature map (block 13's expansion), so ``rest`` computes every map.
    """
    from jetforge.compress.models.ssdlite_mobilenet_v2 import FEATURE_BLOCK

    if not 0 <= freeze_through < FEATURE_BLOCK:
        raise SystemExit("--freeze-through must be 0..%d (before the first feature map)" % (FEATURE_BLOCK - 1))

    def stem(x: Any) -> Any:
        x = model.conv(x)
        for block in model.blocks[:freeze_through + 1]:
            x = block(x)
        return x

    def rest(h: Any) -> Tuple[Any, Any]:
        return model.head_outputs(model.feature_maps(h, start_block=freeze_through + 1))

    return stem, rest


def frozen_parameters(model: Any, freeze_through: int) -> List[Any]:
    return list(model.conv.parameters()) + [p for b in model.blocks[:freeze_through + 1] for p in b.parameters()]


def build_cache(args: argparse.Namespace, teacher: Any, student: Any, bank: Any, targets: Any) -> Dict[str, Any]:
    """Views -> (cached stem features FP16, cross-grid targets), in batches of 16, within ``--cache-minutes``."""
    import torch

    from jetforge.compress.distill.detection_train import ViewConfig

    stem, _ = stem_and_rest(student, args.freeze_through)
    rng = np.random.default_rng(args.seed)
    feats, tgts, start = [], [], time.perf_counter()
    views = ViewConfig()
    while sum(len(f) for f in feats) < args.views:
        if time.perf_counter() - start > 60 * args.cache_minutes:
            log("view cache stopped by --cache-minutes at %d views" % sum(len(f) for f in feats))
            break
        n = min(16, args.views - sum(len(f) for f in feats))
        x_teacher, x_student = bank.sample_sizes(n, views, rng, [teacher.image_size, student.image_size])
        with torch.no_grad():
            tgts.append(targets(*teacher(x_teacher)))
            feats.append(stem(x_student).half())
        done = sum(len(f) for f in feats)
        if done % 160 == 0 or done >= args.views:
            log("cached %d views (%.0f s)" % (done, time.perf_counter() - start))
    return {"features": torch.cat(feats), "targets": torch.cat(tgts), "seconds": time.perf_counter() - start,
            "views": vars(views)}


def train(args: argparse.Namespace, student: Any, cache: Dict[str, Any], check: Tuple[Any, Any]) -> Dict[str, Any]:
    """The unfrozen rest of ``student`` on the cached features for ``--minutes`` (schedule on the clock)."""
    import torch

    from jetforge.compress.distill.detection_losses import detection_distill_loss
    from jetforge.compress.distill.detection_train import DetectorTrainConfig, learning_rate, training_progress

    _, rest = stem_and_rest(student, args.freeze_through)
    frozen = {id(p) for p in frozen_parameters(student, args.freeze_through)}
    params = [p for p in student.parameters() if id(p) not in frozen]
    for p in student.parameters():
        p.requires_grad_(id(p) not in frozen)
    cfg = DetectorTrainConfig(steps=args.max_steps, batch=args.batch, lr=args.lr, min_lr=args.min_lr, warmup=args.warmup,
                      budget_s=60.0 * args.minutes, seed=args.seed)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    rng = np.random.default_rng(args.seed + 1)
    features, targets = cache["features"], cache["targets"]

    def check_loss() -> float:
        student.eval()
        with torch.no_grad():
            enc, logits = rest(check[0].float())
            return float(detection_distill_loss(enc, logits, check[1])[0])

    history, before, start, step = [], check_loss(), time.perf_counter(), 0
    student.train()
    for module in [student.conv] + list(student.blocks[:args.freeze_through + 1]):
        module.eval()  # the frozen stem's batch norms keep their statistics (its features are cached anyway)
    while step < cfg.steps:
        progress = training_progress(step, time.perf_counter() - start, cfg)
        if progress >= 1.0:
            break
        for group in opt.param_groups:
            group["lr"] = learning_rate(progress, cfg)
        idx = torch.from_numpy(rng.integers(0, len(features), size=cfg.batch))
        enc, logits = rest(features[idx].float())
        loss, logs = detection_distill_loss(enc, logits, targets[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.log_every == 0:
            entry = {"step": step, "loss": loss.item(), "class_kl": float(logs["class_kl"]),
                     "box_l1": float(logs["box_l1"]), "lr": learning_rate(progress, cfg),
                     "elapsed_s": time.perf_counter() - start}
            history.append(entry)
            log("step %d loss %.4f (cls %.4f box %.4f) lr %.2e %.0fs" % (
                step, entry["loss"], entry["class_kl"], entry["box_l1"], entry["lr"], entry["elapsed_s"]))
        step += 1
    after = check_loss()
    student.eval()
    return {"steps_done": step, "samples_seen": step * cfg.batch, "seconds": time.perf_counter() - start,
            "loss_check_before": before, "loss_check_after": after, "history": history, "config": vars(cfg)}


def run(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    from jetforge.assets import asset_dir, asset_path
    from jetforge.compress.distill.detection_crossgrid import CrossGridConfig, CrossGridTargets, student_spec
    from jetforge.compress.distill.detection_student import detector_from_state, model_macs
    from jetforge.compress.distill.detection_train import frame_bank_from_labels
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    wall = time.perf_counter()
    graph = load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    g = SSDGraph(graph)
    spec, preprocess = read_spec(g), read_preprocess(g)
    teacher = load_from_graphdef(None, graph=graph).eval()
    student = detector_from_state(torch.load(args.init, map_location="cpu", weights_only=True), args.size)
    targets = CrossGridTargets(spec, student_spec(spec, student.grid_sizes, args.size), CrossGridConfig())
    bank = frame_bank_from_labels(asset_dir("opencv_samples").parent, preprocess, step=args.frame_step,
                                  limit=args.frames)
    log("%d training frames; teacher %d px, student %s at %d px (%.0f M MACs), frozen through block %d" % (
        len(bank), teacher.image_size, args.name, args.size, model_macs(student, args.size) / 1e6,
        args.freeze_through))
    cache = build_cache(args, teacher, student, bank, targets)
    stem, _ = stem_and_rest(student, args.freeze_through)
    check_idx = list(range(0, len(bank), max(1, len(bank) // 16)))[:16]
    with torch.no_grad():  # whole frames, as the detector is used: the loss before/after on them
        check = (stem(bank.full_views(check_idx, args.size)).half(), targets(*teacher(bank.full_views(check_idx))))
    history = train(args, student, cache, check)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from jetforge.fileio import atomic_output

    with atomic_output(out / ("student_%s.pt" % args.name)) as tmp:
        torch.save({k: v.detach().cpu() for k, v in student.state_dict().items()}, str(tmp))
    return {"schema": SCHEMA, "dry_run": bool(args.dry_run), "how": __doc__.splitlines()[0],
            "machine": {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
                        "cpu_count": os.cpu_count(), "torch_threads": args.threads, "torch": torch.__version__,
                        "load_average_at_end": list(os.getloadavg()),
                        "note": "2-core CPU shared with other engineers' jobs"},
            "frames": {"count": len(bank), "first": bank.names[:3], "last": bank.names[-3:]},
            "students": {args.name: {"image_size": args.size, "grid_sizes": [list(s) for s in student.grid_sizes],
                                     "init": str(args.init), "macs": model_macs(student, args.size),
                                     "freeze_through_block": args.freeze_through,
                                     "targets": "cross-grid: the teacher's decoded boxes re-encoded on the "
                                                "student's anchors (cached once per view)",
                                     "cross_grid": vars(CrossGridConfig()), "views_cached": int(len(cache["targets"])),
                                     "cache_seconds": cache["seconds"], "views": cache["views"], "train": history}},
            "wall_s": time.perf_counter() - wall}


def parse_args(argv: Any = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", default="jf192")
    p.add_argument("--size", type=int, default=192)
    p.add_argument("--init", default=str(ROOT / "build" / "detector_student_cpu" / "trained" / "student_jetforge.pt"))
    p.add_argument("--out", default=str(ROOT / "build" / "detector_lowres_cpu"))
    p.add_argument("--views", type=int, default=1200)
    p.add_argument("--cache-minutes", type=float, default=14.0)
    p.add_argument("--minutes", type=float, default=40.0, help="training time (the schedule follows it)")
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--freeze-through", type=int, default=5, help="last frozen block (5: every map above 1/8 size)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--min-lr", type=float, default=1e-5)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--frame-step", type=int, default=2)
    p.add_argument("--frames", type=int, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--dry-run", action="store_true", help="8 views, 2 training steps, a few frames")
    args = p.parse_args(argv)
    if args.dry_run:
        args.views, args.max_steps, args.frames, args.frame_step, args.log_every = 8, 2, 4, 20, 1
        args.batch, args.warmup = 4, 0
        args.out = str(Path(args.out).parent / (Path(args.out).name + "_dry"))
    return args


def main(argv: Any = None) -> int:
    args = parse_args(argv)
    result = run(args)
    from jetforge.fileio import write_json_atomic

    write_json_atomic(Path(args.out) / "detector_student_lowres_cpu.json", result)
    s = result["students"][args.name]
    log("wrote %s: %d views cached in %.0f s, %d steps in %.0f s, check loss %.3f -> %.3f" % (
        args.out, s["views_cached"], s["cache_seconds"], s["train"]["steps_done"], s["train"]["seconds"],
        s["train"]["loss_check_before"], s["train"]["loss_check_after"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
