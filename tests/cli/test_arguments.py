"""The shared options are defined once (jetforge/cli/arguments.py) and every command uses them.

Each test walks the parser of every command in ``COMMANDS`` (sub-commands included: ``bundle create``,
``export-config deepstream``...), so a command that defines ``--precision``, ``--dla-core``, ``--tensorrt``,
``--target``, ``--out`` or ``--config`` by hand, with its own spelling or choice list, fails here.
"""

import argparse
from typing import Dict, List, Tuple

import pytest

from jetforge.cli import arguments
from jetforge.cli.main import COMMANDS, build_parser, main
from jetforge.runtime.tensorrt.plan import PRECISIONS
from jetforge.targets import jetpack_tensorrt_versions


def _command_parser(name: str) -> argparse.ArgumentParser:
    parser = build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _actions_with(option: str) -> List[Tuple[str, argparse.Action]]:
    """(``"command [sub-command]"``, action) of every action, in every command, that takes ``option``."""
    found = []
    for name in COMMANDS.names():
        for where, action in arguments.shared_actions(_command_parser(name)):
            if option in action.option_strings:
                found.append((("%s %s" % (name, where)).strip(), action))
    return found


def test_tensorrt_and_trt_are_one_option_in_every_command():
    found = _actions_with("--tensorrt") + _actions_with("--trt")
    places = sorted({where for where, _ in found})
    assert places == ["board-check", "build", "bundle create", "calibrate", "dla-check", "export-config deepstream",
                      "qat"], places
    for where, action in found:
        assert set(arguments.TENSORRT_FLAGS) <= set(action.option_strings), where  # both spellings, one option
        assert action.dest == "tensorrt" and getattr(action, arguments.SHARED, None) == "tensorrt", where


@pytest.mark.parametrize("argv", [
    ["calibrate", "m.onnx", "--data", "d"], ["qat", "--translate", "m.qdq.onnx"], ["build", "m.onnx"],
    ["dla-check", "m.onnx", "--target", "orin-nx-16gb"], ["board-check", "b"], ["bundle", "create", "m.onnx",
                                                                                 "--target", "t", "--out", "o"],
    ["export-config", "deepstream", "b", "--out", "o"],
])
def test_trt_and_tensorrt_parse_to_the_same_value(argv):
    parser = build_parser(argv[0])
    long = parser.parse_args(argv + ["--tensorrt", "8.6.2"]).tensorrt
    short = parser.parse_args(argv + ["--trt", "8.6.2"]).tensorrt
    assert long == short and long in ("8.6.2", ["8.6.2"])


def test_precision_has_the_one_choice_list_in_every_command():
    found = _actions_with("--precision")
    assert sorted(where for where, _ in found) == ["build", "bundle create", "dla-check", "estimate",
                                                  "export-config deepstream", "export-config triton", "prune"]
    for where, action in found:
        assert tuple(action.choices) == PRECISIONS, where
        assert getattr(action, arguments.SHARED, None) == "precision", where


@pytest.mark.parametrize("option, shared, at_least", [
    ("--dla-core", "dla-core", 5), ("--target", "target", 7), ("--out", "out", 10), ("--config", "config", 5),
    ("--set", "set", 5), ("--json", "json", 15),
])
def test_shared_options_come_from_the_one_builder(option, shared, at_least):
    found = _actions_with(option)
    assert len(found) >= at_least, [w for w, _ in found]
    hand_made = [where for where, action in found if getattr(action, arguments.SHARED, None) != shared]
    assert not hand_made, "%s defined by hand in: %s (use jetforge.cli.arguments)" % (option, hand_made)


def test_dla_core_is_one_type_everywhere():
    types = {where: action.type for where, action in _actions_with("--dla-core")}
    assert set(types.values()) == {arguments.dla_core}, types
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.dla_core("-1")


def test_a_negative_dla_core_is_one_line_and_exit_1(capsys):
    assert main(["estimate", "m.onnx", "--target", "orin-nx-16gb", "--dla-core", "-1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a DLA core is 0 or more" in err


def test_build_keeps_its_older_output_spelling():
    parser = build_parser("build")
    assert parser.parse_args(["build", "m.onnx", "--output", "e.engine"]).out == "e.engine"
    assert parser.parse_args(["build", "m.onnx", "-o", "e.engine"]).out == "e.engine"


@pytest.mark.parametrize("version", ["9.9", "7", "99.1", "8.6"])
def test_calibrate_refuses_a_tensorrt_no_jetpack_ships(version, capsys, tmp_path):
    """A cache stamped for a TensorRT that no JetPack of the table ships is read by no TensorRT: refused in one line
    naming the known releases, before the model or any data is read (neither exists here)."""
    assert main(["calibrate", str(tmp_path / "m.onnx"), "--data", str(tmp_path), "--trt", version]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a release of jetforge's JetPack table" in err
    assert all(known in err for known in jetpack_tensorrt_versions())


@pytest.mark.parametrize("argv", [
    ["calibrate", "--check-cache", "x.calib", "--tensorrt", "99.1", "--retarget"],
    ["qat", "--translate", "x.qdq.onnx", "--trt", "9.9"],
])
def test_every_cache_writer_refuses_an_unknown_tensorrt(argv, capsys, tmp_path):
    assert main([a if not a.startswith("x.") else str(tmp_path / a) for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a release of jetforge's JetPack table" in err


def test_estimate_best_is_the_fastest_precision_the_device_runs():
    from jetforge.runtime.estimate.result import _resolve_best
    from jetforge.targets import get_target

    assert _resolve_best(get_target("orin-nx-16gb"), "best", "gpu")[0] == "int8"
    assert _resolve_best(get_target("jetson-nano"), "best", "gpu")[0] == "fp16"  # no INT8 on Maxwell
    assert _resolve_best(get_target("orin-nx-16gb"), "fp32", "gpu") == ("fp32", [])


def test_the_readme_command_blocks_parse_with_todays_flags():
    """Every ``jetforge ...`` line of the README's bash blocks parses as written (a renamed or dropped flag fails
    here, not in a user's shell)."""
    import re
    import shlex
    from pathlib import Path

    from jetforge.cli.main import _find_command

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", readme, re.S)
             for line in block.splitlines()]
    commands = [line[len("./dev "):] if line.startswith("./dev ") else line for line in lines]
    commands = [c for c in commands if c.startswith("jetforge ")]
    assert len(commands) >= 10, commands
    for command in commands:
        argv = shlex.split(command.replace("$R", "run"))[1:]
        build_parser(_find_command(argv)).parse_args(argv)  # a UsageError names the command line's problem


def test_dla_check_refuses_a_tensorrt_its_target_does_not_ship(capsys, tmp_path):
    """As `build` does: the version is checked against the target's JetPack releases before the model is read."""
    assert main(["dla-check", str(tmp_path / "m.onnx"), "--target", "orin-nx-16gb", "--trt", "9.9"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TensorRT 9.9 does not ship for target orin-nx-16gb" in err and "10.3.0" in err
