"""``jetforge info``'s work: which kind of thing a path is (ONNX, engine, bundle), its facts, and their text.

The facts come from the layers that own each container (:mod:`jetforge.runtime.model_inspect` for ONNX models
and engines, :mod:`jetforge.deploy.bundle.inspect` for bundles); this module picks one and renders the result
as the text a person reads (``--json`` prints the same dict).
"""

from pathlib import Path
from typing import Any, Dict, List

from jetforge.deploy.bundle import is_bundle_path
from jetforge.deploy.bundle.inspect import bundle_info
from jetforge.errors import InputFileError
from jetforge.fileio import PathLike
from jetforge.runtime.model_inspect import inspect_model_file, model_kind


def inspect_path(path: PathLike, *, macs: bool = True, batch: int = 1) -> Dict[str, Any]:
    """The facts of ``path``: an ONNX model, a TensorRT engine, or a bundle folder/tar (verified)."""
    p = Path(path)
    if not p.exists():
        raise InputFileError("%s does not exist" % p, hint="check the path, or give a shipped model name "
                                                           "(`jetforge models list`)")
    if is_bundle_path(p):
        return bundle_info(p, macs=macs, batch=batch)
    model_kind(p)  # an unknown suffix: one line naming what info reads
    return inspect_model_file(p, macs=macs, batch=batch)


def _shape(spec: Dict[str, Any]) -> str:
    return "%s %s %s" % (spec["name"], "x".join(str(d) for d in spec["shape"]) or "scalar", spec["dtype"])


def _model_lines(info: Dict[str, Any]) -> List[str]:
    lines = ["inputs      %s" % "; ".join(_shape(t) for t in info["inputs"]),
             "outputs     %s" % "; ".join(_shape(t) for t in info["outputs"])]
    if info.get("kind") == "onnx":
        ops = ", ".join("%s %d" % kv for kv in list(info["ops"].items())[:12])
        more = len(info["ops"]) - 12
        lines.append("nodes       %d (opset %s): %s%s" % (info["nodes"], info["opset"], ops,
                                                          ", +%d more types" % more if more > 0 else ""))
        par = info["parameters"]
        lines.append("parameters  %s in %d initializers (%s)" % (
            "{:,}".format(par["total"]), par["tensors"],
            ", ".join("%s %s" % (k, "{:,}".format(v)) for k, v in par["by_dtype"].items()) or "none"))
        macs = info["macs"]
        lines.append("MACs        %s" % ("{:,} at batch {} ({:.1f} M)".format(macs["total"], macs["batch"],
                                                                            macs["total"] / 1e6)
                                       if macs.get("available") else "not counted: %s" % macs["reason"]))
        lines.append("precision   %s" % info["precision"])
    return lines


def _sidecar_lines(block: Dict[str, Any]) -> List[str]:
    if not block.get("present"):
        return ["sidecar     none: %s" % block["reason"]]
    if "error" in block:
        return ["sidecar     unreadable: %s" % block["error"]]
    contract = block.get("input_contract") or {}
    fields = ", ".join("%s=%s" % (k, v) for k, v in contract.items() if k != "kind")
    made = block.get("produced_by") or {}
    match = {True: "matches the file", False: "DOES NOT match the file (stale sidecar)", None: "not recorded"}
    examples = ": %s ..." % ", ".join(block["label_examples"]) if block["label_examples"] else ""
    lines = ["task        %s (%s), %d labels%s" % (block["task"], block["model_name"] or "unnamed", block["labels"],
                                                  examples),
             "input       %s: %s" % (contract.get("kind", "none recorded"), fields or "-"),
             "made by     %s" % (", ".join("%s=%s" % kv for kv in made.items()) or "not recorded")]
    if "hash_matches" in block:  # an ONNX's own sidecar (an engine's embedded one describes the source ONNX)
        lines.append("sidecar     recorded model hash %s" % match[block["hash_matches"]])
    return lines


def _engine_lines(info: Dict[str, Any]) -> List[str]:
    lines = []
    if "tensorrt_version" in info:
        lines.append("built       TensorRT %s (%s) for %s: %s on %s%s, INT8 from %s, flags %s" % (
            info["tensorrt_version"], info["backend"], info["target"], info["precision"], info["device"],
            " core %s" % info["dla_core"] if info["dla_core"] is not None else "", info["int8_source"] or "-",
            ",".join(info["builder_flags"]) or "-"))
        src = info.get("source_onnx") or {}
        lines.append("from        %s (sha256 %s)" % (src.get("path"), (src.get("sha256") or "")[:16]))
        lines += _model_lines(info)
    lines += _sidecar_lines(info["sidecar"]) if "sidecar" in info else []
    plan = info.get("plan") or {}
    lines.append("plan        %s" % ("TensorRT %s: %d layers, %d profile(s)" % (plan["tensorrt"], plan["layers"],
                                                                               plan["profiles"])
                                     if plan.get("available") else "not read: %s" % plan.get("reason")))
    return lines


def format_info(info: Dict[str, Any]) -> str:
    """The text ``jetforge info`` prints for ``info`` (the dict :func:`inspect_path` returns)."""
    lines = ["%-11s %s" % (info["kind"], info["path"])]
    if info["kind"] == "bundle":
        lines += ["name        %s (hash %s, jetforge %s, %s)" % (info["name"], info["bundle_hash"][:16],
                                                                  info["jetforge_version"], info["created"]),
                  "targets     %s" % ", ".join(info["targets"]),
                  "prepared    %s" % "; ".join("%s TensorRT %s: %s" % (p["target"], p["tensorrt"], p["int8_source"]
                                                                        or p["device"] if p["ok"] else "no, " +
                                                                        p["reason"]) for p in info["prepared"]),
                  "verified    %d files, every size and SHA-256 as the manifest says" % info["verified"]["files"]]
        lines += ["file        %-28s %-12s %10d B  %s" % (f["path"], f["role"], f["bytes"], f["sha256"][:16])
                  for f in info["files"]]
        model = info["model"]
        lines += _model_lines(model) + _sidecar_lines(model["sidecar"])
        return "\n".join(lines)
    if info["kind"] == "engine":
        lines += _engine_lines(info)
    else:
        lines += _model_lines(info) + _sidecar_lines(info["sidecar"])
    lines += ["sha256      %-14s %s" % (f["role"], f["sha256"]) for f in info["files"]]
    return "\n".join(lines)


__all__ = ["format_info", "inspect_path"]
