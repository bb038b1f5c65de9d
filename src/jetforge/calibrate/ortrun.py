"""How INT8 evaluation runs a model, for each kind of arithmetic (sessions through ``open_session``).

* ``"simulated"`` (the default for every INT8 number jetforge prints): the Q/DQ model rewritten by
  :func:`jetforge.calibrate.int8sim.simulate.simulation_model` and run with ``ORT_DISABLE_ALL``, so no Q/DQ
  pair is fused into an integer kernel and the numbers follow TensorRT's rules on any CPU;
* ``"ort-int8"``: the Q/DQ model as it is with ``ORT_ENABLE_ALL``: ONNX Runtime fuses Q/DQ into its
  own INT8 kernels (QLinearConv, QGemm, ...), whose results depend on the CPU (see
  :mod:`jetforge.runtime.cpu_features`) -- a second, labelled measurement;
* ``"float"``: a float model (the FP32 reference) with all optimisations.

Sessions are opened by :func:`jetforge.runtime.session.open_session` from in-memory models (candidates
are made by graph surgery, never written), on ONNX Runtime's CPU provider, with the optimisation level
the arithmetic needs (``"disable"`` for the simulation, ``"all"`` otherwise).
"""

import logging
from collections import Counter
from typing import Dict, Sequence

import numpy as np

from jetforge.errors import UnknownNameError
from jetforge.optional import require

log = logging.getLogger(__name__)

ARITHMETICS = ("simulated", "ort-int8", "float")
# ONNX Runtime's integer kernels: none may run in a simulated session.
INT8_KERNELS = ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QGemm", "MatMulIntegerToFloat",
                "ConvInteger", "MatMulInteger", "QLinearGlobalAveragePool", "QLinearAveragePool",
                "DynamicQuantizeMatMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat", "QLinearSoftmax",
                "QLinearReduceMean", "QAttention", "DynamicQuantizeLSTM")


def _load(model):
    from jetforge.calibrate.stats import load_model

    return load_model(model)


def prepare(model, arithmetic: str = "simulated"):
    """The ModelProto that a session of ``arithmetic`` runs (the simulated rewrite for ``"simulated"``)."""
    if arithmetic not in ARITHMETICS:
        raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)
    model = _load(model)
    if arithmetic == "simulated":
        from jetforge.calibrate.int8sim.simulate import simulation_model

        return simulation_model(model)
    return model


def session(model, arithmetic: str = "simulated", threads: int = 0, optimized_path=None, prepared: bool = False):
    """A :class:`~jetforge.runtime.session.Session` (ONNX Runtime, CPU) running ``model`` with ``arithmetic``.

    ``threads`` 0 leaves ONNX Runtime's default.  ``prepared=True``: ``model`` already is what
    :func:`prepare` returns (e.g. a simulation model built with non-default options); it is run as
    ``arithmetic`` runs, without rewriting it again.  ``optimized_path``: where ONNX Runtime saves the
    graph it actually runs (see :func:`executed_ops`).
    """
    from jetforge.runtime.session import open_session

    if arithmetic not in ARITHMETICS:
        raise UnknownNameError("INT8 arithmetic", arithmetic, ARITHMETICS)
    prepared = _load(model) if prepared else prepare(model, arithmetic)
    return open_session(prepared, backend="onnxruntime", providers="cpu", threads=int(threads or 0),
                        optimization="disable" if arithmetic == "simulated" else "all",
                        optimized_model_path=None if optimized_path is None else str(optimized_path),
                        name="the %s evaluation model" % arithmetic)


def executed_ops(model, arithmetic: str = "simulated") -> Dict[str, int]:
    """Op counts of the graph ONNX Runtime runs for ``arithmetic`` (after its optimisations, if any)."""
    import os
    import tempfile

    onnx = require("onnx", "inspecting ONNX")
    fd, path = tempfile.mkstemp(suffix=".onnx", prefix="jf_ort_")
    os.close(fd)
    try:
        session(model, arithmetic, optimized_path=path).close()
        return dict(Counter(n.op_type for n in onnx.load(path).graph.node))
    finally:
        os.unlink(path)


def integer_kernels(ops: Dict[str, int]) -> Dict[str, int]:
    """The ONNX Runtime integer kernels among ``ops`` (empty for a simulated session)."""
    return {k: v for k, v in ops.items() if k in INT8_KERNELS}


def run(model, batches: Sequence[np.ndarray], arithmetic: str = "simulated", threads: int = 0,
        prepared: bool = False):
    """Every output of ``model`` over ``batches``, each concatenated along axis 0."""
    with session(model, arithmetic, threads, prepared=prepared) as sess:
        name = sess.inputs[0].name
        outs = [sess.infer({name: b}) for b in batches]
        names = [t.name for t in sess.outputs]
    return [np.concatenate([np.asarray(o[n]) for o in outs], axis=0) for n in names]


__all__ = ["ARITHMETICS", "INT8_KERNELS", "executed_ops", "integer_kernels", "prepare", "run", "session"]
