#!/usr/bin/env bash
# Pipeline FPS on a CUDA GPU: MobileNetV2 (real ImageNet weights) as a TorchScript file run by jetforge's
# PyTorch session (CUDA graph, FP32) inside the same threaded pipeline as the CPU run.
#   JETFORGE_CACHE=<folder with assets opencv_samples/vtest.avi and mobilenet_v2_imagenet> bash benchmarks/gpu_pipeline/pipeline_gpu.sh
# Writes <device>_<date>_cpu-path.json into $OUT when set, else into benchmarks/gpu_pipeline/results/.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/../.." && pwd)"   # the checkout's root
export PYTHONPATH="$HERE/src"                  # jetforge from the checkout, as installed (nothing built)
NAME="$(cd "$HERE" && python3 -c 'from benchmarks.common.paths import result_name; print(result_name("cpu-path", gpu=True))')"
cd /tmp
python3 -P - <<'PY'
import shutil, torch
from jetforge.assets import asset_path
from jetforge.compress.models import load_pretrained
from jetforge.runtime.sidecar import read_sidecar, write_sidecar, produced_by
from jetforge.cli.cmd_demo import ensure_default_model
onnx_path = ensure_default_model()[0]
side = read_sidecar(onnx_path)
model = load_pretrained("mobilenet_v2", asset_path("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth")).eval()
ts = torch.jit.trace(model, torch.zeros(1, 3, 224, 224))
torch.jit.save(ts, "/tmp/mnv2.pt")
side.produced_by = produced_by("torchscript for the GPU pipeline benchmark")
write_sidecar("/tmp/mnv2.pt", side)
print("torchscript ready", torch.cuda.get_device_name(0))
PY
python3 -P "$HERE/benchmarks/gpu_pipeline/pipeline_fps.py" --model /tmp/mnv2.pt --tag gpu_h200 --frames 300 \
  --out "${OUT:-$HERE/benchmarks/gpu_pipeline/results}/$NAME"
