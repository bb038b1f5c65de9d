#!/usr/bin/env bash
# 2-GPU DistributedDataParallel check of `jetforge distill` (torchrun), one short epoch per step, Fashion-MNIST.
#
#   bash benchmarks/distillation/ddp_check.sh DATA_DIR [NPROC]
#
# DATA_DIR holds the four Fashion-MNIST files (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
# t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; `jetforge assets path fashion_mnist ...` shows them).
# No network is needed. Results (logs, metrics.jsonl, result.json) go to $OUT (or /tmp/jf_ddp); the study's
# committed log is the three steps' output (results/nvidia-h200-x2_2026-11-30_ddp.log).
#   1. teacher: plain training of fashion_cnn, 1 epoch, DDP on NPROC GPUs
#   2. student: the teacher pruned 50 % (jetforge.compress.prune), distilled from the FP16 teacher, 1 epoch, DDP
#   3. resume: step 2 continued to epoch 2 from its last.pt (must report resumed_from_epoch 1)
# Every rank prints "[rank R/W] device=cuda:R samples=... steps=... mean_train_loss=...", rank 0 the final JSON.
set -euo pipefail
DATA="${1:?usage: ddp_check.sh DATA_DIR [NPROC]}"
NPROC="${2:-2}"
RUN="${OUT:-/tmp/jf_ddp}"
HERE="$(cd "$(dirname "$0")/../.." && pwd)"   # the checkout's root
mkdir -p "$RUN"
export PYTHONPATH="$HERE/src"   # jetforge from the checkout, as installed (nothing built)
cd /tmp
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'gpus', torch.cuda.device_count())"
RECIPE="$HERE/recipes/distill_fashion_mnist.yaml"
COMMON=(--data "$DATA" --set train.epochs=1 --set train.progress=false --set export_onnx=false --set resume=true)

echo "== 1. teacher, plain training, DDP x$NPROC"
python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC" -m jetforge.compress.distill "$RECIPE" \
  "${COMMON[@]}" --set teacher=null --set model.checkpoint=null --set model.prune_ratio=null \
  --set loss.features=[] --set out_dir="$RUN/teacher" 2>&1 | tee "$RUN/teacher.log"

echo "== 2. 50%-pruned student distilled from the FP16 teacher, DDP x$NPROC"
STUDENT=(--set model.checkpoint="$RUN/teacher/best.pt" --set teacher.checkpoint="$RUN/teacher/best.pt"
         --set teacher_fp16=true --set out_dir="$RUN/student")
python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC" -m jetforge.compress.distill "$RECIPE" \
  "${COMMON[@]}" "${STUDENT[@]}" 2>&1 | tee "$RUN/student.log"

echo "== 3. resume the student run to epoch 2"
python3 -m torch.distributed.run --standalone --nproc_per_node="$NPROC" -m jetforge.compress.distill "$RECIPE" \
  "${COMMON[@]}" "${STUDENT[@]}" --set train.epochs=2 2>&1 | tee "$RUN/resume.log"

echo "== summary"
grep -h "^\[rank" "$RUN"/teacher.log "$RUN"/student.log "$RUN"/resume.log
cat "$RUN/student/metrics.jsonl"
python3 - "$RUN" <<'PY'
import json, sys
run = sys.argv[1]
for name in ("teacher", "student"):
    r = json.load(open("%s/%s/result.json" % (run, name)))
    print("%-8s world_size=%s final_accuracy=%.4f best=%.4f resumed_from_epoch=%s epochs=%s" % (
        name, r["world_size"], r["final_accuracy"], r["best_accuracy"], r["resumed_from_epoch"], r["epochs"]))
PY
