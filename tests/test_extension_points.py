"""Every extension point takes a new entry through the one registry type, and the new entry is then used.

Each test registers a dummy (a command, an app task, a calibration algorithm, a pruning criterion, a session
backend, a video source kind, a video output, a target board as a data file) the way docs/architecture.md says to, checks that
the CLI's help or choices list it, runs it end to end on a tiny input where there is an end, and takes it out
again.
"""

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from jetforge.apps.tasks import TASKS
from jetforge.apps.tasks.base import App
from jetforge.apps.pipeline.stages import Task
from jetforge.apps.video import SINKS, SOURCES, open_source, open_video_sink, sink_usage, source_usage
from jetforge.apps.video.sinks import SinkKind
from jetforge.apps.video.sources import Frame, SourceKind, VideoSource
from jetforge.calibrate.algorithms import ALGORITHMS, compute_amax
from jetforge.calibrate.histogram import StreamingHistogram
from jetforge.cli import main as cli
from jetforge.cli.base import Command
from jetforge.errors import UnknownNameError
from jetforge.registry import Registry
from jetforge.runtime.session import BACKENDS, Session, backend_for_path, open_session, register_backend
from jetforge.runtime.session import base as session_base
from jetforge.runtime.sidecar import TensorSpec


def run_cli(capsys, *argv):
    try:
        code = cli.main([str(a) for a in argv])
    except SystemExit as exit:  # --help
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def registered():
    """``registered(registry, name, ...)`` adds an entry for the test and removes it afterwards."""
    added = []

    def add(registry, name, item=None, target=None, summary=""):
        if target is not None:
            registry.add_lazy(name, target, summary=summary)
        else:
            registry.add(name, item, summary=summary)
        added.append((registry, name))

    yield add
    for registry, name in reversed(added):
        registry.remove(name)


# -- the registry type itself -------------------------------------------------------------------------------------

def test_lazy_entries_import_nothing_until_used():
    reg = Registry("widget")
    reg.add_lazy("path", "os.path:join", summary="joins paths")
    reg.add_lazy("missing", "jetforge_no_such_module_xyz:thing")  # never looked up, never imported
    assert reg.names() == ["path", "missing"] and reg.summary("path") == "joins paths"
    assert reg.target("path") == "os.path:join"
    import os.path

    assert reg.get("path") is os.path.join and reg.target("path") is None
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("path", object())
    with pytest.raises(UnknownNameError) as err:
        reg.get("pth")
    assert "did you mean 'path'" in err.value.message
    assert reg.describe() == "  path     joins paths\n  missing"


# -- a command ----------------------------------------------------------------------------------------------------

class HelloCommand(Command):
    name = "hello"
    examples = "examples:\n  jetforge hello --who Jetson"

    def add_arguments(self, parser):
        parser.add_argument("--who", default="world")

    def run(self, args):
        print("hello, %s" % args.who)
        return 0


def test_a_new_command(capsys, monkeypatch, registered):
    module = types.ModuleType("jetforge_test_cmd_hello")
    module.HelloCommand = HelloCommand
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registered(cli.COMMANDS, "hello", target=module.__name__ + ":HelloCommand", summary="greet someone")
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "greet someone" in out and "hello" in out
    code, out, _ = run_cli(capsys, "hello", "--who", "Orin")
    assert code == 0 and out == "hello, Orin\n"


# -- an app task, fed by a new source kind and written to a new output --------------------------------------------

class GradientSource(VideoSource):
    """``gradient://N``: N frames of 32x24 pixels whose value is the frame number times 10."""

    def __init__(self, count: int) -> None:
        self.uri = "gradient://%d" % count
        self.width, self.height, self.fps = 32, 24, 10.0
        self.frame_count = count
        self._next = 0

    def read(self):
        if self._next >= self.frame_count:
            return None
        image = np.full((self.height, self.width, 3), 10 * self._next, np.uint8)
        frame = Frame(index=self._next, timestamp=self._next / self.fps, image=image)
        self._next += 1
        return frame


class MeanTask(Task):
    name = "mean"
    model_label = "mean pixel value (test)"

    def infer(self, inputs):
        return [float(np.mean(x)) for x in inputs]

    def postprocess(self, item):
        return {"mean": item.output}


class MeanApp(App):
    name = "mean"
    description = "the mean pixel value of every frame"
    default_out = "jetforge-mean"

    def build(self, args, sources):
        return MeanTask(), [], []


class CountingSink:
    """``count://`` outputs keep the number of frames they were given."""

    frames = []

    def __init__(self):
        self.count = 0

    def write(self, image):
        self.count += 1
        CountingSink.frames.append(int(image[0, 0, 0]))

    def close(self):
        pass

    def abort(self, exc=None):
        pass


def test_a_new_app_task_source_and_output_end_to_end(capsys, tmp_path, registered):
    registered(SOURCES, "gradient", SourceKind(("gradient",), lambda parsed, text: parsed.netloc,
                                               lambda spec, options: GradientSource(int(spec.location)),
                                               "gradient://N"), summary="N synthetic frames (test)")
    registered(SINKS, "count", SinkKind(lambda uri, fps, size, title: CountingSink(), "count://"),
               summary="counts frames (test)")
    registered(TASKS, "mean", MeanApp, summary="mean pixel value of every frame (test)")
    assert "gradient://N" in source_usage() and "count://" in sink_usage()
    with open_source("gradient://2") as source:
        assert [f.index for f in source] == [0, 1]
    assert isinstance(open_video_sink("count://x", 10.0, (32, 24)), CountingSink)

    code, out, _ = run_cli(capsys, "app", "--help")
    assert code == 0 and "mean pixel value of every frame (test)" in out
    CountingSink.frames = []
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "app", "mean", "--source", "gradient://5", "--out", out_dir, "--no-video",
                             "--no-plots", "--stream-to", "count://", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in (out_dir / "events.jsonl").read_text().splitlines()]
    means = {e["frame"]: e["mean"] for e in events if "mean" in e}
    assert means == {i: 10.0 * i for i in range(5)}  # the frames' constant value, frame by frame
    assert json.loads(out)["frames"] == 5 and CountingSink.frames == [0, 10, 20, 30, 40]


# -- a calibration algorithm --------------------------------------------------------------------------------------

def test_a_new_calibration_algorithm(capsys, registered):
    def half_max(hist, **_):
        return hist.amax / 2.0

    registered(ALGORITHMS, "half-max", half_max, summary="half the largest |x| (test)")
    hist = StreamingHistogram()
    hist.update(np.array([-3.0, 1.0, 2.5], np.float32))
    assert compute_amax(hist, "half-max") == 1.5
    code, out, _ = run_cli(capsys, "calibrate", "--help")
    flat = " ".join(out.split())
    assert code == 0 and "half-max = half the largest |x| (test)" in flat and "half-max" in flat.split("--algorithm")[1]


# -- a pruning criterion ------------------------------------------------------------------------------------------

def test_a_new_pruning_criterion(capsys, registered):
    torch = pytest.importorskip("torch")
    from jetforge.compress.prune import prune
    from jetforge.compress.prune.importance import CRITERIA, magnitude

    def smallest_first(graph, model, **_):  # the opposite of l1: keeps the weakest channels
        return -magnitude(graph, model, "l1")

    registered(CRITERIA, "smallest-first", smallest_first, summary="keep the smallest channels (test)")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3))
    with torch.no_grad():  # channel c of the first conv has weights of size c + 1
        for c in range(8):
            model[0].weight[c].fill_(float(c + 1))
    x = torch.randn(1, 3, 16, 16)
    kept = prune(model, x, ratio=0.5, importance="smallest-first", round_to=1, protect_stem=False).model
    weights = sorted(float(w) for w in kept[0].weight.detach()[:, 0, 0, 0])
    assert weights == [1.0, 2.0, 3.0, 4.0]  # l1 would have kept 5..8
    code, out, _ = run_cli(capsys, "prune", "--help")
    assert code == 0 and "smallest-first" in out


# -- a target board -----------------------------------------------------------------------------------------------

def test_a_new_target_board_is_a_data_file(tmp_path):
    from jetforge.targets import get_target, list_targets
    from jetforge.targets.loader import PROFILES_DIR

    text = (PROFILES_DIR / "orin-nx-16gb.yaml").read_text(encoding="utf-8")
    text = text.replace("name: orin-nx-16gb", "name: my-carrier-board").replace(
        "aliases: [orin-nx, orin-nx-16gb-super]", "aliases: [my-board]")
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "my-carrier-board.yaml").write_text(text, encoding="utf-8")
    board = get_target("my-board", directory=str(folder))
    assert board.name == "my-carrier-board" and board.dla_cores == 2 and board.has_dla
    assert [t.name for t in list_targets(directory=str(folder))] == ["my-carrier-board"]


# -- a session backend --------------------------------------------------------------------------------------------

class ScaleSession(Session):
    """``.scale`` files hold one number k; the model is ``y = k * x`` for ``x`` of shape (batch, 4), float32."""

    name = "scale"
    display_name = "scale (test backend)"
    suffixes = (".scale",)

    def __init__(self, path, factor):
        super().__init__(path, [TensorSpec("x", [-1, 4])], [TensorSpec("y", [-1, 4])], sidecar=None)
        self.factor = factor

    @classmethod
    def open(cls, path, **options):
        return cls(path, float(Path(path).read_text(encoding="utf-8")))

    def _run(self, feeds):
        return {"y": (self.factor * feeds["x"]).astype(np.float32)}


def test_a_new_session_backend(capsys, monkeypatch, tmp_path):
    module = types.ModuleType("jetforge_test_scale_backend")
    module.ScaleSession = ScaleSession
    monkeypatch.setitem(sys.modules, module.__name__, module)
    register_backend("scale", module.__name__ + ":ScaleSession", (".scale",), "multiplies by k (test)")
    try:
        model = tmp_path / "double.scale"
        model.write_text("2.5", encoding="utf-8")
        assert backend_for_path(model) == "scale" and BACKENDS.target("scale") is not None  # not imported yet
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        with open_session(model) as session:  # chosen by the suffix
            assert session.backend == "scale"
            np.testing.assert_array_equal(session.infer({"x": x})["y"], 2.5 * x)  # 2.5 * small ints: exact
            np.testing.assert_array_equal(session.wait(session.submit({"x": x}))["y"], 2.5 * x)
        code, out, _ = run_cli(capsys, "bench", "--help")
        assert code == 0 and "multiplies by k (test)" in " ".join(out.split())
        code, out, err = run_cli(capsys, "bench", model, "--iterations", "5", "--warmup", "1", "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["backend"]["backend"] == "scale" and result["inputs"]["x"]["shape"] == [1, 4], result
        assert result["iterations"] == 5 and len(result["latency_samples_ms"]) == 5
    finally:
        BACKENDS.remove("scale")
        session_base._SUFFIXES.pop("scale", None)
