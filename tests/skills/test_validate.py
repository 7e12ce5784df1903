"""Strict validation reports every violation of a skill folder at once, each with a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills import check_folder


def test_every_violation_is_reported_even_when_fields_fail_validation(tmp_path: Path) -> None:
    folder = tmp_path / "broken-skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: Broken_Skill\ndescription: ''\nauthor: me\n---\nBody\n")
    (folder / "skill.yaml").write_text(
        "inputs: {type: string}\ntimeout: 99999\nrun: {python: impl:main}\nmodel: orchestrater\n"
    )
    _, _, problems = check_folder(folder, strict=True, models={"orchestrator", "review", "validation"})
    found = {(p.path.name, p.field): p for p in problems}
    names = sorted(p.message for p in problems if p.field == "name")
    assert names == [
        "name 'Broken_Skill' differs from the folder name 'broken-skill'",
        "name 'Broken_Skill' is not lowercase-hyphen form",
    ]
    assert set(found) == {
        ("SKILL.md", "author"),
        ("SKILL.md", "description"),
        ("SKILL.md", "name"),
        ("skill.yaml", "inputs"),
        ("skill.yaml", "timeout"),
        ("skill.yaml", "model"),
        ("skill.yaml", "run"),
    }
    assert all(p.severity == "error" and p.hint for p in problems)
    assert "'impl.py' does not exist" in found["skill.yaml", "run"].message
    assert found["skill.yaml", "timeout"].hint == "give seconds between 0 and 3600"
    assert found["skill.yaml", "model"].hint == "did you mean 'orchestrator'?"


def test_lenient_loading_turns_spec_style_issues_into_warnings(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: notes\ndescription: Notes.\nversion: 2\n---\nBody\n")
    front, contract, problems = check_folder(folder)
    assert front is not None and contract is None
    assert [(p.field, p.severity) for p in problems] == [("version", "warning")]
    _, _, strict = check_folder(folder, strict=True)
    assert [(p.field, p.severity) for p in strict] == [("version", "error")]


def _folder(tmp_path: Path, name: str, skill_md: str, skill_yaml: str) -> Path:
    folder = tmp_path / "skills" / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(skill_md)
    (folder / "skill.yaml").write_text(skill_yaml)
    (folder / "impl.py").write_text("def main(text):\n    return {'text': text}\n")
    return folder


def test_loading_reports_every_error_of_a_folder_also_beside_a_broken_front_matter(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_server import create_server

    folder = _folder(
        tmp_path,
        "weather-note",
        "---\nname: weather-note\ndescription: [unclosed\n---\nBody\n",
        "inputs: {type: object, properties: {text: {type: string}}}\ntimeout: -1\nrun: {python: impl:main}\n",
    )
    server = create_server(home=home, skill_dirs=[tmp_path / "skills"])
    problems = [p for found in server.catalog.problems() if found.path == folder for p in found.error.problems]
    assert {(p.path.name, p.field) for p in problems} == {("SKILL.md", ""), ("skill.yaml", "timeout")}
    assert "weather-note" not in server.catalog
    # the root's summary points at those errors, not at a missing SKILL.md
    assert "1 skill folder(s) could not be loaded" in caplog.text and "no SKILL.md" not in caplog.text


def test_required_naming_no_declared_property_is_an_error_that_suggests_the_property(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        "shout",
        "---\nname: shout\ndescription: Shouts.\n---\nBody\n",
        "inputs:\n  type: object\n  properties: {text: {type: string}}\n  required: [txt]\nrun: {python: impl:main}\n",
    )
    for strict in (False, True):  # loading refuses the skill, as validate does
        _, _, problems = check_folder(folder, strict=strict)
        [problem] = problems
        assert (problem.severity, problem.field, problem.line) == ("error", "inputs.required.0", 4)
        assert "'txt'" in problem.message
        assert "did you mean 'text'?" in problem.hint


def test_a_required_name_other_properties_may_match_is_accepted(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        "tagged",
        "---\nname: tagged\ndescription: Tags.\n---\nBody\n",
        "inputs:\n  type: object\n  additionalProperties: {type: string}\n  required: [label]\n"
        "run: {python: impl:main}\n",
    )
    assert check_folder(folder, strict=True)[2] == []


def test_unknown_or_mistyped_annotations_are_errors_naming_the_key(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        "careful",
        "---\nname: careful\ndescription: Careful.\n---\nBody\n",
        "run: {python: impl:main}\n"
        "annotations: {readOnlyHint: true, readonlyhint: true, cached: true, idempotentHint: 'yes'}\n",
    )
    _, _, problems = check_folder(folder)
    found = {p.field: p for p in problems}
    assert set(found) == {"annotations.readonlyhint", "annotations.cached", "annotations.idempotentHint"}
    assert all(p.severity == "error" and p.path.name == "skill.yaml" and p.line == 2 for p in problems)
    assert "did you mean 'readOnlyHint'?" in found["annotations.readonlyhint"].hint
    assert "readOnlyHint" in found["annotations.cached"].hint
    assert "true or false" in found["annotations.idempotentHint"].message
