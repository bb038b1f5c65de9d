"""A few real samples inside a bundle, with jetforge's FP32 and simulated-INT8 outputs on them.

``jetforge board-check`` compares the engines it builds on the board with what jetforge computed on
the workstation, on the same inputs; ``export-config --normalize-in-model`` checks the normalised
model on real pixels.  So ``bundle create --samples DIR_OR_VIDEO`` stores:

* ``samples/samples.npz`` (numpy, read with ``allow_pickle=False``):
  ``crops`` ``(N, H, W, C)`` uint8: the frames cut and resized to the network input (BGR, as OpenCV
  decodes them; the sidecar's colour conversion and normalisation not yet applied);
  ``inputs`` ``(N, ...)`` float32: the tensors the model is fed (sidecar preprocessing applied);
  ``fp32__<output>`` and ``int8_simulated__<output>``: every output of the model on ``inputs``, FP32
  in ONNX Runtime and INT8 in jetforge's simulation of TensorRT's arithmetic (from the Q/DQ model,
  or from the calibration cache's scales);
* ``samples/samples.json``: sample names, where they came from, and how each reference was computed.

Both files are listed in the manifest with their SHA-256 like every other file of the bundle.
"""

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from jetforge.errors import JetforgeError
from jetforge.jsonfile import ValueRefused, expect, expect_text, expect_texts, read_json

SAMPLES_NPZ = "samples/samples.npz"
SAMPLES_JSON = "samples/samples.json"
ROLE_NPZ = "samples"
ROLE_JSON = "samples_meta"
REFERENCES = ("fp32", "int8_simulated")
MAX_SAMPLES = 64


class SamplesError(JetforgeError):
    """A bundle's samples are missing, malformed, or do not fit its model."""


@dataclass
class BundleSamples:
    """The samples of a bundle and the reference outputs on them."""

    names: List[str]
    crops: np.ndarray
    inputs: np.ndarray
    references: Dict[str, Dict[str, np.ndarray]]          # "fp32" / "int8_simulated" -> output -> (N, ...)
    how: Dict[str, str] = field(default_factory=dict)      # reference -> how it was computed
    meta: Dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(len(self.inputs))


def samples_payload(samples: BundleSamples) -> Tuple[bytes, bytes]:
    """The bytes of ``samples.npz`` and ``samples.json`` for :func:`jetforge.deploy.bundle.create_bundle`."""
    n = len(samples.inputs)
    if not 1 <= n <= MAX_SAMPLES:
        raise SamplesError("a bundle carries 1 to %d samples, got %d" % (MAX_SAMPLES, n),
                           hint="use --samples-count to choose fewer")
    arrays: Dict[str, np.ndarray] = {"crops": np.ascontiguousarray(samples.crops, dtype=np.uint8),
                                     "inputs": np.ascontiguousarray(samples.inputs, dtype=np.float32)}
    for ref, outputs in samples.references.items():
        if ref not in REFERENCES:
            raise SamplesError("unknown reference %r" % ref)
        for name, value in outputs.items():
            if len(value) != n:
                raise SamplesError("reference %s/%s has %d rows for %d samples" % (ref, name, len(value), n))
            arrays["%s__%s" % (ref, name)] = np.ascontiguousarray(value, dtype=np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    meta = dict(samples.meta, names=list(samples.names), how=dict(samples.how), count=n,
                references={ref: sorted(out) for ref, out in samples.references.items()})
    return buffer.getvalue(), (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode("utf-8")


def read_samples(bundle_dir: Any, sidecar: Any = None) -> Optional[BundleSamples]:
    """The samples of a (verified) bundle folder, or None if it has none; checked against ``sidecar``."""
    root = Path(bundle_dir)
    npz, meta_path = root / SAMPLES_NPZ, root / SAMPLES_JSON
    if not npz.is_file() and not meta_path.is_file():
        return None
    meta = read_json(meta_path, "the bundle's samples metadata", SamplesError,
                     hint="re-create the bundle with `jetforge bundle create --samples`")
    arrays = _load_npz(npz)
    if not isinstance(meta, dict) or "crops" not in arrays or "inputs" not in arrays:
        raise SamplesError("the bundle's samples lack crops or inputs", hint="re-create the bundle with --samples")
    crops, inputs = arrays["crops"], arrays["inputs"]
    n = len(inputs)
    try:
        names = expect_texts(meta.get("names", []), "names", 1000)
        how = {k: expect_text(v, "how.%s" % k[:40], 1000) for k, v in expect(meta.get("how", {}), dict, "how").items()}
    except ValueRefused as err:
        raise SamplesError("the bundle's samples metadata: %s" % err, hint="re-create the bundle with --samples") \
            from None
    if crops.dtype != np.uint8 or crops.ndim != 4 or len(crops) != n or len(names) != n or n < 1:
        raise SamplesError("the bundle's samples are inconsistent (%d crops, %d inputs, %d names)"
                           % (len(crops), n, len(names)), hint="re-create the bundle with --samples")
    refs: Dict[str, Dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        if "__" in key:
            ref, name = key.split("__", 1)
            if ref not in REFERENCES or len(value) != n:
                raise SamplesError("the bundle's samples hold an unexpected array %r" % key[:60])
            refs.setdefault(ref, {})[name] = value
    if sidecar is not None:
        _check_fit(inputs, refs, sidecar)
    return BundleSamples(names=names, crops=crops, inputs=inputs, references=refs,
                         how=how, meta=meta)


MAX_NPZ_BYTES = 1 << 30  # 64 samples of 8192x8192x3 crops would be 12 GiB; a bundle's real samples are megabytes


def _load_npz(npz: Path) -> Dict[str, np.ndarray]:
    """The arrays of ``samples.npz``, each member's declared shape checked against its stored size first.

    The file may have been edited and the bundle re-hashed: any damage (a flipped byte gives zipfile's BadZipFile,
    NotImplementedError, RuntimeError "encrypted", EOFError) is one :class:`SamplesError`, and a member header
    declaring more data than it stores is refused before NumPy allocates for it.  Messages never quote the file.
    """
    import zipfile

    fmt = np.lib.format
    try:
        with zipfile.ZipFile(str(npz)) as archive:
            total = 0
            for index, info in enumerate(archive.infolist()):
                total += info.file_size
                if total > MAX_NPZ_BYTES:
                    raise SamplesError("the bundle's samples hold more than %d MiB" % (MAX_NPZ_BYTES >> 20),
                                       hint="re-create the bundle with fewer --samples-count")
                with archive.open(info) as member:
                    version = fmt.read_magic(member)
                    header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                    shape, _, dtype = header(member)
                    count = 1
                    for d in shape:
                        count *= int(d)
                    if dtype.hasobject or count * dtype.itemsize != info.file_size - member.tell():
                        raise SamplesError("array %d of the bundle's samples does not hold the data its header "
                                           "declares" % index,
                                           hint="re-create the bundle with `jetforge bundle create --samples`")
        with np.load(str(npz), allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except SamplesError:
        raise
    except Exception as err:  # zipfile, zlib and numpy raise a dozen kinds for a damaged file; none is ours
        raise SamplesError("the bundle's samples %s are damaged (%s)" % (SAMPLES_NPZ, type(err).__name__),
                           hint="re-create the bundle with `jetforge bundle create --samples`") from None


def _check_fit(inputs: np.ndarray, refs: Dict[str, Dict[str, np.ndarray]], sidecar: Any) -> None:
    want = list(sidecar.inputs[0].shape[1:])
    if list(inputs.shape[1:]) != [d if isinstance(d, int) else inputs.shape[1 + i] for i, d in enumerate(want)]:
        raise SamplesError("the bundle's sample inputs have shape %s; the model takes %s"
                           % (list(inputs.shape), sidecar.inputs[0].shape), hint="re-create the bundle with --samples")
    outputs = [t.name for t in sidecar.outputs]
    for ref, values in refs.items():
        if sorted(values) != sorted(outputs):
            raise SamplesError("the bundle's %s reference covers outputs %s; the model has %s"
                               % (ref, sorted(values), sorted(outputs)), hint="re-create the bundle with --samples")


def sample_crops(bundle_dir: Any) -> List[np.ndarray]:
    """The network-size crops of a bundle's samples (empty when it has none)."""
    samples = read_samples(bundle_dir)
    return [] if samples is None else list(samples.crops)


__all__ = ["BundleSamples", "REFERENCES", "ROLE_JSON", "ROLE_NPZ", "SAMPLES_JSON", "SAMPLES_NPZ", "SamplesError",
           "read_samples", "sample_crops", "samples_payload"]
