"""The `{{ }}` expression language of pipelines (SPEC 4): sandboxed Jinja2 with native types.

Reference (the user's documentation, docs/pipelines.md, copies it):

- `"{{ expr }}"` alone in a value (whitespace around is fine) keeps the native type of `expr`: a
  list stays a list, a number a number, `null` stays `null`. Text around it makes a string, and
  values are written into text the JSON way: strings and numbers as they are, `null`, `true`,
  `false`, lists and mappings as JSON. The same rule applies to `~` and the `string` filter.
- `a.b` reads the key `b` of a mapping first (`result.items` is the key `items`, not the dict
  method), then a safe attribute. `a['b']` and `a[0]` read keys and indexes.
- Names in scope: inputs, state variables, the outputs of earlier steps by id, loop variables and
  `loop` (see docs/pipelines.md#scope). A name not in scope, or a missing key, is an error naming
  what exists; use `x is defined` or `x | default(v)` for values that may be missing.
- Conditions (`condition:`, `while`, `if`) accept `"{{ x > 1 }}"` or bare `"x > 1"`. Truth is
  Python's, except that the strings `""`, `"false"`, `"no"`, `"off"`, `"0"`, `"null"`, `"none"`
  (any case, surrounding spaces ignored) are false, so a flag passed as text behaves.
- Helpers (the only functions that can be called): `list_files(dir=".", pattern="*")` sorted
  paths of files (`**/*.py` recurses; at most 10,000; any directory the server can read,
  relative to its working directory), `basename(p)`, `dirname(p)`, `join_path(a, b, ...)`,
  `now()` local ISO time, `to_json(v, indent=None)`, `from_json(text)`, `length(v)`,
  `range(...)` (at most 100,000 numbers, as a list), `dict(k=v, ...)`. Methods of plain data can
  be called where they cannot grow data: string `lower upper strip lstrip rstrip split rsplit
  splitlines startswith endswith find rfind count title capitalize casefold swapcase partition
  rpartition removeprefix removesuffix` and the `is...` tests such as `isdigit`, mapping `get keys items values`, list
  `count index`, and `loop.cycle`/`loop.changed`.
- Filters: `abs attr basename batch capitalize center count default (d) dictsort dirname
  filesizeformat first float fromjson groupby int items join last length list lower map max min
  reject rejectattr replace reverse round select selectattr slice sort string striptags sum title
  tojson trim truncate unique upper urlencode wordcount`; all of Jinja's tests (`is defined`,
  `is number`, `is in` ...) and `is failed` (a step that failed under `on_error: continue`).
  Removed: `format`, `indent`, `wordwrap`, `pprint`, `random`,
  `urlize`, `xmlattr`, the HTML `escape` family, and the globals `lipsum`, `cycler`, `joiner`,
  `namespace`. Statements: `{% if %}`, `{% for %}`, `{% set %}`, `{% with %}`, `{% filter %}`,
  `{% raw %}`; not `include`, `import`, `extends`, `macro`, `call`, `block`. The newline right
  after a `{% %}` tag is dropped, so tags on lines of their own leave no blank lines; a final
  newline is kept.
- Limits: 2 s per render, 10,000,000 characters of output or of value size, lists of at most
  1,000,000 items from operators, integers of at most 14,000 bits. Nothing reaches names that
  start with `_`, functions other than the helpers, files other than through `list_files`, or
  environment variables. Every violation is an `ExpressionError`.
"""

from __future__ import annotations

import difflib
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, cast

from jinja2 import TemplateError, TemplateSyntaxError, meta, nodes
from jinja2.environment import Template
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.utils import missing

from ..errors import ExpressionError
from . import sandbox
from .sandbox import ENVIRONMENT, GLOBALS, HELPERS, PipelineEnvironment, UndefinedUse

__all__ = [
    "HELPERS",
    "evaluate",
    "is_template",
    "names_read",
    "referenced_names",
    "render",
    "render_template",
    "render_text",
    "syntax_error",
    "truthy",
]

_RESULT = "result"
_FALSE_TEXT = frozenset({"", "false", "no", "off", "0", "null", "none"})
_REMOVED_GLOBALS = frozenset({"lipsum", "cycler", "joiner", "namespace", "self"})
_LOADS = "an expression cannot load templates or files"
_NOT_ALLOWED: dict[type[nodes.Node], tuple[str, str]] = {
    nodes.Extends: ("{% extends %}", _LOADS),
    nodes.Include: ("{% include %}", _LOADS),
    nodes.Import: ("{% import %}", _LOADS),
    nodes.FromImport: ("{% from ... import %}", _LOADS),
    nodes.Macro: ("{% macro %}", "write the text out, or use a loop"),
    nodes.CallBlock: ("{% call %}", "write the text out, or use a loop"),
    nodes.Block: ("{% block %}", "pipeline expressions have no template inheritance"),
}


def is_template(value: Any) -> bool:
    """Whether `value` is a string that holds an expression or a statement and must be rendered."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def render(value: Any, scope: Mapping[str, Any]) -> Any:
    """Render every template string in a structure of dicts and lists (keys are left as they are)."""
    kind = value.__class__  # as `type(value)`, typed Any rather than type[Unknown]
    if kind in _SCALARS:
        return value
    if kind is str or isinstance(value, str):
        return _run(_compile(value, False), scope) if ("{{" in value or "{%" in value) else value
    if kind is dict or isinstance(value, Mapping):
        return {key: render(item, scope) for key, item in cast(Mapping[Any, Any], value).items()}
    if kind is list or isinstance(value, list | tuple):
        return [render(item, scope) for item in cast(list[Any], value)]
    return value


_SCALARS = frozenset({int, float, bool, type(None)})


def render_text(text: str, scope: Mapping[str, Any]) -> Any:
    """Render one string: a lone `{{ expr }}` keeps its native type, anything else is a string."""
    return _run(_compile(text, False), scope)


def evaluate(expression: str | bool, scope: Mapping[str, Any]) -> Any:
    """Evaluate an expression given with or without its braces (`"{{ x > 1 }}"` or `"x > 1"`).

    A YAML boolean (`condition: true`) is returned as it is.
    """
    if not isinstance(expression, str):
        return expression
    if is_template(expression):
        return render_text(expression, scope)
    return _run(_compile(expression, True), scope) if expression.strip() else None


def _run(program: _Program, scope: Mapping[str, Any]) -> Any:
    path = program.path
    if path is not None:  # fast path: `{{ a }}`, `{{ a.b.c }}` over plain dicts, no Jinja involved
        try:
            value: Any = scope[path[0]]
        except KeyError:
            pass
        else:
            for key in path[1:]:
                if value.__class__ is dict and key in value:  # as `type(value)`, without narrowing to Unknowns
                    value = value[key]
                else:
                    break
            else:
                return value
    return _execute(program, scope)


def truthy(value: Any) -> bool:
    """Truth of a condition's value: Python's, with the usual words for false in strings (module doc)."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_TEXT
    return bool(sandbox.native(value))


def referenced_names(value: Any, *, expression: bool = False) -> set[str]:
    """Root names that the templates in `value` read from scope, for the verifier's undefined check.

    Names bound inside a template (`{% for x in xs %}`, `{% set %}`) and the helpers are not
    included, nor names read only where absence is handled (`x is defined`, `x.y | default(1)`).
    With `expression=True` a string without braces is read as a bare expression (the form
    `condition:` accepts). Templates that do not compile contribute nothing; `syntax_error`
    reports them.
    """
    names: set[str] = set()
    for text in _strings(value):
        if is_template(text) or (expression and text.strip()):
            program = _compile(text, not is_template(text))
            names |= program.names
    return names


def names_read(value: Any, *, expression: bool = False) -> set[str] | None:
    """Every root name the templates in `value` may read, guarded reads included; None if one
    does not compile (then anything may be read).

    The runtime sends a parallel loop's items only these names instead of the whole scope: a
    name read under `default(...)` must travel too, or the default would wrongly apply.
    """
    names: set[str] = set()
    for text in _strings(value):
        if is_template(text) or (expression and text.strip()):
            program = _compile(text, not is_template(text))
            if program.error is not None:
                return None
            names |= program.reads
    return names


def syntax_error(value: Any, *, expression: bool = False) -> ExpressionError | None:
    """The first template in `value` that does not compile (syntax, unknown filter, sandbox), or None.

    The error's `line` is the line within the string when Jinja knows it.
    """
    for text in _strings(value):
        if is_template(text) or (expression and text.strip()):
            error = _compile(text, not is_template(text)).error
            if error is not None:
                return error
    return None


# -- compilation


@dataclass(slots=True)
class _Program:
    """One checked source text, cached: what it reads, and how to run it.

    Python code is generated on the first run, not when the text is checked: verifying a
    pipeline (every expression, at server start-up) then costs a parse, not a compile.
    """

    source: str
    kind: Literal["plain", "lone", "text"]
    ast: nodes.Template | None = None
    path: tuple[str, ...] | None = None
    names: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()
    """`names` plus the names read only under `is defined` / `default(...)`."""
    error: ExpressionError | None = None
    _template: Template | None = None

    @property
    def template(self) -> Template | None:
        if self._template is None and self.ast is not None:
            token = sandbox.start_clock()
            try:
                self._template = ENVIRONMENT.from_string(self.ast)
            except (TemplateError, RecursionError, SyntaxError, MemoryError) as exc:  # code generation limits
                self.error = ExpressionError(f"cannot compile {_quote(self.source)}: {exc}", expression=self.source)
                self.ast = None
                raise self.error from None
            finally:
                sandbox.stop_clock(token)
        return self._template


@lru_cache(maxsize=4096)
def _compile(source: str, bare: bool) -> _Program:
    """Parse, check and compile a template (or a bare expression when `bare`), errors included."""
    if not bare and not is_template(source):
        return _Program(source, "plain")
    token = sandbox.start_clock()
    try:
        if bare:
            parser = Parser(ENVIRONMENT, source, state="variable")
            expr: nodes.Expr | None = parser.parse_expression()
            if not parser.stream.eos:
                raise TemplateSyntaxError("unexpected text after the expression", parser.stream.current.lineno)
            ast = nodes.Template([nodes.Output([expr])], lineno=1)
            ast.set_environment(ENVIRONMENT)
        else:
            ast = ENVIRONMENT.parse(source)
            expr = lone_expression(ast)
        _check(ast)
        reads = frozenset(meta.find_undeclared_variables(ast) - HELPERS.keys())
        names = frozenset(_unguarded(ast, set(reads)))
        _rewrite(ast)
        if expr is None:
            return _Program(source, "text", ast, names=names, reads=reads)
        body = nodes.Template([nodes.Assign(nodes.Name(_RESULT, "store"), expr, lineno=1)], lineno=1)
        body.set_environment(ENVIRONMENT)
        return _Program(source, "lone", body, _path(expr), names, reads)
    except TemplateSyntaxError as exc:
        message = f"syntax error in {_quote(source)}: {exc.message}"
        error = ExpressionError(message, hint=_SYNTAX_HINT, expression=source, line=exc.lineno)
        return _Program(source, "plain", error=error)
    except ExpressionError as exc:
        return _Program(source, "plain", error=_located(exc, source))
    except (RecursionError, SyntaxError, MemoryError):  # Python's own parser limits, hit by deep nesting
        error = ExpressionError(f"{_quote(source)} is nested too deeply", expression=source)
        return _Program(source, "plain", error=error)
    finally:
        sandbox.stop_clock(token)


_SYNTAX_HINT = "expressions look like {{ name.key }}, {{ items | length }}, {{ a if cond else b }}"


def lone_expression(ast: nodes.Template) -> nodes.Expr | None:
    """The expression of a template that is one `{{ }}` with only whitespace around it."""
    if len(ast.body) != 1 or not isinstance(ast.body[0], nodes.Output):
        return None
    parts = [n for n in ast.body[0].nodes if not (isinstance(n, nodes.TemplateData) and not n.data.strip())]
    if len(parts) == 1 and not isinstance(parts[0], nodes.TemplateData):
        return parts[0]
    return None


def _path(expr: nodes.Expr) -> tuple[str, ...] | None:
    """`('a', 'b', 'c')` for `a.b.c`: the expressions the fast path resolves without Jinja."""
    keys: list[str] = []
    while isinstance(expr, nodes.Getattr):
        keys.append(expr.attr)
        expr = expr.node
    if isinstance(expr, nodes.Name):
        return (expr.name, *reversed(keys))
    return None


def _unguarded(ast: nodes.Template, names: set[str]) -> set[str]:
    """The `names` read at least once outside `is defined` / `is undefined` / `default(...)`."""
    guarded: set[int] = set()
    for node in ast.find_all((nodes.Test, nodes.Filter)):
        if node.name in ("defined", "undefined", "default", "d") and node.node is not None:
            root = node.node
            while isinstance(root, nodes.Getattr | nodes.Getitem):
                root = root.node
            guarded.add(id(root))
    return {n.name for n in ast.find_all(nodes.Name) if n.ctx == "load" and id(n) not in guarded} & names


def _check(ast: nodes.Template, environment: PipelineEnvironment = ENVIRONMENT) -> None:
    """Refuse what the sandbox never allows, before anything runs: the verifier sees it too."""
    for node in ast.find_all(nodes.Node):
        if type(node) in _NOT_ALLOWED:
            raise sandbox.forbidden(*_NOT_ALLOWED[type(node)])
        if isinstance(node, nodes.For) and node.recursive:
            raise sandbox.forbidden("recursive loops")
        if isinstance(node, nodes.Name) and node.name == "self":
            raise sandbox.forbidden("'self'")
        if isinstance(node, nodes.Getattr) and node.attr.startswith("__"):
            raise sandbox.forbidden(f"access to '{node.attr}'", hint="names starting with '_' are internal")
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
            if isinstance(node.arg.value, str) and node.arg.value.startswith("__"):
                raise sandbox.forbidden(f"access to '{node.arg.value}'", hint="names starting with '_' are internal")
        if isinstance(node, nodes.Filter | nodes.Test):
            _check_name(node.name, "filter" if isinstance(node, nodes.Filter) else "test", environment)


def _check_name(name: str, kind: str, environment: PipelineEnvironment = ENVIRONMENT) -> None:
    known = environment.filters if kind == "filter" else environment.tests
    if name not in known or name.startswith("_"):
        public = [n for n in known if not n.startswith("_")]
        raise ExpressionError(
            f"unknown {kind} '{name}'", hint=_did_you_mean(name, public) or f"{kind}s: {', '.join(public)}"
        )


def _rewrite(ast: nodes.Template, environment: PipelineEnvironment = ENVIRONMENT) -> None:
    """Route every loop and every `~` through the sandbox's bounded versions."""
    for node in list(ast.find_all((nodes.For, nodes.Concat))):
        if isinstance(node, nodes.For):
            node.iter = _filter(cast(nodes.Expr, node.iter), sandbox.ITER_FILTER, environment)
        else:
            node.nodes = [_filter(part, sandbox.TEXT_FILTER, environment) for part in node.nodes]


def _filter(node: nodes.Expr, name: str, environment: PipelineEnvironment = ENVIRONMENT) -> nodes.Filter:
    wrapped = nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)
    wrapped.set_environment(environment)
    return wrapped


# -- execution


class _Scope(Mapping[str, Any]):
    """The scope seen by Jinja: the caller's names over the helpers, without copying either."""

    __slots__ = ("_names",)

    def __init__(self, names: Mapping[str, Any]) -> None:
        self._names = names

    def __getitem__(self, key: str) -> Any:
        try:
            return self._names[key]
        except KeyError:
            return GLOBALS[key]

    def __contains__(self, key: object) -> bool:
        return key in self._names or key in GLOBALS

    def __iter__(self) -> Iterator[str]:
        return iter({**GLOBALS, **self._names})

    def __len__(self) -> int:
        return len({**GLOBALS, **self._names})


_RUNTIME_ERRORS = (TemplateError, TypeError, ValueError, ArithmeticError, LookupError, AttributeError, OSError)


def _execute(program: _Program, scope: Mapping[str, Any]) -> Any:
    """Run a compiled program under the deadline and turn every failure into an `ExpressionError`."""
    if program.error is not None:
        error = program.error  # a fresh exception per raise: the cached one is shared between threads
        raise ExpressionError(error.message, hint=error.hint, expression=error.expression, line=error.line)
    if program.template is None:
        return program.source
    token = sandbox.start_clock()
    try:
        context = Context(ENVIRONMENT, cast(dict[str, Any], _Scope(scope)), None, {})
        chunks = program.template.root_render_func(context)
        if program.kind == "lone":
            deque(chunks, maxlen=0)
            value = sandbox.native(context.vars[_RESULT])
            if not isinstance(value, int | float | bool | None):
                # Bounded (shared references explode when sent as JSON), and no undefined inside.
                value = sandbox.defined(value)
            return value
        return _join(chunks)
    except UndefinedUse as exc:
        raise _explain_undefined(exc, program.source, scope) from None
    except ExpressionError as exc:
        raise _located(exc, program.source) from None
    except RecursionError:
        raise ExpressionError(f"{_quote(program.source)} is nested too deeply", expression=program.source) from None
    except _RUNTIME_ERRORS as exc:
        raise _explain_failure(exc, program, scope) from exc
    finally:
        sandbox.stop_clock(token)


def render_template(source: str, scope: Mapping[str, Any], environment: PipelineEnvironment) -> str:
    """Render a whole document that a client sent (a report template) under the same limits.

    The checks, the bounded loops and `~`, the deadline and the output cap of pipeline
    expressions, with `environment`'s own filters; the result is always text.
    """
    token = sandbox.start_clock()
    try:
        try:
            ast = environment.parse(source)
        except TemplateSyntaxError as exc:
            message = f"syntax error at line {exc.lineno}: {exc.message}"
            raise ExpressionError(message, hint=_SYNTAX_HINT, expression=source, line=exc.lineno) from None
        _check(ast, environment)
        _rewrite(ast, environment)
        template = environment.from_string(ast)
        context = Context(environment, {**environment.globals, **scope}, None, {})
        return _join(template.root_render_func(context))
    except UndefinedUse as exc:
        raise _explain_undefined(exc, source, scope) from None
    except ExpressionError:
        raise
    except (RecursionError, MemoryError):
        raise ExpressionError("the template is nested too deeply or builds too much", expression=source) from None
    except _RUNTIME_ERRORS as exc:
        detail = exc.message if isinstance(exc, TemplateError) and exc.message else str(exc)
        raise ExpressionError(f"cannot render the template: {detail}", expression=source) from None
    finally:
        sandbox.stop_clock(token)


def _join(chunks: Iterator[str]) -> str:
    parts: list[str] = []
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > sandbox.MAX_SIZE:
            raise sandbox.too_large(f"text of more than {sandbox.MAX_SIZE:,} characters")
        parts.append(chunk)
        sandbox.check_deadline()
    return "".join(parts)


# -- error messages


def _quote(source: str) -> str:
    text = source.strip()
    return f"'{text[:117]}...'" if len(text) > 120 else f"'{text}'"


def _located(error: ExpressionError, source: str) -> ExpressionError:
    if error.expression:
        return error
    return ExpressionError(f"{error.message} in {_quote(source)}", hint=error.hint, expression=source, line=error.line)


def _did_you_mean(name: str, candidates: Any) -> str:
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=3, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _parent(source: str, name: Any) -> str | None:
    """The text before `.name` or `[name]` in the source: the value that lacks `name`."""
    key = re.escape(str(name))
    match = re.search(rf"([A-Za-z_][\w.]*(?:\[[^\]]*\])*)\s*(?:\.\s*{key}\b|\[\s*['\"]?{key}['\"]?\s*\])", source)
    return match.group(1) if match else None


def _explain_undefined(exc: UndefinedUse, source: str, scope: Mapping[str, Any]) -> ExpressionError:
    name, obj = exc.name, cast(object, exc.obj)
    kind = type(obj).__name__
    quoted = _quote(source)
    if obj is missing:
        message = f"undefined variable '{name}' in {quoted}"
        if name in _REMOVED_GLOBALS:
            hint = f"'{name}' is a Jinja global that pipeline expressions do not provide"
        else:
            known = sorted(scope)
            hint = _did_you_mean(name, [*known, *HELPERS]) or f"names in scope: {', '.join(known[:30]) or '(none)'}"
        return ExpressionError(message, hint=hint, expression=source)
    parent = _parent(source, name)
    owner = f"'{parent}'" if parent else "the value"
    if isinstance(obj, Mapping):
        keys = [str(k) for k in cast(Mapping[Any, Any], obj)]
        listed = ", ".join(keys[:30]) + (", ..." if len(keys) > 30 else "")
        message = f"{owner} has no key '{name}' ({f'keys: {listed}' if keys else 'it is empty'}) in {quoted}"
        hint = _did_you_mean(name, keys) or "use `| default(...)` for a key that may be missing"
    elif isinstance(obj, list | tuple) and isinstance(name, int):
        size = len(cast(list[Any], obj))
        message = f"index {name} is out of range: {owner} has {size} item{'s' * (size != 1)} in {quoted}"
        hint = "use `| first`, `| last` or `| default(...)`"
    elif obj is None:
        message = f"{owner} is null, so it has no '{name}' in {quoted}"
        hint = "check it first: {{ x.y if x else ... }}"
    else:
        message = f"{owner} (a {kind}) has no attribute '{name}' in {quoted}"
        hint = ""
    return ExpressionError(message, hint=hint, expression=source)


def _explain_failure(exc: Exception, program: _Program, scope: Mapping[str, Any]) -> ExpressionError:
    missing_names = sorted(n for n in program.names if n not in scope and n not in GLOBALS)
    if missing_names:  # a filter tripped over an undefined name before it was ever printed
        return _explain_undefined(UndefinedUse(missing_names[0], missing), program.source, scope)
    detail = exc.message if isinstance(exc, TemplateError) and exc.message else str(exc)
    return ExpressionError(f"cannot evaluate {_quote(program.source)}: {detail}", expression=program.source)


def _strings(value: Any) -> Iterator[str]:
    """Every string in a structure of dicts and lists."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in cast(Mapping[Any, Any], value).values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in cast(list[Any], value):
            yield from _strings(item)
