"""NVDEC beside a model (benchmarks/common/pipeline_gpu_beside.py) on the CPU, as the dry run runs it: the model's
thread runs while decode() runs, its batches are counted, and its own failure is raised instead of reading as a model
at 0 FPS (how a NameError in the moved code first showed)."""

import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def test_decode_beside_model_graph_runs_the_model_while_decode_runs_and_counts_its_batches():
    """The dry-run (CPU) form: the model thread runs ``repeats`` passes a loop until ``decode()`` returns; its rate is
    batch x repeats x loops / wall, and decode()'s own record is kept."""
    import time

    import torch

    from benchmarks.common.pipeline_gpu_beside import decode_beside_model_graph

    calls = []

    class Counting(torch.nn.Module):
        def forward(self, x):
            calls.append(x.shape)
            return x.mean()

    module = Counting()
    module.register_parameter("w", torch.nn.Parameter(torch.zeros(1)))  # the dtype is read from a parameter
    contract = SimpleNamespace(height=8, width=8)
    r = decode_beside_model_graph(torch, module, contract, 4, "cpu", lambda: (time.sleep(0.3), {"fps": 123.0})[1],
                                  repeats=3)
    assert r["fps"] == 123.0 and r["batch"] == 4 and r["repeats"] == 3 and r["replays"] >= 1
    assert len(calls) == 3 * r["replays"] and all(tuple(s) == (4, 3, 8, 8) for s in calls)
    assert r["model_fps"] > 0



def test_a_model_thread_that_fails_is_raised_by_name_after_decode_ends():
    from benchmarks.common.pipeline_gpu_beside import beside

    def broken() -> None:
        raise NameError("name '_back_to_back' is not defined")

    with pytest.raises(RuntimeError, match="the model beside NVDEC failed: NameError") as err:
        beside(broken, lambda: {"fps": 1.0}, threading.Event(), "t")
    assert isinstance(err.value.__cause__, NameError)
    stop = threading.Event()
    assert beside(lambda: stop.wait(5), lambda: {"fps": 2.0}, stop, "t") == {"fps": 2.0}  # stop set: it returns
