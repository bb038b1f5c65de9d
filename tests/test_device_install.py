"""A device-side install plans a Q/DQ bundle's build without the ``onnx`` package (issue 24: it stopped with
"INT8 needs scales: neither a calibration cache nor Q/DQ nodes" because Q/DQ detection needed ``onnx``).

The device side is the wheel of the working tree installed with ``pip install --target`` (as tests/test_packaging.py
does), run from a folder outside the repository by a child interpreter whose ``sys.meta_path`` refuses ``onnx``
(``import onnx`` raises ModuleNotFoundError, as on JetPack, which ships no onnx wheel) and torch.  Not a fresh
virtual environment: that would need numpy, OpenCV and PyYAML from an index, which CI does not reach; the
blocker makes the interpreter's own ``onnx`` unreachable instead, and the test checks it was never imported.
There is no TensorRT here either, so the command runs to the end of planning and exits 3 ("TensorRT is not
installed here"), which is the board path up to the point where TensorRT's builder would be called.

The bundle is made on the "workstation" (this process, which has onnx) with the real CLI:
``jetforge bundle create MODEL --target orin-nx-16gb --calib MODEL.calib --qdq --out B``.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[1]
NX = "orin-nx-16gb"

BLOCKED = ("onnx", "onnx_graphsurgeon", "torch", "torchvision")
DEVICE = r"""
import importlib.abc, json, sys

class _NotOnTheBoard(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in %r:
            raise ModuleNotFoundError("No module named %%r (blocked: a JetPack install has none)" %% name, name=name)
        return None

sys.meta_path.insert(0, _NotOnTheBoard())
try:
    import onnx
    raise SystemExit("the blocker let onnx through")
except ModuleNotFoundError:
    pass
import jetforge
from jetforge.cli.main import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
sys.stderr.write("\n@@%%s\n" %% json.dumps({"exit": code, "jetforge": jetforge.__file__,
                                            "leaked": sorted(m for m in sys.modules if m.split(".")[0] in %r)}))
""" % (BLOCKED, BLOCKED)


@pytest.fixture(scope="module")
def device_site(tmp_path_factory):
    """The wheel of the working tree, installed with pip --target (no dependencies, no index)."""
    base = tmp_path_factory.mktemp("device")
    src = base / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(str(ROOT / name), str(src / name))
    shutil.copytree(str(ROOT / "src"), str(src / "src"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*"))
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    dist, site = base / "dist", base / "site"
    for argv in ([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)], None):
        if argv is None:
            argv = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "--target",
                    str(site), str(next(dist.glob("*.whl")))]
        proc = subprocess.run(argv, cwd=str(base), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=180)
        assert proc.returncode == 0, proc.stdout[-4000:]
    return site


def make_model(path, qdq=False):
    """A tiny real classifier (Conv-ReLU-pool, 8 classes) with its sidecar; ``qdq``: a Q/DQ pair on the input."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from jetforge.runtime.inputs import Preprocess
    from jetforge.runtime.sidecar import ModelSidecar, TensorSpec, write_sidecar

    inits = [numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w")]
    nodes, x = [], "x"
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["x", "s"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"])]
        inits.append(numpy_helper.from_array(np.asarray(0.02, dtype=np.float32), "s"))
        x = "xd"
    nodes += [helper.make_node("Conv", [x, "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
              helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    write_sidecar(path, ModelSidecar(task="classify", model_name="tiny", inputs=[TensorSpec("x", [-1, 3, 32, 32])],
                                     outputs=[TensorSpec("y", [-1, 8])], preprocess=Preprocess(height=32, width=32),
                                     labels=["c%d" % i for i in range(8)]))
    return path


def _workstation_bundle(tmp_path):
    import struct

    from jetforge.cli.main import main

    src = tmp_path / "work"
    src.mkdir()
    model = make_model(src / "model.onnx")
    make_model(src / "model.qdq.onnx", qdq=True)
    cache = src / "model.calib"
    cache.write_text("\n".join(["TRT-100300-EntropyCalibration2"] + ["%s: %s" % (n, struct.pack(">f", s).hex())
                                                                       for n, s in (("x", 1 / 127.0), ("y", 0.01))]))
    out = tmp_path / "cam"
    argv = ["bundle", "create", str(model), "--target", NX, "--calib", str(cache), "--qdq", "--out", str(out)]
    assert main(argv) == 0
    return out, src / "model.qdq.onnx"


def _on_device(site, argv, cwd):
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONNOUSERSITE="1", JETFORGE_CACHE=str(cwd / "cache"))
    proc = subprocess.run([sys.executable, "-c", DEVICE, json.dumps(argv)], cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    tail = proc.stderr.rsplit("@@", 1)
    assert len(tail) == 2, proc.stderr[-3000:]
    return json.loads(tail[1]), proc.stdout, tail[0]


def test_device_install_plans_a_qdq_bundle_without_onnx(device_site, tmp_path):
    from jetforge.optional import is_available

    if is_available("tensorrt"):
        pytest.skip("TensorRT is installed here: the build would go past planning")
    bundle, qdq = _workstation_bundle(tmp_path)
    board = tmp_path / "board"
    board.mkdir()
    result, out, err = _on_device(device_site, ["build", str(bundle), "--target", NX, "--json"], board)
    assert Path(result["jetforge"]).resolve().is_relative_to(device_site.resolve()), result
    assert result["leaked"] == [], result  # nothing imported onnx or torch
    assert "INT8 needs scales" not in err and "onnx package" not in err and "No module named" not in err, err
    assert result["exit"] == 3 and "TensorRT is not installed here" in err, err  # the end of planning, no TensorRT
    plan = json.loads(out)["plan"]
    assert plan["int8_source"] == "qdq" and "INT8" in plan["flags"] and plan["onnx_path"].endswith("model.qdq.onnx")
    assert plan["inputs"][0]["name"] == "x" and plan["tensorrt_version"] == "10.3.0"
    # the same plan for the plain Q/DQ ONNX file, and --plan-only succeeds
    argv = ["build", str(qdq), "--target", NX, "--precision", "int8", "--shape", "x=1x3x32x32", "--plan-only",
            "--json", "-o", str(board / "m.engine")]
    result, out, err = _on_device(device_site, argv, board)
    assert result["exit"] == 0 and result["leaked"] == [], err
    assert json.loads(out)["int8_source"] == "qdq"


def test_device_install_runs_the_bundles_model_in_the_app_without_onnx(device_site, tmp_path):
    """The app half of the board path without onnx: the bundle's model on ONNX Runtime (the fallback `build` names
    where TensorRT is missing), its facts read from the bundle's sidecar, events written."""
    import cv2
    import numpy as np

    bundle, _ = _workstation_bundle(tmp_path)
    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        assert cv2.imwrite(str(frames / ("f%d.png" % i)), rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    board = tmp_path / "board"
    board.mkdir()
    argv = ["app", "classify", "--model", str(bundle / "model.onnx"), "--source", str(frames), "--out",
            str(board / "run"), "--max-frames", "3", "--no-plots", "--no-video", "--threads", "1"]
    result, _, err = _on_device(device_site, argv, board)
    assert result["exit"] == 0 and result["leaked"] == [], err
    events = [json.loads(line) for line in (board / "run" / "events.jsonl").read_text().splitlines() if line.strip()]
    assert events and json.loads((board / "run" / "metrics.json").read_text())["model"]["model"] == "tiny"
