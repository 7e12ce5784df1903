"""Every pipeline construct and scope rule (SPEC 4), run through a real in-memory MCP client.

Pipelines are written into the home's `pipelines/` folder (published when the server is
created); the skills they call are small folder skills written into tmp_path. Concurrency and
ordering are observed from inside the skills (shared module state, events), never with sleeps.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, TextResourceContents, ToolListChangedNotification

from mcp_server import create_server
from pipelines.storage.runs import RunStore
from tests.helpers import write_skill

OPEN = {"type": "object"}


def _skill(parent: Path, name: str, impl: str, *, entry: str | None = None, timeout: float = 30) -> None:
    write_skill(
        parent,
        name,
        contract={"inputs": OPEN, "run": {"python": f"impl:{entry or name.replace('-', '_')}"}, "timeout": timeout},
        impl=impl,
    )


@pytest.fixture
def skills(tmp_path: Path) -> Path:
    """Test skills: echo, record, flaky, fail, ordered, slow, hang."""
    root = tmp_path / "skills"
    _skill(root, "echo", "def echo(**kwargs):\n    return kwargs\n")
    _skill(
        root,
        "record",
        """
        from pathlib import Path

        def record(log, label, **rest):
            with open(log, "a") as f:
                f.write(label + "\\n")
            return {"label": label, "calls": Path(log).read_text().splitlines().count(label), **rest}
        """,
    )
    _skill(
        root,
        "flaky",
        """
        from pathlib import Path

        def flaky(counter, fail_times):
            path = Path(counter)
            calls = int(path.read_text()) + 1 if path.exists() else 1
            path.write_text(str(calls))
            if calls <= fail_times:
                raise RuntimeError(f"failure number {calls}")
            return {"calls": calls}
        """,
    )
    _skill(root, "fail", "def fail(message='boom'):\n    raise RuntimeError(message)\n")
    _skill(
        root,
        "ordered",
        """
        import anyio

        events = {}
        finished = []

        def _event(i):
            return events.setdefault(i, anyio.Event())

        async def ordered(i, n):
            # item i finishes only after item i+1: the last item finishes first
            if i + 1 < n:
                await _event(i + 1).wait()
            finished.append(i)
            _event(i).set()
            return {"i": i, "finished": len(finished)}
        """,
    )
    _skill(
        root,
        "slow",
        """
        import anyio

        state = {"current": 0, "peak": 0}

        async def slow(i):
            state["current"] += 1
            state["peak"] = max(state["peak"], state["current"])
            for _ in range(30):
                await anyio.lowlevel.checkpoint()
            state["current"] -= 1
            return {"i": i, "peak": state["peak"]}
        """,
    )
    _skill(
        root,
        "hang",
        "import anyio\n\nasync def hang(**kwargs):\n    await anyio.sleep_forever()\n",
        timeout=600,
    )
    return root


def publish(home: Path, text: str) -> str:
    """Write a pipeline into the home's pipelines/ folder; return its id."""
    text = textwrap.dedent(text).strip() + "\n"
    pid = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("id:"))
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pid}.yaml").write_text(text)
    return pid


async def run(
    home: Path, skills: Path, text: str, arguments: dict[str, Any] | None = None, *, partial: bool = False
) -> dict[str, Any]:
    """Publish `text`, call it through a client, return its structured result (which must succeed).

    `partial`: steps fail under `on_error: continue`, so the run is PARTIAL, an error whose
    structured content is the envelope with every output beside it."""
    result = await call(home, skills, text, arguments)
    if partial:
        assert result.is_error and "PARTIAL" in json.loads(_text(result))["error"]["message"], _text(result)
    else:
        assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return result.structured_content


async def call(home: Path, skills: Path, text: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
    pid = publish(home, text)
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        return await client.call_tool(pid, arguments or {})


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


# -- expressions: native types, text, key-first access -------------------------------------------


async def test_a_lone_expression_keeps_its_native_type_and_text_around_it_makes_a_string(
    home: Path, skills: Path
) -> None:
    out = await run(
        home,
        skills,
        """
        id: native
        inputs:
          numbers: {type: array, default: [1, 2, 3]}
          count: {type: integer, default: 7}
        steps:
          - id: e
            skill: echo
            parameters:
              as_list: "{{ numbers }}"
              as_int: "{{ count }}"
              as_bool: "{{ count > 3 }}"
              as_dict: "{{ {'a': count} }}"
              as_none: "{{ none }}"
              as_text: "n={{ count }}"
              padded: " {{ count }} "
              joined: "{{ numbers }}!"
              literal: 5
        outputs:
          e: "{{ e }}"
          doubled: "{{ count * 2 }}"
        """,
    )
    e = out["e"]
    assert e["as_list"] == [1, 2, 3]
    assert e["as_int"] == 7 and type(e["as_int"]) is int
    assert e["as_bool"] is True
    assert e["as_dict"] == {"a": 7}
    assert e["as_none"] is None
    assert e["as_text"] == "n=7"
    assert e["padded"] == 7  # whitespace around a lone expression does not make text
    assert e["joined"] == "[1, 2, 3]!"
    assert e["literal"] == 5
    assert out["doubled"] == 14


async def test_a_dotted_name_reads_the_mapping_key_before_any_method(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: keyfirst
        steps:
          - id: result
            skill: echo
            parameters: {items: [a, b], keys: "k", values: 3}
          - id: use
            skill: echo
            parameters: {items: "{{ result.items }}", keys: "{{ result.keys }}", n: "{{ result.items | length }}"}
        outputs:
          items: "{{ use.items }}"
          keys: "{{ use.keys }}"
          values: "{{ result.values + 1 }}"
          n: "{{ use.n }}"
        """,
    )
    assert out.pop("summary")["succeeded"] == 2 and out.pop("usage")["calls"] == 0
    assert out == {"items": ["a", "b"], "keys": "k", "values": 4, "n": 2, "run_id": out["run_id"]}


async def test_inputs_are_in_scope_by_name_and_under_inputs_with_their_defaults_applied(
    home: Path, skills: Path
) -> None:
    text = """
        id: ins
        inputs:
          name: {type: string}
          greeting: {type: string, default: hello}
          times: {type: integer, default: 2}
        steps:
          - id: e
            skill: echo
            parameters: {text: "{{ greeting }} {{ inputs.name }}", times: "{{ inputs.times }}", all: "{{ inputs }}"}
        """
    out = await run(home, skills, text, {"name": "Ada"})
    assert out["e"]["text"] == "hello Ada"
    assert out["e"]["times"] == 2
    assert out["e"]["all"] == {"name": "Ada", "greeting": "hello", "times": 2}
    out = await run(home, skills, text, {"name": "Bob", "greeting": "hi", "times": 5})
    assert out["e"] == {"text": "hi Bob", "times": 5, "all": {"name": "Bob", "greeting": "hi", "times": 5}}


async def test_parameters_shorthand_declares_inputs_with_defaults(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: shorthand
        parameters: {size: 3, label: box}
        steps:
          - id: e
            skill: echo
            parameters: {v: "{{ label }}:{{ size * 2 }}"}
        """,
        {"size": 4},
    )
    assert out["e"] == {"v": "box:8"}


# -- for loops -----------------------------------------------------------------------------------


async def test_parallel_results_come_back_in_item_order_when_items_finish_in_reverse(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: order
        steps:
          - id: each
            for: {items: "{{ range(5) | list }}", variable: i, parallel: true}
            skill: ordered
            parameters: {i: "{{ i }}", n: "{{ loop.length }}"}
        """,
    )
    assert [r["i"] for r in out["each"]] == [0, 1, 2, 3, 4]
    assert [r["finished"] for r in out["each"]] == [5, 4, 3, 2, 1]


async def test_max_parallel_bounds_how_many_items_run_at_once(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: bounded
        steps:
          - id: each
            for: {items: "{{ range(9) | list }}", variable: i, parallel: true, max_parallel: 3}
            skill: slow
            parameters: {i: "{{ i }}"}
        """,
    )
    assert [r["i"] for r in out["each"]] == list(range(9))
    assert max(r["peak"] for r in out["each"]) == 3


async def test_a_sequential_for_runs_items_one_after_another_with_loop_info(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: seq
        inputs:
          log: {type: string}
        steps:
          - id: each
            for: {items: [a, b, c], variable: letter}
            skill: record
            parameters:
              log: "{{ log }}"
              label: "{{ letter }}"
              index: "{{ loop.index }}"
              index0: "{{ loop.index0 }}"
              first: "{{ loop.first }}"
              last: "{{ loop.last }}"
              length: "{{ loop.length }}"
        """,
        {"log": str(home / "seq.log")},
    )
    assert (home / "seq.log").read_text().split() == ["a", "b", "c"]
    assert [(r["label"], r["index"], r["index0"], r["first"], r["last"], r["length"]) for r in out["each"]] == [
        ("a", 1, 0, True, False, 3),
        ("b", 2, 1, False, False, 3),
        ("c", 3, 2, False, True, 3),
    ]


@pytest.mark.parametrize("parallel", [False, True])
async def test_nested_loops_make_a_matrix_with_each_loops_own_loop_info(
    home: Path, skills: Path, parallel: bool
) -> None:
    out = await run(
        home,
        skills,
        f"""
        id: matrix
        steps:
          - id: rows
            for: {{items: [1, 2, 3], variable: r, parallel: {str(parallel).lower()}}}
            steps:
              - id: row_info
                skill: echo
                parameters: {{index: "{{{{ loop.index }}}}", length: "{{{{ loop.length }}}}"}}
              - id: cells
                for: {{items: [10, 20], variable: c, parallel: {str(parallel).lower()}}}
                skill: echo
                parameters:
                  value: "{{{{ r * c }}}}"
                  at: "{{{{ row_info.index }}}}.{{{{ loop.index }}}}/{{{{ loop.length }}}}"
              - id: row_end
                skill: echo
                parameters: {{index: "{{{{ loop.index }}}}", r: "{{{{ r }}}}"}}
        outputs:
          values: "{{{{ rows | map(attribute='cells') | map('map', attribute='value') | map('list') | list }}}}"
          rows: "{{{{ rows }}}}"
        """,
    )
    assert out["values"] == [[10, 20], [20, 40], [30, 60]]
    assert [row["row_info"] for row in out["rows"]] == [{"index": i, "length": 3} for i in (1, 2, 3)]
    assert [[c["at"] for c in row["cells"]] for row in out["rows"]] == [
        ["1.1/2", "1.2/2"],
        ["2.1/2", "2.2/2"],
        ["3.1/2", "3.2/2"],
    ]
    # after the inner loop the outer loop's variable and loop info are back
    assert [row["row_end"] for row in out["rows"]] == [{"index": i, "r": i} for i in (1, 2, 3)]


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_for_with_nested_steps_gives_each_item_a_mapping_of_its_substeps(
    home: Path, skills: Path, parallel: bool
) -> None:
    out = await run(
        home,
        skills,
        f"""
        id: nested
        steps:
          - id: each
            for: {{items: [x, y], variable: name, parallel: {str(parallel).lower()}}}
            steps:
              - id: first
                skill: echo
                parameters: {{name: "{{{{ name }}}}"}}
              - id: second
                skill: echo
                parameters: {{upper: "{{{{ first.name | upper }}}}"}}
        """,
    )
    assert out["each"] == [
        {"first": {"name": "x"}, "second": {"upper": "X"}},
        {"first": {"name": "y"}, "second": {"upper": "Y"}},
    ]


async def test_a_for_over_an_empty_list_gives_an_empty_list_and_later_steps_run(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: empty
        steps:
          - id: seq
            for: {items: [], variable: i}
            skill: fail
          - id: par
            for: {items: [], variable: i, parallel: true}
            skill: fail
          - id: after
            skill: echo
            parameters: {n: "{{ seq | length + par | length }}"}
        """,
    )
    assert out["seq"] == [] and out["par"] == []
    assert out["after"] == {"n": 0}


# -- while ---------------------------------------------------------------------------------------


async def test_a_while_loop_carries_state_across_iterations_and_stops_on_its_condition(
    home: Path, skills: Path
) -> None:
    out = await run(
        home,
        skills,
        """
        id: countdown
        state:
          left: 3
          seen: []
        steps:
          - id: loop_it
            while: {condition: "{{ left > 0 }}", max_iterations: 10}
            steps:
              - id: tick
                skill: echo
                parameters: {left: "{{ left }}", index: "{{ loop.index }}"}
                state:
                  left: "{{ left - 1 }}"
                  seen: "{{ seen + [tick.index] }}"
        outputs:
          left: "{{ left }}"
          seen: "{{ seen }}"
          last: "{{ loop_it }}"
        """,
    )
    assert out["left"] == 0
    assert out["seen"] == [1, 2, 3]
    assert out["last"] == {"tick": {"left": 1, "index": 3}, "iterations": 3}


async def test_a_while_loop_stops_at_max_iterations(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: forever
        steps:
          - id: spin
            while: {condition: "{{ true }}", max_iterations: 4}
            skill: echo
            parameters: {index: "{{ loop.index }}"}
        """,
    )
    assert out["spin"] == {"spin": {"index": 4}, "iterations": 4}


async def test_a_while_whose_condition_is_false_at_once_runs_no_iteration(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: never
        steps:
          - id: w
            while: {condition: "{{ false }}", max_iterations: 4}
            steps:
              - {id: body, skill: fail}
          - id: after
            skill: echo
            parameters: {w: "{{ w }}"}
        """,
    )
    assert out["w"] == {"body": None, "iterations": 0}
    assert out["after"] == {"w": {"body": None, "iterations": 0}}


# -- if / elif / else ------------------------------------------------------------------------------

BRANCHES = """
id: route
inputs:
  n: {type: integer}
steps:
  - id: pick
    if:
      condition: "{{ n > 100 }}"
      then:
        - {id: big, skill: echo, parameters: {size: big}}
    elif:
      - condition: "{{ n > 10 }}"
        then:
          - {id: medium, skill: echo, parameters: {size: medium}}
      - condition: "{{ n > 0 }}"
        then:
          - {id: small, skill: echo, parameters: {size: small}}
          - {id: small2, skill: echo, parameters: {again: "{{ small.size }}"}}
    else:
      - {id: zero, skill: echo, parameters: {size: zero}}
  - id: after
    skill: echo
    parameters: {branch: "{{ pick.branch }}"}
"""


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (500, {"big": {"size": "big"}, "branch": "then"}),
        (50, {"medium": {"size": "medium"}, "branch": "elif1"}),
        (5, {"small": {"size": "small"}, "small2": {"again": "small"}, "branch": "elif2"}),
        (0, {"zero": {"size": "zero"}, "branch": "else"}),
    ],
)
async def test_if_elif_else_takes_the_first_true_branch(
    home: Path, skills: Path, n: int, expected: dict[str, Any]
) -> None:
    out = await run(home, skills, BRANCHES, {"n": n})
    assert out["pick"] == expected
    assert out["after"] == {"branch": expected["branch"]}


async def test_an_if_without_else_where_no_branch_holds_reports_none(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: nobranch
        steps:
          - id: pick
            if:
              condition: "{{ false }}"
              then:
                - {id: a, skill: fail}
            elif:
              - condition: "{{ 1 > 2 }}"
                then:
                  - {id: b, skill: fail}
          - id: after
            skill: echo
            parameters: {branch: "{{ pick.branch }}"}
        """,
    )
    assert out["pick"] == {"branch": "none"}
    assert out["after"] == {"branch": "none"}


async def test_ifs_inside_loops_route_each_item(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: ifloop
        steps:
          - id: each
            for: {items: [1, 20, 3], variable: v, parallel: true}
            steps:
              - id: kind
                if:
                  condition: "{{ v > 10 }}"
                  then:
                    - {id: big, skill: echo, parameters: {v: "{{ v }}"}}
                else:
                  - {id: small, skill: echo, parameters: {v: "{{ v }}"}}
        outputs:
          branches: "{{ each | map(attribute='kind') | map(attribute='branch') | list }}"
        """,
    )
    assert out["branches"] == ["else", "then", "else"]


# -- conditions, state ------------------------------------------------------------------------------


async def test_a_step_whose_condition_is_false_is_skipped_with_a_null_output_and_later_steps_run(
    home: Path, skills: Path
) -> None:
    out = await run(
        home,
        skills,
        """
        id: skipping
        inputs:
          go: {type: boolean, default: false}
        steps:
          - id: maybe
            skill: fail
            condition: "{{ go }}"
          - id: maybe_loop
            condition: "{{ go }}"
            for: {items: [1, 2], parallel: true}
            skill: fail
          - id: maybe_group
            condition: "{{ go }}"
            steps:
              - {id: inner, skill: fail}
          - id: maybe_if
            condition: "{{ go }}"
            if:
              condition: "{{ true }}"
              then:
                - {id: inner_if, skill: fail}
          - id: maybe_while
            condition: "{{ go }}"
            while: {condition: "{{ true }}", max_iterations: 3}
            skill: fail
          - id: maybe_seq
            condition: "{{ go }}"
            for: {items: [1, 2]}
            skill: fail
          - id: after
            skill: echo
            parameters: {was: "{{ maybe }}", skipped: "{{ maybe is none and maybe_loop is none }}"}
        """,
    )
    for step in ("maybe", "maybe_loop", "maybe_group", "maybe_if", "maybe_while", "maybe_seq"):
        assert out[step] is None, step
    assert out["after"] == {"was": None, "skipped": True}


async def test_state_assigned_by_a_step_is_visible_to_later_steps_and_undeclared_state_is_null_until_then(
    home: Path, skills: Path
) -> None:
    out = await run(
        home,
        skills,
        """
        id: stateful
        state:
          total: 10
        steps:
          - id: before
            skill: echo
            parameters: {total: "{{ total }}", label: "{{ label }}"}
          - id: setter
            skill: echo
            parameters: {value: 5, text: hello}
            state:
              total: "{{ total + setter.value }}"
              label: "{{ setter.text }}"
          - id: after
            skill: echo
            parameters: {total: "{{ total }}", label: "{{ label }}"}
        outputs:
          before: "{{ before }}"
          after: "{{ after }}"
          total: "{{ total }}"
        """,
    )
    assert out["before"] == {"total": 10, "label": None}
    assert out["after"] == {"total": 15, "label": "hello"}
    assert out["total"] == 15


async def test_state_initial_values_may_read_the_inputs(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: stateinit
        inputs:
          start: {type: integer, default: 4}
        state:
          count: "{{ start * 10 }}"
        steps:
          - id: e
            skill: echo
            parameters: {count: "{{ count }}"}
        """,
        {"start": 2},
    )
    assert out["e"] == {"count": 20}


async def test_state_carries_across_sequential_for_iterations(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: accumulate
        state:
          acc: []
        steps:
          - id: each
            for: {items: [a, b, c], variable: x}
            steps:
              - id: e
                skill: echo
                parameters: {x: "{{ x }}", before: "{{ acc }}"}
                state:
                  acc: "{{ acc + [x] }}"
        outputs:
          acc: "{{ acc }}"
          befores: "{{ each | map(attribute='e') | map(attribute='before') | list }}"
        """,
    )
    assert out["acc"] == ["a", "b", "c"]
    assert out["befores"] == [[], ["a"], ["a", "b"]]


# -- calls between pipelines, step options ---------------------------------------------------------


async def test_a_step_can_call_another_pipeline_by_its_id(home: Path, skills: Path) -> None:
    publish(
        home,
        """
        id: inner
        inputs:
          word: {type: string}
          times: {type: integer, default: 2}
        steps:
          - id: e
            skill: echo
            parameters: {text: "{{ ([word] * times) | join('-') }}"}
        outputs:
          text: "{{ e.text }}"
        """,
    )
    out = await run(
        home,
        skills,
        """
        id: outer
        steps:
          - id: call
            skill: inner
            parameters: {word: hey, times: 3}
          - id: each
            for: {items: [a, b], variable: w, parallel: true}
            skill: inner
            parameters: {word: "{{ w }}"}
        outputs:
          text: "{{ call.text }}"
          inner_run: "{{ call.run_id }}"
          each: "{{ each | map(attribute='text') | list }}"
        """,
    )
    assert out["text"] == "hey-hey-hey"
    assert out["each"] == ["a-a", "b-b"]
    assert isinstance(out["inner_run"], str) and out["inner_run"] != out["run_id"]


async def test_a_step_that_takes_longer_than_its_timeout_fails_saying_so(home: Path, skills: Path) -> None:
    result = await call(
        home,
        skills,
        """
        id: slowpoke
        steps:
          - id: wait
            skill: hang
            timeout: 0.2
        """,
    )
    assert result.is_error
    assert "step 'wait'" in _text(result)
    assert "0.2s" in _text(result)


async def test_retry_runs_a_failing_step_again_until_it_succeeds(home: Path, skills: Path, tmp_path: Path) -> None:
    counter = tmp_path / "flaky.count"
    out = await run(
        home,
        skills,
        """
        id: retrying
        inputs:
          counter: {type: string}
        steps:
          - id: try_it
            skill: flaky
            parameters: {counter: "{{ counter }}", fail_times: 2}
            retry: {attempts: 3}
        """,
        {"counter": str(counter)},
    )
    assert out["try_it"] == {"calls": 3}
    assert counter.read_text() == "3"


async def test_retry_gives_up_after_its_attempts(home: Path, skills: Path, tmp_path: Path) -> None:
    counter = tmp_path / "flaky.count"
    result = await call(
        home,
        skills,
        """
        id: giving_up
        inputs:
          counter: {type: string}
        steps:
          - id: try_it
            skill: flaky
            parameters: {counter: "{{ counter }}", fail_times: 5}
            retry: {attempts: 2}
        """,
        {"counter": str(counter)},
    )
    assert result.is_error
    assert "failure number 2" in _text(result)
    assert counter.read_text() == "2"


async def test_on_error_continue_records_the_error_as_the_output_and_goes_on(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: tolerant
        steps:
          - id: broken
            skill: fail
            parameters: {message: "disk on fire"}
            on_error: continue
          - id: slow
            skill: hang
            timeout: 0.1
            on_error: continue
          - id: bad_arguments
            skill: echo
            parameters: {x: "{{ broken.no_such_key }}"}
            on_error: continue
          - id: after
            skill: echo
            parameters: {saw: "{{ broken.error }}", step: "{{ broken.step }}"}
        """,
        partial=True,
    )
    assert "disk on fire" in out["broken"]["error"]
    assert out["broken"]["step"] == "broken"
    assert "did not finish within 0.1s" in out["slow"]["error"] and out["slow"]["step"] == "slow"
    assert "no_such_key" in out["bad_arguments"]["error"] and out["bad_arguments"]["step"] == "bad_arguments"
    assert "disk on fire" in out["after"]["saw"] and out["after"]["step"] == "broken"


async def test_a_failing_step_gives_an_error_naming_the_step_and_the_run(home: Path, skills: Path) -> None:
    result = await call(
        home,
        skills,
        """
        id: failing
        steps:
          - id: fine
            skill: echo
          - id: explode
            skill: fail
            parameters: {message: "kaboom"}
        """,
    )
    assert result.is_error
    text = _text(result)
    assert "step 'explode'" in text and "kaboom" in text
    run_id = text.split("run ", 1)[1].split()[0]
    assert f"orchestrator runs resume {run_id}" in text
    record = RunStore(home / "state.sqlite").get(run_id)
    assert record is not None and record.status == "failed" and record.failed_step == "explode"


async def test_without_outputs_the_result_is_every_top_level_step_output_plus_the_run_id(
    home: Path, skills: Path
) -> None:
    out = await run(
        home,
        skills,
        """
        id: everything
        steps:
          - id: one
            skill: echo
            parameters: {n: 1}
          - id: two
            steps:
              - {id: inner, skill: echo, parameters: {n: 2}}
        """,
    )
    assert set(out) == {"one", "two", "run_id", "summary", "usage"}
    assert out["usage"]["calls"] == 0  # reported even when no model was called
    assert out["one"] == {"n": 1}
    assert out["two"] == {"inner": {"n": 2}}
    assert isinstance(out["run_id"], str) and out["run_id"]


async def test_the_outputs_mapping_shapes_the_result(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: shaped
        steps:
          - id: e
            skill: echo
            parameters: {xs: [3, 1, 2]}
        outputs:
          biggest: "{{ e.xs | max }}"
          sorted: "{{ e.xs | sort }}"
          label: "max is {{ e.xs | max }}"
        """,
    )
    assert out.pop("summary")["total"] == 1 and out.pop("usage")["calls"] == 0
    assert out == {"biggest": 3, "sorted": [1, 2, 3], "label": "max is 3", "run_id": out["run_id"]}


# -- the MCP surface: tools/list, meta tools, resources ------------------------------------------

LISTED = """
id: listed
name: Listed pipeline
description: A pipeline to check how it is listed.
inputs:
  path: {type: string, description: Where to look}
  depth: {type: integer, default: 2}
steps:
  - id: e
    skill: echo
    parameters: {path: "{{ path }}", depth: "{{ depth }}"}
outputs:
  echoed: "{{ e }}"
"""


async def test_a_pipeline_is_listed_as_a_tool_with_its_input_and_output_schemas(home: Path, skills: Path) -> None:
    publish(home, LISTED)
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("listed", {"path": "/x"})
        refused = await client.call_tool("listed", {"depth": 3})
    tool = tools["listed"]
    assert tool.title == "Listed pipeline"
    assert tool.description is not None and tool.description.startswith("A pipeline to check how it is listed.")
    assert "path" in tool.description and "echoed" in tool.description
    assert tool.input_schema["properties"] == {
        "path": {"type": "string", "description": "Where to look"},
        "depth": {"type": "integer", "default": 2},
    }
    assert tool.input_schema["required"] == ["path"]
    assert tool.output_schema is not None
    # its outputs, run_id, summary and usage; or, answered with a run handle, status/progress/hint
    assert set(tool.output_schema["properties"]) == {
        "echoed",
        "run_id",
        "usage",
        "summary",
        "status",
        "progress",
        "hint",
    }
    finished, handle = tool.output_schema["anyOf"]
    assert "run_id" in finished["required"]
    assert handle["required"] == ["run_id", "status", "hint"]
    assert result.structured_content is not None
    assert result.structured_content["echoed"] == {"path": "/x", "depth": 2}
    assert refused.is_error and "path" in _text(refused)
    assert {"validate_pipeline", "register_pipeline", "code-review"} <= set(tools)


async def test_validate_pipeline_reports_each_problem_with_line_and_column(home: Path, skills: Path) -> None:
    broken = textwrap.dedent(
        """\
        id: broken
        steps:
          - id: a
            skill: echo
            parameters: {x: "{{ nope }}"}
          - id: b
            skill: no-such-skill
        """
    )
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("validate_pipeline", {"yaml": broken})
        good = await client.call_tool("validate_pipeline", {"yaml": LISTED})
        syntax = await client.call_tool("validate_pipeline", {"yaml": "id: x\nsteps: [\n"})
    data = result.structured_content
    assert data is not None and data["valid"] is False
    by_line = {(i["line"], i["col"]): i for i in data["issues"]}
    assert set(by_line) >= {(5, 21), (7, 12)}, data["issues"]
    assert "nope" in by_line[(5, 21)]["message"]
    assert "no-such-skill" in by_line[(7, 12)]["message"]
    good_data = good.structured_content
    assert good_data is not None and good_data["valid"] is True and good_data["issues"] == []
    assert good_data["id"] == "listed" and "path" in good_data["help"] and "depth" in good_data["help"]
    syntax_data = syntax.structured_content
    assert syntax_data is not None and syntax_data["valid"] is False
    assert syntax_data["issues"][0]["line"] >= 2


async def test_register_pipeline_publishes_at_once_and_tells_clients(home: Path, skills: Path) -> None:
    send, receive = anyio.create_memory_object_stream[str](10)

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            send.send_nowait("tools/list_changed")

    try:
        server = create_server(home=home, skill_dirs=[skills])
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            assert "listed" not in {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("register_pipeline", {"yaml": LISTED})
            assert not result.is_error, _text(result)
            assert result.structured_content is not None and result.structured_content["registered"] is True
            with anyio.fail_after(5):
                assert await receive.receive() == "tools/list_changed"
            assert "listed" in {t.name for t in (await client.list_tools()).tools}
            ran = await client.call_tool("listed", {"path": "p"})
            again = await client.call_tool("register_pipeline", {"yaml": LISTED})
            replaced = await client.call_tool(
                "register_pipeline", {"yaml": LISTED.replace("default: 2", "default: 9"), "overwrite": True}
            )
            ran_again = await client.call_tool("listed", {"path": "p"})
    finally:
        send.close()
        receive.close()
    assert ran.structured_content is not None and ran.structured_content["echoed"] == {"path": "p", "depth": 2}
    assert (home / "pipelines" / "listed.yaml").is_file()
    assert again.is_error and "overwrite" in _text(again)
    assert not replaced.is_error
    assert ran_again.structured_content is not None and ran_again.structured_content["echoed"]["depth"] == 9


async def test_register_pipeline_refuses_a_broken_pipeline_with_its_issues(home: Path, skills: Path) -> None:
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("register_pipeline", {"yaml": LISTED.replace("{{ path }}", "{{ pth }}")})
        names = {t.name for t in (await client.list_tools()).tools}
    assert result.is_error
    data = result.structured_content
    assert data is not None and data["registered"] is False
    assert any("pth" in i["message"] and "path" in i["hint"] for i in data["issues"])
    assert "listed" not in names
    assert not (home / "pipelines" / "listed.yaml").exists()


async def test_a_broken_pipeline_file_is_not_published_and_the_others_still_are(home: Path, skills: Path) -> None:
    publish(home, LISTED)
    publish(home, "id: bad\nsteps:\n  - id: a\n    skill: echo\n    parameters: {x: '{{ missing_name }}'}\n")
    (home / "pipelines" / "garbled.yaml").write_text("id: garbled\nsteps: [\n")
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        result = await client.call_tool("listed", {"path": "ok"})
    assert "listed" in names and "code-review" in names
    assert "bad" not in names and "garbled" not in names
    assert not result.is_error


async def test_a_pipeline_source_and_its_graph_are_resources(home: Path, skills: Path) -> None:
    publish(home, BRANCHES)
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        source = await client.read_resource("pipeline://route")
        graph = await client.read_resource("pipeline://route/graph")
        with pytest.raises(MCPError):
            await client.read_resource("pipeline://nope")
    assert "pipeline://route" in listed
    text = source.contents[0]
    assert isinstance(text, TextResourceContents) and text.text == (home / "pipelines" / "route.yaml").read_text()
    mermaid = graph.contents[0]
    assert isinstance(mermaid, TextResourceContents)
    assert mermaid.text.startswith(("flowchart", "graph"))
    for step in ("pick", "big", "medium", "small", "zero", "after"):
        assert step in mermaid.text


async def test_a_file_written_in_a_run_is_a_run_resource_and_paths_out_of_the_run_are_refused(
    home: Path, skills: Path
) -> None:
    publish(
        home,
        """
        id: writer
        steps:
          - id: w
            skill: write-file
            parameters: {path: notes/out.txt, content: "hello from the run"}
        outputs:
          path: "{{ w.path }}"
        """,
    )
    (home / "secret.txt").write_text("not for clients")
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        result = await client.call_tool("writer", {})
        data = result.structured_content
        assert data is not None
        run_id = data["run_id"]
        artifact = await client.read_resource(f"run://{run_id}/notes/out.txt")
        with pytest.raises(MCPError, match="refused"):
            await client.read_resource(f"run://{run_id}/../../../secret.txt")
        with pytest.raises(MCPError, match="refused"):
            await client.read_resource(f"run://{run_id}/%2e%2e/%2e%2e/%2e%2e/secret.txt")
        with pytest.raises(MCPError):
            await client.read_resource("run://no-such-run/notes/out.txt")
    content = artifact.contents[0]
    assert isinstance(content, TextResourceContents) and content.text == "hello from the run"
    assert Path(data["path"]) == home / "pipelines" / "writer" / "runs" / run_id / "notes" / "out.txt"


# -- the sandbox through a pipeline ----------------------------------------------------------------

ESCAPE = """
id: escape
steps:
  - id: e
    skill: echo
    parameters: {x: "{{ ''.__class__.__mro__ }}"}
"""


async def test_a_sandbox_escape_in_a_parameter_is_refused_at_verification(home: Path, skills: Path) -> None:
    publish(home, ESCAPE)
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        checked = await client.call_tool("validate_pipeline", {"yaml": ESCAPE})
        registered = await client.call_tool("register_pipeline", {"yaml": ESCAPE, "overwrite": True})
    assert "escape" not in names
    data = checked.structured_content
    assert data is not None and data["valid"] is False
    [issue] = [i for i in data["issues"] if i["severity"] == "error"]
    assert (issue["line"], issue["col"]) == (6, 21)
    assert issue["message"].startswith("not allowed in a pipeline expression: access to '__mro__'")
    assert "internal" in issue["hint"]
    assert registered.is_error


@pytest.mark.parametrize(
    "payload",
    [
        "{{ e.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ self._TemplateReference__context }}",
        "{{ x.__globals__ }}",
        "{{ lipsum.__globals__ }}",
    ],
)
async def test_jinja_escape_payloads_in_a_pipeline_are_refused_with_a_clear_message(
    home: Path, skills: Path, payload: str
) -> None:
    text = f'id: esc\nsteps:\n  - id: e\n    skill: echo\n    parameters: {{x: "{payload}"}}\n'
    async with Client(create_server(home=home, skill_dirs=[skills])) as client:
        checked = await client.call_tool("validate_pipeline", {"yaml": text})
    data = checked.structured_content
    assert data is not None and data["valid"] is False
    errors = [i for i in data["issues"] if i["severity"] == "error"]
    assert errors and all(i["line"] == 5 for i in errors)
    assert all(i["message"].startswith("not allowed in a pipeline expression") for i in errors)


async def test_parallel_items_see_the_state_before_the_loop_and_the_last_items_assignment_wins(
    home: Path, skills: Path
) -> None:
    out = await run(
        home,
        skills,
        """
        id: parstate
        state:
          last: start
        steps:
          - id: each
            for: {items: [a, b, c], variable: x, parallel: true}
            steps:
              - id: e
                skill: echo
                parameters: {x: "{{ x }}", saw: "{{ last }}"}
                state:
                  last: "{{ x }}"
          - id: after
            skill: echo
            parameters: {last: "{{ last }}"}
        """,
    )
    assert [item["e"]["saw"] for item in out["each"]] == ["start", "start", "start"]
    assert out["after"] == {"last": "c"}


async def test_an_error_continued_inside_a_parallel_loop_is_that_items_result(home: Path, skills: Path) -> None:
    out = await run(
        home,
        skills,
        """
        id: partial
        steps:
          - id: each
            for: {items: [ok, bad, ok], variable: what, parallel: true}
            skill: echo
            parameters: {what: "{{ what }}", n: "{{ 1 if what == 'ok' else none }}"}
          - id: checked
            for: {items: "{{ each }}", variable: r, parallel: true}
            skill: fail
            condition: "{{ true }}"
            parameters: {message: "{{ r.what }}"}
            on_error: continue
        """,
        partial=True,
    )
    assert [r["what"] for r in out["each"]] == ["ok", "bad", "ok"]
    assert [r["step"] for r in out["checked"]] == ["checked"] * 3
    assert ["bad" in r["error"] for r in out["checked"]] == [False, True, False]
