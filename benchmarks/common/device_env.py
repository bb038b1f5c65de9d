"""Run a benchmark from a plain checkout on a machine that has Python but not jetforge or our venv.

The lent GPU host has ``python3`` with torch, numpy, onnx, onnxruntime and OpenCV, no network, and
no jetforge install.  The reliability study's long runs (``fuzz_parsers.py``, ``soak_people.py``) need a few
small packages more and ``import jetforge.<folder>`` from the checkout:

* :func:`prepare_wheels` (on the workstation, with network) downloads the wheels the device lacks
  into a git-ignored folder that travels with the checkout;
* :func:`install_wheels` (on the device) installs them into a private ``--target`` folder with
  ``--no-index --no-deps`` (nothing is fetched, nothing in the host's Python changes);
* :func:`use_checkout` makes ``import jetforge`` work from the checkout without installing it: the package
  lives in ``src/jetforge`` (the folder path is the import path), so ``src/`` goes on ``sys.path`` and on
  ``PYTHONPATH`` for every subprocess (the soak runs the real CLI as ``python -m jetforge.cli.main``).

The workstation's editable install is the same package.  Standard library only: it runs before anything else
can be imported.
"""

import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
#: What the device's python3 lacks for the issue-12 runs, pinned to the versions the project's venv uses.
DEVICE_WHEELS = ("hypothesis==6.170.17", "sortedcontainers==2.4.0", "PyYAML==6.0.4", "tqdm==4.70.1",
                 "psutil==7.2.2", "onnx-graphsurgeon==0.6.1")  # graphsurgeon: the recipes' Q/DQ export
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORM = "manylinux2014_x86_64"


def jetforge_importable() -> bool:
    try:
        import jetforge.runtime  # noqa: F401
        return True
    except ImportError:
        return False


def use_checkout(extra_paths: Sequence[Path] = ()) -> Dict[str, Any]:
    """Make jetforge from this checkout's ``src/`` (and ``extra_paths``, e.g. installed wheels) importable here and
    in subprocesses (``PYTHONPATH``), as :func:`benchmarks.common.paths.use_checkout` does.

    Returns how it was done, for the result JSON.
    """
    extra = [str(p) for p in extra_paths if Path(p).is_dir()]
    paths = extra + [str(REPO / "src")]
    for p in reversed(paths):
        if p in sys.path:
            sys.path.remove(p)
        sys.path.insert(0, p)
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and p not in paths])
    import jetforge

    return {"jetforge": "checkout's src/ first on the path", "jetforge_file": str(Path(jetforge.__file__).parent),
            "extra_paths": extra}


def prepare_wheels(dest: Path, packages: Sequence[str] = DEVICE_WHEELS,
                   python_version: str = DEVICE_PYTHON) -> List[str]:
    """Download ``packages`` as wheels for the device's Python (binary only, no dependencies resolved)."""
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python_version, "--platform", DEVICE_PLATFORM, "-d", str(dest), "--"]
                   + list(packages), check=True)
    return sorted(p.name for p in dest.glob("*.whl"))


def install_wheels(wheels: Path, target: Path) -> List[str]:
    """Install every wheel in ``wheels`` into ``target`` without network; returns the wheel names installed.

    A wheel built for another Python or platform (the dry run here, Python 3.11, with 3.12 wheels) is
    skipped with a note: that machine has the package already (the project venv) or the run fails on import.
    """
    found = sorted(wheels.glob("*.whl"))
    usable = [w for w in found if wheel_fits(w.name)]
    for w in found:
        if w not in usable:
            print("device_env: skipping %s (not for Python %s on this platform)" % (w.name, platform.python_version()),
                  flush=True)
    if usable:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--disable-pip-version-check", "--target", str(target)] + [str(w) for w in usable],
                       check=True, env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore"))
    return [w.name for w in usable]


def wheel_fits(name: str) -> bool:
    """Whether a wheel's Python tag suits this interpreter (pure ``py3`` wheels and ABI3 always do)."""
    parts = name[:-len(".whl")].split("-")
    python_tag, abi_tag = parts[-3], parts[-2]
    here = "cp%d%d" % sys.version_info[:2]
    tags = python_tag.split(".")
    return abi_tag == "abi3" or here in tags or any(t in ("py3", "py2.py3") or t.startswith("py3") for t in tags)


def source_digest(folders: Sequence[str] = ("src/jetforge", "tests/fuzz"),
                  files: Sequence[str] = ("benchmarks/common/device_env.py", "benchmarks/common/paths.py",
                                          "benchmarks/reliability/fuzz_parsers.py",
                                          "benchmarks/reliability/soak_people.py")) -> Dict[str, Any]:
    """SHA-256 of every ``*.py`` file of the library, the fuzz harness and these scripts (12 hex digits each).

    A checkout carried to another machine has no ``.git``; the digests say exactly which code a result came
    from, and which files changed since (``python3 benchmarks/common/device_env.py RESULT.json`` lists them).
    """
    paths = [p for folder in folders for p in sorted((REPO / folder).rglob("*.py")) if "__pycache__" not in p.parts]
    paths += [REPO / f for f in files if (REPO / f).is_file()]
    per_file = {str(p.relative_to(REPO)): hashlib.sha256(p.read_bytes()).hexdigest()[:12] for p in paths}
    total = hashlib.sha256("".join("%s %s\n" % kv for kv in sorted(per_file.items())).encode()).hexdigest()
    commit = None
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"sha256": total, "git_head": commit, "files": per_file}


def changed_since(recorded: Dict[str, str]) -> Dict[str, List[str]]:
    """Files whose content differs from a result's ``source["files"]`` (changed, added, removed)."""
    now = source_digest()["files"]
    return {"changed": sorted(k for k in recorded if k in now and now[k] != recorded[k]),
            "added": sorted(k for k in now if k not in recorded),
            "removed": sorted(k for k in recorded if k not in now)}


def machine(cores: Optional[int] = None) -> Dict[str, Any]:
    """The CPU this ran on (model, architecture, SIMD flags), the cores this process may use, the load."""
    info: Dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version(),
                            "cores_total": os.cpu_count(),
                            "cores_usable": cores or len(os.sched_getaffinity(0)),
                            "cores_pinned": sorted(os.sched_getaffinity(0)),
                            "load_average": list(os.getloadavg())}
    try:
        from jetforge.runtime.cpu_features import cpu_features

        c = cpu_features()
        info.update(cpu=c.model, arch=c.arch, cpu_flags=c.to_dict()["flags"], int8_kernels=c.to_dict()["int8_kernels"])
    except ImportError:
        info["cpu"] = platform.processor()
    return info


if __name__ == "__main__":  # list what changed since a result was made: device_env.py RESULT.json
    import json

    if len(sys.argv) > 1:
        print(json.dumps(changed_since(json.loads(Path(sys.argv[1]).read_text())["source"]["files"]), indent=1))
    else:
        print(source_digest()["sha256"])
