"""Run ``recipes/action_mobilenet3d.yaml`` end to end on this machine, and export a 3D action model with its sidecar.

``jetforge distill --config recipes/action_mobilenet3d.yaml`` (or ``python -m jetforge.compress.recipes
recipes/action_mobilenet3d.yaml``; ``kind: action3d`` routes it here, :mod:`jetforge.compress.recipes.action3d`) builds the
track-labelled clips, fine-tunes the inflated teacher, prunes and distils the student
(:mod:`jetforge.compress.action.action3d`), and writes ``OUT_DIR/teacher.onnx``, ``OUT_DIR/student.onnx`` (+ sidecars
with the ``clip`` input contract, the label rule and the held-out accuracy), their weights (``teacher.pt``,
``student.pt``: what ``jetforge qat --config`` of the same recipe starts from) and ``OUT_DIR/report.json``; the
optional ``int8`` stage (:mod:`jetforge.compress.action.action3d_int8`) then calibrates the student
(``student.calib``, ``student.qdq.onnx``) and runs a few QAT steps (``student.qat.qdq.onnx``), and records their
held-out accuracy in simulated INT8 arithmetic in the report.  On a
2-core CPU the full recipe takes hours: use ``--set`` to shrink it (the tests run it with a few clips and one
epoch), or run the same steps on a GPU with ``benchmarks/action3d/action_mobilenet3d_gpu.py`` (the bundled model's origin)
and export its checkpoints with :func:`export_action_model`.
"""

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from jetforge.compress.action.action3d import (Action3DRecipe, ClipData, build_data, predict, prune_student,
                                               recipe_dict, to_tensor, train_clip_classifier)
from jetforge.compress.action.track_clips import rule_dict
from jetforge.fileio import write_json_atomic

def what_it_recognizes(data: ClipData) -> str:
    fps = data.contract.fps_trained
    return ("how one tracked person's box moves over %d frames (%.1f s at %g fps) in a fixed elevated camera view "
            "like vtest.avi: %s. Labels come from the CNN person detector's tracks by a velocity rule (body heights "
            "per second); accuracy is agreement with that rule on one scene, not a general action-recognition "
            "result" % (data.contract.window, data.contract.window / fps, fps, ", ".join(data.labels)))


def heldout_accuracy(logits: np.ndarray, data: ClipData) -> Dict[str, Any]:
    y = data.targets(data.heldout)
    pred = logits.argmax(1)
    majority = int(np.bincount(data.targets(data.train), minlength=len(data.labels)).argmax())
    return {"accuracy": float((pred == y).mean()), "clips": int(len(y)), "tracks": len({w.track for w in data.heldout}),
            "majority_baseline": float((y == majority).mean()),
            "per_class_recall": {lab: (float((pred[y == i] == i).mean()) if (y == i).any() else None)
                                 for i, lab in enumerate(data.labels)}}


def export_action_model(model: torch.nn.Module, path: Path, data: ClipData, name: str,
                        evaluation: Optional[Dict[str, Any]] = None, window: Optional[int] = None,
                        provenance: Optional[Dict[str, Any]] = None) -> Path:
    """ONNX + sidecar (task ``action``, the ``clip`` contract, labels, the rule, the held-out evaluation).

    ``window``: export for clips of this many frames instead of the contract's (the net is convolutional in
    time, so the same weights take a 16-frame clip; the sidecar's contract says the window it takes)."""
    from dataclasses import replace

    from jetforge.compress.export import export_onnx

    contract = data.contract if window is None else replace(data.contract, window=int(window))
    extra: Dict[str, Any] = {"clip": contract.to_dict(), "label_rule": rule_dict_from(data),
                             "data": {k: v for k, v in data.info.items() if k != "rule"}}
    if evaluation:
        extra["evaluation"] = dict(evaluation, what=what_it_recognizes(data))
    export_onnx(model.cpu().eval(), path, (1,) + tuple(contract.input_shape), task="action", model_name=name,
                labels=data.labels, input_name="clip", output_name="logits", extra=extra,
                provenance=dict(provenance or {}, video=data.info["video"],
                                trained_on_frames=data.info["train_frames"]))
    return Path(path)


def rule_dict_from(data: ClipData) -> Dict[str, Any]:
    return dict(data.info["rule"])


def run_recipe(recipe: Action3DRecipe, video: Path, progress: bool = True) -> Dict[str, Any]:
    """Every step of the recipe on this machine's CPU (or its first CUDA GPU); returns the report."""
    from jetforge.compress.models.mobilenet3d import mobilenet3d_inflated

    t0 = time.perf_counter()
    torch.set_num_threads(max(1, recipe.threads))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = Path(recipe.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = build_data(recipe, video, progress=progress)
    x, y = to_tensor(data.contract, data.train_clips), torch.from_numpy(data.targets(data.train))
    xh = to_tensor(data.contract, data.heldout_clips)
    teacher = mobilenet3d_inflated(len(data.labels))
    report: Dict[str, Any] = {"recipe": recipe_dict(recipe), "data": data.info, "rule": rule_dict(recipe.rule),
                              "what_it_recognizes": what_it_recognizes(data)}
    report["teacher_train"] = train_clip_classifier(teacher, x, y, data.labels, recipe.teacher, device,
                                                    seed=recipe.seed)
    report["teacher"] = heldout_accuracy(predict(teacher, xh, device), data)
    student, report["prune"] = prune_student(teacher.cpu(), data.contract, recipe.macs_factor)
    report["student_train"] = train_clip_classifier(student, x, y, data.labels, recipe.student, device,
                                                    teacher=teacher, kd_weight=recipe.kd_weight,
                                                    temperature=recipe.temperature, seed=recipe.seed)
    report["student"] = heldout_accuracy(predict(student, xh, device), data)
    for name, model in (("teacher", teacher), ("student", student)):
        export_action_model(model, out / ("%s.onnx" % name), data, "%s_%s" % (recipe.name, name), report[name],
                            provenance={"recipe": recipe.name, "seed": recipe.seed})
    report["files"] = {"teacher": str(out / "teacher.onnx"), "student": str(out / "student.onnx")}
    report["files"].update(save_weights(out, teacher, student))
    report["seconds"] = round(time.perf_counter() - t0, 1)
    write_json_atomic(out / "report.json", report)  # the FP32 results stand even if the INT8 stage fails
    if recipe.int8.calibrate or recipe.int8.qat_steps:
        report["int8"] = run_int8(recipe, video, data, teacher, student, out, report["files"])
        report["seconds"] = round(time.perf_counter() - t0, 1)
        write_json_atomic(out / "report.json", report)
    return report


def save_weights(out: Path, teacher: torch.nn.Module, student: torch.nn.Module) -> Dict[str, str]:
    """``teacher.pt`` and ``student.pt``: the state dicts (CPU tensors only, read back weights-only) from which
    :func:`jetforge.compress.models.mobilenet3d.mobilenet3d_from_state` rebuilds the (pruned) nets, so that the
    INT8 stage can run again on this run's models (``jetforge qat --config``, :func:`run_int8_stage`)."""
    from jetforge.compress.train import save_checkpoint

    files = {}
    for name, model in (("teacher", teacher), ("student", student)):
        state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        files[name + "_weights"] = str(save_checkpoint(out / ("%s.pt" % name), state))
    return files


# What may differ between the run that trained the models and a later INT8 stage on them (out_dir: the same folder
# may be named another way): everything else (labels, clip shape, rule, split, training settings) decides what the
# saved models are.
INT8_STAGE_FREE_KEYS = ("int8", "threads", "tracks_dir", "out_dir")


def with_trained_settings(recipe: Action3DRecipe, overrides: Sequence[str] = ()) -> Action3DRecipe:
    """``recipe`` with the settings that decided the models in its ``out_dir`` taken from that run's report.json.

    The INT8 stage works on models already trained: their clip shape, labels, split and training settings are
    facts of that run, not choices.  ``jetforge distill --config R --set crop=32`` followed by ``jetforge qat
    --config R --set int8.qat_steps=16`` (the README's chain) was refused unless every training ``--set`` was
    repeated; the recipe file's differing values are now replaced by the run's, and the replacement is logged.
    A ``--set`` in ``overrides`` that asks for another value of such a setting is still refused, by
    :func:`trained_run` (a trained model cannot take it).  Without a readable report the recipe is returned as it
    is, and :func:`trained_run` says what is missing.
    """
    import logging

    from jetforge.config import load_config, parse_override
    from jetforge.jsonfile import read_json

    report_path = Path(recipe.out_dir) / "report.json"
    if not report_path.is_file():
        return recipe
    then = read_json(report_path, "the training run's report").get("recipe")
    if not isinstance(then, dict):
        return recipe
    now = json.loads(json.dumps(recipe_dict(recipe)))
    changed = sorted(k for k in set(now) | set(then) if k not in INT8_STAGE_FREE_KEYS and now.get(k) != then.get(k))
    asked = {parse_override(text)[0][0] for text in overrides}
    if not changed or asked & set(changed):
        return recipe
    merged = dict(then, **{k: now[k] for k in INT8_STAGE_FREE_KEYS if k in now})
    logging.getLogger(__name__).info("the models in %s were trained with other settings than the recipe file's: "
                                     "%s taken from that run (%s)", recipe.out_dir, ", ".join(changed), report_path)
    return load_config(Action3DRecipe, None, [], base=merged)


def trained_run(recipe: Action3DRecipe) -> Dict[str, Any]:
    """The report of the finished run in ``recipe.out_dir``, checked to hold this recipe's trained models."""
    import json

    from jetforge.errors import ConfigError, InputFileError

    out = Path(recipe.out_dir)
    needed = [out / "report.json", out / "student.pt", out / "student.onnx"]
    if recipe.int8.qat_steps:  # QAT distils from the teacher; PTQ needs the student alone
        needed.insert(1, out / "teacher.pt")
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        raise InputFileError("%s holds no trained run of this recipe (%s missing)" % (out, ", ".join(missing)),
                             hint="run `jetforge distill --config RECIPE` with the same settings first (its out_dir "
                                  "receives the models the INT8 stage starts from)")
    report = json.loads((out / "report.json").read_text())
    now = json.loads(json.dumps(recipe_dict(recipe)))
    then = report.get("recipe", {})
    changed = sorted(k for k in set(now) | set(then) if k not in INT8_STAGE_FREE_KEYS and now.get(k) != then.get(k))
    if changed:
        raise ConfigError("the recipe differs from the one that trained %s's models in %s (%s)" % (
            out, ", ".join(changed), "; ".join("%s: %s then, %s now" % (k, then.get(k), now.get(k)) for k in changed)),
            hint="give the same settings as that run (only %s may differ), or train again with jetforge distill"
                 % ", ".join(INT8_STAGE_FREE_KEYS))
    return report


def run_int8_stage(recipe: Action3DRecipe, video: Path, progress: bool = True) -> Dict[str, Any]:
    """The ``int8`` stage alone on the models a finished run left in ``recipe.out_dir`` (``jetforge qat --config``
    with a ``kind: action3d`` recipe): rebuilds the clips, reloads ``teacher.pt``/``student.pt``, runs PTQ and/or
    ``int8.qat_steps`` QAT steps, and updates ``report.json`` (its ``int8`` block and files); returns the report.
    PTQ alone (``int8.qat_steps: 0``) needs no ``teacher.pt``: a run whose teacher weights are gone can still be
    calibrated."""
    from jetforge.compress.checkpoint import read_weights
    from jetforge.compress.models.mobilenet3d import mobilenet3d_from_state
    from jetforge.errors import ConfigError

    if not (recipe.int8.calibrate or recipe.int8.qat_steps):
        raise ConfigError("the recipe's int8 stage is off (int8.calibrate false, int8.qat_steps 0): nothing to do",
                          hint="--set int8.calibrate=true and/or --set int8.qat_steps=8")
    report = trained_run(recipe)
    t0 = time.perf_counter()
    torch.set_num_threads(max(1, recipe.threads))
    out = Path(recipe.out_dir)
    data = build_data(recipe, video, progress=progress)
    teacher, student = (mobilenet3d_from_state(read_weights(out / ("%s.pt" % n), "%s weights" % n)).eval()
                        if n == "student" or recipe.int8.qat_steps else None for n in ("teacher", "student"))
    files = {k: v for k, v in report["files"].items() if k not in INT8_FILES}
    report["int8"] = run_int8(recipe, video, data, teacher, student, out, files)
    report["int8"]["seconds"] = round(time.perf_counter() - t0, 1)
    report["files"] = files
    write_json_atomic(out / "report.json", report)
    return report


INT8_FILES = ("student_calib", "student_ptq_qdq", "student_qat_qdq")  # what run_int8 adds to the report's files


def run_int8(recipe: Action3DRecipe, video: Path, data: ClipData, teacher: Optional[torch.nn.Module],
             student: torch.nn.Module, out: Path, files: Dict[str, str]) -> Dict[str, Any]:
    """The optional ``int8`` stage on the exported student (:mod:`jetforge.compress.action.action3d_int8`): PTQ
    from per-track clips of the training frames and/or ``qat_steps`` QAT steps, each evaluated on the held-out
    clips in simulated TensorRT INT8 arithmetic.  Adds the files it writes to ``files``."""
    from jetforge.compress.action.action3d_int8 import heldout_evaluator, int8_ptq, int8_qat
    from jetforge.compress.action.track_clips import ensure_track_cache, read_track_events

    student_onnx = out / "student.onnx"
    evaluator = heldout_evaluator(student_onnx, data)
    block: Dict[str, Any] = {"arithmetic": "simulated TensorRT INT8 (jetforge.calibrate int8sim)"}
    if recipe.int8.calibrate:
        tracks = read_track_events(ensure_track_cache(video, Path(recipe.tracks_dir), recipe.tracks_max_frames))
        block["ptq"] = int8_ptq(student_onnx, recipe, tracks, evaluator, recipe.int8.samples, video=video)
        files["student_calib"] = str(out / block["ptq"]["calibration"]["cache"])
        files["student_ptq_qdq"] = str(out / block["ptq"]["calibration"]["qdq"])
    if recipe.int8.qat_steps:
        block["qat"] = int8_qat(teacher, student, data, evaluator, out, recipe.int8.qat_steps)
        files["student_qat_qdq"] = str(out / block["qat"]["qdq"])
    return block


def summary_lines(report: Dict[str, Any], recipe: Action3DRecipe) -> List[str]:
    """What the run learned and wrote, as ``jetforge distill``/``qat`` and the recipe entry print it (``kind: action3d``)."""
    int8 = []
    for name in ("ptq", "qat"):
        acc = report.get("int8", {}).get(name, {}).get("clip_accuracy")
        if acc and acc.get("accuracy_int8") is not None:
            int8.append("%s %.3f" % (name.upper(), acc["accuracy_int8"]))
    return [
        "recognizes  %s" % report["what_it_recognizes"],
        "clips       train %d, held out %d (frames %s, %d tracks)" % (
            sum(report["data"]["train_counts"].values()), report["student"]["clips"], report["data"]["heldout_frames"],
            report["student"]["tracks"]),
        "held out    teacher %.3f, student %.3f (majority class alone %.3f)" % (
            report["teacher"]["accuracy"], report["student"]["accuracy"], report["student"]["majority_baseline"]),
        "MACs        teacher %.0f M, student %.0f M (%.2fx)" % (
            report["prune"]["macs_teacher"] / 1e6, report["prune"]["macs_student"] / 1e6,
            report["prune"]["macs_factor"]),
    ] + (["INT8        student held out, simulated INT8: %s (FP32 %.3f)" % (
        ", ".join(int8), report["student"]["accuracy"])] if int8 else []) + [
        "wrote       %s" % ", ".join([str(f) for f in report["files"].values()]
                                         + [str(Path(recipe.out_dir) / "report.json")])]


def recipe_video(path: Optional[str]) -> Path:
    """The video the clips are cut from: ``path``, else the vtest.avi asset; checked before any work starts."""
    from jetforge.errors import InputFileError

    if not path:
        from jetforge.assets import asset_path

        return asset_path("opencv_samples", "vtest.avi")
    if not Path(path).is_file():
        raise InputFileError("video %s is not a file" % path,
                             hint="give the video the clips are cut from (default: the vtest.avi asset)")
    return Path(path)
