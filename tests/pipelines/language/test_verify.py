"""The pipeline verifier: every problem at once, each at its line and column, with a hint."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from pipelines.errors import Issue
from pipelines.language.loader import load_spec
from pipelines.language.spec import PipelineSpec
from pipelines.language.verify import check_text
from skills import BUILTIN_SKILLS_DIR, Catalog, FolderSource


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog([FolderSource(BUILTIN_SKILLS_DIR, "builtin")])


def yaml_text(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def at(text: str, needle: str, nth: int = 0, offset: int = 0) -> tuple[int, int]:
    """1-based line and column of the `nth` occurrence of `needle` in `text` (plus `offset` characters)."""
    index = -1
    for _ in range(nth + 1):
        index = text.index(needle, index + 1)
    index += offset
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def check(text: str, **kwargs: Any) -> list[Issue]:
    spec, issues = check_text(text, "p.yaml", **kwargs)
    assert spec is not None or issues
    return issues


def only(text: str, code: str, **kwargs: Any) -> Issue:
    found = [i for i in check(text, **kwargs) if i.code == code]
    assert len(found) == 1, found
    return found[0]


def codes(text: str, **kwargs: Any) -> list[str]:
    return [i.code for i in check(text, **kwargs)]


def where(issue: Issue) -> tuple[int, int]:
    return issue.line, issue.col


def spec_of(text: str) -> PipelineSpec:
    return load_spec(yaml_text(text), "other.yaml")[0]


# -- one test per issue kind ------------------------------------------------------------------


def test_a_clean_pipeline_has_no_issues(catalog: Catalog) -> None:
    text = yaml_text("""
        id: clean
        inputs:
          directory: {type: string, default: "."}
        steps:
          - id: files
            skill: list-files
            parameters: {directory: "{{ directory }}", pattern: "**/*.py"}
          - id: analyses
            for: {items: "{{ files.paths }}", variable: file_path, parallel: true, max_parallel: 4}
            skill: code-analyzer
            parameters: {path: "{{ file_path }}"}
        outputs:
          count: "{{ analyses | length }}"
    """)
    assert check(text, catalog=catalog, models=["sonnet"]) == []


def test_duplicate_id_points_at_the_second_and_names_the_first_line() -> None:
    text = yaml_text("""
        id: dup
        steps:
          - id: files
            skill: x
          - id: files
            skill: y
    """)
    issue = only(text, "duplicate-id")
    assert where(issue) == at(text, "files", 1)
    assert "duplicate step id 'files'" in issue.message
    assert "line 3" in issue.hint
    assert issue.file == "p.yaml"


def test_undefined_name_points_at_the_expression_and_suggests_the_close_name() -> None:
    text = yaml_text("""
        id: typo
        inputs:
          directory: {type: string}
        steps:
          - id: files
            skill: list-files
            parameters: {directory: "{{ directroy }}"}
    """)
    issue = only(text, "undefined")
    assert where(issue) == at(text, '"{{ directroy }}"')
    assert issue.message == "'directroy' is not defined here"
    assert issue.hint == "did you mean 'directory'?"
    assert str(issue).startswith(f"p.yaml:{issue.line}:{issue.col}: error: ")


def test_undefined_name_without_a_close_match_lists_the_names_in_scope() -> None:
    text = yaml_text("""
        id: lost
        inputs:
          directory: {type: string}
        steps:
          - id: files
            skill: list-files
            parameters: {directory: "{{ zzz }}"}
    """)
    assert only(text, "undefined").hint == "names in scope here: directory, inputs"


def test_unknown_skill_suggests_the_closest_skill(catalog: Catalog) -> None:
    text = yaml_text("""
        id: skills
        steps:
          - id: files
            skill: list-file
            parameters: {directory: "."}
    """)
    issue = only(text, "unknown-skill", catalog=catalog)
    assert where(issue) == at(text, "list-file\n")
    assert issue.message == "unknown skill 'list-file'"
    assert issue.hint == "did you mean 'list-files'?"


def test_unknown_skill_is_not_checked_without_a_catalog() -> None:
    text = yaml_text("""
        id: skills
        steps:
          - {id: x, skill: no-such-skill}
    """)
    assert check(text) == []


def test_a_pipeline_named_as_skill_is_known(catalog: Catalog) -> None:
    other = spec_of("""
        id: helper
        steps: [{id: a, skill: list-files, parameters: {directory: "."}}]
    """)
    text = yaml_text("""
        id: caller
        steps:
          - {id: x, skill: helper}
    """)
    assert check(text, catalog=catalog, pipelines={"helper": other}) == []
    assert codes(text, catalog=catalog) == ["unknown-skill"]


def test_cycle_through_another_pipeline_shows_the_chain() -> None:
    other = spec_of("""
        id: b
        steps: [{id: call_a, skill: a}]
    """)
    text = yaml_text("""
        id: a
        steps:
          - id: first
            skill: list-files
          - id: call_b
            skill: b
    """)
    issue = only(text, "cycle", pipelines={"b": other})
    assert where(issue) == at(text, "skill: b", offset=7)
    assert issue.message == "pipeline cycle: a -> b -> a"
    assert "cannot call itself" in issue.hint


def test_a_pipeline_calling_itself_is_a_cycle() -> None:
    text = yaml_text("""
        id: selfish
        steps:
          - {id: again, skill: selfish}
    """)
    issue = only(text, "cycle")
    assert issue.message == "pipeline cycle: selfish -> selfish"
    assert where(issue) == at(text, "selfish}")


def test_calling_a_pipeline_that_loops_elsewhere_is_reported() -> None:
    b = spec_of("id: b\nsteps: [{id: x, skill: c}]")
    c = spec_of("id: c\nsteps: [{id: y, skill: b}]")
    text = "id: a\nsteps:\n  - {id: s, skill: b}\n"
    issue = only(text, "cycle", pipelines={"b": b, "c": c})
    assert "b -> c -> b" in issue.message


def test_while_without_max_iterations_is_a_warning_at_the_while_key() -> None:
    text = yaml_text("""
        id: loops
        state: {done: false}
        steps:
          - id: retry
            while: {condition: "{{ not done }}"}
            steps:
              - {id: attempt, skill: flaky-check, state: {done: "{{ attempt.ok }}"}}
    """)
    issue = only(text, "max-iterations")
    assert issue.severity == "warning"
    assert where(issue) == at(text, "while:")
    assert "100" in issue.message
    assert "max_iterations" in issue.hint


def test_unknown_model_of_pipeline_and_step() -> None:
    text = yaml_text("""
        id: models
        model: sonet
        steps:
          - {id: a, skill: x, model: haiku}
          - {id: b, skill: x, model: gpt}
    """)
    issues = [i for i in check(text, models=["sonnet", "haiku"]) if i.code == "unknown-model"]
    assert [where(i) for i in issues] == [at(text, "sonet"), at(text, "gpt")]
    assert issues[0].hint == "did you mean 'sonnet'?"
    assert issues[1].hint == "known models: haiku, sonnet"
    assert check(text) == []  # models are only checked when they are known


def test_missing_argument_points_at_parameters(catalog: Catalog) -> None:
    text = yaml_text("""
        id: args
        steps:
          - id: files
            skill: list-files
            parameters: {pattern: "*.py"}
          - id: bare
            skill: list-files
    """)
    issues = [i for i in check(text, catalog=catalog) if i.code == "missing-argument"]
    assert [where(i) for i in issues] == [at(text, "parameters"), at(text, "list-files", 1)]
    assert issues[0].message == "'list-files' needs the argument 'directory'"
    assert issues[0].hint.startswith("add `directory` to parameters (string)")


def test_unknown_argument_points_at_the_key_with_did_you_mean(catalog: Catalog) -> None:
    text = yaml_text("""
        id: args
        steps:
          - id: analyse
            skill: code-analyzer
            parameters: {pth: "a.py"}
    """)
    issue = only(text, "unknown-argument", catalog=catalog)
    assert where(issue) == at(text, "pth")
    assert issue.message == "'code-analyzer' has no argument 'pth'"
    assert issue.hint == "did you mean 'path'?"


def test_argument_type_of_a_literal_that_cannot_fit(catalog: Catalog) -> None:
    text = yaml_text("""
        id: types
        steps:
          - id: files
            skill: list-files
            parameters: {directory: ".", max_results: "ten", files_only: "{{ 1 == 1 }}"}
          - id: more
            skill: list-files
            parameters: {directory: ".", max_results: "10"}
    """)
    issues = [i for i in check(text, catalog=catalog) if i.code == "argument-type"]
    assert [where(i) for i in issues] == [at(text, '"ten"'), at(text, '"10"')]
    assert issues[0].message == "'max_results' of 'list-files' must be an integer, not the string 'ten'"
    assert issues[0].hint == "give an integer, or an expression that yields one"
    assert issues[1].hint == "write the number without quotes: 10"


def test_argument_type_suggests_braces_for_a_name_in_scope(catalog: Catalog) -> None:
    text = yaml_text("""
        id: braces
        steps:
          - {id: files, skill: list-files, parameters: {directory: "."}}
          - {id: stats, skill: number-stats, parameters: {values: files.paths}}
    """)
    issue = only(text, "argument-type", catalog=catalog)
    assert issue.hint == 'to pass the value of files.paths, write "{{ files.paths }}"'


def test_argument_value_outside_the_enum(catalog: Catalog) -> None:
    text = yaml_text("""
        id: enums
        steps:
          - {id: read, skill: read-file, parameters: {path: a.txt, errors: strictt}}
    """)
    issue = only(text, "argument-value", catalog=catalog)
    assert where(issue) == at(text, "strictt")
    assert issue.hint == "did you mean 'strict'? one of: 'strict', 'replace', 'ignore'"


def test_arguments_of_a_called_pipeline_come_from_its_inputs() -> None:
    other = spec_of("""
        id: helper
        inputs:
          folder: {type: string}
          depth: {type: integer, default: 1}
        steps: [{id: a, skill: list-files}]
    """)
    text = yaml_text("""
        id: caller
        steps:
          - id: call
            skill: helper
            parameters: {depht: 2}
    """)
    found = check(text, pipelines={"helper": other})
    assert [i.code for i in found] == ["missing-argument", "unknown-argument"]
    assert found[1].hint == "did you mean 'depth'?"


def test_expression_syntax_error_points_at_the_string() -> None:
    text = yaml_text("""
        id: syntax
        steps:
          - id: files
            skill: list-files
            parameters: {directory: "{{ files.paths | }}"}
    """)
    issue = only(text, "expression-syntax")
    assert where(issue) == at(text, '"{{ files.paths | }}"')
    assert "{{ files.paths | }}" in issue.message
    assert issue.hint


def test_unknown_filter_is_an_expression_error() -> None:
    text = 'id: f\nsteps:\n  - {id: a, skill: x, parameters: {n: "{{ [1] | lenght }}"}}\n'
    issue = only(text, "expression-syntax")
    assert "lenght" in issue.message
    assert "length" in issue.hint


def test_bare_condition_is_an_expression_and_is_checked() -> None:
    text = yaml_text("""
        id: bare
        inputs: {limit: {type: integer}}
        steps:
          - {id: a, skill: x, condition: "limt > 3"}
          - {id: b, skill: x, condition: "limit >"}
          - {id: c, skill: x, condition: "limit > 3"}
    """)
    found = check(text)
    assert [(i.code, where(i)) for i in found] == [
        ("undefined", at(text, '"limt > 3"')),
        ("expression-syntax", at(text, '"limit >"')),
    ]
    assert found[0].hint == "did you mean 'limit'?"


def test_for_items_that_is_not_a_list() -> None:
    text = yaml_text("""
        id: items
        steps:
          - {id: files, skill: list-files}
          - id: each
            for: {items: "files.paths", variable: p}
            skill: read-file
            parameters: {path: "{{ p }}"}
          - id: fine
            for: {items: [1, 2], variable: n}
            skill: read-file
    """)
    issue = only(text, "for-items")
    assert where(issue) == at(text, '"files.paths"')
    assert issue.hint == 'did you mean "{{ files.paths }}"?'


def test_max_parallel_without_parallel_is_a_warning() -> None:
    text = "id: mp\nsteps:\n  - {id: a, for: {items: [1], max_parallel: 2}, skill: x}\n"
    issue = only(text, "max-parallel")
    assert issue.severity == "warning"
    assert where(issue) == at(text, "max_parallel")


def test_constant_condition_is_a_warning() -> None:
    text = 'id: cc\nsteps:\n  - {id: a, skill: x, condition: "{{ false }}"}\n'
    issue = only(text, "constant-condition")
    assert issue.severity == "warning"
    assert issue.message == "condition is always false"


def test_condition_with_text_around_braces_is_a_warning() -> None:
    text = 'id: tc\ninputs: {count: {type: integer}}\nsteps:\n  - {id: a, skill: x, condition: "{{ count }} > 3"}\n'
    issue = only(text, "text-condition")
    assert issue.severity == "warning"
    assert where(issue) == at(text, '"{{ count }} > 3"')
    assert issue.hint == 'put the whole condition inside the braces: "{{ count > 3 }}"'


def test_empty_branch_is_a_warning() -> None:
    text = yaml_text("""
        id: branches
        steps:
          - id: route
            if: {condition: "{{ true }}", then: [{id: a, skill: x}]}
            else: []
    """)
    issue = only(text, "empty-branch")
    assert issue.severity == "warning"
    assert where(issue) == at(text, "else")


def test_state_assigned_inside_a_parallel_loop_is_a_warning() -> None:
    text = yaml_text("""
        id: race
        state: {total: 0}
        steps:
          - id: each
            for: {items: [1, 2], parallel: true}
            steps:
              - {id: add, skill: x, state: {total: "{{ total + 1 }}"}}
    """)
    issue = only(text, "parallel-state")
    assert where(issue) == at(text, 'state: {total: "')
    assert "parallel" in issue.hint


def test_output_named_run_id_is_reserved() -> None:
    text = 'id: out\nsteps: [{id: a, skill: x}]\noutputs:\n  run_id: "{{ a }}"\n'
    issue = only(text, "reserved-output")
    assert where(issue) == (4, 3)


def test_names_that_shadow_each_other_are_warnings() -> None:
    text = yaml_text("""
        id: shadows
        inputs: {files: {type: array}}
        steps:
          - {id: files, skill: x}
          - {id: each, for: {items: "{{ files }}", variable: each_file}, skill: x}
          - {id: loop2, for: {items: "{{ files }}", variable: loop}, skill: x}
    """)
    found = [i for i in check(text) if i.code == "shadowed"]
    assert [where(i) for i in found] == [at(text, "files, skill"), at(text, "loop}")]
    assert found[0].message == "step id 'files' is also the name of an input"


def test_parameters_on_a_step_without_skill_are_a_warning() -> None:
    text = "id: unused\nsteps:\n  - {id: g, steps: [{id: a, skill: x}], parameters: {p: 1}}\n"
    assert only(text, "unused-parameters").severity == "warning"


# -- scope rules: each with a positive and a negative case -----------------------------------


def undefined(text: str) -> list[str]:
    return [i.message.split("'")[1] for i in check(yaml_text(text)) if i.code == "undefined"]


def hints(text: str) -> list[str]:
    return [i.hint for i in check(yaml_text(text)) if i.code == "undefined"]


def test_loop_variable_is_in_scope_inside_its_loop_only() -> None:
    text = """
        id: loopvar
        steps:
          - id: each
            for: {items: [1, 2], variable: n}
            steps:
              - {id: inner, skill: x, parameters: {v: "{{ n }}", i: "{{ loop.index }}"}}
          - {id: after, skill: x, parameters: {v: "{{ n }}", i: "{{ loop.index }}"}}
    """
    assert undefined(text) == ["n", "loop"]
    assert hints(text)[0] == "'n' is the loop variable of 'each' (line 4) and exists only inside that loop"
    assert hints(text)[1] == "`loop` exists only inside the body of a `for` or `while`"


def test_for_items_is_evaluated_outside_the_loop() -> None:
    text = """
        id: items
        steps:
          - {id: each, for: {items: "{{ n }}", variable: n}, skill: x, parameters: {v: "{{ n }}"}}
    """
    assert undefined(text) == ["n"]


def test_a_step_sees_earlier_steps_but_not_later_ones() -> None:
    text = """
        id: order
        steps:
          - {id: first, skill: x}
          - {id: second, skill: x, parameters: {a: "{{ first }}", b: "{{ third }}"}}
          - {id: third, skill: x}
    """
    assert undefined(text) == ["third"]
    assert hints(text) == ["'third' is defined later (line 5); a step sees only the steps before it"]


def test_nested_steps_are_reached_through_their_parent_outside_the_block() -> None:
    text = """
        id: nested
        steps:
          - id: route
            if:
              condition: "{{ true }}"
              then:
                - {id: big, skill: x}
                - {id: after_big, skill: x, parameters: {v: "{{ big }}"}}
          - id: each
            for: {items: [1], variable: n}
            steps:
              - {id: sub, skill: x}
          - {id: report, skill: x, parameters: {a: "{{ big }}", b: "{{ sub }}", c: "{{ route.big }}"}}
    """
    assert undefined(text) == ["big", "sub"]
    assert hints(text) == [
        "'big' (line 7) is nested in 'route'; outside that block read it through its output: {{ route.big }}",
        "'sub' (line 12) is nested in 'each'; outside that block read it through its output: {{ each[0].sub }}",
    ]


def test_nested_steps_see_the_earlier_siblings_of_their_parents() -> None:
    text = """
        id: outer
        inputs: {dir: {type: string}}
        steps:
          - {id: files, skill: x}
          - id: group
            steps:
              - id: each
                for: {items: "{{ files.paths }}", variable: p}
                steps:
                  - {id: read, skill: x, parameters: {path: "{{ p }}", d: "{{ dir }}", later: "{{ last }}"}}
          - {id: last, skill: x}
    """
    assert undefined(text) == ["last"]


def test_branches_do_not_see_each_other() -> None:
    text = """
        id: branches
        steps:
          - {id: before, skill: x}
          - id: route
            if:
              condition: "{{ before }}"
              then: [{id: a, skill: x, parameters: {v: "{{ before }}"}}]
            elif:
              - condition: "{{ before.ok }}"
                then: [{id: b, skill: x, parameters: {v: "{{ a }}"}}]
    """
    assert undefined(text) == ["a"]


def test_own_id_is_visible_in_state_but_not_in_condition_or_parameters() -> None:
    text = """
        id: own
        state: {last: null}
        steps:
          - {id: fetch, skill: x, state: {last: "{{ fetch.value }}"}}
          - {id: loopy, skill: x, condition: "{{ loopy }}", parameters: {v: "{{ loopy }}"}}
    """
    assert undefined(text) == ["loopy", "loopy"]
    assert hints(text)[0].startswith("a step cannot read its own output here")


def test_enclosing_step_is_not_visible_in_its_body() -> None:
    text = """
        id: enclosing
        steps:
          - id: retry
            while: {condition: "{{ loop.index < 3 }}", max_iterations: 3}
            steps:
              - {id: attempt, skill: x, parameters: {prev: "{{ retry }}", i: "{{ loop.index }}"}}
    """
    assert undefined(text) == ["retry"]
    assert "encloses this step" in hints(text)[0]


def test_inputs_by_name_and_through_inputs() -> None:
    text = """
        id: inputs
        inputs: {directory: {type: string}}
        parameters: {depth: 2}
        steps:
          - {id: a, skill: x, parameters: {a: "{{ directory }}", b: "{{ inputs.directory }}", c: "{{ depth }}"}}
          - {id: b, skill: x, parameters: {d: "{{ input.directory }}"}}
    """
    assert undefined(text) == ["input"]
    assert hints(text) == ["did you mean 'inputs'?"]


def test_state_assigned_by_a_later_step_is_in_scope_everywhere() -> None:
    text = """
        id: state
        state: {count: 0}
        steps:
          - {id: early, skill: x, parameters: {c: "{{ count }}", d: "{{ done }}", e: "{{ nothing }}"}}
          - {id: late, skill: x, state: {done: true}}
        outputs:
          finished: "{{ done }}"
    """
    assert undefined(text) == ["nothing"]


def test_initial_state_sees_inputs_but_no_step() -> None:
    text = """
        id: init
        inputs: {start: {type: integer, default: 0}}
        state: {count: "{{ start }}", first: "{{ a }}"}
        steps:
          - {id: a, skill: x}
    """
    assert undefined(text) == ["a"]
    assert hints(text) == ["'a' (line 5) is a step, and no step output exists here yet"]


def test_while_condition_sees_loop_and_state_but_not_its_body() -> None:
    text = """
        id: wc
        state: {done: false}
        steps:
          - id: retry
            while: {condition: "{{ not done and loop.index < 5 and attempt }}", max_iterations: 5}
            steps:
              - {id: attempt, skill: x, state: {done: "{{ attempt.ok }}"}}
    """
    assert undefined(text) == ["attempt"]


def test_outputs_see_top_level_steps_only() -> None:
    text = """
        id: outs
        inputs: {name: {type: string}}
        steps:
          - id: group
            steps: [{id: inner, skill: x}]
        outputs:
          a: "{{ group.inner }}"
          b: "{{ inner }}"
          c: "{{ name }}"
    """
    assert undefined(text) == ["inner"]


def test_helpers_and_jinja_constants_are_never_undefined() -> None:
    text = """
        id: helpers
        steps:
          - id: a
            skill: x
            parameters:
              files: "{{ list_files('.', '*.py') }}"
              nums: "{{ range(3) | list }}"
              flag: "{{ true and not false or none }}"
              joined: "{% for f in [1, 2] %}{{ f }}{% endfor %}"
              bad: "{{ cycler(1) }}"
    """
    assert undefined(text) == ["cycler"]
    assert hints(text) == ["'cycler' is a Jinja global that pipeline expressions do not provide"]


# -- all at once --------------------------------------------------------------------------------


def test_a_file_with_several_problems_reports_all_of_them_in_order(catalog: Catalog) -> None:
    text = yaml_text("""
        id: broken
        inputs:
          directory: {type: string}
        steps:
          - id: files
            skill: list-file
            parameters: {directory: "{{ directroy }}"}
          - id: analyses
            for: {items: "{{ files.paths }}", variable: file_path}
            skill: code-analyzer
            parameters: {path: "{{ file_path }}", pathh: x}
          - id: retry
            while: {condition: "{{ loop.index < 3 }}"}
            steps:
              - {id: attempt, skill: flaky-check, parameters: {attempt: "{{ file_path }}"}}
          - id: files
            skill: markdown-report
            parameters: {data: "{{ analyses | }}"}
    """)
    found = check(text, catalog=catalog)
    assert [(i.code, i.line) for i in found] == [
        ("unknown-skill", 6),
        ("undefined", 7),
        ("unknown-argument", 11),
        ("max-iterations", 13),
        ("undefined", 15),
        ("duplicate-id", 16),
        ("missing-argument", 18),
        ("expression-syntax", 18),
    ]
    assert found == sorted(found, key=lambda i: (i.line, i.col))


def test_yaml_syntax_errors_come_back_as_issues() -> None:
    text = "id: bad\nsteps:\n  - id: a\n    skill: [unclosed\n"
    spec, issues = check_text(text, "bad.yaml")
    assert spec is None
    assert len(issues) == 1
    assert issues[0].message.startswith("YAML syntax")
    assert issues[0].line >= 4


def test_schema_errors_come_back_as_issues_with_did_you_mean() -> None:
    text = yaml_text("""
        id: schema
        steps:
          - id: a
            skil: list-files
          - id: b
            skill: x
            retry: {attempts: 0}
    """)
    spec, issues = check_text(text, "schema.yaml")
    assert spec is None
    unknown = next(i for i in issues if i.code == "unknown-key")
    assert where(unknown) == at(text, "skil:")
    assert "did you mean 'skill'?" in unknown.hint
    assert issues == sorted(issues, key=lambda i: (i.line, i.col))
