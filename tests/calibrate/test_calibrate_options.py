"""Calibration options as data: ``CalibrateOptions`` from a YAML file and ``--set``, the flags over both, one path
for the keyword form, and the values refused in one line (percentile, TensorRT version, unknown keys).

The end-to-end run (``--out w/``) uses the tiny model of conftest.py; every refusal here happens before a model or
a sample is read.
"""

import math

import pytest
import yaml

from jetforge.calibrate.options import CalibrateOptions, EvaluationOptions, load_calibrate_options, resolve_options
from jetforge.cli.main import main
from jetforge.errors import ConfigError, JetforgeError, UnknownNameError


def _printed_config(capsys, argv):
    assert main(["calibrate", "m.onnx", "--data", "d"] + argv + ["--print-config"]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def test_config_file_and_set_load_the_nested_options(tmp_path):
    path = tmp_path / "calib.yaml"
    path.write_text("tensorrt_version: '8.6.2'\nalgorithm: entropy\nplots: all\n"
                    "evaluation: {data: [held/], samples: 64, sensitivity: sqnr}\n"
                    "mixed_precision: {bound: 0.98}\nclips: {mode: per-track, max_per_track: 4}\n")
    o = load_calibrate_options(str(path), ["evaluation.samples=32", "tensorrt_version=10.3", "batch_size=4"])
    assert (o.tensorrt_version, o.algorithm, o.plots, o.batch_size) == ("10.3", "entropy", "all", 4)
    assert o.evaluation == EvaluationOptions(data=["held/"], samples=32, sensitivity="sqnr")
    assert o.mixed_precision.bound == 0.98 and o.mixed_precision.metric == "agreement_confident"
    assert o.clips.mode == "per-track" and o.clips.max_per_track == 4 and o.clips.runtime().mode == "per-track"


def test_set_keeps_a_version_as_the_text_typed():
    # YAML reads 10.10 as the number 10.1; a string key keeps what was typed (and then it is refused: no JetPack has it)
    with pytest.raises(JetforgeError, match="TensorRT 10.10.0 is not a release"):
        load_calibrate_options(None, ["tensorrt_version=10.10"])
    assert load_calibrate_options(None, ["tensorrt_version=10.3"]).tensorrt_version == "10.3"


@pytest.mark.parametrize("overrides, says", [
    (["evaluatoin.samples=3"], "did you mean 'evaluation'"),
    (["evaluation.sampels=3"], "did you mean 'evaluation.samples'"),
    (["mixed_precision.metirc=agreement"], "did you mean 'mixed_precision.metric'"),
    (["samples=many"], "samples: expected an integer, got 'many'"),
    (["evaluation.int8_kernels=maybe"], "evaluation.int8_kernels: expected true or false"),
    (["algorithm=entopy"], "did you mean 'entropy'"),
    (["mixed_precision.metric=agreemnt"], "unknown mixed-precision metric"),
    (["plots=some"], "plots must be true, false or all"),
    (["clips.max_per_track=3"], "go with --clips per-track"),
    (["min_samples=0"], "min_samples must be at least 1"),
    (["evaluation.samples=0"], "evaluation.samples must be at least 1"),
])
def test_unknown_keys_and_bad_values_are_one_line_with_the_fix(overrides, says, capsys):
    with pytest.raises(ConfigError, match=None) as caught:
        load_calibrate_options(None, overrides)
    assert says in caught.value.one_line()
    assert main(["calibrate", "m.onnx", "--data", "d"] + [a for o in overrides for a in ("--set", o)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err


def test_unknown_key_is_an_unknown_name_error_listing_the_keys():
    with pytest.raises(UnknownNameError) as caught:
        load_calibrate_options(None, ["percentil=99"])
    assert "'percentile'" in caught.value.message and "valid keys here" in caught.value.hint


def test_flags_win_over_set_and_set_over_the_file(tmp_path, capsys):
    path = tmp_path / "calib.yaml"
    path.write_text("percentile: 99.9\nsamples: 100\nevaluation: {data: [a/, b/], samples: 10}\nqdq: true\n")
    base = ["--config", str(path)]
    cfg = _printed_config(capsys, base)
    assert (cfg["percentile"], cfg["samples"], cfg["evaluation"]["data"]) == (99.9, 100, ["a/", "b/"])
    cfg = _printed_config(capsys, base + ["--set", "percentile=99.5", "--set", "evaluation.samples=20"])
    assert (cfg["percentile"], cfg["evaluation"]["samples"]) == (99.5, 20)
    cfg = _printed_config(capsys, base + ["--set", "percentile=99.5", "--percentile", "99.0", "--eval-samples", "5",
                                          "--eval", "c/", "--no-qdq", "--trt", "8.5.2", "--clips", "sliding"])
    assert (cfg["percentile"], cfg["evaluation"]["samples"], cfg["qdq"]) == (99.0, 5, False)
    assert cfg["evaluation"]["data"] == ["c/"]  # a flag's list replaces the file's, it does not add to it
    assert cfg["tensorrt_version"] == "8.5.2" and cfg["clips"]["mode"] == "sliding"
    assert cfg["samples"] == 100  # keys no flag names keep the file's value


@pytest.mark.parametrize("value", ["0", "101", "-1", "nan", "inf", "-inf"])
def test_percentile_outside_0_100_is_refused_in_one_line(value, capsys):
    assert main(["calibrate", "m.onnx", "--data", "d", "--percentile=%s" % value]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "percentile" in err and "allowed: (0, 100]" in err and "internal error" not in err
    with pytest.raises(ConfigError):
        CalibrateOptions(percentile=float(value))
    assert CalibrateOptions(percentile=100).percentile == 100  # the largest |x| is a valid choice


def test_keyword_form_builds_the_same_options_and_refuses_mixing():
    o = CalibrateOptions.from_keywords({"trt_version": "8.6.2", "eval_data": "held/", "labels": "l.txt",
                                        "eval_samples": 8, "mixed_precision": 0.98, "mixed_metric": "agreement",
                                        "sensitivity": "kl", "int8_kernels": True, "samples": 12, "plots": False})
    assert o == CalibrateOptions(tensorrt_version="8.6.2", samples=12, plots=False,
                                 evaluation=EvaluationOptions(data=["held/"], labels="l.txt", samples=8,
                                                              int8_kernels=True, sensitivity="kl"),
                                 mixed_precision=o.mixed_precision)
    assert (o.mixed_precision.bound, o.mixed_precision.metric) == (0.98, "agreement")
    assert resolve_options(None, {}) == CalibrateOptions()
    with pytest.raises(TypeError, match="not both"):
        resolve_options(CalibrateOptions(), {"samples": 3})
    with pytest.raises(TypeError, match="unexpected keyword argument 'sampels'"):
        resolve_options(None, {"sampels": 3})
    with pytest.raises(ConfigError, match="percentile"):
        resolve_options(None, {"percentile": math.nan})


def test_out_folder_means_inside_it(tiny_model, image_dir, tmp_path, capsys):
    """``--out w/`` (a folder that does not exist yet, or any existing folder) writes w/MODEL.calib and the rest
    inside it, never ./w.calib beside it."""
    from jetforge.calibrate.outputs import output_paths

    assert output_paths("m/model.onnx", "w/")["cache"].as_posix() == "w/model.calib"
    assert output_paths("m/model.onnx", str(tmp_path))["cache"] == tmp_path / "model.calib"
    assert output_paths("m/model.onnx", "w")["cache"].as_posix() == "w.calib"  # no slash, no folder: the file name
    out = tmp_path / "w"
    code = main(["calibrate", str(tiny_model), "--data", str(image_dir), "--samples", "16", "--no-plots",
                 "--out", str(out) + "/", "--json"])
    assert code == 0, capsys.readouterr().err
    assert (out / "tiny.calib").is_file() and (out / "tiny.qdq.onnx").is_file() and (out / "tiny.calib.json").is_file()
    assert not (tmp_path / "w.calib").exists()
    code = main(["calibrate", str(tiny_model), "--data", str(image_dir), "--samples", "16", "--no-plots", "--no-qdq",
                 "--out", str(out), "--tensorrt", "8.6.2", "--json"])  # now an existing folder, without the slash
    assert code == 0, capsys.readouterr().err
    from jetforge.calibrate.cache.format import CalibrationCache

    assert CalibrationCache.read(out / "tiny.calib").header == "TRT-8602-EntropyCalibration2"


def test_print_config_loads_back_to_the_same_options(tmp_path, capsys):
    cfg = _printed_config(capsys, ["--percentile", "99.9", "--eval", "held/", "--mixed-precision", "0.98",
                                   "--all-plots", "--clips", "per-track", "--clips-per-track", "4"])
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert load_calibrate_options(str(path)) == load_calibrate_options(
        None, final={"percentile": 99.9, "plots": "all", "evaluation": {"data": ["held/"]},
                     "mixed_precision": {"bound": 0.98}, "clips": {"mode": "per-track", "max_per_track": 4}})
