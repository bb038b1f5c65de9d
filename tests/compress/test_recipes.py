"""One recipe registry, one way to run a stage: ``jetforge distill``/``qat``, ``python -m jetforge.compress.recipes``
(what torchrun starts) and its older name ``python -m jetforge.compress.distill`` all reach
``jetforge.compress.recipes.base.run_recipe`` with the same arguments; ``jetforge distill`` without a recipe prints
its usage and trains nothing."""

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from jetforge.cli.main import main  # noqa: E402
from jetforge.compress.recipes import RECIPES  # noqa: E402
from jetforge.compress.recipes import base  # noqa: E402


class Reached(BaseException):
    """Raised by the stand-in: the dispatch got there (a BaseException, past the CLI's catch-all)."""


@pytest.fixture
def calls(monkeypatch):
    """``run_recipe`` replaced by a recorder of its arguments."""
    seen = []

    def record(path, overrides=(), **kw):
        seen.append(dict(kw, path=path, overrides=list(overrides)))
        return 0
    monkeypatch.setattr(base, "run_recipe", record)
    return seen


def test_registry_lists_the_three_kinds_with_their_stages():
    assert RECIPES.names() == ["classifier", "detector", "action3d"]
    for name in RECIPES.names():
        recipe = RECIPES.get(name)
        assert recipe.name == name and recipe.summary == RECIPES.summary(name) and recipe.data
        assert recipe.train.config().__name__ in ("DistillConfig", "DetectorDistillConfig", "Action3DRecipe")
    assert RECIPES.get("classifier").int8.config().__name__ == "QatConfig"
    assert RECIPES.get("action3d").int8.config().__name__ == "Action3DRecipe"
    assert RECIPES.get("detector").int8 is None and "jetforge calibrate" in RECIPES.get("detector").no_int8


def test_cli_and_module_entries_dispatch_to_the_same_function(calls):
    from jetforge.compress.distill.__main__ import main as distill_module
    from jetforge.compress.recipes.entry import main as recipes_module

    recipe, extra = "recipes/action_mobilenet3d.yaml", ["--set", "teacher.epochs=2", "--data", "v.avi", "--json"]
    assert main(["distill", "--config", recipe] + extra) == 0
    assert recipes_module([recipe] + extra) == 0
    assert distill_module([recipe] + extra) == 0
    assert main(["qat", "--config", recipe] + extra) == 0
    assert recipes_module([recipe, "--stage", "int8"] + extra) == 0
    commands = [c.pop("command") for c in calls]
    module, alias = "python -m jetforge.compress.recipes", "python -m jetforge.compress.distill"
    assert commands == ["jetforge distill", module, alias, "jetforge qat", module]
    expected = {"path": recipe, "overrides": ["teacher.epochs=2"], "data": "v.avi", "as_json": True,
                "print_config": False, "progress": False}
    assert calls[:3] == [dict(expected, stage="train")] * 3
    assert calls[3:] == [dict(expected, stage="int8")] * 2


def test_both_entries_reach_the_kinds_runner_with_the_same_config(monkeypatch, tmp_path):
    """Not a stand-in of the dispatch: the action recipe's own runner is replaced, and both entries build the same
    recipe for it (the detector's no-INT8 refusal comes from the same registry entry)."""
    import jetforge.compress.action.mobilenet3d_recipe as runner
    from jetforge.compress.recipes.entry import main as recipes_module

    seen = []

    def stand_in(recipe, video, progress=True):
        seen.append((recipe, video))
        raise Reached()
    monkeypatch.setattr(runner, "run_recipe", stand_in)
    argv = ["recipes/action_mobilenet3d.yaml", "--set", "out_dir=%s" % tmp_path, "--set", "max_clips=7"]
    for call in (lambda: main(["distill", "--config"] + argv), lambda: recipes_module(argv)):
        with pytest.raises(Reached):
            call()
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0][0].max_clips == 7


def test_detector_has_no_int8_stage_in_either_entry(capsys):
    from jetforge.compress.recipes.entry import main as recipes_module

    assert main(["qat", "--config", "recipes/distill_ssdlite_person.yaml"]) == 1
    assert recipes_module(["recipes/distill_ssdlite_person.yaml", "--stage", "int8"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("recipe kind 'detector'" in line and "no INT8 stage" in line for line in lines)


@pytest.mark.parametrize("command", ["distill", "qat"])
def test_no_recipe_prints_usage_and_exits_1_without_training(command, calls, capsys):
    assert main([command]) == 1
    err = capsys.readouterr().err
    assert err.startswith("usage: jetforge %s" % command) and "--config" in err
    assert err.strip().splitlines()[-1].startswith("jetforge: error: jetforge %s trains from a recipe" % command)
    assert calls == []  # nothing was run
    assert main([command, "--set", "train.epochs=1"]) == 1 and calls == []  # overrides alone are no recipe


def test_print_config_of_a_classifier_recipe_accepts_kind_classifier(capsys):
    assert main(["distill", "--config", "recipes/distill_fashion_mnist.yaml", "--set", "kind=classifier",
                 "--set", "train.epochs=3", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "name: fashion_cnn_pruned50_kd" in printed and "epochs: 3" in printed and "kind" not in printed


def test_module_entry_usage_error_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "jetforge.compress.recipes"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("python -m jetforge.compress.recipes: error: ") and "recipe" in proc.stderr


def test_a_registered_recipe_kind_runs_from_both_entries_and_is_listed(tmp_path, capsys):
    """The extension point: one Recipe in the registry, and `jetforge distill --config`, the module entry and the
    --data help all know it (no table to edit anywhere else)."""
    from dataclasses import dataclass

    from jetforge.compress.recipes.base import Recipe, Stage
    from jetforge.compress.recipes.entry import main as recipes_module

    @dataclass
    class EchoConfig:
        kind: str = "echo"
        word: str = "hello"

    stage = Stage(config=lambda: EchoConfig, run=lambda cfg, data, progress: ({"said": cfg.word, "data": data}, True),
                  lines=lambda result, cfg: ["echo said %s" % result["said"]], json=lambda result: result)
    RECIPES.add("echo", Recipe(name="echo", summary="says a word", data="anything", train=stage), "says a word")
    try:
        recipe = tmp_path / "echo.yaml"
        recipe.write_text("kind: echo\nword: hi\n")
        assert main(["distill", "--config", str(recipe)]) == 0
        assert capsys.readouterr().out == "echo said hi\n"
        assert recipes_module([str(recipe), "--set", "word=yo", "--data", "d", "--json"]) == 0
        assert '"said": "yo"' in capsys.readouterr().out
        assert main(["distill", "--config", str(recipe), "--set", "wrod=x"]) == 1
        assert "did you mean 'word'" in capsys.readouterr().err
        assert main(["qat", "--config", str(recipe)]) == 1  # no INT8 stage
        assert "no INT8 stage" in capsys.readouterr().err
        from jetforge.cli.main import build_parser

        distill = build_parser("distill")._subparsers._group_actions[0].choices["distill"]
        assert "echo" in distill.format_help()  # --data's help lists the kinds from the registry
    finally:
        RECIPES.remove("echo")


@pytest.mark.parametrize("command, recipe", [("distill", "recipes/distill_fashion_mnist.yaml"),
                                             ("qat", "recipes/qat_fashion_mnist.yaml")])
def test_a_missing_starting_checkpoint_names_the_recipe_that_makes_it(command, recipe, tmp_path, monkeypatch, capsys):
    """Issue 25: from a clean clone `jetforge distill --config recipes/distill_fashion_mnist.yaml` stopped at the
    teacher's missing checkpoint with "check the path"; the error now names the recipe that writes it (the block's
    made_by), before any data is read."""
    from jetforge.config import load_config
    from jetforge.compress.distill import DistillConfig

    monkeypatch.chdir(tmp_path)  # a clean clone has no runs/
    assert main([command, "--config", str(base_dir() / recipe), "--data", str(tmp_path / "no-data")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["jetforge: error: model checkpoint runs/fashion_cnn/best.pt does not exist (fix: make it first: "
                     "jetforge distill --config recipes/train_fashion_mnist.yaml)"]
    teacher = load_config(DistillConfig, base_dir() / "recipes/train_fashion_mnist.yaml")
    assert teacher.out_dir == "runs/fashion_cnn" and teacher.teacher is None and teacher.model.checkpoint is None


def base_dir():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]
