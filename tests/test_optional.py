"""jetforge.optional: lazy imports that say how to install what is missing, and hide nothing else.

A missing package is simulated as Python sees one (``sys.modules[name] = None`` makes
``import name`` raise ModuleNotFoundError with ``name`` set); a broken install is a
real package on disk whose import fails inside.
"""

import sys

import pytest

from jetforge.errors import DependencyError
from jetforge.optional import INSTALL_HINTS, is_available, require


def _package(tmp_path, monkeypatch, name, init):
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(init)
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        monkeypatch.delitem(sys.modules, mod)


def test_require_returns_the_module():
    import json

    assert require("json") is json
    assert require("os.path", "paths").join("a", "b") == "a/b"


@pytest.mark.parametrize("module", sorted(INSTALL_HINTS))
def test_missing_package_names_itself_and_the_install_step(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(DependencyError) as info:
        require(module, "building an engine")
    err = info.value
    label, hint = INSTALL_HINTS[module]
    assert err.message == "%s is not installed; it is needed for building an engine" % label
    assert err.hint == hint
    assert "install" in hint or "JetPack" in hint
    line = err.one_line()
    assert "\n" not in line and line.endswith("(fix: %s)" % " ".join(hint.split()))
    assert isinstance(err.__cause__, ModuleNotFoundError)


@pytest.mark.parametrize("module, words", [
    ("torch", ["PyTorch", "jetforge[compress]"]),
    ("onnxruntime", ["ONNX Runtime", "pip install onnxruntime"]),
    ("tensorrt", ["TensorRT", "JetPack", "python3-libnvinfer"]),
    ("cuda", ["cuda-python", "jetforge[cuda]"]),
    ("pycuda", ["PyCUDA", "pip install pycuda"]),
    ("pynvml", ["pynvml", "pip install nvidia-ml-py"]),
])
def test_the_device_packages_hints_name_the_package(monkeypatch, module, words):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(DependencyError) as info:
        require(module)
    assert info.value.message.endswith("is not installed; it is needed")
    for word in words:
        assert word in info.value.one_line()


def test_missing_submodule_of_missing_package_uses_the_package_hint(monkeypatch):
    for name in [m for m in sys.modules if m.startswith("cuda.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cuda", None)
    with pytest.raises(DependencyError, match="cuda-python is not installed"):
        require("cuda.bindings.runtime", "CUDA streams")


def test_unknown_package_gets_a_pip_hint():
    with pytest.raises(DependencyError) as info:
        require("jetforge_surely_absent_pkg", "a test")
    assert info.value.hint == "pip install jetforge_surely_absent_pkg"


def test_import_error_inside_an_installed_package_is_not_disguised(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch, "jetforge_broken_native",
             "raise ImportError('libnvinfer.so.8: cannot open shared object file')\n")
    with pytest.raises(ImportError, match="libnvinfer.so.8") as info:
        require("jetforge_broken_native", "a test")
    assert not isinstance(info.value, DependencyError)


def test_missing_dependency_of_an_installed_package_is_not_disguised(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch, "jetforge_needs_other", "import jetforge_other_absent_dep\n")
    with pytest.raises(ModuleNotFoundError) as info:
        require("jetforge_needs_other")
    assert info.value.name == "jetforge_other_absent_dep"


def test_missing_inner_module_of_an_installed_package_is_not_disguised(tmp_path, monkeypatch):
    """onnxruntime whose compiled part is missing is a broken install, not an absent package."""
    _package(tmp_path, monkeypatch, "jetforge_half_installed", "import jetforge_half_installed._native\n")
    with pytest.raises(ModuleNotFoundError) as info:
        require("jetforge_half_installed", "a test")
    assert not isinstance(info.value, DependencyError)
    assert info.value.name == "jetforge_half_installed._native"


def test_missing_submodule_of_an_installed_package_is_reported(tmp_path, monkeypatch):
    """Asking for a submodule the installed version lacks (an older release) is a dependency problem."""
    _package(tmp_path, monkeypatch, "jetforge_old_release", "")
    with pytest.raises(DependencyError, match="jetforge_old_release is not installed"):
        require("jetforge_old_release.bindings")


def test_is_available():
    assert is_available("json") is True
    assert is_available("jetforge_surely_absent_pkg") is False


def test_require_does_not_import_at_module_import():
    import subprocess

    code = "import sys, jetforge.optional; print(sorted(m for m in ('onnxruntime', 'tensorrt', 'torch', 'cv2') " \
           "if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
