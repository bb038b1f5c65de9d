"""``jetforge distill --config recipes/action_mobilenet3d.yaml`` reaches the 3D action recipe runner (``kind:
action3d``), and every bad recipe or video is one error line (exit 1) before any track, clip or training work.

No training here: the runner itself runs end to end through the CLI in ``test_action3d_recipe.py`` (slow)."""

import pytest

pytest.importorskip("torch")

RECIPE = ["distill", "--config", "recipes/action_mobilenet3d.yaml"]


class RunnerReached(BaseException):
    """Raised by the stand-in runner: the route got there with this recipe and video (nothing is trained).

    A BaseException, so that the CLI's catch-all for unexpected errors lets it through to the test."""


def _stand_in(monkeypatch, function):
    """Replace ``function`` of the recipe module by one that records what the CLI handed it and stops."""
    import jetforge.compress.action.mobilenet3d_recipe as runner

    calls = []

    def record(recipe, video, progress=True):
        calls.append((recipe, video))
        raise RunnerReached()

    monkeypatch.setattr(runner, function, record)
    return calls


@pytest.fixture
def reached(monkeypatch):
    """The recipe runner (jetforge distill) replaced by a recorder."""
    return _stand_in(monkeypatch, "run_recipe")


def test_distill_routes_action3d_recipes_to_the_recipe_runner(reached, tmp_path):
    from jetforge.assets import asset_path
    from jetforge.cli.main import main
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.config import load_config

    with pytest.raises(RunnerReached):
        main(RECIPE + ["--set", "teacher.epochs=2", "--set", "out_dir=%s" % tmp_path])
    recipe, video = reached[0]
    expected = load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml",
                           ["teacher.epochs=2", "out_dir=%s" % tmp_path])
    assert recipe == expected and recipe.teacher.epochs == 2 and recipe.student.epochs == 40
    assert video == asset_path("opencv_samples", "vtest.avi")  # the recipe's default video
    clip = tmp_path / "clip.avi"
    clip.write_bytes(b"")
    with pytest.raises(RunnerReached):
        main(RECIPE + ["--data", str(clip)])
    assert reached[1][1] == clip  # --data is the video for kind: action3d


def test_print_config_shows_the_resolved_action3d_recipe(reached, capsys):
    from jetforge.cli.main import main

    assert main(RECIPE + ["--set", "macs_factor=3", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "kind: action3d" in printed and "macs_factor: 3" in printed and "heldout_start: 545" in printed
    assert reached == []


@pytest.mark.parametrize("extra, message", [
    (["--set", "kind=segmenter"], "recipe kind 'segmenter'"),
    (["--set", "bogus=1"], "bogus"),
    (["--set", "teacher.bogus=1"], "teacher.bogus"),
    (["--set", "window=0"], "window must be >= 1"),
    (["--set", "heldout_start=500"], "need 0 < train_end < heldout_start"),
    (["--set", "macs_factor=0.5"], "macs_factor must be >= 1"),
    (["--set", "labels=[walking left]"], "labels needs at least two classes"),
    (["--set", "student.epochs=0"], "student.epochs and student.batch_size must be >= 1"),
    (["--data", "nowhere/clip.avi"], "video nowhere/clip.avi is not a file"),
])
def test_bad_action3d_recipe_is_one_error_line_before_any_work(reached, capsys, extra, message):
    from jetforge.cli.main import main

    assert main(RECIPE + extra) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jetforge: error: ") and message in lines[0], lines
    assert reached == []  # refused before the runner (tracks, clips, training) was reached


def test_module_entry_refuses_a_missing_video_in_one_line(reached, capsys):
    from jetforge.compress.recipes.entry import main

    assert main(["recipes/action_mobilenet3d.yaml", "--data", "nowhere.avi"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "video nowhere.avi is not a file" in lines[0], lines
    assert reached == []


# ------------------------------------------------------------------ jetforge qat --config (kind: action3d)
QAT = ["qat", "--config", "recipes/action_mobilenet3d.yaml"]


@pytest.fixture
def int8_reached(monkeypatch):
    """The int8-stage runner (jetforge qat) replaced by a recorder."""
    return _stand_in(monkeypatch, "run_int8_stage")


def test_qat_routes_action3d_recipes_to_the_int8_stage(int8_reached, tmp_path, capsys):
    from jetforge.assets import asset_path
    from jetforge.cli.main import main
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.config import load_config

    with pytest.raises(RunnerReached):
        main(QAT + ["--set", "int8.qat_steps=3", "--set", "out_dir=%s" % tmp_path])
    recipe, video = int8_reached[0]
    assert recipe == load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml",
                                 ["int8.qat_steps=3", "out_dir=%s" % tmp_path])
    assert recipe.int8.qat_steps == 3 and video == asset_path("opencv_samples", "vtest.avi")
    assert main(QAT + ["--set", "int8.samples=7", "--print-config"]) == 0
    assert "kind: action3d" in capsys.readouterr().out and len(int8_reached) == 1


def _placeholder_run(folder, recipe):
    """The files a finished run leaves (contents that are not read before the check: placeholders)."""
    import json

    from jetforge.compress.action.action3d import recipe_dict

    folder.mkdir()
    for name in ("teacher.pt", "student.pt", "student.onnx"):
        (folder / name).write_bytes(b"placeholder")
    (folder / "report.json").write_text(json.dumps({"recipe": recipe_dict(recipe), "files": {}}))


@pytest.mark.parametrize("extra, message", [
    (["--set", "kind=detector"], "recipe kind 'detector' is not one jetforge qat knows"),
    (["--set", "int8.calibrate=false", "--set", "int8.qat_steps=0"], "the recipe's int8 stage is off"),
    ([], "holds no trained run of this recipe (report.json, teacher.pt, student.pt, student.onnx missing)"),
    (["--set", "window=4"], "differs from the one that trained"),
    (["--data", "nowhere/clip.avi"], "video nowhere/clip.avi is not a file"),
])
def test_bad_qat_action3d_call_is_one_error_line_before_any_work(tmp_path, capsys, extra, message):
    from jetforge.cli.main import main
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.config import load_config

    out = tmp_path / "run"
    if "window=4" in extra:  # a run trained with window 8; the INT8 stage asked for window 4 on its models
        _placeholder_run(out, load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml", ["out_dir=%s" % out]))
    assert main(QAT + ["--set", "out_dir=%s" % out] + extra) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jetforge: error: ") and message in lines[0], lines
    if "window=4" in extra:
        assert "window: 8 then, 4 now" in lines[0] and "int8, threads, tracks_dir, out_dir" in lines[0]
        # the int8 settings, threads, the track cache's folder and the run folder's spelling may differ: accepted
        from jetforge.compress.action.mobilenet3d_recipe import trained_run

        ok = load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml",
                         ["out_dir=%s/../run" % out, "int8.qat_steps=2", "threads=1", "tracks_dir=%s" % tmp_path])
        assert trained_run(ok)["files"] == {}


def test_qat_after_a_shrunk_distill_takes_the_runs_training_settings(int8_reached, tmp_path, caplog):
    """Issue 25: the README's chain `distill --config R --set crop=32 ...` then `qat --config R --set
    int8.qat_steps=16` was refused unless every training --set was repeated.  The INT8 stage now takes the settings
    that decided the trained models from the run's report.json (logged); the int8 settings stay the caller's."""
    import logging

    from jetforge.cli.main import main
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.config import load_config

    out = tmp_path / "run"
    shrunk = ["out_dir=%s" % out, "teacher.epochs=1", "student.epochs=1", "max_clips=4", "crop=32"]
    _placeholder_run(out, load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml", shrunk))
    with caplog.at_level(logging.INFO), pytest.raises(RunnerReached):
        main(QAT + ["--set", "int8.qat_steps=16", "--set", "out_dir=%s" % out])
    recipe, _ = int8_reached[0]
    assert (recipe.crop, recipe.max_clips, recipe.teacher.epochs, recipe.student.epochs) == (32, 4, 1, 1)
    assert recipe.int8.qat_steps == 16 and recipe.out_dir == str(out)
    assert "crop, max_clips, student, teacher taken from that run" in caplog.text


def test_ptq_alone_needs_no_teacher_weights(tmp_path):
    """PTQ calibrates the student alone, so a run without teacher.pt (e.g. a device call that returned only some
    files) can still get its INT8 stage; QAT distils from the teacher and still requires it, by name."""
    from jetforge.compress.action.action3d import Action3DRecipe
    from jetforge.compress.action.mobilenet3d_recipe import trained_run
    from jetforge.config import load_config
    from jetforge.errors import InputFileError

    out = tmp_path / "run"
    recipe = load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml", ["out_dir=%s" % out, "int8.qat_steps=0"])
    _placeholder_run(out, recipe)
    (out / "teacher.pt").unlink()
    assert trained_run(recipe)["files"] == {}
    with_qat = load_config(Action3DRecipe, "recipes/action_mobilenet3d.yaml", ["out_dir=%s" % out, "int8.qat_steps=2"])
    with pytest.raises(InputFileError, match=r"\(teacher.pt missing\)"):
        trained_run(with_qat)
