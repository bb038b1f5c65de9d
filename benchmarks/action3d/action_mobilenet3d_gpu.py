"""Train the 3D MobileNetV2 action teacher, prune and distil its student, and time both on a CUDA GPU, in one call.

Three steps, two machines:

1. ``--prepare`` (here, project venv; seconds): writes the carry folder ``build/action3d_device/`` (git-ignored,
   ~23 MiB): vtest.avi, the people app's track cache ``events.jsonl`` (``jetforge app people`` with the CNN
   detector; made first when missing), the ImageNet MobileNetV2 weights (asset ``mobilenet_v2_imagenet``),
   and ``prepare.json`` (the recipe, hashes).
2. the device run (the H200; torch, numpy and OpenCV only; this checkout's ``src/`` on ``sys.path``, nothing
   installed): the recipe's functions (``jetforge.compress.action.action3d``) build the labelled clips from the
   tracks (training frames only for training), fine-tune the inflated teacher, prune a copy (MACs goal),
   distil the student from the teacher, and save both state dicts (``teacher.pt``, ``student.pt``) and
   ``action3d_gpu.json`` (also after each model, so a run cut short keeps what it did).  Then, in a fresh
   process (``--time-only``), both are timed side by side: FP16, NCDHW and channels-last-3d, cuDNN autotuned,
   each forward in jetforge's ``TorchSession``, captured in a CUDA graph and replayed (the session keeps graph,
   model, input and output alive; ``benchmarks/common/gpu_timing.py``), models
   alternating per round, median of rounds, batch 32 and batch 1, at the model's clip (3x8x112x112) and at a
   standard 16x112x112 RGB clip; and the increase of allocated GPU memory when each model is loaded in FP16
   and run (weights, and peak during a batch-1 and a batch-32 forward).  ``action3d_gpu_timing.json``.
3. here: ``benchmarks/action3d/action_mobilenet3d.py --device-out DIR`` (ONNX, held-out accuracy FP32 / simulated
   INT8, CPU latency, memory model, table and plot).

    .venv/bin/python benchmarks/action3d/action_mobilenet3d_gpu.py --prepare
    .venv/bin/python benchmarks/action3d/action_mobilenet3d_gpu.py --dry-run --out /tmp/a3d_dry      # CPU, ~3 min
    python3 benchmarks/action3d/action_mobilenet3d_gpu.py                                           # the GPU (~4 min)
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
from typing import Any, Callable, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CARRY = ROOT / "build" / "action3d_device"
RECIPE = ROOT / "recipes" / "action_mobilenet3d.yaml"
WEIGHTS = "mobilenet_v2-b0353104.pth"
TRAINED_TEACHER = "teacher_trained.pt"
SCHEMA = 1
START = time.perf_counter()

sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import use_checkout  # noqa: E402


def log(*parts: Any) -> None:
    print(*parts, flush=True)


def write_json(path: Path, result: Dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, sort_keys=True))
    os.replace(str(tmp), str(path))


# ------------------------------------------------------------------------------------------------ prepare (here)
def prepare(carry: Path, teacher: str = "") -> Dict[str, Any]:
    from jetforge.assets import asset_path
    from jetforge.compress.action.action3d import recipe_dict
    from jetforge.compress.action.track_clips import ensure_track_cache
    from jetforge.config import load_config
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.fileio import sha256_file

    carry.mkdir(parents=True, exist_ok=True)
    recipe = load_config(Action3DRecipe, str(RECIPE), [])
    video = asset_path("opencv_samples", "vtest.avi")
    events = ensure_track_cache(video, ROOT / recipe.tracks_dir)
    for src, name in ((video, "vtest.avi"), (events, "events.jsonl"),
                      (asset_path("mobilenet_v2_imagenet", WEIGHTS), WEIGHTS)):
        shutil.copyfile(str(src), str(carry / name))
    if teacher:  # a teacher trained by an earlier device run: the next run prunes and distils from it
        shutil.copyfile(teacher, str(carry / TRAINED_TEACHER))
    elif (carry / TRAINED_TEACHER).exists():
        (carry / TRAINED_TEACHER).unlink()
    meta = {"schema": SCHEMA, "recipe": recipe_dict(recipe),
            "files": {p.name: sha256_file(p) for p in sorted(carry.iterdir()) if p.name != "prepare.json"}}
    (carry / "prepare.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


# ------------------------------------------------------------------------------------------------ device run
def load_recipe(carry: Path, dry_run: bool, train_budget_s: float = 0.0) -> Any:
    """The carried recipe; ``train_budget_s`` caps each training run where the recipe sets no budget (the device
    call's safety net: the recipe itself trains to its epochs, whatever the machine's speed)."""
    from jetforge.compress.action.action3d import Action3DRecipe, Int8Settings, TrainSettings
    from jetforge.compress.action.track_clips import MotionRule

    d = json.loads((carry / "prepare.json").read_text())["recipe"]
    d["rule"] = MotionRule(**d["rule"])
    d["teacher"], d["student"] = TrainSettings(**d["teacher"]), TrainSettings(**d["student"])
    if isinstance(d.get("int8"), dict):  # the recipe's INT8 stage (not run here: action_mobilenet3d.py does INT8)
        d["int8"] = Int8Settings(**d["int8"])
    recipe = Action3DRecipe(**d)
    for settings in (recipe.teacher, recipe.student):
        settings.budget_s = settings.budget_s or train_budget_s
    if dry_run:  # the code path only
        recipe.max_clips = 6
        for s in (recipe.teacher, recipe.student):
            s.epochs, s.batch_size = 1, 4
    return recipe


def environment(device: Any) -> Dict[str, Any]:
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__, "host": platform.node(),
           "cpu_count": os.cpu_count(), "device": str(device)}
    if device.type == "cuda":
        env.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    return env


def accuracy(logits: Any, y: Any) -> float:
    return float((logits.argmax(1) == y).mean()) if len(y) else 0.0


def run(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    from jetforge.compress.action.action3d import (build_data, predict, prune_student, to_tensor,
                                                   train_clip_classifier)
    from jetforge.compress.models.mobilenet3d import mobilenet3d_inflated

    wall = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    torch.backends.cudnn.benchmark = True
    out, carry = Path(args.out), Path(args.carry)
    out.mkdir(parents=True, exist_ok=True)
    recipe = load_recipe(carry, args.dry_run, args.train_budget_s)
    data = build_data(recipe, carry / "vtest.avi", carry / "events.jsonl", progress=False)
    x, y = to_tensor(data.contract, data.train_clips), torch.from_numpy(data.targets(data.train))
    xh, yh = to_tensor(data.contract, data.heldout_clips), data.targets(data.heldout)
    if device.type == "cuda":
        x = x.to(device)
    log("%d training / %d held-out clips (%.1f s); device %s" % (len(y), len(yh), time.perf_counter() - wall, device))
    result: Dict[str, Any] = {"schema": SCHEMA, "dry_run": bool(args.dry_run), "environment": environment(device),
                              "data": data.info, "contract": data.contract.to_dict(), "labels": data.labels,
                              "recipe": json.loads((carry / "prepare.json").read_text())["recipe"], "models": {}}
    if (carry / TRAINED_TEACHER).is_file():
        from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state

        teacher = mobilenet3d_from_state(torch.load(str(carry / TRAINED_TEACHER), map_location="cpu",
                                                    weights_only=True))
        hist = [{"loaded": TRAINED_TEACHER, "note": "trained by an earlier device run; not trained again"}]
        log("teacher loaded from %s (not trained again)" % TRAINED_TEACHER)
    else:
        teacher = mobilenet3d_inflated(len(data.labels), weights=str(carry / WEIGHTS))
        hist = train_clip_classifier(teacher, x, y, data.labels, recipe.teacher, device, seed=recipe.seed,
                                     on_epoch=lambda e: log("teacher epoch %(epoch)d loss %(loss).4f %(elapsed_s).0fs"
                                                            % e))
    teacher_logits = predict(teacher, xh, device)
    if not (carry / TRAINED_TEACHER).is_file():  # a loaded teacher stays in the carry folder (not sent back)
        torch.save({k: v.detach().cpu() for k, v in teacher.state_dict().items()}, str(out / "teacher.pt"))
    result["models"]["teacher"] = {"train": hist, "heldout_accuracy_torch": accuracy(teacher_logits, yh)}
    write_json(out / "action3d_gpu.json", result)

    for name, factor in student_names(args, recipe).items():
        t0 = time.perf_counter()
        student, prune_info = prune_student(teacher.cpu(), data.contract, factor)
        prune_info["seconds"] = round(time.perf_counter() - t0, 1)
        log("%s pruned: %s" % (name, prune_info))
        hist = train_clip_classifier(student, x, y, data.labels, recipe.student, device, teacher=teacher,
                                     kd_weight=recipe.kd_weight, temperature=recipe.temperature, seed=recipe.seed,
                                     on_epoch=lambda e, n=name: log("%s epoch %d loss %.4f %.0fs" % (
                                         n, e["epoch"], e["loss"], e["elapsed_s"])))
        torch.save({k: v.detach().cpu() for k, v in student.state_dict().items()}, str(out / ("%s.pt" % name)))
        result["models"][name] = {"train": hist, "prune": prune_info,
                                  "heldout_accuracy_torch": accuracy(predict(student, xh, device), yh)}
        log("held-out accuracy (torch, on the device): teacher %.3f %s %.3f" % (
            result["models"]["teacher"]["heldout_accuracy_torch"], name, result["models"][name]["heldout_accuracy_torch"]))
        write_json(out / "action3d_gpu.json", result)
        del student
    del teacher, x
    result["timing"] = timing_in_subprocess(args)
    result["wall_s"] = time.perf_counter() - wall
    write_json(out / "action3d_gpu.json", result)
    return result


def student_names(args: argparse.Namespace, recipe: Any) -> Dict[str, float]:
    """``student`` for the recipe's MACs goal; with ``--macs-factors A,B``: ``student_mA``, ``student_mB``."""
    if not args.macs_factors:
        return {"student": float(recipe.macs_factor)}
    return {"student_m%g" % float(f): float(f) for f in args.macs_factors.split(",")}


def timing_in_subprocess(args: argparse.Namespace) -> Dict[str, Any]:
    """Time the saved models in a fresh process (CUDA graphs; eager FP16 if that process dies)."""
    attempts = []
    for extra in ([], ["--no-cuda-graph"]):
        left = args.deadline_s - (time.perf_counter() - START)
        if left < 20:
            attempts.append({"cuda_graph": not extra, "skipped": "%.0f s left of the deadline" % left})
            break
        cmd = [sys.executable, str(Path(__file__).resolve()), "--time-only", "--out", args.out, "--carry", args.carry,
               "--rounds", str(args.rounds), "--reps", str(args.reps), "--macs-factors", args.macs_factors,
               "--layouts", args.layouts] + (["--dry-run"] if args.dry_run else []) + extra
        start = time.perf_counter()
        try:
            rc = subprocess.run(cmd, timeout=left).returncode
        except subprocess.TimeoutExpired:
            rc = -9  # the partial timing JSON (written after every point) is still read below
        path = Path(args.out) / "action3d_gpu_timing.json"
        if rc == -9 and path.is_file():
            timing = json.loads(path.read_text())
            timing["attempts"] = attempts + [{"cuda_graph": not extra, "returncode": rc, "cut_by_deadline": True}]
            return timing
        attempts.append({"cuda_graph": not extra, "returncode": rc, "seconds": round(time.perf_counter() - start, 1)})
        path = Path(args.out) / "action3d_gpu_timing.json"
        if rc == 0 and path.is_file():
            timing = json.loads(path.read_text())
            timing["attempts"] = attempts
            return timing
    return {"attempts": attempts}


# ------------------------------------------------------------------------------------------------ timing (subprocess)
def load_trained(out: Path, carry: Path, names: Any) -> Dict[str, Any]:
    import torch

    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state

    def path(name: str) -> Path:
        if name == "teacher" and (carry / TRAINED_TEACHER).is_file():
            return carry / TRAINED_TEACHER
        return out / ("%s.pt" % name)

    return {name: mobilenet3d_from_state(torch.load(str(path(name)), map_location="cpu", weights_only=True)).eval()
            for name in ["teacher"] + list(names)}


def _prepared(model: Any, shape: List[int], device: Any, layout: str) -> Any:
    import torch

    dtype = torch.float16 if device.type == "cuda" else torch.float32
    fmt = torch.channels_last_3d if layout == "channels_last_3d" else torch.contiguous_format
    m = copy.deepcopy(model).to(device=device, dtype=dtype, memory_format=fmt).eval()
    x = torch.randn(*shape, device=device, dtype=dtype).contiguous(memory_format=fmt)
    return m, x


def _timer(model: Any, shape: List[int], device: Any, layout: str, use_graph: bool) -> Callable[[int], float]:
    """``run(n) -> ms per forward``: the prepared model and clip in jetforge's TorchSession, its CUDA graph replayed
    (``benchmarks/common/gpu_timing.py``; eager with --no-cuda-graph; eager with the host clock on the CPU).  The
    clip is passed as it is, so ``channels_last_3d`` is kept; the session keeps model, graph and buffers alive."""
    from benchmarks.common.gpu_timing import SessionTimer

    m, x = _prepared(model, shape, device, layout)
    cuda = device.type == "cuda"
    timer = SessionTimer(m, x, dtype="fp16" if cuda else "fp32", channels_last=False, cuda_graph=use_graph,
                         warmup=5, copy_model=False, device="cuda" if cuda else "cpu")
    timer.ms(3)
    return timer.ms


def time_side_by_side(models: Dict[str, Any], shape: List[int], device: Any, layout: str, rounds: int, reps: int,
                      use_graph: bool) -> Dict[str, Any]:
    timers = {name: _timer(m, shape, device, layout, use_graph) for name, m in models.items()}
    samples: Dict[str, List[float]] = {name: [] for name in models}
    for r in range(rounds):
        for name in (list(timers) if r % 2 == 0 else list(reversed(list(timers)))):
            samples[name].append(timers[name](reps))
    out = {name: {"ms_per_batch": statistics.median(v), "ms_per_clip": statistics.median(v) / shape[0],
                  "rounds_ms": [round(t, 4) for t in v]} for name, v in samples.items()}
    for name in models:
        if name != "teacher":
            out["speedup_%s_vs_teacher" % name] = out["teacher"]["ms_per_batch"] / out[name]["ms_per_batch"]
    return out


def gpu_memory(model: Any, clip: List[int], device: Any) -> Dict[str, Any]:
    """Increase of allocated GPU memory (bytes) when the model is loaded in FP16 and run at batch 1 and 32."""
    import torch

    if device.type != "cuda":
        return {"note": "no CUDA device"}
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    m = copy.deepcopy(model).to(device=device, dtype=torch.float16).eval()
    out: Dict[str, Any] = {"weights_bytes": torch.cuda.memory_allocated() - base}
    for batch in (1, 32):
        x = torch.randn(batch, *clip, device=device, dtype=torch.float16)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            m(x)
        torch.cuda.synchronize()
        out["peak_increase_bytes_batch%d" % batch] = torch.cuda.max_memory_allocated() - base
        del x
    del m
    torch.cuda.empty_cache()
    return out


def time_only(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    torch.backends.cudnn.benchmark = True
    names = list(student_names(args, load_recipe(Path(args.carry), args.dry_run)))
    models = load_trained(Path(args.out), Path(args.carry), names)
    use_graph = not args.no_cuda_graph and device.type == "cuda"
    timing: Dict[str, Any] = {
        "method": ("jetforge TorchSession, CUDA graph replay" if use_graph else "eager forward passes") +
                  ", FP16 on CUDA (FP32 on the CPU), "
                  "cuDNN autotuned, CUDA events, teacher and student alternating per round, median of rounds",
        "device": str(device), "memory_fp16": {}, "runs": {}}
    frames = (8, 16) if not args.dry_run else (8,)
    for t in frames:
        for name, m in models.items():
            timing["memory_fp16"]["%s_T%d" % (name, t)] = gpu_memory(m, [3, t, 112, 112], device)
    layouts = args.layouts.split(",")
    for t in frames:
        for batch in ((32, 1) if not args.dry_run else (2,)):
            for layout in layouts:
                key = "T%d_b%d_%s" % (t, batch, layout)
                timing["runs"][key] = time_side_by_side(models, [batch, 3, t, 112, 112], device, layout, args.rounds,
                                                        args.reps if batch > 1 else 4 * args.reps, use_graph)
                run = timing["runs"][key]
                log("%s: teacher %.3f ms; %s" % (key, run["teacher"]["ms_per_batch"], "; ".join(
                    "%s %.3f ms, %.2fx" % (n, run[n]["ms_per_batch"], run["speedup_%s_vs_teacher" % n]) for n in names)))
                write_json(Path(args.out) / "action3d_gpu_timing.json", timing)
    return timing


def parse_args(argv: Any = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prepare", action="store_true", help="write the carry folder (here, in the project's venv)")
    p.add_argument("--dry-run", action="store_true", help="the device run on the CPU with a few clips and one epoch")
    p.add_argument("--carry", default=str(CARRY))
    p.add_argument("--teacher", default="", help="--prepare: carry this trained teacher (state dict) so the device run "
                                                 "prunes and distils from it instead of training one")
    p.add_argument("--out", default=None, help="output folder (default $OUT/action3d)")
    p.add_argument("--time-only", action="store_true", help="only time the trained models in --out (subprocess)")
    p.add_argument("--no-cuda-graph", action="store_true", help="--time-only: eager forward passes")
    p.add_argument("--layouts", default="ncdhw,channels_last_3d", help="memory layouts timed (comma-separated)")
    p.add_argument("--macs-factors", default="", help="prune and distil one student per MACs goal (A,B,...), "
                                                      "named student_mA ...; default: one student at the recipe's goal")
    p.add_argument("--train-budget-s", type=float, default=100.0,
                   help="stop each training run after this many seconds where the recipe sets no budget_s")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--deadline-s", type=float, default=380.0,
                   help="the timing subprocess is stopped at this many seconds after the start (results so far kept)")
    args = p.parse_args(argv)
    if args.out is None:
        args.out = str(Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="action3d_")) / "action3d")
    if args.dry_run:  # the CPU path only: no deadline to keep
        args.rounds, args.reps, args.deadline_s = 2, 1, 3600.0
    return args


def main(argv: Any = None) -> int:
    import faulthandler

    faulthandler.enable()
    args = parse_args(argv)
    use_checkout()
    if args.time_only:
        time_only(args)
        return 0
    if args.prepare:
        meta = prepare(Path(args.carry), args.teacher)
        log(json.dumps(meta["files"], indent=1))
        return 0
    result = run(args)
    log("wrote %s (%.0f s)" % (args.out, result["wall_s"]))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # everything is written; never wait on a lingering CUDA or loader thread at exit
