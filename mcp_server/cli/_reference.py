"""The command-line reference page, generated from the argument parsers so that it cannot drift.

`python -m mcp_server.cli._reference > docs/cli-reference.md` writes it; a test compares the
committed page with what this prints, so a new option without a regenerated page fails CI.
The page is rendered from the parsers' actions, not from `--help` text: argparse's help layout
changes between Python releases and with the terminal's width, the actions do not.
"""

from __future__ import annotations

import argparse
import html
from collections.abc import Iterator
from typing import cast

from ._common import PROG

SHARED = frozenset({"home", "log_level"})

HEADER = f"""# Command-line reference

Every `{PROG}` command and option, generated from the program's own argument parsers (the same
ones `{PROG} COMMAND --help` describes). What the commands do, with examples:
[the command line](cli.md). `--home DIR` and `--log-level LEVEL` are accepted by every command,
before or after its name.
"""


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page for the `orchestrator` parser."""
    parts = [HEADER]
    parts += _command(parser, [PROG], level=2)
    return "\n".join(parts).rstrip("\n") + "\n"


def _command(parser: argparse.ArgumentParser, path: list[str], level: int) -> list[str]:
    out = [f"{'#' * level} {' '.join(path)}", ""]
    if parser.description:
        out += [_text(parser.description), ""]
    out += ["```", _synopsis(parser, path), "```", ""]
    for title, actions in _groups(parser):
        if len(path) > 1:  # the options every command accepts are given once, at the top
            actions = [a for a in actions if a.dest not in SHARED]
        if not actions:
            continue
        rows = [_row(action) for action in actions]
        out += [f"{title}:", "", "| argument | meaning |", "| --- | --- |", *rows, ""]
    subcommands = list(_subcommands(parser))
    if subcommands:
        out += ["| command | what it does |", "| --- | --- |"]
        out += [f"| [`{name}`](#{_anchor([*path, name])}) | {_text(help_)} |" for name, help_, _ in subcommands]
        out.append("")
        for name, _, sub in subcommands:
            out += _command(sub, [*path, name], min(level + 1, 4))
    return out


def _groups(parser: argparse.ArgumentParser) -> Iterator[tuple[str, list[argparse.Action]]]:
    # argparse keeps its groups private; reading them is the only way to list an existing parser's
    # options (the page is generated from these very objects so that it cannot drift).
    for group in parser._action_groups:  # pyright: ignore[reportPrivateUsage]
        actions = [
            a
            for a in group._group_actions  # pyright: ignore[reportPrivateUsage]
            if a.help != argparse.SUPPRESS and not isinstance(a.choices, dict) and not _is_help(a)
        ]
        if actions:
            title = group.title or "options"
            title = {"positional arguments": "Arguments", "options": "Options", "optional arguments": "Options"}.get(
                title, title[:1].upper() + title[1:]
            )
            yield title, actions


def _is_help(action: argparse.Action) -> bool:
    return action.option_strings == ["-h", "--help"]


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
        found: object = action.choices
        if isinstance(found, dict):
            choices = cast("dict[str, argparse.ArgumentParser]", found)
            # each command's one-line help lives on a private pseudo-action of the subparsers action
            pseudo = cast("list[argparse.Action]", getattr(action, "_choices_actions", []))
            helps = {choice.dest: choice.help or "" for choice in pseudo}
            for name, sub in choices.items():
                yield name, helps.get(name, ""), sub


def _synopsis(parser: argparse.ArgumentParser, path: list[str]) -> str:
    words = [*path]
    if any(a.option_strings and not _is_help(a) for _, actions in _groups(parser) for a in actions):
        words.append("[OPTIONS]")
    for action in parser._actions:  # pyright: ignore[reportPrivateUsage]
        if action.option_strings or action.help == argparse.SUPPRESS:
            continue
        words.append("COMMAND ..." if isinstance(action.choices, dict) else _value(action))
    return " ".join(words)


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def _value(action: argparse.Action) -> str:
    """The value part of an argument as a user types it (`M`, `[M]`, `M [M ...]`)."""
    metavar = _metavar(action)
    nargs = action.nargs
    if nargs == 0:
        return ""
    if nargs == "?":
        return f"[{metavar}]"
    if nargs == "*":
        return f"[{metavar} ...]"
    if nargs == "+":
        return f"{metavar} [{metavar} ...]"
    if isinstance(nargs, int) and nargs > 1:
        return " ".join([metavar] * nargs)
    return metavar


def _row(action: argparse.Action) -> str:
    value = _value(action)
    if action.option_strings:
        name = ", ".join(f"{flag} {value}".strip() for flag in action.option_strings)
    else:
        name = value
    meaning = _help(action)
    if isinstance(action, argparse._AppendAction) and "repeat" not in meaning:  # pyright: ignore[reportPrivateUsage]
        meaning += " (repeatable)"
    default = action.default
    shown_default = (
        default is not None
        and default is not argparse.SUPPRESS
        and default is not False
        and default != []
        and action.nargs != 0
        and "default" not in meaning
        and str(default) not in meaning
    )
    if shown_default:
        meaning += f" (default: `{default}`)"
    if action.required and action.option_strings:
        meaning += " (required)"
    return f"| `{name}` | {meaning.strip()} |"


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    try:  # argparse expands %(default)s and the like in help texts
        text = text % {**vars(action), "prog": PROG}
    except (KeyError, TypeError, ValueError):
        pass
    return _text(text)


def _text(text: str) -> str:
    """Text for one Markdown table cell or paragraph: one line, no HTML, no cell breaks."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _anchor(path: list[str]) -> str:
    return "-".join(path).lower()


def page() -> str:
    """The reference of this program's parsers."""
    from . import _parser  # pyright: ignore[reportPrivateUsage]

    return render(_parser())


if __name__ == "__main__":
    print(page(), end="")
