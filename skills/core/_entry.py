"""The entry point of a python skill, checked without running anything.

`skills validate` reads the module named by `run: {python: module:function}` with `ast` (no
import: a module's top-level code may do anything) and says when the function is not there,
with the closest name it has, or where the module's syntax breaks.
"""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

from .errors import Problem

__all__ = ["check_entry"]


def check_entry(module: Path, function: str, skill_yaml: Path, target: str) -> list[Problem]:
    """Problems of `module` (a file that exists) as the home of `function`."""
    try:
        tree = ast.parse(module.read_bytes(), filename=str(module))
    except SyntaxError as exc:
        message = f"{module.name} does not parse: {exc.msg}"
        return [Problem(module, message, hint="fix the syntax error", line=exc.lineno or 0, col=exc.offset or 0)]
    except (OSError, ValueError) as exc:  # unreadable, or NUL bytes
        return [Problem(module, f"{module.name} cannot be read: {exc}", hint="save it as UTF-8 Python source")]
    names = _top_level_names(tree)
    if function in names:
        return []
    close = difflib.get_close_matches(function, [n for n in names if not n.startswith("_")], n=1, cutoff=0.6)
    hint = f"did you mean '{module.stem}:{close[0]}'?" if close else f"define `def {function}(...)` in {module.name}"
    message = f"run.python '{target}': {module.name} has no top-level function '{function}'"
    return [Problem(skill_yaml, message, field="run.python", hint=hint)]


def _top_level_names(tree: ast.Module) -> set[str]:
    """What `module.name` can find: functions, classes, assignments and imports at the top."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            names.update(_top_level_names(ast.Module(body=[*node.body, *getattr(node, "orelse", [])], type_ignores=[])))
    return names
