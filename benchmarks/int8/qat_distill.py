"""QAT and distillation on real labelled data (Fashion-MNIST), every INT8 number from a Q/DQ ONNX.

INT8 accuracies are *simulated INT8 arithmetic (TensorRT rules); TensorRT not run* (the same on any CPU,
:mod:`jetforge.calibrate.int8sim.simulate`); beside each, ``*_ort_kernels`` is the same Q/DQ ONNX through ONNX Runtime's
own INT8 kernels (QLinearConv etc.) on this CPU, whose values depend on the CPU (``machine.cpu_flags``).

For two models -- ``fashion_cnn`` (ResNet-style CNN, width 0.5) and ``fashion_mobilenet_v2`` (MobileNetV2
width 0.35, 1-channel stride-1 stem) -- trained here from scratch on a fixed class-balanced subset of the
60k training images, evaluated on all 10 000 test images:

* FP32: the trained model exported to ONNX, run in ONNX Runtime;
* PTQ INT8: ``prepare_qat`` (BN folded, TensorRT placement) + ``calibrate_qat`` (512 training images,
  jetforge.calibrate.algorithms: percentile 99.99 = the headline, entropy and max also reported) -> Q/DQ ONNX
  -> simulated TensorRT INT8 (and ORT's INT8 kernels beside), no training;
* QAT INT8: the same start, fine-tuned with quantization in the loop (``jetforge.compress.qat.qat``) -> Q/DQ
  ONNX -> simulated TensorRT INT8.  Goal: within 0.3 points of FP32.  The DLA translation of that model is checked too
  (cache scales == trained scales, names == plain-ONNX tensors).

Pruning: the trained CNN pruned to 50 % of its channels with ``jetforge.compress.prune`` (L1, uniform), then
fine-tuned for the same epochs and learning rate (a) plainly (cross-entropy) and (b) with distillation from the
unpruned model (KL at T=4 mixed 0.5/0.5 with cross-entropy + one feature pair).  Goal: (b) > (a).

Run: python benchmarks/int8/qat_distill.py   (~25 min on 2 CPU cores) -> benchmarks/int8/results/<device>_<date>_qat-distill.json
(``--skip-prune`` re-measures the INT8 part only and keeps the pruning block of the existing JSON, which has no
INT8 number.)
"""

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train-limit", type=int, default=20000)
    ap.add_argument("--mbv2-train-limit", type=int, default=8000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--qat-epochs", type=int, default=1)
    ap.add_argument("--prune-epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(result_path(__file__, "qat-distill")),
                    help="result JSON (default results/<device>_<date>_qat-distill.json)")
    ap.add_argument("--skip-prune", action="store_true",
                    help="keep the pruning/distillation block of the existing --out (it has no INT8 number)")
    args = ap.parse_args()

    import onnx
    import torch

    from jetforge.assets import asset_path
    from jetforge.calibrate.cache.format import CalibrationCache
    from jetforge.calibrate.qdq.translate import tensor_names
    from jetforge.compress.data import CLASSES, fashion_mnist, normalize
    from jetforge.compress.distill import DistillConfig, FeaturePair, distill
    from jetforge.compress.export import export_onnx
    from jetforge.compress.prune import prune
    from jetforge.compress.qat import (QatConfig, calibrate_qat, export_qdq_onnx, onnx_accuracy, ort_kernels,
                                       prepare_qat, qat, qdq_for_ort)
    from jetforge.compress.train import TrainConfig, build_model
    from jetforge.compress.train.recipe import DataConfig, calibration_batches
    from jetforge.calibrate.int8sim.simulate import SIMULATED_LABEL
    from jetforge.runtime.cpu_features import cpu_features, ort_kernel_label

    torch.set_num_threads(args.threads)
    root = str(asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent)
    test = fashion_mnist(root, "test")
    xte, yte = normalize(test.images.numpy()), test.labels.numpy()
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": {"python": platform.python_version(), "torch": torch.__version__,
                           "onnxruntime": __import__("onnxruntime").__version__, "threads": args.threads,
                           "cpu": platform.processor() or platform.machine(), "cpu_flags": cpu_features().to_dict(),
                           "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
                           "shared": "run with nice -n 10 on a machine shared with other jobs: the accuracies do not "
                                     "depend on the load (seeded training with fixed threads, simulated INT8 "
                                     "arithmetic); the seconds do, and are only indicative"},
               "evaluators": {"int8": SIMULATED_LABEL, "ort_int8_kernels": ort_kernel_label()},
               "data": {"dataset": "Fashion-MNIST", "test_images": int(len(yte))}, "models": {}}
    work = Path(tempfile.mkdtemp(prefix="jf_qat_distill_"))
    t_all = time.perf_counter()

    def tc(epochs, lr, **kw):
        return TrainConfig(epochs=epochs, lr=lr, batch_size=128, threads=args.threads, progress=False, **kw)

    def run_model(arch, width, limit, lr):
        t0 = time.perf_counter()
        data = DataConfig(root=root, train_limit=limit, calib_samples=512)
        print("== %s (width %s): training FP32 on %d images, %d epochs" % (arch, width, limit, args.epochs), flush=True)
        fp = distill(DistillConfig(name=arch, out_dir=str(work / arch), data=data,
                                   model=__import__("jetforge.compress.train.recipe", fromlist=["x"]).ModelConfig(
                                       arch=arch, width=width),
                                   train=tc(args.epochs, lr, warmup_epochs=0.3), export_onnx=False), val_set=test)
        model = fp.student.eval()
        fp32_path = work / arch / "fp32.onnx"
        export_onnx(model, fp32_path, (1, 1, 28, 28), labels=CLASSES)
        fp32 = onnx_accuracy(str(fp32_path), xte, yte, arithmetic="float")
        train_s = time.perf_counter() - t0
        print("   FP32 ONNX %.4f (%.0f s)" % (fp32, train_s), flush=True)
        # PTQ: calibrated fake-quant model, no training, exported as Q/DQ and run in ORT, per algorithm;
        # the headline PTQ is percentile 99.99, the calibration QAT starts from
        ptq_by, ptq_kernels_by = {}, {}
        for method in ("percentile", "entropy", "max"):
            q = prepare_qat(model)
            calibrate_qat(q, calibration_batches(data), method)
            ptq_path = work / arch / ("ptq_%s.qdq.onnx" % method)
            export_qdq_onnx(q, ptq_path, (1, 1, 28, 28), labels=CLASSES)
            ptq_model = qdq_for_ort(onnx.load(str(ptq_path)))
            ptq_by[method] = round(onnx_accuracy(ptq_model, xte, yte), 4)  # simulated TensorRT arithmetic
            ptq_kernels_by[method] = round(onnx_accuracy(ptq_model, xte, yte, arithmetic="ort-int8"), 4)
            if method == "percentile":
                ptq, ptq_kernels = ptq_by[method], ort_kernels(ptq_model, work)
        print("   PTQ INT8 ONNX %s (ORT kernels %s)" % (ptq_by, ptq_kernels_by), flush=True)
        t1 = time.perf_counter()
        qres = qat(QatConfig(name=arch + "_qat", out_dir=str(work / (arch + "_qat")), data=data,
                             train=tc(args.qat_epochs, lr * 0.04, warmup_epochs=0.0, weight_decay=1e-4)),
                   model=model, val_set=test)
        qat_s = time.perf_counter() - t1
        cache = CalibrationCache.read(qres.files["cache"])
        plain = onnx.load(qres.files["plain_onnx"])
        val = cache.validate_against(tensor_names(plain))
        from jetforge.compress.qat.export import activation_scales

        trained = activation_scales(onnx.load(qres.files["qdq_onnx"]))
        equal = all(cache.scales[t] == np.float32(s) for t, s in trained.items())
        print("   QAT INT8 ONNX %.4f (%.0f s); cache %d tensors, trained scales equal: %s" % (
            qres.onnx_int8_accuracy, qat_s, len(cache), equal), flush=True)
        return model, {
            "arch": arch, "width": width, "train_images": limit, "epochs": args.epochs, "qat_epochs": args.qat_epochs,
            "params": int(sum(p.numel() for p in model.parameters())),
            "fp32_onnx_accuracy": round(fp32, 4), "ptq_int8_onnx_accuracy": ptq,
            "qat_int8_onnx_accuracy": round(qres.onnx_int8_accuracy, 4),
            "qat_fake_quant_torch_accuracy": round(qres.qat_accuracy, 4),
            "ptq_int8_onnx_accuracy_ort_kernels": ptq_kernels_by["percentile"],
            "qat_int8_onnx_accuracy_ort_kernels": round(qres.ort_kernels_accuracy, 4),
            "ptq_int8_onnx_accuracy_by_calibration_ort_kernels": ptq_kernels_by,
            "ptq_drop_points": round(100 * (fp32 - ptq), 2),
            "qat_drop_points": round(100 * (fp32 - qres.onnx_int8_accuracy), 2),
            "goal_qat_within_0.3_points": bool(100 * (fp32 - qres.onnx_int8_accuracy) <= 0.3),
            "ort_int8_kernels": {k: v for k, v in qres.ort_kernels.items() if k.startswith(("QLinear", "QGemm"))},
            "ptq_ort_int8_kernels": {k: v for k, v in ptq_kernels.items() if k.startswith(("QLinear", "QGemm"))},
            "ptq_int8_onnx_accuracy_by_calibration": ptq_by,
            "dla_cache": {"tensors": len(cache), "header": cache.header, "names_in_plain_onnx": val.ok,
                          "trained_scales_equal": bool(equal),
                          "fp16_layers": qres.translation.get("fp16_layers")},
            "seconds": {"fp32_training": round(train_s, 1), "qat": round(qat_s, 1)}}

    cnn, results["models"]["fashion_cnn"] = run_model("fashion_cnn", 0.5, args.train_limit, 0.05)
    _, results["models"]["fashion_mobilenet_v2"] = run_model("fashion_mobilenet_v2", 0.35, args.mbv2_train_limit, 0.05)

    if args.skip_prune:
        old = json.loads(Path(args.out).read_text())
        results["pruned_50"] = dict(old["pruned_50"])
        results["pruned_50"]["note"] = "not re-run (no INT8 number): from the run of %s" % old.get("date")
        return _finish(results, args, t_all)
    # ---- pruning: 50 % channels, plain fine-tuning vs distillation, same epochs and lr
    print("== pruned fashion_cnn (50 %% channels): %d epochs each" % args.prune_epochs, flush=True)
    data = DataConfig(root=root, train_limit=args.train_limit)
    pr = prune(__import__("copy").deepcopy(cnn), torch.zeros(1, 1, 28, 28), ratio=0.5, importance="l1", round_to=4)
    pruned0 = pr.model.eval()
    ex = __import__("copy").deepcopy
    p_path = work / "pruned0.onnx"
    export_onnx(pruned0, p_path, (1, 1, 28, 28), labels=CLASSES)
    after_prune = onnx_accuracy(str(p_path), xte, yte, arithmetic="float")
    runs = {}
    for kind in ("finetune", "distill"):
        cfg = DistillConfig(name="pruned_" + kind, out_dir=str(work / ("pruned_" + kind)), data=data,
                            train=tc(args.prune_epochs, 0.02, warmup_epochs=0.2), export_onnx=False)
        if kind == "distill":
            cfg.loss.features = [FeaturePair("block", "block", 1.0)]
        t0 = time.perf_counter()
        r = distill(cfg, student=ex(pruned0), teacher=ex(cnn) if kind == "distill" else None, val_set=test)
        path = work / ("pruned_%s.onnx" % kind)
        export_onnx(r.student.eval(), path, (1, 1, 28, 28), labels=CLASSES)
        runs[kind] = {"accuracy": round(onnx_accuracy(str(path), xte, yte, arithmetic="float"), 4),
                      "per_epoch_val_accuracy": [round(h["val_accuracy"], 4) for h in r.train.history],
                      "seconds": round(time.perf_counter() - t0, 1)}
        print("   %s: %.4f" % (kind, runs[kind]["accuracy"]), flush=True)
    base = results["models"]["fashion_cnn"]["fp32_onnx_accuracy"]
    results["pruned_50"] = {
        "model": "fashion_cnn width 0.5, jetforge.compress.prune ratio 0.5 (L1, uniform, round_to 4)",
        "params_before": int(sum(p.numel() for p in cnn.parameters())),
        "params_after": int(sum(p.numel() for p in pruned0.parameters())),
        "unpruned_accuracy": base, "accuracy_right_after_pruning": round(after_prune, 4),
        "plain_finetune": runs["finetune"], "distillation": runs["distill"],
        "distill_minus_finetune_points": round(100 * (runs["distill"]["accuracy"] - runs["finetune"]["accuracy"]), 2),
        "goal_distillation_recovers_more": bool(runs["distill"]["accuracy"] > runs["finetune"]["accuracy"]),
        "epochs": args.prune_epochs, "lr": 0.02,
        "distillation_loss": "0.5 CE + 0.5 KL(T=4)*T^2 + MSE(1x1 adapter(student block), teacher block)"}
    return _finish(results, args, t_all)


def _finish(results, args, t_all) -> int:
    results["seconds_total"] = round(time.perf_counter() - t_all, 1)
    results["machine"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    return 0


def table(r) -> str:
    lines = ["", "Fashion-MNIST, 10 000 test images; INT8 = %s;" % r.get("evaluators", {}).get("int8", "-"),
             "right: %s" % r.get("evaluators", {}).get("ort_int8_kernels", "-"),
             "%-22s %8s %8s %8s %9s %9s | %8s %8s" % ("model", "FP32", "PTQ", "QAT", "PTQ drop", "QAT drop",
                                                   "PTQ ORT", "QAT ORT")]
    for name, m in r["models"].items():
        lines.append("%-22s %8.4f %8.4f %8.4f %8.2fpt %8.2fpt | %8.4f %8.4f" % (
            name, m["fp32_onnx_accuracy"], m["ptq_int8_onnx_accuracy"], m["qat_int8_onnx_accuracy"],
            m["ptq_drop_points"], m["qat_drop_points"], m["ptq_int8_onnx_accuracy_ort_kernels"],
            m["qat_int8_onnx_accuracy_ort_kernels"]))
    p = r["pruned_50"]
    for name, m in r["models"].items():
        lines.append("  %s PTQ by calibration: %s" % (name, m["ptq_int8_onnx_accuracy_by_calibration"]))
    lines += ["", "50%%-pruned fashion_cnn (params %d -> %d): unpruned %.4f, right after pruning %.4f"
              % (p["params_before"], p["params_after"], p["unpruned_accuracy"], p["accuracy_right_after_pruning"]),
              "  plain fine-tuning %d epochs: %.4f;  distillation %d epochs: %.4f  (%+.2f points)"
              % (p["epochs"], p["plain_finetune"]["accuracy"], p["epochs"], p["distillation"]["accuracy"],
                 p["distill_minus_finetune_points"])]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
