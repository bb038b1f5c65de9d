"""``jetforge targets``: list, show and detect device profiles (Jetson modules, desktop/server GPUs)."""

import argparse
import sys
from typing import Any, Dict, List

from jetforge.cli.arguments import add_json_flag
from jetforge.cli.base import Command, print_json
from jetforge.table import format_table
from jetforge.errors import TargetError
from jetforge.targets.schema import KINDS

MARK = "*"
LEGEND = "%s = uncertain value (the reference marks it unverified, or it comes from a data sheet not checked here)" % MARK


def _fmt_number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class TargetsCommand(Command):
    name = "targets"
    description = ("Device profiles: compute capability, SMs, memory and bandwidth, INT8 TOPS, DLA cores and "
                   "generation, nvpmodel power modes, JetPack -> TensorRT versions and precision support. Every "
                   "number carries its source; uncertain values are marked.")
    examples = """examples:
  jetforge targets list                 # a table of every profile
  jetforge targets list --dla-only      # only targets with DLA cores
  jetforge targets show orin-nx-16gb    # every field with its source
  jetforge targets show agx-orin --json # aliases work; JSON for scripts
  jetforge targets detect               # which profile is this machine?"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION")
        p_list = sub.add_parser("list", help="a table of all target profiles",
                                description="A table of all target profiles (uncertain values marked %s)." % MARK)
        add_json_flag(p_list)
        p_list.add_argument("--dla-only", action="store_true", help="only targets with DLA cores")
        p_list.add_argument("--kind", choices=KINDS, help="only this kind of target")
        p_show = sub.add_parser("show", help="every field of one profile, with sources",
                                description="Every field of one profile with its source; uncertain values marked.")
        p_show.add_argument("target", metavar="NAME", help="target name or alias (see `jetforge targets list`)")
        add_json_flag(p_show)
        p_detect = sub.add_parser("detect", help="recognize the board or GPU this runs on",
                                  description="Recognize this Jetson (device tree, /etc/nv_tegra_release) or GPU "
                                              "(nvidia-smi / pynvml). Exits 1 when nothing matches.")
        add_json_flag(p_detect)
        p_detect.add_argument("--root", default="/", metavar="DIR",
                              help="read proc/device-tree/*, etc/nv_tegra_release, proc/meminfo under DIR "
                                   "(recorded files) instead of /")
        p_detect.add_argument("--gpu-name", action="append", metavar="NAME",
                              help="use this GPU name instead of asking nvidia-smi (repeatable)")

    def run(self, args: argparse.Namespace) -> int:
        action = getattr(args, "action", None) or "list"
        if action == "list":
            return self._list(args)
        if action == "show":
            return self._show(args)
        return self._detect(args)

    # ---- list -----------------------------------------------------------------------------------------
    def _list(self, args: argparse.Namespace) -> int:
        from jetforge.targets import list_targets

        targets = list_targets(kind=getattr(args, "kind", None), dla_only=getattr(args, "dla_only", False))
        if getattr(args, "json", False):
            print_json([t.to_dict() for t in targets])
            return 0
        rows: List[List[Any]] = []
        for t in targets:
            cc = t.value("compute_capability")
            arch = t.value("gpu_architecture")
            sparse = t.value("int8_tops_sparse")
            dense = t.value("int8_tops_dense")
            if sparse.known:
                tops = sparse.text(MARK, unit=False) + " sparse"
            elif dense.known:
                tops = dense.text(MARK, unit=False) + " dense"
            else:
                tops = "-"
            if t.has_dla:
                dla = "%s x v%s" % (t.value("dla_cores").text(MARK), t.dla_version)
            else:
                dla = "-"
            trt = ", ".join(t.tensorrt_versions) if t.tensorrt_versions else "any"
            if t.jetpack_source is not None and t.jetpack_source.uncertain:
                trt += MARK
            rows.append([t.name, t.module or t.kind, "%s %s" % (arch.value, cc.text(MARK)),
                         t.value("sm_count").text(MARK, unit=False), t.value("memory_gb").text(MARK), tops, dla, trt])
        print(format_table(["NAME", "MODULE", "GPU / CC", "SMs", "MEMORY", "INT8 TOPS", "DLA", "TENSORRT"], rows))
        print()
        print(LEGEND)
        print("Run `jetforge targets show NAME` for every value with its source.")
        return 0

    # ---- show -----------------------------------------------------------------------------------------
    def _show(self, args: argparse.Namespace) -> int:
        from jetforge.targets import get_target

        t = get_target(args.target)
        if getattr(args, "json", False):
            print_json(t.to_dict())
            return 0
        sections = (_heading_lines, _spec_lines, _precision_lines, _power_mode_lines, _tensorrt_lines, _detection_lines)
        out: List[str] = []
        for section in sections:
            out.extend(section(t))
        print("\n".join(out).rstrip())
        return 0

    # ---- detect ---------------------------------------------------------------------------------------
    def _detect(self, args: argparse.Namespace) -> int:
        from jetforge.targets.detect import detect

        found = detect(root=args.root, gpu_names=args.gpu_name)
        if getattr(args, "json", False):
            print_json(found.to_dict())
            return 0 if found.target else 1
        for warning in found.warnings:
            print("warning: " + warning, file=sys.stderr)
        if found.target is None:
            raise TargetError("no target profile matches this machine (%s)" % found.how,
                              hint="pass --target NAME explicitly; `jetforge targets list` shows the names")
        t = found.target
        lines = ["%s: %s" % (t.name, t.display_name), "  decided by: %s" % found.how]
        if found.model:
            lines.append("  device-tree model: %s" % found.model)
        if found.l4t:
            jp = found.jetpack
            if jp is not None:
                lines.append("  L4T %s -> JetPack %s -> TensorRT %s, CUDA %s%s" % (
                    found.l4t, jp.jetpack, jp.tensorrt or "?", jp.cuda or "?", " [UNCERTAIN]" if jp.uncertain else ""))
            else:
                lines.append("  L4T %s (not in jetforge's JetPack table)" % found.l4t)
        if found.gpu_names:
            lines.append("  GPU: %s" % ", ".join(found.gpu_names))
        lines.append("Run `jetforge targets show %s` for its specs and sources." % t.name)
        print("\n".join(lines))
        return 0


def _unique(items: Any) -> List[str]:
    seen: Dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
    return list(seen)


# ---- the sections of `targets show` (each returns its lines, ending with a blank line where one follows) ----------
def _heading_lines(t: Any) -> List[str]:
    head = "%s: %s (%s" % (t.name, t.display_name, t.kind)
    if t.module:
        head += ", module %s" % t.module
    if t.soc:
        head += ", SoC %s" % t.soc
    out = [head + ")"]
    if t.aliases:
        out.append("aliases: " + ", ".join(t.aliases))
    if t.path:
        out.append("profile: " + t.path)
    return out + [""]


def _spec_lines(t: Any) -> List[str]:
    from jetforge.targets.schema import SPEC_FIELDS

    out = ["SPECS   ([UNCERTAIN] = not verified against a primary source; see the note and source)"]
    width = max(len(SPEC_FIELDS[k].label) for k in t.specs)
    for key, spec in SPEC_FIELDS.items():
        if key not in t.specs:
            continue
        rec = t.specs[key]
        flag = "   [UNCERTAIN]" if rec.uncertain and rec.known else ""
        out.append("  %s  %s%s" % (spec.label.ljust(width), rec.text(), flag))
        if rec.source:
            out.append("      source: %s" % rec.source)
        if rec.note:
            out.append("      note: %s" % rec.note)
    if "dla_loadables_per_core" not in t.specs and t.has_dla:
        out.append("  DLA loadables per core: %d (jetforge default setting)" % t.dla_loadables_per_core)
    if "channel_multiple" not in t.specs:
        out.append("  channel multiple: %d (jetforge default setting)" % t.channel_multiple)
    return out + [""]


def _precision_lines(t: Any) -> List[str]:
    from jetforge.targets.schema import PRECISIONS

    gpu_bits = []
    for p in PRECISIONS:
        rec = t.gpu_precisions[p]
        gpu_bits.append("%s %s%s" % (p, "yes" if rec.value else "no", MARK if rec.uncertain else ""))
    out = ["PRECISIONS", "  GPU: " + ", ".join(gpu_bits)]
    for src in sorted({rec.source for rec in t.gpu_precisions.values() if rec.source}):
        out.append("       source: " + src)
    dla = t.dla_precisions
    out.append("  DLA: " + (", ".join(dla.value) if dla.value else "none (no DLA)"))
    if dla.source and dla.value:
        out.append("       source: " + dla.source)
    return out + [""]


def _power_mode_lines(t: Any) -> List[str]:
    if not t.power_modes:
        return []
    rows = []
    for m in t.power_modes:
        clocks = ", ".join("%s=%s" % (k, _fmt_number(v)) for k, v in m.clocks.items())
        extra = []
        if m.super_mode:
            extra.append("Super, JetPack >= %s" % m.min_jetpack if m.min_jetpack else "Super")
        rows.append(["-" if m.id is None else m.id, m.name + (MARK if m.uncertain else ""),
                     "-" if m.watts is None else _fmt_number(m.watts), "yes" if m.default else "",
                     m.conf or "", clocks or "-", "; ".join(extra)])
    table = format_table(["ID", "NAME", "WATTS", "DEFAULT", "CONF", "CLOCKS (MHz)", "NOTE"], rows)
    out = ["POWER MODES (sudo nvpmodel -m ID)"] + ["  " + line for line in table.splitlines()]
    out += ["  source: " + src for src in _unique(m.source for m in t.power_modes)]
    out += ["  note (%s): %s" % (m.name, m.note) for m in t.power_modes if m.note]
    return out + [""]


def _tensorrt_lines(t: Any) -> List[str]:
    out: List[str] = []
    if t.jetpack_releases:
        out.append("JETPACK -> TENSORRT (default TensorRT for builds: %s)" % t.default_tensorrt)
        rows = [[r.jetpack + (MARK if r.uncertain else ""), r.l4t, r.tensorrt or "-", r.cuda or "-"]
                for r in t.jetpack_releases]
        out += ["  " + line for line in format_table(["JETPACK", "L4T", "TENSORRT", "CUDA"], rows).splitlines()]
        js = t.jetpack_source
        if js is not None:
            out.append("  support on this board%s: %s" % (" [UNCERTAIN]" if js.uncertain else "", js.source))
            if js.note:
                out.append("  note: " + js.note)
        out.append("  per release (targets/jetpack.yaml):")
        for r in t.jetpack_releases:
            out.append("    %s%s: %s" % (r.jetpack, " [UNCERTAIN: %s]" % (r.note or "partly unverified")
                                          if r.uncertain else "", r.source))
    elif t.tensorrt_any is not None:
        rec = t.tensorrt_any
        out.append("TENSORRT: %s" % rec.value)
        if rec.source:
            out.append("  source: " + rec.source)
        if rec.note:
            out.append("  note: " + rec.note)
    return out + [""]


def _detection_lines(t: Any) -> List[str]:
    out: List[str] = []
    detect_bits = []
    if t.module_ids:
        detect_bits.append("module ids " + ", ".join(t.module_ids))
    if t.model_patterns:
        detect_bits.append("device-tree model ~ " + " | ".join(t.model_patterns))
    if t.gpu_name_patterns:
        detect_bits.append("GPU name ~ " + " | ".join(t.gpu_name_patterns))
    if detect_bits:
        out.append("DETECTED BY: " + "; ".join(detect_bits))
    if t.notes:
        out.append("NOTES")
        out += ["  - " + note for note in t.notes]
    return out
