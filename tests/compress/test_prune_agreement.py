"""``jetforge prune`` measures the pruned classifier's top-1 agreement with the original on real images and warns when
it collapsed (issue 25: MobileNetV2 pruned to 2x answered "hamster" on every bikes.mp4 frame, and nothing said so)."""

import copy
import json

import pytest

torch = pytest.importorskip("torch")

from jetforge.cli.main import main  # noqa: E402
from jetforge.compress.prune.agreement import AGREEMENT_THRESHOLD, AgreementCheck, warning_line  # noqa: E402

torch.set_num_threads(1)


def test_cli_warns_when_the_pruned_classifier_no_longer_answers_like_the_original(tmp_path, capsys, bikes_clip,
                                                                                   mobilenet_weights):
    out = tmp_path / "pruned"
    code = main(["prune", "--model", "mobilenet_v2", "--ratio", "0.5", "--input-shape", "1,3,96,96", "--no-onnx",
                 "--no-plot", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    agreement = json.loads((out / "prune_report.json").read_text())["agreement"]
    assert agreement["measured"] and agreement["samples"] == 48 and agreement["warning"]
    assert agreement["top1_agreement"] < AGREEMENT_THRESHOLD
    warnings = [ln for ln in printed.splitlines() if "WARNING" in ln and "agrees with the original" in ln]
    assert len(warnings) == 1 and "fine-tune" in warnings[0]
    assert "agreement  top-1" in (out / "prune_report.txt").read_text()


def test_an_unchanged_model_agrees_fully_and_is_not_warned(mobilenet_weights, bikes_clip):
    from jetforge.workflow.model_refs import load_torch_model

    model, meta = load_torch_model("mobilenet_v2")
    check = AgreementCheck.prepare(model, (1, 3, 224, 224), meta["preprocess"], meta["labels"])
    entry = check.measure(copy.deepcopy(model))
    assert entry["measured"] and entry["top1_agreement"] == 1.0 and not entry["collapsed"]
    assert entry["most_common_share"] == entry["original_most_common_share"] < 0.25  # varied real images
    assert warning_line(entry) is None


def test_models_the_check_cannot_judge_are_recorded_as_not_measured():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    random = AgreementCheck.prepare(model, (1, 3, 32, 32), random_weights=True).measure(model)
    clip = AgreementCheck.prepare(model, (1, 3, 8, 32, 32)).measure(model)
    assert not random["measured"] and "random weights" in random["reason"]
    assert not clip["measured"] and "not one colour image" in clip["reason"]
    assert warning_line(random) is None
