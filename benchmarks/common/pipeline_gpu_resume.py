"""Going on after a device call's process died: :func:`supervise` reruns ``benchmarks/gpu_pipeline/pipeline_gpu.py``
from its last checkpoint.

Why: the benchmark's process died of native heap corruption (inside PyNvVideoCodec's threaded decoders, as far as
the traces tell) in 4 of ~17 device calls; each death threw away the rest of a call that cannot be had again that
day.  The script already writes its results after every step (a partial JSON) and names the step it is about to run;
with ``--restarts N`` it runs itself as a child process and, when the child crashes (:data:`CRASH_SIGNALS`), records the death
(the step it died in, the signal) and starts a new child that skips every step already measured
(``--resume-from``), within the same wall limit.  A resumed child pays the start-up again (~30 s: torch, the models,
their CUDA graphs) and keeps the budget the dead one had left: the measured steps' seconds count as spent.

Every step is identified by its label (:attr:`~.pipeline_gpu_plan.Step.label`), which the plan makes from the
command line alone, so a child given the same flags plans the same steps.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

# What a native crash ends a child with: SIGABRT (the C library's heap checks), SIGSEGV, SIGBUS, SIGILL, SIGFPE, as a
# negative return code, or as a shell's 128 + N where the child runs behind one.  A child stopped on purpose (SIGTERM,
# SIGINT, SIGKILL: a time-out, Ctrl-C, the OOM killer) is not restarted.
CRASH_SIGNALS = (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)
DIED_CODES = tuple(128 + int(sig) for sig in CRASH_SIGNALS)
OWN_FLAGS = ("--restarts", "--wall-limit-s", "--resume-from")  # the supervisor sets these for each child
MIN_CHILD_S = 60.0  # a child with less wall time than this would spend it starting up: not started


def load_checkpoint(path: Path, doing: str = "cannot resume from") -> Dict[str, Any]:
    """A partial JSON the script wrote (``partial``, ``results``, ``gpu_tests``, ``machine``, ``current``), or a
    SystemExit saying ``doing`` and what is wrong with the file (the one check of such a file: resuming and
    ``--report-partial`` both read it here)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SystemExit("%s %s: %s" % (doing, path, err)) from None
    if not isinstance(data, dict) or not data.get("partial") or not isinstance(data.get("results"), dict):
        raise SystemExit("%s %s: not a partial pipeline_gpu JSON (no 'partial' and 'results')" % (doing, path))
    res = data["results"]
    steps_ok = all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], (int, float))
                   for e in res.get("step_seconds", []))
    skipped_ok = all(isinstance(e, dict) and isinstance(e.get("step"), str) for e in res.get("skipped", []))
    if not (steps_ok and skipped_ok):
        raise SystemExit("%s %s: its step_seconds or skipped entries are not what pipeline_gpu.py writes "
                         "([label, seconds] pairs, {'step': label} records)" % (doing, path))
    return data


def done_labels(res: Dict[str, Any]) -> Set[str]:
    """The steps a resumed run does not run again: those measured (``step_seconds``) and those the budget skipped."""
    return {label for label, _ in res.get("step_seconds", [])} | {s["step"] for s in res.get("skipped", [])}


def history_of(res: Dict[str, Any]) -> Dict[str, List[float]]:
    """Each measured step's seconds by its key (its label without `` rep N``): the estimates the budget uses."""
    history: Dict[str, List[float]] = {}
    for label, seconds in res.get("step_seconds", []):
        history.setdefault(label.rsplit(" rep ", 1)[0], []).append(float(seconds))
    return history


def spent_s(res: Dict[str, Any]) -> float:
    """Seconds of measuring already done (the measured steps' sum): a resumed run's budget starts there."""
    return float(sum(seconds for _, seconds in res.get("step_seconds", [])))


def child_argv(argv: Sequence[str], wall_left_s: float, resume_from: Optional[Path]) -> List[str]:
    """The supervisor's own flags (:data:`OWN_FLAGS`, as ``--flag value`` or ``--flag=value``) taken out of
    ``argv``, the child's wall limit and, after a death, ``--resume-from`` put in."""
    out: List[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in OWN_FLAGS:
            skip = True
            continue
        if any(arg.startswith(flag + "=") for flag in OWN_FLAGS):
            continue
        out.append(arg)
    out += ["--restarts", "0", "--wall-limit-s", "%.0f" % wall_left_s]
    if resume_from is not None:
        out += ["--resume-from", str(resume_from)]
    return out


def died(returncode: int) -> bool:
    """Whether a child's exit is a crash (:data:`CRASH_SIGNALS`: negative, as Python reports a signal, or a shell's
    128 + N), not an exit or a stop on purpose."""
    return -returncode in [int(sig) for sig in CRASH_SIGNALS] or returncode in DIED_CODES


def run_child(cmd: List[str]) -> int:
    """Run one child and return its exit status; a SIGTERM to this process stops the child too (killed, its
    checkpoint kept) and exits with 143 instead of leaving it running on its own."""
    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)  # subprocess.run kills the child on the way out

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return subprocess.run(cmd).returncode
    finally:
        signal.signal(signal.SIGTERM, previous)


def record_death(path: Path, returncode: int, resumed: bool) -> Optional[str]:
    """Add the death to the checkpoint's errors (the step it died in, the signal, whether a child goes on) and
    return the step's label (None: it died between steps or before the first)."""
    data = load_checkpoint(path)
    current = data.get("current")
    how = "signal %d" % -returncode if returncode < 0 else "exit %d" % returncode
    data["results"].setdefault("errors", []).append({
        "what": current or "the process, between steps",
        "error": "the process died (%s); %s" % (how, "a new process went on from the steps measured" if resumed
                                                 else "not resumed (no restarts or wall time left)")})
    data["current"] = None
    Path(path).write_text(json.dumps(data, indent=1, default=str))
    return current


def supervise(script: Path, argv: Sequence[str], checkpoint: Path, restarts: int, wall_limit_s: float,
              log: Callable[..., None] = print,
              run: Callable[[List[str]], int] = run_child) -> int:
    """Run ``script`` with ``argv`` as a child; after each death (:func:`died`) with a checkpoint to go on from,
    record it and run a new child with ``--resume-from``, up to ``restarts`` times and while at least
    :data:`MIN_CHILD_S` of ``wall_limit_s`` (0: none) is left.  Returns the last child's exit status, or 4 when the
    last one died (its checkpoint then holds every step measured and the deaths)."""
    t0 = time.perf_counter()
    resume: Optional[Path] = None
    for attempt in range(restarts + 1):
        left = wall_limit_s - (time.perf_counter() - t0) if wall_limit_s > 0 else 0.0
        cmd = [sys.executable, "-X", "faulthandler", str(script)] + child_argv(argv, left, resume)
        rc = run(cmd)
        if not died(rc):
            return rc
        left = wall_limit_s - (time.perf_counter() - t0) if wall_limit_s > 0 else float("inf")
        can_go_on = checkpoint.is_file() and attempt < restarts and left >= MIN_CHILD_S
        if not checkpoint.is_file():
            log("the child process died (exit %d) before its first checkpoint: nothing to go on from" % rc)
            return 4
        step = record_death(checkpoint, rc, can_go_on)
        log("the child process died (exit %d) in %s; %s" % (rc, step or "no step", "going on from its checkpoint"
                                                            if can_go_on else "not resumed"))
        if not can_go_on:
            return 4
        resume = checkpoint
    return 4


__all__ = ["CRASH_SIGNALS", "DIED_CODES", "MIN_CHILD_S", "OWN_FLAGS", "child_argv", "died", "done_labels", "history_of",
           "load_checkpoint", "record_death", "run_child", "spent_s", "supervise"]
