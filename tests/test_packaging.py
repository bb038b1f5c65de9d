"""The wheel installs one namespace, ``jetforge``, with every folder as a subpackage and its data.

The wheel is built offline from a copy of the working tree (so the build leaves no
``build/`` or ``*.egg-info`` in the repository and sees exactly the files that are
there now), installed with ``pip --target`` into a temporary folder and imported
from a process whose working directory is outside the repository.  The editable
install that ``./dev`` makes is checked the same way.
"""

import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest
from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[1]
DATA_SUFFIXES = (".yaml", ".yml", ".json", ".txt", ".csv")  # files that must ship if they sit in a package
SKIP_DIRS = {"__pycache__", ".pytest_cache"}


def _setup_literals() -> "Dict[str, List[str]]":
    """package_data as written in setup.py (read, not executed); the layout must be src/ with path = import path."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    package_dir = package_data = None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "package_dir":
            package_dir = ast.literal_eval(node.value)
        if isinstance(node, ast.keyword) and node.arg == "package_data":
            package_data = ast.literal_eval(node.value)
    assert package_dir == {"": "src"}, "setup.py must map the package from src/ (the folder path is the import path)"
    assert package_data is not None, "setup.py no longer defines package_data literally"
    return package_data


PACKAGE_DATA = _setup_literals()
LAYERS = ("targets", "runtime", "calibrate", "compress", "apps", "deploy", "cli")
# package -> its folder in the repository: src/jetforge and one folder per layer below it
FOLDERS = dict([("jetforge", "src/jetforge")] + [("jetforge." + n, "src/jetforge/" + n) for n in LAYERS])


def _packages(src: Path) -> Dict[str, Path]:
    """Package name -> folder, computed the way setup.py computes it."""
    out = {}
    for package, folder in FOLDERS.items():
        out[package] = src / folder
        for sub in find_packages(str(src / folder)):
            out["%s.%s" % (package, sub)] = src / folder / sub.replace(".", "/")
    return out


def _wheel_path(package: str, rel: str) -> str:
    return "/".join(package.split(".") + [rel])


def _walk_files(folder: Path):
    for dirpath, dirnames, filenames in os.walk(str(folder)):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        for name in filenames:
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath) / name


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(source copy, wheel path, install target) — built and installed once for the module."""
    base = tmp_path_factory.mktemp("pkg")
    src = base / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".*")
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(str(ROOT / name), str(src / name))
    shutil.copytree(str(ROOT / "src"), str(src / "src"), ignore=ignore)
    dist = base / "dist"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
                          cwd=str(base), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, "wheel build failed:\n" + proc.stdout[-4000:]
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    target = base / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
                           "--target", str(target), str(wheels[0])],
                          cwd=str(base), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, "pip install --target failed:\n" + proc.stdout[-4000:]
    return src, wheels[0], target


def test_wheel_top_level_is_only_jetforge(built):
    _, wheel, _ = built
    import jetforge

    assert wheel.name.startswith("jetforge-%s-" % jetforge.__version__)
    with zipfile.ZipFile(str(wheel)) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
    assert tops == {"jetforge", "jetforge-%s.dist-info" % jetforge.__version__}
    with zipfile.ZipFile(str(wheel)) as z:
        entry_points = z.read("jetforge-%s.dist-info/entry_points.txt" % jetforge.__version__).decode()
    assert "jetforge = jetforge.cli.main:main" in entry_points


def test_wheel_has_every_module(built):
    src, wheel, _ = built
    with zipfile.ZipFile(str(wheel)) as z:
        names = set(z.namelist())
    packages = _packages(src)
    package_dirs = {folder.resolve(): package for package, folder in packages.items()}
    missing, orphans = [], []
    for folder in FOLDERS.values():
        for path in _walk_files(src / folder):
            if path.suffix != ".py":
                continue
            package = package_dirs.get(path.parent.resolve())
            if package is None:
                orphans.append(str(path.relative_to(src)))
            elif _wheel_path(package, path.name) not in names:
                missing.append(str(path.relative_to(src)))
    assert not orphans, ("these modules sit in a folder without __init__.py, so setup.py does not package them: %s"
                         % orphans)
    assert not missing, "modules missing from the wheel: %s" % missing


def test_wheel_has_package_data(built):
    """Every non-.py file that setup.py's package_data patterns select is in the wheel, and no data file is
    left where the patterns do not reach (it would be missing from every install)."""
    src, wheel, _ = built
    with zipfile.ZipFile(str(wheel)) as z:
        names = set(z.namelist())
    patterns = PACKAGE_DATA.get("", [])
    expected, unreached = [], []
    packages = _packages(src)
    for package, folder in packages.items():
        for pattern in patterns + PACKAGE_DATA.get(package, []):
            for path in folder.glob(pattern):
                if path.is_file() and path.suffix != ".py":
                    expected.append(_wheel_path(package, path.relative_to(folder).as_posix()))
    for folder in FOLDERS.values():
        for path in _walk_files(src / folder):
            if path.suffix.lower() not in DATA_SUFFIXES:
                continue
            owners = [(p, f) for p, f in packages.items() if f in path.parents]
            package, pfolder = max(owners, key=lambda pf: len(pf[1].parts))
            rel = path.relative_to(pfolder).as_posix()
            if not any(fnmatch.fnmatch(rel, pat) for pat in patterns + PACKAGE_DATA.get(package, [])):
                unreached.append(str(path.relative_to(src)))
    missing = sorted(set(expected) - names)
    assert not missing, "package data missing from the wheel: %s" % missing
    assert not unreached, ("data files no package_data pattern in setup.py selects (they would not be installed): %s"
                           % unreached)


def test_installed_wheel_imports_from_target_outside_repo(built, tmp_path):
    src, _, target = built
    tops = sorted(p.name for p in target.iterdir())
    assert [t for t in tops if t not in ("jetforge", "bin") and not t.startswith("jetforge-")] == [], tops
    packages = sorted(_packages(src))
    script = """
import importlib, json, sys
out = {}
for name in %r:
    mod = importlib.import_module(name)
    out[name] = mod.__file__
print(json.dumps(out))
""" % (packages,)
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONNOUSERSITE="1")
    proc = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)
    assert set(files) == set(packages)
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(target.resolve()), (name, file)
    proc = subprocess.run([sys.executable, "-m", "jetforge", "--version"], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import jetforge

    assert proc.stdout.strip() == "jetforge %s" % jetforge.__version__


def test_installed_wheel_reads_its_labelled_person_set(built, tmp_path):
    """The person-box set is package data: an install away from any checkout reads it by default (before issue 23
    it was read from benchmarks/labels/ by a checkout-relative path, so the detector recipes' default labels and
    ``read_person_labels()`` worked only in a checkout)."""
    _, _, target = built
    script = ("import json\nfrom jetforge.vision.person_labels import DEFAULT_LABELS, read_person_labels\n"
              "labels = read_person_labels()\n"
              "print(json.dumps([str(DEFAULT_LABELS), len(labels.frames), len(labels.select('heldout'))]))")
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONNOUSERSITE="1")
    proc = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    path, frames, heldout = json.loads(proc.stdout)
    assert Path(path).resolve().is_relative_to(target.resolve()) and frames == 155 and heldout == 94


def test_editable_install_maps_folders_and_installs_no_generic_names(tmp_path):
    """The development install resolves jetforge.<layer> to src/jetforge/<layer>, from any directory."""
    script = """
import importlib, importlib.util, json
try:
    import jetforge
except ImportError:
    print(json.dumps(None)); raise SystemExit(0)
out = {"packages": {}, "bare": {}}
for name in %r:
    out["packages"][name] = importlib.import_module(name).__file__
for bare in %r:
    spec = importlib.util.find_spec(bare)
    out["bare"][bare] = spec.origin if spec is not None else None
print(json.dumps(out))
""" % (sorted(FOLDERS), list(LAYERS))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    if result is None:
        pytest.skip("jetforge is not installed in this interpreter (run ./dev env)")
    for name, file in result["packages"].items():
        folder = ROOT / FOLDERS[name]
        assert Path(file).resolve().parent == folder.resolve(), (name, file)
    for bare, origin in result["bare"].items():
        assert origin is None or not Path(origin).resolve().is_relative_to(ROOT), (
            "%r is importable as a top-level name from %s" % (bare, origin))
