"""code-analyzer: static analysis of one Python file with the standard `ast` and `tokenize`.

Cyclomatic complexity follows the usual McCabe/radon counting: 1 per function, plus 1 for
each `if`/`elif`, conditional expression, `for`/`while` loop (and their `else`), `except`
clause, `match` case, comprehension `for` and `if`, `assert`, and each extra operand of
`and`/`or`. Nested functions and classes are measured on their own.
"""

from __future__ import annotations

import ast
import io
import threading
import tokenize
import warnings
from typing import Any, TypedDict

from skills.base import SkillContext
from skills.errors import SkillRunError
from skills.roots import allowed_path

_WARNINGS_LOCK = threading.Lock()
_NOISE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


class FunctionInfo(TypedDict):
    """One function or method of the file, as the skill reports it."""

    name: str
    qualname: str
    line: int
    end_line: int
    args: int
    complexity: int
    rank: str
    is_async: bool
    is_method: bool
    decorators: list[str]
    has_docstring: bool


class ClassInfo(TypedDict):
    """One class of the file, as the skill reports it."""

    name: str
    qualname: str
    line: int
    end_line: int
    bases: list[str]
    methods: list[str]
    has_docstring: bool


class ParseError(TypedDict):
    """Why the file did not parse; line and column are None when Python gives none."""

    type: str
    message: str
    line: int | None
    column: int | None


def rank(complexity: int) -> str:
    """radon's letter grade: A 1-5, B 6-10, C 11-20, D 21-30, E 31-40, F 41+."""
    for limit, letter in ((5, "A"), (10, "B"), (20, "C"), (30, "D"), (40, "E")):
        if complexity <= limit:
            return letter
    return "F"


class _Complexity(ast.NodeVisitor):
    """Counts decision points of one function body, not descending into nested scopes."""

    def __init__(self) -> None:
        self.value = 1

    def _scope(self, node: ast.AST) -> None:  # nested def/class: measured separately
        return None

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def _branch(self, node: ast.AST) -> None:
        self.value += 1
        self.generic_visit(node)

    visit_If = visit_IfExp = visit_ExceptHandler = visit_Assert = visit_match_case = _branch

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        self.value += 1 + (1 if node.orelse else 0)
        self.generic_visit(node)

    visit_For = visit_AsyncFor = visit_While = _loop

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self.value += len(node.values) - 1
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.value += 1 + len(node.ifs)
        self.generic_visit(node)


def _complexity(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    counter = _Complexity()
    for statement in node.body:
        counter.visit(statement)
    return counter.value


def _arg_count(args: ast.arguments) -> int:
    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
    return count + (1 if args.vararg else 0) + (1 if args.kwarg else 0)


def _name(node: ast.expr) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, AttributeError):  # pragma: no cover - unparse handles every parsed node
        return type(node).__name__


def _collect(tree: ast.Module) -> tuple[list[FunctionInfo], list[ClassInfo], list[str]]:
    functions: list[FunctionInfo] = []
    classes: list[ClassInfo] = []
    imports: set[str] = set()

    def walk(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = prefix + child.name
                functions.append(
                    {
                        "name": child.name,
                        "qualname": qualname,
                        "line": child.lineno,
                        "end_line": child.end_lineno or child.lineno,
                        "args": _arg_count(child.args),
                        "complexity": (value := _complexity(child)),
                        "rank": rank(value),
                        "is_async": isinstance(child, ast.AsyncFunctionDef),
                        "is_method": in_class,
                        "decorators": [_name(d) for d in child.decorator_list],
                        "has_docstring": ast.get_docstring(child) is not None,
                    }
                )
                walk(child, qualname + ".<locals>.", False)
            elif isinstance(child, ast.ClassDef):
                qualname = prefix + child.name
                classes.append(
                    {
                        "name": child.name,
                        "qualname": qualname,
                        "line": child.lineno,
                        "end_line": child.end_lineno or child.lineno,
                        "bases": [_name(b) for b in child.bases],
                        "methods": [
                            m.name
                            for m in child.body
                            if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
                        ],
                        "has_docstring": ast.get_docstring(child) is not None,
                    }
                )
                walk(child, qualname + ".", True)
            else:
                if isinstance(child, ast.Import):
                    imports.update(alias.name for alias in child.names)
                elif isinstance(child, ast.ImportFrom):
                    imports.add("." * child.level + (child.module or ""))
                walk(child, prefix, in_class)

    walk(tree, "", False)
    return functions, classes, sorted(imports)


def _line_counts(source: str) -> dict[str, int]:
    lines = source.splitlines()
    total = len(lines)
    code: set[int] = set()
    comments: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments.add(tok.start[0])
            elif tok.type not in _NOISE:
                code.update(range(tok.start[0], tok.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        # A file that does not tokenize: classify line by line.
        code = {i for i, text in enumerate(lines, 1) if text.strip() and not text.lstrip().startswith("#")}
        comments = {i for i, text in enumerate(lines, 1) if text.lstrip().startswith("#")}
    code_lines = len({n for n in code if n <= total})
    comment_lines = len({n for n in comments if n <= total} - code)
    return {
        "total_lines": total,
        "code_lines": code_lines,
        "comment_lines": comment_lines,
        "blank_lines": total - code_lines - comment_lines,
    }


def _read_source(path: str, ctx: SkillContext | None) -> tuple[str, str]:
    file = allowed_path(ctx, path)
    if not file.exists():
        raise SkillRunError(f"file not found: {path}", hint="check the path (list-files finds files)")
    if file.is_dir():
        raise SkillRunError(
            f"{path} is a directory",
            hint="analyse one file at a time; list-files with pattern '**/*.py' lists a folder's files",
        )
    try:
        with tokenize.open(file) as handle:  # honours PEP 263 coding cookies and BOMs
            return handle.read(), str(file)
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise SkillRunError(
            f"{path} is not readable as Python source: {exc}",
            hint="code-analyzer reads Python files (UTF-8 or with a coding declaration)",
        ) from None


def _parse(source: str, filename: str) -> tuple[ast.Module | None, ParseError | None, list[str]]:
    # Invalid escape sequences and the like are warnings at parse time; record them instead
    # of letting a strict warnings filter turn them into a SyntaxError.
    with _WARNINGS_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            tree = ast.parse(source, filename=filename, type_comments=False)
        except SyntaxError as exc:
            error: ParseError = {
                "type": type(exc).__name__,
                "message": exc.msg,
                "line": exc.lineno,
                "column": exc.offset,
            }
            return None, error, []
        except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
            return None, {"type": type(exc).__name__, "message": str(exc), "line": None, "column": None}, []
    notes = [
        f"line {w.lineno}: {w.message}"
        for w in caught
        if w.filename == filename and issubclass(w.category, SyntaxWarning | DeprecationWarning)
    ]
    return tree, None, notes


def analyze(
    path: str | None = None,
    source: str | None = None,
    complexity_threshold: int = 10,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    if (path is None) == (source is None):
        raise SkillRunError(
            "give exactly one of `path` or `source`",
            hint="path analyses a file; source analyses Python text passed directly",
        )
    if path is not None:
        source, filename = _read_source(path, ctx)
    else:
        filename = "<source>"
    assert source is not None
    tree, error, notes = _parse(source, filename)
    functions, classes, imports = _collect(tree) if tree is not None else ([], [], [])
    complexities = [f["complexity"] for f in functions]
    return {
        "path": filename if path is not None else None,
        "ok": error is None,
        "error": error,
        "warnings": notes,
        **_line_counts(source),
        "functions": functions,
        "classes": classes,
        "imports": imports,
        "function_count": len(functions),
        "class_count": len(classes),
        "max_complexity": max(complexities, default=0),
        "average_complexity": round(sum(complexities) / len(complexities), 2) if complexities else 0.0,
        "complex_functions": [f["qualname"] for f in functions if f["complexity"] > complexity_threshold],
        "has_module_docstring": tree is not None and ast.get_docstring(tree) is not None,
    }
