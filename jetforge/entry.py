"""What every command-line entry point shares: exit codes, one-line usage errors, SIGTERM handled as Ctrl-C.

The ``jetforge`` command (``cli/main.py``) and the ``python -m`` entry points that bypass it
(``torchrun -m jetforge.compress.distill``, ``python -m jetforge.compress.action.walking_direction``)
keep one promise: bad input is one line naming the problem and the fix, exit 1 - a mistyped option
included, which plain argparse reports with a usage dump and exit 2 - and a stop by SIGTERM (how
``systemctl stop``, ``docker stop``, ``kill`` and torchrun's own shutdown end a process) ends the run
like Ctrl-C: a :class:`Terminated` (a ``KeyboardInterrupt``) is raised in the main thread, so whatever
a program does on Ctrl-C - close its outputs, keep its last checkpoint - it also does on SIGTERM.
"""

import argparse
import contextlib
import os
import signal
import sys
from typing import Any, Callable, Iterator, NoReturn

from jetforge.errors import ConfigError, JetforgeError

EXIT_ERROR = 1  # an error the user can fix (one line on stderr)
EXIT_BUG = 2  # an internal error
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM: outputs closed, what was finished kept (128 + SIGINT, the shell's code)


class UsageError(ConfigError):
    """The command line itself is wrong: an unknown command or option, a missing or malformed argument."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors raise :class:`UsageError` (one line, exit 1) instead of exiting 2.

    Subparsers made with ``add_subparsers`` are of the same class, so a command's own options behave alike.
    ``--help`` and ``--version`` still print and exit 0.
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError("%s: %s" % (self.prog, message), hint="see `%s --help`" % self.prog)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised like Ctrl-C's KeyboardInterrupt so every program stops the same way."""


def _on_sigterm(signum: int, frame: Any) -> None:
    # Later SIGTERMs (systemd and docker send one, impatient users several) must not interrupt the
    # cleanup the first one started; a Python handler (not SIG_IGN) so child processes get the default.
    signal.signal(signal.SIGTERM, _while_stopping)
    raise Terminated("SIGTERM")


def _while_stopping(signum: int, frame: Any) -> None:
    # os.write, not print: the main thread may be inside a print to stderr when this runs.
    with contextlib.suppress(OSError):
        os.write(2, b"jetforge: already stopping, closing outputs (SIGKILL would lose them)\n")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread; the previous handler is restored."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (an embedding program): signals are its business
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_entry(prog: str, body: Callable[[], int]) -> int:
    """Run a ``python -m`` entry point's ``body`` as the CLI runs a command; returns its exit code.

    A :class:`JetforgeError` (a usage error included) prints ``PROG: error: ...`` on one line and
    returns 1; Ctrl-C or SIGTERM prints ``PROG: interrupted`` and returns 130 after ``body``'s own
    cleanup (its ``finally`` blocks) ran.  Anything else is a bug and propagates with its traceback.
    """
    with sigterm_as_interrupt():
        try:
            return int(body() or 0)
        except JetforgeError as err:
            print("%s: error: %s" % (prog, err.one_line()), file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt as err:
            print("%s: interrupted%s" % (prog, " (SIGTERM)" if isinstance(err, Terminated) else ""), file=sys.stderr)
            return EXIT_INTERRUPTED
