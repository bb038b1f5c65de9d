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


@pytest.fixture
def run_action_app(tmp_path, held_out_clip):
    """Runs ``jetforge app action`` on the held-out clip with the given extra options and checks what both bundled
    models must give: exit 0, one action record per frame, classified tracks with a known label and their top 3.
    Returns (output folder, all events.jsonl records, the action records, the classified tracks)."""
    import json

    from jetforge.cli.main import main

    def run(extra_args, labels):
        out = tmp_path / "action"
        code = main(["-q", "app", "action", "--source", str(held_out_clip), "--out", str(out), "--no-plots",
                     "--threads", "1"] + list(extra_args))
        assert code == 0
        records = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
        frames = [r for r in records if r["type"] == "action"]
        assert [r["frame"] for r in frames] == list(range(ACTION_HELD_OUT[1] - ACTION_HELD_OUT[0]))
        classified = [t for r in frames for t in r["tracks"] if t.get("action")]
        assert classified and all(t["action"] in labels and len(t["top"]) == 3 for t in classified)
        return out, records, frames, classified

    return run
