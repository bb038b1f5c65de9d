"""Safe file writing: atomic replace, content hashes, and never overwriting an input.

Every artifact jetforge writes (ONNX, sidecars, caches, engines, reports, videos)
goes through :func:`atomic_output`, so an interrupted run never leaves a file that
looks complete, and :func:`check_not_input` refuses an output path that is one of
the inputs of the same command.
"""

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Union

from jetforge.errors import InputFileError

PathLike = Union[str, "os.PathLike[str]"]


@contextlib.contextmanager
def atomic_output(path: PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` atomically.

    On an exception the temporary file is removed and ``path`` is left as it was.
    ``suffix`` lets writers that infer the format from the extension (OpenCV's
    VideoWriter, onnx.save) see the right one.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # The temporary name ends with the real extension: writers such as OpenCV's
    # VideoWriter choose the container from it.
    fd, tmp_name = tempfile.mkstemp(prefix="." + target.name + ".", suffix=".part" + (suffix or target.suffix),
                                    dir=str(target.parent))
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp creates 0600; give the result the permissions a plain open() would have.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_name, 0o666 & ~umask)
    try:
        yield tmp
        os.replace(str(tmp), str(target))
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_bytes_atomic(path: PathLike, data: bytes) -> Path:
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: PathLike, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks (models and videos can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def check_not_input(output: PathLike, inputs: Iterable[PathLike]) -> None:
    """Refuse to write ``output`` over any of ``inputs`` (nothing the user had is lost)."""
    out = Path(output).resolve()
    for item in inputs:
        if item is not None and Path(item).resolve() == out:
            raise InputFileError("output %s is also an input of this command" % output,
                                 hint="choose a different output path")


def require_file(path: PathLike, what: str = "file", hint: str = "") -> Path:
    """Return ``path`` as a Path if it is an existing file, else raise a clear InputFileError."""
    p = Path(path)
    if not p.exists():
        raise InputFileError("%s %s does not exist" % (what, p), hint=hint or "check the path")
    if not p.is_file():
        raise InputFileError("%s %s is not a file" % (what, p), hint=hint or "give the path of a file")
    return p
