"""A new session backend is one module and one register_backend line (docs/architecture.md, "The TensorRT
package" / "Where to add a session backend"): a dummy backend registered that way is found by suffix and by name,
runs blocking and asynchronous calls through the Session machinery, and runs under `jetforge bench`.
"""

import json
import textwrap

import numpy as np
import pytest

from jetforge.cli import main as cli
from jetforge.runtime.session import BACKENDS, backend_for_path, open_session, register_backend
from jetforge.runtime.session import base

ECHO_MODULE = '''
from jetforge.runtime.session.base import Session
from jetforge.runtime.sidecar import TensorSpec


class EchoSession(Session):
    """Returns its input doubled."""

    name, display_name, suffixes, option_names = "echo", "Echo", (".echo",), ()

    @classmethod
    def open(cls, path):
        return cls(path, [TensorSpec("x", [-1, 4], "float32")], [TensorSpec("y", [-1, 4], "float32")], sidecar=None)

    def _run(self, feeds):
        return {"y": feeds["x"] * 2}

    def _close(self):
        pass
'''


@pytest.fixture
def echo_backend(tmp_path, monkeypatch):
    (tmp_path / "jetforge_echo_backend.py").write_text(textwrap.dedent(ECHO_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    register_backend("echo", "jetforge_echo_backend:EchoSession", (".echo",), "returns its input doubled")
    model = tmp_path / "m.echo"
    model.write_bytes(b"")
    try:
        yield model
    finally:
        BACKENDS.remove("echo")
        base._SUFFIXES.pop("echo", None)


def test_a_registered_backend_is_chosen_by_suffix_and_by_name(echo_backend):
    assert backend_for_path(echo_backend) == "echo" and BACKENDS.summary("echo") == "returns its input doubled"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with open_session(echo_backend) as s:
        assert s.backend == "echo"
        np.testing.assert_array_equal(s.infer({"x": x})["y"], x * 2)                 # exact: float32 doubling
        np.testing.assert_array_equal(s.wait(s.submit({"x": x + 1}))["y"], (x + 1) * 2)
    with open_session(echo_backend, backend="echo") as s:
        assert [t.name for t in s.inputs] == ["x"]


def test_a_registered_backend_runs_under_bench(echo_backend, capsys):
    code = cli.main(["bench", str(echo_backend), "--iterations", "5", "--warmup", "1", "--batch", "3", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads(out)
    assert data["backend"]["backend"] == "echo" and data["batch"] == 3
    assert data["inputs"]["x"]["shape"] == [3, 4]
