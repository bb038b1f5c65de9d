"""tools/compare_app_events.py: what it ignores (time) and what it does not (everything else)."""

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "compare_app_events.py"
spec = importlib.util.spec_from_file_location("compare_app_events", str(TOOL))
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_timing_is_stripped_at_any_depth_and_nothing_else():
    record = {"frame": 3, "t": 0.3, "latency_ms": 12.5, "stages": {"infer_ms": 4.0, "wait_s": 0.1, "n": 2},
              "tracks": [{"id": 1, "box": [1.0, 2.0, 3.0, 4.0], "age_ms": 7}]}
    assert tool.strip_timing(record) == {"frame": 3, "t": 0.3, "stages": {"n": 2},
                                         "tracks": [{"id": 1, "box": [1.0, 2.0, 3.0, 4.0]}]}


def test_a_box_that_moved_by_a_tenth_of_a_pixel_is_a_difference():
    a = [{"frame": 0, "detections": [[1.0, 2.0, 3.0, 4.0, 0.9]]}]
    b = [{"frame": 0, "detections": [[1.0, 2.0, 3.1, 4.0, 0.9]]}]
    assert tool.first_difference(a, a) == ""
    assert tool.first_difference(a, b).startswith("record 0:")
    assert tool.first_difference(a, a + a) == "1 records vs 2"
