"""Does distillation recover a 50%-pruned model better than plain fine-tuning?  Sweep on validation, compare on test.

Setup (Fashion-MNIST; the 60k training images are split once, fixed seed, class-balanced):

* **validation split**: ``--val-size`` images carved out of the *training* set; used for every choice below,
  never trained on (not by the teacher either);
* **train pool**: the rest (55k by default); the teacher trains on it (``--teacher-epochs``, trained once and
  cached under ``--cache``), the students fine-tune on a fixed class-balanced subset of it (``--train-limit``);
* **test set**: the 10k official test images, touched only by the final comparison.

Teacher: ``fashion_cnn`` width 0.5.  Student: the teacher pruned to 50 % of its channels with
``jetforge.compress.prune`` (L1, uniform, round_to 4) -- the same pruned start for every run.  Every run fine-tunes
that start for ``--epochs`` epochs with the same optimizer and schedule (SGD Nesterov, lr ``--lr``, warm-up 0.2
epoch, cosine), only the loss differs:

* plain: cross-entropy;
* distillation: ``(1 - alpha) * CE + alpha * KL(T) * T^2`` (+ ``fw * MSE(1x1 adapter(student block), teacher
  block)`` for logit+feature).

1. Sweep (validation split, ``--sweep-seeds`` seeds each): plain; logit-only over T in {2, 4} x alpha in
   {0.5, 0.7, 0.9}; logit+feature with feature weight in ``--feature-weights`` at the best logit-only (T, alpha);
   and the previous recipe default (T=4, alpha=0.5, feature weight 1.0) as a reference.  The distillation setting
   with the highest mean validation accuracy is chosen.
2. Final (test set, ``--seeds``): plain vs the chosen setting, same pruned start, same epochs, same optimizer;
   accuracy after the last epoch (no best-epoch picking), mean +- sample std, min..max.

Run: python benchmarks/distillation/distill_recovery.py   -> benchmarks/distillation/results/<device>_<date>_recovery.json
     (2 CPU cores: ~5 min once the teacher is cached -- 40 fine-tuning runs on a 6k-image subset of the pool, which
     is why the defaults use a subset; the teacher, 55k images x 15 epochs, is trained once on the first run and
     cached under runs/, which takes far longer on 2 cores: the committed one was trained on an H200 with
     ``--device cuda``, same script, same key.)
     python benchmarks/distillation/distill_recovery.py --device cuda --train-limit 0 --sweep-seeds 2 --seeds 3   (whole pool)
"""

import argparse
import copy
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OLD_DEFAULT = {"temperature": 4.0, "alpha": 0.5, "feature_weight": 1.0}


def stats(values):
    v = [float(x) for x in values]
    return {"values": [round(x, 4) for x in v], "mean": round(statistics.mean(v), 4),
            "std": round(statistics.stdev(v), 4) if len(v) > 1 else 0.0,
            "min": round(min(v), 4), "max": round(max(v), 4)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--val-size", type=int, default=5000, help="validation images carved from the training set")
    ap.add_argument("--train-limit", type=int, default=6000,
                    help="fine-tuning subset of the train pool (class-balanced, fixed); 0 = the whole pool")
    ap.add_argument("--epochs", type=int, default=2, help="fine-tuning epochs, every run")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--teacher-epochs", type=int, default=15)
    ap.add_argument("--teacher-lr", type=float, default=0.05)
    ap.add_argument("--teacher-limit", type=int, default=0, help="teacher training subset of the pool; 0 = all")
    ap.add_argument("--sweep-seeds", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=5, help="seeds of the final test comparison")
    ap.add_argument("--temperatures", default="2,4")
    ap.add_argument("--alphas", default="0.5,0.7,0.9")
    ap.add_argument("--feature-weights", default="0.1,1.0")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=str(ROOT / "runs" / "distill_recovery"), help="teacher cache folder")
    ap.add_argument("--out", default=str(result_path(__file__, "recovery")),
                    help="result JSON (default results/<device>_<date>_recovery.json)")
    args = ap.parse_args()

    import torch

    from jetforge.assets import asset_path
    from jetforge.compress.data import ArrayDataset, load_fashion_mnist, subset_indices
    from jetforge.compress.distill import DistillConfig, FeaturePair, LossConfig, distill
    from jetforge.compress.prune import prune
    from jetforge.compress.train import TrainConfig, build_model
    from jetforge.compress.train.loop import evaluate_accuracy, save_checkpoint
    from jetforge.compress.train.recipe import ModelConfig

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    t_all = time.perf_counter()
    root = asset_path("fashion_mnist", "train-images-idx3-ubyte.gz").parent
    images, labels = load_fashion_mnist(root, "train")
    test_images, test_labels = load_fashion_mnist(root, "test")
    # the validation split: class-balanced, fixed seed, disjoint from everything trained on
    val_ix = subset_indices(len(labels), args.val_size, seed=1234, stratify=labels)
    pool_ix = np.setdiff1d(np.arange(len(labels)), val_ix)
    assert not np.intersect1d(val_ix, pool_ix).size
    limit = args.train_limit if args.train_limit and args.train_limit < len(pool_ix) else None
    ft_ix = pool_ix[subset_indices(len(pool_ix), limit, seed=0, stratify=labels[pool_ix])]
    t_ix = pool_ix
    if args.teacher_limit and args.teacher_limit < len(pool_ix):
        t_ix = pool_ix[subset_indices(len(pool_ix), args.teacher_limit, seed=1, stratify=labels[pool_ix])]
    val = ArrayDataset(images[val_ix], labels[val_ix])
    test = ArrayDataset(test_images, test_labels)

    def train_set(ix, seed):  # a fresh dataset per run: the flip generator is seeded, runs do not share state
        return ArrayDataset(images[ix], labels[ix], augment=True, seed=seed)

    def tc(epochs, lr, seed, warmup):
        return TrainConfig(epochs=epochs, lr=lr, batch_size=128, warmup_epochs=warmup, seed=seed, device=args.device,
                           threads=args.threads, progress=False)

    work = Path(tempfile.mkdtemp(prefix="jf_distill_recovery_"))
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    if device == "auto":
        device = "cpu"

    # ---- teacher: trained once on the train pool, cached
    cache = Path(args.cache)
    key = "teacher_fashion_cnn_w0.5_n%d_val%d_e%d_lr%g.pt" % (len(t_ix), args.val_size, args.teacher_epochs,
                                                                  args.teacher_lr)
    teacher = build_model("fashion_cnn", 0.5)
    t0 = time.perf_counter()
    cached = (cache / key).is_file()
    if cached:
        teacher.load_state_dict(torch.load(str(cache / key), map_location="cpu", weights_only=True))
        print("teacher: cached %s" % (cache / key), flush=True)
    else:
        print("teacher: training fashion_cnn w0.5 on %d images, %d epochs" % (len(t_ix), args.teacher_epochs),
              flush=True)
        r = distill(DistillConfig(name="teacher", out_dir=str(work / "teacher"), model=ModelConfig(width=0.5),
                                  train=tc(args.teacher_epochs, args.teacher_lr, 0, 0.3), export_onnx=False,
                                  resume=False), train_set=train_set(t_ix, 0), val_set=val)
        teacher = r.student
        save_checkpoint(cache / key, {k: v.cpu() for k, v in teacher.state_dict().items()})  # atomic
    teacher = teacher.to("cpu").eval()
    teacher_s = time.perf_counter() - t0
    t_val = evaluate_accuracy(teacher, val, 512, "cpu")["accuracy"]
    t_test = evaluate_accuracy(teacher, test, 512, "cpu")["accuracy"]
    pruned0 = prune(copy.deepcopy(teacher), torch.zeros(1, 1, 28, 28), ratio=0.5, importance="l1", round_to=4).model
    pruned0.eval()
    p_val = evaluate_accuracy(pruned0, val, 512, "cpu")["accuracy"]
    p_test = evaluate_accuracy(pruned0, test, 512, "cpu")["accuracy"]
    print("teacher val %.4f test %.4f; pruned start val %.4f test %.4f; fine-tuning on %d images, %d epochs"
          % (t_val, t_test, p_val, p_test, len(ft_ix), args.epochs), flush=True)

    def run(setting, seed, eval_set, tag):
        cfg = DistillConfig(name=tag, out_dir=str(work / ("%s_s%d" % (tag, seed))),
                            train=tc(args.epochs, args.lr, seed, 0.2), export_onnx=False, resume=False)
        if setting is not None:
            a = setting["alpha"]
            cfg.loss = LossConfig(task_weight=1.0 - a, kd_weight=a, temperature=setting["temperature"],
                                  features=[FeaturePair("block", "block", setting["feature_weight"])]
                                  if setting["feature_weight"] else [])
        t1 = time.perf_counter()
        r = distill(cfg, student=copy.deepcopy(pruned0), teacher=copy.deepcopy(teacher) if setting else None,
                    train_set=train_set(ft_ix, seed), val_set=eval_set)
        h = r.train.history
        rec = {"seed": seed, "accuracy": round(r.train.final_accuracy, 4),
               "per_epoch": [round(e["val_accuracy"], 4) for e in h],
               "train_losses_last_epoch": {k[6:]: round(v, 4) for k, v in h[-1].items()
                                           if k.startswith("train_") and k != "train_samples"},
               "seconds": round(time.perf_counter() - t1, 1)}
        print("   %-34s seed %d: %.4f  per epoch %s  (%.0f s)" % (tag, seed, rec["accuracy"], rec["per_epoch"],
                                                                 rec["seconds"]), flush=True)
        return rec

    def name(s):
        if s is None:
            return "plain"
        return "T%g_a%g%s" % (s["temperature"], s["alpha"], "_fw%g" % s["feature_weight"] if s["feature_weight"]
                              else "")

    sweep = {}

    def evaluate_setting(s):
        n = name(s)
        if n not in sweep:
            recs = [run(s, seed, val, "val_" + n) for seed in range(args.sweep_seeds)]
            sweep[n] = {"setting": s, "kind": "plain" if s is None else ("logit+feature" if s["feature_weight"]
                                                                          else "logit"),
                        "val_accuracy": stats([r["accuracy"] for r in recs]), "runs": recs}
        return sweep[n]["val_accuracy"]["mean"]

    print("== sweep on the validation split (%d images), %d seed(s) each" % (len(val_ix), args.sweep_seeds),
          flush=True)
    temps = [float(t) for t in args.temperatures.split(",")]
    alphas = [float(a) for a in args.alphas.split(",")]
    fws = [float(w) for w in args.feature_weights.split(",") if w.strip()]
    evaluate_setting(None)
    logit = [{"temperature": t, "alpha": a, "feature_weight": 0.0} for t in temps for a in alphas]
    for s in logit:
        evaluate_setting(s)
    best_logit = max(logit, key=lambda s: sweep[name(s)]["val_accuracy"]["mean"])
    for w in fws:
        evaluate_setting(dict(best_logit, feature_weight=w))
    evaluate_setting(dict(OLD_DEFAULT))
    distill_names = [n for n in sweep if n != "plain"]
    chosen_name = max(distill_names, key=lambda n: sweep[n]["val_accuracy"]["mean"])
    chosen = sweep[chosen_name]["setting"]
    print("chosen on validation: %s (%.4f; plain %.4f)" % (chosen_name, sweep[chosen_name]["val_accuracy"]["mean"],
                                                          sweep["plain"]["val_accuracy"]["mean"]), flush=True)

    print("== final on the test set (10 000 images), %d seed(s)" % args.seeds, flush=True)
    final = {}
    for kind, s in (("plain", None), ("distill", chosen)):
        recs = [run(s, 100 + seed, test, "test_" + name(s)) for seed in range(args.seeds)]
        final[kind] = {"setting": name(s), "test_accuracy": stats([r["accuracy"] for r in recs]), "runs": recs}
    diffs = [d["accuracy"] - p["accuracy"] for p, d in zip(final["plain"]["runs"], final["distill"]["runs"])]
    final["distill_minus_plain_points"] = stats([100 * d for d in diffs])
    final["distill_wins_per_seed"] = "%d/%d" % (sum(d > 0 for d in diffs), len(diffs))
    final["goal_distillation_recovers_more"] = bool(final["distill"]["test_accuracy"]["mean"]
                                                    > final["plain"]["test_accuracy"]["mean"])

    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "device": device,
                    "threads": args.threads, "cpu": platform.processor() or platform.machine(),
                    "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None},
        "args": vars(args),
        "data": {"dataset": "Fashion-MNIST", "validation_from_train": int(len(val_ix)), "train_pool": int(len(pool_ix)),
                 "finetune_subset": int(len(ft_ix)), "test": int(len(test_labels)), "augment": "random h-flip"},
        "teacher": {"model": "fashion_cnn width 0.5", "params": int(sum(p.numel() for p in teacher.parameters())),
                    "epochs": args.teacher_epochs, "lr": args.teacher_lr, "trained_on": int(len(t_ix)),
                    "cached": cached, "seconds": round(teacher_s, 1), "val_accuracy": round(t_val, 4),
                    "test_accuracy": round(t_test, 4)},
        "student": {"pruning": "jetforge.compress.prune ratio 0.5 (L1, uniform, round_to 4) of the teacher",
                    "params": int(sum(p.numel() for p in pruned0.parameters())),
                    "val_accuracy_right_after_pruning": round(p_val, 4),
                    "test_accuracy_right_after_pruning": round(p_test, 4)},
        "finetune": {"epochs": args.epochs, "optimizer": "sgd nesterov momentum 0.9, wd 5e-4", "lr": args.lr,
                     "batch_size": 128, "warmup_epochs": 0.2, "schedule": "cosine to 0.01 lr", "grad_clip": 5.0},
        "loss": "plain: CE; distillation: (1-alpha) CE + alpha KL(T) T^2 [+ fw MSE(1x1 adapter(student block), "
                "teacher block)]",
        "sweep": sweep, "chosen": dict(chosen, name=chosen_name), "final": final,
        "seconds_total": round(time.perf_counter() - t_all, 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    return 0


def table(r) -> str:
    lines = ["", "Teacher %s: val %.4f, test %.4f.  50%%-pruned student (%d params): test %.4f right after pruning."
             % (r["teacher"]["model"], r["teacher"]["val_accuracy"], r["teacher"]["test_accuracy"],
                r["student"]["params"], r["student"]["test_accuracy_right_after_pruning"]),
             "Fine-tuning: %d images, %d epochs, lr %g, same for every run." % (
                 r["data"]["finetune_subset"], r["finetune"]["epochs"], r["finetune"]["lr"]),
             "", "Sweep (validation split from the training set, %d images)" % r["data"]["validation_from_train"],
             "%-22s %-14s %8s %7s" % ("setting", "kind", "val acc", "std")]
    for n, s in sorted(r["sweep"].items(), key=lambda kv: -kv[1]["val_accuracy"]["mean"]):
        lines.append("%-22s %-14s %8.4f %7.4f%s" % (n, s["kind"], s["val_accuracy"]["mean"], s["val_accuracy"]["std"],
                                                    "   <- chosen" if n == r["chosen"]["name"] else ""))
    f = r["final"]
    lines += ["", "Final (10 000 test images, %d seeds, accuracy after the last epoch)" % len(f["plain"]["runs"]),
              "%-22s %8s %7s %15s" % ("", "mean", "std", "min..max")]
    for kind in ("plain", "distill"):
        s = f[kind]["test_accuracy"]
        lines.append("%-22s %8.4f %7.4f %7.4f..%.4f" % ("%s (%s)" % (kind, f[kind]["setting"]) if kind == "distill"
                                                        else kind, s["mean"], s["std"], s["min"], s["max"]))
    d = f["distill_minus_plain_points"]
    lines.append("distill - plain: %+.2f +- %.2f points (wins %s seeds); goal met: %s"
                 % (d["mean"], d["std"], f["distill_wins_per_seed"], f["goal_distillation_recovers_more"]))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
