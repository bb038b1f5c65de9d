"""Bundles: one folder (and optionally one tar file) with everything a board needs to build and run a model.

Layout of a bundle folder::

    manifest.json                 format, jetforge version, targets, what is prepared, checksums, build options
    model.onnx, model.onnx.json   the model and its sidecar (task, labels, preprocessing, input shapes)
    model.qdq.onnx(.json)         the explicitly quantized variant (TensorRT >= 10 GPU, TensorRT 11)
    calib/trt-<N>.calib           one calibration cache per TensorRT version (N = the cache header number)
    model.precisions.json         the per-layer precision list from `jetforge calibrate --mixed-precision`
    app.yaml                      the app configuration, if any
    samples/samples.npz(.json)    a few real inputs with jetforge's FP32 and simulated-INT8 outputs (board-check)

The folder is assembled in a hidden staging folder next to the destination, the manifest is
written last, and the staging folder is renamed into place: an interrupted write never leaves
something that looks complete.  :func:`verify_bundle` re-hashes every file against the manifest
and names each missing, corrupt or unexpected file.

A bundle from someone else is hostile until verified (:mod:`jetforge.deploy.safety`): every
path its manifest names (``files[].path``, ``calibration[].file``) must be a normalised relative
path inside the folder, every file it uses a regular file reached through no symbolic link and with
one hard link, its name a plain folder name (it becomes ``~/jetforge/bundles/<name>`` on the board),
and its build options may name no path (the board decides the calibration cache and timing cache).
The name is part of the bundle hash.

For every (target, TensorRT version) the bundle is prepared for, :func:`create_bundle` runs the
real build planner (:func:`jetforge.runtime.tensorrt.plan.make_plan`) with the INT8 source the board
will pick, so an impossible combination is found on the workstation, not on the board.
"""

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import shutil
import tarfile
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jetforge
from jetforge.deploy.safety import (bundle_name_problem, bundle_path_problem, check_bundle_path, link_problem, links_in,
                                    sanitise_bundle_name, shown_value)
from jetforge.errors import EngineBuildError, InputFileError, JetforgeError, ModelError
from jetforge.fileio import PathLike, atomic_output, check_not_input, require_file, sha256_file, write_json_atomic
from jetforge.runtime.sidecar import static_shape
from jetforge.runtime.tensorrt import calib_cache
from jetforge.runtime.tensorrt.int8_source import choose_int8_source  # noqa: F401  (deploy's modules use it here)
from jetforge.runtime.tensorrt.version import TensorRTVersion
from jetforge.runtime.tensorrt.version import version_text as trt_version_string  # noqa: F401  ("10.3" -> "10.3.0")

log = logging.getLogger(__name__)

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


# ------------------------------------------------------------------------------------------------
# the manifest
# ------------------------------------------------------------------------------------------------
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
        want = trt_version_string(tensorrt)
        return next((c["file"] for c in self.calibration if c["tensorrt"] == want), None)

    def prepared_for(self, target: str, tensorrt: Optional[str] = None) -> List[Prepared]:
        out = [p for p in self.prepared if p.target == target]
        if tensorrt is not None:
            want = trt_version_string(tensorrt)
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
                model=dict(data["model"]), targets=[_entry(t, "name") for t in data["targets"]],
                prepared=[Prepared(target=str(p["target"]), tensorrt=str(p["tensorrt"]), ok=bool(p["ok"]),
                                   device=str(p.get("device", "gpu")), int8_source=_optional_str(p, "int8_source"),
                                   reason=str(p.get("reason", ""))) for p in data["prepared"]],
                files=[BundleFile(path=str(f["path"]), role=str(f["role"]), bytes=int(f["bytes"]),
                                  sha256=str(f["sha256"])) for f in data["files"]],
                calibration=[_entry(c, "file", "tensorrt") for c in data.get("calibration", [])],
                build_options=dict(data.get("build_options", {})), bundle_hash=str(data.get("bundle_hash", "")),
                notes=[str(n) for n in data.get("notes", [])], format=fmt)
        except KeyError as err:  # the field's name only: a manifest's values are not echoed
            raise BundleError("%s is malformed: a %s field is missing" % (where, err),
                              hint="re-create the bundle") from None
        except (TypeError, ValueError, AttributeError, OverflowError):  # OverflowError: "bytes": Infinity
            raise BundleError("%s is malformed: a field has the wrong type" % where,
                              hint="re-create the bundle") from None


def _optional_str(item: Dict[str, Any], key: str) -> Optional[str]:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(key)
    return value


def _entry(item: Any, *required: str) -> Dict[str, Any]:
    """A manifest list entry as a dict whose ``required`` keys hold strings."""
    entry = dict(item)
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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        where = " (%s)" % err.strerror if isinstance(err, OSError) else ""
        raise BundleError("%s is not valid JSON%s" % (path, where), hint="re-create the bundle") from None
    return Manifest.from_dict(data, where=str(path))


# ------------------------------------------------------------------------------------------------
# verification
# ------------------------------------------------------------------------------------------------
@dataclass
class VerifyReport:
    """The outcome of :func:`verify_bundle`: every problem, by file."""

    path: str
    manifest: Optional[Manifest]
    missing: List[str] = field(default_factory=list)
    corrupt: List[Tuple[str, str]] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.corrupt or self.errors)

    def problems(self) -> List[str]:
        """One line per problem, in the order a user fixes them."""
        lines = list(self.errors)
        lines += ["missing: %s" % p for p in self.missing]
        lines += ["corrupt: %s (%s)" % (p, why) for p, why in self.corrupt]
        return lines

    def summary(self) -> str:
        if self.ok:
            return "bundle %s is complete: %d files match the manifest" % (self.path, self.checked)
        parts = []
        if self.errors:
            parts.append(self.errors[0])
        if self.missing:
            parts.append("%d missing (%s)" % (len(self.missing), ", ".join(self.missing[:4])))
        if self.corrupt:
            parts.append("%d corrupt (%s)" % (len(self.corrupt), ", ".join(p for p, _ in self.corrupt[:4])))
        return "bundle %s is not usable: %s" % (self.path, "; ".join(parts))

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "checked": self.checked, "missing": list(self.missing),
                "corrupt": [{"path": p, "why": w} for p, w in self.corrupt], "unexpected": list(self.unexpected),
                "errors": list(self.errors),
                "bundle_hash": self.manifest.bundle_hash if self.manifest else None,
                "name": self.manifest.name if self.manifest else None}

    def raise_if_bad(self) -> None:
        if not self.ok:
            raise BundleError(self.summary(), hint="re-create the bundle with `jetforge bundle create` (or copy it "
                                                   "again); `jetforge bundle verify` lists every problem")


def verify_bundle(bundle_dir: PathLike) -> VerifyReport:
    """Check that every file of the manifest is there with its size and SHA-256; never raises for content."""
    root = Path(bundle_dir)
    report = VerifyReport(path=str(root), manifest=None)
    if not root.is_dir():
        report.errors.append("%s is not a folder" % root if root.exists() else "%s does not exist" % root)
        return report
    try:
        manifest = read_manifest(root)
    except BundleError as err:
        report.errors.append(err.message)
        return report
    report.manifest = manifest
    if manifest.bundle_hash != manifest.compute_hash():
        report.errors.append("manifest.json was edited after the bundle was made (its bundle hash does not match)")
    unsafe = manifest_problems(manifest)
    report.errors.extend(unsafe)
    report.errors.extend("%s is a symbolic link: a bundle holds no links" % rel for rel in links_in(root))
    listed = set()
    for f in manifest.files:
        if bundle_path_problem(f.path):
            continue  # reported above; never opened
        listed.add(f.path)
        path = root / f.path
        report.checked += 1
        why = link_problem(root, f.path)
        if why == "missing":
            report.missing.append(f.path)
            continue
        if why:
            if "symbolic link" not in why:  # links are reported once, above
                report.errors.append("%s %s: a bundle holds only plain files" % (f.path, why))
            continue
        size = path.stat().st_size
        if size != f.bytes:
            report.corrupt.append((f.path, "%d bytes, the manifest says %d" % (size, f.bytes)))
            continue
        if sha256_file(path) != f.sha256:
            report.corrupt.append((f.path, "SHA-256 differs from the manifest"))
    for folder, dirs, names in os.walk(str(root)):
        for name in names:
            rel = Path(folder, name).relative_to(root).as_posix()
            if rel != MANIFEST and rel.split("/")[0] not in NOT_BUNDLE_FILES and rel not in listed:
                report.unexpected.append(rel)
    report.unexpected.sort()
    return report


# ------------------------------------------------------------------------------------------------
# opening a bundle (folder or tar)
# ------------------------------------------------------------------------------------------------
def is_bundle_path(path: PathLike) -> bool:
    """A folder with a manifest.json (or with none yet: verify says what is missing), or a tar file."""
    p = Path(path)
    if p.is_dir():
        return True
    return p.is_file() and p.name.lower().endswith(TAR_SUFFIXES)


def safe_extract(tar: "tarfile.TarFile", dest: Path) -> List[str]:
    """Extract regular files and folders of ``tar`` under ``dest``; refuse links, devices and escaping paths."""
    names = []
    hint = "use a tar written by `jetforge bundle create --tar`"
    for member in tar:
        if member.isdir() and member.name.strip("./") == "" and ".." not in member.name:
            continue  # the archive's top folder (`tar -C DIR -cf - .` writes "./")
        why = bundle_path_problem(member.name, normalised=False)
        if why:
            raise BundleError("archive member %s %s: it escapes the destination" % (shown_value(member.name), why),
                              hint=hint)
        rel = check_bundle_path(member.name, "archive member", BundleError, normalised=False)
        target = dest.joinpath(*rel.split("/"))
        try:
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                raise BundleError("archive member %s is not a regular file (links are refused)"
                                  % shown_value(member.name), hint=hint)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:  # pragma: no cover - isfile() members always have data
                continue
            with source, open(str(target), "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            os.utime(str(target), (member.mtime, member.mtime))
        except OSError as err:  # e.g. a member "a/b" after a file "a"
            raise BundleError("archive member %s cannot be written: %s" % (shown_value(member.name), err.strerror),
                              hint=hint) from None
        names.append(rel)
    return names


def single_top(dest: Path) -> Path:
    entries = [p for p in dest.iterdir()]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return dest


def unpack_tar(tar_path: PathLike, cache_dir: Optional[PathLike] = None) -> Path:
    """Extract a bundle tar into ``<cache>/bundles/<sha>/`` (once; atomically) and return the bundle folder."""
    tar_file = require_file(tar_path, "bundle archive")
    digest = sha256_file(tar_file)[:20]
    if cache_dir is None:
        from jetforge.assets.store import cache_root

        cache_dir = cache_root() / "bundles"
    final = Path(cache_dir) / digest
    if final.is_dir():
        return single_top(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="." + digest + ".partial-", dir=str(final.parent)))
    try:
        try:
            with tarfile.open(str(tar_file), "r:*") as tar:
                safe_extract(tar, staging)
        except (tarfile.TarError, EOFError, OSError) as err:
            raise BundleError("bundle archive %s is unreadable: %s" % (tar_file, err),
                              hint="copy it again, or re-create it with `jetforge bundle create --tar`") from err
        os.rename(str(staging), str(final))
    except BaseException:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise
    return single_top(final)


@dataclass
class Bundle:
    """An opened, verified bundle folder."""

    path: Path
    manifest: Manifest
    source: Path

    def file_path(self, role: str) -> Optional[Path]:
        f = self.manifest.file(role)
        return self.path / f.path if f else None

    @property
    def onnx(self) -> Path:
        return self.path / ONNX   # verify_bundle requires the manifest's "onnx" file to be exactly this one

    @property
    def qdq(self) -> Optional[Path]:
        return self.file_path("qdq")

    def cache_path(self, tensorrt: str) -> Optional[Path]:
        rel = self.manifest.cache_for(tensorrt)
        return self.path / rel if rel else None


def open_bundle(path: PathLike, verify: bool = True) -> Bundle:
    """A bundle folder or tar (extracted into the cache), verified against its manifest."""
    p = Path(path)
    if not p.exists():
        raise InputFileError("bundle %s does not exist" % p, hint="check the path, or create it with "
                                                                 "`jetforge bundle create`")
    folder = unpack_tar(p) if p.is_file() else p
    if verify:
        report = verify_bundle(folder)
        report.raise_if_bad()
        manifest = report.manifest
        assert manifest is not None
    else:
        manifest = read_manifest(folder)
    return Bundle(path=folder, manifest=manifest, source=p)


# ------------------------------------------------------------------------------------------------
# creation
# ------------------------------------------------------------------------------------------------
@dataclass
class CreateResult:
    path: Path
    manifest: Manifest
    tar: Optional[Path] = None
    warnings: List[str] = field(default_factory=list)


def _read_cache(path: Path) -> Tuple[calib_cache.CacheInfo, bytes]:
    data = require_file(path, "calibration cache", hint="give the .calib written by `jetforge calibrate`").read_bytes()
    return calib_cache.parse_calibration_cache(data, "calibration cache %s" % path), data


def _copy(src: Path, staging: Path, rel: str, role: str, files: List[BundleFile]) -> Path:
    """Copy the *content* of ``src`` (a link given as input is followed: the bundle gets a plain file)."""
    dst = staging / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(str(src), str(dst))
    shutil.copystat(str(src), str(dst))
    files.append(BundleFile(path=rel, role=role, bytes=dst.stat().st_size, sha256=sha256_file(dst)))
    return dst


def _write(data: bytes, staging: Path, rel: str, role: str, files: List[BundleFile]) -> Path:
    dst = staging / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(data)
    files.append(BundleFile(path=rel, role=role, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    return dst


def layer_precisions_from_file(path: PathLike) -> Dict[str, str]:
    """``{layer: "fp16"}`` from the per-layer precision list ``jetforge calibrate --mixed-precision`` writes.

    Applied only to builds whose INT8 comes from a calibration cache: a mixed Q/DQ model already
    carries its FP16 layers as plain (dequantized) operators.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        layers = data["fp16_layers"]
        if not isinstance(layers, list):
            raise TypeError("fp16_layers is not a list")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BundleError("per-layer precision list %s is unreadable: %s" % (path, err),
                          hint="give the MODEL.precisions.json written by `jetforge calibrate --mixed-precision`"
                          ) from err
    return {str(name): "fp16" for name in layers}


def _default_input_shapes(sidecar: Any) -> Dict[str, List[int]]:
    """Static shapes for the build: a dynamic batch axis becomes 1; any other dynamic axis needs --shape."""
    try:
        return {spec.name: static_shape(spec, 1, "the bundle") for spec in sidecar.inputs if spec.is_dynamic}
    except ModelError as err:
        raise BundleError(err.message, hint=err.hint) from err


def create_bundle(model: PathLike, out: PathLike, targets: Sequence[str], *, calib: Sequence[PathLike] = (),
                  qdq: Optional[PathLike] = None, precisions: Optional[PathLike] = None,
                  app_config: Optional[PathLike] = None, options: Optional[Any] = None,
                  tensorrt_versions: Sequence[str] = (), retarget_calib: bool = False, tar: Optional[PathLike] = None,
                  force: bool = False, samples: Optional[Tuple[bytes, bytes]] = None) -> CreateResult:
    """Assemble a bundle folder at ``out`` (and ``tar`` if given); see the module docstring.

    ``options`` is a :class:`~jetforge.runtime.tensorrt.plan.BuildOptions` (precision, DLA core, shapes,
    pools, per-layer precisions; default: INT8 when caches or a Q/DQ model are given, else FP16); its
    calibration cache, TensorRT version and timing cache are
    decided on the board.  ``tensorrt_versions`` restricts the versions prepared (default: every
    TensorRT of every target's JetPack releases).  ``retarget_calib`` re-stamps the first cache's
    scales for each version that has none (the scales do not depend on the TensorRT version).
    ``samples`` is the (npz, json) payload of :func:`jetforge.deploy.bundle_samples.samples_payload`:
    a few real inputs with jetforge's FP32 and simulated-INT8 outputs, for ``jetforge board-check``.
    """
    from jetforge.config import to_dict
    from jetforge.runtime.tensorrt.plan import BuildOptions, make_plan
    from jetforge.runtime.onnx_file import check_onnx_file
    from jetforge.runtime.sidecar import read_sidecar, sidecar_path
    from jetforge.targets import get_target

    model_path = check_onnx_file(model)  # the user's file, checked whole before anything is copied
    out_dir = Path(out)
    if not targets:
        raise BundleError("a bundle needs at least one target", hint="pass --target NAME (see `jetforge targets list`)")
    resolved = []
    for name in targets:
        t = get_target(name)
        if t.name not in [r.name for r in resolved]:
            resolved.append(t)
    sidecar = read_sidecar(model_path)  # refuses a missing or stale sidecar with the fix
    qdq_path = Path(qdq) if qdq is not None else None
    if qdq_path is not None:
        require_file(qdq_path, "Q/DQ model", hint="run `jetforge calibrate` (it writes MODEL.qdq.onnx)")
    inputs: List[PathLike] = [model_path, sidecar_path(model_path)] + list(calib)
    inputs += [p for p in (qdq_path, precisions, app_config) if p is not None]
    check_not_input(out_dir, inputs)
    tar_path = Path(tar) if tar is not None else None
    if tar_path is not None:
        check_not_input(tar_path, inputs)
    if out_dir.exists() and not force:
        raise BundleError("%s already exists" % out_dir, hint="choose another --out, or pass --force to replace it")
    if out_dir.exists() and not out_dir.is_dir():
        raise BundleError("%s exists and is not a folder" % out_dir, hint="choose another --out")

    opts = options if options is not None else BuildOptions(precision="int8" if (calib or qdq_path) else "fp16")
    opt_dict = to_dict(opts)
    for key in BOARD_DECIDED:
        if opt_dict.get(key):
            raise BundleError("build option %s=%r cannot travel in a bundle: it is decided on the board"
                              % (key, opt_dict[key]),
                              hint="give calibration caches with --calib and drop %s from the build options" % key)
        opt_dict.pop(key, None)
    if not opt_dict.get("input_shapes") and not opt_dict.get("profiles"):
        opt_dict["input_shapes"] = _default_input_shapes(sidecar)
    options_for_plan = dataclasses.replace(opts, input_shapes=dict(opt_dict["input_shapes"] or {}))

    warnings: List[str] = []
    notes: List[str] = []
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / (".%s.partial-%s" % (out_dir.name, uuid.uuid4().hex[:8]))
    staging.mkdir()
    try:
        files: List[BundleFile] = []
        onnx_dst = _copy(model_path, staging, ONNX, "onnx", files)
        _copy(sidecar_path(model_path), staging, ONNX + ".json", "onnx_sidecar", files)
        qdq_dst = None
        if qdq_path is not None:
            qdq_dst = _copy(qdq_path, staging, QDQ, "qdq", files)
            if sidecar_path(qdq_path).is_file():
                _copy(sidecar_path(qdq_path), staging, QDQ + ".json", "qdq_sidecar", files)
            else:
                warnings.append("the Q/DQ model has no sidecar %s" % sidecar_path(qdq_path).name)
        if precisions is not None:
            layer_precisions_from_file(_copy(require_file(precisions, "per-layer precision list"), staging,
                                             PRECISIONS, "precisions", files))
        if app_config is not None:
            _copy(require_file(app_config, "app configuration"), staging, APP_CONFIG, "app_config", files)
        if samples is not None:
            from jetforge.deploy.bundle_samples import ROLE_JSON, ROLE_NPZ, SAMPLES_JSON, SAMPLES_NPZ

            _write(samples[0], staging, SAMPLES_NPZ, ROLE_NPZ, files)
            _write(samples[1], staging, SAMPLES_JSON, ROLE_JSON, files)

        # calibration caches, one per TensorRT version (the header decides which)
        calibration: List[Dict[str, Any]] = []
        first: Optional[Tuple[calib_cache.CacheInfo, str]] = None
        for cache in calib:
            parsed, data = _read_cache(Path(cache))
            version, header = str(parsed.version), parsed.header
            if any(c["tensorrt"] == version for c in calibration):
                raise BundleError("two calibration caches are stamped for TensorRT %s (%s)" % (version, cache),
                                  hint="give one cache per TensorRT version")
            rel = "%s/trt-%s.calib" % (CALIB_DIR, version)
            _write(data, staging, rel, "calib", files)
            calibration.append({"file": rel, "tensorrt": version, "header": header, "source": Path(cache).name})
            if first is None:
                first = (parsed, Path(cache).name)

        # which TensorRT versions to prepare
        wanted = [trt_version_string(v) for v in tensorrt_versions]
        per_target: Dict[str, List[str]] = {}
        for t in resolved:
            versions = [trt_version_string(v) for v in t.tensorrt_versions]
            if wanted:
                versions = [v for v in wanted if (not t.tensorrt_versions) or v in versions]
            if not versions:
                raise BundleError("no TensorRT version to prepare for target %s%s" % (
                    t.name, " (it accepts any TensorRT)" if not t.tensorrt_versions else ""),
                    hint="pass --tensorrt VERSION (e.g. --tensorrt 10.3.0)")
            per_target[t.name] = versions
        if retarget_calib and first is not None:
            parsed, source = first
            header = parsed.header
            for version in sorted({v for vs in per_target.values() for v in vs}):
                if any(c["tensorrt"] == version for c in calibration):
                    continue
                text = calib_cache.format_calibration_cache(TensorRTVersion.parse(version).cache_header_number(),
                                                            parsed.algorithm, parsed.scales)
                new_header = text.split("\n", 1)[0]
                rel = "%s/trt-%s.calib" % (CALIB_DIR, version)
                _write(text.encode("ascii"), staging, rel, "calib", files)
                calibration.append({"file": rel, "tensorrt": version, "header": new_header, "source": source,
                                    "retargeted_from": header})
                notes.append("calibration cache for TensorRT %s re-stamped from %s (same scales)" % (version, header))
        elif retarget_calib:
            raise BundleError("--retarget-calib needs a calibration cache", hint="pass --calib model.calib")

        # plan every (target, version) with the source the board will pick: find impossible builds here
        prepared: List[Prepared] = []
        device = "dla" if opts.dla_core is not None else "gpu"
        from jetforge.runtime.tensorrt.plan import read_model_info

        info = read_model_info(onnx_dst)
        qdq_info = read_model_info(qdq_dst) if qdq_dst is not None else None
        for t in resolved:
            for version in per_target[t.name]:
                source, why = choose_int8_source(version, device, opts.precision,
                                                 [c["tensorrt"] for c in calibration], qdq_dst is not None)
                if source is None and why and opts.precision == "int8":
                    prepared.append(Prepared(t.name, version, False, device, None, why))
                    continue
                cache_rel = next((c["file"] for c in calibration if c["tensorrt"] == version), None)
                plan_opts = dataclasses.replace(
                    options_for_plan, tensorrt_version=version,
                    calibration_cache=str(staging / cache_rel) if source == "cache" and cache_rel else None)
                if source == "cache" and precisions is not None and not plan_opts.layer_precisions:
                    plan_opts.layer_precisions = layer_precisions_from_file(staging / PRECISIONS)
                onnx_for = qdq_dst if source == "qdq" else onnx_dst
                try:
                    make_plan(onnx_for, t, plan_opts, model_info=qdq_info if source == "qdq" else info)
                except EngineBuildError as err:
                    prepared.append(Prepared(t.name, version, False, device, source, err.one_line()))
                    continue
                prepared.append(Prepared(t.name, version, True, device, source, why))
        if not any(p.ok for p in prepared):
            raise BundleError("the bundle builds on none of its targets: %s"
                              % "; ".join("%s/TensorRT %s: %s" % (p.target, p.tensorrt, p.reason) for p in prepared),
                              hint="change the build options or targets (see `jetforge build --plan-only`)")
        for p in prepared:
            if not p.ok:
                warnings.append("not prepared for %s with TensorRT %s: %s" % (p.target, p.tensorrt, p.reason))

        manifest = Manifest(
            name=sanitise_bundle_name(out_dir.name), jetforge_version=jetforge.__version__,
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            model={"name": sidecar.model_name, "task": sidecar.task, "source": model_path.name,
                   "inputs": [s.to_dict() for s in sidecar.inputs], "outputs": [s.to_dict() for s in sidecar.outputs],
                   "labels": len(sidecar.labels)},
            targets=[{"name": t.name, "display_name": t.display_name, "kind": t.kind,
                      "tensorrt_versions": per_target[t.name], "dla_cores": t.dla_cores,
                      "compute_capability": "%d.%d" % t.compute_capability} for t in resolved],
            prepared=prepared, files=files, calibration=calibration, build_options=opt_dict, notes=notes)
        manifest.bundle_hash = manifest.compute_hash()
        _check_created(staging, manifest)
        write_json_atomic(staging / MANIFEST, manifest.to_dict())  # last: the folder is complete from here on
        _swap_into_place(staging, out_dir)
    except BaseException:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise
    result = CreateResult(path=out_dir, manifest=manifest, warnings=warnings)
    if tar_path is not None:
        result.tar = write_tar(out_dir, tar_path)
    for w in warnings:
        log.warning("%s", w)
    return result


def _check_created(staging: Path, manifest: Manifest) -> None:
    """What `bundle create` wrote passes the checks every reader applies (no links, safe paths and name)."""
    problems = manifest_problems(manifest) + ["%s is a link" % rel for rel in links_in(staging)]
    problems += ["%s %s" % (f.path, link_problem(staging, f.path)) for f in manifest.files
                 if link_problem(staging, f.path)]
    if problems:  # pragma: no cover - a bug in create_bundle, not a user error
        raise BundleError("bundle create produced an unsafe bundle: %s" % "; ".join(problems),
                          hint="report this as a jetforge bug")


def _swap_into_place(staging: Path, out_dir: Path) -> None:
    """Rename ``staging`` to ``out_dir``; an existing ``out_dir`` (``--force``) is moved aside first, then removed."""
    old = None
    if out_dir.exists():
        old = out_dir.parent / (".%s.old-%s" % (out_dir.name, uuid.uuid4().hex[:8]))
        os.rename(str(out_dir), str(old))
    try:
        os.rename(str(staging), str(out_dir))
    except BaseException:
        if old is not None:
            os.rename(str(old), str(out_dir))
        raise
    if old is not None:
        shutil.rmtree(str(old), ignore_errors=True)


def write_tar(bundle_dir: PathLike, tar_path: PathLike) -> Path:
    """One tar file of the bundle (top folder = the bundle's name), written atomically; gzip for .tar.gz/.tgz."""
    src = Path(bundle_dir)
    dst = Path(tar_path)
    mode = "w:gz" if dst.name.lower().endswith((".tar.gz", ".tgz")) else "w"
    links = links_in(src)
    if links:
        raise BundleError("bundle %s holds symbolic links (%s): a bundle holds only plain files"
                          % (src, ", ".join(links[:4])), hint="re-create the bundle with `jetforge bundle create`")
    with atomic_output(dst, suffix=".tar") as tmp:
        with tarfile.open(str(tmp), mode) as tar:
            for path in [src] + sorted(src.rglob("*")):
                rel = path.relative_to(src).as_posix()
                arc = src.name if rel == "." else "%s/%s" % (src.name, rel)
                tar.add(str(path), arcname=arc, recursive=False)
    return dst
