"""Load and validate the target profiles (``profiles/*.yaml``) and the JetPack table (``jetpack.yaml``).

Validation is strict: an unknown key anywhere gets a did-you-mean, a number
without a ``source`` is refused, a compute capability must read like "8.7", and
a DLA count must agree with the DLA precisions.  Every error is a
:class:`~jetforge.errors.TargetError` naming the file and the key.
"""

import difflib
import functools
import logging
import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from jetforge.errors import TargetError, UnknownNameError
from jetforge.targets.schema import (CLOCK_KEYS, DLA_PRECISIONS, KINDS, NAME_PATTERN, PRECISIONS, SPEC_FIELDS,
                                     VERSION_PATTERN, JetPackRelease, PowerMode, Sourced, Target,
                                     parse_compute_capability, version_key)

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent
PROFILES_DIR = PACKAGE_DIR / "profiles"
JETPACK_FILE = PACKAGE_DIR / "jetpack.yaml"

_TOP_KEYS = ("name", "display_name", "kind", "module", "soc", "aliases", "detect", "specs", "precisions",
             "power_modes", "jetpack", "tensorrt", "notes")
_SOURCED_KEYS = ("value", "source", "uncertain", "note")
_DETECT_KEYS = ("module_ids", "model_patterns", "gpu_name_patterns")
_PRECISION_KEYS = ("source", "uncertain", "note", "gpu", "dla")
_POWER_KEYS = ("source", "uncertain", "note", "modes")
_MODE_KEYS = ("id", "name", "watts", "clocks", "default", "conf", "super", "min_jetpack", "source", "uncertain", "note")
_JETPACK_KEYS = ("releases", "source", "uncertain", "note")
_RELEASE_KEYS = ("jetpack", "l4t", "tensorrt", "cuda", "source", "uncertain", "note")


class _Ctx:
    """Where we are in which file, for error messages."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, problem: str, hint: Optional[str] = None) -> TargetError:
        return TargetError("target profile %s: %s: %s" % (self.path.name, where, problem),
                           hint=hint or "fix %s (every number needs a value and a source)" % self.path)

    def check_keys(self, data: Any, allowed: Iterable[str], where: str) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(where, "expected a mapping, got %r" % (data,))
        allowed = list(allowed)
        for key in data:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                guess = "; did you mean %r?" % close[0] if close else ""
                raise self.fail(where, "unknown key %r%s" % (key, guess), hint="valid keys here: " + ", ".join(allowed))
        return data

    def string(self, data: Mapping[str, Any], key: str, where: str, required: bool = True) -> Optional[str]:
        value = data.get(key)
        if value is None:
            if required:
                raise self.fail(where, "missing %r" % key)
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail("%s.%s" % (where, key), "expected a non-empty string, got %r" % (value,))
        return value.strip()

    def flag(self, data: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail("%s.%s" % (where, key), "expected true or false, got %r" % (value,))
        return value


def _read_yaml(path: Path) -> Any:
    import yaml

    from jetforge.config import yaml_nesting_problem

    try:
        text = path.read_text(encoding="utf-8")
        problem = yaml_nesting_problem(text)
        if problem:
            raise TargetError("target profile %s %s" % (path, problem), hint="a profile is a plain YAML tree")
        return yaml.safe_load(text)
    except OSError as err:
        raise TargetError("cannot read target profile %s: %s" % (path, err)) from err
    except UnicodeDecodeError as err:
        raise TargetError("target profile %s is not UTF-8 text (byte %d)" % (path, err.start),
                          hint="save the profile as UTF-8 YAML") from None
    except RecursionError:
        raise TargetError("target profile %s nests lists or mappings too deeply" % path,
                          hint="a profile is a plain YAML tree") from None
    except (ValueError, OverflowError) as err:  # PyYAML's int() of 4301+ digits; chr() of "\U80000000"
        raise TargetError("target profile %s holds a value YAML cannot convert (%s)" % (path, str(err)[:80]),
                          hint="fix the number in the profile") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        raise TargetError("target profile %s is not valid YAML%s: %s" % (path, at, getattr(err, "problem", err)),
                          hint="fix the YAML syntax") from err


def _typed(ctx: _Ctx, value: Any, tp: type, where: str) -> Any:
    if value is None:
        return None
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.fail(where, "expected an integer, got %r" % (value,))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.fail(where, "expected a number, got %r" % (value,))
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ctx.fail(where, "expected a string, got %r (quote version-like values)" % (value,))
        return value
    if tp is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ctx.fail(where, "expected a list of strings, got %r" % (value,))
        return tuple(value)
    raise AssertionError(tp)  # pragma: no cover


def _sourced(ctx: _Ctx, data: Any, where: str, tp: type, unit: Optional[str],
             default_source: Optional[str] = None, default_uncertain: bool = False) -> Sourced:
    """A ``{value, source, uncertain, note}`` mapping -> Sourced; a non-null value must have a source."""
    data = ctx.check_keys(data, _SOURCED_KEYS, where)
    if "value" not in data:
        raise ctx.fail(where, "missing 'value' (write value: null if it is not known)")
    value = _typed(ctx, data["value"], tp, where + ".value")
    source = ctx.string(data, "source", where, required=False) or default_source
    if value is not None and not source:
        raise ctx.fail(where, "value %r has no 'source'" % (data["value"],),
                       hint="add source: <URL or document name> to %s in %s" % (where, ctx.path))
    uncertain = ctx.flag(data, "uncertain", where, default_uncertain)
    note = ctx.string(data, "note", where, required=False)
    return Sourced(value, unit, source, uncertain, note)


def _specs(ctx: _Ctx, data: Any) -> Dict[str, Sourced]:
    data = ctx.check_keys(data, SPEC_FIELDS, "specs")
    out: Dict[str, Sourced] = {}
    for key, spec in SPEC_FIELDS.items():
        if key not in data:
            if spec.required:
                raise ctx.fail("specs", "missing required key %r" % key)
            continue
        record = _sourced(ctx, data[key], "specs." + key, spec.type, spec.unit)
        if spec.required and record.value is None:
            raise ctx.fail("specs." + key, "is required and cannot be null")
        out[key] = record
    try:
        parse_compute_capability(out["compute_capability"].value)
    except ValueError as err:
        raise ctx.fail("specs.compute_capability", str(err), hint="write e.g. compute_capability: {value: \"8.7\", ...}")
    for key in ("dla_cores", "sm_count", "cuda_cores", "tensor_cores", "dla_loadables_per_core", "channel_multiple",
                "channel_multiple_int8"):
        if key in out and out[key].value is not None and out[key].value < 0:
            raise ctx.fail("specs." + key, "cannot be negative")
    for key in ("channel_multiple", "channel_multiple_int8", "dla_loadables_per_core"):
        if key in out and out[key].value is not None and out[key].value < 1:
            raise ctx.fail("specs." + key, "must be at least 1")
    dla = out["dla_cores"].value
    if dla > 0 and ("dla_version" not in out or out["dla_version"].value is None):
        raise ctx.fail("specs.dla_version", "a target with DLA cores must name the DLA generation (\"1.0\" or \"2.0\")")
    if dla == 0:
        for key in ("dla_version", "dla_max_clock_mhz", "dla_int8_tops_sparse", "dla_int8_tops_dense",
                    "dla_sram_bytes_per_core", "dla_loadables_per_core"):
            if key in out and out[key].value is not None:
                raise ctx.fail("specs." + key, "set on a target with dla_cores: 0")
    for key in ("min_tensorrt",):
        if key in out and out[key].value is not None and not VERSION_PATTERN.match(out[key].value):
            raise ctx.fail("specs." + key, "%r is not a version like \"10.8\"" % out[key].value)
    return out


def _precisions(ctx: _Ctx, data: Any, dla_cores: int) -> Tuple[Dict[str, Sourced], Sourced]:
    data = ctx.check_keys(data, _PRECISION_KEYS, "precisions")
    source = ctx.string(data, "source", "precisions", required=False)
    uncertain = ctx.flag(data, "uncertain", "precisions")
    gpu_data = ctx.check_keys(data.get("gpu"), PRECISIONS, "precisions.gpu")
    gpu: Dict[str, Sourced] = {}
    for p in PRECISIONS:
        if p not in gpu_data:
            raise ctx.fail("precisions.gpu", "missing %r (state true or false for every precision: %s)"
                           % (p, ", ".join(PRECISIONS)))
        item = gpu_data[p]
        where = "precisions.gpu." + p
        if isinstance(item, bool):
            if not source:
                raise ctx.fail(where, "has no source (give precisions.source or a {value, source} mapping)")
            gpu[p] = Sourced(item, None, source, uncertain, None)
        else:
            record = _sourced(ctx, item, where, bool, None, source, uncertain) if isinstance(item, Mapping) else None
            if record is None or not isinstance(record.value, bool):
                raise ctx.fail(where, "expected true, false or {value: true|false, source: ...}, got %r" % (item,))
            gpu[p] = record
    dla_raw = data.get("dla", {"value": []})
    if isinstance(dla_raw, list):
        dla_raw = {"value": dla_raw}
    dla = _sourced(ctx, dla_raw, "precisions.dla", list, None, source, uncertain)
    dla_list = tuple(dla.value or ())
    for p in dla_list:
        if p not in DLA_PRECISIONS:
            raise ctx.fail("precisions.dla", "%r is not a DLA precision (DLA runs only %s)" % (p, ", ".join(DLA_PRECISIONS)))
    if dla_cores > 0 and not dla_list:
        raise ctx.fail("precisions.dla", "target has %d DLA cores but lists no DLA precision" % dla_cores)
    if dla_cores == 0 and dla_list:
        raise ctx.fail("precisions.dla", "target has no DLA core but lists DLA precisions %s" % (list(dla_list),))
    return gpu, dla


def _power_modes(ctx: _Ctx, data: Any) -> Tuple[PowerMode, ...]:
    if data is None:
        return ()
    data = ctx.check_keys(data, _POWER_KEYS, "power_modes")
    group_source = ctx.string(data, "source", "power_modes", required=False)
    group_uncertain = ctx.flag(data, "uncertain", "power_modes")
    modes = data.get("modes") or []
    if not isinstance(modes, list):
        raise ctx.fail("power_modes.modes", "expected a list")
    out = []
    seen = set()
    for i, raw in enumerate(modes):
        where = "power_modes.modes[%d]" % i
        raw = ctx.check_keys(raw, _MODE_KEYS, where)
        name = ctx.string(raw, "name", where)
        where = "power_modes.%s" % name
        mode_id = _typed(ctx, raw.get("id"), int, where + ".id")
        watts = _typed(ctx, raw.get("watts"), float, where + ".watts")
        clocks_raw = raw.get("clocks") or {}
        clocks_raw = ctx.check_keys(clocks_raw, CLOCK_KEYS, where + ".clocks")
        clocks = {}
        for key, value in clocks_raw.items():
            tp = int if key in ("cpu_cores", "gpu_tpcs") else float
            typed = _typed(ctx, value, tp, "%s.clocks.%s" % (where, key))
            if typed is not None:
                clocks[key] = typed
        source = ctx.string(raw, "source", where, required=False) or group_source
        if not source:
            raise ctx.fail(where, "has no 'source' (set power_modes.source or the mode's own)")
        min_jp = ctx.string(raw, "min_jetpack", where, required=False)
        conf = ctx.string(raw, "conf", where, required=False)
        key = (conf, name)
        if key in seen:
            raise ctx.fail(where, "power mode %r is listed twice for conf %r" % (name, conf))
        seen.add(key)
        out.append(PowerMode(name=name, id=mode_id, watts=watts, source=source, clocks=clocks,
                             default=ctx.flag(raw, "default", where), conf=conf,
                             super_mode=ctx.flag(raw, "super", where), min_jetpack=min_jp,
                             uncertain=ctx.flag(raw, "uncertain", where, group_uncertain),
                             note=ctx.string(raw, "note", where, required=False)))
    defaults = [(m.conf, m.name) for m in out if m.default]
    confs = [c for c, _ in defaults]
    if len(confs) != len(set(confs)):
        raise ctx.fail("power_modes", "more than one default mode in one nvpmodel conf: %s" % defaults)
    return tuple(out)


def _str_list(ctx: _Ctx, data: Any, where: str) -> Tuple[str, ...]:
    if data is None:
        return ()
    if not isinstance(data, list) or not all(isinstance(v, str) and v for v in data):
        raise ctx.fail(where, "expected a list of strings, got %r" % (data,))
    return tuple(data)


# ---- the JetPack table ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def jetpack_table(path: Optional[str] = None) -> Tuple[JetPackRelease, ...]:
    """Every JetPack release in ``jetpack.yaml``, validated, in file order."""
    p = Path(path) if path else JETPACK_FILE
    ctx = _Ctx(p)
    data = ctx.check_keys(_read_yaml(p), ("sources", "releases"), "top level")
    releases = []
    seen_jp = set()
    seen_l4t = set()
    for i, raw in enumerate(data.get("releases") or []):
        where = "releases[%d]" % i
        raw = ctx.check_keys(raw, _RELEASE_KEYS, where)
        jp = ctx.string(raw, "jetpack", where)
        l4t = ctx.string(raw, "l4t", where)
        trt = ctx.string(raw, "tensorrt", where, required=False)
        cuda = ctx.string(raw, "cuda", where, required=False)
        for label, v in (("jetpack", jp), ("l4t", l4t), ("tensorrt", trt), ("cuda", cuda)):
            if v is not None and not VERSION_PATTERN.match(v):
                raise ctx.fail("%s.%s" % (where, label), "%r is not a version" % v)
        if jp in seen_jp or l4t in seen_l4t:
            raise ctx.fail(where, "JetPack %s / L4T %s is listed twice" % (jp, l4t))
        seen_jp.add(jp)
        seen_l4t.add(l4t)
        releases.append(JetPackRelease(jetpack=jp, l4t=l4t, tensorrt=trt, cuda=cuda,
                                       source=ctx.string(raw, "source", where) or "",
                                       uncertain=ctx.flag(raw, "uncertain", where),
                                       note=ctx.string(raw, "note", where, required=False)))
    return tuple(releases)


def jetpack_tensorrt_versions() -> Tuple[str, ...]:
    """Every TensorRT version the JetPack table records, oldest first: the releases jetforge knows by number."""
    return tuple(sorted({r.tensorrt for r in jetpack_table() if r.tensorrt}, key=version_key))


def jetpack_release(version: str) -> JetPackRelease:
    """The JetPack release named ``version`` ("6.1"); UnknownNameError otherwise."""
    for release in jetpack_table():
        if release.jetpack == version:
            return release
    raise UnknownNameError("JetPack release", version, [r.jetpack for r in jetpack_table()])


# ---- one profile --------------------------------------------------------------------------------------

def load_profile(path: Union[str, Path]) -> Target:
    """Read and validate one profile file (the sections in file order, so the first problem is the one reported)."""
    p = Path(path)
    ctx = _Ctx(p)
    data = _read_yaml(p)
    data = ctx.check_keys(data, _TOP_KEYS, "top level")
    name, kind = _name_and_kind(ctx, data, p)
    specs = _specs(ctx, data.get("specs"))
    dla_cores = specs["dla_cores"].value
    if kind == "jetson" and ("memory_gb" not in specs or specs["memory_gb"].value is None):
        raise ctx.fail("specs.memory_gb", "a Jetson target must give its memory size (it also tells modules apart)")
    if kind != "jetson" and dla_cores:
        raise ctx.fail("specs.dla_cores", "only Jetson targets have DLA cores")
    gpu_prec, dla_prec = _precisions(ctx, data.get("precisions"), dla_cores)
    module_ids, patterns, gpu_patterns = _detection(ctx, data.get("detect") or {})
    if kind == "jetson":
        releases, jetpack_source = _jetson_releases(ctx, data)
        tensorrt_any = None
    else:
        releases, jetpack_source = (), None
        tensorrt_any = _desktop_tensorrt(ctx, data)
    modes = _power_modes(ctx, data.get("power_modes"))
    if kind == "jetson" and not modes:
        raise ctx.fail("power_modes", "a Jetson target must list its nvpmodel power modes")
    for mode in modes:
        if mode.min_jetpack and mode.min_jetpack not in {r.jetpack for r in jetpack_table()}:
            raise ctx.fail("power_modes.%s.min_jetpack" % mode.name, "unknown JetPack release %r" % mode.min_jetpack)
    aliases = _str_list(ctx, data.get("aliases"), "aliases")
    for alias in aliases:
        if not NAME_PATTERN.match(alias):
            raise ctx.fail("aliases", "%r must be lower-case letters, digits and '-'" % alias)
    return Target(
        name=name,
        display_name=ctx.string(data, "display_name", "top level") or name,
        kind=kind,
        module=ctx.string(data, "module", "top level", required=False),
        soc=ctx.string(data, "soc", "top level", required=False),
        specs=specs,
        power_modes=modes,
        jetpack_releases=releases,
        jetpack_source=jetpack_source,
        tensorrt_any=tensorrt_any,
        gpu_precisions=gpu_prec,
        dla_precisions=dla_prec,
        aliases=aliases,
        module_ids=module_ids,
        model_patterns=patterns,
        gpu_name_patterns=gpu_patterns,
        notes=_str_list(ctx, data.get("notes"), "notes"),
        path=str(p),
    )


def _name_and_kind(ctx: _Ctx, data: Dict[str, Any], p: Path) -> Tuple[str, str]:
    """The profile's name (which must be the file's name) and kind."""
    name = ctx.string(data, "name", "top level") or ""
    if not NAME_PATTERN.match(name):
        raise ctx.fail("name", "%r must be lower-case letters, digits and '-'" % name)
    if p.suffix in (".yaml", ".yml") and p.stem != name:
        raise ctx.fail("name", "%r does not match the file name %r" % (name, p.name),
                       hint="rename the file to %s.yaml or fix the name" % name)
    kind = ctx.string(data, "kind", "top level") or ""
    if kind not in KINDS:
        raise ctx.fail("kind", "%r is not one of %s" % (kind, ", ".join(KINDS)))
    return name, kind


def _detection(ctx: _Ctx, raw: Any) -> Tuple[Tuple[str, ...], Tuple[str, ...], Tuple[str, ...]]:
    """The ``detect`` block: module ids, device-tree model patterns and GPU name patterns (valid regexes)."""
    detect = ctx.check_keys(raw, _DETECT_KEYS, "detect")
    module_ids = _str_list(ctx, detect.get("module_ids"), "detect.module_ids")
    for mid in module_ids:
        if not re.match(r"^p\d{4}-\d{4}$", mid):
            raise ctx.fail("detect.module_ids", "%r is not a module id like p3767-0000" % mid)
    patterns = _str_list(ctx, detect.get("model_patterns"), "detect.model_patterns")
    gpu_patterns = _str_list(ctx, detect.get("gpu_name_patterns"), "detect.gpu_name_patterns")
    for where, plist in (("detect.model_patterns", patterns), ("detect.gpu_name_patterns", gpu_patterns)):
        for pat in plist:
            try:
                re.compile(pat)
            except re.error as err:
                raise ctx.fail(where, "%r is not a valid regular expression: %s" % (pat, err))
    return module_ids, patterns, gpu_patterns


def _jetson_releases(ctx: _Ctx, data: Dict[str, Any]) -> Tuple[Tuple[JetPackRelease, ...], Sourced]:
    """A Jetson's JetPack releases (names from the shared JetPack table) and the source saying so."""
    if "tensorrt" in data:
        raise ctx.fail("tensorrt", "a Jetson target takes its TensorRT versions from 'jetpack'")
    jp = ctx.check_keys(data.get("jetpack"), _JETPACK_KEYS, "jetpack")
    names = _str_list(ctx, jp.get("releases"), "jetpack.releases")
    if not names:
        raise ctx.fail("jetpack.releases", "a Jetson target must list its JetPack releases")
    table = {r.jetpack: r for r in jetpack_table()}
    for jp_name in names:
        if jp_name not in table:
            close = difflib.get_close_matches(jp_name, list(table), n=1)
            raise ctx.fail("jetpack.releases", "unknown JetPack release %r%s" % (
                jp_name, "; did you mean %r?" % close[0] if close else ""),
                hint="add it to %s or use one of %s" % (JETPACK_FILE.name, ", ".join(table)))
    source = _sourced(ctx, {"value": list(names), "source": jp.get("source"),
                            "uncertain": jp.get("uncertain", False), "note": jp.get("note")}, "jetpack", list, None)
    return tuple(table[n] for n in names), source


def _desktop_tensorrt(ctx: _Ctx, data: Dict[str, Any]) -> Sourced:
    """A desktop/server GPU's TensorRT support: one sourced statement instead of a JetPack list."""
    if "jetpack" in data:
        raise ctx.fail("jetpack", "only Jetson targets have JetPack releases")
    tensorrt_any = _sourced(ctx, data.get("tensorrt"), "tensorrt", str, None)
    if tensorrt_any.value is None:
        raise ctx.fail("tensorrt", "a desktop/server target must say which TensorRT releases apply")
    return tensorrt_any


# ---- the registry -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _load_all(directory: str) -> Tuple[Dict[str, Target], Dict[str, str]]:
    d = Path(directory)
    files = sorted(d.glob("*.yaml"))
    if not files:
        raise TargetError("no target profiles found in %s" % d, hint="reinstall jetforge (profiles/*.yaml is package data)")
    targets: Dict[str, Target] = {}
    aliases: Dict[str, str] = {}
    for f in files:
        t = load_profile(f)
        if t.name in targets:
            raise TargetError("target %r is defined twice (%s)" % (t.name, f))
        targets[t.name] = t
    for t in targets.values():
        for alias in t.aliases:
            if alias in targets or alias in aliases:
                raise TargetError("target alias %r of %s clashes with another target or alias" % (alias, t.name))
            aliases[alias] = t.name
    return _ordered(targets), aliases


# The order of `jetforge targets list`: Jetson (Orin family first: the DLA targets), then desktop, then server.
_ORDER = ("agx-orin-64gb", "agx-orin-32gb", "orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb", "orin-nano-4gb",
          "jetson-thor", "agx-xavier", "xavier-nx", "jetson-nano",
          "desktop-ampere", "desktop-ada", "desktop-blackwell", "server-hopper-h100", "server-hopper-h200")


def _ordered(targets: Dict[str, Target]) -> Dict[str, Target]:
    def key(t: Target) -> Tuple[int, int, str]:
        kind_rank = KINDS.index(t.kind)
        pos = _ORDER.index(t.name) if t.name in _ORDER else len(_ORDER)
        return kind_rank, pos, t.name
    return {t.name: t for t in sorted(targets.values(), key=key)}


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def list_targets(kind: Optional[str] = None, dla_only: bool = False, directory: Optional[str] = None) -> List[Target]:
    """All profiles (Jetson first), optionally only one ``kind`` or only those with DLA cores."""
    targets, _ = _load_all(str(directory or PROFILES_DIR))
    if kind is not None and kind not in KINDS:
        raise UnknownNameError("target kind", kind, KINDS)
    return [t for t in targets.values() if (kind is None or t.kind == kind) and (not dla_only or t.has_dla)]


def target_names(directory: Optional[str] = None) -> List[str]:
    targets, _ = _load_all(str(directory or PROFILES_DIR))
    return list(targets)


def get_target(name: Union[str, Target], directory: Optional[str] = None) -> Target:
    """The profile called ``name`` (or one of its aliases); UnknownNameError with a did-you-mean otherwise."""
    if isinstance(name, Target):
        return name
    targets, aliases = _load_all(str(directory or PROFILES_DIR))
    key = _normalize(str(name))
    if key in targets:
        return targets[key]
    if key in aliases:
        return targets[aliases[key]]
    raise UnknownNameError("target", str(name), list(targets) + list(aliases),
                           hint="run `jetforge targets list` to see the known targets")
