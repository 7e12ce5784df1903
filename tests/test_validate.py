"""Strict validation reports every violation of a skill folder at once, each with a hint."""

from __future__ import annotations

from pathlib import Path

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
