"""A model that keeps its weights in external data travels whole in its bundle (issue 25, "silently wrong").

``bundle create`` copied the ``.onnx`` alone: the bundle verified "ok" without its weights, and a weights file
replaced by NaNs verified "ok" too.  Models here are real ONNX files saved with ``save_as_external_data``; the
bundled model is run by ONNX Runtime and compared with the original.
"""

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from jetforge.deploy.bundle import BundleError, create_bundle, verify_bundle  # noqa: E402
from jetforge.runtime.sidecar import read_sidecar, write_sidecar  # noqa: E402

from tests.deploy.test_bundle import NX, make_model  # noqa: E402


def external(path, location="weights.bin"):
    """``make_model``'s model, its weights moved into ``location`` beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    make_model(path, pad_bytes=4096)
    model = onnx.load(str(path))
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    write_sidecar(path, read_sidecar(path, verify_hash=False))  # the sidecar of the file as it is now
    assert (path.parent / location).is_file()
    return path


def run(model_path):
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return session.run(None, {"x": x})[0]


def test_external_weights_are_carried_hashed_and_used(tmp_path):
    model = external(tmp_path / "src" / "model.onnx")
    bundle = create_bundle(model, tmp_path / "b", [NX]).path
    files = {f.path: f.role for f in verify_bundle(bundle).manifest.files}
    assert files["weights.bin"] == "onnx_external_data" and verify_bundle(bundle).ok
    np.testing.assert_array_equal(run(bundle / "model.onnx"), run(model))  # the bundle's model reads its own copy


def test_replaced_external_weights_fail_verification(tmp_path):
    model = external(tmp_path / "src" / "model.onnx")
    bundle = create_bundle(model, tmp_path / "b", [NX]).path
    weights = bundle / "weights.bin"
    weights.write_bytes(np.full(weights.stat().st_size // 4, np.nan, np.float32).tobytes())
    report = verify_bundle(bundle)
    assert not report.ok and [c[0] for c in report.corrupt] == ["weights.bin"]


@pytest.mark.parametrize("location, why", [("../outside.bin", "climbs out"), ("/abs/w.bin", "absolute")])
def test_weights_outside_the_model_folder_are_refused(tmp_path, location, why):
    model = external(tmp_path / "src" / "model.onnx")
    proto = onnx.load(str(model), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save_model(proto, str(model))
    write_sidecar(model, read_sidecar(model, verify_hash=False))
    with pytest.raises(BundleError) as err:
        create_bundle(model, tmp_path / "b", [NX])
    assert why in err.value.one_line() or "missing" in err.value.one_line() or "cannot" in err.value.one_line()
    assert not (tmp_path / "b").exists()


def test_symlinked_weights_are_refused(tmp_path):
    model = external(tmp_path / "src" / "model.onnx")
    real = tmp_path / "elsewhere.bin"
    shutil.move(str(tmp_path / "src" / "weights.bin"), str(real))
    (tmp_path / "src" / "weights.bin").symlink_to(real)
    with pytest.raises(BundleError, match="symbolic link"):
        create_bundle(model, tmp_path / "b", [NX])


def test_qdq_weights_under_the_same_name_with_other_content_are_refused(tmp_path):
    model = external(tmp_path / "a" / "model.onnx")
    (tmp_path / "q").mkdir()
    make_model(tmp_path / "q" / "model.qdq.onnx", qdq=True, seed=7, pad_bytes=4096)
    qdq = onnx.load(str(tmp_path / "q" / "model.qdq.onnx"))
    onnx.save_model(qdq, str(tmp_path / "q" / "model.qdq.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    write_sidecar(tmp_path / "q" / "model.qdq.onnx", read_sidecar(tmp_path / "q" / "model.qdq.onnx", verify_hash=False))
    with pytest.raises(BundleError, match="already uses"):
        create_bundle(model, tmp_path / "b", [NX], qdq=tmp_path / "q" / "model.qdq.onnx")
