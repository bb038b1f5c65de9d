"""``jetforge export-config deepstream|triton BUNDLE --out DIR``: serving configurations from a verified bundle.

Both writers open and verify the bundle (a corrupt one is refused), read the model's sidecar, build
the folder in a hidden staging folder next to ``--out``, check what they wrote (the DeepStream key
files with the strict GLib reader and the documented key table, the Triton ensemble's tensor flow),
and rename it into place: an interrupted run leaves nothing that looks complete, and an existing
folder is replaced only with ``--force``.  The bundle itself is never written to.
"""

import dataclasses
import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from jetforge.deploy import deepstream as ds
from jetforge.deploy import triton as tr
from jetforge.errors import ConfigError
from jetforge.fileio import PathLike, replace_dir, staging_dir
from jetforge.runtime.inputs import input_contract

SUMMARY = "export-config.json"


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
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError("%s exists and is not a folder" % out_dir, hint="choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(out_dir)  # hidden, named after this process; a killed run's is removed
    try:
        yield staging
        replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise


def _bundle(path: PathLike) -> Any:
    from jetforge.deploy.bundle import open_bundle
    from jetforge.runtime.sidecar import read_sidecar

    bundle = open_bundle(path)
    return bundle, read_sidecar(bundle.onnx)


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
    """Write the DeepStream folder (see :mod:`jetforge.deploy.deepstream`); returns the summary."""
    from jetforge.deploy.bundle_samples import sample_crops

    bundle, sidecar = _bundle(bundle_path)
    contract = input_contract(sidecar, "image", purpose="export-config deepstream (nvinfer's input)")
    if sidecar.task not in ("classify", "detect"):
        raise ConfigError("export-config deepstream handles classifiers and the SSD detector, not task %r"
                          % sidecar.task, hint="use export-config triton for other models")
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
    from jetforge.deploy import deepstream_parsers as dp

    ssd_source = softmax_source = None
    ssd = None
    if sidecar.task == "detect":
        from jetforge.runtime.detection import spec_from_sidecar

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
    """Write the Triton model repository (see :mod:`jetforge.deploy.triton`); returns the summary."""
    opts.check()
    bundle, sidecar = _bundle(bundle_path)
    name = opts.name or _safe_name(sidecar.model_name or bundle.manifest.name)
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
        folder = staging / body_name
        (folder / "1").mkdir(parents=True)
        if labels:
            (folder / labels).write_text("\n".join(sidecar.labels) + "\n", encoding="utf-8")
        if opts.platform == "onnxruntime_onnx":
            ds.copy_file(bundle.onnx, folder / "1" / tr.MODEL_FILES[opts.platform])
        else:
            ds.copy_file(bundle.onnx, staging / "onnx" / (body_name + ".onnx"))
        if sidecar.task == "detect":
            configs += _detector_models(staging, name, opts, sidecar, body)
        problems = tr.check_ensemble(configs)
        if problems:  # pragma: no cover - a bug in the generator
            raise ConfigError("the generated Triton ensemble is inconsistent: %s" % "; ".join(problems),
                              hint="report this as a jetforge bug")
        for config in configs:
            (staging / config["name"]).mkdir(exist_ok=True)
            (staging / config["name"] / "config.pbtxt").write_text(tr.to_pbtxt(config), encoding="utf-8")
        if opts.platform == "tensorrt_plan":
            summary["build"] = _build_script(staging, bundle, sidecar, body_name, opts, precision)
        summary["models"] = [c["name"] for c in configs]
        summary["files"] = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        _write_summary(staging, summary)
    summary["out"] = str(out)
    return summary


def _detector_models(staging: Path, name: str, opts: tr.TritonOptions, sidecar: Any,
                     body: Dict[str, Any]) -> List[Dict[str, Any]]:
    from jetforge.deploy import triton_ssd_model
    from jetforge.runtime.detection import spec_from_sidecar

    spec = spec_from_sidecar(sidecar)
    post = tr.postprocess_config(name + "_postprocess", opts, spec, sidecar.outputs)
    version = staging / post["name"] / "1"
    version.mkdir(parents=True)
    shutil.copyfile(triton_ssd_model.__file__, str(version / "model.py"))
    (version / triton_ssd_model.SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=2) + "\n", encoding="utf-8")
    ensemble = tr.ensemble_config(name, opts, body, post)
    (staging / name / "1").mkdir(parents=True)  # Triton wants a version folder for an ensemble too
    return [post, ensemble]


def _build_script(staging: Path, bundle: Any, sidecar: Any, body_name: str, opts: tr.TritonOptions,
                  precision: str) -> Dict[str, Any]:
    """``build_engines.sh``: trtexec builds of the plan with a batch profile 1..max_batch_size (run on the board)."""
    entry = _calibration(bundle, None) if precision == "int8" else None
    calib = None
    if entry is not None:
        calib = "onnx/%s.calib" % body_name
        ds.copy_file(bundle.path / entry["file"], staging / calib)
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


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in name).strip("_-")
    return cleaned or "model"


__all__ = ["export_deepstream", "export_triton", "staged_folder"]
