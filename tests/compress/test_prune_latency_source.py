"""``jetforge prune --latency-aware --latency-source estimate|measured|cpu`` (issue 26, item 3).

The estimate source times a candidate by resizing the weights of one export instead of exporting again; its
reference is a fresh export of the pruned model estimated by the same functions: both must give the same number
(the same graph shapes, so equal to float rounding).
"""

import json

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
pytest.importorskip("onnx")

from jetforge.errors import ConfigError  # noqa: E402

SHAPE = [1, 3, 64, 64]


@pytest.fixture(scope="module")
def pruned_pair():
    from jetforge.compress.prune import prune

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2().eval()
    return model, prune(model, torch.randn(SHAPE), ratio=0.3, inplace=False, round_to=8).model


def test_resized_graph_estimate_equals_a_fresh_export(pruned_pair):
    from jetforge.compress.prune.latency_sources import EstimateLatency, _export
    from jetforge.runtime.estimate.model import place, time_placed

    model, pruned = pruned_pair
    fn = EstimateLatency(model, SHAPE, "orin-nx-16gb", "int8")
    fast = fn(pruned)
    assert fn.exports == 0                                   # the fast path covered every weight
    placed = place(_export(pruned, SHAPE), 1, "int8", target=fn.target)
    assert fast == pytest.approx(time_placed(placed, fn.rates, fn.eff).latency_s * 1e3, rel=1e-12)
    assert fast < fn(model)


def test_default_source_is_the_estimate_for_a_board_and_cpu_otherwise():
    from jetforge.compress.prune.latency_sources import default_source

    assert default_source("orin-nx-16gb") == "estimate"
    assert default_source(None) == "cpu"
    assert default_source("server-hopper-h200") == "cpu"


def test_measured_without_a_gpu_or_table_is_one_clear_error(pruned_pair):
    from jetforge.compress.prune.latency_sources import latency_backend

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: measured times on it")
    with pytest.raises(ConfigError, match="needs a local CUDA GPU or --latency-table"):
        latency_backend("measured", pruned_pair[0], SHAPE, None, None)


def test_cli_estimate_source_prunes_for_the_board_and_a_table_replays(tmp_path, capsys):
    from jetforge.cli.main import main

    out = tmp_path / "la"
    argv = ["prune", "--model", "resnet18", "--flops-reduction", "1.5", "--latency-aware", "--target", "orin-nx-16gb",
            "--input-shape", ",".join(map(str, SHAPE)), "--no-onnx", "--no-plot", "--json"]
    assert main(argv + ["--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["latency"]["backend"].startswith("jetforge estimate on orin-nx-16gb, INT8")
    table = report["latency_table"]
    assert table["measurements"] > 0 and report["latency"]["speedup"] > 1.0
    # the table written by that run, given back as a measured table: nothing is timed, the same cuts come out (the
    # same number of channels per layer; which ones depends on resnet18's random weights, drawn anew per load)
    again = tmp_path / "again"
    assert main(argv + ["--latency-source", "measured", "--latency-table", str(out / "prune_report.json"),
                        "--out", str(again)]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert replay["latency_table"] == table
    def cuts(folder):
        entries = json.loads((folder / "model.prune.json").read_text())["entries"]
        return [(e["module"], e["tensor"], e["dim"], e["size"], len(e["removed"])) for e in entries]
    assert cuts(again) == cuts(out)


def test_latency_table_without_measured_is_refused(tmp_path):
    from jetforge.cli.main import main

    assert main(["prune", "--model", "resnet18", "--flops-reduction", "1.5", "--latency-aware", "--latency-source",
                 "estimate", "--target", "orin-nx-16gb", "--latency-table", str(tmp_path / "t.json"),
                 "--out", str(tmp_path / "o")]) == 1
