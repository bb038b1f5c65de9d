"""The bundle manifest (``manifest.json``): what a bundle holds, what produced it, which boards it was prepared
for; read strictly, every value checked (a manifest from someone else is hostile until verified)."""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import jetforge
from jetforge.deploy.safety import bundle_name_problem, bundle_path_problem, link_problem, shown_value
from jetforge.errors import JetforgeError
from jetforge.fileio import PathLike
from jetforge.jsonfile import read_json
from jetforge.runtime.tensorrt.version import version_text

MANIFEST = "manifest.json"
BUNDLE_FORMAT = 2                          # 2: the name is hashed and checked, manifest paths are checked
BUNDLE_KIND = "jetforge-bundle"
PARTIAL_DIR = ".jetforge-partial"          # rsync's partial-dir on the board; never part of a bundle
REMOTE_MARKER = ".jetforge-bundle"         # marks a board folder a deploy owns; never part of a bundle
NOT_BUNDLE_FILES = (PARTIAL_DIR, REMOTE_MARKER)
ONNX = "model.onnx"
QDQ = "model.qdq.onnx"
PRECISIONS = "model.precisions.json"
APP_CONFIG = "app.yaml"
CALIB_DIR = "calib"
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# Build options a bundle does not carry: they are decided on the board (or are paths of the workstation).
BOARD_DECIDED = ("calibration_cache", "tensorrt_version", "timing_cache")
# Build options that name a file: a bundle's manifest may not set them (the builder would read or write there).
PATH_OPTIONS = ("calibration_cache", "timing_cache")


class BundleError(JetforgeError):
    """A bundle is incomplete, corrupt, or cannot be made from the given inputs."""


class BundleNotPreparedError(BundleError):
    """The board's target or TensorRT version is not one the bundle was prepared for."""


@dataclass
class BundleFile:
    """One file of the bundle: relative POSIX path, role, size and SHA-256."""

    path: str
    role: str
    bytes: int
    sha256: str

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "role": self.role, "bytes": self.bytes, "sha256": self.sha256}


@dataclass
class Prepared:
    """Whether the bundle builds for one (target, TensorRT version), with which INT8 source, or why not."""

    target: str
    tensorrt: str
    ok: bool
    device: str = "gpu"
    int8_source: Optional[str] = None
    reason: str = ""

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "tensorrt": self.tensorrt, "ok": self.ok, "device": self.device,
                "int8_source": self.int8_source, "reason": self.reason}


@dataclass
class Manifest:
    """``manifest.json``: what the bundle holds, what produced it, and which boards it was prepared for."""

    name: str
    jetforge_version: str
    created: str
    model: Dict[str, Any]
    targets: List[Dict[str, Any]]
    prepared: List[Prepared]
    files: List[BundleFile]
    calibration: List[Dict[str, Any]]
    build_options: Dict[str, Any]
    bundle_hash: str = ""
    notes: List[str] = field(default_factory=list)
    format: int = BUNDLE_FORMAT

    # -- identity ---------------------------------------------------------------------------------
    def compute_hash(self) -> str:
        """SHA-256 over the content (name, files, options, targets, calibration), not over the creation time."""
        content = {"format": self.format, "name": self.name, "files": sorted((f.path, f.sha256) for f in self.files),
                   "build_options": self.build_options, "targets": sorted(t["name"] for t in self.targets),
                   "calibration": sorted((c["file"], c["tensorrt"]) for c in self.calibration)}
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    # -- lookups ----------------------------------------------------------------------------------
    def file(self, role: str) -> Optional[BundleFile]:
        return next((f for f in self.files if f.role == role), None)

    @property
    def target_names(self) -> List[str]:
        return [t["name"] for t in self.targets]

    def cache_for(self, tensorrt: str) -> Optional[str]:
        """Relative path of the calibration cache stamped for ``tensorrt`` (major.minor.patch), or None."""
        want = version_text(tensorrt)
        return next((c["file"] for c in self.calibration if c["tensorrt"] == want), None)

    def prepared_for(self, target: str, tensorrt: Optional[str] = None) -> List[Prepared]:
        out = [p for p in self.prepared if p.target == target]
        if tensorrt is not None:
            want = version_text(tensorrt)
            out = [p for p in out if p.tensorrt == want]
        return out

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    # -- JSON -------------------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        return {"format": self.format, "kind": BUNDLE_KIND, "name": self.name,
                "jetforge_version": self.jetforge_version, "created": self.created, "bundle_hash": self.bundle_hash,
                "model": dict(self.model), "targets": [dict(t) for t in self.targets],
                "prepared": [p.to_dict() for p in self.prepared], "calibration": [dict(c) for c in self.calibration],
                "build_options": dict(self.build_options), "files": [f.to_dict() for f in self.files],
                "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: Any, where: str = MANIFEST) -> "Manifest":
        if not isinstance(data, dict) or data.get("kind") != BUNDLE_KIND:
            raise BundleError("%s is not a jetforge bundle manifest" % where,
                              hint="create the bundle with `jetforge bundle create`")
        fmt = data.get("format")
        if fmt != BUNDLE_FORMAT or isinstance(fmt, bool):
            raise BundleError("%s has bundle format %s; this jetforge reads format %d"
                              % (where, fmt if isinstance(fmt, int) else "(none)", BUNDLE_FORMAT),
                              hint="re-create the bundle with this jetforge version (%s)" % jetforge.__version__)
        try:
            return cls(
                name=str(data["name"]), jetforge_version=str(data["jetforge_version"]), created=str(data["created"]),
                model=_mapping(data["model"]), targets=[_entry(t, "name") for t in data["targets"]],
                prepared=[Prepared(target=str(p["target"]), tensorrt=str(p["tensorrt"]), ok=bool(p["ok"]),
                                   device=str(p.get("device", "gpu")), int8_source=_optional_str(p, "int8_source"),
                                   reason=str(p.get("reason", ""))) for p in data["prepared"]],
                files=[BundleFile(path=str(f["path"]), role=str(f["role"]), bytes=int(f["bytes"]),
                                  sha256=str(f["sha256"])) for f in data["files"]],
                calibration=[_entry(c, "file", "tensorrt") for c in data.get("calibration", [])],
                build_options=_mapping(data.get("build_options", {})), bundle_hash=str(data.get("bundle_hash", "")),
                notes=[str(n) for n in data.get("notes", [])], format=fmt)
        except KeyError as err:  # the field's name only: a manifest's values are not echoed
            raise BundleError("%s is malformed: a %s field is missing" % (where, err),
                              hint="re-create the bundle") from None
        except (TypeError, ValueError, AttributeError, OverflowError):  # OverflowError: "bytes": Infinity
            raise BundleError("%s is malformed: a field has the wrong type" % where,
                              hint="re-create the bundle") from None


def _mapping(value: Any) -> Dict[str, Any]:
    """A JSON object as a dict; anything else is the wrong type (``dict()`` would turn ``[[null, null]]`` into
    ``{None: None}``: found by the long fuzz run)."""
    if not isinstance(value, dict):
        raise TypeError("not an object")
    return dict(value)


def _optional_str(item: Dict[str, Any], key: str) -> Optional[str]:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(key)
    return value


def _entry(item: Any, *required: str) -> Dict[str, Any]:
    """A manifest list entry as a dict whose ``required`` keys hold strings."""
    entry = _mapping(item)
    for key in required:
        entry[key] = str(entry[key])
    return entry


def manifest_problems(manifest: Manifest) -> List[str]:
    """Every way the manifest names something outside the bundle or a path it may not (one line each)."""
    problems = []
    why = bundle_name_problem(manifest.name)
    if why:
        problems.append("the bundle name %s %s: it names the bundle's folder on the board"
                        % (shown_value(manifest.name), why))
    seen = set()
    for f in manifest.files:
        why = bundle_path_problem(f.path)
        if not why and (f.path == MANIFEST or f.path.split("/")[0] in NOT_BUNDLE_FILES):
            why = "is reserved"
        if not why and f.path in seen:
            why = "is listed twice"
        if why:
            problems.append("the manifest's file path %s %s" % (shown_value(f.path), why))
        seen.add(f.path)
    onnx = [f.path for f in manifest.files if f.role == "onnx"]
    if onnx != [ONNX]:
        problems.append("the manifest lists %s as the model; a bundle holds exactly one, %s"
                        % (", ".join(shown_value(p) for p in onnx) or "nothing", ONNX))
    calib_files = {f.path for f in manifest.files if f.role == "calib"}
    for c in manifest.calibration:
        why = bundle_path_problem(c["file"])
        if not why and c["file"] not in calib_files:
            why = "is not one of the bundle's checked calibration files"
        if why:
            problems.append("the manifest's calibration file %s %s" % (shown_value(c["file"]), why))
    for key in PATH_OPTIONS:
        if manifest.build_options.get(key) is not None:
            problems.append("the manifest's build option %s names a path; options from a bundle may not (the board "
                            "chooses the calibration cache from the bundle and keeps its files in the engine cache)"
                            % key)
    return problems


def read_manifest(bundle_dir: PathLike) -> Manifest:
    path = Path(bundle_dir) / MANIFEST
    why = link_problem(Path(bundle_dir), MANIFEST)
    if why == "missing":
        raise BundleError("%s has no %s: not a complete bundle (an interrupted `bundle create` or copy leaves none)"
                          % (bundle_dir, MANIFEST), hint="re-create it with `jetforge bundle create`, or copy it again")
    if why:
        raise BundleError("%s %s: a bundle holds no links" % (path, why),
                          hint="copy the bundle again as plain files (cp -r, rsync, or the tar from `bundle create`)")
    data = read_json(path, "bundle manifest", BundleError, hint="re-create the bundle")
    return Manifest.from_dict(data, where=str(path))


__all__ = ["APP_CONFIG", "BOARD_DECIDED", "BUNDLE_FORMAT", "BUNDLE_KIND", "BundleError", "BundleFile",
           "BundleNotPreparedError", "CALIB_DIR", "MANIFEST", "Manifest", "NOT_BUNDLE_FILES", "ONNX", "PARTIAL_DIR",
           "PATH_OPTIONS", "PRECISIONS", "Prepared", "QDQ", "REMOTE_MARKER", "TAR_SUFFIXES", "manifest_problems",
           "read_manifest"]
