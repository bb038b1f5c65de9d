"""One estimator (issue 26): eager-PyTorch effects modelled in the command's own path, the validation it prints for
the user's case, and ``--calibrate-from`` with a recorded board-check report.

The unfolded-BatchNorm check has an independent reference: the same torch network exported twice, once as users
export it (eval mode: the exporter folds each BatchNorm into its convolution) and once with the BatchNorm nodes
kept (``TrainingMode.PRESERVE``); with ``unfolded_batchnorm`` the first must give the second's kernels.
"""

import json
from pathlib import Path

import pytest

pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from jetforge.errors import ConfigError  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
RECORDED = DATA / "board-check_orin-nx-16gb_recorded.json"
H200 = "server-hopper-h200"


class ConvBnNet(torch.nn.Module):
    """conv-bn-relu, depthwise-bn-relu, a plain conv with its own bias (no BatchNorm), pooling."""

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.a = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.c = nn.Conv2d(16, 8, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(self.c(self.b(self.a(x))))


def _export(path, fold):
    import warnings

    model = ConvBnNet().eval()
    mode = torch.onnx.TrainingMode.EVAL if fold else torch.onnx.TrainingMode.PRESERVE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 32, 32),), str(path), input_names=["input"], opset_version=17,
                          dynamo=False, training=mode, dynamic_axes={"input": {0: "b"}})
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("onebn")
    return _export(folder / "folded.onnx", True), _export(folder / "kept.onnx", False)


def test_unfolded_batchnorm_gives_back_the_kernels_eager_pytorch_runs(exports):
    from jetforge.runtime.estimate.efficiency import efficiency_set
    from jetforge.runtime.estimate.model import place, time_placed
    from jetforge.runtime.estimate.rates import target_rates

    folded, kept = exports
    target = get_target(H200)
    eff = efficiency_set("pytorch_eager_start")
    rates = target_rates(target, "fp16")
    plain = place(str(folded), 8, "fp16", target=target, fusion="none")
    unfolded = place(str(folded), 8, "fp16", target=target, fusion="none", unfold_batchnorm=True)
    reference = place(str(kept), 8, "fp16", target=target, fusion="none")
    cats = [k.category for k in unfolded.kernels]
    assert [k.category for k in plain.kernels].count("batchnorm") == 0
    assert cats == [k.category for k in reference.kernels]          # conv, bn, relu, dw, bn, relu, conv, pool
    assert cats.count("batchnorm") == 2                              # the plain conv c (own bias) gets none
    mine, ref = time_placed(unfolded, rates, eff), time_placed(reference, rates, eff)
    # the only differences: the folded convs carry a bias (16 values each) and the synthetic BatchNorm 2 constants
    # per channel instead of ONNX's 4 -- 64 bytes each against the ~260 KB each kernel moves at batch 8: < 1e-3
    for a, b in zip(mine.kernels, ref.kernels):
        assert a.bytes == pytest.approx(b.bytes, rel=1e-3) and a.kernel.flops == pytest.approx(b.kernel.flops)
    assert mine.latency_s == pytest.approx(ref.latency_s, rel=1e-3)
    # the TensorRT grouping never unfolds: BatchNorm stays folded in its convolution's epilogue
    trt = place(str(folded), 8, "fp16", target=target, fusion="tensorrt", unfold_batchnorm=True)
    assert all(k.category != "batchnorm" for k in trt.kernels)


def test_a_types_launch_cost_replaces_the_sets_per_kernel_cost(exports):
    from jetforge.runtime.estimate.efficiency import efficiency_set
    from jetforge.runtime.estimate.model import kernel_time, place
    from jetforge.runtime.estimate.rates import target_rates

    target = get_target(H200)
    eff = efficiency_set("pytorch_eager_start")
    eff.gpu["conv"].launch_us = 9.0
    eff.gpu["batchnorm"].launch_us = None               # no own cost: the set's per-kernel cost
    eff.overheads.gpu_kernel_us = 1.0
    placed = place(str(exports[0]), 1, "fp16", target=target, fusion="none", unfold_batchnorm=True)
    rates = target_rates(target, "fp16")
    by_cat = {k.category: kernel_time(k, placed.info, rates, eff, "fp16").overhead_s for k in placed.kernels}
    assert by_cat["conv"] == pytest.approx(9e-6) and by_cat["batchnorm"] == pytest.approx(1e-6)


def test_shipped_eager_set_carries_its_provenance_and_its_own_fusion():
    from jetforge.runtime.estimate.efficiency import efficiency_set

    eff = efficiency_set("pytorch_eager")
    assert eff.fusion == "none" and eff.unfolded_batchnorm
    p = eff.provenance
    root = Path(__file__).resolve().parents[2]
    assert (root / p.measured).is_file() and (root / p.fit_result).is_file() and (root / p.script).is_file()
    fit = json.loads((root / p.fit_result).read_text())
    held = [v for v in eff.validation if v.kind == "held_out"][0]
    assert held.median_abs_pct == pytest.approx(fit["stats"]["held_out"]["all"]["median_abs_pct"], abs=0.05)
    assert held.worst_ratio == pytest.approx(fit["stats"]["held_out"]["all"]["worst_ratio"], abs=0.005)
    # the shipped factors are the fit's: the result file's fitted rows are what the set estimates
    assert eff.gpu["conv"].compute == pytest.approx(fit["fitted_params"]["gpu.conv.compute"], abs=1e-4)


@pytest.mark.parametrize("target, precision, dla, expect", [
    ("orin-nx-16gb", "int8", None, "GPU INT8 on jetson: 34 published Jetson points"),
    ("orin-nx-16gb", "fp16", None, "GPU FP16 on jetson: GPU FP16, never fitted on"),
    ("orin-nx-16gb", "fp32", None, "GPU FP32 on a jetson target: NOT validated"),
    (H200, "fp16", None, "GPU FP16 on server: held out of a 5-fold fit"),
])
def test_the_validation_printed_is_the_one_for_the_users_case(exports, target, precision, dla, expect):
    from jetforge.runtime.estimate.result import estimate

    eff = "pytorch_eager" if target == H200 else "tensorrt"
    est = estimate(str(exports[0]), get_target(target), precision, [1], dla_core=dla, efficiency=eff)
    assert any(line.startswith(expect) for line in est.validation), est.validation
    if "NOT" in expect:
        assert "checked only for DLA FP16 on jetson, DLA INT8 on jetson, GPU FP16 on jetson, GPU INT8 on jetson" \
            in est.validation[0]


def test_dla_case_prints_the_dla_check(exports):
    from jetforge.runtime.estimate.result import estimate

    est = estimate(str(exports[0]), get_target("orin-nx-16gb"), "int8", [1], dla_core=0)
    assert [v.split(":")[0] for v in est.validation] == ["GPU INT8 on jetson", "DLA INT8 on jetson", "DLA INT8 on jetson"]
    fp16 = estimate(str(exports[0]), get_target("orin-nx-16gb"), "fp16", [1], dla_core=0)
    assert [v.split(":")[0] for v in fp16.validation] == ["GPU FP16 on jetson", "DLA FP16 on jetson"]
    assert "Orin DLA FP16 is unchecked" in fp16.validation[1]


# ---------------------------------------------------------------------------------------------------------------
# boards report back: --calibrate-from
# ---------------------------------------------------------------------------------------------------------------
def test_calibrate_from_a_recorded_board_check(exports, tmp_path, capsys):
    from jetforge.cli.main import main
    from jetforge.runtime.estimate.efficiency import efficiency_set

    out = tmp_path / "local.yaml"
    assert main(["estimate", str(exports[0]), "--target", "orin-nx-16gb", "--calibrate-from", str(RECORDED),
                 "-o", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["measured_ms"] for p in data["points"]] == [1.2, 0.9]
    assert data["after"]["median_abs_pct"] < data["before"]["median_abs_pct"]
    eff = efficiency_set(str(out))
    assert eff.name == "tensorrt_orin-nx-16gb_measured" and eff.validation[0].kind == "fitted"
    # independent of the calibration's own bookkeeping: the command with the written file gives the "after" numbers
    for point in data["points"]:
        assert main(["estimate", str(exports[0]), "--target", "orin-nx-16gb", "--precision", point["precision"],
                     "--efficiency", str(out), "--json"]) == 0
        again = json.loads(capsys.readouterr().out)
        assert again["batches"][0]["latency_ms"] == pytest.approx(point["after_ms"], rel=1e-9)
        assert again["validation_for_this_case"][0].startswith("GPU %s on jetson: calibrated on 2 board-check"
                                                               % point["precision"].upper())


def test_calibrate_refuses_another_board_and_the_packaged_file(exports, tmp_path):
    from jetforge.runtime.estimate.calibrate import calibrate
    from jetforge.runtime.estimate.efficiency import EFFICIENCY_FILE

    with pytest.raises(ConfigError, match="measured board orin-nx-16gb, not --target agx-orin-64gb"):
        calibrate(str(exports[0]), get_target("agx-orin-64gb"), str(RECORDED), str(tmp_path / "x.yaml"))
    with pytest.raises(ConfigError, match="refusing to write the packaged efficiency.yaml"):
        calibrate(str(exports[0]), get_target("orin-nx-16gb"), str(RECORDED), str(EFFICIENCY_FILE))
    bad = tmp_path / "bc.json"
    bad.write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(ConfigError, match="not a jetforge board-check report"):
        calibrate(str(exports[0]), get_target("orin-nx-16gb"), str(bad), str(tmp_path / "x.yaml"))


def test_unseen_models_are_the_issues_twelve_and_never_in_the_fit():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.common.estimate_models import H200_MODELS, UNSEEN_MODELS, select

    unseen = [s.name for s in UNSEEN_MODELS]
    assert len(unseen) == 12 and not set(unseen) & {s.name for s in H200_MODELS}
    assert {"efficientnet_b3", "efficientnet_v2_s", "regnet_x_3_2gf", "mnasnet1_3", "resnet34", "resnet152",
            "wide_resnet50_2", "googlenet", "mobilenet_v3_small", "shufflenet_v2_x2_0", "convnext_small",
            "densenet169"} == set(unseen)
    assert [s.name for s in select("unseen")] == unseen
    with pytest.raises(SystemExit, match="unknown model"):
        select("resnet9000")
