"""The fenced blocks of the README and the site's pages, and the checks a block not run gets.

A block is run unless a marker line right before it says otherwise:
- ``<!-- skip -->``: not run, but checked: Python must compile, every ``cronbase`` command line
  must name commands and options that exist, YAML must parse;
- ``<!-- file: examples/x.py -->``: an excerpt of that file, which its own tests run; it must be
  in the file, word for word;
- ``<!-- output: tests/y.py -->``: output that test checks; its first line must be in that test.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import yaml

from cronbase.cli import cli
from tests.e2e.harness import after_inherited

REPO = Path(__file__).resolve().parents[2]
CRONBASE = Path(sys.executable).with_name("cronbase")

_BLOCK = re.compile(
    r"^(?:<!-- (skip|file|output)(?:: (\S+))? -->\n)?```(\w*)\n(.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
# What a block without a marker is run as: tests/integration/test_docs.py and test_readme.py.
RUN = {"python", "console", "sql", "crontab"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    marker: str | None  # skip, file, output or None (run)
    target: str | None  # the file of a file: or output: marker
    language: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text("utf-8")
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, m[1], m[2], m[3], m[4])
        for m in _BLOCK.finditer(text)
    ]


def check(block: Block) -> None:
    """Raise AssertionError naming the block when a block that is not run fails its check."""
    if block.marker == "file":
        assert block.target is not None
        source = (REPO / block.target).read_text("utf-8")
        assert block.body in source, f"{block.where}: excerpt not in {block.target}"
    elif block.marker == "output":
        assert block.target is not None
        first = block.body.splitlines()[0]
        test = (REPO / block.target).read_text("utf-8")
        assert first[:60] in test, f"{block.where}: {block.target} does not check {first!r}"
    elif block.marker == "skip":
        check_skipped(block)
    else:
        assert block.language in RUN, (
            f"{block.where}: a ```{block.language} block is not run: mark it "
            "<!-- skip --> (checked), <!-- file: ... --> or <!-- output: ... -->"
        )


def check_skipped(block: Block) -> None:
    if block.language == "python":
        try:
            compile(block.body, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as exc:
            raise AssertionError(f"{block.where}: {exc}") from None
    elif block.language in ("console", "sh"):
        for command in command_lines(block):
            check_command(command, block.where)
    elif block.language == "yaml":
        list(yaml.safe_load_all(block.body))
    elif block.language not in ("text", "sql", "ini", "toml", "crontab", "dockerfile", "nginx"):
        raise AssertionError(f"{block.where}: no check for a skipped ```{block.language} block")


def command_lines(block: Block) -> list[str]:
    """The commands of a console block (``$ `` lines, with their continuation lines) or of a
    shell block (every line)."""
    commands: list[str] = []
    for line in block.body.splitlines():
        code = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        if block.language == "console":
            if line.startswith("$ "):
                commands.append(code[2:])
            elif commands and re.match(r"^\s+[\[\-]", code):
                commands[-1] += " " + code.strip()  # a synopsis continued on the next line
        elif code:
            commands.append(code)
    return commands


def check_command(command: str, where: str) -> None:
    """A ``cronbase`` command line names commands and options that exist. Synopses are fine:
    ``[--queue Q]...``, ``list|add|pause``, ``COMMAND``."""
    bare = command.replace(" | ", "|").replace("[", " ").replace("]", " ").replace("...", " ")
    words = shlex.split(bare)
    while words and re.match(r"^\w+=", words[0]):
        words.pop(0)  # VARIABLE=value before the command
    if not words or Path(words[0]).name != "cronbase":
        return
    current: click.Command = cli
    options: dict[str, click.Parameter] = {}
    takes_value = False
    for word in words[1:]:
        options |= {
            o: p
            for p in current.params
            for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
        }
        if takes_value:
            takes_value = False  # the value of the option before it
        elif word.startswith("-"):
            name = word.split("=", 1)[0]
            assert name in options, f"{where}: {command!r}: no option {name}"
            param = options[name]
            flag = isinstance(param, click.Option) and (param.is_flag or param.count)
            takes_value = not flag and "=" not in word
        elif isinstance(current, click.Group) and not word.isupper():
            names = word.split("|")  # list|add|pause: each must be a command
            missing = [n for n in names if n not in current.commands]
            assert not missing, f"{where}: {command!r}: no command {missing}"
            current = current.commands[names[0]]


def reader_env(database_url: str) -> dict[str, str]:
    """What a reader's shell has: the database set, this checkout importable (examples.*)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CRONBASE_APP")}
    env.update(
        CRONBASE_DATABASE_URL=database_url, PYTHONPATH=after_inherited(str(REPO)), COLUMNS="200"
    )
    return env


def run_script(run: list[Block], database_url: str, folder: Path) -> str:
    """Python blocks, in order, as one script run in ``folder``; returns what it printed."""
    script = folder / "blocks.py"
    script.write_text("\n".join(b.body for b in run), "utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        env=reader_env(database_url),
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def run_commands(run: list[Block], database_url: str) -> None:
    """Console blocks' ``$ cronbase ...`` lines, in order, from the checkout's root; the lines
    shown after a command must end what it printed."""
    commands: list[tuple[str, list[str]]] = []
    for block in run:
        for line in block.body.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            else:
                commands[-1][1].append(line)
    assert commands, "no commands"
    for command, expected in commands:
        args = shlex.split(command)
        assert args[0] == "cronbase", command
        result = subprocess.run(
            [str(CRONBASE), *args[1:]],
            env=reader_env(database_url),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}{result.stderr}"
        if expected:
            assert result.stdout.splitlines()[-len(expected) :] == expected, command
