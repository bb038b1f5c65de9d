"""``jetforge models list|show NAME``: the models jetforge ships, with their cards."""

import argparse

from jetforge.cli.arguments import add_json_flag
from jetforge.cli.base import Command, print_json
from jetforge.table import format_table


class ModelsCommand(Command):
    name = "models"
    description = ("The models jetforge ships, made by its own recipes and measured: list them (task, input, MACs,\n"
                   "accuracy, speed against the teacher, files) or show one's card (what made it, training data,\n"
                   "accuracy with 95 % intervals, speed where it was executed, estimates where it was not, and\n"
                   "what was never executed). A shipped name works wherever a command takes a model file.")
    examples = """examples:
  jetforge models list
  jetforge models show ssdlite-person-192
  jetforge app people --detector-model ssdlite-person-192 --source vtest.avi
  jetforge bundle create ssdlite-person-192 --target orin-nx-16gb --out person.bundle"""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="models_action", metavar="ACTION")
        sub.required = True
        listing = sub.add_parser("list", help="every shipped model, one row each")
        add_json_flag(listing)
        show = sub.add_parser("show", help="one model's card")
        show.add_argument("name", help="a shipped model's name (see `jetforge models list`)")
        add_json_flag(show)

    def run(self, args: argparse.Namespace) -> int:
        from jetforge.workflow.shipped_models import models_table, render_card, shipped_model, shipped_models

        if args.models_action == "list":
            models = shipped_models()
            if getattr(args, "json", False):
                print_json({m.name: dict(m.card, folder=str(m.folder)) for m in models})
            elif not models:
                print("no shipped models in this install")
            else:
                print(format_table(*models_table(models)))
            return 0
        model = shipped_model(args.name)
        if getattr(args, "json", False):
            print_json(dict(model.card, folder=str(model.folder), problems=model.verify()))
        else:
            print(render_card(model))
            problems = model.verify()
            if problems:
                print("\nWARNING: the installed files differ from the card: %s" % "; ".join(problems))
        return 0
