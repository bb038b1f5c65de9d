"""``jetforge export-config deepstream|triton BUNDLE --out DIR``: serving configurations from a verified bundle.

Both writers open and verify the bundle (a corrupt one is refused), read the model's sidecar, build
the folder in a hidden staging folder next to ``--out``, check what they wrote (the DeepStream key
files with the strict GLib reader and the documented key table, the Triton ensemble's tensor flow),
and rename it into place: an interrupted run leaves nothing that looks complete, and an existing
folder is replaced only with ``--force``.  The bundle itself is never written to.

Before anything is written, every name from the sidecar (model, tensors, labels) and from the command
line (``--name``, ``--source``) is checked for the file it goes into -- sh, C++, key file, protobuf
text, folder name -- by :mod:`jetforge.deploy.generated_names`, and every path written is checked to
stay inside ``--out`` (issue 25: a tensor name ran as a command, ``--name ../..`` wrote outside).
"""

import dataclasses
import json
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from jetforge.deploy.deepstream import config as ds
from jetforge.deploy import generated_names as gn
from jetforge.deploy.triton import config as tr
from jetforge.errors import ConfigError
from jetforge.fileio import PathLike, replace_dir, staging_dir
from jetforge.runtime.inputs import input_contract

SUMMARY = "export-config.json"
# What the Triton writer appends to NAME for the folders and files it derives from it: the longest bounds --name.
TRITON_SUFFIXES = ("_body", "_postprocess", "_body.onnx", "_body.calib")


@contextmanager
def staged_folder(out: PathLike, force: bool, inputs: Sequence[PathLike]) -> Iterator[Path]:
    """A hidden staging folder beside ``out``, renamed to ``out`` when the block succeeds, removed if not."""
    out_dir = Path(out)
    for item in inputs:
        src = Path(item).resolve()
        dst = out_dir.resolve()
        if dst == src or src in dst.parents or dst in src.parents:
            raise ConfigError("--out %s overlaps the bundle %s" % (out_dir, item), hint="choose another --out folder")
    if out_dir.exists() and not force:
        raise ConfigError("%s already exists" % out_dir, hint="choose another --out, or pass --force to replace it")
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise ConfigError("%s exists and is not a folder" % out_dir, hint="choose another --out")
    if out_dir.exists():
        _check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(out_dir)  # hidden, named after this process; a killed run's is removed
    try:
        yield staging
        replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise


# Files the generated scripts make inside the folder on the board (plans, nvinfer's engines, the parser library):
# jetforge did not list them, but they are products of what it wrote, so --force may replace them.
DERIVED_SUFFIXES = (".plan", ".engine", ".so", ".o")


def _check_replaceable(out_dir: Path) -> None:
    """``--force`` replaces only a folder ``export-config`` wrote: empty, or holding its summary and no file the
    summary does not list (besides what the generated scripts build).  Anything else is refused whole, so
    ``--force`` never deletes a file jetforge did not create."""
    if not any(out_dir.iterdir()):
        return
    try:
        listed = json.loads((out_dir / SUMMARY).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None
    if not isinstance(listed, list):
        raise ConfigError("--force replaces only a folder export-config wrote, and %s is not one (no readable %s)"
                          % (out_dir, SUMMARY),
                          hint="choose a new or empty --out; jetforge never deletes a folder it did not write")
    known = set(str(f) for f in listed) | {SUMMARY}
    others = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*")
                    if (p.is_file() or p.is_symlink()) and p.relative_to(out_dir).as_posix() not in known
                    and not p.name.endswith(DERIVED_SUFFIXES))
    if others:
        raise ConfigError("%s holds %d file(s) that export-config did not write (%s): --force would delete them"
                          % (out_dir, len(others), ", ".join(others[:3])),
                          hint="move those files out of the folder, or choose another --out")


def _bundle(path: PathLike) -> Any:
    from jetforge.deploy.bundle import open_bundle
    from jetforge.runtime.model_facts import model_facts

    bundle = open_bundle(path)
    return bundle, model_facts(bundle)


def _precision(requested: Optional[str], bundle: Any) -> str:
    precision = requested or str(bundle.manifest.build_options.get("precision") or "fp16")
    if precision == "best":
        precision = "int8" if (bundle.manifest.calibration or bundle.qdq is not None) else "fp16"
    if precision not in ds.NETWORK_MODE:
        raise ConfigError("precision %r is not one of fp32, fp16, int8" % precision, hint="--precision fp16")
    return precision


def _calibration(bundle: Any, tensorrt: Optional[str]) -> Optional[Dict[str, Any]]:
    """The bundle's calibration entry for ``tensorrt`` (default: the newest version it has)."""
    from jetforge.runtime.tensorrt.version import TensorRTVersion, version_text

    entries = list(bundle.manifest.calibration)
    if not entries:
        return None
    if tensorrt:
        want = version_text(tensorrt)
        for entry in entries:
            if entry["tensorrt"] == want:
                return entry
        raise ConfigError("the bundle has no calibration cache for TensorRT %s (it has %s)"
                          % (want, ", ".join(e["tensorrt"] for e in entries)),
                          hint="pass --tensorrt with one of those, or re-create the bundle with --calib")
    return max(entries, key=lambda e: TensorRTVersion.parse(e["tensorrt"]))


def export_deepstream(bundle_path: PathLike, out: PathLike, opts: ds.DeepStreamOptions,
                      normalize_in_model: bool = False, check_images: Sequence[np.ndarray] = (),
                      force: bool = False) -> Dict[str, Any]:
    """Write the DeepStream folder (see :mod:`jetforge.deploy.deepstream.config`); returns the summary."""
    from jetforge.deploy.bundle_samples import sample_crops

    bundle, sidecar = _bundle(bundle_path)
    if sidecar.task not in ("classify", "detect"):
        raise ConfigError("export-config deepstream handles classifiers and the SSD detector, not task %r"
                          % sidecar.task, hint="use export-config triton for other models")
    opts.check()
    _check_deepstream_names(sidecar)  # before any message or file repeats a name from the sidecar
    contract = input_contract(sidecar, "image", purpose="export-config deepstream (nvinfer's input)")
    precision = _precision(opts.precision, bundle)
    dla_core = opts.dla_core if opts.dla_core is not None else bundle.manifest.build_options.get("dla_core")
    opts = dataclasses.replace(opts, dla_core=dla_core)
    summary: Dict[str, Any] = {"kind": "deepstream", "bundle": bundle.manifest.name,
                               "bundle_hash": bundle.manifest.bundle_hash, "model": sidecar.model_name,
                               "task": sidecar.task, "precision": precision, "dla_core": dla_core, "notes": []}
    use_qdq = precision == "int8" and not bundle.manifest.calibration and bundle.qdq is not None
    if precision == "int8" and not bundle.manifest.calibration and bundle.qdq is None:
        raise ConfigError("INT8 needs a calibration cache or a Q/DQ model and the bundle has neither",
                          hint="re-create the bundle with --calib, or pass --precision fp16")
    source_model = bundle.qdq if use_qdq else bundle.onnx
    with staged_folder(out, force, [bundle.path]) as staging:
        model_name = "model.qdq.onnx" if use_qdq else "model.onnx"
        pre = contract
        calib_name: Optional[str] = None
        entry = _calibration(bundle, opts.tensorrt) if precision == "int8" and not use_qdq else None
        calib_bytes = (bundle.path / entry["file"]).read_bytes() if entry else None
        if normalize_in_model:
            summary["normalization"] = _normalize(source_model, staging / model_name, sidecar, check_images,
                                                  sample_crops(bundle.path))
            from jetforge.deploy.normalize_onnx import identity_preprocess, retarget_cache

            pre = identity_preprocess(contract)
            if calib_bytes is not None:
                calib_bytes = retarget_cache(calib_bytes, sidecar.inputs[0].name, contract)
        else:
            ds.copy_file(source_model, staging / model_name)
        if calib_bytes is not None:
            calib_name = ds.CALIB
            (staging / calib_name).write_bytes(calib_bytes)
            summary["int8_calibration"] = {"tensorrt": entry["tensorrt"], "header": entry["header"]}
        if use_qdq:
            summary["notes"].append("INT8 from the Q/DQ model (explicit quantization, TensorRT >= 10): nvinfer is "
                                    "given no int8-calib-file")
        mapped = ds.nvinfer_preprocess(pre)
        summary["preprocess"] = mapped.to_dict()
        summary["notes"] += mapped.notes
        (staging / ds.LABELS).write_text(ds.labels_text(sidecar.task, sidecar.labels), encoding="utf-8")
        parser, ssd = _write_parsers(staging, sidecar, Path(source_model))
        groups = ds.nvinfer_groups(sidecar.task, sidecar, mapped, model_name, precision, opts, calib_name, parser, ssd)
        header = ("Generated by jetforge export-config from bundle %s (%s); model %s.\nNot executed under DeepStream "
                  "by jetforge. Run on the board: deepstream-app -c %s" % (
                      bundle.manifest.name, bundle.manifest.bundle_hash[:12], sidecar.model_name, ds.APP_CONFIG))
        ds.write_configs(staging, groups, ds.app_groups(opts), header)
        summary["checks"] = ds.check_written(staging)
        summary["files"] = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        _write_summary(staging, summary)
    summary["out"] = str(out)
    return summary


def _check_sidecar_text(sidecar: Any) -> None:
    """The model name, tensor names and labels, whatever file they go into: no controls, line breaks, surrogates."""
    gn.check_text(sidecar.model_name, "the model name", gn.FIX_SIDECAR)
    for what, specs in (("input", sidecar.inputs), ("output", sidecar.outputs)):
        for spec in specs:
            gn.check_text(spec.name, what, gn.RENAME_TENSOR)
    gn.check_labels(sidecar.labels)


def _classifier_classes(sidecar: Any) -> Optional[int]:
    """The classes a classifier's first output scores (its per-item element count), None when not static."""
    dims = list(sidecar.outputs[0].shape[1:]) if sidecar.outputs else []
    if not dims or any(not isinstance(d, int) or d < 1 for d in dims):
        return None
    return int(np.prod(dims))


def _check_label_count(sidecar: Any, classes: Optional[int], source: str) -> None:
    """One label per class: a shorter or longer list labels every class wrongly on the board (or, in the
    generated softmax parser, rejects every frame), and nothing there says why."""
    if classes is None or not sidecar.labels or len(sidecar.labels) == classes:
        return
    raise ConfigError("the model's sidecar has %d labels for %d class%s (%s)" % (
        len(sidecar.labels), classes, "" if classes == 1 else "es", source),
        hint="give one label per class in the sidecar (re-export the model with --labels FILE) and re-create "
             "the bundle")


def _check_deepstream_names(sidecar: Any) -> None:
    """Every name the DeepStream folder holds, checked before anything is written (see generated_names)."""
    _check_sidecar_text(sidecar)
    for spec in sidecar.outputs:  # output-blob-names (a ';' list) and the C++ parsers' findLayer("...")
        gn.tensor_name(spec.name, "output", "the nvinfer config and its C++ parser")
    if sidecar.task == "detect":
        from jetforge.vision.ssd import spec_from_sidecar

        ssd = spec_from_sidecar(sidecar)
        _check_label_count(sidecar, ssd.num_classes - 1, "the SSD block's labels, background excluded")
    else:
        _check_label_count(sidecar, _classifier_classes(sidecar), "output %s" % sidecar.outputs[0].name)


def _normalize(source: Path, dst: Path, sidecar: Any, images: Sequence[np.ndarray],
               bundle_crops: Sequence[np.ndarray]) -> Dict[str, Any]:
    from jetforge.deploy.normalize_onnx import check_equivalence, network_crops, normalize_in_model

    normalize_in_model(source, dst, sidecar)
    contract = input_contract(sidecar, "image", purpose="--normalize-in-model")
    crops = network_crops(contract, images) if images else list(bundle_crops)
    check = check_equivalence(source, dst, contract, crops)
    if not check.ok:  # pragma: no cover - a bug in the graph surgery, not a user error
        raise ConfigError("the normalised model differs from the original: %s" % json.dumps(check.to_dict()),
                          hint="report this as a jetforge bug; use the configuration without --normalize-in-model")
    result = check.to_dict()
    result["images_from"] = "--check-images" if images else "the bundle's samples"
    return result


def _write_parsers(staging: Path, sidecar: Any, model: Path) -> Any:
    """The C++ parsers the model needs (SSD decoder; softmax for a classifier ending in logits) and their Makefile."""
    from jetforge.deploy.deepstream import parsers as dp

    ssd_source = softmax_source = None
    ssd = None
    if sidecar.task == "detect":
        from jetforge.vision.ssd import spec_from_sidecar

        ssd = spec_from_sidecar(sidecar)
        names = [t.name for t in sidecar.outputs]
        if len(names) != 2:
            raise ConfigError("the SSD parser reads two outputs (box encodings, class logits); %s has %s"
                              % (sidecar.model_name, names), hint="export the body without --efficient-nms")
        ssd_source = dp.ssd_parser_source(ssd, names[0], names[1], ds.SSD_PARSE_FUNC)
    elif not _ends_in_softmax(model, sidecar.outputs[0].name):
        softmax_source = dp.softmax_parser_source(sidecar.labels, sidecar.outputs[0].name, ds.SOFTMAX_PARSE_FUNC)
    if ssd_source is None and softmax_source is None:
        return None, None
    folder = staging / ds.PARSER_DIR
    folder.mkdir()
    source_name = "nvdsinfer_jetforge_parsers.cpp"
    (folder / source_name).write_text(dp.parser_source(sidecar.model_name, ssd_source, softmax_source),
                                      encoding="utf-8")
    (folder / "Makefile").write_text(dp.makefile(ds.PARSER_LIB, source_name), encoding="utf-8")
    return "%s/%s" % (ds.PARSER_DIR, ds.PARSER_LIB), ssd


def _ends_in_softmax(model: Path, output: str) -> bool:
    """Whether the classifier's output is produced by a Softmax node (nvinfer's own parser then fits)."""
    from jetforge.optional import is_available

    if not is_available("onnx"):
        return False
    from jetforge.runtime.onnx_file import read_onnx

    graph = read_onnx(model, "model", load_external_data=False).graph
    return any(node.op_type == "Softmax" and output in node.output for node in graph.node)


def _write_summary(staging: Path, summary: Dict[str, Any]) -> None:
    (staging / SUMMARY).write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------------
# Triton
# ------------------------------------------------------------------------------------------------
def export_triton(bundle_path: PathLike, out: PathLike, opts: tr.TritonOptions, force: bool = False) -> Dict[str, Any]:
    """Write the Triton model repository (see :mod:`jetforge.deploy.triton.config`); returns the summary."""
    opts.check()
    bundle, sidecar = _bundle(bundle_path)
    name = _check_triton_names(opts, sidecar, bundle.manifest.name)
    precision = _precision(opts.precision, bundle)
    dla_core = opts.dla_core if opts.dla_core is not None else bundle.manifest.build_options.get("dla_core")
    opts = dataclasses.replace(opts, dla_core=dla_core)
    summary: Dict[str, Any] = {"kind": "triton", "bundle": bundle.manifest.name, "model": sidecar.model_name,
                               "task": sidecar.task, "platform": opts.platform, "precision": precision, "notes": []}
    with staged_folder(out, force, [bundle.path]) as staging:
        body_name = name + "_body" if sidecar.task == "detect" else name
        inputs = [tr.tensor(t.name, t.dtype, tr.per_item_dims(t, "input")) for t in sidecar.inputs]
        labels = "labels.txt" if sidecar.task == "classify" and sidecar.labels else None
        outputs = [tr.tensor(t.name, t.dtype, tr.per_item_dims(t, "output"), labels if i == 0 else None)
                   for i, t in enumerate(sidecar.outputs)]
        body = tr.model_config(body_name, opts.platform, opts, inputs, outputs)
        configs = [body]
        folder = gn.inside(staging, body_name)  # every path written stays inside --out, names checked or not
        (folder / "1").mkdir(parents=True)
        if labels:
            (folder / labels).write_text("\n".join(sidecar.labels) + "\n", encoding="utf-8")
        if opts.platform == "onnxruntime_onnx":
            ds.copy_file(bundle.onnx, folder / "1" / tr.MODEL_FILES[opts.platform])
        else:
            ds.copy_file(bundle.onnx, gn.inside(staging, "onnx", body_name + ".onnx"))
        if sidecar.task == "detect":
            configs += _detector_models(staging, name, opts, sidecar, body)
        problems = tr.check_ensemble(configs)
        if problems:  # pragma: no cover - a bug in the generator
            raise ConfigError("the generated Triton ensemble is inconsistent: %s" % "; ".join(problems),
                              hint="report this as a jetforge bug")
        for config in configs:
            gn.inside(staging, config["name"]).mkdir(exist_ok=True)
            gn.inside(staging, config["name"], "config.pbtxt").write_text(tr.to_pbtxt(config), encoding="utf-8")
        if opts.platform == "tensorrt_plan":
            summary["build"] = _build_script(staging, bundle, sidecar, body_name, opts, precision)
        summary["models"] = [c["name"] for c in configs]
        summary["files"] = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        _write_summary(staging, summary)
    summary["out"] = str(out)
    return summary


def _detector_models(staging: Path, name: str, opts: tr.TritonOptions, sidecar: Any,
                     body: Dict[str, Any]) -> List[Dict[str, Any]]:
    from jetforge.deploy.triton import ssd_model as triton_ssd_model
    from jetforge.vision.ssd import spec_from_sidecar

    spec = spec_from_sidecar(sidecar)
    post = tr.postprocess_config(name + "_postprocess", opts, spec, sidecar.outputs)
    version = gn.inside(staging, post["name"], "1")
    version.mkdir(parents=True)
    shutil.copyfile(triton_ssd_model.__file__, str(version / "model.py"))
    (version / triton_ssd_model.SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
    ensemble = tr.ensemble_config(name, opts, body, post)
    gn.inside(staging, name, "1").mkdir(parents=True)  # Triton wants a version folder for an ensemble too
    return [post, ensemble]


def _build_script(staging: Path, bundle: Any, sidecar: Any, body_name: str, opts: tr.TritonOptions,
                  precision: str) -> Dict[str, Any]:
    """``build_engines.sh``: trtexec builds of the plan with a batch profile 1..max_batch_size (run on the board)."""
    entry = _calibration(bundle, None) if precision == "int8" else None
    calib = None
    if entry is not None:
        calib = "onnx/%s.calib" % body_name
        ds.copy_file(bundle.path / entry["file"], gn.inside(staging, "onnx", body_name + ".calib"))
    elif precision == "int8":
        raise ConfigError("a TensorRT plan in INT8 needs the bundle's calibration cache, and it has none",
                          hint="pass --precision fp16, or re-create the bundle with --calib")
    spec = sidecar.inputs[0]
    command = tr.trtexec_command("onnx/%s.onnx" % body_name, "%s/1/model.plan" % body_name, spec.name,
                                 tr.per_item_dims(spec, "input"), opts.max_batch_size, precision, calib, opts.dla_core)
    script = staging / "build_engines.sh"
    script.write_text("#!/bin/sh\n# Generated by jetforge export-config: builds the TensorRT plan on the board "
                      "(TensorRT plans load only on the GPU/DLA and TensorRT version that built them).\n"
                      "# Not executed by jetforge. Run from this folder: sh build_engines.sh\nset -e\n"
                      "cd \"$(dirname \"$0\")\"\n%s\n" % command, encoding="utf-8")
    script.chmod(0o755)
    return {"script": "build_engines.sh", "command": command,
            "calibration": entry["tensorrt"] if entry else None}


def _check_triton_names(opts: tr.TritonOptions, sidecar: Any, bundle_name: str) -> str:
    """Check every name the repository will hold before anything is written; return the model's folder name."""
    _check_sidecar_text(sidecar)
    if opts.platform == "tensorrt_plan":  # the one tensor name build_engines.sh holds
        gn.tensor_name(sidecar.inputs[0].name, "input", "build_engines.sh (trtexec --minShapes)")
    if sidecar.task == "classify":
        _check_label_count(sidecar, _classifier_classes(sidecar), "output %s" % sidecar.outputs[0].name)
    if opts.name is not None:
        return gn.folder_name(opts.name, "--name", TRITON_SUFFIXES)
    return gn.folder_name(_safe_name(sidecar.model_name or bundle_name), "--name", TRITON_SUFFIXES)


def _safe_name(name: str) -> str:
    """The default repository name: the model's, each run of other characters one '_', short enough for its suffixes."""
    limit = gn.MAX_PATH_COMPONENT_BYTES - max(len(s) for s in TRITON_SUFFIXES)
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:limit].strip("_-")
    return cleaned or "model"


__all__ = ["export_deepstream", "export_triton", "staged_folder"]
