"""``jetforge bench`` on the CPU: ONNX Runtime on the real MobileNetV2, JSON keys and values, the plot file."""

import json

import numpy as np
import pytest

from jetforge.errors import ConfigError

LAT_KEYS = {"count", "mean_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "total_s", "fps"}


@pytest.fixture(scope="module")
def result(mobilenet_onnx):
    from jetforge.runtime.bench import run_benchmark
    from jetforge.runtime.session import open_session

    with open_session(mobilenet_onnx, threads=1) as s:
        return run_benchmark(s, batch=2, iterations=12, warmup=2, split_iterations=10)


def test_latency_statistics_and_throughput(result):
    d = result.to_dict()
    lat = d["latency_ms"]
    assert set(lat) == LAT_KEYS and lat["count"] == 12
    assert 0 < lat["min_ms"] <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p95_ms"] <= lat["p99_ms"] <= lat["max_ms"]
    assert len(d["latency_samples_ms"]) == 12
    assert lat["mean_ms"] == pytest.approx(float(np.mean(d["latency_samples_ms"])), rel=1e-4)
    thr = d["throughput"]
    assert thr["images_per_s"] == pytest.approx(2 * thr["inferences_per_s"])
    assert thr["inferences_per_s"] == pytest.approx(1000.0 / lat["mean_ms"], rel=0.2)  # loop time ~ sum of calls
    assert d["batch"] == 2 and d["inputs"] == {"input": {"shape": [2, 3, 224, 224], "dtype": "float32"}}
    assert d["backend"]["backend"] == "onnxruntime" and "CPUExecutionProvider" in d["backend"]["description"]


def test_warmup_steady_state_and_stage_split(result):
    d = result.to_dict()
    assert d["warmup_iterations"] == 2 and d["warmup"]["first_call_ms"] > 0
    assert d["warmup"]["steady_mean_ms"] == pytest.approx(d["latency_ms"]["mean_ms"])
    assert set(d["steady_state"]) == {"first_half_mean_ms", "second_half_mean_ms", "drift_pct"}
    stages = d["stages_ms"]
    assert stages["source"] == "host clock" and stages["iterations"] == 10
    assert "h2d" not in stages  # ONNX Runtime on the CPU has no transfers to time
    assert stages["compute"]["count"] == 10 and stages["compute"]["mean_ms"] <= stages["wall"]["mean_ms"]
    assert 0 <= d["host_overhead_ms_per_call"] < stages["wall"]["mean_ms"]


def test_memory_and_energy_are_reported_or_explained(result):
    d = result.to_dict()
    proc = d["memory"]["process"]
    assert proc["rss_mib"] > 10 and proc["peak_rss_mib"] >= proc["rss_mib"]
    gpu = d["memory"]["gpu"]
    assert gpu.get("available") is True or gpu["reason"]
    energy = d["energy"]
    assert energy.get("mj_per_inference") is not None or energy["reason"]
    json.dumps(d)  # serialisable as is


def test_plot_file_written(result, tmp_path):
    pytest.importorskip("matplotlib")
    from jetforge.runtime.bench import plot_histogram

    path = plot_histogram(result, tmp_path / "hist.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_fixed_batch_and_bad_counts_are_config_errors(mobilenet_onnx):
    from jetforge.runtime.bench import make_inputs, run_benchmark
    from jetforge.runtime.session import open_session

    with open_session(mobilenet_onnx, threads=1) as s:
        feeds = make_inputs(s, batch=3, seed=1)
        assert feeds["input"].shape == (3, 3, 224, 224) and 0 <= feeds["input"].min() < feeds["input"].max() < 1
        with pytest.raises(ConfigError, match="iterations"):
            run_benchmark(s, iterations=0)
        with pytest.raises(ConfigError, match="batch"):
            make_inputs(s, batch=0)


def test_cli_bench_json_and_out_dir(mobilenet_onnx, tmp_path, capsys):
    from jetforge.cli.main import main

    code = main(["bench", str(mobilenet_onnx), "--iterations", "5", "--warmup", "1", "--threads", "1", "--json",
                 "--out", str(tmp_path / "res"), "--plot", str(tmp_path / "p.png")])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["latency_ms"]["count"] == 5 and data["iterations"] == 5
    assert json.loads((tmp_path / "res" / "bench.json").read_text())["latency_ms"]["count"] == 5
    assert (tmp_path / "res" / "latency.png").is_file() and (tmp_path / "p.png").is_file()
    assert sorted(data["files"]) == sorted([str(tmp_path / "res" / "bench.json"), str(tmp_path / "res" / "latency.png"),
                                            str(tmp_path / "p.png")])


def test_cli_bench_table_and_errors(mobilenet_onnx, capsys):
    from jetforge.cli.main import main

    assert main(["bench", str(mobilenet_onnx), "--iterations", "3", "--warmup", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "steady state" in out and "throughput" in out and "host overhead" in out and "p99" in out
    assert main(["bench", str(mobilenet_onnx), "--cuda-graph"]) == 1
    assert "no CUDA-graph mode" in capsys.readouterr().err
    assert main(["bench", str(mobilenet_onnx), "--dla-core", "0"]) == 1
    assert "does not run on DLA" in capsys.readouterr().err
