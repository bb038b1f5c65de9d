"""``jetforge deploy``: copy a bundle to a Jetson over SSH, run doctor/build/bench/an app there, fetch the results."""

import argparse
from typing import Any, Dict, List

from jetforge.cli.arguments import add_json_flag, add_target_flag
from jetforge.cli.base import Command, print_json
from jetforge.config import COUNT
from jetforge.deploy.remote.target import CONNECT_TIMEOUT, PORT
from jetforge.deploy.workflow import STEPS


class DeployCommand(Command):
    name = "deploy"
    description = ("Over SSH (keys only, BatchMode; optional --jump host and --port), with the system's ssh and rsync:\n"
                   "verify the bundle here, check the board's jetforge and JetPack/TensorRT versions (install\n"
                   "instructions where jetforge is missing; a TensorRT the bundle was not prepared for is refused),\n"
                   "check its free space, copy only what changed (an interrupted copy resumes), verify the copy\n"
                   "there, run the --run steps with the board's log streamed here, and bring the results (metrics\n"
                   "JSON, plots, the annotated video with --fetch-video) back into RESULTS/<host>-<YYYYmmdd-HHMMSS>/\n"
                   "with deploy.json and remote.log. On a board without TensorRT, `build` says so and `bench` runs\n"
                   "the ONNX model on ONNX Runtime, labelled as such. The board's host key is recorded in\n"
                   "~/.config/jetforge/known_hosts on first contact (accept-new) and a changed key is refused.")
    examples = """examples:
  jetforge deploy bundles/cam nvidia@192.168.55.1 --run bench
  jetforge deploy bundles/cam.tar nvidia@orin.local --key ~/.ssh/id_ed25519 --run doctor --run build --run bench
  jetforge deploy bundles/cam nvidia@10.0.0.7 --jump me@gateway.example.com:2222 --port 22 --run build
  jetforge deploy bundles/cam nvidia@orin --run app --app-command "demo --model {model} --out {out}" --fetch-video
  jetforge deploy bundles/cam nvidia@orin --remote-jetforge /home/nvidia/.local/bin/jetforge --run bench --json"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bundle", metavar="BUNDLE", help="bundle folder or tar (from `jetforge bundle create`)")
        parser.add_argument("destination", metavar="USER@HOST", help="the board, e.g. nvidia@192.168.55.1")
        parser.add_argument("--port", type=PORT.argtype, help="SSH port, 1..65535 (default 22, or HOST:PORT)")
        parser.add_argument("--key", metavar="FILE", help="private key (default: ssh's own choice)")
        parser.add_argument("--jump", metavar="USER@HOST[:PORT]", help="reach the board through this jump host")
        parser.add_argument("--known-hosts", metavar="FILE",
                            help="known-hosts file (default ~/.config/jetforge/known_hosts)")
        parser.add_argument("--ssh-option", action="append", default=[], metavar="OPT=VALUE",
                            help="extra `ssh -o` option (repeatable)")
        parser.add_argument("--connect-timeout", type=CONNECT_TIMEOUT.argtype, default=10, metavar="S",
                            help="SSH connect timeout, whole seconds (default 10)")
        parser.add_argument("--remote-dir", metavar="DIR", help="bundle folder on the board "
                                                                "(default ~/jetforge/bundles/NAME)")
        parser.add_argument("--remote-jetforge", default="jetforge", metavar="PATH",
                            help="jetforge command on the board (default: `jetforge` on its PATH)")
        parser.add_argument("--remote-env", action="append", default=[], metavar="KEY=VALUE",
                            help="environment for the board's commands (repeatable), e.g. JETFORGE_CACHE=/data/jf")
        parser.add_argument("--run", action="append", default=[],
                            choices=STEPS,
                            help="what to run on the board (repeatable; runs in the order %s)" % ", ".join(STEPS))
        add_target_flag(parser, default="auto", help="target for the board's build (default: auto-detect there)")
        parser.add_argument("--bench-arg", action="append", default=[], metavar="ARG",
                            help="extra argument for the board's `jetforge bench` (repeatable), e.g. "
                                 "--bench-arg=--iterations=500")
        parser.add_argument("--app-command", default=None, metavar="CMD",
                            help="jetforge command line of the app; {model}, {out}, {bundle}, {config} are "
                                 "replaced (default: \"demo --model {model} --out {out}\")")
        parser.add_argument("--fetch-video", action="store_true", help="also bring back annotated videos")
        parser.add_argument("--results", default="results", metavar="DIR", help="local results folder (default results)")
        parser.add_argument("--transfer", choices=["auto", "rsync", "ssh"], default="auto",
                            help="copy with rsync (default where both sides have it) or a chunked copy over ssh")
        parser.add_argument("--bwlimit", type=COUNT.argtype, metavar="KIB_S",
                            help="limit rsync's bandwidth (KiB/s, 1 or more; leave it out for no limit)")
        add_json_flag(parser)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.deploy.remote import SshTarget
        from jetforge.deploy.safety import check_env_key
        from jetforge.deploy.workflow import DEFAULT_APP, Console, DeployOptions, deploy
        from jetforge.errors import ConfigError

        env: Dict[str, str] = {}
        for item in args.remote_env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError("--remote-env %r is not KEY=VALUE" % item, hint="e.g. --remote-env JETFORGE_CACHE=/data")
            env[check_env_key(key, item)] = value
        ssh = SshTarget.parse(args.destination, port=args.port, key=args.key, jump=args.jump,
                              known_hosts=args.known_hosts, options=list(args.ssh_option),
                              connect_timeout=args.connect_timeout)
        options = DeployOptions(remote_dir=args.remote_dir, remote_jetforge=args.remote_jetforge, remote_env=env,
                                runs=list(args.run), results_root=args.results, fetch_video=args.fetch_video,
                                transfer=args.transfer, bwlimit=args.bwlimit, target=args.target,
                                bench_args=list(args.bench_arg), app_command=args.app_command or DEFAULT_APP)
        options.check(args.bundle)  # before anything is opened or sent
        console = Console(ssh.host, quiet=bool(getattr(args, "quiet", False)))
        summary = deploy(args.bundle, ssh, options, console)
        if args.json:
            print_json(summary)
            return 0
        print(render(summary))
        return 0


def render(summary: Dict[str, Any]) -> str:
    """The human summary: where, what ran, latency and memory, where the results are."""
    lines: List[str] = []
    board = summary.get("board") or {}
    lines.append("board     %s@%s:%s  jetforge %s" % (summary.get("user") or "", summary.get("host"),
                                                     summary.get("port"), board.get("jetforge") or "missing"))
    build = summary.get("build")
    if build:
        if build.get("engine"):
            lines.append("engine    %s (%s)" % (build["engine"], "engine cache hit" if build.get("cache") == "hit"
                                                else "built"))
        else:
            lines.append("engine    none: TensorRT is not installed on the board")
    bench = summary.get("bench")
    if bench:
        lat = bench.get("latency_ms") or {}
        thr = bench.get("throughput") or {}
        mem = ((bench.get("memory") or {}).get("process") or {})
        lines.append("bench     %s%s" % (bench.get("description") or bench.get("backend"),
                                         "  [FALLBACK: %s]" % bench["fallback"] if bench.get("fallback") else ""))
        if lat:
            lines.append("latency   mean %.3f ms, p50 %.3f ms, p99 %.3f ms; %.1f inferences/s"
                         % (lat.get("mean_ms", 0), lat.get("p50_ms", 0), lat.get("p99_ms", 0),
                            thr.get("inferences_per_s", 0)))
        if mem:
            lines.append("memory    RSS %.0f MiB (peak %.0f MiB)" % (mem.get("rss_mib", 0), mem.get("peak_rss_mib", 0)))
    lines.append("results   %s" % summary.get("results"))
    return "\n".join(lines)
