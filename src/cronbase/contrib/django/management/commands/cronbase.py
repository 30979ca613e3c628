"""``manage.py cronbase ...``: the ``cronbase`` command line on the App of settings.CRONBASE
(``manage.py cronbase worker``, ``migrate``, ``tick``, ``stats``, ``enqueue``...)."""

from __future__ import annotations

import argparse
import os
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError

from .....cli import main

# What the cronbase CLI is told the App is: this package's lazy ``app``, i.e. settings.CRONBASE.
APP_PATH = "cronbase.contrib.django:app"
# Django's own options, already applied by manage.py; the cronbase CLI would refuse them.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


# What help and usage lines call the command when manage.py's own name is not known
# (call_command).
PROG_NAME = "manage.py cronbase"


def run(args: list[str], prog_name: str = PROG_NAME) -> int:
    """Run the cronbase CLI on settings.CRONBASE's App; returns its exit code."""
    return main(["--app", APP_PATH, *args], prog_name=prog_name)


def prog_name_of(argv: list[str]) -> str:
    """``manage.py cronbase``, ``django-admin cronbase``: as Django's ManagementUtility names
    the program (``python -m django`` for its __main__)."""
    program = os.path.basename(argv[0])
    if program == "__main__.py":
        program = "python -m django"
    return f"{program} {argv[1]}"


def without_django_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
        elif arg in _DJANGO_OPTIONS:
            skip_value = True
        elif not arg.startswith(tuple(f"{option}=" for option in _DJANGO_OPTIONS)):
            kept.append(arg)
    return kept


class Command(BaseCommand):  # type: ignore[misc]  # django has no type hints here
    help = "cronbase's command line on the App of settings.CRONBASE (try: manage.py cronbase -h)."
    # The worker checks what it needs (the schema's version) itself.
    requires_system_checks: ClassVar[list[str]] = []

    def run_from_argv(self, argv: list[str]) -> None:
        # Every argument goes to cronbase's click CLI as it is: Django's argparse would refuse
        # its options (worker --burst) and its subcommands' own --help.
        args = without_django_options(argv[2:])
        raise SystemExit(run(args or ["--help"], prog_name_of(argv)))

    def print_help(self, prog_name: str, subcommand: str) -> None:
        # manage.py help cronbase
        run(["--help"], f"{prog_name} {subcommand}")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        # For call_command("cronbase", "worker", "--burst"): everything after the name.
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="cronbase-arguments")

    def handle(self, *args: str, **options: Any) -> None:
        code = run(list(args))
        if code:
            raise CommandError(
                f"cronbase {' '.join(args)} exited with code {code}", returncode=code
            )
