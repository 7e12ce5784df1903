"""Pipeline help improved by a model, cached by the pipeline file's hash.

The deterministic `describe.help_text` stays the ground truth for the facts (inputs, outputs,
steps, an example call); a model adds a short overview in plain words of what the pipeline
does, what to give it, what comes back and what to watch out for (the seed's compile-time help).
The overview is kept in `<home>/cache/help-<sha256>.txt`, so a pipeline file asks a model once;
reading the cache is synchronous and cheap, so a tool description can use it. Without a model,
or when the model fails, the deterministic help is used: help never fails a call.

Two ways an overview gets written: `register_pipeline` asks the calling client's model (or the
API) before publishing; and `HelpWriter`, started with the server, writes one for every
published pipeline that has none — but only with a model that needs no client (the Anthropic
API key): a connected client's sampling is never spent in the background. It works after
start-up (never delaying it), on a few pipelines at a time, again whenever the published
pipelines change; a pipeline whose overview failed is logged once and not asked again until
its file changes (or the server restarts).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from skills import SkillContext, SkillRunError
from skills.core.models import ModelAccess

from ..language.describe import help_text
from ..language.help_cache import cached_overview, help_cache_file, text_hash, with_overview
from ..language.spec import PipelineSpec

if TYPE_CHECKING:
    from ..service import PipelineService
    from ..source import PipelineSkill

__all__ = [
    "HELP_CONCURRENCY",
    "HelpWriter",
    "cached_overview",
    "help_cache_file",
    "improved_help",
    "text_hash",
    "with_overview",
]

log = logging.getLogger("pipelines.help")

_MAX_OVERVIEW = 1500
_SYSTEM = """\
You write the overview at the top of a tool's help: 3 to 5 plain sentences saying what the
pipeline does, which inputs matter and in what form, what it returns, and any important
limitation. Do not repeat the lists that follow it, do not invent facts, no Markdown headings,
no code blocks. Answer with the overview text only."""


async def improved_help(
    spec: PipelineSpec, digest: str, ctx: SkillContext, *, cache_dir: Path | None, source: str | None = None
) -> str:
    """The help text of `spec`, improved by a model when one is available (cached by `digest`).

    `source` (the YAML text) gives the model more to go on; it is optional.
    """
    overview = cached_overview(cache_dir, digest)
    if overview is None:
        access = ctx.extras.get("model")
        try:
            overview = await _ask(spec, access, source) if access is not None else None
        except SkillRunError as exc:  # no provider, or the provider failed: the plain help will do
            log.info("help for %s not improved: %s", spec.id, exc)
        if overview is not None and cache_dir is not None:
            _store(help_cache_file(cache_dir, digest), overview)
    return with_overview(spec, overview)


async def _ask(spec: PipelineSpec, access: ModelAccess, source: str | None) -> str | None:
    """The model's overview (None for an empty answer); raises `SkillRunError` when the call fails."""
    prompt = f"The pipeline's generated help:\n\n{help_text(spec)}"
    if source:
        prompt += f"\n\nIts YAML source:\n\n```yaml\n{source[:12_000]}\n```"
    completion = await access.complete(
        [{"role": "user", "content": prompt}], system=_SYSTEM, model="orchestrator", max_tokens=400
    )
    text = completion.text.strip().strip("`").strip()
    if not text:
        return None
    return text if len(text) <= _MAX_OVERVIEW else text[: _MAX_OVERVIEW - 3].rstrip() + "..."


def _store(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:  # a read-only home: the overview is just not kept
        log.debug("help cache not written: %s", exc)


HELP_CONCURRENCY = 2
"""Overviews the background writer asks for at once (a model call each)."""


class HelpWriter:
    """Writes the missing overviews of the published pipelines, in the background (see the module)."""

    def __init__(
        self,
        service: PipelineService,
        access: Callable[[], ModelAccess | None],
        *,
        concurrency: int = HELP_CONCURRENCY,
    ) -> None:
        self.service = service
        self.access = access
        """A model access that needs no client (the API), or None: then nothing is written."""
        self.limiter = anyio.CapacityLimiter(concurrency)
        self.failed: set[str] = set()
        """File hashes whose overview failed: not asked again (a changed file has a new hash)."""
        self.written = 0
        self.passes = 0
        self.idle = anyio.Event()
        """Set when a pass is over and no change is waiting (tests and shutdown wait on it)."""
        self._wake = anyio.Event()

    async def run(self) -> None:
        """Write what is missing now, then again after every change of the published pipelines."""
        unsubscribe = self.service.catalog.subscribe(self._changed)
        try:
            while True:
                self._wake = anyio.Event()
                try:
                    await self.write_missing()
                except Exception:  # why: the top of a background task; a bug here must not stop the server
                    log.exception("the help writer failed; overviews are written again after the next change")
                self.passes += 1
                self.idle.set()
                await self._wake.wait()
                self.idle = anyio.Event()
        finally:
            unsubscribe()

    async def _changed(self, catalog: Any) -> None:
        self._wake.set()

    def missing(self) -> list[tuple[PipelineSkill, str]]:
        """Published pipelines without an overview (and not failed before), with their file hash."""
        from ..source import PipelineSkill

        cache = self.service.home.cache_dir
        todo: list[tuple[PipelineSkill, str]] = []
        for skill in self.service.catalog:
            if isinstance(skill, PipelineSkill):
                digest = skill.digest()
                if digest and digest not in self.failed and cached_overview(cache, digest) is None:
                    todo.append((skill, digest))
        return todo

    async def write_missing(self) -> None:
        todo = self.missing()
        access = self.access() if todo else None
        if access is None:
            return
        done: list[str] = []
        async with anyio.create_task_group() as tg:
            for skill, digest in todo:
                tg.start_soon(self._write, skill, digest, access, done)
        if done:
            self.written += len(done)
            log.info("wrote the help overview of %s", ", ".join(done))
            await self.service.catalog.notify()  # tool descriptions changed: clients hear tools/list_changed

    async def _write(self, skill: PipelineSkill, digest: str, access: ModelAccess, done: list[str]) -> None:
        async with self.limiter:
            try:
                overview = await _ask(skill.spec, access.child(), skill.body())
            except (SkillRunError, OSError, UnicodeDecodeError) as exc:  # logged once: never asked in a loop
                self.failed.add(digest)
                log.warning(
                    "no help overview for pipeline %s (not retried until its file changes): %s", skill.name, exc
                )
                return
        if overview is None:
            self.failed.add(digest)
            return
        _store(help_cache_file(self.service.home.cache_dir, digest), overview)
        done.append(skill.name)
