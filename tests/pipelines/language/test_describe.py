"""Help text and Mermaid graphs generated from a pipeline's YAML."""

from __future__ import annotations

import json
import re
import textwrap

from pipelines.language.describe import example_arguments, help_text, mermaid
from pipelines.language.loader import load_spec
from pipelines.language.spec import PipelineSpec

CODE_REVIEW = """
id: code-review
name: "Code review"
description: "Analyse every Python file in a directory and write a report"
inputs:
  directory: {type: string, description: "Folder to review"}
  min_score: {type: number, default: 0.5}
  mode: {type: string, enum: [fast, full], default: fast}
state:
  done: false
steps:
  - id: files
    skill: list-files
    parameters: {directory: "{{ directory }}", pattern: "**/*.py"}
  - id: analyses
    for: {items: "{{ files.paths }}", variable: file_path, parallel: true, max_parallel: 8}
    skill: code-analyzer
    parameters: {path: "{{ file_path }}"}
  - id: route
    if:
      condition: "{{ analyses | length > 20 }}"
      then:
        - {id: big, skill: summarise-large, parameters: {items: "{{ analyses }}"}}
    elif:
      - condition: "{{ analyses | length > 0 }}"
        then:
          - {id: small, skill: summarise-small, parameters: {items: "{{ analyses }}"}}
    else:
      - {id: empty, skill: note, parameters: {text: "nothing to review"}}
  - id: retry
    while: {condition: "{{ not done }}", max_iterations: 5}
    steps:
      - id: attempt
        skill: flaky-check
        parameters: {attempt: "{{ loop.index }}"}
        state: {done: "{{ attempt.ok }}"}
  - id: report
    skill: markdown-report
    condition: "{{ analyses | length > 0 }}"
    parameters: {title: "Review of {{ directory }}", data: "{{ analyses }}"}
outputs:
  report: "{{ report.path }}"
  files_reviewed: "{{ analyses | length }}"
"""


def spec_of(text: str) -> PipelineSpec:
    return load_spec(textwrap.dedent(text).lstrip("\n"), "p.yaml")[0]


def test_help_text_names_inputs_outputs_steps_and_an_example_call() -> None:
    text = help_text(spec_of(CODE_REVIEW))
    assert text.startswith("# Code review (`code-review`)\n\nAnalyse every Python file")
    assert "- `directory` (string, required): Folder to review" in text
    assert "- `min_score` (number, default 0.5)" in text
    assert '- `mode` (string, default "fast", one of "fast", "full")' in text
    assert "`report`, `files_reviewed`, `run_id`" in text
    assert "- analyses: for each file_path in files.paths (parallel, max 8): code-analyzer" in text
    assert "- route: if analyses | length > 20:\n    - big: summarise-large\n  elif analyses | length > 0:" in text
    assert "- retry: while not done (max 5):\n  - attempt: flaky-check; sets done" in text
    assert "- report: markdown-report, only if analyses | length > 0" in text
    example = json.loads(text.split("## Example call\n")[1])
    assert example == {"directory": "<directory>", "min_score": 0.5, "mode": "fast"}
    assert len(text.splitlines()) < 40


def test_help_text_is_deterministic_and_can_leave_the_description_out() -> None:
    spec = spec_of(CODE_REVIEW)
    assert help_text(spec) == help_text(spec)
    assert "Analyse every Python file" not in help_text(spec, description=False)


def test_help_text_without_outputs_lists_the_top_level_steps() -> None:
    spec = spec_of("""
        id: plain
        steps:
          - {id: a, skill: x}
          - {id: g, steps: [{id: inner, skill: y}]}
    """)
    text = help_text(spec)
    assert text.startswith("# plain\n")
    assert "## Inputs\n(none)" in text
    assert "`a`, `g`, `run_id`" in text
    assert "- g: group:\n  - inner: y" in text
    assert text.endswith("## Example call\n{}")


def test_example_arguments_use_placeholders_by_type() -> None:
    spec = spec_of("""
        id: types
        inputs:
          name: {type: string}
          count: {type: integer}
          ratio: {type: number}
          flag: {type: boolean}
          tags: {type: array}
          picked: {type: string, enum: [a, b]}
          shown: {type: string, examples: ["hello"]}
        parameters: {depth: 3}
        steps: [{id: a, skill: x}]
    """)
    assert example_arguments(spec) == {
        "name": "<name>",
        "count": 1,
        "ratio": 1.0,
        "flag": True,
        "tags": [],
        "picked": "a",
        "shown": "hello",
    }


def test_mermaid_has_start_end_nodes_and_a_subgraph_per_loop() -> None:
    chart = mermaid(spec_of(CODE_REVIEW))
    lines = chart.splitlines()
    assert lines[0] == "flowchart TD"
    assert '  START(["start"])' in lines
    assert '  END(["end"])' in lines
    assert any(
        line.startswith("  subgraph ") and "analyses: for each file_path in files.paths #40;parallel, max 8#41;" in line
        for line in lines
    )
    assert any(line.startswith("  subgraph ") and "retry: while not done #40;max 5#41;" in line for line in lines)
    assert chart.count("subgraph ") == chart.count("\n  end\n") == 2
    assert re.search(r"s\d+ -\.->\|\"next iteration\"\| s\d+", chart)  # the while loops back


def test_mermaid_branches_are_a_decision_with_labelled_edges_that_join_the_next_step() -> None:
    chart = mermaid(spec_of(CODE_REVIEW))
    nodes = dict(re.findall(r'^\s*(\w+)[\[{(]+"([^"]*)"', chart, re.M))
    by_label = {label.split("<br/>")[0]: node for node, label in nodes.items()}
    route = by_label["route"]
    assert chart.count(f"  {route}{{") == 1  # a rhombus
    edges = re.findall(r"^  (\w+) -->(?:\|\"([^\"]*)\"\|)? (\w+)$", chart, re.M)
    out_of_route = {(label, target) for source, label, target in edges if source == route}
    assert out_of_route == {
        ("analyses #124; length #62; 20", by_label["big"]),
        ("elif analyses #124; length #62; 0", by_label["small"]),
        ("else", by_label["empty"]),
    }
    attempt = by_label["attempt"]
    joined = {source for source, _, target in edges if target == attempt}
    assert joined == {by_label["big"], by_label["small"], by_label["empty"]}
    assert (by_label["report"], "END") in {(s, t) for s, _, t in edges}


def test_mermaid_if_without_else_has_a_no_branch_edge() -> None:
    chart = mermaid(
        spec_of("""
        id: maybe
        steps:
          - id: check
            if: {condition: "{{ true }}", then: [{id: yes_, skill: x}]}
          - {id: after, skill: y}
    """)
    )
    assert re.search(r'd\d+ -->\|"no branch"\| s\d+', chart)


def test_mermaid_edges_come_after_every_node_so_subgraphs_keep_only_their_own_nodes() -> None:
    lines = mermaid(spec_of(CODE_REVIEW)).splitlines()
    first_edge = next(i for i, line in enumerate(lines) if "-->" in line or "-.->" in line)
    assert all("-->" in line or "-.->" in line for line in lines[first_edge:])


def test_mermaid_labels_with_quotes_braces_brackets_and_pipes_are_escaped() -> None:
    chart = mermaid(
        spec_of("""
        id: tricky
        steps:
          - id: pick
            if:
              condition: "{{ x | default('say \\"hi\\"') == {'a': [1]} }}"
              then: [{id: a, skill: 'odd"skill{1}|[2]'}]
          - id: each
            for: {items: ["#quot;", "<b>", 3], variable: v}
            skill: x
    """)
    )
    for line in chart.splitlines()[1:]:
        # every quoted label is a plain run of text: no quote, brace, bracket, pipe or < inside
        for label in re.findall(r'"([^"]*)"', line):
            assert not re.search(r"[{}\[\]|<>]", label.replace("<br/>", "")), line
        outside = re.sub(r'"[^"]*"', '""', line)
        assert outside.count('"') % 2 == 0
    assert "odd#quot;skill#123;1#125;#124;#91;2#93;" in chart
    assert "#35;quot#59;" in chart  # a literal "#quot;" stays text
    assert "#60;b#62;" in chart
