"""The model registry (SPEC 6): roles -> model ids, known models, prices, provider order.

The shipped defaults (`skills/defaults/models.yaml`, installed to `<home>/models/registry.yaml`)
are always the base; the home file is layered over them: its roles, provider order and models
win, and models it does not list still come from the defaults (so a new release's models reach a
user who edited the file). A home file that cannot be used is reported with its line and field,
and the defaults are used instead, so a typo never takes the models away.
"""

from __future__ import annotations

import difflib
import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skills import Home, Problem
from skills.core.home import DEFAULT_MODELS_FILE
from skills.core.yamltext import compose_yaml, read_bounded

from .errors import ModelRegistryError, UnknownModelError

__all__ = [
    "DEFAULT_ROLE",
    "ROLES",
    "ModelInfo",
    "ModelRegistry",
    "ProviderName",
    "load_registry",
    "read_registry_file",
]

log = logging.getLogger("adapters.models")

ProviderName = Literal["anthropic", "sampling"]
ROLES = ("orchestrator", "review", "validation")
"""The roles of the seed design; a registry may add its own."""
DEFAULT_ROLE = "orchestrator"
"""What a call that names no model gets."""


# -- the file's schema (these docstrings are the user's documentation) ----------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LongContextPrice(_Strict):
    """Prices that apply instead when a request's input is above `above` tokens."""

    above: int = Field(gt=0)
    """Input tokens above which these prices apply."""
    input: float = Field(ge=0)
    """USD per million input tokens."""
    output: float = Field(ge=0)
    """USD per million output tokens."""


class ModelEntry(_Strict):
    """One known model."""

    input: float = Field(ge=0)
    """USD per million input tokens (list price; used for cost accounting and cost limits)."""
    output: float = Field(ge=0)
    """USD per million output tokens."""
    max_tokens: int = Field(default=4096, gt=0)
    """Answer length when a call names none."""
    long_context: LongContextPrice | None = None
    """Other prices for long requests (e.g. Haiku's above 100,000 input tokens)."""
    description: str | None = None
    """A note for humans."""


class RegistryFile(_Strict):
    """`models/registry.yaml`."""

    roles: dict[str, str] = {}
    """Role -> model id (`orchestrator`, `review`, `validation`, and any of your own)."""
    providers: list[ProviderName] | None = Field(default=None, min_length=1)
    """Who answers a model call, first available wins: `anthropic` (ANTHROPIC_API_KEY set), `sampling`."""
    models: dict[str, ModelEntry] = {}
    """Known model ids and their prices."""


# -- the registry ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelInfo:
    """What the registry knows about one model id."""

    id: str
    input_price: float
    output_price: float
    max_tokens: int = 4096
    long_context: LongContextPrice | None = None

    @property
    def family(self) -> str | None:
        """opus | sonnet | haiku | ... (the model hint a sampling client understands best)."""
        parts = self.id.split("-")
        return parts[1] if len(parts) > 2 and parts[0] == "claude" else None

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """USD for one call."""
        inp, out = self.input_price, self.output_price
        if self.long_context is not None and input_tokens > self.long_context.above:
            inp, out = self.long_context.input, self.long_context.output
        return (input_tokens * inp + output_tokens * out) / 1_000_000


@dataclass
class ModelRegistry:
    """Roles, known models and provider order, with the problems found while loading them."""

    roles: dict[str, str]
    models: dict[str, ModelInfo]
    providers: tuple[ProviderName, ...] = ("anthropic", "sampling")
    source: Path | None = None
    """The home file layered over the defaults (None: the shipped defaults alone)."""
    problems: list[Problem] = field(default_factory=list[Problem])
    """Why the home file was not used (empty when it was, or when there is none)."""

    def resolve(self, model: str | None) -> str:
        """The model id of a role or an id; `None` is the `orchestrator` role."""
        name = DEFAULT_ROLE if model is None else model.strip()
        if name in self.roles:
            return self.roles[name]
        if name in self.models:
            return name
        close = difflib.get_close_matches(name, sorted(self.known()), n=1, cutoff=0.6)
        roles = ", ".join(sorted(self.roles))
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise UnknownModelError(
            f"unknown model '{name}'",
            hint=f"{hint}roles: {roles}; models are listed in models/registry.yaml",
        )

    def known(self) -> set[str]:
        """Every role and model id (what a pipeline may name)."""
        return set(self.roles) | set(self.models)

    def info(self, model: str | None) -> ModelInfo:
        return self.models[self.resolve(model)]

    def price(self, model: str | None) -> tuple[float, float]:
        """(USD per million input tokens, USD per million output tokens)."""
        info = self.info(model)
        return info.input_price, info.output_price

    def cost(self, model: str | None, input_tokens: int, output_tokens: int) -> float:
        """USD of a call; 0 for a model the registry does not price (e.g. a client's own)."""
        if model is None or (model not in self.models and model not in self.roles):
            return 0.0
        return self.info(model).cost(input_tokens, output_tokens)


# -- loading ----------------------------------------------------------------------------------
def load_registry(home: Home | Path | str | None = None) -> ModelRegistry:
    """The registry of a home (`Home` or its root path): its file over the shipped defaults.

    `None` gives the shipped defaults alone. Never raises for the user's file: a broken one is
    logged with its line and field, kept in `problems`, and the defaults are used.
    """
    defaults = _shipped()
    root = home.root if isinstance(home, Home) else home
    path = Path(root) / "models" / "registry.yaml" if root is not None else None
    if path is None or not path.is_file():
        return _build(defaults, None, None)
    try:
        mine = read_registry_file(path, base=defaults)
    except ModelRegistryError as exc:
        log.error("%s cannot be used, the shipped model defaults apply instead: %s", path, exc)
        registry = _build(defaults, None, None)
        registry.problems = list(exc.problems)
        return registry
    except OSError as exc:
        log.error("%s cannot be read, the shipped model defaults apply instead: %s", path, exc)
        registry = _build(defaults, None, None)
        registry.problems = [Problem(path, f"cannot be read: {exc.strerror or exc}")]
        return registry
    return _build(defaults, mine, path)


@functools.cache
def _shipped() -> RegistryFile:
    """The shipped defaults (read once: they change only with the package)."""
    return read_registry_file(DEFAULT_MODELS_FILE)


def read_registry_file(path: Path, *, base: RegistryFile | None = None) -> RegistryFile:
    """Parse and check one registry file; raises `ModelRegistryError` listing every problem.

    With `base` (the defaults), a role may name a model that only the base knows.
    """
    try:
        text = read_bounded(path)
    except UnicodeDecodeError as exc:
        raise ModelRegistryError(
            path, [Problem(path, f"not UTF-8 text: {exc.reason}", hint="save it as UTF-8")]
        ) from None
    try:
        node, data = compose_yaml(text)  # bounded: a deep or alias-bomb file is a reported problem
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ModelRegistryError(
            path, [Problem(path, f"{where}not valid YAML: {problem}", hint="fix the YAML syntax")]
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ModelRegistryError(
            path, [Problem(path, "line 1: must be a mapping", hint="top-level keys: roles, providers, models")]
        )
    try:
        parsed = RegistryFile.model_validate(data)
    except ValidationError as exc:
        problems = [_problem(path, node, err) for err in exc.errors()]
        raise ModelRegistryError(path, problems) from None
    known = set(parsed.models) | (set(base.models) if base is not None else set[str]())
    problems: list[Problem] = []
    for role, target in parsed.roles.items():
        line = _line_of(node, ("roles", role))
        if role in known:
            hint = "a role's name must differ from every model id"
            problems.append(Problem(path, f"{line}role '{role}' has the name of a model", hint, f"roles.{role}"))
        elif target not in known:
            close = difflib.get_close_matches(target, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else "list the model under `models:` first"
            problems.append(
                Problem(path, f"{line}role '{role}' names the unknown model '{target}'", hint, f"roles.{role}")
            )
    if problems:
        raise ModelRegistryError(path, problems)
    return parsed


def _build(defaults: RegistryFile, mine: RegistryFile | None, source: Path | None) -> ModelRegistry:
    entries = dict(defaults.models)
    roles = dict(defaults.roles)
    providers = defaults.providers or ["anthropic", "sampling"]
    if mine is not None:
        entries.update(mine.models)
        roles.update(mine.roles)
        providers = mine.providers or providers
    models = {mid: ModelInfo(mid, e.input, e.output, e.max_tokens, e.long_context) for mid, e in entries.items()}
    return ModelRegistry(roles=roles, models=models, providers=tuple(_unique(providers)), source=source)


def _unique(items: Iterable[ProviderName]) -> list[ProviderName]:
    seen: list[ProviderName] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _problem(path: Path, node: yaml.Node | None, err: Mapping[str, Any]) -> Problem:
    loc = tuple(str(p) for p in err["loc"])
    dotted = ".".join(loc)
    if err["type"] == "extra_forbidden":
        parent = loc[:-1]
        allowed = _allowed_keys(parent)
        close = difflib.get_close_matches(loc[-1], allowed, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"allowed here: {', '.join(allowed)}"
        return Problem(path, f"{_line_of(node, loc)}unknown key '{loc[-1]}'", hint, dotted)
    if loc and loc[0] == "providers":
        hint = "providers: a list of anthropic and sampling, in the order to try them"
    elif len(loc) >= 3 and loc[0] == "models":
        hint = "prices are USD per million tokens, e.g. {input: 2.0, output: 10.0}"
    else:
        hint = "see the comments in the shipped registry (orchestrator install writes it)"
    return Problem(path, f"{_line_of(node, loc)}{dotted}: {err['msg']}", hint, dotted)


def _allowed_keys(parent: tuple[str, ...]) -> list[str]:
    if not parent:
        return list(RegistryFile.model_fields)
    if parent[0] == "models" and len(parent) == 2:
        return list(ModelEntry.model_fields)
    if parent[0] == "models" and len(parent) == 3:
        return list(LongContextPrice.model_fields)
    return []


def _line_of(node: yaml.Node | None, loc: tuple[str, ...]) -> str:
    """'line N: ' of the deepest node on `loc` that the YAML has (the file's own numbering)."""
    found = node
    for part in loc:
        if isinstance(found, yaml.MappingNode):
            match = next((v for k, v in found.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
            if match is None:
                key = next((k for k, _ in found.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
                found = key if key is not None else found
                break
            found = match
        elif isinstance(found, yaml.SequenceNode) and part.isdigit() and int(part) < len(found.value):
            found = found.value[int(part)]
        else:
            break
    return f"line {found.start_mark.line + 1}: " if found is not None else ""
