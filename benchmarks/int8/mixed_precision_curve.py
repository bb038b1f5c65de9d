"""Mixed precision on real images, chosen on one split and reported on another: MobileNetV2's curves.

The pretrained MobileNetV2 exported by jetforge is calibrated (default algorithm) on the 256 calibration
images/frames of ``int8_accuracy.pools()`` and evaluated on its 288 held-out ones -- as
``jetforge calibrate MODEL --data calib/ --eval held/ --mixed-precision BOUND --mixed-metric METRIC`` does --
for two bounds: 0.98 top-1 agreement on confident samples (the default metric) and 0.85 agreement on all
samples.  The layer choice is made on the selection half of the held-out images and reported on the other
half (:mod:`jetforge.calibrate.mixed`); the INT8 numbers are simulated TensorRT arithmetic.  The held-out
pool is disjoint from the calibration pool by frame, not by content: the run's near-duplicate check says
how many held-out images have a perceptual near-duplicate among the calibration images.

Run:  python benchmarks/int8/mixed_precision_curve.py   (~40 min on a shared 2-core CPU)
-> benchmarks/int8/results/<device>_<date>_mixed-precision-{agreement_confident-0.98,agreement-0.85}.{json,png}
      python benchmarks/int8/mixed_precision_curve.py --quick   (a smoke run: few images, results in /tmp)
"""

import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's root: benchmarks.common
from benchmarks.common.paths import result_path, use_checkout  # noqa: E402

use_checkout()

sys.path.insert(0, str(Path(__file__).resolve().parent))  # int8_accuracy.py, this study's data pools
RUNS = (("agreement_confident", 0.98), ("agreement", 0.85))


def main(argv: Any = None) -> int:
    import argparse
    import logging

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default=",".join("%s=%s" % r for r in RUNS),
                    help="METRIC=BOUND pairs (default: %(default)s)")
    ap.add_argument("--out-dir", default=None, help="folder of the results (default this study's results/)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run of the script: 16 calibration and 32 held-out images, results in /tmp")
    args = ap.parse_args(argv)
    runs = [(m, float(b)) for m, b in (r.split("=") for r in args.runs.split(","))]
    out_dir = Path(args.out_dir) if args.out_dir else (
        Path(tempfile.mkdtemp(prefix="jetforge-mixed-quick-")) if args.quick else result_path(__file__).parent)

    import cv2
    import int8_accuracy
    from jetforge.calibrate.calibrate_model import calibrate, evaluation_summary

    logging.basicConfig(level=logging.INFO, format="%(levelname).1s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="jf-mixed-") as tmp:
        work = Path(tmp)
        calib, held, _ = int8_accuracy.pools()
        if args.quick:
            calib, held = calib[:16], held[:32]
        for name, pool in (("calib", calib), ("held", held)):
            (work / name).mkdir()
            for i, (_, frame) in enumerate(pool):
                cv2.imwrite(str(work / name / ("%03d.png" % i)), frame)
        model = int8_accuracy.export_model("mobilenet_v2", work)
        for metric, bound in runs:
            t0 = time.perf_counter()
            out = work / ("%s_%s" % (metric, bound))
            out.mkdir()
            result = calibrate(model, work / "calib", out=out / "mobilenet_v2.calib", eval_data=work / "held",
                               mixed_precision=bound, mixed_metric=metric, progress=True)
            lines = evaluation_summary(result.evaluation)
            print("\n".join(lines), flush=True)
            stem = out_dir / result_path(__file__, "mixed-precision-%s-%s" % (metric, bound), suffix="").name
            shutil.copy(str(out / "mobilenet_v2.precisions.png"), str(stem) + ".png")
            precisions = json.loads((out / "mobilenet_v2.precisions.json").read_text())
            evaluation = {k: v for k, v in result.evaluation.items() if k not in ("mixed_precision", "sensitivity")}
            Path(str(stem) + ".json").write_text(json.dumps({
                "benchmark": "mixed_precision_curve", "quick": bool(args.quick),
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "model": "mobilenet_v2", "calibration_samples": len(calib), "evaluation_samples": len(held),
                "command": "jetforge calibrate mobilenet_v2.onnx --data calib/ --eval held/ --mixed-precision %s "
                           "--mixed-metric %s" % (bound, metric),
                "seconds": round(time.perf_counter() - t0, 1), "summary": lines, "evaluation": evaluation,
                "precisions": precisions, "warnings": result.warnings}, indent=1))
            print("written %s.{json,png}" % stem, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
