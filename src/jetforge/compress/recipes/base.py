"""A recipe kind (:class:`Recipe`), its stages (:class:`Stage`), and :func:`run_recipe`, the one way to run a stage.

``jetforge distill --config R.yaml`` is ``run_recipe("R.yaml", ..., stage="train")``, ``jetforge qat --config
R.yaml`` the same with ``stage="int8"``, and ``python -m jetforge.compress.recipes R.yaml [--stage int8]`` (also
under ``torchrun``) calls it with the same arguments: one dispatch, one set of checks, one printed summary.
"""

import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO, Tuple

from jetforge.config import load_config, parse_override, read_yaml, to_dict
from jetforge.errors import ConfigError

STAGES = ("train", "int8")
COMMANDS = {"train": "jetforge distill", "int8": "jetforge qat"}  # the command that runs each stage


@dataclass(frozen=True)
class Stage:
    """One stage of a recipe kind.

    ``config``: a function returning the config dataclass (imported when the stage runs, not when the registry
    is listed).  ``load(path, overrides, data, resolve)`` -> the config (``resolve``: also fill in defaults that
    need a lookup, e.g. the data folder from the asset cache; False for ``--print-config``).  ``run(cfg, data,
    progress)`` -> ``(result, is_main)`` (``is_main``: this process prints; under torchrun only rank 0).
    ``lines(result, cfg)`` -> the summary printed without ``--json``; ``json(result)`` -> what ``--json`` prints.
    """

    config: Callable[[], type]
    run: Callable[[Any, Optional[str], bool], Tuple[Any, bool]]
    lines: Callable[[Any, Any], List[str]]
    json: Callable[[Any], Dict[str, Any]]
    load: Optional[Callable[[Optional[str], List[str], Optional[str], bool], Any]] = None

    def load_config(self, path: Optional[str], overrides: Sequence[str], data: Optional[str],
                    resolve: bool = True) -> Any:
        if self.load is not None:
            return self.load(path, list(overrides), data, resolve)
        return load_config(self.config(), path, list(overrides))


@dataclass(frozen=True)
class Recipe:
    """A recipe kind: what it makes (``summary``), what ``--data`` is for it, its ``train`` stage and, where it has
    one, its ``int8`` stage (``no_int8``: why not, and what to run instead)."""

    name: str
    summary: str
    data: str
    train: Stage
    int8: Optional[Stage] = None
    no_int8: str = ""

    def stage(self, name: str, command: Optional[str] = None) -> Stage:
        """The stage ``name`` (``train`` or ``int8``); ``command`` names the caller in the refusal of a missing one."""
        if name not in STAGES:
            raise ConfigError("unknown recipe stage %r" % name, hint="train or int8")
        found = self.train if name == "train" else self.int8
        if found is None:
            raise ConfigError("recipe kind %r is not one %s knows: it has no INT8 stage"
                              % (self.name, command or COMMANDS[name]),
                              hint=self.no_int8 or "run its train stage with jetforge distill")
        return found


def recipe_kind(path: Optional[str], overrides: Sequence[str], command: str = "jetforge distill") -> str:
    """Which kind a recipe is: its ``kind`` key (or ``--set kind=...``); no kind is a classifier recipe."""
    from jetforge.compress.recipes import RECIPES

    kind = read_yaml(path).get("kind") if path else None
    for text in overrides:
        keys, value = parse_override(text)
        if keys == ["kind"]:
            kind = value
    if kind is None:
        return "classifier"
    if not isinstance(kind, str):  # `kind: [detector]` is a list: unhashable, it was an internal error
        raise ConfigError("recipe kind must be a name, got %r" % (kind,),
                          hint="write kind: %s (one name, no brackets)" % " or kind: ".join(RECIPES.names()))
    if kind not in RECIPES:
        known = RECIPES.names()
        raise ConfigError("recipe kind %r is not one %s knows" % (kind, command),
                          hint="use kind: %s or %s, or leave kind out (a classifier recipe)"
                               % (", ".join(known[:-1]), known[-1]))
    return str(kind)


def run_recipe(path: Optional[str], overrides: Sequence[str] = (), *, stage: str = "train",
               data: Optional[str] = None, as_json: bool = False, print_config: bool = False,
               progress: bool = True, command: Optional[str] = None, out: Optional[TextIO] = None) -> int:
    """Run ``stage`` of the recipe ``path`` (YAML) with ``overrides`` (``--set`` texts); returns the exit code.

    The kind comes from the recipe (:func:`recipe_kind`); its stage loads the config (every key checked before
    any work), runs, and prints its summary lines, or with ``as_json`` its JSON; ``print_config`` prints the
    resolved config instead of running.  ``command`` names the caller in messages (default: the command that runs
    ``stage``).  Under torchrun every rank runs and only rank 0 prints.
    """
    from jetforge.compress.recipes import RECIPES

    command = command or COMMANDS.get(stage, "jetforge distill")
    kind = recipe_kind(path, overrides, command)
    chosen = RECIPES.get(kind).stage(stage, command)
    stream = out or sys.stdout
    if print_config:
        import yaml

        cfg = chosen.load_config(path, overrides, data, resolve=False)
        stream.write(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    cfg = chosen.load_config(path, overrides, data)
    result, is_main = chosen.run(cfg, data, progress)
    if is_main:
        if as_json:
            stream.write(json.dumps(chosen.json(result), indent=2, default=str) + "\n")
        else:
            stream.write("\n".join(chosen.lines(result, cfg)) + "\n")
    return 0


def load_without_kind(cls: type, path: Optional[str], overrides: Sequence[str],
                      extra: Sequence[str] = ()) -> Any:
    """``cls`` from ``path`` and ``overrides`` where ``cls`` has no ``kind`` key (a classifier recipe may say
    ``kind: classifier``): the key is taken out before the config is read; ``extra`` overrides come last."""
    base: Dict[str, Any] = dict(read_yaml(path)) if path else {}
    if base.get("kind") == "classifier":
        del base["kind"]
    kept = [text for text in overrides if parse_override(text)[0] != ["kind"]]
    return load_config(cls, None, kept + list(extra), base=base)


__all__ = ["COMMANDS", "Recipe", "STAGES", "Stage", "load_without_kind", "recipe_kind", "run_recipe"]
