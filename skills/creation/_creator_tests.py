"""Test cases of a created skill (`tests.json`) and their run in the script sandbox (confined).

A case gives `arguments` and what to expect of the result: `expected` (every key given must
match, extra keys in the result are fine; numbers compare with a small tolerance) and/or
`checks`, each naming a `path` into the result (`a.b.0`) and one test:
`equals`, `contains`, `type`, `min`, `max`, `length`, `matches` (a regular expression).
`error: true` expects the call to fail. The result must also fit the skill's `outputs` schema.
"""

from __future__ import annotations

import math
import operator
import tempfile
from pathlib import Path
from typing import Any, Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field

from ..core.base import LogFn
from ..core.contract import SkillContract
from ..core.errors import SkillsError
from ..core.jsontext import JSON
from ..core.regex import PatternError, compile_pattern
from ..core.schema import check_arguments, check_output
from ..executors.isolation import Isolation
from ..executors.script import run_script

__all__ = ["Check", "TestCase", "TestOutcome", "run_cases"]

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class Check(BaseModel):
    """One assertion on a part of the result."""

    model_config = ConfigDict(extra="forbid")

    path: str = ""
    """Dotted path into the result (`items.0.name`); empty for the whole result."""
    equals: Any = None
    contains: Any = None
    type: Literal["string", "integer", "number", "boolean", "array", "object", "null"] | None = None
    min: float | None = None
    max: float | None = None
    length: int | None = None
    matches: str | None = None
    """A regular expression the value (as text) must contain a match of."""


class TestCase(BaseModel):
    """One call of the skill and what its result must be."""

    __test__ = False  # not a pytest class
    model_config = ConfigDict(extra="ignore")

    arguments: dict[str, Any] = Field(default_factory=dict)
    expected: Any = None
    """Present (even null) means: compare the result with it."""
    checks: list[Check] = Field(default_factory=lambda: [])
    error: bool = False
    """True: the call is expected to fail (bad input the skill must refuse)."""
    description: str = ""

    @property
    def has_expected(self) -> bool:
        return "expected" in self.model_fields_set

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class TestOutcome(BaseModel):
    """What one test case did."""

    __test__ = False
    index: int
    passed: bool
    arguments: dict[str, Any]
    result: Any = None
    error: str | None = None
    failures: list[str] = Field(default_factory=list)


async def run_cases(
    folder: Path,
    name: str,
    contract: SkillContract,
    cases: list[TestCase],
    *,
    isolation: Isolation,
    log: LogFn | None = None,
) -> list[TestOutcome]:
    """Run every case against the skill's script in the sandbox, with its own limits."""
    assert contract.run.script is not None
    outcomes: list[TestOutcome] = []
    with tempfile.TemporaryDirectory(prefix=f"orchestrator-test-{name}-") as work:
        for index, case in enumerate(cases, start=1):
            where = Path(work) / str(index)
            outcomes.append(await _run_case(folder, name, contract, case, index, where, isolation, log))
    return outcomes


async def _run_case(
    folder: Path,
    name: str,
    contract: SkillContract,
    case: TestCase,
    index: int,
    work: Path,
    isolation: Isolation,
    log: LogFn | None,
) -> TestOutcome:
    outcome = TestOutcome(index=index, passed=False, arguments=case.arguments)
    try:
        check_arguments(name, contract.inputs, case.arguments)
    except SkillsError as exc:
        outcome.failures.append(f"the test's arguments do not fit the skill's inputs: {exc}")
        return outcome
    try:
        result = await run_script(
            folder / str(contract.run.script),
            case.arguments,
            skill=name,
            workdir=work,
            timeout=contract.timeout,
            memory_mb=contract.memory_mb,
            max_output_bytes=contract.max_output_bytes,
            env_allow=contract.env,
            log=log,
            folder=folder,
            network=contract.network,
            isolation=isolation,
            total_memory_mb=contract.total_memory_mb,
            max_processes=contract.max_processes,
        )
    except SkillsError as exc:
        outcome.error = str(exc)
        outcome.passed = case.error
        if not case.error:
            outcome.failures.append(f"the call failed: {exc}")
        return outcome
    outcome.result = result
    if case.error:
        outcome.failures.append("the call was expected to fail but returned a result")
    if contract.outputs is not None:
        try:
            check_output(name, contract.outputs, result)
        except SkillsError as exc:
            outcome.failures.append(str(exc))
    if case.has_expected:
        outcome.failures += compare(case.expected, result, "result")
    for check in case.checks:
        outcome.failures += _apply(check, result)
    outcome.passed = not outcome.failures
    return outcome


def compare(expected: JSON, actual: JSON, where: str) -> list[str]:
    """How `actual` differs from `expected` (dicts: only the expected keys are compared)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {_show(actual)}"]
        out: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                out.append(f"{where}.{key}: missing (expected {_show(value)})")
            else:
                out += compare(value, actual[key], f"{where}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {_show(expected)}, got {_show(actual)}"]
        return [f for i, (e, a) in enumerate(zip(expected, actual, strict=True)) for f in compare(e, a, f"{where}.{i}")]
    if _number(expected) and _number(actual):
        if math.isclose(float(expected), float(actual), rel_tol=1e-6, abs_tol=1e-9):
            return []
    elif expected == actual and type(expected) is type(actual):
        return []
    return [f"{where}: expected {_show(expected)}, got {_show(actual)}"]


def _apply(check: Check, result: JSON) -> list[str]:
    where = f"result.{check.path}" if check.path else "result"
    found, value = _lookup(result, check.path)
    if not found:
        return [f"{where}: missing"]
    out: list[str] = []
    if "equals" in check.model_fields_set:
        out += compare(check.equals, value, where)
    if "contains" in check.model_fields_set:
        inside = check.contains in value if isinstance(value, list | str | dict) else False
        if isinstance(value, str) and not isinstance(check.contains, str):
            inside = False
        if not inside:
            out.append(f"{where}: {_show(value)} does not contain {_show(check.contains)}")
    if check.type is not None:
        ok = isinstance(value, _JSON_TYPES[check.type]) and not (check.type != "boolean" and isinstance(value, bool))
        if not ok:
            out.append(f"{where}: expected type {check.type}, got {_show(value)}")
    for bound, test in (("min", operator.ge), ("max", operator.le)):
        limit = getattr(check, bound)
        if limit is not None and not (_number(value) and test(value, limit)):
            out.append(f"{where}: {_show(value)} is not {'>=' if bound == 'min' else '<='} {limit:g}")
    if check.length is not None and (not isinstance(value, str | list | dict) or len(value) != check.length):
        out.append(f"{where}: expected length {check.length}, got {_show(value)}")
    if check.matches is not None:
        try:
            # RE2: the pattern comes from a model (or a client), so it must not backtrack
            found = compile_pattern(check.matches).search(value if isinstance(value, str) else str(value))
        except PatternError as exc:
            out.append(f"{where}: the check's pattern /{check.matches}/ is not a regular expression: {exc}")
        else:
            if not found:
                out.append(f"{where}: {_show(value)} does not match /{check.matches}/")
    return out


def _lookup(value: JSON, path: str) -> tuple[bool, JSON]:
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and -len(value) <= int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _number(value: JSON) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _show(value: JSON) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
