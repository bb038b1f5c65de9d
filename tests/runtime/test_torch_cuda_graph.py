"""The PyTorch backend's CUDA-graph path on a real GPU: capture per shape, replay, eviction, fallback, timing.

Skipped without a CUDA GPU ("no CUDA GPU").  MobileNetV2 with real weights runs through the
backend contract (test_backend_contract.py); here a small conv net keeps each case quick.
"""

import logging

import numpy as np
import pytest

from jetforge.optional import is_available


def _cuda():
    if not is_available("torch"):
        return False
    import torch

    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="no CUDA GPU")]


def _net():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()


def _syncs_on_host():
    """A model whose forward reads a value back to the host: not capturable into a CUDA graph."""
    from torch import nn

    class SyncsOnHost(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _net()

        def forward(self, x):
            if float(x.abs().sum().item()) < 0:  # .item() synchronises: the capture must fail
                x = -x
            return self.net(x)

    return SyncsOnHost()


def _x(batch, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32)).astype(np.float32)


def _open(model=None, **kw):
    from jetforge.runtime.session import open_session

    options = dict(device="cuda", input_shapes={"input": ["batch", 3, 32, 32]})
    options.update(kw)
    return open_session(model if model is not None else _net(), backend="pytorch", **options)


def _eager(model, x, dtype="fp32"):
    import torch

    m = model.cuda()
    t = torch.from_numpy(x).cuda()
    if dtype == "fp16":
        m, t = m.half(), t.half()
    with torch.no_grad():
        return m(t).float().cpu().numpy()


def test_capture_once_per_shape_then_replay():
    with _open(dtype="fp32") as s:
        assert s.info()["cuda_graph"] == "on" and s.policy.captures == 0
        x = _x(2)
        first = s.infer({"input": x})["output"]
        assert s.policy.captures == 1
        second = s.infer({"input": x})["output"]
        assert s.policy.captures == 1  # replayed, not re-captured
        np.testing.assert_allclose(first, second, rtol=0, atol=0)
        np.testing.assert_allclose(first, _eager(_net(), x), rtol=2e-3, atol=2e-3)
        # new inputs of the same shape flow through the static buffers
        y = _x(2, seed=1)
        np.testing.assert_allclose(s.infer({"input": y})["output"], _eager(_net(), y), rtol=2e-3, atol=2e-3)
        # a new batch size is a new capture; the old graph stays (max_graphs=4 by default)
        s.infer({"input": _x(5)})
        assert s.policy.captures == 2 and len(s.policy.live_keys) == 2
        s.infer({"input": x})
        assert s.policy.captures == 2


def test_fp16_channels_last_matches_eager_fp16():
    with _open(dtype="fp16", channels_last=True) as s:
        x = _x(3)
        out = s.infer({"input": x})["output"]
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, _eager(_net(), x, "fp16"), rtol=2e-2, atol=2e-2)
        assert "fp16, channels_last, CUDA graph on" in s.describe()


def test_graph_eviction_with_one_graph():
    with _open(max_graphs=1) as s:
        for batch in (1, 2, 1):
            s.infer({"input": _x(batch)})
        assert s.policy.captures == 3 and len(s.policy.live_keys) == 1


def test_capture_failure_falls_back_to_eager_with_a_warning(caplog):
    import torch

    model = _syncs_on_host()
    x = _x(2)
    with caplog.at_level(logging.WARNING, logger="jetforge.runtime.session.torch_backend"):
        with _open(model) as s:
            out = s.infer({"input": x})["output"]
            status = s.info()["cuda_graph"]
            again = s.infer({"input": x})["output"]
    assert status.startswith("fallback: "), status
    assert "CUDA graph capture failed" in caplog.text
    ref = _eager(model.net, x)
    np.testing.assert_allclose(out, ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(again, ref, rtol=2e-3, atol=2e-3)
    torch.cuda.synchronize()


def test_no_graph_when_disabled():
    with _open(cuda_graph=False) as s:
        s.infer({"input": _x(1)})
        assert s.info()["cuda_graph"] == "off" and s.policy.captures == 0


def test_infer_tensors_matches_a_bare_graph_replay():
    import torch

    model = _net().cuda().half().to(memory_format=torch.channels_last)
    x = torch.from_numpy(_x(1)).cuda().half().contiguous(memory_format=torch.channels_last)
    static = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static)
    graph.replay()
    with _open(model, dtype="fp16", channels_last=True) as s:
        got = s.infer_tensors({"input": x})["output"]
        got = s.infer_tensors({"input": x})["output"]  # second call: replay
        torch.cuda.synchronize()
        assert got.is_cuda and got.dtype == torch.float16
        assert torch.allclose(got, static_out, rtol=1e-3, atol=1e-3)


def test_submit_wait_and_event_timing():
    with _open() as s:
        x = _x(4)
        ref = s.infer({"input": x})["output"]
        assert s.set_timing(True) and s.timing_source == "cuda events"
        request = s.submit({"input": x})
        out = s.wait(request)["output"]
        np.testing.assert_array_equal(out, ref)
        timing = s.last_timing()
        assert set(timing) == {"h2d_ms", "compute_ms", "d2h_ms"}
        assert all(v > 0 for v in timing.values())
