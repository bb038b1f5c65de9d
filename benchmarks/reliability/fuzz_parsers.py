"""The long fuzz run: >= 100 000 hypothesis inputs per parser of outside data, through their public entry points.

The parsers, strategies and the invariant (a JetforgeError with a message, or a correct parse with
its round trip; never another exception, never a hang) are those of ``tests/fuzz/parser_fuzz.py``,
which the CI test runs briefly.  Here each parser gets ``--examples`` inputs, split into hypothesis
runs of ``--chunk`` inputs with distinct seeds (each run's memory for its explored inputs is bounded
by the chunk), run by ``--jobs`` forked worker processes, round robin over the parsers, so a run
stopped by its time budget (``--minutes``) has fuzzed every parser about equally.  A failing input
is shrunk by hypothesis and recorded (its falsifying example) in the JSON; the run goes on.

On the workstation (the project's venv):

    nice -n 10 .venv/bin/python benchmarks/reliability/fuzz_parsers.py --jobs 2            # all parsers, 100 000 each
    .venv/bin/python benchmarks/reliability/fuzz_parsers.py --dry-run                        # a few inputs each, ~1 min
    .venv/bin/python benchmarks/reliability/fuzz_parsers.py --prepare                        # wheels for the GPU host

On a host with only ``python3`` (torch, numpy, onnx, onnxruntime, OpenCV; no network, no jetforge
install), from a checkout that carries ``build/issue12_device`` (made by ``--prepare``):

    taskset -c 0-10 python3 benchmarks/reliability/fuzz_parsers.py --jobs 11 --minutes 7.5   # JSON into $OUT

The carried wheels (hypothesis and what it and jetforge need beyond that host's packages) are
installed into a private folder without network, and the checkout is imported without installing
it (``benchmarks/common/device_env.py``).  The merged JSON (inputs and outcomes per parser, failures, the
host's CPU model and SIMD flags, ``complete``: every parser reached ``--examples``) goes to
``--out``, by default ``$OUT/fuzz_parsers.json`` when ``$OUT`` is set, else
``benchmarks/reliability/results/<device>_<date>_fuzz.json``; it is rewritten after every chunk, so a run cut short
keeps what it finished.  A table is printed at the end.
"""

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # the checkout's root: benchmarks.common
sys.path.insert(0, str(REPO / "tests" / "fuzz"))

from benchmarks.common import device_env, paths  # noqa: E402  (standard library only)

PACK = REPO / "build" / "issue12_device"  # what --prepare gathers for the GPU host (git-ignored)
parser_fuzz: Any = None  # tests/fuzz/parser_fuzz.py, imported once the environment is ready (load_harness)


def run_chunk(name: str, examples: int, run_seed: int, counter: Any) -> Dict[str, Any]:
    """One hypothesis run of ``examples`` inputs for parser ``name``; never raises (failures are returned)."""
    from hypothesis import HealthCheck, Phase, given, seed, settings

    work = tempfile.mkdtemp(prefix="jetforge-fuzz-%s-" % name)
    target = parser_fuzz.make_target(name, Path(work))
    stats = {"inputs": 0, "error": 0, "parsed": 0, "max_input_seconds": 0.0, "failures": []}
    started, cpu_started = time.perf_counter(), time.process_time()

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
    stats["cpu_seconds"] = time.process_time() - cpu_started
    return stats


def _worker(job: tuple) -> Dict[str, Any]:
    name, examples, run_seed = job
    return run_chunk(name, examples, run_seed, _COUNTER)


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
                jobs.append((name, per_parser[name][round_no], base_seed + 1000 * i + round_no))
    totals = {name: {"inputs": 0, "errors": 0, "parsed": 0, "worker_seconds": 0.0, "cpu_seconds": 0.0,
                     "max_input_seconds": 0.0,
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
                (name, _, run_seed), res = item[0], item[1].get()
                t = totals[name]
                for key in ("inputs", "errors", "parsed", "worker_seconds", "cpu_seconds"):
                    t[key] += res[key]
                t["max_input_seconds"] = max(t["max_input_seconds"], res["max_input_seconds"])
                t["hypothesis_runs"] += 1
                t["seeds"].append(run_seed)
                t["failures"] += res["failures"]
                on_progress(totals)
    for t in totals.values():
        t["worker_seconds"] = round(t["worker_seconds"], 1)
        t["cpu_ms_per_input"] = round(1000.0 * t["cpu_seconds"] / t["inputs"], 2) if t["inputs"] else None
        t["cpu_seconds"] = round(t["cpu_seconds"], 1)
        t["inputs_per_worker_second"] = round(t["inputs"] / t["worker_seconds"], 1) if t["worker_seconds"] else None
        t["max_input_seconds"] = round(t["max_input_seconds"], 4)
    return totals


def write_report(out: Path, report: Dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out)


def default_out() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "fuzz_parsers.json"
    return paths.result_path(__file__, "fuzz")


def load_harness(pack: Path) -> Dict[str, Any]:
    """Make hypothesis and jetforge importable (carried wheels, the checkout), then import the harness."""
    global parser_fuzz
    from importlib import metadata

    extra: List[Path] = []
    installed: List[str] = []
    pinned = next(w.split("==")[1] for w in device_env.DEVICE_WHEELS if w.startswith("hypothesis=="))
    try:
        have: Optional[str] = metadata.version("hypothesis")
    except metadata.PackageNotFoundError:
        have = None
    if have != pinned and (pack / "wheels").is_dir():
        # the GPU host lacks it or has another release (6.168.3 there): the carried, pinned one goes first
        site = Path(tempfile.mkdtemp(prefix="jetforge-site-"))
        installed = device_env.install_wheels(pack / "wheels", site)
        extra.append(site)
    env = device_env.use_checkout(extra)
    env["wheels_installed"] = installed
    import parser_fuzz as harness

    parser_fuzz = harness
    return env


SUMMED = ("inputs", "errors", "parsed", "worker_seconds", "cpu_seconds", "hypothesis_runs")


def merge_runs(paths: List[Path], examples: int = 100_000) -> Dict[str, Any]:
    """One result from several runs (other seeds, maybe other code): per-parser totals, every run kept as it was.

    Each run's code is identified by its per-file digests; the files that changed between consecutive runs
    are listed, so a reader sees which inputs were run against which code (a fix between runs, say).
    """
    runs = [json.loads(Path(p).read_text()) for p in paths]
    parsers: Dict[str, Dict[str, Any]] = {}
    for index, run in enumerate(runs):
        for name, p in run["parsers"].items():
            t = parsers.setdefault(name, {k: 0 for k in SUMMED})
            for key in SUMMED:
                t[key] = round(t[key] + p.get(key, 0), 1)
            t["max_input_seconds"] = max(t.get("max_input_seconds", 0.0), p["max_input_seconds"])
            t.setdefault("inputs_per_run", []).append(p["inputs"])
            t.setdefault("failures", []).extend(dict(f, run=index) for f in p["failures"])
    for t in parsers.values():
        t["cpu_ms_per_input"] = round(1000.0 * t["cpu_seconds"] / t["inputs"], 2) if t["inputs"] else None
    changes = []
    for before, after in zip(runs, runs[1:]):
        old, new = before["source"]["files"], after["source"]["files"]
        changes.append(sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)))
    return {
        "what": runs[-1]["what"], "merged_from": [str(p) for p in paths],
        "examples_goal_per_parser": examples,
        "complete": all(t["inputs"] >= examples for t in parsers.values()),
        "inputs_total": sum(t["inputs"] for t in parsers.values()),
        "failures_found": sum(len(t["failures"]) for t in parsers.values()),
        "failures_in_last_run": sum(len(p["failures"]) for p in runs[-1]["parsers"].values()),
        "files_changed_between_runs": changes,
        "parsers": parsers,
        "runs": [{k: v for k, v in run.items() if k not in ("parsers", "public_entry_points")}
                 for run in runs],
        "public_entry_points": runs[-1]["public_entry_points"],
    }


def parse_args(argv: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100_000, help="inputs per parser (default 100000)")
    parser.add_argument("--parsers", nargs="*", default=None, metavar="NAME", help="parsers to fuzz (default: all)")
    parser.add_argument("--jobs", "--workers", dest="jobs", type=int, default=None,
                        help="worker processes (default: the cores this process may use)")
    parser.add_argument("--chunk", type=int, default=1000,
                        help="inputs per hypothesis run (bounds its memory and how far a run overshoots --minutes)")
    parser.add_argument("--minutes", "--max-minutes", dest="minutes", type=float, default=None,
                        help="time budget: no chunk starts after this many minutes; the JSON then says "
                             "complete: false if a parser is short of --examples")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--out", type=Path, default=None,
                        help="result JSON (default: $OUT/fuzz_parsers.json when $OUT is set, else "
                             "benchmarks/reliability/results/<device>_<date>_fuzz.json)")
    parser.add_argument("--shared", action="store_true", help="record that the machine was shared during the run")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the whole path quickly: 24 inputs per parser in chunks of 12, JSON in a "
                             "temporary folder unless --out is given")
    parser.add_argument("--prepare", action="store_true",
                        help="download the wheels the GPU host lacks into build/issue12_device/wheels and stop")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, metavar="RUN.json",
                        help="merge the JSONs of several runs (other seeds) into --out and stop")
    parser.add_argument("--pack", type=Path, default=PACK, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dry_run:
        args.examples, args.chunk = min(args.examples, 24), 12
        if args.out is None:
            args.out = Path(tempfile.mkdtemp(prefix="jetforge-fuzz-dry-")) / "fuzz_parsers.json"
    args.out = args.out or default_out()
    args.jobs = args.jobs or len(os.sched_getaffinity(0))
    return args


def main(argv: Any = None) -> int:
    args = parse_args(argv)
    if args.prepare:
        names = device_env.prepare_wheels(args.pack / "wheels")
        print("wheels for Python %s / %s in %s:\n  %s" % (device_env.DEVICE_PYTHON, device_env.DEVICE_PLATFORM,
                                                          args.pack / "wheels", "\n  ".join(names)))
        return 0
    if args.merge:
        merged = merge_runs(args.merge, args.examples)
        write_report(args.out, merged)
        print("%-20s %9s %s" % ("parser", "inputs", "per run"))
        for name, p in merged["parsers"].items():
            print("%-20s %9d %s" % (name, p["inputs"], p["inputs_per_run"]))
        print("complete: %s; failures: %d (last run: %d); written %s" % (
            merged["complete"], merged["failures_found"], merged["failures_in_last_run"], args.out))
        return 0
    env = load_harness(args.pack)
    import hypothesis

    names = args.parsers or sorted(parser_fuzz.BUILDERS)
    unknown = sorted(set(names) - set(parser_fuzz.BUILDERS))
    if unknown:
        print("fuzz_parsers.py: error: unknown parser(s) %s (fix: choose from %s)"
              % (", ".join(unknown), ", ".join(sorted(parser_fuzz.BUILDERS))), file=sys.stderr)
        return 1
    report: Dict[str, Any] = {
        "what": "hypothesis fuzzing of every parser of outside data through its public entry point "
                "(tests/fuzz/parser_fuzz.py); invariant: JetforgeError with a message or a correct parse "
                "(structure + writer round trip), never another exception, never a hang (%.0f s alarm per input)"
                % parser_fuzz.HANG_SECONDS,
        "command": " ".join([Path(sys.executable).name, "benchmarks/reliability/fuzz_parsers.py"] + list(argv or sys.argv[1:])),
        "dry_run": bool(args.dry_run), "hypothesis": hypothesis.__version__,
        "machine": device_env.machine(), "machine_shared": bool(args.shared), "environment": env,
        "source": device_env.source_digest(),
        "examples_per_parser": args.examples, "jobs": args.jobs, "chunk": args.chunk,
        "time_budget_minutes": args.minutes, "public_entry_points": dict(parser_fuzz.PUBLIC), "parsers": {},
    }
    for name in parser_fuzz.PUBLIC:  # import every parser once here, so the forked workers share the modules
        parser_fuzz.public(name)
    started = time.time()
    deadline = started + args.minutes * 60.0 if args.minutes else None

    def progress(totals: Dict[str, Dict[str, Any]]) -> None:
        report["parsers"] = totals
        report["inputs_total"] = sum(p["inputs"] for p in totals.values())
        report["failures_found"] = sum(len(p["failures"]) for p in totals.values())
        report["wall_seconds"] = round(time.time() - started, 1)
        report["load_average_at_end"] = list(os.getloadavg())
        report["complete"] = all(p["inputs"] >= args.examples for p in totals.values())
        write_report(args.out, report)  # after every chunk: a stopped run keeps what it finished

    progress(fuzz_all(names, args.examples, args.jobs, args.chunk, args.seed, deadline, progress))
    print_table(report, args.out)
    return 1 if report["failures_found"] else 0


def print_table(report: Dict[str, Any], out: Path) -> None:
    print("\n%-20s %9s %9s %9s %11s %10s %8s" % ("parser", "inputs", "errors", "parsed", "worker s", "slowest s",
                                                  "failures"))
    for name, p in report["parsers"].items():
        print("%-20s %9d %9d %9d %11.1f %10.3f %8d" % (name, p["inputs"], p["errors"], p["parsed"], p["worker_seconds"],
                                                        p["max_input_seconds"], len(p["failures"])))
    print("hypothesis %s, Python %s on %s (%d cores used); %d inputs in %.0f s; failures found: %d; complete: %s; "
          "written %s" % (report["hypothesis"], report["machine"]["python"], report["machine"].get("cpu"),
                          report["jobs"], report["inputs_total"], report["wall_seconds"], report["failures_found"],
                          report["complete"], out))


if __name__ == "__main__":
    sys.exit(main())
