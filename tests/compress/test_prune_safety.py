"""Pruning must not break the caller's model, must follow ties the trace shows only indirectly, and must say when
its result is off (issue 25, "Pruning").

- A width read from a tensor's shape and used to reshape another tensor (torchvision's MaxViT attention:
  ``B, G, P, D = x.shape`` ... ``out.reshape(B, G, P, D)``) is a tie: it used to end in a raw RuntimeError after
  the caller's model was already pruned in place (and unusable).
- A prune that fails anyway leaves the model exactly as it was and refuses in one line naming the module.
- Code only train mode runs (inception_v3's auxiliary classifier) is analysed too: the pruned model must run
  in train mode, where fine-tuning happens.
- A FLOPs goal lands within GOAL_TOLERANCE where grouped convolutions allow it, and is warned about where not.
- ``--protect`` with a name that is no module is refused, naming the closest real names.
- (the real-image agreement check of ``jetforge prune`` is in test_prune_agreement.py)
"""

import copy
import json

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from torch import nn  # noqa: E402

from jetforge.cli.main import main  # noqa: E402
from jetforge.compress.prune import prune  # noqa: E402
from jetforge.compress.prune.graph import check_module_names  # noqa: E402
from jetforge.compress.prune.refine import GOAL_TOLERANCE  # noqa: E402
from jetforge.errors import CompressError, UnknownNameError  # noqa: E402

torch.set_num_threads(1)


def _small_maxvit():
    """torchvision's MaxViT class, one stage at 16x16: the same attention code as maxvit_t, in a second."""
    from torchvision.models.maxvit import MaxVit

    torch.manual_seed(0)
    return MaxVit(input_size=(16, 16), stem_channels=16, partition_size=2, block_channels=[32], block_layers=[1],
                  head_dim=8, stochastic_depth_prob=0.0, num_classes=10).eval()


def test_maxvit_attention_width_read_from_its_input_is_followed_and_the_pruned_model_runs():
    model = _small_maxvit()
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(x)
    result = prune(model, x, ratio=0.5, round_to=8)
    ties = [p for p in result.report.protected if p["op"] == "reshape" and "width read from a channel axis" in
            p["reason"]]
    assert ties, result.report.protected  # the attention's input width is kept, and said so
    assert result.report.after.macs < 0.8 * result.report.before.macs
    with torch.no_grad():
        out = model(x)
    assert out.shape == reference.shape and torch.isfinite(out).all()
    model.train()
    model(torch.cat([x, x])).square().mean().backward()  # fine-tuning runs too


@pytest.mark.slow
def test_maxvit_t_prunes_to_2x_and_runs():
    """The reported case at full size (31 M parameters; the attention input's width is kept): 2.01x measured."""
    model = torchvision.models.maxvit_t().eval()
    x = torch.randn(1, 3, 224, 224)
    result = prune(model, x, flops_reduction=2, round_to=8)
    assert 2.0 <= result.report.before.macs / result.report.after.macs <= 2.0 * (1 + GOAL_TOLERANCE)
    with torch.no_grad():
        assert model(x).shape == (1, 1000)


class _SkippedWhileTracing(nn.Module):
    """A width check fx never records: skipped while tracing (as libraries skip their runtime asserts), so no
    analysis can see the tie; only running the pruned model finds it."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.fx._symbolic_trace.is_fx_tracing() and x.size(1) != self.width:
            raise ValueError("expected %d channels, got %d" % (self.width, x.size(1)))
        return x


class HiddenWidthCheck(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.check = _SkippedWhileTracing(32)
        self.out = nn.Conv2d(32, 16, 1)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.check(torch.relu(self.bn(self.conv(torch.relu(self.stem(x))))))
        return self.head(self.out(x).mean((2, 3)))


def test_a_failed_prune_leaves_the_model_exactly_as_it_was_and_names_the_module():
    torch.manual_seed(0)
    model = HiddenWidthCheck().eval()
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(x)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tensors = [id(t) for t in list(model.parameters()) + list(model.buffers())]
    structure = repr(model)
    with pytest.raises(CompressError) as caught:
        prune(model, x, ratio=0.5)
    message = caught.value.one_line()
    assert "\n" not in message and "in check (_SkippedWhileTracing)" in message and "eval mode" in message
    assert "left as it was" in message
    assert repr(model) == structure and not model.training
    assert [id(t) for t in list(model.parameters()) + list(model.buffers())] == tensors  # the same objects
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    with torch.no_grad():
        assert torch.equal(model(x), reference)


def test_cli_refuses_a_failed_prune_in_one_line(tmp_path, capsys):
    torch.manual_seed(0)
    path = tmp_path / "hidden.pt"
    torch.save(HiddenWidthCheck().eval(), path)
    code = main(["prune", "--model", str(path), "--trust-pickle", "--ratio", "0.5", "--input-shape", "1,3,16,16",
                 "--no-onnx", "--no-plot", "--out", str(tmp_path / "out")])
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("jetforge: error:")]
    assert code == 1 and len(errors) == 1 and "check (_SkippedWhileTracing)" in errors[0]
    assert not (tmp_path / "out" / "pruned.pt").exists()


class AuxInTrainMode(nn.Module):
    """inception_v3's pattern, small: an auxiliary head reads a middle feature map only while training."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.mid = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.aux = nn.Sequential(nn.Conv2d(32, 16, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(16, 5))
        self.tail = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU())
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor):
        x = self.mid(torch.relu(self.stem(x)))
        aux = self.aux(x) if self.training else None
        out = self.head(self.tail(x).mean((2, 3)))
        return (out, aux) if self.training else out


def test_a_branch_only_train_mode_runs_is_pruned_with_the_rest():
    torch.manual_seed(0)
    model = AuxInTrainMode().eval()
    x = torch.randn(1, 3, 16, 16)
    result = prune(model, x, ratio=0.5)
    model.train()
    out, aux = model(torch.randn(2, 3, 16, 16))
    (out.sum() + aux.sum()).backward()
    assert result.report.extra["traced_modes"] == {"eval": "traced", "train": "traced"}
    assert model.aux[0].in_channels == model.mid[0].out_channels < 32
    assert "train mode: traced" in result.report.to_table()


@pytest.mark.slow
def test_inception_v3_pruned_runs_in_train_mode_with_its_aux_classifier():
    torch.manual_seed(0)
    model = torchvision.models.inception_v3(aux_logits=True, init_weights=False, num_classes=10).eval()
    prune(model, torch.randn(1, 3, 299, 299), flops_reduction=2.0)
    model.train()
    out = model(torch.randn(2, 3, 299, 299))
    assert out.logits.shape == out.aux_logits.shape == (2, 10)


def _regnet(widths, group_widths, depths):
    from torchvision.models.regnet import BlockParams, RegNet

    torch.manual_seed(0)
    params = BlockParams(depths=depths, widths=widths, group_widths=group_widths,
                         bottleneck_multipliers=[1.0] * len(depths), strides=[2] * len(depths), se_ratio=None)
    return RegNet(params, num_classes=10, stem_width=16).eval()


def test_grouped_convolutions_land_the_flops_goal_within_tolerance():
    """Stages of 4 and 6 convolution groups: one uniform ratio jumped from under 2x to 2.63x (as regnet_x_8gf
    jumped from 1.89x to 2.79x); the refinement lands within GOAL_TOLERANCE (measured 2.06x)."""
    model = _regnet([96, 192], [24, 32], [2, 2])
    x = torch.randn(1, 3, 32, 32)
    result = prune(model, x, flops_reduction=2.0)
    achieved = result.report.before.macs / result.report.after.macs
    assert 2.0 <= achieved <= 2.0 * (1 + GOAL_TOLERANCE)
    goal = result.report.extra["goal"]
    assert goal["name"] == "flops_reduction" and goal["within_tolerance"] is True and goal["tolerance"] == 0.05
    assert goal["achieved"] == round(achieved, 4)
    assert result.report.extra["traced_modes"]["train"] == "same graph as eval"  # not analysed twice
    with torch.no_grad():
        assert model(x).shape == (1, 10)


def test_a_goal_groups_cannot_land_is_warned_with_the_achieved_number(tmp_path, capsys):
    """Two convolution groups per stage: no cut lands near 2x (2.31x is the closest found); the report says so
    and the CLI prints a WARNING line with the number."""
    path = tmp_path / "coarse.pt"
    torch.save(_regnet([48, 96, 192], [24, 48, 96], [1, 1, 1]), path)
    out = tmp_path / "out"
    code = main(["prune", "--model", str(path), "--trust-pickle", "--flops-reduction", "2", "--input-shape",
                 "1,3,32,32", "--no-onnx", "--no-plot", "--out", str(out)])
    printed = capsys.readouterr().out
    warnings = [ln for ln in printed.splitlines() if "WARNING" in ln and "overshot" in ln]
    assert code == 0 and len(warnings) == 1
    goal = json.loads((out / "prune_report.json").read_text())["goal"]
    assert goal["within_tolerance"] is False and goal["achieved"] > 2.0 * (1 + GOAL_TOLERANCE)
    assert "%.2fx achieved" % goal["achieved"] in warnings[0]
    assert "OVERSHOT" in (out / "prune_report.txt").read_text()


def test_protect_with_an_unknown_module_is_refused_naming_the_closest():
    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    untouched = copy.deepcopy(model.state_dict())
    with pytest.raises(UnknownNameError) as caught:
        prune(model, torch.randn(1, 3, 32, 32), ratio=0.5, protect=["feature.3"])
    assert "'feature.3'" in str(caught.value) and "'features.3'" in str(caught.value)
    assert all(torch.equal(v, untouched[k]) for k, v in model.state_dict().items())
    check_module_names(model, ["features.3", "features", "classifier.1"], "module to protect")  # real ones pass


def test_cli_protect_with_a_misspelled_module_exits_1_in_one_line(tmp_path, capsys):
    code = main(["prune", "--model", "mobilenet_v2", "--ratio", "0.5", "--protect", "classifer", "--no-onnx",
                 "--out", str(tmp_path)])
    errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("jetforge: error:")]
    assert code == 1 and len(errors) == 1 and "'classifer'" in errors[0] and "'classifier'" in errors[0]
