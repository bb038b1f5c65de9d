"""``bundle create --qdq`` and ``qat --translate`` judge a Q/DQ model's scales and zero points by one rule set.

Issue 25: ``bundle create --qdq`` bundled Q/DQ models with scales of NaN, Inf, 0, a negative or a denormal number
and with non-zero zero points, all of which ``qat --translate`` refuses (and TensorRT's parser after it, on the
board).  The Q/DQ models here are jetforge's own (``insert_qdq`` over a real conv/ReLU/residual/Gemm graph) with one
activation scale or zero point replaced; both commands must refuse each one naming the node, and accept the
unedited model.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

from jetforge.calibrate.qdq.export import insert_qdq  # noqa: E402
from jetforge.calibrate.qdq.translate import translate_qdq  # noqa: E402
from jetforge.cli.main import main  # noqa: E402
from jetforge.errors import CalibrationError  # noqa: E402
from jetforge.runtime.qdq_scales import scale_problem  # noqa: E402
from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar  # noqa: E402

from tests.calibrate.test_qdq_translate import AMAX, float_model  # noqa: E402

EDITS = {  # name -> (which input of the Q node: 1 scale, 2 zero point, the new value, words of the refusal)
    "NaN scale": (1, np.array(np.nan, np.float32), "not finite"),
    "infinite scale": (1, np.array(np.inf, np.float32), "not finite"),
    "zero scale": (1, np.array(0.0, np.float32), "must be positive"),
    "negative scale": (1, np.array(-0.01, np.float32), "must be positive"),
    "denormal scale": (1, np.array(1e-40, np.float32), "denormal"),
    "non-zero zero point": (2, np.array(3, np.int8), "non-zero zero point"),
    "uint8 zero point": (2, np.array(0, np.uint8), "UINT8"),
}


def _edited(name):
    model = insert_qdq(float_model(), AMAX)
    if name is None:
        return model
    which, value, _ = EDITS[name]
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "r1")
    init = next(i for i in model.graph.initializer if i.name == q.input[which])
    init.CopyFrom(numpy_helper.from_array(value, init.name))
    return model


def _files(tmp_path, model):
    plain, qdq = tmp_path / "m.onnx", tmp_path / "m.qdq.onnx"
    onnx.save(float_model(), str(plain))
    onnx.save(model, str(qdq))
    write_sidecar(plain, ModelSidecar(task="classify", model_name="m", inputs=[TensorSpec("input", [1, 1, 12, 12])],
                                      outputs=[TensorSpec("logits", [1, 10])]))
    return plain, qdq


@pytest.mark.parametrize("name", sorted(EDITS))
def test_bundle_create_refuses_the_qdq_parameters_qat_translate_refuses(tmp_path, capsys, name):
    words = EDITS[name][2]
    with pytest.raises(CalibrationError, match=words):
        translate_qdq(_edited(name))
    plain, qdq = _files(tmp_path, _edited(name))
    code = main(["bundle", "create", str(plain), "--qdq", str(qdq), "--target", "orin-nx-16gb",
                 "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("jetforge:")]
    assert code == 1 and len(lines) == 1 and words in lines[0] and "QuantizeLinear" in lines[0], err
    assert not (tmp_path / "b").exists()


def test_a_valid_qdq_model_is_bundled_and_translated(tmp_path, capsys):
    assert translate_qdq(_edited(None)).trained
    plain, qdq = _files(tmp_path, _edited(None))
    code = main(["bundle", "create", str(plain), "--qdq", str(qdq), "--target", "orin-nx-16gb",
                 "--shape", "input=1x1x12x12", "--out", str(tmp_path / "b")])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "b" / "model.qdq.onnx").is_file()


@pytest.mark.parametrize("value, ok", [(1.17549435e-38, True), (1e-3, True), (1e-39, False), (2.7e36, False),
                                       (3.4e38 / 127 * 0.99, True)])
def test_the_scale_rule_at_float32_edges(value, ok):
    """Smallest normal float32 accepted, a denormal refused; a range (scale x 127) past float32's max refused."""
    assert (scale_problem(np.array([value], np.float32)) is None) == ok
