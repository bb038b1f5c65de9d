"""The long fuzz run: >= 100 000 hypothesis inputs per parser of outside data, through their public entry points.

The parsers, strategies and the invariant (a JetforgeError with a message, or a correct parse with
its round trip; never another exception, never a hang) are those of ``tests/fuzz/parser_fuzz.py``,
which the CI test runs briefly.  Here each parser gets ``--examples`` inputs, split over
``--workers`` processes and into hypothesis runs of ``--chunk`` inputs with distinct seeds (each
run's memory for its explored inputs is bounded by the chunk).  A failing input is shrunk by
hypothesis and recorded (its falsifying example) in the JSON; the run goes on with the next chunk.

    nice -n 10 .venv/bin/python benchmarks/fuzz_parsers.py                    # all parsers, 100 000 each
    .venv/bin/python benchmarks/fuzz_parsers.py --examples 2000 --parsers video_source tegrastats_line

Writes benchmarks/results/fuzz_parsers.json (inputs, outcomes, time, slowest input per parser,
failures, versions, machine) and prints a table.
"""

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "fuzz"))

import hypothesis  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import parser_fuzz  # noqa: E402


def run_chunk(name: str, examples: int, run_seed: int, work: str, counter: Any) -> Dict[str, Any]:
    """One hypothesis run of ``examples`` inputs for parser ``name``; never raises (failures are returned)."""
    target = parser_fuzz.make_target(name, Path(work))
    stats = {"inputs": 0, "error": 0, "parsed": 0, "max_input_seconds": 0.0, "failures": []}
    started = time.perf_counter()

    @seed(run_seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False, print_blob=True,
              suppress_health_check=list(HealthCheck), phases=(Phase.generate, Phase.shrink))
    @given(data=target.inputs)
    def fuzz(data: Any) -> None:
        started = time.perf_counter()
        outcome = parser_fuzz.run_one(target, data)
        stats["max_input_seconds"] = max(stats["max_input_seconds"], time.perf_counter() - started)
        stats["inputs"] += 1
        stats[outcome] += 1
        if stats["inputs"] % 50 == 0:
            with counter.get_lock():
                counter.value += 50

    try:
        fuzz()
    except BaseException as err:  # noqa: B902 - a Hang is a BaseException; every failure is recorded, not lost
        notes = "\n".join(getattr(err, "__notes__", []))
        stats["failures"].append({"seed": run_seed, "error": "%s: %s" % (type(err).__name__, str(err)[:500]),
                                  "example": notes[:4000],
                                  "traceback": "".join(traceback.format_exception(err))[-4000:]})
    with counter.get_lock():
        counter.value += stats["inputs"] % 50
    shutil.rmtree(work, ignore_errors=True)
    stats["errors"] = stats.pop("error")
    stats["worker_seconds"] = time.perf_counter() - started
    return stats


def _worker(job: tuple) -> Dict[str, Any]:
    name, examples, run_seed, work = job
    return run_chunk(name, examples, run_seed, work, _COUNTER)


_COUNTER: Any = None


def _init(counter: Any) -> None:
    global _COUNTER
    _COUNTER = counter


def fuzz_all(names: List[str], examples: int, workers: int, chunk: int, base_seed: int, deadline: Optional[float],
             on_progress: Any) -> Dict[str, Dict[str, Any]]:
    """Run every parser's chunks, round robin over the parsers (so a stopped run has fuzzed each about equally).

    No new chunk starts after ``deadline`` (time.time()); ``on_progress(totals)`` runs after every chunk.
    """
    from tqdm import tqdm

    jobs = []
    per_parser = {name: [min(chunk, examples - k) for k in range(0, examples, chunk)] for name in names}
    for round_no in range(max(len(c) for c in per_parser.values())):
        for i, name in enumerate(names):
            if round_no < len(per_parser[name]):
                jobs.append((name, per_parser[name][round_no], base_seed + 1000 * i + round_no,
                             tempfile.mkdtemp(prefix="jetforge-fuzz-%s-" % name)))
    totals = {name: {"inputs": 0, "errors": 0, "parsed": 0, "worker_seconds": 0.0, "max_input_seconds": 0.0,
                     "hypothesis_runs": 0, "seeds": [], "failures": []} for name in names}
    counter = mp.Value("q", 0)
    ctx = mp.get_context("fork")
    with ctx.Pool(workers, initializer=_init, initargs=(counter,), maxtasksperchild=1) as pool, \
            tqdm(total=examples * len(names), desc="fuzz", unit="input", mininterval=10.0) as bar:
        pending: List[Any] = []
        queue = list(jobs)
        while queue or pending:
            while queue and len(pending) < workers and (deadline is None or time.time() < deadline):
                job = queue.pop(0)
                pending.append((job, pool.apply_async(_worker, (job,))))
            if not pending:
                break  # the deadline passed: no new chunk
            time.sleep(2.0)
            bar.update(counter.value - bar.n)
            for item in [p for p in pending if p[1].ready()]:
                pending.remove(item)
                (name, _, run_seed, _), res = item[0], item[1].get()
                t = totals[name]
                for key in ("inputs", "errors", "parsed", "worker_seconds"):
                    t[key] += res[key]
                t["max_input_seconds"] = max(t["max_input_seconds"], res["max_input_seconds"])
                t["hypothesis_runs"] += 1
                t["seeds"].append(run_seed)
                t["failures"] += res["failures"]
                on_progress(totals)
    for t in totals.values():
        t["worker_seconds"] = round(t["worker_seconds"], 1)
        t["inputs_per_worker_second"] = round(t["inputs"] / t["worker_seconds"], 1) if t["worker_seconds"] else None
        t["max_input_seconds"] = round(t["max_input_seconds"], 4)
    return totals


def write_report(out: Path, report: Dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out)


def machine() -> Dict[str, Any]:
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "load_average_at_start": list(os.getloadavg())}


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100_000, help="inputs per parser (default 100000)")
    parser.add_argument("--parsers", nargs="*", default=sorted(parser_fuzz.BUILDERS), metavar="NAME",
                        help="parsers to fuzz (default: all): %s" % ", ".join(sorted(parser_fuzz.BUILDERS)))
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--chunk", type=int, default=5000, help="inputs per hypothesis run (bounds its memory)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no new chunk after this many minutes (a shared machine); "
                             "the JSON then says complete: false")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fuzz_parsers.json"))
    parser.add_argument("--shared", action="store_true", help="record that the machine was shared during the run")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.parsers) - set(parser_fuzz.BUILDERS))
    if unknown:
        parser.error("unknown parser(s) %s; choose from %s"
                     % (", ".join(unknown), ", ".join(sorted(parser_fuzz.BUILDERS))))

    report: Dict[str, Any] = {
        "what": "hypothesis fuzzing of every parser of outside data through its public entry point "
                "(tests/fuzz/parser_fuzz.py); invariant: JetforgeError with a message or a correct parse "
                "(structure + writer round trip), never another exception, never a hang (%.0f s alarm per input)"
                % parser_fuzz.HANG_SECONDS,
        "command": " ".join([Path(sys.executable).name, "benchmarks/fuzz_parsers.py"] + list(argv or sys.argv[1:])),
        "hypothesis": hypothesis.__version__, "python": platform.python_version(),
        "machine": machine(), "machine_shared": bool(args.shared),
        "examples_per_parser": args.examples, "workers": args.workers, "public_entry_points": dict(parser_fuzz.PUBLIC),
        "parsers": {},
    }
    for name in parser_fuzz.PUBLIC:  # import every parser once here, so the forked workers share the modules
        parser_fuzz.public(name)
    out = Path(args.out)
    started = time.time()
    deadline = started + args.max_minutes * 60.0 if args.max_minutes else None

    def progress(totals: Dict[str, Dict[str, Any]]) -> None:
        report["parsers"] = totals
        report["failures_found"] = sum(len(p["failures"]) for p in totals.values())
        report["wall_seconds"] = round(time.time() - started, 1)
        report["machine"]["load_average_at_end"] = list(os.getloadavg())
        report["complete"] = all(p["inputs"] >= args.examples for p in totals.values())
        write_report(out, report)  # after every chunk: a stopped run keeps what it finished

    progress(fuzz_all(args.parsers, args.examples, args.workers, args.chunk, args.seed, deadline, progress))

    print("\n%-20s %9s %9s %9s %11s %10s %8s" % ("parser", "inputs", "errors", "parsed", "worker s", "slowest s",
                                                  "failures"))
    for name, p in report["parsers"].items():
        print("%-20s %9d %9d %9d %11.1f %10.3f %8d" % (name, p["inputs"], p["errors"], p["parsed"], p["worker_seconds"],
                                                        p["max_input_seconds"], len(p["failures"])))
    print("hypothesis %s, Python %s; failures found: %d; complete: %s; written %s" % (
        report["hypothesis"], report["python"], report["failures_found"], report["complete"], out))
    return 1 if report["failures_found"] else 0


if __name__ == "__main__":
    sys.exit(main())
