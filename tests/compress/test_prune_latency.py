"""Latency-aware pruning (a per-group latency table measured on a backend, then a greedy allocation) and the
multi-output ONNX export of a pruned two-head detector.

The table is measured with real CPU ONNX Runtime sessions; the goal-iteration test uses an analytic cost
(counted MACs of the candidate model) as its latency function, so that it is deterministic on a shared CPU.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
from torch import nn  # noqa: E402

from jetforge.compress.export import export_onnx  # noqa: E402
from jetforge.compress.prune import count_ops, prune  # noqa: E402
from jetforge.compress.prune.latency import candidate_keeps  # noqa: E402
from jetforge.errors import CompressError, ConfigError  # noqa: E402
from jetforge.runtime.session import open_session  # noqa: E402

torch.set_num_threads(1)
SHAPE = (1, 3, 64, 64)


class TwoHead(nn.Module):
    """A tiny detector: a conv backbone with a residual, a box head and a score head (two outputs)."""

    def __init__(self):
        super().__init__()

        def cbr(i, o, s=1):
            return nn.Sequential(nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU())
        self.stem = cbr(3, 32, 2)
        self.a = cbr(32, 64)
        self.b = cbr(64, 32)
        self.c = cbr(32, 96, 2)
        self.boxes = nn.Conv2d(96, 4, 1)
        self.scores = nn.Conv2d(96, 3, 1)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.b(self.a(x))
        x = self.c(x)
        return self.boxes(x), self.scores(x)


def _randomized(model):
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
    return model.eval()


def test_latency_aware_prunes_to_the_flops_goal_with_a_measured_table_and_exports_two_outputs(tmp_path):
    torch.manual_seed(0)
    model = _randomized(TwoHead())
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1))
    result = prune(model, x, flops_reduction=1.5, latency_aware=True, latency_levels=(0.5,), round_to=8,
                   protect_stem=False, inplace=False)
    totals = result.report.to_dict()["totals"]
    assert totals["flops_reduction"] >= 1.5
    table = result.report.to_dict()["latency_table"]
    assert table["base_ms"] > 0 and table["measurements"] == len(table["groups"]) >= 3
    for g in table["groups"]:
        assert g["keeps"][0] == g["classes"] and all(k % 8 == 0 for k in g["keeps"])
        assert len(g["latency_ms"]) == len(g["keeps"]) and g["latency_ms"][0] == table["base_ms"]
    assert result.report.to_dict()["latency"]["ms_after"] > 0  # measured after, in ORT
    assert result.plan.meta["latency_aware"] is True
    convs = [m for m in result.model.modules() if isinstance(m, nn.Conv2d)]
    assert all(m.out_channels % 8 == 0 for m in convs if m.out_channels > 4)

    path = tmp_path / "det.onnx"
    sidecar = export_onnx(result.model, path, SHAPE, task="detect", output_name=("boxes", "scores"))
    assert [o.name for o in sidecar.outputs] == ["boxes", "scores"]
    assert sidecar.outputs[0].shape[0] == "batch" and sidecar.outputs[1].shape[1] == 3
    batch = np.random.default_rng(0).standard_normal((2,) + SHAPE[1:]).astype(np.float32)
    with torch.no_grad():
        boxes, scores = result.model(torch.from_numpy(batch))
    with open_session(path, threads=1) as s:
        got = s.infer({"input": batch})
    assert np.abs(got["boxes"] - boxes.numpy()).max() < 1e-4
    assert np.abs(got["scores"] - scores.numpy()).max() < 1e-4


def test_multi_output_export_needs_one_name_per_output(tmp_path):
    with pytest.raises(CompressError, match="2 output tensor"):
        export_onnx(TwoHead().eval(), tmp_path / "m.onnx", SHAPE, output_name="logits")


def test_latency_goal_iterates_until_the_measured_cost_meets_it():
    torch.manual_seed(0)
    model = _randomized(TwoHead())
    x = torch.randn(SHAPE)
    calls = []

    def cost_ms(m):  # an analytic latency: counted MMACs of the candidate (deterministic)
        calls.append(1)
        return count_ops(m, x).macs / 1e6

    result = prune(model, x, latency_reduction=1.6, latency_aware=True, latency_fn=cost_ms,
                   latency_levels=(0.75, 0.5, 0.25), protect_stem=False, inplace=False)
    lat = result.report.to_dict()["latency"]
    assert lat["speedup"] >= 1.6
    iterations = result.report.to_dict()["latency_search"]["iterations"]
    assert iterations and iterations[-1]["speedup"] >= 1.6
    # the table is reusable: the same goal again measures only the candidates, not the table
    n = len(calls)
    again = prune(model, x, latency_reduction=1.6, latency_aware=True, latency_fn=cost_ms,
                  latency_table=result.latency_table, protect_stem=False, inplace=False)
    assert len(calls) - n == len(iterations) + 1  # each iteration's candidate + the final model
    assert again.plan.to_dict()["entries"] == result.plan.to_dict()["entries"]


def test_latency_aware_refuses_a_ratio_goal_and_bad_levels():
    x = torch.randn(SHAPE)
    with pytest.raises(ConfigError, match="not a ratio"):
        prune(TwoHead().eval(), x, ratio=0.5, latency_aware=True)
    with pytest.raises(ConfigError, match="latency_levels"):
        prune(TwoHead().eval(), x, flops_reduction=2.0, latency_aware=True, latency_levels=(1.5,))


def test_candidate_keeps_are_aligned_and_descending():
    from jetforge.compress.prune import DependencyGraph

    g = DependencyGraph.build(TwoHead().eval(), torch.randn(SHAPE), protect_stem=False)
    for group in g.groups:
        keeps = candidate_keeps(group, (0.75, 0.5, 0.25, 0.125), 8, 0.1)
        assert keeps[0] == len(group) and keeps == sorted(set(keeps), reverse=True)
        assert all(k % group.class_multiple(8) == 0 for k in keeps)


class FakeLatencyMeter:
    """Stands in for a backend's timer: a fixed per-call overhead plus time proportional to the counted MACs.

    With an overhead, pruning cannot remove all the time, so a large enough speed-up goal is out of
    reach, as it is on a real backend (kernel launches, memory-bound layers); deterministic on a shared CPU.
    """

    def __init__(self, x, overhead_ms):
        self.x = x
        self.overhead_ms = overhead_ms
        self.calls = 0

    def __call__(self, model):
        self.calls += 1
        return self.overhead_ms + count_ops(model, self.x).macs / 1e6


@pytest.mark.parametrize("latency_aware", [True, False])
def test_a_latency_goal_just_out_of_reach_keeps_the_fastest_model_with_a_warning(latency_aware, caplog):
    torch.manual_seed(0)
    model = _randomized(TwoHead())
    x = torch.randn(SHAPE)
    meter = FakeLatencyMeter(x, overhead_ms=count_ops(model, x).macs / 1e6)  # half the time cannot be pruned
    base_ms = meter(model)
    options = dict(latency_reduction=2.0, latency_fn=meter, protect_stem=False, inplace=False,
                   latency_aware=latency_aware)
    if latency_aware:
        options["latency_levels"] = (0.75, 0.5, 0.25)
    with caplog.at_level("WARNING", logger="jetforge.compress.prune.prune_model"):
        result = prune(model, x, **options)
    goal = result.report.to_dict()["goal"]
    assert not result.goal_met and goal["met"] is False and goal["value"] == 2.0
    # the model kept is the fastest one the search measured, and the report says how fast it is
    assert 1.0 < goal["achieved"] < 2.0
    assert goal["achieved"] == pytest.approx(base_ms / meter(result.model), rel=1e-3)  # rounded to 4 places
    assert goal["final_measurement"] == pytest.approx(goal["achieved"], rel=1e-3)  # the fake is deterministic
    warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("2.00x" in w and ("best %.2fx" % goal["achieved"] in w or "gives %.2fx" % goal["achieved"] in w)
               for w in warning), warning
    with pytest.raises(CompressError, match="2.00x"):
        prune(model, x, strict=True, **options)


def test_a_met_latency_goal_is_reported_met():
    torch.manual_seed(0)
    model = _randomized(TwoHead())
    x = torch.randn(SHAPE)
    meter = FakeLatencyMeter(x, overhead_ms=0.0)
    result = prune(model, x, latency_reduction=1.3, latency_fn=meter, protect_stem=False, inplace=False)
    goal = result.report.to_dict()["goal"]
    assert result.goal_met and goal["met"] and goal["achieved"] >= 1.3
