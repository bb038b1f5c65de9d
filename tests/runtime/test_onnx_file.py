"""The checked ONNX reader, and every command that reads an ONNX file from a user, on broken files.

Each broken kind (missing, a folder, empty, text, random bytes, every truncation of a real
model, parsed-but-hollow models) must end in one JetforgeError line naming the file, exit 1
through the CLI, and never an internal error (exit 2) or a silent empty result.
"""

import os
import sys

import numpy as np
import pytest

from jetforge.cli.main import main
from jetforge.errors import InputFileError, JetforgeError, ModelError
from jetforge.runtime.onnx_file import check_onnx_file, read_onnx

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _conv_model(nodes=True, inputs=True, outputs=True, weight=True, opset=True):
    """A real 1x3x16x16 -> 1x4x16x16 conv + relu model, or a hollow variant of it."""
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4, 16, 16])
    w = numpy_helper.from_array(np.linspace(-1, 1, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3), "w")
    layers = [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
              helper.make_node("Relu", ["c"], ["output"], name="relu")]
    graph = helper.make_graph(layers if nodes else [], "g", [x] if inputs else [], [y] if outputs else [],
                              [w] if weight else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if not opset:
        del model.opset_import[:]
    return model


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good.onnx"
    onnx.save(_conv_model(), str(path))
    return path


def _write(path, data):
    path.write_bytes(data)
    return path


def _broken_files(folder, good):
    data = good.read_bytes()
    rng = np.random.default_rng(12)
    folder.mkdir(exist_ok=True)
    return {
        "empty": (_write(folder / "empty.onnx", b""), "is empty (0 bytes)"),
        "text": (_write(folder / "text.onnx", b"name: resnet\nlayers: 50\n"), "is a text file, not an ONNX model"),
        "random": (_write(folder / "random.onnx", b"\x00" + rng.integers(0, 256, 400, dtype=np.uint8).tobytes()),
                   "is not a readable ONNX model"),
        "truncated": (_write(folder / "truncated.onnx", data[: len(data) // 2]), "is not a readable ONNX model"),
        "folder": (folder, "is a folder, not a file"),
        "missing": (folder / "nope.onnx", "does not exist"),
    }


def test_a_real_model_is_read_whole(good):
    model = read_onnx(good)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]
    assert check_onnx_file(good) == good


def test_every_broken_kind_is_one_error_line_naming_the_file(tmp_path, good):
    for kind, (path, words) in _broken_files(tmp_path / "bad", good).items():
        with pytest.raises(JetforgeError) as err:
            read_onnx(path)
        line = err.value.one_line()
        assert words in line and str(path) in line and "(fix: " in line and "\n" not in line, kind
        assert isinstance(err.value, InputFileError if kind in ("folder", "missing") else ModelError), kind


def test_every_truncation_of_a_real_model_is_refused(tmp_path, good):
    """Protobuf parses some prefixes (cut at a field boundary): the structure checks must catch those too."""
    data = good.read_bytes()
    cut = tmp_path / "cut.onnx"
    accepted = []
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        try:
            read_onnx(cut)
        except JetforgeError:
            continue
        accepted.append(n)
    assert accepted == []


@pytest.mark.parametrize("hollow, words", [
    (dict(nodes=False), "its graph has no nodes"),
    (dict(inputs=False), "its graph has no inputs"),
    (dict(outputs=False), "its graph has no outputs"),
    (dict(weight=False), "node conv (Conv) reads tensor 'w', which no input, initializer or node defines"),
    (dict(opset=False), "it declares no opset"),
])
def test_a_parsed_but_hollow_model_is_refused(tmp_path, hollow, words):
    path = tmp_path / "hollow.onnx"
    path.write_bytes(_conv_model(**hollow).SerializeToString())
    with pytest.raises(ModelError, match="is not a complete ONNX model") as err:
        read_onnx(path)
    assert words in err.value.one_line()


def test_a_model_with_only_constant_inputs_and_one_without_a_graph_are_refused(tmp_path):
    const = helper.make_node("Constant", [], ["output"], value=numpy_helper.from_array(np.ones(3, np.float32)))
    graph = helper.make_graph([const], "g", [], [helper.make_tensor_value_info("output", TensorProto.FLOAT, [3])])
    path = _write(tmp_path / "const.onnx", helper.make_model(graph).SerializeToString())
    with pytest.raises(ModelError, match="its graph has no inputs"):
        read_onnx(path)
    no_graph = _write(tmp_path / "header.onnx", onnx.ModelProto(ir_version=8).SerializeToString())
    with pytest.raises(ModelError, match="it has no graph"):
        read_onnx(no_graph)


def test_without_the_onnx_package_the_parser_free_checks_still_run(tmp_path, good, monkeypatch):
    """A Jetson runtime may lack `onnx`: empty and text files are still refused; the reading library does the rest."""
    files = _broken_files(tmp_path / "bad", good)
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` now raises ImportError
    for kind in ("empty", "text", "folder"):
        with pytest.raises(JetforgeError) as err:
            check_onnx_file(files[kind][0])
        assert files[kind][1] in err.value.one_line(), kind
    assert check_onnx_file(files["truncated"][0]) == files["truncated"][0]  # left to ONNX Runtime / TensorRT


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.startswith("jetforge:")]
    return code, out, lines


@pytest.mark.parametrize("kind", ["empty", "text", "random", "truncated", "folder"])
def test_dla_check_refuses_a_broken_onnx_with_exit_1(tmp_path, good, capsys, kind):
    """The reported bug: no sidecar, and protobuf's DecodeError escaped as an internal error (exit 2)."""
    path, words = _broken_files(tmp_path / "bad", good)[kind]
    code, out, lines = _cli(capsys, "dla-check", path, "--target", "orin-nx-16gb", "--strict")
    assert code == 1 and out == "" and len(lines) == 1
    assert lines[0].startswith("jetforge: error: ") and words in lines[0]


def test_build_plan_only_refuses_an_empty_model_and_writes_no_plan(tmp_path, good, capsys):
    path, _ = _broken_files(tmp_path / "bad", good)["empty"]
    code, _, lines = _cli(capsys, "build", path, "--target", "orin-nx-16gb", "--plan-only")
    assert code == 1 and "empty.onnx is empty (0 bytes)" in lines[0]
    assert sorted(os.listdir(str(tmp_path / "bad"))) == ["empty.onnx", "random.onnx", "text.onnx", "truncated.onnx"]
    code, _, _ = _cli(capsys, "build", good, "--target", "orin-nx-16gb", "--plan-only")
    assert code == 0 and (tmp_path / "good.engine.plan.json").is_file()  # the same command on a real model


@pytest.mark.parametrize("kind", ["empty", "text", "truncated"])
def test_bench_refuses_a_broken_onnx_with_exit_1(tmp_path, good, capsys, kind):
    path, words = _broken_files(tmp_path / "bad", good)[kind]
    code, _, lines = _cli(capsys, "bench", path, "--iterations", "2", "--warmup", "1")
    assert code == 1 and len(lines) == 1
    if kind == "truncated":  # ONNX Runtime parses it (the reader only checks bytes first: no onnx import there)
        assert "is not a readable ONNX model" in lines[0]
    else:
        assert words in lines[0]


def test_bundle_create_names_the_users_file_not_its_copy(tmp_path, good, capsys):
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar

    path, _ = _broken_files(tmp_path / "bad", good)["truncated"]
    write_sidecar(path, ModelSidecar(task="classify", model_name="m", inputs=[TensorSpec("input", [1, 3, 16, 16])],
                                     outputs=[TensorSpec("output", [1, 4, 16, 16])]))
    code, _, lines = _cli(capsys, "bundle", "create", path, "--target", "orin-nx-16gb", "--out", tmp_path / "b")
    assert code == 1 and "ONNX model %s is not a readable ONNX model" % path in lines[0]
    assert not (tmp_path / "b").exists()


def test_calibration_reads_models_through_the_checked_reader(tmp_path, good):
    from jetforge.calibrate.stats import load_model

    path, _ = _broken_files(tmp_path / "bad", good)["empty"]
    with pytest.raises(ModelError, match="empty.onnx is empty"):
        load_model(path)
    assert [n.op_type for n in load_model(good).graph.node] == ["Conv", "Relu"]
