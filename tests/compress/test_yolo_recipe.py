"""``student.layout: yolov8`` end to end: ``python -m jetforge.compress.recipes recipes/distill_yolov8_person.yaml``
with tiny settings (the real port as teacher, real training frames of vtest.avi), then its ``student.onnx`` in
``jetforge app detect`` on the start of vtest.avi; and the config's refusals, each one line.

Also a :class:`DecodedTeacher` check: the port exported to ONNX (decoder ``ssd-tf``) as a teacher gives the boxes
the torch port gives through :class:`PortTeacher` (the same NMS rule aside, which differs: greedy in the decoder,
Fast NMS in torch -- so the comparison is on the top boxes of views whose people are apart).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from jetforge.cli.main import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "distill_yolov8_person.yaml"
TINY = ["train.steps=2", "train.batch=2", "train.budget_s=null", "train.log_every=1", "data.limit=4",
        "data.clips=[vtest]", "student.input_size=64", "anchor_free.channels=16"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from jetforge.assets import asset_dir

    if not (asset_dir("opencv_samples") / "vtest.avi").exists():
        pytest.skip("vtest.avi not in the asset cache (jetforge assets fetch opencv_samples)")
    out = tmp_path_factory.mktemp("yolo_recipe") / "run"
    argv = [sys.executable, "-m", "jetforge.compress.recipes", str(RECIPE), "--json", "--set", "out_dir=%s" % out]
    for text in TINY:
        argv += ["--set", text]
    done = subprocess.run(argv, cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out, json.loads(done.stdout)


def test_the_recipe_trains_and_exports_a_yolov8_layout_student(trained):
    from jetforge.runtime.sidecar import read_sidecar
    from jetforge.vision.decode import decoder_for

    out, summary = trained
    assert summary["steps_done"] == 2 and summary["frames"] == 4
    result = json.loads((out / "result.json").read_text())
    assert result["layout"] == "yolov8" and result["input_size"] == {"teacher": 300, "student": 64}
    assert len(result["train"]["history"]) == 2 and all(e["positives"] > 0 for e in result["train"]["history"])
    sidecar = read_sidecar(out / "student.onnx")
    assert sidecar.extra["decoder"]["name"] == "yolov8" and sidecar.labels == ["person"]
    assert decoder_for(out / "student.onnx").name == "yolov8"
    assert (sidecar.input.height, sidecar.input.width, sidecar.input.resize) == (64, 64, "stretch")


def test_its_onnx_runs_in_app_detect_on_vtest(trained, tmp_path):
    out, _ = trained
    rc = main(["app", "detect", "--model", str(out / "student.onnx"), "--max-frames", "8", "--no-video",
               "--no-plots", "-q", "--out", str(tmp_path / "app")])
    assert rc == 0
    events = [json.loads(x) for x in (tmp_path / "app" / "events.jsonl").read_text().splitlines()]
    frames = [e for e in events if "tracks" in e]
    assert len(frames) == 8
    assert all(row[5] == "person" for e in frames for row in e["detections"])


@pytest.mark.parametrize("setting, says", [
    ("student.layout=yolo", "student.layout must be one of ssd, yolov8"),
    ("student.input_size=200", "multiple of 32"),
    ("anchor_free.scale_ranges=[64,32]", "two increasing pixel sizes"),
    ("anchor_free.radius=2", "radius"),
    ("teacher.model=nowhere.onnx", "teacher.model nowhere.onnx is not a file"),
])
def test_bad_settings_are_one_line_and_exit_1(setting, says, tmp_path, capsys):
    rc = main(["distill", "--config", str(RECIPE), "--set", "out_dir=%s" % (tmp_path / "o"), "--set", setting])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and says in err and len(err.splitlines()) <= 2, err


def test_an_ssd_student_refuses_a_teacher_model(tmp_path, capsys):
    rc = main(["distill", "--config", str(ROOT / "recipes" / "distill_ssdlite_person.yaml"), "--set",
               "teacher.model=x.onnx", "--set", "out_dir=%s" % (tmp_path / "o")])
    assert rc == 1 and "teacher.model is for student.layout: yolov8" in capsys.readouterr().err


def test_a_decoded_onnx_teacher_gives_the_ports_boxes(tmp_path):
    """The port exported to ONNX (its sidecar names ``ssd-tf``) as :class:`DecodedTeacher` against the torch port as
    :class:`PortTeacher` on the same two full frames: the best boxes agree.  Why not exactly: the decoded teacher
    sees the view rounded back to 8-bit pixels (<= 0.5 grey level, then the port's own preprocessing), and its NMS
    is greedy where the torch path's is Fast NMS; the top box of a frame is the same box either way, so IoU >= 0.95
    and a score within 0.02 bound what one grey level moves a detection (measured: < 0.005)."""
    from jetforge.assets import asset_dir, asset_path
    from jetforge.compress.distill.detection_crossgrid import CrossGridConfig
    from jetforge.compress.distill.detection_train import frame_bank_from_labels
    from jetforge.compress.distill.detection_yolo import DecodedTeacher, PortTeacher
    from jetforge.compress.distill.anchor_free import paired_iou
    from jetforge.compress.models.ssdlite_export import export_detector
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec

    graph = load_graphdef(asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb"))
    g = SSDGraph(graph)
    spec, pre = read_spec(g), read_preprocess(g)
    port = load_from_graphdef(None, graph=graph)
    export_detector(port, spec, pre, tmp_path / "port.onnx")
    bank = frame_bank_from_labels(asset_dir("opencv_samples").parent, pre, step=60, clips=["vtest"], limit=2)
    cfg = CrossGridConfig(min_score=0.3)
    x = bank.full_views([0, 1])
    want = PortTeacher(port, spec, cfg, torch.device("cpu")).boxes(x)
    decoded = DecodedTeacher(tmp_path / "port.onnx", bank, cfg)
    try:
        got = decoded.boxes(x)
    finally:
        decoded.detector.close()
    for i in range(2):
        assert bool(want[2][i, 0]) and bool(got[2][i, 0])
        assert paired_iou(got[0][i, 0], want[0][i, 0]).item() >= 0.95
        assert abs(got[1][i, 0].item() - want[1][i, 0].item()) <= 0.02
        assert abs(int(got[2][i].sum()) - int(want[2][i].sum())) <= 2  # about as many people above 0.3
