"""``jetforge bundle``: pack everything a board needs into one folder (or tar), and verify one."""

import argparse
import dataclasses
import shutil
import tarfile
import tempfile
from pathlib import Path

from jetforge.cli.arguments import (add_dla_core_flag, add_json_flag, add_out_flag, add_precision_flag,
                                    add_shape_flag, add_target_flag, add_tensorrt_flag)
from jetforge.cli.base import Command, print_json
from jetforge.cli.cmd_build import build_flag_options
from jetforge.deploy.bundle import BundleError, create_bundle, safe_extract, single_top, verify_bundle
from jetforge.deploy.bundle.tar import expansion_limit
from jetforge.runtime.tensorrt.plan import WORKSPACE_MIB, load_build_options
from jetforge.table import format_table
from jetforge.workflow.bundle_references import reference_samples


class BundleCommand(Command):
    name = "bundle"
    description = ("`bundle create` writes one folder (and with --tar one tar file) holding what a Jetson needs to\n"
                   "build and run the model: the ONNX model and its sidecar, the Q/DQ variant, one calibration\n"
                   "cache per TensorRT version of the chosen targets, the per-layer precision list, the app\n"
                   "configuration and a manifest with SHA-256 checksums, the jetforge version and the targets\n"
                   "and TensorRT versions it was prepared for. Each (target, TensorRT) is checked with the real\n"
                   "build planner here. The folder appears only when complete (staging folder + rename).\n"
                   "`bundle verify` re-hashes every file and names each missing or corrupt one (exit 1).\n"
                   "On the board: `jetforge build BUNDLE --target auto`; from here: `jetforge deploy BUNDLE "
                   "user@host`.")
    examples = """examples:
  jetforge bundle create model.onnx --target orin-nx-16gb --calib model.calib --qdq --out bundles/cam
  jetforge bundle create model.onnx --target agx-orin-64gb --target orin-nano-8gb --precision fp16 --out b --tar
  jetforge bundle create model.onnx --target agx-orin-64gb --dla-core 0 --calib model.calib --retarget-calib --out b
  jetforge bundle create model.onnx --target orin-nx-16gb --tensorrt 10.3 --app-config app.yaml --out b
  jetforge bundle verify bundles/cam            # every file against the manifest; exit 1 naming what is wrong
  jetforge bundle verify bundles/cam.tar --json"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION")
        sub.required = True
        c = sub.add_parser("create", help="write a bundle folder (and tar)",
                           description="Write a bundle folder for one model and one or more targets.")
        c.add_argument("model", metavar="MODEL.onnx", help="the ONNX model (with its MODEL.onnx.json sidecar)")
        add_target_flag(c, required=True, multiple=True,
                        help="target profile to prepare for (repeatable; see `jetforge targets list`)")
        add_out_flag(c, "DIR", "bundle folder to write", required=True)
        c.add_argument("--calib", action="append", default=[], metavar="CACHE",
                       help="calibration cache (repeatable, one per TensorRT version; the header says which)")
        c.add_argument("--retarget-calib", action="store_true",
                       help="re-stamp the first cache for every prepared TensorRT version that has none")
        c.add_argument("--qdq", nargs="?", const="auto", metavar="MODEL.qdq.onnx",
                       help="include the Q/DQ model (default path: MODEL.qdq.onnx next to the model)")
        c.add_argument("--precisions", metavar="JSON",
                       help="per-layer precision list (default: MODEL.precisions.json next to the model if present)")
        c.add_argument("--app-config", metavar="YAML", help="app configuration to ship with the model")
        add_tensorrt_flag(c, "prepare only for these TensorRT versions (repeatable; default: every JetPack's)",
                          multiple=True)
        add_precision_flag(c, "build precision (default int8 with --calib/--qdq, else fp16)")
        add_dla_core_flag(c, "build for DLA core N on the board")
        add_shape_flag(c, "static input shape (default: the sidecar's, dynamic batch = 1)")
        c.add_argument("--workspace-mib", type=WORKSPACE_MIB.argtype, metavar="MIB",
                       help="workspace memory pool limit (at most the target's memory)")
        c.add_argument("--build-config", metavar="YAML", help="build options file (as for `jetforge build --config`)")
        c.add_argument("--tar", nargs="?", const="auto", metavar="FILE",
                       help="also write one tar file (default: DIR.tar; .tar.gz compresses)")
        c.add_argument("--force", action="store_true", help="replace an existing bundle folder")
        c.add_argument("--samples", metavar="DIR_OR_VIDEO",
                       help="real images/frames to carry with their FP32 and simulated-INT8 outputs (board-check)")
        c.add_argument("--samples-count", type=int, default=8, metavar="N", help="how many samples (default 8)")
        add_json_flag(c)
        v = sub.add_parser("verify", help="check a bundle against its manifest",
                           description="Re-hash every file of a bundle folder or tar against its manifest.")
        v.add_argument("bundle", metavar="BUNDLE", help="bundle folder or tar file")
        add_json_flag(v)

    def run(self, args: argparse.Namespace) -> int:
        if args.action == "verify":
            return self._verify(args)
        return self._create(args)

    def _create(self, args: argparse.Namespace) -> int:
        model = Path(args.model)
        stem = model.with_suffix("") if model.suffix.lower() == ".onnx" else model
        qdq = None
        if args.qdq == "auto":
            qdq = stem.with_name(stem.name + ".qdq.onnx")
            if not qdq.is_file():
                raise BundleError("--qdq: %s does not exist" % qdq,
                                  hint="run `jetforge calibrate %s` (it writes it), or give --qdq PATH" % model)
        elif args.qdq:
            qdq = Path(args.qdq)
        precisions = Path(args.precisions) if args.precisions else None
        if precisions is None and stem.with_name(stem.name + ".precisions.json").is_file():
            precisions = stem.with_name(stem.name + ".precisions.json")
        base = build_flag_options(args)
        if not args.precision and (args.calib or qdq is not None):
            base["precision"] = "int8"
        options = load_build_options(args.build_config)
        if base:
            options = dataclasses.replace(options, **base)
        tar = None
        if args.tar == "auto":
            tar = Path(str(Path(args.out)) + ".tar")
        elif args.tar:
            tar = Path(args.tar)
        samples = None
        if args.samples:
            samples = reference_samples(model, args.samples, args.samples_count, qdq=qdq, calib=args.calib)
        result = create_bundle(model, args.out, args.target, calib=args.calib, qdq=qdq, precisions=precisions,
                               app_config=args.app_config, options=options, tensorrt_versions=args.tensorrt,
                               retarget_calib=args.retarget_calib, tar=tar, force=args.force, samples=samples)
        m = result.manifest
        if args.json:
            data = m.to_dict()
            data["path"] = str(result.path)
            data["tar"] = str(result.tar) if result.tar else None
            data["warnings"] = result.warnings
            print_json(data)
            return 0
        rows = [[p.target, p.tensorrt, p.device, p.int8_source or "-", "yes" if p.ok else "no",
                 "" if p.ok else p.reason] for p in m.prepared]
        print(format_table(["target", "TensorRT", "device", "int8 from", "prepared", "why not"], rows))
        for note in m.notes:
            print("note: %s" % note)
        print("wrote bundle %s (%d files, %.1f MiB, hash %s)" % (result.path, len(m.files), m.total_bytes / 1048576.0,
                                                                 m.bundle_hash[:12]))
        if result.tar:
            print("wrote tar    %s" % result.tar)
        return 0

    def _verify(self, args: argparse.Namespace) -> int:
        path = Path(args.bundle)
        tmp = None
        folder = path
        try:
            if path.is_file():
                tmp = Path(tempfile.mkdtemp(prefix="jetforge-verify-"))
                try:
                    with tarfile.open(str(path), "r:*") as tar:
                        safe_extract(tar, tmp, limit=expansion_limit(path.stat().st_size))
                except (tarfile.TarError, EOFError, OSError) as err:
                    raise BundleError("bundle archive %s is unreadable: %s" % (path, err),
                                      hint="copy it again, or re-create it with `jetforge bundle create --tar`") from err
                folder = single_top(tmp)
            report = verify_bundle(folder)
            report.path = str(path)
        finally:
            if tmp is not None:
                shutil.rmtree(str(tmp), ignore_errors=True)
        if args.json:
            print_json(report.to_dict())
        else:
            for line in report.problems():
                print(line)
            for rel in report.unexpected:
                print("unexpected: %s (not in the manifest; ignored)" % rel)
            if report.ok:
                print(report.summary())
        report.raise_if_bad()
        return 0
