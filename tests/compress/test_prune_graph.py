"""The dependency graph on small purpose-built networks: each coupling rule, and each refusal, on its own."""

import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from jetforge.compress.prune import DependencyGraph, apply_plan, class_importance, make_plan, prune, select  # noqa: E402
from jetforge.errors import CompressError, ConfigError  # noqa: E402

torch.set_num_threads(1)


def _cbr(i, o, g=1, k=3):
    return nn.Sequential(nn.Conv2d(i, o, k, padding=k // 2, groups=g, bias=False), nn.BatchNorm2d(o), nn.ReLU())


class FlattenHead(nn.Module):
    """conv -> flatten of an 8x8 map -> Linear: each channel owns 64 Linear inputs."""

    def __init__(self):
        super().__init__()
        self.stem = _cbr(3, 16)
        self.body = _cbr(16, 32)
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.body(self.stem(x)), 1))


class Mixed(nn.Module):
    """Residual add, concat, chunk, channel shuffle, SE gate, grouped + depthwise conv, GroupNorm, ConvTranspose."""

    def __init__(self):
        super().__init__()
        self.stem = _cbr(3, 32)
        self.a = _cbr(32, 32)
        self.b = _cbr(32, 32)
        self.dw = _cbr(64, 64, g=64)
        self.grouped = _cbr(64, 64, g=4)
        self.se_fc1 = nn.Conv2d(64, 16, 1)
        self.se_fc2 = nn.Conv2d(16, 64, 1)
        self.gn_conv = nn.Conv2d(64, 64, 3, padding=1)
        self.gn = nn.GroupNorm(8, 64)
        self.up = nn.ConvTranspose2d(64, 48, 2, stride=2)
        self.branch = _cbr(24, 24, k=1)
        self.out = nn.Conv2d(48, 5, 1)

    def forward(self, x):
        x = self.stem(x)
        y = self.a(x) + x
        z = torch.cat([y, self.b(y)], 1)
        z = self.grouped(self.dw(z))
        s = torch.sigmoid(self.se_fc2(torch.relu(self.se_fc1(z.mean((2, 3), keepdim=True)))))
        z = z * s
        z = torch.relu(self.gn(self.gn_conv(z)))
        u = self.up(z)
        u1, u2 = u.chunk(2, dim=1)
        u = torch.cat([u1, self.branch(u2)], 1)
        b, c, h, w = u.size()
        u = u.view(b, 2, c // 2, h, w).transpose(1, 2).contiguous().view(b, c, h, w)
        return self.out(u)


class ConstantSplit(nn.Module):
    """A split with literal sizes along channels: after pruning, the sizes would be wrong."""

    def __init__(self):
        super().__init__()
        self.stem = _cbr(3, 16)
        self.a = _cbr(16, 32)
        self.b = nn.Conv2d(16, 8, 1)
        self.c = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        p, q = torch.split(self.a(self.stem(x)), [16, 16], dim=1)
        return self.b(p) + self.c(q)


class UnknownOp(nn.Module):
    """An op the pruner does not know (pixel_shuffle) sits between two convs."""

    def __init__(self):
        super().__init__()
        self.stem = _cbr(3, 16)
        self.a = _cbr(16, 32)
        self.b = _cbr(8, 16)
        self.c = nn.Conv2d(16, 4, 1)

    def forward(self, x):
        y = nn.functional.pixel_shuffle(self.a(self.stem(x)), 2)
        return self.c(self.b(y))


def _prune_and_compare_shapes(model, x, **kw):
    model.eval()
    with torch.no_grad():
        ref = model(x)
    result = prune(model, x, **kw)
    with torch.no_grad():
        out = model(x)
    assert out.shape == ref.shape
    model(x).sum().backward()
    return result


def test_flatten_to_linear_removes_whole_channel_blocks():
    torch.manual_seed(0)
    model = FlattenHead()
    result = _prune_and_compare_shapes(model, torch.randn(2, 3, 8, 8), ratio=0.5)
    assert model.body[0].out_channels == 16
    assert model.fc.in_features == 16 * 64
    entry = next(e for e in result.plan.entries if e.module == "fc" and e.dim == 1)
    # removed Linear inputs come in blocks of 64 consecutive features, one block per removed channel
    blocks = sorted({i // 64 for i in entry.removed})
    assert len(entry.removed) == 16 * 64 and len(blocks) == 16


def test_mixed_couplings_prune_and_stay_consistent(tmp_path):
    torch.manual_seed(0)
    model = Mixed()
    graph = DependencyGraph.build(model, torch.randn(1, 3, 16, 16))
    assert not graph.protected_report()
    result = _prune_and_compare_shapes(model, torch.randn(1, 3, 16, 16), ratio=0.5, round_to=4)
    # the residual stream (stem+a+b) is protected with the stem; depthwise/grouped keep whole groups
    assert model.stem[0].out_channels == 32 and model.a[0].out_channels == 32
    assert model.grouped[0].groups in (1, 2, 3) and model.grouped[0].out_channels == 16 * model.grouped[0].groups
    assert model.se_fc1.out_channels == 8
    assert model.gn.num_groups * 8 == model.gn.num_channels < 64
    assert model.up.out_channels % 2 == 0 and model.branch[0].in_channels == model.up.out_channels // 2
    assert result.report.after.params < result.report.before.params


def test_channel_shuffle_pruning_matches_the_unpruned_model_on_kept_channels():
    """With the removed channels' weights zeroed first, the pruned net computes exactly the original output."""
    torch.manual_seed(0)
    model = Mixed().eval()
    x = torch.randn(1, 3, 16, 16)
    graph = DependencyGraph.build(model, x)
    scores = class_importance(graph, model, "l1")
    removed = select(graph, scores, 0.5, round_to=4)
    plan = make_plan(graph, model, removed)
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        # Zero what the plan removes *as a producer*: conv output filters, norm affine params, biases.
        for e in plan.entries:
            m = zeroed.get_submodule(e.module)
            out_dim = 1 if getattr(m, "transposed", False) and e.tensor == "weight" else 0
            if e.dim == out_dim and e.tensor in ("weight", "bias"):
                getattr(m, e.tensor).index_fill_(e.dim, torch.tensor(e.removed), 0.0)
        expected = zeroed(x)
    apply_plan(zeroed, plan)
    with torch.no_grad():
        got = zeroed(x)
    assert torch.allclose(got, expected, atol=1e-5)


def test_constant_split_is_protected_and_reported():
    torch.manual_seed(0)
    model = ConstantSplit()
    result = _prune_and_compare_shapes(model, torch.randn(1, 3, 8, 8), ratio=0.5)
    report = result.graph.protected_report()
    assert any(r["op"] == "split" and "constant sizes" in r["reason"] for r in report)
    assert model.a[0].out_channels == 32  # untouched


def test_unknown_op_is_protected_and_reported_by_name():
    torch.manual_seed(0)
    model = UnknownOp()
    result = _prune_and_compare_shapes(model, torch.randn(1, 3, 8, 8), ratio=0.5)
    report = result.graph.protected_report()
    assert [r["op"] for r in report] == ["pixel_shuffle"]
    assert model.a[0].out_channels == 32
    assert model.b[0].out_channels == 8  # after the unknown op, b's own outputs still prune


def test_protect_keeps_named_layers_and_global_ranking_respects_floors():
    torch.manual_seed(0)
    model = FlattenHead()
    _prune_and_compare_shapes(model, torch.randn(1, 3, 8, 8), ratio=0.5, protect=["body"])
    assert model.body[0].out_channels == 32
    model = Mixed()
    result = _prune_and_compare_shapes(model, torch.randn(1, 3, 16, 16), ratio=0.9, global_ranking=True,
                                       min_keep=0.25, round_to=4)
    for name, entry in result.plan.layers.items():
        assert entry["out"][1] >= 0.25 * entry["out"][0] or entry["out"][1] >= 4


def test_round_to_aligns_kept_channels():
    torch.manual_seed(0)
    model = nn.Sequential(_cbr(3, 16), _cbr(16, 100), _cbr(100, 64), nn.Conv2d(64, 3, 1))
    _prune_and_compare_shapes(model, torch.randn(1, 3, 8, 8), ratio=0.3, round_to=32)
    assert model[1][0].out_channels % 32 == 0 and model[2][0].out_channels % 32 == 0


def test_bad_goals_are_config_errors():
    model = FlattenHead()
    x = torch.randn(1, 3, 8, 8)
    with pytest.raises(ConfigError, match="exactly one"):
        prune(model, x)
    with pytest.raises(ConfigError, match="exactly one"):
        prune(model, x, ratio=0.5, flops_reduction=2.0)
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        prune(model, x, ratio=1.0)
    with pytest.raises(CompressError, match="out of reach"):
        prune(UnknownOp(), torch.randn(1, 3, 8, 8), flops_reduction=50.0)


def test_taylor_needs_data_and_scores_from_gradients():
    torch.manual_seed(0)
    model = FlattenHead().eval()
    x = torch.randn(4, 3, 8, 8)
    with pytest.raises(CompressError, match="needs data"):
        prune(copy.deepcopy(model), x, ratio=0.5, importance="taylor")
    graph = DependencyGraph.build(model, x)
    batches = [(x, torch.tensor([0, 1, 2, 3]))]
    scores = class_importance(graph, model, "taylor", data=batches)
    assert scores.shape == (graph.num_classes,) and bool((scores > 0).any())
    assert all(p.grad is None for p in model.parameters())  # gradients are cleaned up
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prune(model, x, ratio=0.5, importance="taylor", data=batches)
    assert model.body[0].out_channels == 16
    assert before["stem.1.running_mean"].equal(model.state_dict()["stem.1.running_mean"])  # BN untouched


def test_latency_goal_iterates_on_the_measured_cost():
    """The latency search calls the backend's measure function on pruned copies until the goal is met; here the
    'backend' is the counted MAC total (deterministic), so the loop itself is what is tested."""
    from jetforge.compress.prune import count_ops

    torch.manual_seed(0)
    model = Mixed().eval()
    x = torch.randn(1, 3, 16, 16)
    calls = []

    def cost(m):
        calls.append(1)
        return float(count_ops(m, x).macs)

    result = prune(model, x, latency_reduction=1.5, latency_fn=cost, round_to=4)
    assert len(calls) >= 5
    lat = result.report.to_dict()["latency"]
    assert lat["speedup"] >= 1.5
    assert result.report.before.macs / result.report.after.macs >= 1.5
