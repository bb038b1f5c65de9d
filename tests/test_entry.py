"""The entry-point rules (jetforge/entry.py) where they are used outside the ``jetforge`` command.

``python -m jetforge.compress.recipes`` (what torchrun starts on every rank), its older name
``python -m jetforge.compress.distill``, and the board-side ``python -m jetforge.deploy.remote_bench`` bypass
``jetforge``'s main(); they promise the
same: a mistyped command line is one line and exit 1 (never argparse's usage dump and exit 2), and
SIGTERM ends a run like Ctrl-C (cleanup runs, exit 130).  The CLI's own cases are in tests/cli/test_cli.py.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from jetforge.entry import EXIT_INTERRUPTED, ArgumentParser, UsageError, run_entry


def _run(*args, **kw):
    return subprocess.run([sys.executable] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, **kw)


@pytest.mark.parametrize("module, argv, says", [
    ("jetforge.compress.distill", [], "the following arguments are required: recipe"),
    ("jetforge.compress.recipes", ["r.yaml", "--nope"], "unrecognized arguments: --nope"),
])
def test_module_entry_usage_error_is_one_line_and_exit_1(module, argv, says, tmp_path):
    proc = _run("-m", module, *argv, cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "usage:" not in proc.stderr
    assert proc.stderr.startswith("python -m %s: error: " % module) and says in proc.stderr
    assert proc.stderr.rstrip().endswith("(fix: see `python -m %s --help`)" % module)


def test_usage_error_names_the_parser_and_its_help():
    parser = ArgumentParser(prog="tool sub")
    parser.add_argument("--n", type=int)
    with pytest.raises(UsageError) as caught:
        parser.parse_args(["--n", "x"])
    assert caught.value.one_line() == "tool sub: argument --n: invalid int value: 'x' (fix: see `tool sub --help`)"


def test_run_entry_turns_sigterm_into_an_interrupt_after_the_body_cleans_up(capsys):
    cleaned = []

    def body():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # interrupted by the handler long before this ends
            return 0
        finally:
            cleaned.append(True)

    before = signal.getsignal(signal.SIGTERM)
    assert run_entry("prog", body) == EXIT_INTERRUPTED
    assert cleaned == [True]
    assert capsys.readouterr().err == "prog: interrupted (SIGTERM)\n"
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back


def test_a_whole_program_ignores_stop_signals_once_it_has_stopped(capsys):
    """``process_exit``: after the cleanup only the interpreter's shutdown is left, which resets Python handlers to
    the default, so a late second Ctrl-C used to kill the CLI by SIGINT (exit -2, seen in CI as a flaky
    test_two_ctrl_c...).  Both signals are SIG_IGN on the way out; a run that was not stopped restores them."""
    before_term, before_int = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert run_entry("prog", lambda: 0, process_exit=True) == 0
        assert signal.getsignal(signal.SIGTERM) is before_term  # nothing arrived: restored

        def body():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)

        assert run_entry("prog", body, process_exit=True) == EXIT_INTERRUPTED
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # would end this test process if it were not ignored
        time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, before_term)
        signal.signal(signal.SIGINT, before_int)


@pytest.mark.slow
def test_distill_module_entry_ends_like_ctrl_c_on_sigterm(tmp_path):
    """torchrun stops its workers with SIGTERM: a rank must end like Ctrl-C, keep its outputs whole, exit 130."""
    from jetforge.assets import asset_path

    root = asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    out = tmp_path / "run"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: sigterm\nout_dir: %s\ndata: {root: %s, train_limit: 2048, val_limit: 200}\n"
                      "model: {arch: fashion_cnn, width: 0.25}\n"
                      "train: {epochs: 200, batch_size: 32, progress: false, device: cpu}\n" % (out, root))
    proc = subprocess.Popen([sys.executable, "-m", "jetforge.compress.distill", str(recipe)], cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    lines = []
    try:
        for line in proc.stderr:  # the run logs "... before training" once the model and data are ready
            lines.append(line)
            if "before training" in line:
                break
        time.sleep(1.0)  # inside the training loop now
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines) + rest
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.rstrip().endswith("python -m jetforge.compress.distill: interrupted (SIGTERM)")
    assert "Traceback" not in err
    assert (out / "config.yaml").is_file()  # what was written before the stop is whole
    assert not [p.name for p in out.iterdir() if ".part" in p.name]  # nothing half-written is left


class _StopInSetName:
    """A descriptor whose ``__set_name__`` is where the stop lands: Python wraps it in ``RuntimeError("Error calling
    __set_name__ ...")`` (a calibrate run stopped by SIGINT while a dataclass was made during an import ended in
    "internal error", exit 2, in one suite run)."""

    def __init__(self, stop):
        self.stop = stop

    def __set_name__(self, owner, name):
        raise self.stop


def _class_made_while_stopping(stop):
    type("Made", (), {"field": _StopInSetName(stop)})


@pytest.mark.parametrize("stop,says", [(KeyboardInterrupt(), "prog: interrupted\n"),
                                       (None, "prog: interrupted (SIGTERM)\n")], ids=["SIGINT", "SIGTERM"])
def test_a_stop_python_wrapped_in_another_error_still_ends_as_a_stop(stop, says, capsys):
    from jetforge.entry import Terminated

    stop = stop if stop is not None else Terminated("SIGTERM")
    with pytest.raises(RuntimeError):  # what the interpreter makes of it (the control)
        _class_made_while_stopping(stop)
    assert run_entry("prog", lambda: _class_made_while_stopping(stop)) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == says
    with pytest.raises(ValueError):  # any other error stays a bug: it propagates
        run_entry("prog", lambda: (_ for _ in ()).throw(ValueError("a bug")))


def test_the_cli_ends_a_wrapped_stop_as_a_stop(monkeypatch, capsys):
    from jetforge.cli import main as cli_main

    monkeypatch.setattr(cli_main, "_resolve_shipped_names",
                        lambda args: _class_made_while_stopping(KeyboardInterrupt()))
    assert cli_main.main(["targets"]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip().endswith("jetforge: interrupted")
