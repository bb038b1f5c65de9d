"""The safe routes the pickle refusal points to cost users nothing, and training checkpoints resume exactly.

* a state dict + an architecture name (torchvision's or jetforge's), for export, prune, distill, QAT;
* a pruned model's state dict + the plan ``jetforge prune`` wrote, replayed on the architecture;
* a ``torch.export`` archive (``--trust-pickle``: torch.export.load can run code) exported to ONNX;
* training checkpoints (model, optimizer, schedule, RNG, history, config) read weights-only, and a
  resumed run continues exactly as the uninterrupted one.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from jetforge.cli.main import main  # noqa: E402
from jetforge.compress.models.fashion import build_model  # noqa: E402
from jetforge.errors import CompressError  # noqa: E402


def onnx_run(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def conv_widths(onnx_path):
    import onnx

    model = onnx.load(str(onnx_path))
    inits = {t.name: t for t in model.graph.initializer}
    return [list(inits[n.input[1]].dims)[0] for n in model.graph.node if n.op_type == "Conv" and n.input[1] in inits]


def test_state_dict_with_a_torchvision_architecture_exports_like_the_model(tmp_path, capsys):
    """--model resnet18 --weights: 7 classes read from the weights, outputs equal the original model's."""
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=7).eval()
    for m in net.modules():  # non-trivial BatchNorm statistics, as trained weights have
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    weights = tmp_path / "my_resnet18.pt"
    torch.save(net.state_dict(), str(weights))
    out = tmp_path / "r18.onnx"
    assert main(["export", "--model", "resnet18", "--weights", str(weights), "--input-shape", "1x3x64x64",
                 "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"][0]["shape"] == ["batch", 7]
    x = np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32)
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    # 18 float32 conv layers: ORT and torch accumulate in different orders; 1e-4 of the output scale
    # is ~100x the observed difference and far below any wrong-weight error (order 1)
    assert np.max(np.abs(onnx_run(out, x) - ref)) <= 1e-4 * max(1.0, float(np.max(np.abs(ref))))


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory):
    """jetforge prune on fashion_cnn weights given with --weights: (weights, prune folder, unpruned model)."""
    torch.manual_seed(1)
    net = build_model("fashion_cnn").eval()
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    root = tmp_path_factory.mktemp("pruned")
    weights = root / "fashion_cnn.pt"
    torch.save(net.state_dict(), str(weights))
    out = root / "P"
    assert main(["prune", "--model", "fashion_cnn", "--weights", str(weights), "--input-shape", "1,1,28,28",
                 "--ratio", "0.5", "--round-to", "4", "--no-plot", "--out", str(out)]) == 0
    assert (out / "model.prune.json").is_file() and (out / "pruned.pt").is_file() and (out / "model.onnx").is_file()
    return weights, out, net


def test_pruned_state_dict_with_its_plan_exports_like_the_pruned_model(pruned_run, tmp_path, capsys):
    weights, pruned, net = pruned_run
    capsys.readouterr()
    out = tmp_path / "replayed.onnx"
    assert main(["export", "--model", "fashion_cnn", "--prune-plan", str(pruned / "model.prune.json"),
                 "--weights", str(pruned / "pruned.pt"), "--input-shape", "1x1x28x28", "--out", str(out)]) == 0
    # the plan really removed channels (the stem is protected by default), as in prune's own export
    full = [m.out_channels for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
    widths = conv_widths(out)
    assert widths == conv_widths(pruned / "model.onnx") and len(widths) == len(full)
    assert sum(widths) < 0.7 * sum(full) and widths[0] == full[0]
    # independent reference: the ONNX jetforge prune exported from the pruned model in memory
    x = np.random.default_rng(2).standard_normal((3, 1, 28, 28)).astype(np.float32)
    expect = onnx_run(pruned / "model.onnx", x)
    # same weights and graph, both run by ORT: only op-order rounding can differ (values of order 1)
    assert np.allclose(onnx_run(out, x), expect, rtol=1e-5, atol=1e-5)


def test_pruned_weights_without_their_plan_name_the_fix(pruned_run, capsys):
    _, pruned, _ = pruned_run
    capsys.readouterr()
    assert main(["export", "--model", "fashion_cnn", "--weights", str(pruned / "pruned.pt"), "--out",
                 str(pruned / "x.onnx")]) == 1
    err = capsys.readouterr().err.strip()
    assert "do not fit the fashion_cnn architecture" in err and "--prune-plan %s" % (pruned / "model.prune.json") in err
    assert main(["export", "--model", str(pruned / "pruned.pt"), "--out", str(pruned / "x.onnx")]) == 1
    err = capsys.readouterr().err.strip()
    assert ("--model fashion_cnn --prune-plan %s --weights %s" % (pruned / "model.prune.json", pruned / "pruned.pt")
            in err), err


def test_pruned_state_dict_loads_in_distill_and_qat_recipes(pruned_run, fmnist_root, tmp_path, capsys):
    from jetforge.compress.train.recipe import ModelConfig, build_from_config

    _, pruned, _ = pruned_run
    cfg = ModelConfig(arch="fashion_cnn", checkpoint=str(pruned / "pruned.pt"),
                      prune_plan=str(pruned / "model.prune.json"))
    student, _ = build_from_config(cfg)
    saved = torch.load(str(pruned / "pruned.pt"), weights_only=True)
    got = student.state_dict()
    assert set(got) == set(saved) and all(torch.equal(got[k], saved[k]) for k in saved)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "out_dir: %s\ndata: {root: %s, train_limit: 256, val_limit: 200, calib_samples: 128}\n"
        "model: {arch: fashion_cnn, checkpoint: %s, prune_plan: %s}\n"
        "train: {epochs: 1, batch_size: 64, lr: 0.002, max_steps_per_epoch: 2, progress: false}\n"
        % (tmp_path / "run", fmnist_root, pruned / "pruned.pt", pruned / "model.prune.json"))
    assert main(["distill", "--config", str(recipe), "--set", "export_onnx=false", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    trained = torch.load(res["files"]["student"], weights_only=True)
    assert {k: tuple(v.shape) for k, v in trained.items()} == {k: tuple(v.shape) for k, v in saved.items()}
    assert main(["qat", "--config", str(recipe), "--set", "out_dir=%s" % (tmp_path / "qat"), "--set",
                 "export.dla=false", "--set", "export.ort_eval=false", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fp32_accuracy"] is not None


def test_export_archive_made_by_you_exports_to_onnx(tmp_path, capsys, caplog):
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 5)).eval()
    archive = tmp_path / "mine.pt2"
    torch.export.save(torch.export.export(net, (torch.zeros(2, 3, 32, 32),)), str(archive))
    out = tmp_path / "mine.onnx"
    with caplog.at_level("WARNING"):
        assert main(["export", "--model", str(archive), "--trust-pickle", "--out", str(out), "--json"]) == 0
    assert any("--trust-pickle" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    info = json.loads(capsys.readouterr().out)
    # the archive's example input gives the shape; the traced ONNX keeps its batch (see _program_facts)
    assert info["inputs"][0]["shape"] == [2, 3, 32, 32] and info["outputs"][0]["shape"] == [2, 5]
    x = np.random.default_rng(4).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    assert np.allclose(onnx_run(out, x), ref, rtol=1e-5, atol=1e-5)  # float32, one conv: a few ulps


# ------------------------------------------------------------------------------------ training checkpoints
def _fit(fmnist_root, out_dir, epochs):
    from jetforge.compress.data import fashion_mnist
    from jetforge.compress.train import Supervised, TrainConfig, Trainer

    torch.manual_seed(0)
    student = build_model("fashion_cnn", 0.25)
    train = fashion_mnist(fmnist_root, "train", limit=192, augment=True, seed=0)
    val = fashion_mnist(fmnist_root, "test", limit=100, seed=0)
    cfg = TrainConfig(epochs=epochs, batch_size=32, lr=0.05, warmup_epochs=0.5, progress=False, threads=1,
                      max_steps_per_epoch=4)
    trainer = Trainer(Supervised(student), student, train, val, cfg, out_dir,
                      run_config={"name": "resume-test", "kind": "finetune", "notes": ["a", 1, 2.5, None]})
    return trainer.fit(resume=True), student


class Stopped(Exception):
    pass


def without_timing(history):
    return [{k: v for k, v in record.items() if k not in ("seconds", "samples_per_s")} for record in history]


def test_training_checkpoint_resumes_exactly_and_reads_weights_only(fmnist_root, tmp_path, monkeypatch):
    import jetforge.compress.train.loop as loop

    straight, s_model = _fit(fmnist_root, tmp_path / "straight", epochs=3)

    def stop_after_first_epoch(ctx):  # the run is killed right after epoch 1's checkpoint was written
        raise Stopped()

    with monkeypatch.context() as patch:
        patch.setattr(loop, "barrier", stop_after_first_epoch)
        with pytest.raises(Stopped):
            _fit(fmnist_root, tmp_path / "resumed", epochs=3)
    # what a checkpoint holds is read with plain torch.load(weights_only=True): no jetforge code involved
    ckpt = torch.load(str(tmp_path / "resumed" / "last.pt"), weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["config"]["notes"] == ["a", 1, 2.5, None]
    assert without_timing(ckpt["history"]) == without_timing(straight.history[:1])
    assert set(ckpt["rng"]["generators"]) == {"sampler", "dataset._gen"}
    resumed, r_model = _fit(fmnist_root, tmp_path / "resumed", epochs=3)
    assert resumed.resumed_from_epoch == 1 and len(resumed.history) == 3
    # same batches, same flips, same learning rates, so the same losses and accuracies
    assert without_timing(straight.history) == without_timing(resumed.history)
    a, b = s_model.state_dict(), r_model.state_dict()
    # identical continued training: same data order, augmentation, optimizer state and RNG (one thread,
    # same machine); without the saved generator states the history check above already fails
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_that_would_need_unpickling_is_never_written(tmp_path):
    from pathlib import Path

    from jetforge.compress.train import save_checkpoint

    target = tmp_path / "last.pt"
    save_checkpoint(target, {"epoch": 1, "w": torch.ones(2)})
    for bad in ({"epoch": np.float64(1.0)}, {"config": {"out": Path("x")}}):
        with pytest.raises(CompressError, match="pickled Python objects"):
            save_checkpoint(target, dict(bad, w=torch.ones(2)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temporary file left, old one kept
    assert torch.load(str(target), weights_only=True)["epoch"] == 1
