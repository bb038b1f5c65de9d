"""Option values out of range are one line naming the option, the value and the allowed range (issue 25).

Every numeric flag and option field is checked by one :class:`jetforge.config.Bound` - the same object as a flag's
argparse ``type=`` (a usage error: one line, exit 1), as a dataclass field that the YAML/``--set`` loader checks under
its dotted name, and in ``__post_init__`` for a Python caller.  Each case here was an internal error (exit 2), a run
that exhausted the memory, or a value taken silently; each test runs the real CLI in-process (``main``) or the real
loader.  Upper bounds are derived, and the refusal says from what: this machine's CPUs (threads), its free memory
(a bench batch, an export shape, HOG's upscaled frame), the target's memory (a build's workspace and input shapes), a
format's field width (TensorRT 8's 32-bit dims, a 16-bit TCP port, OpenCV's 32-bit drawing coordinates).
"""

import math

import pytest

pytest.importorskip("onnx")

from jetforge.cli.main import main  # noqa: E402
from jetforge.config import load_config  # noqa: E402
from jetforge.errors import ConfigError, InputFileError  # noqa: E402
from jetforge.runtime.session.base import default_threads  # noqa: E402

from tests.deploy.test_bundle import NX, make_model  # noqa: E402

CPUS = default_threads()


@pytest.fixture
def tiny(tmp_path):
    """A tiny real classifier (Conv-ReLU-pool over 3x32x32, dynamic batch) with its sidecar."""
    return make_model(tmp_path / "model.onnx")


def refused(capsys, argv, *says):
    """Run ``jetforge ARGV``; it must exit 1 with one line on stderr holding every text of ``says``."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.count("\n") == 1 and "internal error" not in err and "Traceback" not in err, err
    for text in says:
        assert text in err, (text, err)
    return err


# --- flags refused by their argparse type, before anything is read ----------------------------------------------

@pytest.mark.parametrize("argv, says", [
    pytest.param(["bench", "{model}", "--seed", "-1"], ["argument --seed: -1 is out of range", "allowed: 0 or more"],
                 id="bench-seed-negative"),  # was NumPy's ValueError: an internal error
    pytest.param(["bench", "{model}", "--threads", "100000"], ["argument --threads: 100000 is out of range",
                                                              "allowed: 0..%d" % CPUS, "CPU"],
                 id="bench-threads-100000"),  # exhausted the memory, ignored SIGTERM (a segfault under ulimit -v)
    pytest.param(["bench", "{model}", "--threads", str(CPUS + 1)], ["argument --threads: %d is out" % (CPUS + 1)],
                 id="bench-threads-one-past-the-cpus"),
    pytest.param(["bench", "{model}", "--threads", "-1"], ["argument --threads: -1 is out of range"],
                 id="bench-threads-negative"),
    pytest.param(["bench", "{model}", "--batch", "0"], ["argument --batch: 0 is out of range", "allowed: 1 or more"],
                 id="bench-batch-0"),
    pytest.param(["bench", "{model}", "--warmup", "-5"], ["argument --warmup: -5 is out of range"],
                 id="bench-warmup-negative"),
    pytest.param(["app", "people", "--detector", "hog", "--upscale", "nan"],
                 ["argument --upscale: nan is not a finite number", "allowed: (0, 8]", "8 px"],
                 id="people-upscale-nan"),  # was OpenCV's resize assertion: an internal error
    pytest.param(["app", "people", "--detector", "hog", "--upscale", "50"],
                 ["argument --upscale: 50 is out of range", "allowed: (0, 8]"],
                 id="people-upscale-50"),  # exhausted the memory inside OpenCV, ignored SIGTERM
    pytest.param(["app", "people", "--detector", "hog", "--upscale", "0"], ["argument --upscale: 0 is out of range"],
                 id="people-upscale-0"),
    pytest.param(["app", "people", "--detector", "hog", "--hog-scale", "nan"],
                 ["argument --hog-scale: nan is not a finite number"],
                 id="people-hog-scale-nan"),  # detected nothing, exit 0
    pytest.param(["app", "people", "--detector", "hog", "--hog-scale", "1.001"],
                 ["argument --hog-scale: 1.001 is out of range", "128-px window"], id="people-hog-scale-1.001"),
    pytest.param(["app", "people", "--detector", "hog", "--hog-scale", "inf"],
                 ["argument --hog-scale: inf is not a finite number"], id="people-hog-scale-inf"),
    pytest.param(["app", "people", "--line-margin", "nan"], ["argument --line-margin: nan is not a finite number"],
                 id="people-line-margin-nan"),
    pytest.param(["app", "people", "--detector-threshold", "2"],
                 ["argument --detector-threshold: 2 is out of range", "allowed: [0, 1]"], id="people-threshold-2"),
    pytest.param(["app", "people", "--stall-timeout", "nan"], ["argument --stall-timeout: nan is not a finite"],
                 id="app-stall-timeout-nan"),
    pytest.param(["app", "people", "--stall-timeout", "0"], ["argument --stall-timeout: 0 is out of range",
                                                             "above 0"], id="app-stall-timeout-0"),
    pytest.param(["app", "people", "--infer-workers", "100000"], ["argument --infer-workers: 100000 is out of range"],
                 id="app-infer-workers-100000"),
    pytest.param(["app", "classify", "--threads", "100000"], ["argument --threads: 100000 is out of range",
                                                             "allowed: 1..%d" % CPUS], id="classify-threads-100000"),
    pytest.param(["app", "faces", "--min-face", "nan"], ["argument --min-face: nan is not a finite number"],
                 id="faces-min-face-nan"),
    pytest.param(["app", "action", "--top-k", "0"], ["argument --top-k: 0 is out of range"], id="action-top-k-0"),
    pytest.param(["build", "{model}", "--target", NX, "--workspace-mib", "0"],
                 ["argument --workspace-mib: 0 is out of range"], id="build-workspace-0"),
    pytest.param(["build", "{model}", "--target", NX, "--workspace-mib", str(10 ** 30)],
                 ["is out of range", "64-bit byte count"], id="build-workspace-10e30"),
    pytest.param(["deploy", "{model}", "nvidia@board", "--port", "99999"],
                 ["argument --port: 99999 is out of range", "allowed: 1..65535", "16 bits"], id="deploy-port-99999"),
    pytest.param(["deploy", "{model}", "nvidia@board:99999"], ["99999 is out of range", "allowed: 1..65535"],
                 id="deploy-host-port-99999"),
    pytest.param(["deploy", "{model}", "nvidia@board", "--connect-timeout", "-3"],
                 ["argument --connect-timeout: -3 is out of range"], id="deploy-connect-timeout-negative"),
    pytest.param(["dla-check", "{model}", "--target", NX, "--loadables-per-core", "0"],
                 ["--loadables-per-core: 0 is out"], id="dla-check-loadables-0"),
])
def test_an_option_out_of_range_is_one_line_naming_flag_value_and_range(argv, says, tiny, capsys):
    refused(capsys, [str(tiny) if a == "{model}" else a for a in argv], *says)


# --- bounds that need what the command reads: memory, the frame, the target ------------------------------------

def test_bench_batch_past_free_memory_is_refused_before_allocating(tiny, capsys):
    """A billion 3x32x32 inputs are 36 TB with their float64 draw: refused, with the largest batch that fits (it was
    NumPy's MemoryError, an internal error)."""
    err = refused(capsys, ["bench", tiny, "--batch", "1000000000", "--iterations", "1", "--warmup", "0"],
                  "--batch 1000000000", "of memory available", "use --batch")
    fits = int(err.split("use --batch ")[1].split()[0])
    assert 1 <= fits < 10 ** 9
    per_item = 3 * 32 * 32 * (4 + 8)  # float32 input plus the float64 it is drawn as
    from jetforge.runtime.measure import available_memory

    assert abs(fits - available_memory() // per_item) <= max(1, fits // 20)  # free memory moves a little meanwhile


def test_export_input_shape_past_free_memory_is_refused_before_the_model_loads(tmp_path, capsys):
    refused(capsys, ["export", "--model", "resnet18", "--input-shape", "1x3x100000x100000", "--out",
                     tmp_path / "e.onnx"], "--input-shape 1x3x100000x100000", "111.8 GiB", "of memory available")
    refused(capsys, ["export", "--model", "resnet18", "--input-shape", "1x3x%dx1" % 2 ** 32, "--out",
                     tmp_path / "e.onnx"], "4294967296 is out of range", "32 bits")
    assert not (tmp_path / "e.onnx").exists()


@pytest.mark.parametrize("extra, says", [
    pytest.param(["--shape", "x=%dx3x32x32" % 10 ** 20],
                 ["100000000000000000000 is out of range", "allowed: 1..2147483647"], id="shape-batch-1e20"),
    pytest.param(["--shape", "x=%dx3x32x32" % 2 ** 40], ["1099511627776 is out of range"], id="shape-batch-2^40"),
    pytest.param(["--shape", "x=100000000x3x32x32"], ["input x at 100000000x3x32x32 takes",
                                                      "GB of memory %s has" % NX], id="shape-past-the-board-memory"),
    pytest.param(["--shape", "x=1x3x32x32", "--set", "workspace_mib=%d" % 10 ** 30],
                 ["workspace_mib: %d is out of range" % 10 ** 30], id="set-workspace-10e30"),
    pytest.param(["--shape", "x=1x3x32x32", "--workspace-mib", "100000"],
                 ["workspace_mib 100000 is more than the 15258 MiB", "use --workspace-mib 15258 or less"],
                 id="workspace-past-the-board-memory"),
])
def test_build_shapes_and_workspace_past_the_target_are_refused(extra, says, tiny, tmp_path, capsys):
    """orin-nx-16gb has 16 GB (15258 MiB): no pool or input larger than that can exist on it."""
    refused(capsys, ["build", tiny, "--target", NX, "--plan-only", "--out", tmp_path / "m.engine"] + extra, *says)
    assert not list(tmp_path.glob("m.engine*"))


def test_build_yaml_batch_of_2_to_the_40_is_refused_naming_the_key(tiny, tmp_path, capsys):
    path = tmp_path / "build.yaml"
    path.write_text("input_shapes: {x: [%d, 3, 32, 32]}\n" % 2 ** 40)
    refused(capsys, ["build", tiny, "--target", NX, "--plan-only", "--config", path, "--out", tmp_path / "m.engine"],
            "input_shapes.x[0]: 1099511627776 is out of range")


def test_a_build_within_the_bounds_still_plans(tiny, tmp_path, capsys):
    assert main(["build", str(tiny), "--target", NX, "--plan-only", "--shape", "x=4x3x32x32", "--workspace-mib",
                 "1024", "--out", str(tmp_path / "m.engine")]) == 0
    assert (tmp_path / "m.engine.plan.json").is_file()


@pytest.fixture
def small_frames(tmp_path):
    import cv2
    import numpy as np

    folder = tmp_path / "frames"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        cv2.imwrite(str(folder / ("%d.png" % i)), rng.integers(0, 255, (240, 320, 3), dtype=np.uint8))
    return folder


@pytest.mark.parametrize("extra, says", [
    pytest.param(["--line", "nan,10,100,10"], ["--line nan,10,100,10: nan is not a finite number"], id="line-nan"),
    pytest.param(["--zone", "0,0,100,0,100,nan"], ["--zone 0,0,100,0,100,nan: nan is not a finite number"],
                 id="zone-nan"),
    pytest.param(["--line", "0,10,%d,10" % 2 ** 31], ["2.14748e+09 is out of range", "32-bit coordinates"],
                 id="line-past-int32"),
    pytest.param(["--upscale", "0.5"], ["a 320x240 frame at --upscale 0.5 is 160x120, smaller than HOG's 64x128 "
                                        "window"], id="upscale-below-the-window"),
])
def test_people_geometry_and_upscale_are_refused_before_the_first_frame(extra, says, small_frames, tmp_path, capsys):
    """A NaN zone made the video writer fail on every frame while the run still exited 0; an upscale that shrinks
    the frame below HOG's window found nobody, silently."""
    refused(capsys, ["app", "people", "--detector", "hog", "--source", small_frames, "--out", tmp_path / "o",
                     "--no-plots"] + extra, *says)
    assert not (tmp_path / "o" / "events.jsonl").exists()


def test_hog_upscale_past_free_memory_is_refused_per_frame(monkeypatch):
    """HOG's work is 24 B a pixel of the upscaled frame (measured 17.4-20.4 plus the 3 B frame): refused when that
    is more than the memory free, before OpenCV allocates it (it ignores SIGTERM while it does)."""
    pytest.importorskip("cv2")
    import jetforge.vision.hog as hog

    detector = hog.HogPeopleDetector(upscale=8.0)
    assert detector.frame_problem(768, 576) == "" or "memory available" in detector.frame_problem(768, 576)
    monkeypatch.setattr(hog, "memory_shortfall", lambda n: "%d B, more than the 1000 B of memory available" % n)
    problem = detector.frame_problem(768, 576)
    assert problem.startswith("a 768x576 frame at --upscale 8 is 6144x4608")
    assert "%d B" % (6144 * 4608 * hog.BYTES_PER_PIXEL) in problem


# --- loaders: YAML, --set, sidecars, recipes, paths -----------------------------------------------------------------

@pytest.mark.parametrize("override, says", [
    pytest.param("grad_clip=.nan", "grad_clip: nan is not a finite number (allowed: 0 or more)", id="grad_clip=.nan"),
    pytest.param("grad_clip=nan", "grad_clip: nan is not a finite number", id="grad_clip=nan"),
    pytest.param("grad_clip=-1", "grad_clip: -1 is out of range", id="grad_clip=-1"),
    pytest.param("lr=.inf", "lr: inf is not a finite number", id="lr=.inf"),
    pytest.param("lr=0", "lr: 0 is out of range (allowed: above 0)", id="lr=0"),
    pytest.param("min_lr_ratio=2", "min_lr_ratio: 2 is out of range (allowed: [0, 1]", id="min_lr_ratio=2"),
    pytest.param("epochs=0", "epochs: 0 is out of range", id="epochs=0"),
    pytest.param("epochs=true", "epochs: expected an integer, got True", id="epochs=true"),
    pytest.param("threads=100000", "train.threads: 100000 is out of range", id="threads=100000"),
])
def test_train_options_out_of_range_are_refused_by_the_loader(override, says):
    pytest.importorskip("torch")
    from jetforge.compress.train.loop import TrainConfig

    with pytest.raises(ConfigError) as caught:
        load_config(TrainConfig, overrides=[override])
    assert says in caught.value.one_line()


def test_grad_clip_nan_no_longer_turns_clipping_off_in_python_either():
    pytest.importorskip("torch")
    from jetforge.compress.train.loop import TrainConfig

    with pytest.raises(ConfigError, match="train.grad_clip: nan is not a finite number"):
        TrainConfig(grad_clip=math.nan)
    assert TrainConfig(grad_clip=0.0).grad_clip == 0.0  # 0 is the documented "no clipping"


def test_recipe_kind_that_is_a_list_is_one_line(tmp_path, capsys):
    path = tmp_path / "r.yaml"
    path.write_text("kind: [detector]\n")
    refused(capsys, ["distill", "--config", path], "recipe kind must be a name, got ['detector']", "kind: detector")


@pytest.mark.parametrize("field, value, says", [
    pytest.param("workspace_mib", 10 ** 30, "workspace_mib: %d is out of range" % 10 ** 30, id="workspace-10e30"),
    pytest.param("workspace_mib", True, "workspace_mib: expected an integer, got True", id="workspace-true"),
    pytest.param("input_shapes", {"x": [2 ** 40, 3, 224, 224]}, "input_shapes.x[0]: 1099511627776 is out of range",
                 id="input-shapes-batch-2^40"),
    pytest.param("profiles", [{"x": {"min": [1, 3, 8, 8], "opt": [1, 3, 8, 8], "max": [2 ** 40, 3, 8, 8]}}],
                 "max[0]: 1099511627776 is out of range", id="profile-max-batch-2^40"),
])
def test_build_options_out_of_range_are_refused_by_the_loader(field, value, says):
    from jetforge.config import from_dict
    from jetforge.runtime.tensorrt.plan import BuildOptions

    with pytest.raises(ConfigError) as caught:
        from_dict(BuildOptions, {field: value})
    assert says in caught.value.one_line()


def test_a_float_option_is_never_nan_or_infinite_in_any_loaded_dataclass():
    from jetforge.runtime.inputs import Preprocess

    for text in (".nan", ".inf", "-.inf", "nan", "1e400"):
        with pytest.raises(ConfigError, match="is not a finite number"):
            load_config(Preprocess, overrides=["scale=%s" % text])


@pytest.mark.parametrize("data", ["~nosuchuser-jetforge/x.avi@0:5", "~nosuchuser-jetforge/frames"])
def test_calibration_data_under_an_unknown_user_is_one_line(data, tiny, capsys):
    """Python's expanduser raised RuntimeError ("Could not determine home directory"): an internal error."""
    refused(capsys, ["calibrate", tiny, "--data", data], "starts with ~nosuchuser-jetforge",
            "no such user or home folder")


def test_expand_user_keeps_the_shells_meaning():
    import os

    from jetforge.fileio import expand_user

    assert str(expand_user("~/x")) == os.path.join(os.path.expanduser("~"), "x")
    assert str(expand_user("rel/x")) == "rel/x"
    with pytest.raises(InputFileError, match="~nosuchuser-jetforge"):
        expand_user("~nosuchuser-jetforge/x", "--key")


# --- the mechanism itself -------------------------------------------------------------------------------------------

def test_a_bound_refuses_bool_float_nan_and_out_of_range_alike_from_text_yaml_and_python():
    import argparse

    from jetforge.config import Bound

    count = Bound(int, 1, 8, why="eight slots")
    assert count.describe() == "1..8" and count.check(8, "n") == 8
    for value in (0, 9, True, 2.0, "3"):
        with pytest.raises(ConfigError, match="n: "):
            count.check(value, "n")
    for text in ("0", "9", "2.5", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="allowed: 1..8; eight slots"):
            count.parse(text)
    share = Bound(float, 0.0, 1.0, low_open=True)
    assert share.describe() == "(0, 1]" and share.parse("1") == 1.0 and share.check(1, "p") == 1.0
    for value in (0.0, 1.5, math.nan, math.inf, -math.inf):
        with pytest.raises(ConfigError, match="allowed: \\(0, 1\\]"):
            share.check(value, "p")
