"""Pruning options as data: ``PruneOptions`` from a YAML file and ``--set``, the flags over both (a goal flag
replaces the file's goal), and ``prune(model, x, options)`` and the keyword form running one path."""

import pytest
import yaml

torch = pytest.importorskip("torch")

from jetforge.cli.main import main  # noqa: E402
from jetforge.compress.prune import PruneOptions, load_prune_options, prune  # noqa: E402
from jetforge.errors import ConfigError, UnknownNameError  # noqa: E402


def _printed(capsys, argv):
    assert main(["prune"] + argv + ["--print-config"]) == 0, capsys.readouterr().err
    return yaml.safe_load(capsys.readouterr().out)


def test_config_file_and_set_load_prune_options(tmp_path):
    path = tmp_path / "prune.yaml"
    path.write_text("flops_reduction: 2.0\nimportance: l2\nprotect: [features.0]\noverrides: {classifier: 0.0}\n"
                    "latency_levels: [0.5]\n")
    o = load_prune_options(str(path), ["min_keep=0.2", "round_to=16"])
    assert (o.flops_reduction, o.importance, o.min_keep, o.round_to) == (2.0, "l2", 0.2, 16)
    assert o.protect == ["features.0"] and o.overrides == {"classifier": 0.0} and o.latency_levels == [0.5]
    assert o.goal() == "flops_reduction"


@pytest.mark.parametrize("overrides, error, says", [
    (["min_kep=0.2"], UnknownNameError, "did you mean 'min_keep'"),
    (["round_to=eight"], ConfigError, "round_to: expected an integer, got 'eight'"),
    (["ratio=1.0"], ConfigError, "ratio must be in [0, 1)"),
    (["flops_reduction=0.5"], ConfigError, "flops_reduction must be a factor >= 1"),
    (["importance=l3"], UnknownNameError, "unknown importance criterion 'l3'; did you mean 'l2'"),
    (["protect_stem=maybe"], ConfigError, "protect_stem: expected true or false"),
])
def test_bad_prune_options_are_one_line(overrides, error, says, capsys):
    with pytest.raises(error) as caught:
        load_prune_options(None, overrides)
    assert says in caught.value.one_line()
    assert main(["prune", "--model", "resnet18", "--out", "o"] + [a for o in overrides for a in ("--set", o)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_exactly_one_goal_is_checked_before_the_model_is_loaded(capsys):
    assert main(["prune", "--model", "no_such_model", "--out", "o"]) == 1
    err = capsys.readouterr().err
    assert "give exactly one pruning goal, got none" in err and "no_such_model" not in err


def test_flags_win_over_set_and_a_goal_flag_replaces_the_files_goal(tmp_path, capsys):
    path = tmp_path / "prune.yaml"
    path.write_text("ratio: 0.3\nmin_keep: 0.2\nprotect: [a, b]\nimportance: l2\n")
    base = ["--config", str(path)]
    cfg = _printed(capsys, base)
    assert (cfg["ratio"], cfg["min_keep"], cfg["protect"]) == (0.3, 0.2, ["a", "b"])
    cfg = _printed(capsys, base + ["--set", "min_keep=0.25", "--set", "ratio=0.4"])
    assert (cfg["ratio"], cfg["min_keep"]) == (0.4, 0.25)
    cfg = _printed(capsys, base + ["--set", "min_keep=0.25", "--min-keep", "0.3", "--flops-reduction", "2",
                                   "--protect", "c", "--no-protect-stem", "--global"])
    assert (cfg["ratio"], cfg["flops_reduction"], cfg["min_keep"]) == (None, 2.0, 0.3)  # the flag's goal replaces
    assert cfg["protect"] == ["c"] and cfg["protect_stem"] is False and cfg["global_ranking"] is True
    assert cfg["importance"] == "l2"  # keys no flag names keep the file's value


def test_options_and_keywords_prune_alike():
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3),
                                   torch.nn.ReLU(), torch.nn.Conv2d(32, 8, 1)).eval()

    x = torch.randn(1, 3, 16, 16)
    by_options = prune(model(), x, PruneOptions(ratio=0.5, round_to=4, importance="l2"))
    by_keywords = prune(model(), x, ratio=0.5, round_to=4, importance="l2")
    assert by_options.plan.to_dict() == by_keywords.plan.to_dict()
    with pytest.raises(TypeError, match="not both"):
        prune(model(), x, PruneOptions(ratio=0.5), round_to=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'flops'"):
        prune(model(), x, flops=2.0)


def test_print_config_loads_back_to_the_same_options(tmp_path, capsys):
    cfg = _printed(capsys, ["--latency-reduction", "1.5", "--latency-aware", "--protect", "features.0",
                            "--round-to", "16", "--target", "orin-nx-16gb"])
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    loaded = load_prune_options(str(path))
    assert loaded == PruneOptions(latency_reduction=1.5, latency_aware=True, protect=["features.0"], round_to=16,
                                  target="orin-nx-16gb")
    assert loaded.goal() == "latency_reduction"
