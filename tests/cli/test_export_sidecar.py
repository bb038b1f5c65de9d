"""``jetforge export-sidecar``: a foreign detector ONNX gets its sidecar once, checked against its outputs.

The models are tiny ONNX graphs (a constant of the published output shape) made here with onnx's helper: what is
tested is the reading of their tensors, the layout check and the written sidecar, which the decoder then reads back.
"""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.vision.decode import decoder_for  # noqa: E402


def make_onnx(path, outputs, input_shape=(1, 3, 640, 640)):
    nodes, values = [], []
    for name, shape in outputs:
        nodes.append(helper.make_node("Constant", [], [name + "_shape"],
                                      value=helper.make_tensor(name + "_sv", TensorProto.INT64, [len(shape)], shape)))
        nodes.append(helper.make_node("ConstantOfShape", [name + "_shape"], [name],
                                      value=helper.make_tensor(name + "_v", TensorProto.FLOAT, [1], [0.0])))
        values.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
    image = helper.make_tensor_value_info("images", TensorProto.FLOAT, list(input_shape))
    graph = helper.make_graph(nodes, "g", [image], values)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_yolov8_onnx_gets_its_sidecar_and_decodes_through_it(tmp_path, capsys):
    model = make_onnx(tmp_path / "yolov8n.onnx", [("output0", [1, 84, 8400])])
    assert main(["export-sidecar", str(model), "--decoder", "yolov8", "--classes", "coco80", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["classes"] == 80 and out["input"]["resize"] == "letterbox"
    sidecar = json.loads((tmp_path / "yolov8n.onnx.json").read_text())
    assert sidecar["task"] == "detect" and sidecar["extra"]["decoder"]["name"] == "yolov8"
    assert sidecar["labels"][0] == "person" and sidecar["content_sha256"]
    decoder = decoder_for(model)
    assert decoder.name == "yolov8" and decoder.input_hw == (640, 640) and len(decoder.labels) == 80
    rows = np.zeros((8400, 84), np.float32)
    rows[5] = 0
    rows[5, :4] = [320, 320, 100, 200]  # a 100x200 box at the centre of the letterboxed 640x640 input
    rows[5, 4 + 2] = 0.9  # class 2, car
    from jetforge.runtime.model_facts import model_facts

    dets = decoder.decode_frames([rows.T[None]], model_facts(model).input, [(720, 1280)])[0]
    # 1280x720 letterboxed to 640x360 at y 140 (gain 0.5): input x 270..370, y 220..420 -> ((v - pad) / 0.5)
    np.testing.assert_allclose(dets.boxes, [[540, 160, 740, 560]], atol=1e-3)
    assert dets.labels[int(dets.classes[0])] == "car"


def test_an_existing_sidecar_is_kept_without_force(tmp_path, capsys):
    model = make_onnx(tmp_path / "m.onnx", [("output0", [1, 84, 8400])])
    assert main(["export-sidecar", str(model), "--decoder", "yolov8", "--classes", "coco80"]) == 0
    assert main(["export-sidecar", str(model), "--decoder", "yolov8", "--classes", "coco80"]) == 1
    assert "--force" in capsys.readouterr().err


@pytest.mark.parametrize("outputs, argv, message", [
    ([("output0", [1, 84, 8400])], ["--decoder", "yolov5", "--classes", "coco80"], "pass --decoder yolov8"),
    ([("output0", [1, 84, 8400])], ["--decoder", "yolov8", "--classes", "person,car"], "not 4 \\+ 2 classes"),
    ([("logits", [1, 1000])], ["--decoder", "yolov8", "--classes", "coco80"], "no registered decoder reads"),
    ([("output0", [1, 84, 8400])], ["--decoder", "ssd-tf", "--classes", "coco80"], "jetforge export"),
], ids=["other-layout", "class-count", "no-decoder", "ssd-tf"])
def test_outputs_that_do_not_fit_are_one_line_exit_1(tmp_path, capsys, outputs, argv, message):
    model = make_onnx(tmp_path / "m.onnx", outputs)
    assert main(["export-sidecar", str(model), *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert __import__("re").search(message, err)
    assert not (tmp_path / "m.onnx.json").exists()


def test_a_dynamic_input_needs_size(tmp_path, capsys):
    model = make_onnx(tmp_path / "m.onnx", [("output0", [1, 84, 8400])], input_shape=(1, 3, "h", "w"))
    assert main(["export-sidecar", str(model), "--decoder", "yolov8", "--classes", "coco80"]) == 1
    assert "--size" in capsys.readouterr().err
    assert main(["export-sidecar", str(model), "--decoder", "yolov8", "--classes", "coco80", "--size", "480x640"]) == 0
    assert json.loads((tmp_path / "m.onnx.json").read_text())["input"]["height"] == 480
