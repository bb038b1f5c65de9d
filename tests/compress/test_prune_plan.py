"""The plan replays on a fresh model, so a pruned checkpoint loads without re-running the search."""

import json

import pytest

torch = pytest.importorskip("torch")

from jetforge.compress.models import build, load_pretrained  # noqa: E402
from jetforge.compress.prune import PrunePlan, apply_plan, load_pruned, prune  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pruned_mobilenet(mobilenet_weights):
    """The project's pretrained MobileNetV2 (real ImageNet weights), pruned to half its MACs by L2 magnitude."""
    model = load_pretrained("mobilenet_v2", mobilenet_weights)
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(0))
    result = prune(model, x, flops_reduction=2.0, importance="l2", target="xavier-nx")
    return result, x


def test_pretrained_mobilenet_halves_macs_with_aligned_channels(pruned_mobilenet):
    result, x = pruned_mobilenet
    totals = result.report.to_dict()["totals"]
    assert 2.0 <= totals["flops_reduction"] < 2.3
    assert totals["params_after"] < totals["params_before"]
    assert result.plan.meta["round_to"] == 8  # from the xavier-nx profile's channel_multiple
    convs = [m for m in result.model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(m.out_channels % 8 == 0 for m in convs if m.out_channels != 1000)
    assert result.model.classifier[1].out_features == 1000
    with torch.no_grad():
        assert result.model(x).shape == (1, 1000)


def test_plan_json_replays_on_a_fresh_instance(pruned_mobilenet, tmp_path):
    result, x = pruned_mobilenet
    plan_path = result.plan.save(tmp_path / "mnv2.prune.json")
    torch.save(result.model.state_dict(), tmp_path / "pruned.pt")
    data = json.loads(plan_path.read_text())
    assert data["format"] == "jetforge.prune-plan/1" and data["architecture"] == "MobileNetV2"
    assert data["meta"]["importance"] == "l2" and data["entries"]
    assert all(set(e) == {"module", "tensor", "dim", "size", "removed"} for e in data["entries"])

    fresh = build("mobilenet_v2").eval()
    state = torch.load(tmp_path / "pruned.pt", weights_only=True)
    load_pruned(fresh, PrunePlan.load(plan_path), state)
    with torch.no_grad():
        assert torch.equal(fresh(x), result.model(x))


def test_plan_refuses_the_wrong_model(pruned_mobilenet):
    result, _ = pruned_mobilenet
    with pytest.raises(CompressError, match="fresh, unpruned"):
        apply_plan(result.model, result.plan)  # already pruned: sizes differ
    other = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3))
    with pytest.raises(CompressError, match="does not have"):
        apply_plan(other, result.plan)


def test_malformed_plan_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(CompressError, match="not a jetforge pruning plan"):
        PrunePlan.load(path)


def test_report_table_json_and_plot(pruned_mobilenet, tmp_path):
    result, _ = pruned_mobilenet
    files = result.report.save(tmp_path)
    table = files["table"].read_text()
    assert "features.2.conv.0.0" in table and "->" in table and "counted:" in table
    data = json.loads(files["json"].read_text())
    assert "every contraction" in data["counting_method"] and data["macs_by_op"]["after"]["convolution"] > 0
    row = next(r for r in data["layers"] if r["layer"] == "features.2.conv.0.0")
    assert row["out_after"] < row["out_before"] and row["macs_after"] < row["macs_before"]
    assert files["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
