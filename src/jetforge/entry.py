"""What every command-line entry point shares: exit codes, one-line usage errors, SIGTERM handled as Ctrl-C.

The ``jetforge`` command (``cli/main.py``) and the ``python -m`` entry points that bypass it
(``torchrun -m jetforge.compress.recipes``, ``python -m jetforge.deploy.remote_bench``)
keep one promise: bad input is one line naming the problem and the fix, exit 1 - a mistyped option
included, which plain argparse reports with a usage dump and exit 2 - and a stop by SIGTERM (how
``systemctl stop``, ``docker stop``, ``kill`` and torchrun's own shutdown end a process) ends the run
like Ctrl-C: a :class:`Terminated` (a ``KeyboardInterrupt``) is raised in the main thread, so whatever
a program does on Ctrl-C - close its outputs, keep its last checkpoint - it also does on SIGTERM.
Only the first stop signal interrupts: later ones (a second Ctrl-C, systemd's repeated SIGTERM) print a
line and let that cleanup finish.
"""

import _thread
import argparse
import contextlib
import functools
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator, List, NoReturn, Optional

from jetforge.errors import ConfigError, JetforgeError, user_os_error

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


def _stopping() -> None:
    """The first stop signal arrived: from now on SIGINT and SIGTERM only say that the run is already stopping.

    Two Ctrl-C 50 ms apart used to interrupt the cleanup the first one started (an app then exited without
    its ``metrics.json``); systemd, docker and impatient users also send several signals.  Python handlers,
    not SIG_IGN, so child processes still get the default disposition.
    """
    signal.signal(signal.SIGTERM, _while_stopping)
    signal.signal(signal.SIGINT, _while_stopping)


def _on_sigterm(signum: int, frame: Any) -> None:
    _stopping()
    raise Terminated("SIGTERM")


def _on_sigint(signum: int, frame: Any) -> None:
    _stopping()
    raise KeyboardInterrupt


def _while_stopping(signum: int, frame: Any) -> None:
    if _SWALLOWED:  # the first stop's interrupt was lost (see _on_unraisable): raise it here, where it can propagate
        raise _SWALLOWED.pop()
    # os.write, not print: the main thread may be inside a print to stderr when this runs.
    with contextlib.suppress(OSError):
        os.write(2, b"jetforge: already stopping, closing outputs (SIGKILL would lose them)\n")


#: a stop's interrupt the interpreter ignored, waiting to be raised again (at most one)
_SWALLOWED: List[BaseException] = []


def _on_unraisable(previous: Callable[[Any], None], unraisable: Any) -> None:
    """``sys.unraisablehook`` while stop signals interrupt: a stop whose interrupt was raised where Python cannot
    propagate an exception (a weakref callback such as importlib's module-lock one, a ``__del__``) is printed as
    "Exception ignored" and lost, and the run went on to the end while later signals only said "already stopping"
    (seen once in a test suite run: a SIGINT during an import).  Such an interrupt is kept and raised again at the
    main thread's next safe point: ``_thread.interrupt_main`` runs the SIGINT handler (now :func:`_while_stopping`),
    called from another thread a moment later, since the main thread would run it inside this hook, where the raise
    is ignored again.  Lost there once more, it comes back here and is tried again."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and not _SWALLOWED:
        _SWALLOWED.append(unraisable.exc_value)
        retry = threading.Timer(REDELIVER_AFTER_S, _thread.interrupt_main)
        retry.daemon = True
        retry.start()
        return
    previous(unraisable)


REDELIVER_AFTER_S = 0.01  # long enough for the main thread to leave the callback the interrupt was lost in


def stop_behind(err: BaseException) -> Optional[KeyboardInterrupt]:
    """The stop (Ctrl-C's KeyboardInterrupt, SIGTERM's :class:`Terminated`) that ``err`` wraps, if any: Python turns an
    interrupt raised inside a descriptor's ``__set_name__`` -- e.g. while a dataclass is made during an import --
    into ``RuntimeError("Error calling __set_name__ ...")`` with the interrupt as its cause (seen once: a calibrate
    run stopped by SIGINT ended in "internal error", exit 2).  The programs' handlers call this before calling an
    exception a bug, so such a stop still ends as a stop (exit 130)."""
    seen = set()
    cause: Optional[BaseException] = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


@contextlib.contextmanager
def stop_signals_as_interrupt(process_exit: bool = False) -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` and Ctrl-C ``KeyboardInterrupt`` in the main thread, once:
    later ones print a line and let the cleanup finish.  The previous handlers are restored on the way out.

    ``process_exit``: the block is the whole program (a console script), so once a stop signal arrived both
    signals are ignored on the way out: the outputs are closed and only the interpreter's shutdown is left.
    Restoring Python's default handler let a second Ctrl-C that came after the cleanup kill the process by
    SIGINT (exit -2 instead of 130); a Python handler would not do either, since the interpreter's finalisation
    resets Python-level handlers to the default (SIG_IGN it keeps).

    A SIGINT that the process inherited as ignored (a job started with ``nohup ... &``) stays ignored, and a
    handler an embedding program installed is left alone: only Python's default Ctrl-C handler is replaced.
    """
    try:
        previous_term = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (an embedding program): signals are its business
        yield
        return
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_on_unraisable, previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        _SWALLOWED.clear()
        if process_exit and signal.getsignal(signal.SIGTERM) is _while_stopping:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, previous_term)
            signal.signal(signal.SIGINT, previous_int)


def run_entry(prog: str, body: Callable[[], int], process_exit: bool = False) -> int:
    """Run a ``python -m`` entry point's ``body`` as the CLI runs a command; returns its exit code.

    A :class:`JetforgeError` (a usage error included) prints ``PROG: error: ...`` on one line and
    returns 1; Ctrl-C or SIGTERM prints ``PROG: interrupted`` and returns 130 after ``body``'s own
    cleanup (its ``finally`` blocks) ran.  Anything else is a bug and propagates with its traceback.
    ``process_exit``: ``body`` is the whole program (see :func:`stop_signals_as_interrupt`).
    """
    with stop_signals_as_interrupt(process_exit):
        try:
            return int(body() or 0)
        except JetforgeError as err:
            print("%s: error: %s" % (prog, err.one_line()), file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt as err:
            return interrupted(prog, err)
        except Exception as err:  # a full disk, a name too long: the user's, one line; a wrapped stop; else a bug
            user = user_os_error(err) if isinstance(err, OSError) else None
            if user is not None:
                print("%s: error: %s" % (prog, user.one_line()), file=sys.stderr)
                return EXIT_ERROR
            stop = stop_behind(err)
            if stop is None:
                raise
            return interrupted(prog, stop)


def interrupted(prog: str, stop: KeyboardInterrupt) -> int:
    """Say that ``prog`` was stopped (by SIGTERM, or Ctrl-C) and give the exit code of a stop."""
    print("%s: interrupted%s" % (prog, " (SIGTERM)" if isinstance(stop, Terminated) else ""), file=sys.stderr)
    return EXIT_INTERRUPTED
