"""Check a bundle against its manifest (every file there, with its size and SHA-256; nothing unsafe), and open a
verified bundle folder or tar."""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from jetforge.deploy.bundle.manifest import (MANIFEST, NOT_BUNDLE_FILES, ONNX, TAR_SUFFIXES, BundleError, Manifest,
                                             manifest_problems, read_manifest)
from jetforge.deploy.bundle.tar import unpack_tar
from jetforge.deploy.safety import bundle_path_problem, link_problem, links_in
from jetforge.errors import InputFileError
from jetforge.fileio import PathLike, sha256_file


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


__all__ = ["Bundle", "VerifyReport", "is_bundle_path", "open_bundle", "verify_bundle"]
