"""``benchmarks/gpu_pipeline/pipeline_gpu.py --prep``: the carry folder for the one device call, made here on the CPU.

build/gpu_pipeline/ (ignored by git) gets:
* streams/people720.mp4 - OpenCV's vtest.avi (768x576 walkers) scaled to 1280x720, re-timed to 30 FPS and played
  twice to 900 frames (30 s); H.264 High, libx264 ``veryfast`` CRF 30, GOP 60, 1.8 MB.  One file opened N times:
  a 30-s stream never restarts within a timed point, and the carry stays small (the device call carries 64 MiB).
* the PyNvVideoCodec wheel (cp312; NVDEC through Python), slimmed (:func:`slim_wheel`: 26.9 MB as published, its
  ffmpeg source tarball, samples and benchmarks make most of it), and both models as FP16 state dicts (see
  :func:`save_half_weights`).

The encoder is the ffmpeg binary inside PyPI's imageio-ffmpeg wheel (it has libx264), installed into a throwaway
venv under /tmp (pinned) - never a project dependency - unless ``--ffmpeg`` names one.
"""

import subprocess
import sys
from pathlib import Path
from typing import Optional, Sequence

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


def save_half_weights(folder: Path, models: Sequence[str] = ("classify", "people")) -> None:
    """The models' weights as FP16 state dicts (half the bytes: the device call carries 64 MiB in all) and what
    rebuilds them there: MobileNetV2 (``classify``) from jetforge's registry, the SSDLite port (``people``) with its
    spec and preprocessing read from the frozen graph here.  The device turns them back to FP32 (the rounding is far
    below what a throughput benchmark notices; the accuracy of these models is measured elsewhere in FP32)."""
    import json

    import torch

    from jetforge.assets import asset_path
    from jetforge.compress.models import load_pretrained
    from jetforge.compress.models.ssdlite_mobilenet_v2 import load_from_graphdef
    from jetforge.compress.models.tf_graphdef import load_graphdef
    from jetforge.compress.models.tf_ssd_graph import SSDGraph, read_preprocess, read_spec

    if "classify" in models and not (folder / "mobilenet_v2_fp16.pt").is_file():
        model = load_pretrained("mobilenet_v2", asset_path("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth"))
        torch.save({k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()},
                   str(folder / "mobilenet_v2_fp16.pt"))
    if "people" in models and not (folder / "ssdlite_person_fp16.pt").is_file():
        pb = asset_path("ssdlite_mobilenet_v2_person", "frozen_inference_graph.pb")
        graph = load_graphdef(pb)
        g = SSDGraph(graph)
        spec, pre = read_spec(g), read_preprocess(g)
        model = load_from_graphdef(pb, graph=graph)
        torch.save({k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()},
                   str(folder / "ssdlite_person_fp16.pt"))
        meta = {"spec": spec.to_dict(), "preprocess": pre.to_dict(), "image_size": 300,
                "anchors_per_layer": [len(layer.scales) for layer in spec.layers]}
        (folder / "ssdlite_person.json").write_text(json.dumps(meta))


SLIM_DROP = ("samples/", "benchmarks/", ".data/")  # what the package never imports: sources, examples, scripts


def slim_wheel(wheel: Path, out: Path) -> None:
    """``wheel`` without the members under :data:`SLIM_DROP` (its RECORD rewritten to match), written to ``out``:
    the carry, working tree included, travels 64 MiB at most.  The package's modules and shared libraries are
    copied byte for byte."""
    import zipfile

    tmp = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(str(wheel)) as src, zipfile.ZipFile(str(tmp), "w", zipfile.ZIP_DEFLATED) as dst:
        kept = [i for i in src.infolist() if not any(d in i.filename for d in SLIM_DROP)]
        names = {i.filename for i in kept}
        for info in kept:
            data = src.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode("utf-8").splitlines()
                data = ("\n".join(x for x in lines if x.split(",")[0] in names) + "\n").encode("utf-8")
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    tmp.replace(out)


def prepare(carry: Path, ffmpeg: Optional[str], wheel_dir: str) -> None:
    from jetforge.assets import asset_path

    (carry / "streams").mkdir(parents=True, exist_ok=True)
    (carry / "assets").mkdir(parents=True, exist_ok=True)
    exe = find_ffmpeg(ffmpeg)
    make_stream(exe, asset_path("opencv_samples", "vtest.avi"), carry / "streams" / "people720.mp4", loops=1)
    for stale in ("bbb720.mp4",):  # one stream file is opened N times: the carry stays small
        if (carry / "streams" / stale).is_file():
            (carry / "streams" / stale).unlink()
    for stale in ("mobilenet_v2-b0353104.pth", "frozen_inference_graph.pb"):
        if (carry / "assets" / stale).is_file():
            (carry / "assets" / stale).unlink()
    save_half_weights(carry / "assets")
    wheel = Path(wheel_dir) / WHEEL
    marker = carry / (WHEEL + ".slim")
    if not (carry / WHEEL).is_file() or not marker.is_file():  # a full wheel from an older --prep is slimmed too
        if not wheel.is_file():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp", "--platform",
                            "manylinux_2_28_x86_64", "-d", str(wheel.parent), "--", "pynvvideocodec==2.2.4"],
                           check=True)
        slim_wheel(wheel, carry / WHEEL)
        marker.write_text("members under %s left out\n" % ", ".join(SLIM_DROP))
    total = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
    log("carry folder %s: %.1f MiB" % (carry, total / 2 ** 20))


__all__ = ["find_ffmpeg", "make_stream", "prepare", "slim_wheel"]
