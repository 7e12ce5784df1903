"""Our nesting bound answers before any YAML parser's (issue 21).

libyaml in PyYAML 6.0.4 refuses flow collections ~1,000 deep in its own words, and its scanner
reads ahead of the events our bound is checked on. The pre-scan in `skills.core._yaml_flow`
finds the first bracket too deep before any parser sees the text. These tests check that the
message and the position are ours for every shape of deep flow, that brackets which are only
text (in quotes, comments, block and plain scalars) never count, and, on generated documents,
that the pre-scan agrees with PyYAML's own scanner about where flow nesting passes a bound.
"""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skills.core._yaml_flow import deep_flow_bracket
from skills.core.yamltext import MAX_DEPTH, YAMLError, describe_yaml_error, load_yaml


def _refusal(text: str) -> str:
    with pytest.raises(YAMLError) as caught:
        load_yaml(text)
    return describe_yaml_error(caught.value)


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("a: " + "[" * 50_000, 3 + MAX_DEPTH),  # the mapping is the first level
        ("a: " + "{" * 50_000, 3 + MAX_DEPTH),
        ("a: " + "[{" * 25_000, 3 + MAX_DEPTH),
        ("a: " + "[" * 1_200 + "]" * 1_200, 3 + MAX_DEPTH),  # closed, and still past libyaml's own limit
        ("- " * 60 + "[" * 2_000, 120 + (MAX_DEPTH + 1 - 60)),  # 60 block levels, then the 41st bracket
        ("a: " + "[ " * 3_000, 3 + 2 * (MAX_DEPTH - 1) + 1),
    ],
)
def test_flow_nested_far_past_libyamls_limit_is_refused_in_our_words_where_our_bound_breaks(
    text: str, column: int
) -> None:
    assert _refusal(text) == (
        f"at line 1, column {column}: nested more than {MAX_DEPTH} levels deep "
        "(counting what aliases repeat); flatten the structure"
    )


def test_a_deep_flow_collection_on_a_later_line_is_refused_at_its_line() -> None:
    text = "id: x\ndescription: 'a [[[ quoted'\nsteps:\n  - " + "[\n" * 5_000
    # the mapping and the sequence are two levels: the bracket 99 lines after the first one is level 101
    assert _refusal(text).startswith(f"at line {4 + MAX_DEPTH - 2}, column 1: nested more than {MAX_DEPTH}")


@pytest.mark.parametrize(
    "text",
    [
        "a: '" + "[" * 5_000 + "'\n",
        'a: "' + "{" * 5_000 + '"\n',
        "a: b" + "[" * 5_000 + "\n",
        "a: b # " + "[" * 5_000 + "\n",
        "# " + "{" * 5_000 + "\nb: 1\n",
        "a: |\n  " + "[" * 5_000 + "\nb: [1]\n",
        "- >-\n  folded\n  " + "{" * 5_000 + "\n- [x]\n",
        "a: plain text\n  continued " + "[" * 5_000 + "\nb: {c: 1}\n",
        "a: ['" + "[" * 5_000 + "', \"" + "{" * 5_000 + '"]\n',
        "a: [x # " + "[" * 5_000 + "\n  ]\n",
        "a: [it's" + "[" * 0 + ", b]\nc: '" + "[" * 5_000 + "'\n",
        "a: &anchor '" + "[" * 5_000 + "'\nb: !!str '" + "{" * 5_000 + "'\n",
    ],
)
def test_brackets_that_are_only_text_never_count(text: str) -> None:
    assert deep_flow_bracket(text, MAX_DEPTH) is None
    assert load_yaml(text) is not None


# Documents of every YAML shape around brackets: PyYAML's dumper writes them in flow, block and
# quoted styles, and the data holds the characters that could confuse a scan.
_TEXTS = st.sampled_from(
    ["a", "b c", "x: y", "[x", "{y}", "it's", 'say "hi"', "#no", "a #b", "- z", "|", "&a", "!t", "", "lines\n[", "]"]
)
_DATA = st.recursive(
    _TEXTS | st.integers(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXTS, inner, max_size=4),
    max_leaves=30,
)


def _scanner_says(text: str, limit: int) -> int | None:
    """Where PyYAML's own (pure-Python) scanner opens a flow collection past `limit`, if it does."""
    loader = yaml.SafeLoader(text)
    depth = 0
    while (token := loader.get_token()) is not None:
        if isinstance(token, yaml.FlowSequenceStartToken | yaml.FlowMappingStartToken):
            depth += 1
            if depth > limit:
                return token.start_mark.index
        elif isinstance(token, yaml.FlowSequenceEndToken | yaml.FlowMappingEndToken):
            depth -= 1
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=_DATA,
    flow=st.sampled_from([None, True, False]),
    style=st.sampled_from([None, "'", '"', "|"]),
    width=st.sampled_from([20, 80, 1000]),
    limit=st.integers(min_value=0, max_value=4),
)
def test_the_pre_scan_finds_the_bracket_yamls_own_scanner_finds(
    data: object, flow: bool | None, style: str | None, width: int, limit: int
) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, default_style=style, width=width)
    assert deep_flow_bracket(text, limit) == _scanner_says(text, limit)
