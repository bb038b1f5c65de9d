"""Sessions over ONNX Runtime, on the real exported MobileNetV2 and real video frames; how backends register."""

import json
import shutil

import numpy as np
import pytest

from jetforge.errors import BackendError, InputFileError, ModelError, UnknownNameError
from jetforge.runtime.inputs import IMAGENET_TORCHVISION
from jetforge.runtime.session import BACKENDS, Session, backend_for_path, default_threads, open_session
from jetforge.runtime.sidecar import TensorSpec, sidecar_path

BICYCLES = {"mountain bike", "bicycle-built-for-two"}


@pytest.fixture(scope="module")
def session(mobilenet_onnx):
    with open_session(mobilenet_onnx, threads=1) as s:
        yield s


def top5(session, image):
    logits = session.infer({"input": IMAGENET_TORCHVISION.apply(image)[None]})["logits"]
    assert logits.shape == (1, 1000) and logits.dtype == np.float32
    return [session.sidecar.labels[i] for i in np.argsort(-logits[0])[:5]]


def test_onnxruntime_is_registered_and_chosen_for_onnx_files(tmp_path):
    assert "onnxruntime" in BACKENDS
    assert backend_for_path("m.onnx") == "onnxruntime"
    assert backend_for_path("m.engine") == "tensorrt"
    assert backend_for_path("m.pt") == "pytorch"
    with pytest.raises(ModelError, match="cannot tell which backend"):
        backend_for_path("m.bin")


def test_session_describes_the_model_and_backend(session):
    assert isinstance(session, Session)
    assert session.backend == "onnxruntime"
    assert session.inputs == [TensorSpec("input", ["batch", 3, 224, 224], "float32")]
    assert session.outputs == [TensorSpec("logits", ["batch", 1000], "float32")]
    assert session.sidecar is not None and session.sidecar.task == "classify"
    assert session.sidecar.preprocess == IMAGENET_TORCHVISION
    assert len(session.sidecar.labels) == 1000
    import onnxruntime

    text = session.describe()
    assert text == "ONNX Runtime %s CPUExecutionProvider, 1 thread" % onnxruntime.__version__
    info = session.info()
    assert info["providers"] == ["CPUExecutionProvider"] and info["intra_op_threads"] == 1
    assert info["device"] == "cpu"


def test_real_frames_are_classified_correctly(session, bikes_frames):
    assert top5(session, bikes_frames[5])[0] == "switch"  # a light switch plate on a wall
    assert {"suit", "Windsor tie"} <= set(top5(session, bikes_frames[30])[:3])  # a man in a suit and tie
    assert "cab" in top5(session, bikes_frames[75])[:3]  # a taxi roof sign
    for index in (140, 160, 175):  # bicycles behind a railing
        assert BICYCLES & set(top5(session, bikes_frames[index])), index


def test_dynamic_batch_gives_the_same_answers(session, bikes_frames):
    batch = IMAGENET_TORCHVISION.batch([bikes_frames[5], bikes_frames[140]])
    both = session.infer({"input": batch})["logits"]
    one = session.infer({"input": batch[1:]})["logits"]
    assert both.shape == (2, 1000)
    np.testing.assert_allclose(both[1], one[0], atol=1e-4)


def test_feeds_are_checked_with_clear_errors(session):
    x = np.zeros((1, 3, 224, 224), np.float32)
    with pytest.raises(UnknownNameError, match="did you mean 'input'"):
        session.infer({"inputs": x})
    with pytest.raises(ModelError, match="needs input 'input'"):
        session.infer({})
    with pytest.raises(ModelError, match="expects .* float32, got dtype float64") as err:
        session.infer({"input": x.astype(np.float64)})
    assert "astype(np.float32)" in err.value.one_line()
    with pytest.raises(ModelError, match=r"axis 2 is 200, must be 224"):
        session.infer({"input": np.zeros((1, 3, 200, 224), np.float32)})
    with pytest.raises(ModelError, match="expects 4 dimensions") as err:
        session.infer({"input": x[0]})
    assert "x[None]" in err.value.one_line()
    with pytest.raises(ModelError, match="dict name -> array"):
        session.infer(x)  # type: ignore[arg-type]


def test_missing_and_corrupt_model_files(tmp_path, mobilenet_onnx):
    with pytest.raises(InputFileError, match="does not exist"):
        open_session(tmp_path / "nope.onnx")
    text = tmp_path / "notes.onnx"
    text.write_text("this is a text file, not a model\n")
    with pytest.raises(ModelError, match=r"notes.onnx is a text file, not an ONNX model") as err:
        open_session(text)
    assert "\n" not in err.value.one_line()
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match=r"empty.onnx is empty \(0 bytes\)"):
        open_session(empty)
    half = tmp_path / "half.onnx"
    data = mobilenet_onnx.read_bytes()
    half.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="half.onnx is not a readable ONNX model: Protobuf parsing failed"):
        open_session(half)


def test_a_stale_sidecar_is_refused(tmp_path, mobilenet_onnx):
    model = tmp_path / "m.onnx"
    shutil.copy(mobilenet_onnx, model)
    data = json.loads(sidecar_path(mobilenet_onnx).read_text())
    data["content_sha256"] = "0" * 64
    sidecar_path(model).write_text(json.dumps(data))
    with pytest.raises(ModelError, match="does not belong to m.onnx"):
        open_session(model)
    with open_session(model, threads=1, verify_sidecar=False) as s:  # explicitly waived
        assert s.sidecar is not None


def test_a_model_without_sidecar_opens_with_none(tmp_path, mobilenet_onnx):
    model = tmp_path / "bare.onnx"
    shutil.copy(mobilenet_onnx, model)
    with open_session(model, threads=1) as s:
        assert s.sidecar is None and s.inputs[0].name == "input"


def test_options_and_providers_are_checked(mobilenet_onnx):
    with pytest.raises(UnknownNameError, match="did you mean 'threads'"):
        open_session(mobilenet_onnx, thread=2)
    with pytest.raises(UnknownNameError, match="runtime backend 'onnxrt'"):
        open_session(mobilenet_onnx, backend="onnxrt")
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(BackendError, match="CUDAExecutionProvider is not available"):
            open_session(mobilenet_onnx, providers="cuda")
    with open_session(mobilenet_onnx, threads=1, providers=["cpu"], optimization="basic") as s:
        assert s.info()["providers"] == ["CPUExecutionProvider"]


def test_a_closed_session_refuses_to_run(mobilenet_onnx):
    with open_session(mobilenet_onnx, threads=1) as s:
        pass
    assert s.closed
    with pytest.raises(BackendError, match="closed"):
        s.infer({"input": np.zeros((1, 3, 224, 224), np.float32)})
    s.close()  # idempotent


def test_in_memory_models_give_the_file_sessions_numbers(mobilenet_onnx, bikes_frames):
    """bytes and onnx.ModelProto open through open_session (the calibration/evaluation path), same numbers."""
    onnx = pytest.importorskip("onnx")
    x = IMAGENET_TORCHVISION.batch([bikes_frames[5], bikes_frames[75]])
    with open_session(mobilenet_onnx, threads=1) as s:
        ref = s.infer({"input": x})["logits"]
    proto = onnx.load(str(mobilenet_onnx))
    for model in (proto, mobilenet_onnx.read_bytes()):
        with open_session(model, threads=1, name="candidate") as s:
            assert s.backend == "onnxruntime" and s.sidecar is None and s.path.name == "candidate"
            np.testing.assert_array_equal(s.infer({"input": x})["logits"], ref)  # same graph, same kernels
    with open_session(proto, threads=1, optimization="disable") as s:
        # another optimisation level runs other (unfused) kernels: float rounding only, logits of scale ~10
        np.testing.assert_allclose(s.infer({"input": x})["logits"], ref, atol=1e-3)
    with pytest.raises(ModelError, match="ONNX model broken is not a readable ONNX model"):
        open_session(b"\x08\x01 not a model", name="broken")
    with pytest.raises(Exception, match="opens model files, not in-memory models"):
        open_session(proto, backend="tensorrt")


def test_selected_outputs_and_ort_options(mobilenet_onnx, bikes_frames):
    from jetforge.runtime.session.ort import session_options

    x = IMAGENET_TORCHVISION.apply(bikes_frames[5])[None]
    with open_session(mobilenet_onnx, threads=0, spinning=False) as s:  # 0 threads: ONNX Runtime's default
        assert s.info()["intra_op_threads"] == 0 and "default threads" in s.describe()
        assert list(s.infer({"input": x}, outputs=["logits"])) == ["logits"]
        with pytest.raises(UnknownNameError, match="did you mean 'logits'"):
            s.infer({"input": x}, outputs=["logit"])
    import onnxruntime

    cpus = default_threads()  # the most a session takes (thread_bound): more only take turns on the CPUs
    opts, threads = session_options(onnxruntime, cpus, "basic", False, None)
    assert threads == cpus and opts.intra_op_num_threads == cpus
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.graph_optimization_level == onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts, _ = session_options(onnxruntime, 0, "all", None, None)
    with pytest.raises(RuntimeError, match="does not have configuration"):  # unset: ORT's default (spin) kept
        opts.get_session_config_entry("session.intra_op.allow_spinning")
    with pytest.raises(Exception, match="has no graph-optimisation level"):
        open_session(mobilenet_onnx, backend="tensorrt", optimization="all")  # refused before any loading


def test_backends_register_lazily_with_their_suffixes():
    """Choosing a backend by suffix imports no backend module; each class agrees with its registration."""
    import subprocess
    import sys

    code = ("import sys; from jetforge.runtime.session import backend_for_path as b; "
            "assert (b('m.onnx'), b('m.engine'), b('m.pt2')) == ('onnxruntime', 'tensorrt', 'pytorch'); "
            "mods = [m for m in ('jetforge.runtime.session.ort', 'jetforge.runtime.tensorrt.session', "
            "'jetforge.runtime.session.torch_backend', 'onnxruntime', 'tensorrt', 'torch') if m in sys.modules]; "
            "assert not mods, mods")
    subprocess.run([sys.executable, "-c", code], check=True)
    from jetforge.runtime.session import backend_suffixes

    for name in BACKENDS:
        cls = BACKENDS.get(name)
        assert cls.name == name and tuple(cls.suffixes) == backend_suffixes(name)


def test_a_new_backend_is_one_module_and_one_registration(tmp_path, monkeypatch):
    """Where to add a session backend (docs/architecture.md): a Session subclass in a module + register_backend."""
    from jetforge.runtime.session import base, register_backend

    (tmp_path / "jf_test_echo_backend.py").write_text(
        "from pathlib import Path\n"
        "from jetforge.runtime.session import Session\n"
        "from jetforge.runtime.sidecar import TensorSpec\n"
        "class EchoSession(Session):\n"
        "    name = 'test_echo'\n"
        "    suffixes = ('.echo',)\n"
        "    option_names = ('verify_sidecar',)\n"
        "    @classmethod\n"
        "    def open(cls, path, verify_sidecar=True):\n"
        "        return cls(Path(path), [TensorSpec('x', [-1], 'float32')], [TensorSpec('y', [-1], 'float32')], None)\n"
        "    def _run(self, feeds):\n"
        "        return {'y': feeds['x'] * 2}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = tmp_path / "m.echo"
    model.write_bytes(b"echo")
    register_backend("test_echo", "jf_test_echo_backend:EchoSession", (".echo",), "doubles its input (test dummy)")
    try:
        assert backend_for_path(model) == "test_echo"
        with open_session(model) as s:
            np.testing.assert_array_equal(s.infer({"x": np.arange(3, dtype=np.float32)})["y"], [0, 2, 4])
    finally:
        BACKENDS.remove("test_echo")
        base._SUFFIXES.pop("test_echo", None)


def test_only_the_ort_backend_creates_onnxruntime_sessions():
    """Every inference goes through open_session: InferenceSession( appears in runtime/session/ort.py alone."""
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "src" / "jetforge"
    found = sorted(f.relative_to(package).as_posix() for f in package.rglob("*.py")
                   if "InferenceSession(" in f.read_text(encoding="utf-8"))
    assert found == ["runtime/session/ort.py"]
