"""Mixed precision on real images, chosen on one split and reported on another: MobileNetV2's curves.

The pretrained MobileNetV2 exported by jetforge is calibrated (default algorithm) on the 256 calibration
images/frames of ``int8_accuracy.pools()`` and evaluated on its 288 held-out ones -- as
``jetforge calibrate MODEL --data calib/ --eval held/ --mixed-precision BOUND --mixed-metric METRIC`` does --
for two bounds: 0.98 top-1 agreement on confident samples (the default metric) and 0.85 agreement on all
samples.  The layer choice is made on the selection half of the held-out images and reported on the other
half (:mod:`jetforge.calibrate.mixed`); the INT8 numbers are simulated TensorRT arithmetic.  The held-out
pool is disjoint from the calibration pool by frame, not by content: the run's near-duplicate check says
how many held-out images have a perceptual near-duplicate among the calibration images.

Run:  python benchmarks/mixed_precision_curve.py   (~40 min on a shared 2-core CPU)
-> benchmarks/results/mixed_precision_mobilenet_v2_{agreement_confident_0.98,agreement_0.85}.{json,png}
"""

import datetime
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"
RUNS = (("agreement_confident", 0.98), ("agreement", 0.85))


def main() -> int:
    import logging

    import cv2
    import int8_accuracy
    from jetforge.calibrate.calibrate_model import calibrate, evaluation_summary

    logging.basicConfig(level=logging.INFO, format="%(levelname).1s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="jf-mixed-") as tmp:
        work = Path(tmp)
        calib, held, _ = int8_accuracy.pools()
        for name, pool in (("calib", calib), ("held", held)):
            (work / name).mkdir()
            for i, (_, frame) in enumerate(pool):
                cv2.imwrite(str(work / name / ("%03d.png" % i)), frame)
        model = int8_accuracy.export_model("mobilenet_v2", work)
        for metric, bound in RUNS:
            t0 = time.perf_counter()
            out = work / ("%s_%s" % (metric, bound))
            out.mkdir()
            result = calibrate(model, work / "calib", out=out / "mobilenet_v2.calib", eval_data=work / "held",
                               mixed_precision=bound, mixed_metric=metric, progress=True)
            lines = evaluation_summary(result.evaluation)
            print("\n".join(lines), flush=True)
            stem = RESULTS / ("mixed_precision_mobilenet_v2_%s_%s" % (metric, bound))
            shutil.copy(str(out / "mobilenet_v2.precisions.png"), str(stem) + ".png")
            precisions = json.loads((out / "mobilenet_v2.precisions.json").read_text())
            evaluation = {k: v for k, v in result.evaluation.items() if k not in ("mixed_precision", "sensitivity")}
            Path(str(stem) + ".json").write_text(json.dumps({
                "benchmark": "mixed_precision_curve", "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "model": "mobilenet_v2", "calibration_samples": len(calib), "evaluation_samples": len(held),
                "command": "jetforge calibrate mobilenet_v2.onnx --data calib/ --eval held/ --mixed-precision %s "
                           "--mixed-metric %s" % (bound, metric),
                "seconds": round(time.perf_counter() - t0, 1), "summary": lines, "evaluation": evaluation,
                "precisions": precisions, "warnings": result.warnings}, indent=1))
            print("written %s.{json,png}" % stem, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
