"""TorchScript and torch.export files are programs: `bench` and the PyTorch session open them only when trusted.

A `.pt2` archive is read by ``torch.export.load``, which unpickles parts of it; PyTorch's security policy
treats TorchScript archives as code.  A stranger's file must therefore be refused before it is opened,
with one line naming the opt-in, and open normally for a user who made it.
"""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jetforge.errors import ModelError  # noqa: E402
from jetforge.runtime.session import open_session  # noqa: E402


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten()).eval()
    path = tmp_path_factory.mktemp("ts") / "net.pt"
    torch.jit.save(torch.jit.trace(net, torch.zeros(1, 3, 16, 16)), str(path))
    return net, path


def test_torchscript_file_is_refused_without_trust(scripted):
    _, path = scripted
    with pytest.raises(ModelError, match="runs code stored in the file") as err:
        open_session(path, backend="pytorch", input_shapes={"input": [1, 3, 16, 16]})
    assert "--trust-pickle" in err.value.hint


def test_trusted_torchscript_file_runs_like_the_module(scripted):
    net, path = scripted
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with open_session(path, backend="pytorch", device="cpu", trust_code=True,
                      input_shapes={"input": [1, 3, 16, 16]}) as s:
        out = next(iter(s.infer({s.inputs[0].name: x}).values()))
    with torch.no_grad():
        ref = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)  # same float32 CPU kernels


def test_bench_refuses_a_program_file_in_one_line(scripted):
    _, path = scripted
    proc = subprocess.run([sys.executable, "-m", "jetforge", "bench", str(path), "--iterations", "2",
                           "--warmup", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--trust-pickle" in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize("trust", [[], ["--trust-pickle"]])
def test_bench_names_a_state_dict_and_a_pickled_module_and_what_to_pass_instead(tmp_path, capsys, trust):
    """Issue 25: `bench prune/pruned.pt` called a state dict "a TorchScript program", and with --trust-pickle
    printed torch's "checkpoint corrupted".  The file's kind is read from its bytes (nothing in it runs)."""
    from jetforge.cli.main import main

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    prune = tmp_path / "prune"
    prune.mkdir()
    torch.save(net.state_dict(), str(prune / "pruned.pt"))
    (prune / "model.prune.json").write_text("{}")  # jetforge prune writes the plan beside its state dict
    legacy = tmp_path / "legacy.pth"
    torch.save(net.state_dict(), str(legacy), _use_new_zipfile_serialization=False)
    module = tmp_path / "module.pt"
    torch.save(net, str(module))
    expected = {
        prune / "pruned.pt": ["pruned.pt is a state dict (weights only, no architecture)",
                              "jetforge export --model ARCH --prune-plan %s --weights %s --out model.onnx"
                              % (prune / "model.prune.json", prune / "pruned.pt")],
        legacy: ["legacy.pth is a state dict", "jetforge export --model ARCH --weights %s" % legacy],
        module: ["module.pt is a pickled module (torch.save(model); it names torch.nn.modules.",
                 "not a TorchScript program", "jetforge export --model %s --trust-pickle" % module],
    }
    for path, parts in expected.items():
        assert main(["bench", str(path), "--iterations", "2"] + trust) == 1
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("jetforge: error: "), lines
        assert all(p in lines[0] for p in parts), lines[0]
        assert "is a TorchScript program" not in lines[0] and "corrupted" not in lines[0]
