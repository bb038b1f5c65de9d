"""What ``jetforge prune`` writes into its output folder, as one output set (:mod:`jetforge.output_set`).

The plan, the pruned weights, the report (json, txt, png) and the ONNX export with its sidecar belong together:
``pruned.pt`` loads only with the plan it was pruned by, and ``model.onnx`` is that model.  They are written into
the set's hidden staging folder and moved into place together once all are written, so a rerun stopped half-way
(Ctrl-C, SIGTERM, an error) leaves the previous run's files exactly as they were, and a rerun that writes fewer
files (``--no-onnx``, ``--no-plot``) removes the previous run's others instead of leaving them beside its own
(issue 25).  Other files in the folder are never touched.
"""

from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Sequence

from jetforge.errors import CompressError
from jetforge.fileio import PathLike
from jetforge.optional import require
from jetforge.output_set import OutputSet

PRUNE_SET = "prune"  # the set's name in the output folder: .prune.set.json records it
PLAN_FILE = "model.prune.json"
STATE_FILE = "pruned.pt"
ONNX_FILE = "model.onnx"
REPORT_STEM = "prune_report"
OUTPUT_FILES = (PLAN_FILE, STATE_FILE, REPORT_STEM + ".json", REPORT_STEM + ".txt", REPORT_STEM + ".png", ONNX_FILE,
                ONNX_FILE + ".json")


def save_pruned(result: Any, out: PathLike, source: str, meta: Dict[str, Any], input_shape: Sequence[int],
                onnx: bool = True, plot: bool = True, keep: Iterable[Optional[PathLike]] = ()) -> Dict[str, Path]:
    """Write a PruneResult's files into ``out`` as one set; {kind: final path} (plan, state_dict, json, table,
    plot, onnx).

    ``source``: what was pruned (``--model``), recorded in the plan and the ONNX sidecar; ``meta``: what is known
    about the model (task, name, labels, preprocess); ``keep``: the run's inputs, never removed as left-overs.
    An ONNX export that fails still saves the rest (consistent among itself) and then raises, naming the folder.
    """
    torch = require("torch", "saving the pruned weights")
    failure: Optional[CompressError] = None
    result.plan.meta["model"] = source
    with OutputSet(out, PRUNE_SET, keep=keep) as outputs:
        files = {"plan": result.plan.save(outputs.path(PLAN_FILE))}
        state_path = outputs.path(STATE_FILE)
        torch.save(result.model.state_dict(), str(state_path))
        files["state_dict"] = state_path
        for name in (REPORT_STEM + ".json", REPORT_STEM + ".txt", REPORT_STEM + ".png"):
            outputs.path(name)  # the final places are checked before anything is written
        files.update(result.report.save(outputs.staging, stem=REPORT_STEM, plot=plot))
        if onnx:
            try:
                files["onnx"] = _export(result, outputs.path(ONNX_FILE), source, meta, input_shape)
            except CompressError as err:  # the weights, plan and report are still worth keeping
                failure = err
    final = {kind: outputs.final(path) for kind, path in files.items()}
    if failure is not None:
        raise CompressError("%s (the pruned weights, plan and report are saved in %s)" % (failure.message, out),
                            hint="%s; or rerun with --no-onnx" % (failure.hint or "see the message")) from failure
    return final


def _export(result: Any, path: Path, source: str, meta: Dict[str, Any], input_shape: Sequence[int]) -> Path:
    from jetforge.compress.export import export_onnx

    export_onnx(result.model, path, input_shape, task=meta.get("task", "other"),
                model_name=meta.get("name", "") + "-pruned", labels=meta.get("labels", ()),
                preprocess=meta.get("preprocess"), output_name="logits",
                provenance={"pruned": True, "plan": PLAN_FILE, "source": source})
    return path


__all__ = ["OUTPUT_FILES", "PRUNE_SET", "save_pruned"]
