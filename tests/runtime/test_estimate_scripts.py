"""The estimator's check scripts: the published-points file, the fast re-timing the fits use, the H200 trace parsing.

The device script (``benchmarks/estimator/estimate_h200.py``) cannot run its CUDA part here; what it does with the
profiler's trace is plain Python and is checked on a hand-written trace in the documented Chrome trace
layout (complete events ``ph: X``; ``cuda_runtime`` launches and ``kernel`` events linked by
``args.correlation``; ``user_annotation`` ranges from ``record_function``).
"""

import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "estimator"))  # the study's scripts; its helpers: benchmarks.common

import estimate_h200  # noqa: E402
from estimate_graphs import tiny_net  # noqa: E402

from jetforge.targets import get_target  # noqa: E402

PUBLISHED_FIT = ROOT / "benchmarks" / "estimator" / "results" / "xeon-2core_2026-12-06_published-jetson.json"


# ---------------------------------------------------------------------------------------------------------------
# the published points
# ---------------------------------------------------------------------------------------------------------------
def test_every_published_point_has_a_source_board_and_mode():
    from estimate_published import load_points

    data = load_points()
    points = data["points"]
    assert len(points) >= 30
    boards = {p["board"] for p in points}
    assert boards == {"agx-orin-64gb", "orin-nx-16gb", "xavier-nx", "agx-xavier", "jetson-nano"}
    for p in points:
        assert p["source"].startswith(("mlcommons/", "NVIDIA/", "NVIDIA-AI-IOT/")), p["id"]
        target = get_target(p["board"])
        if p["power_mode"] is not None:
            target.power_mode(p["power_mode"])            # raises if the profile does not have the mode
        assert target.supports_precision(p["precision"], "dla" if p["devices"] == "dla" else "gpu"), p["id"]
        assert p["value"] > 0
        if p.get("use", True) and p["devices"] != "dla":
            assert p["devices"] == "gpu" or p.get("batch_source"), p["id"]   # GPU+DLA batches are sourced
    fitted_on = [p for p in points if p.get("use", True) and p.get("fit", True)]
    assert len(fitted_on) == 34 and {p["precision"] for p in fitted_on} == {"int8"}   # the fit is MLPerf's and DLA-SW's
    checks = {(p["devices"], p["precision"]) for p in points if p.get("use", True) and not p.get("fit", True)}
    assert {("gpu", "fp16"), ("dla", "fp16"), ("dla", "int8")} <= checks            # FP16 and DLA are checked
    assert sum(1 for p in points if not p.get("use", True)) == 9       # 2 MLPerf without batch sizes, 7 VGG-BN twins


def test_published_points_file_is_checked(tmp_path):
    from estimate_published import DATA, load_points

    text = DATA.read_text().replace('    source: "mlcommons/inference_results_v1.1@912dcdb9:closed/NVIDIA/results/'
                                    'AGX_Xavier_TRT/resnet50/SingleStream', '    source_was: "x')
    broken = tmp_path / "points.yaml"
    broken.write_text(text)
    with pytest.raises(ValueError, match="agx-xavier-resnet50-singlestream: missing source"):
        load_points(broken)
    fp32 = tmp_path / "fp32.yaml"
    fp32.write_text(DATA.read_text().replace("    precision: fp16\n", "    precision: fp32\n", 1))
    with pytest.raises(ValueError, match="precision must be one of"):
        load_points(fp32)


# ---------------------------------------------------------------------------------------------------------------
# the fast re-timing must be the estimator's roofline
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dla", [None, 0])
def test_vectorised_prediction_equals_kernel_time(dla):
    from benchmarks.common.estimate_fit import features, params_of, predict, total_us

    from jetforge.runtime.estimate.efficiency import efficiency_set
    from jetforge.runtime.estimate.model import place, time_placed
    from jetforge.runtime.estimate.rates import target_rates

    target = get_target("orin-nx-16gb")
    eff = efficiency_set("tensorrt", fitted=False)
    eff.gpu["conv"].launch_us = 7.5          # a type's own per-kernel cost must reach the fast path too
    placed = place(tiny_net(), 4, "int8", target=target, dla_core=dla)
    rates = target_rates(target, "int8", "15W", dla=dla is not None)
    reference = time_placed(placed, rates, eff)
    f = features(placed, rates, eff)
    times = predict(f, params_of(eff))
    assert list(times) == pytest.approx([k.time_s * 1e6 for k in reference.kernels], rel=1e-9)
    assert total_us(f, params_of(eff)) == pytest.approx(reference.latency_s * 1e6, rel=1e-9)


def test_pattern_search_finds_a_known_minimum():
    from benchmarks.common.estimate_fit import fit

    best = fit(lambda p: (p["a"] - 0.3) ** 2 + (p["b"] - 7.0) ** 2, {"a": 1.0, "b": 1.0}, ["a", "b"],
               {"a": (0.01, 2.0), "b": (0.0, 20.0)}, rounds=40)
    assert best["a"] == pytest.approx(0.3, rel=0.05) and best["b"] == pytest.approx(7.0, rel=0.05)


# ---------------------------------------------------------------------------------------------------------------
# the H200 script's trace parsing and module mapping
# ---------------------------------------------------------------------------------------------------------------
def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_kernels_go_to_the_innermost_module_of_their_launch():
    trace = {"traceEvents": [
        _x("user_annotation", "mod::<root>", 0, 100),
        _x("user_annotation", "mod::layer1", 10, 40),
        _x("user_annotation", "mod::layer1.0.conv1", 12, 10),
        _x("cuda_runtime", "cudaLaunchKernel", 14, 2, correlation=1),
        _x("user_annotation", "mod::layer1.0.relu", 30, 5),
        _x("cuda_driver", "cuLaunchKernel", 31, 1, correlation=2),
        _x("cuda_runtime", "cudaLaunchKernel", 45, 1, correlation=3),    # in layer1, after its children
        _x("cuda_runtime", "cudaLaunchKernel", 80, 1, correlation=4),    # in the root only
        _x("kernel", "conv_kernel", 20, 7.5, tid=7, correlation=1),
        _x("kernel", "relu_kernel", 40, 1.5, tid=7, correlation=2),
        _x("kernel", "add_kernel", 50, 2.0, tid=7, correlation=3),
        _x("gpu_memset", "Memset", 90, 0.5, tid=7, correlation=4),
        _x("kernel", "orphan", 95, 3.0, tid=7, correlation=99),
        _x("gpu_user_annotation", "mod::layer1", 20, 40, tid=7),          # GPU-side copy of a range: ignored
    ]}
    per, total, orphans = estimate_h200.attribute_kernels(trace)
    assert per == {"layer1.0.conv1": [7.5], "layer1.0.relu": [1.5], "layer1": [2.0], "<root>": [0.5]}
    assert total == pytest.approx(14.5) and orphans == 1


def test_external_id_links_a_kernel_when_the_launch_is_missing():
    trace = {"traceEvents": [
        _x("user_annotation", "mod::fc", 0, 10),
        _x("cpu_op", "aten::addmm", 2, 5, **{"External id": 7}),
        _x("kernel", "gemm", 20, 4.0, tid=7, correlation=5, **{"External id": 7}),
    ]}
    per, _, orphans = estimate_h200.attribute_kernels(trace)
    assert per == {"fc": [4.0]} and orphans == 0


def test_cpu_dry_run_uses_self_wall_time():
    trace = {"traceEvents": [_x("user_annotation", "mod::<root>", 0, 100), _x("user_annotation", "mod::a", 10, 30),
                             _x("user_annotation", "mod::a.b", 15, 10), _x("user_annotation", "mod::c", 50, 20)]}
    assert estimate_h200.self_wall_times(trace) == {"<root>": [50.0], "a": [20.0], "a.b": [10.0], "c": [20.0]}


def test_onnx_node_names_map_to_module_paths():
    """The exported node name -> qualified module name rule the prune estimate path resizes weights with."""
    from jetforge.compress.prune.latency_sources import _module_path

    assert _module_path("/layer1/layer1.0/conv1/Conv") == "layer1.0.conv1"
    assert _module_path("/features/features.1/conv/conv.0/conv.0.0/Conv") == "features.1.conv.0.0"
    assert _module_path("/features/features.10/conv/conv.1/Conv") == "features.10.conv.1"
    assert _module_path("/backbone/body/layer1/layer1.0/conv1/Conv") == "backbone.body.layer1.0.conv1"
    assert _module_path("/fc/Gemm") == "fc" and _module_path("/Flatten") == ""


def _synthetic_configs(slowdown_of):
    """Tiny-net configs whose 'measured' totals are the start set's own estimate x a per-model slowdown."""
    from benchmarks.common.estimate_fit import features, params_of, total_us

    from jetforge.runtime.estimate.efficiency import efficiency_set
    from jetforge.runtime.estimate.model import place
    from jetforge.runtime.estimate.rates import target_rates

    target = get_target("server-hopper-h200")
    eff = efficiency_set("pytorch_eager_start", fitted=False)
    configs = []
    for i, batch in enumerate((1, 2, 4)):
        placed = place(tiny_net(), batch, "fp16", target=target, fusion="none")
        f = features(placed, target_rates(target, "fp16"), eff)
        name = "m%d" % i
        configs.append({"model": name, "group": "test", "batch": batch, "placed": placed, "features": f,
                        "graph_us": total_us(f, params_of(eff)) * slowdown_of(name)})
    return configs, eff


def test_held_out_estimate_never_sees_the_held_out_model():
    """K-fold by model: a model's held-out estimate must not move when only its own measurement changes, while
    another model's (whose training folds contain it) does; and the held-out number is the command's time_placed."""
    from estimate_h200_fit import command_ms, held_out

    configs, eff = _synthetic_configs(lambda name: 2.0)
    before, _ = held_out(configs, eff, 3)
    changed, _ = _synthetic_configs(lambda name: 6.0 if name == "m0" else 2.0)
    after, _ = held_out(changed, eff, 3)
    assert after[("m0", 1)] == before[("m0", 1)]
    assert after[("m1", 2)] != before[("m1", 2)]
    assert command_ms(configs[0], eff) > 0


# ---------------------------------------------------------------------------------------------------------------
# the shipped efficiency set
# ---------------------------------------------------------------------------------------------------------------
def test_shipped_fit_is_the_committed_published_fit():
    """efficiency.yaml's tensorrt fit block must be what estimate_published.py fitted (the committed result)."""
    import json

    from jetforge.runtime.estimate.efficiency import efficiency_set

    result = json.loads(PUBLISHED_FIT.read_text())
    fitted = result["fitted_parameters"]
    fit = efficiency_set("tensorrt", fitted=False).fit
    pairs = [(fit.gpu_compute_scale, fitted["s_gpu"]), (fit.dla_compute_scale, fitted["s_dla"]),
             (fit.dla_depthwise_scale, fitted["s_dla_dw"]), (fit.gpu_memory_scale, fitted["s_mem_gpu"]),
             (fit.dla_memory_scale, fitted["s_mem_dla"]), (fit.gpu_kernel_us, fitted["gpu_kernel_us"]),
             (fit.dla_subgraph_us, fitted["dla_subgraph_us"]), (fit.inference_us, fitted["inference_us"])]
    for shipped, measured in pairs:
        assert shipped == pytest.approx(measured, abs=0.05)   # the YAML rounds scales to 0.001, overheads to 0.1 us
    assert result["points_used"] == 34


def test_fit_block_multiplies_the_starting_values(tmp_path):
    from jetforge.errors import ConfigError
    from jetforge.runtime.estimate.efficiency import EFFICIENCY_FILE, efficiency_set

    prior, applied = efficiency_set("tensorrt", fitted=False), efficiency_set("tensorrt")
    fit = prior.fit
    assert applied.gpu["conv"].compute == pytest.approx(prior.gpu["conv"].compute * fit.gpu_compute_scale)
    assert applied.dla["conv_depthwise"].compute == pytest.approx(
        prior.dla["conv_depthwise"].compute * fit.dla_compute_scale * fit.dla_depthwise_scale)
    assert applied.dla["conv"].memory == pytest.approx(prior.dla["conv"].memory * fit.dla_memory_scale)
    assert applied.overheads.dla_subgraph_us == fit.dla_subgraph_us and applied.fit is None
    bad = tmp_path / "eff.yaml"
    bad.write_text(EFFICIENCY_FILE.read_text().replace("gpu_kernel_us: 3.0,", "gpu_kernel_usec: 3.0,", 1))
    with pytest.raises(ConfigError, match="gpu_kernel_us"):
        efficiency_set("tensorrt", path=str(bad))
