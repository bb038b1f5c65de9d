"""The hidden staging folder a bundle is assembled in: the files written there (with their manifest entries),
the final check that what was written is what every reader accepts, and the rename into place (an interrupted
``bundle create`` never leaves something that looks complete)."""

import hashlib
import shutil
from pathlib import Path
from typing import List

from jetforge.deploy.bundle.manifest import BundleError, BundleFile, Manifest, manifest_problems
from jetforge.deploy.safety import link_problem, links_in
from jetforge.fileio import replace_dir, sha256_file


class Staging:
    """The hidden folder a bundle is assembled in, and the manifest entries of the files written there so far."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: List[BundleFile] = []

    def copy(self, src: Path, rel: str, role: str) -> Path:
        """Copy the *content* of ``src`` (a link given as input is followed: the bundle gets a plain file)."""
        dst = self.root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(str(src), str(dst))
        shutil.copystat(str(src), str(dst))
        self.files.append(BundleFile(path=rel, role=role, bytes=dst.stat().st_size, sha256=sha256_file(dst)))
        return dst

    def write(self, data: bytes, rel: str, role: str) -> Path:
        dst = self.root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(data)
        self.files.append(BundleFile(path=rel, role=role, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
        return dst




def check_created(staging: Path, manifest: Manifest) -> None:
    """What `bundle create` wrote passes the checks every reader applies (no links, safe paths and name)."""
    problems = manifest_problems(manifest) + ["%s is a link" % rel for rel in links_in(staging)]
    problems += ["%s %s" % (f.path, link_problem(staging, f.path)) for f in manifest.files
                 if link_problem(staging, f.path)]
    if problems:  # pragma: no cover - a bug in create_bundle, not a user error
        raise BundleError("bundle create produced an unsafe bundle: %s" % "; ".join(problems),
                          hint="report this as a jetforge bug")


def swap_into_place(staging: Path, out_dir: Path) -> None:
    """Rename ``staging`` to ``out_dir``; an existing ``out_dir`` (``--force``) is moved aside first, then removed."""
    replace_dir(staging, out_dir)
