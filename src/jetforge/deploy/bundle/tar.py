"""A bundle as one tar file: written atomically, and extracted safely (regular files and folders only, no path
leaving the destination) into the cache, once per archive."""

import os
import shutil
import tarfile
from pathlib import Path
from typing import List, Optional

from jetforge.assets.store import cache_root
from jetforge.deploy.bundle.manifest import BundleError
from jetforge.deploy.safety import bundle_path_problem, check_bundle_path, links_in, shown_value
from jetforge.fileio import PathLike, atomic_output, require_file, sha256_file, staging_dir


# An archive may expand to at most this many times its own size, plus a fixed allowance (small archives of
# small, very compressible files - sidecars, JSON - are fine): model weights compress by ~1.1x, so a bundle
# tar is never near it, and a 1 MB .tar.gz that expands to 1 GiB (a decompression bomb) is refused.
MAX_EXPANSION = 20
EXPANSION_ALLOWANCE = 64 << 20


def expansion_limit(archive_bytes: int) -> int:
    """How many bytes an archive of ``archive_bytes`` may extract to."""
    return MAX_EXPANSION * int(archive_bytes) + EXPANSION_ALLOWANCE


def safe_extract(tar: "tarfile.TarFile", dest: Path, limit: Optional[int] = None) -> List[str]:
    """Extract regular files and folders of ``tar`` under ``dest``; refuse links, devices, escaping paths and, with
    ``limit``, an archive whose files add up to more than ``limit`` bytes (checked before each file is written)."""
    names = []
    hint = "use a tar written by `jetforge bundle create --tar`"
    total = 0
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
            total += member.size
            if limit is not None and total > limit:
                raise BundleError("archive expands to more than %d MiB (%dx its size): refused as a decompression "
                                  "bomb" % (limit >> 20, MAX_EXPANSION), hint=hint)
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
        cache_dir = cache_root() / "bundles"
    final = Path(cache_dir) / digest
    if final.is_dir():
        return single_top(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_dir(final)  # hidden, named after this process; a killed run's is removed
    try:
        try:
            limit = expansion_limit(tar_file.stat().st_size)
            free = shutil.disk_usage(str(final.parent)).free
            with tarfile.open(str(tar_file), "r:*") as tar:
                safe_extract(tar, staging, limit=min(limit, free))
        except (tarfile.TarError, EOFError, OSError) as err:
            raise BundleError("bundle archive %s is unreadable: %s" % (tar_file, err),
                              hint="copy it again, or re-create it with `jetforge bundle create --tar`") from err
        os.rename(str(staging), str(final))
    except BaseException:
        shutil.rmtree(str(staging), ignore_errors=True)
        raise
    return single_top(final)


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


__all__ = ["safe_extract", "single_top", "unpack_tar", "write_tar"]
