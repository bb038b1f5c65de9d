"""Fixtures shared by the app tests."""

import pytest

#: vtest.avi frames used by the action app tests: held out by both bundled action models (walking direction: after
#: frame 568; the 3D MobileNetV2: frames 545-794)
ACTION_HELD_OUT = (600, 660)


@pytest.fixture(scope="session")
def held_out_clip(tmp_path_factory):
    """vtest.avi frames 600..659 as a 10 fps MP4 (real frames, re-encoded)."""
    from jetforge.apps.video import Mp4Sink, open_source
    from jetforge.assets import asset_path

    path = tmp_path_factory.mktemp("clips") / "vtest_600_660.mp4"
    with open_source(asset_path("opencv_samples", "vtest.avi")) as src, Mp4Sink(path, 10.0) as sink:
        for f in src:
            if f.index >= ACTION_HELD_OUT[1]:
                break
            if f.index >= ACTION_HELD_OUT[0]:
                sink.write(f.image)
    return path
