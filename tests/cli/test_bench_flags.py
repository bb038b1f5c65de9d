"""``jetforge bench``'s trtexec flags on a tiny real ONNX model run by ONNX Runtime: --shapes, --duration,
--warmup-ms, --load-inputs (and hostile .npy files), --export-times, --profile, and the printed trtexec lines of
bench and build.  Values are checked against what the test itself made or counted: the array it saved, the number
of timed calls, the spans the run reports, hand-summed profile events."""

import json
import pickle

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from jetforge.cli.main import main  # noqa: E402
from test_info import CLASSES, H, W, make_net  # noqa: E402


@pytest.fixture
def net(tmp_path):
    path = tmp_path / "net.onnx"
    make_net(path, sidecar=False)
    return path


def bench_json(capsys, *argv):
    rc = main(["bench", *map(str, argv), "--threads", "1", "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(captured.out)


def one_line_error(capsys, *argv):
    assert main(["bench", *map(str, argv), "--threads", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("jetforge: error:"), err
    return err


def test_shapes_set_the_session_input_and_trtexec_line(net, capsys):
    from jetforge.runtime.bench_inputs import bench_feeds
    from jetforge.runtime.session import open_session

    with open_session(net, threads=1) as s:
        feeds = bench_feeds(s, ["x=5x3x%dx%d" % (H, W)])
        assert feeds["x"].shape == (5, 3, H, W) and s.infer(feeds)["y"].shape == (5, CLASSES)
    data = bench_json(capsys, net, "--shapes", "x=8x3x%dx%d" % (H, W), "--iterations", 4, "--warmup", 1)
    assert data["batch"] == 8 and data["inputs"]["x"]["shape"] == [8, 3, H, W]
    assert data["trtexec"] == ("trtexec --onnx=%s --shapes=x:8x3x%dx%d --iterations=4 --duration=0" % (net, H, W))


@pytest.mark.parametrize("spec, words", [
    ("z=1x3x16x16", "unknown input"), ("x=1x4x16x16", "axis 1 of input 'x' is fixed at 3"),
    ("x=1x3x16", "has 3 axes"), ("x=1x3xAx16", "non-integer"),
])
def test_shapes_refused_clearly(net, capsys, spec, words):
    assert words in one_line_error(capsys, net, "--shapes", spec, "--iterations", 1)


def test_duration_warmup_ms_and_export_times(net, tmp_path, capsys):
    times = tmp_path / "times.json"
    data = bench_json(capsys, net, "--iterations", 3, "--duration", 0.3, "--warmup", 1, "--warmup-ms", 100,
                      "--export-times", times)
    run = data["run"]
    assert run["steady_wall_s"] >= 0.3 and data["iterations"] > 3  # the duration, not the count, ended the run
    assert run["warmup_wall_ms"] >= 100 and data["warmup_iterations"] > 1
    rows = json.loads(times.read_text())
    assert len(rows) == data["iterations"] == data["latency_ms"]["count"] == len(data["latency_samples_ms"])
    starts = [r["startMs"] for r in rows]
    assert starts == sorted(starts) and all(r["endMs"] >= r["startMs"] for r in rows)
    # each row's latency is its own span (rounding: 1e-6 ms each) and the samples the statistics were made of
    assert all(abs(r["endMs"] - r["startMs"] - r["latencyMs"]) < 3e-6 for r in rows)
    assert np.allclose([r["latencyMs"] for r in rows], data["latency_samples_ms"], atol=2e-6)
    assert rows[-1]["endMs"] <= 1000 * run["steady_wall_s"] + 1e-3


def test_load_inputs_uses_the_file(net, tmp_path, capsys):
    from jetforge.runtime.bench_inputs import bench_feeds
    from jetforge.runtime.session import open_session

    x = np.random.default_rng(7).standard_normal((2, 3, H, W)).astype(np.float32)
    np.save(str(tmp_path / "x.npy"), x)
    with open_session(net, threads=1) as s:
        feeds = bench_feeds(s, [], ["x:%s" % (tmp_path / "x.npy")])
    assert np.array_equal(feeds["x"], x)  # the very values, not random ones of that shape
    data = bench_json(capsys, net, "--load-inputs", "x:%s" % (tmp_path / "x.npy"), "--iterations", 2)
    assert data["batch"] == 2 and data["inputs"]["x"] == {"shape": [2, 3, H, W], "dtype": "float32"}
    assert "--loadInputs=x:%s" % (tmp_path / "x.bin") in data["trtexec"]


def _npy(tmp_path, case):
    path = tmp_path / ("%s.npy" % case)
    if case == "float64":
        np.save(str(path), np.zeros((1, 3, H, W)))
    elif case == "shape":
        np.save(str(path), np.zeros((1, 4, H, W), np.float32))
    elif case == "pickle":
        np.save(str(path), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif case == "truncated":
        np.save(str(path), np.zeros((1, 3, H, W), np.float32))
        path.write_bytes(path.read_bytes()[:-100])
    elif case == "huge":  # a header promising 4 PB: refused from the header, nothing allocated
        np.save(str(path), np.zeros((1, 3, H, W), np.float32))
        data = path.read_bytes().replace(b"(1, 3, 16, 16)", b"(1000000000000, 3, 16, 16)")
        path.write_bytes(data)
    elif case == "text":
        path.write_text("1 2 3\n")
    elif case == "raw_pickle":
        path.write_bytes(pickle.dumps({"x": 1}))
    return path


@pytest.mark.parametrize("case, words", [
    ("float64", "astype(np.float32)"), ("shape", "axis 1 is 4"), ("pickle", "pickle"), ("truncated", "cut short"),
    ("huge", "cut short"), ("text", "not a NumPy .npy"), ("raw_pickle", "not a NumPy .npy"),
])
def test_hostile_or_mismatched_input_files(net, tmp_path, capsys, case, words):
    err = one_line_error(capsys, net, "--load-inputs", "x:%s" % _npy(tmp_path, case), "--iterations", 1)
    assert words in err


def test_profile_sums_per_node_and_op(net, tmp_path, capsys):
    out = tmp_path / "profile.json"
    data = bench_json(capsys, net, "--iterations", 20, "--warmup", 1, "--profile", out)
    prof = json.loads(out.read_text())
    assert prof == data["profile"] and prof["calls"] == 20
    assert "Conv" in {r["name"] for r in prof["by_op"]} and "Gemm" in {r["name"] for r in prof["by_op"]}
    assert sum(r["percentage"] for r in prof["by_op"]) == pytest.approx(100.0, abs=1e-6)
    assert sum(r["total_ms"] for r in prof["by_node"]) == pytest.approx(prof["node_time_ms"], rel=1e-9)
    # node kernels run inside their calls: node time per call is at most the call's own time
    assert prof["node_time_ms"] / prof["calls"] <= prof["mean_call_ms"] * 1.0001
    assert "--exportProfile=%s --separateProfileRun" % out in data["trtexec"]


def test_ort_trace_summary_by_hand():
    from jetforge.runtime.bench_profile import summarize_ort_trace

    def node(name, op, ts, dur):
        return {"cat": "Node", "name": name + "_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}

    events = [{"cat": "Session", "name": "model_run", "ts": t, "dur": 90} for t in (0, 100, 200)]
    events += [node("c1", "Conv", 5, 50), node("r1", "Relu", 60, 10),            # warm-up call: dropped
               node("c1", "Conv", 105, 40), node("r1", "Relu", 150, 20),
               node("c1", "Conv", 205, 60), node("r1", "Relu", 270, 20),
               {"cat": "Node", "name": "c1_fence_before", "ts": 104, "dur": 1}]  # not a kernel
    s = summarize_ort_trace(events, skip_runs=1)
    assert s["calls"] == 2 and s["node_time_ms"] == pytest.approx((40 + 20 + 60 + 20) / 1000.0)
    conv = next(r for r in s["by_op"] if r["name"] == "Conv")
    assert conv["total_ms"] == pytest.approx(0.1) and conv["ms_per_call"] == pytest.approx(0.05)
    assert conv["percentage"] == pytest.approx(100 * 100 / 140.0)
    assert [r["name"] for r in s["by_node"]] == ["c1", "r1"]


def test_build_prints_the_trtexec_line(net, tmp_path, capsys):
    cache = tmp_path / "net.calib"
    cache.write_text("TRT-100300-EntropyCalibration2\nx: 3c010204\nc: 3d4ccccd\ny: 3c23d70a\n")
    argv = ["build", str(net), "--target", "agx-orin-64gb", "--tensorrt", "10.3", "--precision", "int8",
            "--calib", str(cache), "--dla-core", "0", "--plan-only", "--json", "--workspace-mib", "1024"]
    assert main(argv + ["--shapes", "x=1x3x%dx%d" % (H, W)]) == 0
    plan = json.loads(capsys.readouterr().out)
    shapes = "x:1x3x%dx%d" % (H, W)
    assert plan["trtexec"] == (
        "trtexec --onnx=%s --fp16 --int8 --allowGPUFallback --calib=%s --useDLACore=0 --memPoolSize=workspace:1024 "
        "--minShapes=%s --optShapes=%s --maxShapes=%s --saveEngine=%s"
        % (net, cache, shapes, shapes, shapes, tmp_path / "net.engine"))
    assert main(argv + ["--shape", "x=1x3x%dx%d" % (H, W)]) == 0  # --shape and --shapes: one option
    assert json.loads(capsys.readouterr().out)["trtexec"] == plan["trtexec"]
