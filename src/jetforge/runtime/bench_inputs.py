"""The inputs of a benchmark: shapes given by name (``--shapes``) and arrays read from ``.npy`` files.

trtexec's habits, with jetforge's rules for files from others:

* ``--shapes input=8x3x224x224`` names an input and gives every axis.  An unknown name is a did-you-mean error;
  a rank or a static axis the model does not have is one line naming the axis, never a backend exception later.
* ``--load-inputs input:x.npy`` reads a NumPy ``.npy`` file without pickles (``allow_pickle=False``: a pickled
  object array would run code).  Its header is read first: a file whose header promises more data than the
  file holds, or more than the memory free now, is refused before anything is allocated; its dtype must be the
  model's (no silent cast: the hint says how to convert) and its shape must fit the model and ``--shapes``.

Torch-free, Python 3.8.
"""

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import ConfigError, InputFileError, UnknownNameError
from jetforge.fileio import require_file
from jetforge.runtime.bench import make_inputs
from jetforge.runtime.measure import memory_shortfall
from jetforge.runtime.session.base import check_tensor, format_shape
from jetforge.runtime.sidecar import static_shape
from jetforge.runtime.tensorrt.profile import parse_shape

#: a ``.npy`` header longer than this is not NumPy's (it writes at most a few hundred bytes)
MAX_HEADER_BYTES = 1 << 16


def split_specs(values: Sequence[str]) -> List[str]:
    """``["a=1x3,b=2x4", "c=5"]`` -> ``["a=1x3", "b=2x4", "c=5"]``: a comma starts a new entry only where the next
    piece names one (``NAME=``), so dims written ``1,3,224,224`` stay one entry."""
    out: List[str] = []
    for value in values:
        for piece in str(value).split(","):
            if "=" in piece or not out:
                out.append(piece)
            else:
                out[-1] += "," + piece
    return [entry for entry in out if entry.strip()]


def parse_shapes(values: Sequence[str]) -> Dict[str, List[int]]:
    """``--shapes`` values -> ``{name: dims}``; a name given twice is an error (which one did the user mean?)."""
    shapes: Dict[str, List[int]] = {}
    for entry in split_specs(values):
        name, dims = parse_shape(entry)
        if name in shapes:
            raise ConfigError("--shapes names input %r twice" % name, hint="give each input once")
        shapes[name] = dims
    return shapes


def resolve_shapes(session: Any, shapes: Mapping[str, Sequence[int]], batch: Optional[int]) -> Dict[str, List[int]]:
    """Every input's concrete shape: from ``shapes`` where given (checked against the model), else the model's
    with a dynamic batch axis set to ``batch`` (default: the batch ``shapes`` gives, else 1)."""
    names = [spec.name for spec in session.inputs]
    for name in shapes:
        if name not in names:
            raise UnknownNameError("input of %s in --shapes" % session.path.name, name, names)
    given_batches = {int(dims[0]) for dims in shapes.values() if dims}
    if batch is not None and given_batches - {batch}:
        raise ConfigError("--batch %d but --shapes/--load-inputs give a batch of %s"
                          % (batch, " and ".join(str(b) for b in sorted(given_batches))),
                          hint="leave out --batch (the shapes give it), or make the shapes agree")
    if batch is None:
        batch = given_batches.pop() if len(given_batches) == 1 else 1
    out: Dict[str, List[int]] = {}
    for spec in session.inputs:
        if spec.name not in shapes:
            out[spec.name] = static_shape(spec, batch, "the benchmark")
            continue
        dims = [int(d) for d in shapes[spec.name]]
        if len(dims) != len(spec.shape):
            raise ConfigError("--shapes %s=%s has %d axes; input %r of %s has %d (%s)"
                              % (spec.name, "x".join(map(str, dims)), len(dims), spec.name, session.path.name,
                                 len(spec.shape), format_shape(spec.shape)),
                              hint="give every axis, e.g. %s=%s" % (spec.name, _example(spec.shape)))
        for axis, (want, got) in enumerate(zip(spec.shape, dims)):
            if isinstance(want, int) and want > 0 and want != got:
                raise ConfigError("--shapes %s=%s: axis %d of input %r is fixed at %d in %s, not %d"
                                  % (spec.name, "x".join(map(str, dims)), axis, spec.name, want, session.path.name,
                                     got), hint="only dynamic axes (%s) can be chosen; e.g. %s=%s"
                                  % (format_shape(spec.shape), spec.name, _example(spec.shape)))
        out[spec.name] = dims
    return out


def _example(shape: Sequence[Any]) -> str:
    return "x".join(str(d) if isinstance(d, int) and d > 0 else "1" for d in shape)


def parse_load_inputs(values: Sequence[str]) -> Dict[str, Path]:
    """``--load-inputs NAME:FILE.npy`` values (repeatable, or comma-separated as trtexec's) -> ``{name: path}``."""
    out: Dict[str, Path] = {}
    for value in values:
        for entry in str(value).split(","):
            name, sep, path = entry.partition(":")
            if not sep or not name.strip() or not path.strip():
                raise ConfigError("--load-inputs %r is not NAME:FILE.npy" % entry,
                                  hint="e.g. --load-inputs input:frame.npy (np.save('frame.npy', x))")
            if name.strip() in out:
                raise ConfigError("--load-inputs names input %r twice" % name.strip(), hint="give each input once")
            out[name.strip()] = Path(path.strip())
    return out


def read_npy_header(path: Path) -> Tuple[Tuple[int, ...], np.dtype, bool]:
    """(shape, dtype, fortran_order) of a ``.npy`` file from its header alone; refuses what is not a plain array."""
    fmt = np.lib.format
    with open(str(path), "rb") as f:
        try:
            version = fmt.read_magic(f)
            reader = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dtype = reader(f, max_header_size=MAX_HEADER_BYTES) if _takes_max(reader) else reader(f)
        except (ValueError, OSError, SyntaxError, TypeError) as err:
            raise InputFileError("%s is not a NumPy .npy array file: %s" % (path, str(err).splitlines()[0][:200]),
                                 hint="save the input with np.save(PATH, array)") from None
        offset = f.tell()
    if dtype.hasobject:
        raise InputFileError("%s holds Python objects (a pickle), not numbers: refused" % path,
                             hint="save a numeric array: np.save(PATH, x.astype(np.float32))")
    needed = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape else dtype.itemsize
    have = path.stat().st_size - offset
    if needed > have:
        raise InputFileError("%s promises %s %s (%d bytes) but holds %d bytes of data: the file is cut short"
                             % (path, list(shape), dtype, needed, have), hint="save the array again")
    return tuple(shape), dtype, bool(fortran)


def _takes_max(reader: Any) -> bool:
    import inspect

    return "max_header_size" in inspect.signature(reader).parameters


def load_inputs(session: Any, files: Mapping[str, Path], shapes: Mapping[str, Sequence[int]]) -> Dict[str, np.ndarray]:
    """The arrays of ``files`` (``{input name: .npy path}``), each checked against the model and ``shapes``."""
    names = [spec.name for spec in session.inputs]
    specs = {spec.name: spec for spec in session.inputs}
    out: Dict[str, np.ndarray] = {}
    for name, path in files.items():
        if name not in specs:
            raise UnknownNameError("input of %s in --load-inputs" % session.path.name, name, names)
        p = require_file(path, "input file", hint="check the path of --load-inputs %s:FILE" % name)
        shape, dtype, _ = read_npy_header(p)
        short = memory_shortfall(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        if short:
            raise InputFileError("--load-inputs %s: %s takes %s" % (name, p, short), hint="give a smaller array")
        spec = specs[name]
        if dtype != np.dtype(spec.dtype):
            raise ConfigError("--load-inputs %s: %s holds %s, input %r of %s is %s"
                              % (name, p.name, dtype, name, session.path.name, spec.dtype),
                              hint="convert it: np.save(PATH, x.astype(np.%s))" % spec.dtype)
        want = list(shapes.get(name) or [])
        if want and list(shape) != want:
            raise ConfigError("--load-inputs %s: %s has shape %s, the benchmark's input is %s"
                              % (name, p.name, "x".join(map(str, shape)), "x".join(map(str, want))),
                              hint="make --shapes %s=%s, or save an array of that shape"
                                   % (name, "x".join(map(str, shape))))
        array = np.load(str(p), allow_pickle=False)
        check_tensor(spec, array, session.path.name)
        out[name] = np.ascontiguousarray(array)
    return out


def bench_feeds(session: Any, shapes: Sequence[str] = (), load: Sequence[str] = (), batch: Optional[int] = None,
                seed: int = 0) -> Dict[str, np.ndarray]:
    """The feeds of ``jetforge bench``: arrays from ``load`` (``NAME:FILE.npy``), random inputs of the shapes
    ``shapes`` (``NAME=DIMS``) gives for the others, a dynamic batch axis elsewhere set to ``batch`` (default: the
    batch the shapes or files give, else 1)."""
    explicit = parse_shapes(shapes)
    loaded = load_inputs(session, parse_load_inputs(load), explicit)
    merged = dict(explicit)
    merged.update({name: list(array.shape) for name, array in loaded.items()})
    resolved = resolve_shapes(session, merged, batch)
    first = next(iter(resolved.values()), [1])
    return make_inputs(session, int(first[0]) if first else 1, seed, shapes=resolved, given=loaded)


__all__ = ["MAX_HEADER_BYTES", "bench_feeds", "load_inputs", "parse_load_inputs", "parse_shapes", "read_npy_header",
           "resolve_shapes", "split_specs"]
