"""`jetforge board-check` and the samples `bundle create --samples` adds for it.

The bundle is the real MobileNetV2 export with real bikes.mp4 frames; FP32 and simulated-INT8
references are computed by the real CLI (ONNX Runtime, jetforge's INT8 simulation).  Everything up
to the first TensorRT call runs for real (bundle verification, board facts, dla-check, estimate,
the report).  TensorRT on a Jetson, which does not exist here, is FakeTensorRTJetson, and the
board's tegrastats is a FakeTegrastats script printing a line recorded on an Orin NX.
"""

import json
import struct

import numpy as np
import pytest

pytest.importorskip("onnx")

from jetforge.cli.main import main  # noqa: E402
from jetforge.deploy.boardcheck.check import JetsonTensorRT, engine_list, run_board_check  # noqa: E402
from jetforge.deploy.bundle import open_bundle, verify_bundle  # noqa: E402
from jetforge.deploy.bundle_samples import read_samples  # noqa: E402
from jetforge.runtime.tensorrt.engine_cache import EngineCache  # noqa: E402
from jetforge.deploy.onboard import Board  # noqa: E402
from jetforge.targets import get_target  # noqa: E402

NX = "orin-nx-16gb"
ORIN_NX_LINE = ("RAM 6334/15388MB (lfb 1770x4MB) SWAP 491/7694MB (cached 0MB) CPU [6%@729,9%@729,5%@729,16%@729,off,"
                "off,off,off] EMC_FREQ 0%@2133 GR3D_FREQ 0%@611 VIC_FREQ 729 APE 174 NVDLA0_FREQ @1600 CV0@45.812C "
                "VDD_IN 5299mW/5299mW VDD_CPU_GPU_CV 773mW/773mW VDD_SOC 1424mW/1424mW")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, mobilenet_onnx, bikes_clip):
    root = tmp_path_factory.mktemp("bc")
    cache = root / "model.calib"
    cache.write_text("TRT-100300-EntropyCalibration2\n" + "\n".join(
        "%s: %s" % (n, struct.pack(">f", s).hex()) for n, s in (("input", 2.64 / 127.0), ("logits", 0.15))) + "\n")
    rc = main(["bundle", "create", str(mobilenet_onnx), "--target", NX, "--tensorrt", "10.3", "--calib", str(cache),
               "--samples", str(bikes_clip), "--samples-count", "4", "--out", str(root / "b")])
    assert rc == 0
    return root / "b"


def test_bundle_carries_samples_with_their_references(bundle, mobilenet_onnx):
    from jetforge.runtime.session import open_session
    from jetforge.runtime.sidecar import read_sidecar

    assert verify_bundle(bundle).ok
    manifest = open_bundle(bundle).manifest
    assert {f.role for f in manifest.files} >= {"samples", "samples_meta"}
    samples = read_samples(bundle, read_sidecar(bundle / "model.onnx"))
    assert len(samples) == 4 and samples.names[0] == "bikes.mp4#0"
    assert samples.crops.shape == (4, 224, 224, 3) and samples.inputs.shape == (4, 3, 224, 224)
    with open_session(mobilenet_onnx, backend="onnxruntime") as s:
        again = s.infer({"input": samples.inputs})["logits"]
    # the same FP32 model on the same inputs through another session: float rounding only
    assert np.allclose(samples.references["fp32"]["logits"], again, rtol=1e-4, atol=1e-4)
    assert "simulated INT8" in samples.how["int8_simulated"]
    sim = samples.references["int8_simulated"]["logits"]
    assert sim.shape == (4, 1000) and not np.array_equal(sim, samples.references["fp32"]["logits"])
    # a changed sample is a corrupt bundle
    data = bytearray((bundle / "samples" / "samples.npz").read_bytes())
    copy = bundle.parent / "tampered"
    import shutil

    shutil.copytree(str(bundle), str(copy))
    data[-100] ^= 1
    (copy / "samples" / "samples.npz").write_bytes(bytes(data))
    assert [p for p, _ in verify_bundle(copy).corrupt] == ["samples/samples.npz"]


class FakeTensorRTJetson(JetsonTensorRT):
    """Stands in for JetPack's TensorRT on an Orin NX (absent here).

    build: writes an engine file and the build report the real builder writes, its inspector layers taken
    from dla-check's own prediction except one layer moved to the GPU (so the comparison has something to
    find); run: FP16 engines return the FP32 model's outputs rounded through float16, INT8 engines the
    bundle's simulated-INT8 outputs; benchmark: a fixed latency.
    """

    def __init__(self, bundle_dir, moved_layer):
        self.bundle_dir = bundle_dir
        self.moved_layer = moved_layer
        self.builds = 0

    def build(self, plan, engine_path):
        from jetforge.runtime.tensorrt.dla.analyze import analyze_onnx

        self.builds += 1
        engine_path.write_bytes(b"fake engine for %s" % plan.precision.encode())
        layers = []
        if plan.dla_core is not None:
            predicted = analyze_onnx(plan.onnx_path, get_target(NX), precision=plan.precision,
                                     input_shapes={"input": [1, 3, 224, 224]}).layers
            for layer in predicted:
                if layer.device in ("DLA", "GPU"):
                    device = "GPU" if layer.name == self.moved_layer else layer.device
                    layers.append({"name": layer.name, "type": layer.onnx_op, "device": device, "precisions": []})
        report = {"inspector": {"available": True, "layers": layers,
                                "summary": {"layers": len(layers), "dla": sum(l["device"] == "DLA" for l in layers)}}}
        (engine_path.parent / (engine_path.name + ".report.json")).write_text(json.dumps(report))
        from jetforge.runtime.tensorrt.engine_sidecar import EngineSidecar, write_engine_sidecar
        from jetforge.runtime.sidecar import TensorSpec

        write_engine_sidecar(engine_path, EngineSidecar(  # what the real builder writes: the engine cache checks it
            tensorrt_version="10.3.0", target=plan.target, precision=plan.precision, device=plan.device,
            dla_core=plan.dla_core, inputs=[TensorSpec("input", [1, 3, 224, 224])],
            outputs=[TensorSpec("logits", [1, 1000])], source_onnx={"path": plan.onnx_path, "sha256": plan.onnx_sha256},
            plan=plan.to_dict()))

    def run(self, engine, dla_core, inputs):
        from jetforge.runtime.session import open_session

        samples = read_samples(self.bundle_dir)
        if engine.read_bytes() == b"fake engine for int8":  # the engine cache moves engines: read what was built
            return {k: v.copy() for k, v in samples.references["int8_simulated"].items()}
        with open_session(self.bundle_dir / "model.onnx", backend="onnxruntime") as s:
            out = s.infer({"input": inputs})
        return {k: v.astype(np.float16).astype(np.float32) for k, v in out.items()}

    def benchmark(self, engine, dla_core, iterations):
        return {"latency_ms": {"mean": 1.5, "p50": 1.4, "p99": 2.0}}


@pytest.fixture
def fake_tegrastats(tmp_path):
    script = tmp_path / "FakeTegrastats"
    script.write_text("#!/bin/sh\nwhile true; do echo '%s'; sleep 0.05; done\n" % ORIN_NX_LINE)
    script.chmod(0o755)
    return str(script)


def test_board_check_with_faked_tensorrt(bundle, tmp_path, fake_tegrastats):
    board = Board(target=get_target(NX), how="test", tensorrt_installed="10.3.0", tensorrt_version="10.3.0",
                  device_name="NVIDIA Jetson Orin NX 16GB", jetpack="6.1")
    assert [e[0] for e in engine_list(open_bundle(bundle), board)] == ["gpu-fp16", "gpu-int8", "dla0-int8", "dla1-int8"]
    layer = FakeTensorRTJetson(bundle, moved_layer="/features/features.0/features.0.0/Conv")
    cache = EngineCache(tmp_path / "engines")
    report = run_board_check(bundle, tmp_path / "out", board=board, layer=layer, cache=cache, iterations=5,
                             tegrastats=fake_tegrastats, mode="MAXN")
    engines = {e["name"]: e for e in report["engines"]}
    assert report["status"] == "fail" and layer.builds == 4
    fp16, int8 = engines["gpu-fp16"], engines["gpu-int8"]
    # FP16 rounding of logits of magnitude ~10: error ~ 2^-11 relative, i.e. SQNR ~ 66 dB; the threshold is 40 dB
    assert fp16["ok"] and 55 < fp16["vs_fp32"]["sqnr_db"] < 80 and fp16["vs_fp32"]["top1_agreement"] == 1.0
    assert int8["ok"] and int8["vs_int8_simulated"]["sqnr_db"] == float("inf")
    assert int8["vs_int8_simulated"]["top1_agreement"] == 1.0
    dla = engines["dla0-int8"]
    assert not dla["ok"] and dla["placement"]["disagree"] == [dict(dla["placement"]["disagree"][0], layer="/features/features.0/features.0.0/Conv",
                                                                  predicted="DLA", tensorrt="GPU")]
    assert dla["placement"]["agree"] > 50 and not dla["placement"]["unmatched"]
    lat = fp16["latency"]
    assert lat["measured_ms"] == 1.5 and lat["estimated_ms"] > 0 and lat["ratio"] == pytest.approx(1.5 / lat["estimated_ms"])
    points = report["estimate_points"]
    assert [(p["precision"], p["devices"], p["value"]) for p in points] == [
        ("fp16", "gpu", 1.5), ("int8", "gpu", 1.5), ("int8", "dla", 1.5), ("int8", "dla", 1.5)]
    assert points[0]["board"] == NX and points[0]["power_mode"] == "MAXN" and points[0]["tensorrt"] == "10.3.0"
    assert points[0]["jetpack"] == "6.1" and points[0]["metric"] == "latency_ms" and points[0]["batch"] == 1
    assert report["tegrastats"]["total_power_mw"]["mean"] == 5299.0  # VDD_IN of the recorded line
    saved = json.loads((tmp_path / "out" / "board-check.json").read_text())
    assert saved["status"] == "fail" and len(saved["engines"]) == 4
    text = (tmp_path / "out" / "board-check.txt").read_text()
    assert "gpu-fp16" in text and "PASS" in text and "/features/features.0/features.0.0/Conv (Conv): dla-check said DLA, TensorRT put it on GPU" in text
    # the second run loads every engine from the board's engine cache
    again = run_board_check(bundle, tmp_path / "out2", board=board, layer=layer, cache=cache, iterations=5,
                            tegrastats=None, mode="MAXN")
    assert layer.builds == 4 and {e["cache"] for e in again["engines"]} == {"hit"}


def test_board_check_without_tensorrt_reports_what_it_can(bundle, tmp_path, capsys):
    rc = main(["board-check", str(bundle), "--target", NX, "--tensorrt", "10.3", "--out", str(tmp_path / "o"),
               "--no-tegrastats", "--json"])
    out = capsys.readouterr().out
    assert rc == 3  # as `jetforge build BUNDLE` without TensorRT
    report = json.loads(out)
    assert report["status"] == "tensorrt-missing" and report["samples"]["count"] == 4
    assert all(not e["built"] and e["latency"]["estimated_ms"] > 0 for e in report["engines"])
    assert (tmp_path / "o" / "board-check.txt").read_text().count("not built") == 4
