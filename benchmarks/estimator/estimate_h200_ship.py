"""Write the H200 fit's set into ``efficiency.yaml`` as ``pytorch_eager``, with where it came from.

``estimate_h200_fit.py --ship`` calls :func:`yaml_block` on the set fitted on every model and :func:`ship` to put
it between the ``BEGIN pytorch_eager`` / ``END pytorch_eager`` lines of the packaged file (everything else is kept
as it is).  The block carries its provenance (measurement file, fit result file, script, date, how the held-out
error was obtained) and one validation entry per check, the held-out numbers per batch size included, so that
``jetforge estimate`` can print them next to its estimate.
"""

from pathlib import Path
from typing import Any, Dict, List

from jetforge.runtime.estimate.efficiency import EFFICIENCY_FILE, EfficiencySet
from jetforge.runtime.estimate.graph import CATEGORIES

BEGIN = "  # BEGIN pytorch_eager: written by benchmarks/estimator/estimate_h200_fit.py --ship (do not edit by hand)"
END = "  # END pytorch_eager"
SCRIPT = "benchmarks/estimator/estimate_h200_fit.py"


def _rel(path: str) -> str:
    root = Path(__file__).resolve().parents[2]
    p = Path(path).resolve()
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(path)


def _q(text: str) -> str:
    return '"%s"' % text.replace("\\", "\\\\").replace('"', "'")


def _validation(result: Dict[str, Any], fit_file: str) -> List[str]:
    held = result["stats"]["held_out"]
    per_batch = "; ".join("batch %s: median %.1f %%, worst %.2fx" % (k.split("_")[1], s["median_abs_pct"],
                                                                     s["worst_ratio"])
                          for k, s in held.items() if k.startswith("batch_"))
    entries = [("held out of a %d-fold fit by model, %d models x batch 1/8/32 on an H200 (FP16, channels-last, CUDA "
                "graph), through jetforge estimate's own path: %s" % (result["folds"], result["models"], per_batch),
                "held_out", held["all"]),
               ("fitted on every model (the factors shipped here), same points", "fitted",
                result["stats"]["fitted"]["all"])]
    unseen = result["unseen"]
    if unseen["status"] == "measured":
        entries.append(("%d models never in the fit (%s), measured apart" % (len(unseen["models"]), unseen["file"]),
                        "unseen", unseen["stats"]["all"]))
    lines = []
    for text, kind, s in entries:
        lines += ["      - text: %s" % _q(text), "        device: GPU", "        precisions: [fp16]",
                  "        targets: server", "        kind: %s" % kind, "        points: %d" % s["n"],
                  "        median_abs_pct: %.1f" % s["median_abs_pct"], "        worst_ratio: %.2f" % s["worst_ratio"],
                  "        file: %s" % fit_file]
    if unseen["status"] != "measured":
        lines += ["      - text: %s" % _q("the %d never-fitted models of benchmarks/common/estimate_models.py "
                                          "(UNSEEN_MODELS): not measured yet" % len(unseen["models"])),
                  "        device: GPU", "        precisions: [fp16]", "        targets: server", "        kind: unseen"]
    return lines


def yaml_block(eff: EfficiencySet, result: Dict[str, Any], measured: str, fit_file: str) -> str:
    """The ``pytorch_eager`` set as YAML lines (indented for ``sets:``), its provenance and validation included."""
    fit_file = _rel(fit_file)
    held = result["stats"]["held_out"]["all"]
    lines = [BEGIN, "  pytorch_eager:",
             "    description: %s" % _q("eager PyTorch (cuDNN/cuBLAS) on a server GPU, one kernel per layer, "
                                       "FP16 channels-last, replayed from a CUDA graph; fitted on an H200"),
             "    obtained: %s" % _q("pytorch_eager_start's values fitted per layer type by %s on CUDA-graph "
                                    "totals measured by benchmarks/estimator/estimate_h200.py" % SCRIPT),
             "    fusion: %s" % eff.fusion, "    unfolded_batchnorm: %s" % str(eff.unfolded_batchnorm).lower(),
             "    pool_window_reads: %s" % str(eff.pool_window_reads).lower(), "    gpu:"]
    for c in CATEGORIES:
        f = eff.gpu[c]
        launch = ", launch_us: %.2f" % f.launch_us if f.launch_us is not None else ""
        lines.append("      %s: {compute: %.4f, memory: %.4f%s, calibrated: %s}" % (
            c, f.compute, f.memory, launch, "true" if c in result.get("calibrated_types", CATEGORIES) else "false"))
    o = eff.overheads
    lines += ["    overheads: {gpu_kernel_us: %.2f, dla_layer_us: 0.0, dla_subgraph_us: 0.0, transition_us: 0.0, "
              "inference_us: 0.0}" % o.gpu_kernel_us,
              "    fitted_on:", "      - %s" % _q("%d models x batch 1/8/32, %s" % (result["models"], _rel(measured))),
              "    provenance:", "      measured: %s" % _rel(measured), "      fit_result: %s" % fit_file,
              "      script: %s" % SCRIPT, "      date: %s" % _q(result["date"]),
              "      held_out: %s" % _q("%d folds by model, prior weight chosen per fold by an inner %d-fold "
                                       "cross-validation; held out: median %.1f %%, worst %.2fx over %d points"
                                       % (result["folds"], 3, held["median_abs_pct"], held["worst_ratio"], held["n"])),
              "      never_in_fit: %s" % _q("%s: %s" % (", ".join(result["unseen"]["models"]),
                                                         result["unseen"]["status"])),
              "    validation:"]
    return "\n".join(lines + _validation(result, fit_file) + [END]) + "\n"


def ship(block: str, path: Path = EFFICIENCY_FILE) -> Path:
    """Put ``block`` between the BEGIN/END lines of ``path`` (appended under ``sets:`` the first time)."""
    from jetforge.fileio import write_text_atomic

    text = path.read_text()
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END + "\n", 1)[1]
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n" + block
    write_text_atomic(path, text)
    return path
