"""Distillation and the shared training loop on real Fashion-MNIST: losses, frozen teacher, clear errors,
schedule, atomic checkpoints with resume, YAML recipe through the CLI, the IDX reader."""

import gzip
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from jetforge.compress.distill import DistillConfig, DistillModule, FeaturePair, distill, kd_loss  # noqa: E402
from jetforge.compress.train import TrainConfig, build_model, lr_factor, read_metrics  # noqa: E402
from jetforge.compress.train.recipe import DataConfig, ModelConfig  # noqa: E402
from jetforge.errors import CompressError, InputFileError, UnknownNameError  # noqa: E402


@pytest.fixture(scope="module")
def fmnist_root():
    from jetforge.assets import asset_path
    from jetforge.errors import AssetError

    try:
        return asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    except AssetError as err:
        pytest.skip("Fashion-MNIST not available: %s" % err)


def tiny(epochs=1, optimizer="sgd", **kw):
    return TrainConfig(epochs=epochs, batch_size=64, lr=0.005 if optimizer == "adamw" else 0.05, optimizer=optimizer,
                       warmup_epochs=0.5, progress=False, **kw)


def test_idx_reader_on_the_real_files(fmnist_root, tmp_path):
    from jetforge.compress.data import fashion_mnist, load_fashion_mnist, read_idx

    x, y = load_fashion_mnist(fmnist_root, "test")
    assert x.shape == (10000, 28, 28) and x.dtype == np.uint8 and sorted(np.unique(y)) == list(range(10))
    assert np.bincount(y).tolist() == [1000] * 10  # Fashion-MNIST's test set is balanced
    ds = fashion_mnist(fmnist_root, "train", limit=200)
    xb, yb = ds.__getitems__([0, 1, 2])
    assert xb.shape == (3, 1, 28, 28) and abs(float(ds.__getitems__(list(range(200)))[0].mean())) < 0.5
    assert np.bincount(ds.labels.numpy()).tolist() == [20] * 10  # class-balanced subset
    bad = tmp_path / "bad-idx3-ubyte.gz"
    with gzip.open(str(bad), "wb") as f:
        f.write(b"\x00\x00\x08\x03" + (5).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + b"\x00" * 100)
    with pytest.raises(InputFileError, match="truncated"):
        read_idx(bad)
    with pytest.raises(InputFileError, match="lacks") as err:
        load_fashion_mnist(tmp_path, "train")
    assert "jetforge assets fetch fashion_mnist" in str(err.value)


def test_kd_loss_is_temperature_scaled_kl():
    s = torch.tensor([[1.0, 2.0, 0.5]])
    t = torch.tensor([[0.5, 2.5, 0.0]])
    T = 3.0
    p_t, p_s = torch.softmax(t / T, 1), torch.softmax(s / T, 1)
    expect = float((p_t * (p_t.log() - p_s.log())).sum() * T * T)
    assert float(kd_loss(s, t, T)) == pytest.approx(expect, rel=1e-5)
    assert float(kd_loss(t, t, T)) == pytest.approx(0.0, abs=1e-7)


def test_teacher_is_frozen_and_mismatches_are_clear_errors():
    torch.manual_seed(0)
    student, teacher = build_model("fashion_cnn", 0.25), build_model("fashion_cnn", 0.5)
    x = torch.randn(4, 1, 28, 28)
    mod = DistillModule(student, teacher, x, features=[FeaturePair("block", "block")])
    mod.train()
    assert not teacher.training and student.training
    assert not any(p.requires_grad for p in teacher.parameters())
    assert isinstance(mod.adapters[0], nn.Conv2d) and mod.adapters[0].in_channels == 16
    loss, logs = mod(x, torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert set(logs) == {"task_loss", "kd_loss", "feature_loss"} and mod.adapters[0].weight.grad is not None
    assert all(p.grad is None for p in teacher.parameters())
    with pytest.raises(CompressError, match=r"teacher outputs \(4, 1000\) but student outputs \(4, 10\)"):
        DistillModule(build_model("fashion_cnn", 0.25), build_model("fashion_cnn", 0.25, num_classes=1000), x)
    with pytest.raises(UnknownNameError, match="did you mean 'block'"):
        DistillModule(student, teacher, x, features=[FeaturePair("blok", "block")])


def test_cosine_schedule_with_warmup():
    assert lr_factor(0, 100, 10, 0.0) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10, 0.0) == pytest.approx(1.0)
    assert lr_factor(55, 100, 10, 0.0) == pytest.approx(0.5)
    assert lr_factor(100, 100, 10, 0.1) == pytest.approx(0.1)
    assert lr_factor(32, 100, 10, 0.0) == pytest.approx(0.5 * (1 + math.cos(math.pi * 22 / 90)))


def test_distill_trains_checkpoints_atomically_and_resumes(fmnist_root, tmp_path):
    data = DataConfig(root=str(fmnist_root), train_limit=512, val_limit=300)
    teacher_dir = tmp_path / "teacher"
    teacher_train = tiny(1, optimizer="adamw")
    teacher_train.batch_size, teacher_train.lr = 32, 0.003
    t = distill(DistillConfig(out_dir=str(teacher_dir), data=DataConfig(root=str(fmnist_root), train_limit=1024,
                                                                        val_limit=300),
                              model=ModelConfig(width=0.25), train=teacher_train, export_onnx=False))
    assert t.train.final_accuracy > 0.25  # 32 AdamW steps on 1024 real images: well above chance (0.1)
    hist = read_metrics(teacher_dir / "metrics.jsonl")
    assert [h["epoch"] for h in hist] == [1] and all("samples_per_s" in h for h in hist)
    assert not list(teacher_dir.glob("*.part*"))  # atomic writes leave no temporary files
    cfg = DistillConfig(out_dir=str(tmp_path / "kd"), data=data, model=ModelConfig(width=0.25, prune_ratio=0.5,
                                                                                   checkpoint=str(teacher_dir / "best.pt")),
                        teacher=ModelConfig(width=0.25, checkpoint=str(teacher_dir / "best.pt")), train=tiny(1))
    first = distill(cfg)
    assert first.teacher_accuracy == pytest.approx(t.train.best_accuracy)
    assert (tmp_path / "kd" / "model.prune.json").is_file() and (tmp_path / "kd" / "model.onnx").is_file()
    assert "prune_ratio: 0.5" in (tmp_path / "kd" / "config.yaml").read_text()
    cfg.train.epochs = 2  # continue the same run for one more epoch
    second = distill(cfg)
    assert second.train.resumed_from_epoch == 1 and len(second.train.history) == 2
    assert second.train.history[0] == first.train.history[0]
    assert len(read_metrics(tmp_path / "kd" / "metrics.jsonl")) == 2
    assert {"task_loss", "kd_loss"} <= {k[len("train_"):] for k in second.train.history[1] if k.startswith("train_")}


def test_cli_runs_a_yaml_recipe_and_reports_bad_input(fmnist_root, tmp_path, capsys):
    from jetforge.cli.main import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: cli\nout_dir: %s\ndata: {root: %s, train_limit: 256, val_limit: 200}\n"
                      "model: {arch: fashion_cnn, width: 0.25}\n"
                      "train: {epochs: 1, batch_size: 64, max_steps_per_epoch: 2, progress: false}\n"
                      "export_onnx: false\n" % (tmp_path / "run", fmnist_root))
    assert main(["distill", "--config", str(recipe), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epochs"] == 1 and (tmp_path / "run" / "student.pt").is_file()
    assert main(["distill", "--config", str(recipe), "--data", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert "lacks" in err and "jetforge assets fetch fashion_mnist" in err
    assert main(["distill", "--config", str(recipe), "--set", "teacher.arch=fashion_cnn"]) == 1
    assert "teacher has no checkpoint" in capsys.readouterr().err
