#!/usr/bin/env bash
# One device call: the GPU-marked tests (stand-in TensorRT on real CUDA buffers), then the estimator's
# never-fitted models measured on this GPU. Kept in the repo so the call is repeatable:
#   run(command="bash benchmarks/common/device_checks.sh", carry=["build/gpu_test_wheels", "build/gpu_test_cache"])
# (build/gpu_test_wheels: pytest and the test-only wheels, made by `pip download` here; the device has torch.
# An asset cache carried as build/gpu_test_cache (assets/ssdlite_mobilenet_v2_person and assets/opencv_samples copied
# from the asset cache with their .verified.json; 21 MB) or build/yolov8_carry/cache is used where present: the tiles
# test needs the person detector and vtest.avi.)
# Writes into $OUT: gpu_tests.log, estimate.log, estimate_h200_unseen_measured.json.
set -u
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/device_checks}"; mkdir -p "$OUT"
# the carried pytest only where the device has none: an older pytest on the path breaks the device's own plugins
# (pytest-timeout's float ini option failed pytest 8.3's addini on the H100 image, 2026-12-07)
if ! python3 -c "import pytest" >/dev/null 2>&1; then
  pip install -q --no-deps --target /tmp/site build/gpu_test_wheels/*.whl >"$OUT/pip.log" 2>&1
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
for cache in build/gpu_test_cache build/yolov8_carry/cache; do  # the first carried asset cache found
  if [ -d "$cache/assets" ]; then export JETFORGE_CACHE="$ROOT/$cache" JETFORGE_OFFLINE=1; break; fi
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${TESTS_S:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/board_path \
  tests/runtime/test_cuda_layer.py tests/apps/test_gpu_video.py tests/apps/test_gpu_tiles.py \
  tests/apps/test_gpu_outputs.py 2>&1 | tail -150 | tee "$OUT/gpu_tests.log"
echo "tests rc ${PIPESTATUS[0]}" | tee -a "$OUT/gpu_tests.log"
[ "${SKIP_ESTIMATE:-0}" = 1 ] && exit 0
timeout "${ESTIMATE_S:-330}" python3 benchmarks/estimator/estimate_h200.py --models unseen \
  --budget-s "${ESTIMATE_BUDGET_S:-260}" 2>&1 | tee "$OUT/estimate.log" | tail -40
