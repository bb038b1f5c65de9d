"""``bundle create --samples``: a few real samples with jetforge's FP32 and simulated-INT8 outputs for board-check.

This runs on the workstation (it needs ``calibrate``: ONNX Runtime and the INT8 simulation), so it
lives in the workflow layer, which may import ``calibrate`` inside functions; the bundle code only
stores the result (:mod:`jetforge.deploy.bundle_samples`).  The simulated INT8 outputs come
from the Q/DQ model when the bundle has one, otherwise from a Q/DQ model made in memory from the
first calibration cache's scales (TensorRT's implicit INT8 applies the same scales).
"""

from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np


def reference_samples(model: Path, source: str, count: int, qdq: Optional[Path] = None,
                      calib: Sequence[str] = ()) -> Tuple[bytes, bytes]:
    """The (npz, json) payload for :func:`jetforge.deploy.bundle.create_bundle`'s ``samples``."""
    from jetforge.deploy.bundle_samples import BundleSamples, MAX_SAMPLES, SamplesError, samples_payload
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.int8sim.simulate import SIMULATED_LABEL
    from jetforge.calibrate.sources import collect_sources
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.sidecar import read_sidecar

    if not 1 <= count <= MAX_SAMPLES:
        raise SamplesError("--samples-count must be 1 to %d, got %d" % (MAX_SAMPLES, count))
    sidecar = read_sidecar(model)
    pre = input_contract(sidecar, "image", purpose="bundle create --samples")
    names: List[str] = []
    crops: List[np.ndarray] = []
    inputs: List[np.ndarray] = []
    for name, image in collect_sources(source, max_samples=count):
        names.append(str(Path(name).name) if "#" not in str(name) else str(name).split("/")[-1])
        crops.append(pre.resize_crop(image) if image.ndim == 3 else pre.resize_crop(image[:, :, None]))
        inputs.append(pre.apply(image))
    if not inputs:
        raise SamplesError("%s gave no readable image" % source, hint="give a folder of images or a video")
    batch = [np.stack(inputs).astype(np.float32)]
    outputs = [t.name for t in sidecar.outputs]
    fp32 = ortrun.run(str(model), batch, "float")
    refs = {"fp32": dict(zip(outputs, fp32))}
    how = {"fp32": "ONNX Runtime FP32 (CPU) on %s" % model.name}
    int8_model, int8_from = _int8_model(model, qdq, calib)
    if int8_model is not None:
        refs["int8_simulated"] = dict(zip(outputs, ortrun.run(int8_model, batch, "simulated")))
        how["int8_simulated"] = "%s, from %s" % (SIMULATED_LABEL, int8_from)
    samples = BundleSamples(names=names, crops=np.stack(crops), inputs=batch[0], references=refs, how=how,
                            meta={"source": str(source), "preprocess": pre.to_dict()})
    return samples_payload(samples)


def _int8_model(model: Path, qdq: Optional[Path], calib: Sequence[str]) -> Tuple[Any, str]:
    if qdq is not None:
        return str(qdq), "the Q/DQ model %s" % qdq.name
    if not calib:
        return None, ""
    import onnx

    from jetforge.calibrate.qdq.export import insert_qdq
    from jetforge.runtime.tensorrt.calib_cache import read_calibration_cache_file

    cache = read_calibration_cache_file(calib[0])
    amax = {name: scale * 127.0 for name, scale in cache.scales.items()}
    return insert_qdq(onnx.load(str(model)), amax), "the calibration cache %s (scales as Q/DQ)" % Path(calib[0]).name


__all__ = ["reference_samples"]
