"""Top-level behaviour of the `jetforge` command, and the error hierarchy it prints.

A subcommand used to raise errors is a real :class:`Command` in a module registered
for the test, so the path through ``main()`` (lazy import, parser, run, error
handling) is the one every real command takes.
"""

import pickle
import subprocess
import sys
import types

import pytest

import jetforge
from jetforge import errors
from jetforge.cli import main as cli
from jetforge.cli.arguments import add_config_flags, add_json_flag
from jetforge.cli.base import Command
from jetforge.errors import JetforgeError, UnknownNameError


class ExplodeCommand(Command):
    name = "explode"
    summary = "raise what --what says"
    examples = "examples:\n  jetforge explode --what known"

    def add_arguments(self, parser):
        parser.add_argument("--what", choices=["known", "bug", "ok", "interrupt"], required=True)
        add_json_flag(parser)
        add_config_flags(parser)

    def run(self, args):
        if args.what == "known":
            raise errors.TargetError("target 'orin-nano-4gb' has no DLA\ncores", hint="use --device gpu")
        if args.what == "bug":
            def inner():
                return {}["missing-key"]
            inner()
        if args.what == "interrupt":
            raise KeyboardInterrupt
        print("ran with json=%s overrides=%s" % (args.json, args.overrides))
        return 0


@pytest.fixture
def explode(monkeypatch):
    module = types.ModuleType("jetforge_test_cmd_explode")
    module.ExplodeCommand = ExplodeCommand
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cli.COMMANDS.add_lazy("explode", module.__name__ + ":ExplodeCommand", summary=ExplodeCommand.summary)
    yield
    cli.COMMANDS.remove("explode")


def _main(capsys, *argv):
    try:
        code = cli.main(list(argv))
    except SystemExit as exit:  # argparse: --help, --version, usage errors
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = _main(capsys, "--version")
    assert code == 0
    assert out.strip() == "jetforge %s" % jetforge.__version__


def test_help_lists_every_command_and_examples(capsys):
    for argv in (["--help"], []):
        code, out, _ = _main(capsys, *argv)
        assert code == 0
        flat = " ".join(out.split())  # argparse wraps long summaries
        for name, summary in cli.COMMANDS.summaries():
            assert (name + " " + summary) in flat
        assert "examples:" in out and "jetforge doctor --json" in out
        assert "--debug" in out


def test_help_does_not_import_command_modules():
    code = ("import sys; from jetforge.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('jetforge.cli.cmd_')))")
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_command_is_one_line_and_exit_1_not_a_usage_dump(capsys):
    code, out, err = _main(capsys, "doctr")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "usage:" not in err
    assert err.startswith("jetforge: error: jetforge: argument COMMAND: invalid choice: 'doctr'")
    assert err.rstrip().endswith("(fix: see `jetforge --help`)")


def test_unknown_option_is_one_line_and_exit_1_naming_the_command_help(explode, capsys):
    code, _, err = _main(capsys, "explode", "--what", "ok", "--nope")
    assert code == 1 and err.count("\n") == 1 and "usage:" not in err
    assert "unrecognized arguments: --nope" in err and err.rstrip().endswith("(fix: see `jetforge explode --help`)")


def test_missing_and_malformed_arguments_are_one_line_and_exit_1(explode, capsys):
    for argv, says in ((["explode"], "the following arguments are required: --what"),
                       (["explode", "--what"], "argument --what: expected one argument")):
        code, _, err = _main(capsys, *argv)
        assert code == 1 and err.count("\n") == 1 and says in err, (argv, err)


def test_usage_error_of_a_real_command_is_exit_1(capsys):
    # a real command's parser (not the test's): subparsers inherit the one-line error
    code, _, err = _main(capsys, "dla-check", "--no-such-option")
    assert code == 1 and err.count("\n") == 1 and "jetforge dla-check: " in err


def test_subcommand_help_has_description_and_examples(explode, capsys):
    code, out, _ = _main(capsys, "explode", "--help")
    assert code == 0
    assert "--json" in out and "--config" in out and "--set" in out and "--debug" in out
    assert "examples:\n  jetforge explode --what known" in out


def test_command_runs_with_shared_flags(explode, capsys):
    code, out, err = _main(capsys, "explode", "--what", "ok", "--json", "--set", "a=1", "--set", "b.c=x")
    assert code == 0, err
    assert out.strip() == "ran with json=True overrides=['a=1', 'b.c=x']"


def test_known_error_is_one_line_and_exit_1(explode, capsys):
    code, out, err = _main(capsys, "explode", "--what", "known")
    assert code == 1
    assert out == ""
    assert err == ("jetforge: error: target 'orin-nano-4gb' has no DLA cores (fix: use --device gpu)\n")


def test_known_error_with_debug_shows_traceback_and_still_exits_1(explode, capsys):
    code, _, err = _main(capsys, "--debug", "explode", "--what", "known")
    assert code == 1
    assert "Traceback (most recent call last)" in err and "TargetError" in err
    assert err.rstrip().splitlines()[-1].startswith("jetforge: error: target 'orin-nano-4gb'")


def test_unexpected_error_exits_2_with_debug_hint(explode, capsys):
    code, _, err = _main(capsys, "explode", "--what", "bug")
    assert code == 2
    assert "Traceback" not in err
    assert err.count("\n") == 1
    assert "internal error: KeyError: 'missing-key'" in err and "rerun with --debug" in err


def test_unexpected_error_with_debug_shows_traceback_and_exits_2(explode, capsys):
    for argv in (["--debug", "explode", "--what", "bug"], ["explode", "--what", "bug", "--debug"]):
        code, _, err = _main(capsys, *argv)
        assert code == 2
        assert "Traceback (most recent call last)" in err
        assert "in inner" in err and "KeyError: 'missing-key'" in err


def test_keyboard_interrupt_exits_130(explode, capsys):
    code, _, err = _main(capsys, "explode", "--what", "interrupt")
    assert code == 130 and "interrupted" in err


def test_missing_dependency_while_loading_a_command_is_a_known_error(monkeypatch, capsys):
    module = types.ModuleType("jetforge_test_cmd_needs")

    class NeedsCommand(Command):
        def run(self, args):
            from jetforge.optional import require

            require("jetforge_no_such_package_xyz", "the needs command")

    module.NeedsCommand = NeedsCommand
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cli.COMMANDS.add_lazy("needs", module.__name__ + ":NeedsCommand", summary="needs a package")
    try:
        code, _, err = _main(capsys, "needs")
    finally:
        cli.COMMANDS.remove("needs")
    assert code == 1
    assert err.startswith("jetforge: error: jetforge_no_such_package_xyz is not installed; it is needed for the "
                          "needs command (fix: pip install jetforge_no_such_package_xyz)")


def test_python_dash_m_and_console_script_agree(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jetforge", "--version"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "jetforge %s" % jetforge.__version__
    proc = subprocess.run([sys.executable, "-m", "jetforge", "doctr"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1


# ---- the error hierarchy --------------------------------------------------------------------------------

def test_every_error_is_a_jetforge_error():
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, JetforgeError), cls
    assert issubclass(UnknownNameError, errors.ConfigError)
    assert isinstance(jetforge.JetforgeError("x"), Exception)


def test_one_line_joins_message_and_hint():
    err = errors.InputFileError("file  a.onnx\n does not exist", hint="check\nthe path")
    assert err.one_line() == "file a.onnx does not exist (fix: check the path)"
    assert str(err) == err.one_line()
    assert errors.ModelError("bad").one_line() == "bad"


def test_unknown_name_suggests_close_matches():
    err = UnknownNameError("target", "orin-nx", ["orin-nx-16gb", "orin-nx-8gb", "agx-xavier"])
    assert "did you mean" in err.message and "'orin-nx-16gb'" in err.message
    assert err.suggestions[0] in ("orin-nx-16gb", "orin-nx-8gb")
    assert err.hint == "choose one of: agx-xavier, orin-nx-16gb, orin-nx-8gb"
    far = UnknownNameError("backend", "zzz", ["ort", "trt"])
    assert "did you mean" not in far.message and far.suggestions == []
    assert UnknownNameError("asset", "x", []).hint is None


@pytest.mark.parametrize("err", [
    errors.TargetError("no DLA", hint="use gpu"),
    UnknownNameError("target", "orin-nx", ["orin-nx-16gb"]),
    errors.DependencyError("TensorRT is not installed", hint="JetPack"),
])
def test_errors_survive_pickling(err):
    """Errors cross process boundaries (multiprocessing workers) with their message and hint."""
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err)
    assert copy.one_line() == err.one_line() and copy.hint == err.hint
    if isinstance(err, UnknownNameError):
        assert copy.suggestions == err.suggestions and copy.known == err.known


def test_unknown_name_accepts_a_generator_and_a_prefix():
    err = UnknownNameError("key", "sise", (k for k in ["size", "mean"]), prefix="input.")
    assert err.message == "unknown key 'input.sise'; did you mean 'input.size'?"
    assert err.known == ["input.mean", "input.size"] and err.name == "input.sise"


@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_has_help_with_examples(capsys, name):
    code, out, err = _main(capsys, name, "--help")
    assert code == 0, err
    assert "examples:" in out and ("jetforge %s" % name) in out.split("examples:")[1], out
    assert "--debug" in out
