"""The `{{ }}` expression language (SPEC 4) at unit level: types, scope access, errors, sandbox."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.errors import ExpressionError
from pipelines.language.expressions import (
    HELPERS,
    evaluate,
    is_template,
    referenced_names,
    render,
    render_text,
    syntax_error,
    truthy,
)

SCOPE: dict[str, Any] = {
    "files": {"paths": ["a.py", "b/c.py"], "count": 2},
    "result": {"items": [1, 2, 3], "count": 3},
    "d": {"keys": "the keys key", "values": [9]},
    "n": 3,
    "x": None,
    "xs": [1, 2, 3],
    "done": False,
    "name": "Ada",
    "loop": {"index": 2, "index0": 1, "first": False},
    "rows": [{"kind": "a", "v": 1}, {"kind": "b", "v": 2}, {"kind": "a", "v": 3}],
}


def _error(template: str, scope: dict[str, Any] | None = None) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        render_text(template, SCOPE if scope is None else scope)
    return caught.value


# -- native types


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ files.paths }}", ["a.py", "b/c.py"]),
        ("{{ n + 1 }}", 4),
        ("{{ x }}", None),
        ("{{ done }}", False),
        ("{{ n > 2 }}", True),
        ("{{ result }}", {"items": [1, 2, 3], "count": 3}),
        ("  {{ n * 2 }}\n", 6),
        ("{{ xs | map('string') | list }}", ["1", "2", "3"]),
        ("{{ xs | map('string') }}", ["1", "2", "3"]),
        ("{{ range(3) }}", [0, 1, 2]),
        ("{{ 'yes' if done else 'no' }}", "no"),
        ("{{ 'never' if done }}", None),
    ],
)
def test_a_lone_expression_keeps_its_native_type(template: str, expected: Any) -> None:
    assert render_text(template, SCOPE) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("count: {{ n }}", "count: 3"),
        ("{{ n }}{{ n }}", "33"),
        ("{{ name }} has {{ xs | length }} items", "Ada has 3 items"),
        ("x={{ x }}, done={{ done }}", "x=null, done=false"),
        ("paths: {{ files.paths }}", 'paths: ["a.py", "b/c.py"]'),
        ("{{ 'n=' ~ n ~ ' x=' ~ x }}", "n=3 x=null"),
        ("{{ xs | join(', ') }}", "1, 2, 3"),
        ("{% for p in files.paths %}[{{ loop.index }}:{{ p }}]{% endfor %}", "[1:a.py][2:b/c.py]"),
        ("line\n", "line\n"),
        ("{{ name }}\n", "Ada"),
        ("{{ name }}:\n{{ n }}\n", "Ada:\n3\n"),
        ("{% for x in xs %}\n- {{ x }}\n{% endfor %}\n", "- 1\n- 2\n- 3\n"),
    ],
)
def test_text_around_an_expression_makes_a_string(template: str, expected: str) -> None:
    assert render_text(template, SCOPE) == expected


def test_a_lone_name_returns_the_scope_object_itself() -> None:
    assert render_text("{{ files.paths }}", SCOPE) is SCOPE["files"]["paths"]


def test_render_walks_dicts_and_lists_and_returns_a_new_structure() -> None:
    params = {"path": "{{ files.paths[0] }}", "opts": {"n": "{{ n }}", "tags": ["{{ name }}", "lit", 5]}, "k": None}
    rendered = render(params, SCOPE)
    assert rendered == {"path": "a.py", "opts": {"n": 3, "tags": ["Ada", "lit", 5]}, "k": None}
    assert params["opts"]["n"] == "{{ n }}"


def test_is_template_recognises_expressions_and_statements() -> None:
    assert is_template("{{ x }}") and is_template("{% if x %}y{% endif %}")
    assert not is_template("plain") and not is_template(5) and not is_template("100% {x}")


def test_tojson_writes_plain_json_without_html_escaping() -> None:
    assert render_text("{{ {'a': '<b>'} | tojson }}", SCOPE) == '{"a": "<b>"}'
    assert render_text("{{ '[1, 2]' | fromjson }}", SCOPE) == [1, 2]


# -- key-first access


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ result.items }}", [1, 2, 3]),
        ("{{ d.keys }}", "the keys key"),
        ("{{ d.values }}", [9]),
        ("{{ result['count'] }}", 3),
        ("{{ xs[0] }} {{ xs[-1] }}", "1 3"),
        ("{{ files.keys() | list }}", ["paths", "count"]),
        ("{{ files.get('nope', 'fallback') }}", "fallback"),
        ("{{ name.upper() }}", "ADA"),
        ("{{ 'a,b'.split(',') }}", ["a", "b"]),
        ("{{ loop.index }}", 2),
        ("{{ rows | selectattr('kind', 'equalto', 'a') | map(attribute='v') | sum }}", 4),
        ("{% for g in rows | groupby('kind') %}{{ g.grouper }}={{ g.list | length }};{% endfor %}", "a=2;b=1;"),
    ],
)
def test_dotted_access_reads_keys_first_then_safe_attributes(template: str, expected: Any) -> None:
    assert render_text(template, SCOPE) == expected


def test_a_method_left_uncalled_is_an_error_not_a_value() -> None:
    assert "function, not a value" in _error("{{ files.items }}").message


# -- undefined names and missing keys


def test_an_undefined_variable_names_itself_and_suggests_a_close_name() -> None:
    error = _error("{{ nn + 1 }}")
    assert error.message == "undefined variable 'nn' in '{{ nn + 1 }}'"
    assert error.hint == "did you mean 'n'?"
    assert error.expression == "{{ nn + 1 }}"


def test_an_undefined_variable_without_a_close_name_lists_the_scope() -> None:
    error = _error("{{ zzz.y }}", {"alpha": 1, "beta": 2})
    assert error.message == "undefined variable 'zzz' in '{{ zzz.y }}'"
    assert error.hint == "names in scope: alpha, beta"


def test_a_missing_key_lists_the_keys_that_exist() -> None:
    error = _error("{{ result.itms }}")
    assert error.message == "'result' has no key 'itms' (keys: items, count) in '{{ result.itms }}'"
    assert error.hint == "did you mean 'items'?"


def test_a_missing_key_used_inside_a_filter_is_still_reported_as_missing() -> None:
    assert "'result' has no key 'itms'" in _error("{{ result.itms | length }}").message
    assert "undefined variable 'nope'" in _error("{{ nope | tojson }}").message


def test_an_index_out_of_range_says_how_many_items_there_are() -> None:
    assert "index 7 is out of range: 'xs' has 3 items" in _error("{{ xs[7] }}").message


def test_a_key_of_null_says_the_value_is_null() -> None:
    assert "'x' is null, so it has no 'y'" in _error("{{ x.y }}").message


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ nope is defined }}", False),
        ("{{ n is defined }}", True),
        ("{{ nope | default(7) }}", 7),
        ("{{ result.itms | default([]) }}", []),
        ("{{ nope.deeper.still | default('d') }}", "d"),
        ("{{ 'set' if result.count is defined else 'unset' }}", "set"),
    ],
)
def test_default_and_is_defined_handle_missing_names(template: str, expected: Any) -> None:
    assert render_text(template, SCOPE) == expected


@pytest.mark.parametrize(
    ("template", "missing"),
    [
        ("{{ [''] | map(attribute='__class__') | list }}", "'__class__'"),  # the finding of issue 26
        ("{{ rows | map(attribute='nope') | list }}", "'nope'"),
        ("{{ {'a': [1, {'b': result.nope}]} }}", "'nope'"),
        ("{{ [files.paths, [name, d.missing]] }}", "'missing'"),
        ("{{ rows | map(attribute='nope') | list | tojson }}", "'nope'"),
        ("text around {{ rows | map(attribute='nope') | list }}", "'nope'"),
    ],
)
def test_a_missing_value_inside_a_list_or_mapping_is_an_error_naming_it_and_the_expression(
    template: str, missing: str
) -> None:
    error = _error(template)
    assert missing in error.message and error.expression == template, error.message


def test_a_plain_undefined_inside_a_value_is_null_as_at_the_top() -> None:
    assert render_text("{{ [n if done, {'k': x if done}] }}", SCOPE) == [None, {"k": None}]
    assert render_text("{{ n if done }}", SCOPE) is None


# -- conditions


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("{{ not done }}", True),
        ("not done", True),
        ("n > 1", True),
        ("{{ n > 5 }}", False),
        ("xs | length == 3 and name == 'Ada'", True),
        ("result.count", 3),
    ],
)
def test_evaluate_accepts_a_condition_with_or_without_braces(condition: str, expected: Any) -> None:
    assert evaluate(condition, SCOPE) == expected


def test_evaluate_returns_a_value_that_is_not_text_as_it_is() -> None:
    assert evaluate(True, SCOPE) is True  # type: ignore[arg-type]  # YAML's `condition: true`
    assert evaluate("  ", SCOPE) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (None, False),
        (0, False),
        (2, True),
        ([], False),
        ([0], True),
        ({}, False),
        ("yes", True),
        ("false", False),
        (" False ", False),
        ("no", False),
        ("off", False),
        ("0", False),
        ("null", False),
        ("", False),
        ("0.0", True),
    ],
)
def test_truthy_follows_python_except_for_words_that_mean_false(value: Any, expected: bool) -> None:
    assert truthy(value) is expected


# -- what the verifier uses


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("{{ a.b + c[0] }}", {"a", "c"}),
        ("{% for x in xs %}{{ x }}{% endfor %}", {"xs"}),
        ("{{ loop.index }}", {"loop"}),
        ("{% for x in xs %}{{ loop.index }}{% endfor %}", {"xs"}),
        ("{% set t = a %}{{ t ~ b }}", {"a", "b"}),
        ("{{ list_files(directory) | map('basename') | list }}", {"directory"}),
        ("{{ items | selectattr('ok') | map(attribute='path') | list }}", {"items"}),
        ({"p": "{{ a }}", "q": ["{{ b.c }}", "plain", 3], "r": "lit"}, {"a", "b"}),
        ("{{ x is defined }} {{ y.z | default(1) }} {{ y.w }}", {"y"}),
        ("no template here", set()),
        ("{{ broken + }}", set()),
    ],
)
def test_referenced_names_are_the_root_names_read_from_scope(value: Any, names: set[str]) -> None:
    assert referenced_names(value) == names


def test_referenced_names_reads_a_bare_condition_when_asked() -> None:
    assert referenced_names("count > limit", expression=True) == {"count", "limit"}
    assert referenced_names("count > limit") == set()


def test_syntax_error_reports_the_first_broken_template_with_its_line() -> None:
    assert syntax_error({"a": "{{ ok }}", "b": ["fine"]}) is None
    error = syntax_error({"a": "{{ ok }}", "b": ["line one\n{{ x | }}"]})
    assert error is not None
    assert error.message.startswith("syntax error in 'line one\n{{ x | }}': ")
    assert error.line == 2
    assert "{{ name.key }}" in error.hint


def test_syntax_error_names_an_unknown_filter_and_suggests_one() -> None:
    error = syntax_error("{{ xs | lenght }}")
    assert error is not None
    assert error.message == "unknown filter 'lenght' in '{{ xs | lenght }}'"
    assert error.hint == "did you mean 'length'?"


def test_syntax_error_reports_sandbox_violations_before_anything_runs() -> None:
    error = syntax_error("{{ x.__class__ }}")
    assert error is not None and "access to '__class__'" in error.message
    assert syntax_error("x > ", expression=True) is not None


def test_a_template_that_does_not_compile_fails_to_render_with_the_same_error() -> None:
    assert _error("{{ a + }}").message.startswith("syntax error in '{{ a + }}'")


# -- helpers


def test_list_files_returns_sorted_paths_matching_a_pattern(tmp_path: Path) -> None:
    for name in ["b.py", "a.py", "notes.txt", "sub/c.py"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    scope = {"dir": str(tmp_path)}
    assert render_text("{{ list_files(dir, '*.py') | map('basename') | list }}", scope) == ["a.py", "b.py"]
    assert render_text("{{ list_files(dir, '**/*.py') | length }}", scope) == 3
    assert render_text("{{ list_files(dir) | map('basename') | list }}", scope) == ["a.py", "b.py", "notes.txt"]
    assert "is not a directory" in _error("{{ list_files(dir ~ '/nope') }}", scope).message


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ basename('a/b/c.py') }}", "c.py"),
        ("{{ dirname('a/b/c.py') }}", "a/b"),
        ("{{ 'a/b/c.py' | basename }}", "c.py"),
        ("{{ join_path('a', 'b', 'c.py') }}", "a/b/c.py"),
        ("{{ to_json({'a': [1, none]}) }}", '{"a": [1, null]}'),
        ("{{ from_json('{\"a\": true}') }}", {"a": True}),
        ("{{ length(xs) }}", 3),
        ("{{ dict(a=1, b=n) }}", {"a": 1, "b": 3}),
        ("{{ range(1, 10, 4) }}", [1, 5, 9]),
    ],
)
def test_helpers_compute_what_their_docs_say(template: str, expected: Any) -> None:
    assert render_text(template, SCOPE) == expected


def test_now_is_an_iso_time_with_an_offset() -> None:
    stamp = render_text("{{ now() }}", {})
    assert len(stamp) == 25 and stamp[10] == "T" and stamp[19] in "+-"


def test_helpers_table_lists_every_callable_helper() -> None:
    expected = {"list_files", "basename", "dirname", "join_path", "now", "to_json", "from_json", "length", "range"}
    assert expected | {"dict"} == set(HELPERS)


# -- errors never escape as raw Python or Jinja exceptions


@pytest.mark.parametrize(
    "template",
    [
        "{{ 'a' + 1 }}",
        "{{ 1 / 0 }}",
        "{{ xs | fromjson }}",
        "{{ xs | sort(attribute='a.b') }}",
        "{{ n() }}",
        "{{ name | tojson(indent='x') }}",
        "{{ 2 ** 65536 }} as text",
        "{{ xs | unknown_filter }}",
        "{{ xs is unknown_test }}",
        "{{ " + "(" * 300 + "1" + ")" * 300 + " }}",
    ],
)
def test_every_failure_is_an_expression_error(template: str) -> None:
    error = _error(template)
    assert error.message and error.expression == template


# -- the sandbox


def _bounded(template: str, scope: dict[str, Any], seconds: float) -> BaseException | Any:
    """Render in a thread and give up after `seconds`, so a sandbox hole fails instead of hanging."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(render_text(template, scope))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{template!r} ran for more than {seconds} s"
    return outcome[0]


PAYLOADS = [
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "access to '__"),
    ("{{ cycler.__init__.__globals__ }}", "access to '__"),
    ("{{ cycler }}", "undefined variable 'cycler'"),
    ("{{ self._TemplateReference__context }}", "not allowed in a pipeline expression: 'self'"),
    ("{{ lipsum.__globals__['os'] }}", "access to '__globals__'"),
    ("{{ joiner.__init__.__globals__ }}", "access to '__"),
    ("{{ namespace.__init__.__globals__ }}", "access to '__"),
    ("{{ x.__class__ }}", "access to '__class__'"),
    ("{{ (1).__class__.__base__ }}", "access to '__"),
    ("{{ xs['__class__'] }}", "access to '__class__'"),
    ("{{ list_files.__globals__ }}", "access to '__globals__'"),
    ("{{ range(10**9) | list }}", "range() of more than 100,000 items is too large"),
    ("{{ 'a' * 10**9 }}", "repeating a str 1,000,000,000 times is too large"),
    ("{{ [1] * 10**9 }}", "repeating a list 1,000,000,000 times is too large"),
    ("{{ 10 ** (10 ** 10) }}", "the power is too large"),
    ("{{ '%999999999d' % 1 }}", "'%' string formatting"),
    ("{{ '{0.__class__}'.format(x) }}", "the 'format' method of a str value"),
    ("{{ name.format_map(result) }}", "the 'format_map' method of a str value"),
    ("{{ ''.join(xs) }}", "the 'join' method of a str value"),
    ("{{ 'a'.ljust(10**9) }}", "the 'ljust' method of a str value"),
    ("{{ x | attr('__class__') }}", "access to '__class__'"),
    ("{{ xs | map('attr', '__class__') | list }}", "access to '__class__'"),
    ("{{ xs | selectattr('__class__') | list }}", "access to '__class__'"),
    ("{{ name | attr('_TemplateReference__context') }}", "access to '_TemplateReference__context'"),
    ("{{ (xs | map('string')).gi_frame }}", "access to 'gi_frame' of a generator value"),
    ("{{ dict.mro() }}", "access to 'mro' of 'dict'"),
    ("{{ xs.append(4) }}", "the 'append' method of a list value"),
    ("{{ result.update({'a': 1}) }}", "'result' has no key 'update'"),
    ("{{ 'a' | center(10**9) }}", "a width of 1,000,000,000 is too large"),
    ("{{ ('a' * 100000) | replace('a', 'a' * 100000) }}", "the result of replace is too large"),
    ("{{ xs | batch(10**9, 0) | list }}", "is too large"),
    ("{{ xs | tojson(indent=10**9) }}", "the JSON text is too large"),
    ("{{ range(100000) | join('a' * 1000000) }}", "the result of join is too large"),
    ("{{ xs | format('%s') }}", "unknown filter 'format'"),
    ("{{ name | indent(10**9) }}", "unknown filter 'indent'"),
    (
        "{% set a = ['x' * 100000] * 10 %}{% set b = [a, a, a, a, a, a, a, a, a, a] %}"
        "{% set c = [b, b, b, b, b, b, b, b, b, b] %}{{ c }}",
        "the JSON text is too large",
    ),
    ("{% set a = 'x' * 1000000 %}{% set a = a + a + a + a + a + a + a + a + a + a + a %}{{ a }}", "too large"),
    ("{% for i in range(10**6) %}{% for j in range(10**6) %}{% endfor %}{% endfor %}", "range() of more than"),
    ("{% for i in range(100000) %}{{ 'x' * 200 }}{% endfor %}", "text of more than 10,000,000 characters"),
    ("{{ request }}", "undefined variable 'request'"),
    ("{{ config }}", "undefined variable 'config'"),
    ("{{ environ }}", "undefined variable 'environ'"),
    ("{% import 'os' as os %}", "not allowed in a pipeline expression: {% import %}"),
    ("{% from 'os' import path %}", "not allowed in a pipeline expression: {% from ... import %}"),
    ("{% include '/etc/passwd' %}", "not allowed in a pipeline expression: {% include %}"),
    ("{% extends '/etc/passwd' %}", "not allowed in a pipeline expression: {% extends %}"),
    ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "not allowed in a pipeline expression: {% macro %}"),
    ("{% for x in xs recursive %}{{ loop(x) }}{% endfor %}", "recursive loops"),
    ("{{ now }}", "is a function, not a value"),
]


@pytest.mark.parametrize(("payload", "message"), PAYLOADS)
def test_escape_payloads_fail_quickly_with_a_clear_error(payload: str, message: str) -> None:
    outcome = _bounded(payload, SCOPE, seconds=5)  # a payload the limits miss would time out here
    assert isinstance(outcome, ExpressionError), f"{payload!r} returned {outcome!r:.200}"
    assert message in outcome.message


def test_a_loop_bomb_is_stopped_at_the_time_limit() -> None:
    started = time.perf_counter()
    outcome = _bounded("{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}", {}, 10)
    assert isinstance(outcome, ExpressionError)
    assert outcome.message.startswith("expression took too long (more than 2 s)")
    assert time.perf_counter() - started < 4


def test_no_error_message_carries_python_internals() -> None:
    for payload, _ in PAYLOADS[:12]:
        outcome = _bounded(payload, SCOPE, seconds=5)
        assert isinstance(outcome, ExpressionError)
        text = json.dumps([outcome.message, outcome.hint])
        assert "<class" not in text and "<function" not in text and "module" not in text
