"""The on-board engine cache: build a bundle's engine once, load it on every later start.

An entry lives in ``<cache>/engines/<key>/`` (``<cache>`` = ``$JETFORGE_CACHE``, else
``~/.cache/jetforge``) and holds ``model.engine``, its sidecar ``model.engine.json`` (written by the
builder, with the engine's SHA-256) and ``key.json`` (what the key was computed from).  The key is
the SHA-256 of the bundle hash, the ONNX file actually built (plain or Q/DQ), the TensorRT version,
the target profile, the device name and compute capability, the DLA core and the build options.

:meth:`EngineCache.lookup` refuses an entry — and says why — when its ``key.json`` does not
describe the requested build (a foreign entry), when the engine no longer matches the hash in its
sidecar (stale or tampered), when the sidecar names another TensorRT major.minor, another DLA
core or another source ONNX.  A refused entry is rebuilt, never loaded.  Entries are assembled
in a staging folder and renamed into place, so an interrupted build leaves no entry.
"""

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from jetforge.errors import JetforgeError
from jetforge.fileio import PathLike, replace_dir, staging_dir, write_json_atomic

log = logging.getLogger(__name__)

ENGINE = "model.engine"
KEY_FILE = "key.json"
KEY_FORMAT = 1


def default_root() -> Path:
    from jetforge.assets.store import cache_root

    return cache_root() / "engines"


@dataclass(frozen=True)
class EngineKey:
    """Everything that makes two engines interchangeable; :attr:`digest` names the cache entry."""

    bundle_hash: str
    onnx_sha256: str
    tensorrt_version: str
    device_name: str
    compute_capability: str
    dla_core: Optional[int]
    build_options: Dict[str, Any] = field(default_factory=dict)
    target: str = ""

    def material(self) -> Dict[str, Any]:
        return {"format": KEY_FORMAT, "bundle_hash": self.bundle_hash, "onnx_sha256": self.onnx_sha256,
                "tensorrt_version": self.tensorrt_version, "device_name": self.device_name,
                "compute_capability": self.compute_capability, "dla_core": self.dla_core,
                "build_options": self.build_options, "target": self.target}

    @property
    def digest(self) -> str:
        text = json.dumps(self.material(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Lookup:
    """A cache lookup: ``engine`` is set only for an entry that passed every check."""

    key: EngineKey
    engine: Optional[Path]
    reason: str
    sidecar: Any = None

    @property
    def hit(self) -> bool:
        return self.engine is not None


@dataclass
class Resolved:
    """What :meth:`EngineCache.get_or_build` did."""

    engine: Path
    built: bool
    reason: str
    key: EngineKey
    build_result: Any = None

    def to_dict(self) -> Dict[str, Any]:
        return {"engine": str(self.engine), "cache": "built" if self.built else "hit", "reason": self.reason,
                "key": self.key.digest}


class EngineCache:
    """Engines by :class:`EngineKey` under ``root`` (default ``<cache>/engines``)."""

    def __init__(self, root: Optional[PathLike] = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def entry(self, key: EngineKey) -> Path:
        return self.root / key.digest

    def lookup(self, key: EngineKey) -> Lookup:
        """The cached engine for ``key`` if it is there and genuinely belongs to ``key``; else why not."""
        from jetforge.runtime.tensorrt.engine_sidecar import read_engine_sidecar

        folder = self.entry(key)
        engine = folder / ENGINE
        if not folder.is_dir():
            return Lookup(key, None, "no cached engine")
        try:
            recorded = json.loads((folder / KEY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return Lookup(key, None, "foreign entry: %s has no readable %s" % (folder.name[:12], KEY_FILE))
        if recorded != key.material():
            changed = sorted(k for k in set(recorded) | set(key.material())
                             if isinstance(recorded, dict) and recorded.get(k) != key.material().get(k))
            return Lookup(key, None, "foreign entry: made for another %s" % ", ".join(changed or ["build"]))
        if not engine.is_file():
            return Lookup(key, None, "stale entry: the engine file is missing")
        try:
            sidecar = read_engine_sidecar(engine, verify_hash=True, tensorrt_version=key.tensorrt_version)
        except JetforgeError as err:
            return Lookup(key, None, "stale entry: %s" % err.message)
        if not sidecar.content_sha256:
            return Lookup(key, None, "stale entry: the sidecar records no engine hash")
        if sidecar.upgraded_from_format1:  # built by an older jetforge: no input contract of other kinds, no extra
            return Lookup(key, None, "stale entry: its engine sidecar is format 1, without the model's facts")
        if key.target and sidecar.target != key.target:
            return Lookup(key, None, "foreign entry: built for target %s, not %s" % (sidecar.target, key.target))
        if sidecar.dla_core != key.dla_core:
            return Lookup(key, None, "foreign entry: built for DLA core %s, not %s" % (sidecar.dla_core, key.dla_core))
        onnx_sha = (sidecar.source_onnx or {}).get("sha256")
        if onnx_sha != key.onnx_sha256:
            return Lookup(key, None, "foreign entry: built from another ONNX model")
        return Lookup(key, engine, "cached engine %s" % folder.name[:12], sidecar)

    def store(self, key: EngineKey, build: Callable[[Path], Any]) -> Any:
        """Run ``build(engine_path)`` in a staging folder, then move the finished entry into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.entry(key)
        staging = staging_dir(final)  # hidden, named after this process; a killed build's is removed
        try:
            result = build(staging / ENGINE)
            if not (staging / ENGINE).is_file():
                raise JetforgeError("the engine build wrote no %s" % ENGINE)
            write_json_atomic(staging / KEY_FILE, key.material())
            replace_dir(staging, final)
        except BaseException:
            shutil.rmtree(str(staging), ignore_errors=True)
            raise
        return result

    def get_or_build(self, key: EngineKey, build: Callable[[Path], Any]) -> Resolved:
        """Load the cached engine for ``key``; build (and cache) it when there is none or it was refused."""
        found = self.lookup(key)
        if found.hit:
            assert found.engine is not None
            log.info("engine cache hit: %s", found.engine)
            return Resolved(found.engine, False, found.reason, key)
        if found.reason != "no cached engine":
            log.warning("engine cache: %s; rebuilding", found.reason)
        result = self.store(key, build)
        return Resolved(self.entry(key) / ENGINE, True, found.reason, key, result)
