"""Fuzz of the pipeline loader: any text gives a spec or issues with positions, never an exception.

Derandomized Hypothesis (see `_fuzz.FUZZ`): the same few hundred texts on every run.
"""

from __future__ import annotations

from hypothesis import given

from pipelines.language.verify import check_text
from skills.core.yamltext import YAMLError, load_yaml
from tests._fuzz import fuzz, pipeline_texts


@fuzz(400)
@given(pipeline_texts)
def test_any_pipeline_text_loads_or_is_reported_with_a_position(text: str) -> None:
    spec, issues = check_text(text, "<fuzz>")
    assert spec is not None or issues
    for issue in issues:
        assert issue.file == "<fuzz>" and issue.line >= 1 and issue.col >= 1 and issue.message
        assert "Traceback" not in issue.message


@fuzz(300)
@given(pipeline_texts)
def test_any_text_is_yaml_data_or_a_yaml_error(text: str) -> None:
    try:
        load_yaml(text)
    except YAMLError:
        pass
