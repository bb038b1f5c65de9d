"""A bundle's samples.npz edited after the bundle was made (and the manifest re-hashed, so verify passes) is one
SamplesError line, never an internal error (issue 25: a flipped byte raised zipfile's BadZipFile, exit 2).

The samples are real ``samples_payload`` bytes; every third byte of them is flipped in turn and ``read_samples`` must
return arrays equal to the original or refuse in one line.  A member whose header declares far more data than it
stores is refused before NumPy allocates for it.
"""

import io
import zipfile

import numpy as np
import pytest

from jetforge.deploy.bundle_samples import (SAMPLES_JSON, SAMPLES_NPZ, BundleSamples, SamplesError, read_samples,
                                            samples_payload)


def _bundle(tmp_path, npz, meta):
    (tmp_path / "samples").mkdir(exist_ok=True)
    (tmp_path / SAMPLES_NPZ).write_bytes(npz)
    (tmp_path / SAMPLES_JSON).write_bytes(meta)
    return tmp_path


def _payload():
    rng = np.random.default_rng(0)
    return samples_payload(BundleSamples(
        names=["a.jpg", "b.jpg"], crops=rng.integers(0, 255, (2, 4, 4, 3), dtype=np.uint8),
        inputs=rng.standard_normal((2, 3, 4, 4)).astype(np.float32),
        references={"fp32": {"y": rng.standard_normal((2, 5)).astype(np.float32)}}, how={"fp32": "ONNX Runtime"}))


def test_every_flipped_byte_of_samples_npz_reads_whole_or_is_one_line(tmp_path):
    npz, meta = _payload()
    good = read_samples(_bundle(tmp_path, npz, meta))
    outcomes = {"same": 0, "refused": 0}
    for i in range(0, len(npz), 3):  # every third byte: headers, directory and data alike (~900 files)
        damaged = bytearray(npz)
        damaged[i] ^= 0x10
        try:
            samples = read_samples(_bundle(tmp_path, bytes(damaged), meta))
        except SamplesError as err:
            assert "\n" not in err.one_line() and err.one_line().strip()
            outcomes["refused"] += 1
            continue
        assert np.array_equal(samples.inputs, good.inputs) and np.array_equal(samples.crops, good.crops)
        outcomes["same"] += 1
    assert outcomes["refused"] > len(npz) // 6, outcomes  # most bytes are data or headers


def test_a_member_declaring_a_huge_array_is_refused_before_allocating(tmp_path):
    npz, meta = _payload()
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(npz)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "inputs.npy":
                data = b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + data[-64:]
            dst.writestr(info.filename, data)
    with pytest.raises(SamplesError, match="does not hold the data its header declares"):
        read_samples(_bundle(tmp_path, out.getvalue(), meta))


def test_samples_metadata_values_are_not_coerced(tmp_path):
    npz, _ = _payload()
    with pytest.raises(SamplesError, match=r"names\[0\] must be a string"):
        read_samples(_bundle(tmp_path, npz, b'{"names": [["a.jpg"], "b.jpg"], "how": {}}'))
