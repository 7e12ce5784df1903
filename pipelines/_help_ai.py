"""Pipeline help improved by a model, cached by the pipeline file's hash.

The deterministic `describe.help_text` stays the ground truth for the facts (inputs, outputs,
steps, an example call); a model adds a short overview in plain words of what the pipeline
does, what to give it, what comes back and what to watch out for (the seed's compile-time help).
The overview is kept in `<home>/cache/help-<sha256>.txt`, so a pipeline file asks a model once;
reading the cache is synchronous and cheap, so a tool description can use it. Without a model,
or when the model fails, the deterministic help is used: help never fails a call.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from skills import SkillContext, SkillRunError

from .describe import help_text
from .spec import PipelineSpec

__all__ = ["cached_overview", "help_cache_file", "improved_help", "text_hash", "with_overview"]

log = logging.getLogger("pipelines.help")

_MAX_OVERVIEW = 1500
_SYSTEM = """\
You write the overview at the top of a tool's help: 3 to 5 plain sentences saying what the
pipeline does, which inputs matter and in what form, what it returns, and any important
limitation. Do not repeat the lists that follow it, do not invent facts, no Markdown headings,
no code blocks. Answer with the overview text only."""


def text_hash(text: str) -> str:
    """The cache key of a pipeline file: SHA-256 of its text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def help_cache_file(cache_dir: Path, digest: str) -> Path:
    return cache_dir / f"help-{digest}.txt"


def cached_overview(cache_dir: Path | None, digest: str) -> str | None:
    """The model's overview for a file hash, if one was made (synchronous; for tool descriptions)."""
    if cache_dir is None:
        return None
    try:
        text = help_cache_file(cache_dir, digest).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def with_overview(spec: PipelineSpec, overview: str | None, *, description: bool = True) -> str:
    """`help_text` with the overview after the title (and description): the improved help."""
    text = help_text(spec, description=description)
    if not overview:
        return text
    title, _, rest = text.partition("\n\n## Inputs")
    return f"{title}\n\n{overview}\n\n## Inputs{rest}" if rest else f"{text}\n\n{overview}"


async def improved_help(
    spec: PipelineSpec, digest: str, ctx: SkillContext, *, cache_dir: Path | None, source: str | None = None
) -> str:
    """The help text of `spec`, improved by a model when one is available (cached by `digest`).

    `source` (the YAML text) gives the model more to go on; it is optional.
    """
    overview = cached_overview(cache_dir, digest)
    if overview is None:
        overview = await _ask(spec, ctx, source)
        if overview is not None and cache_dir is not None:
            _store(help_cache_file(cache_dir, digest), overview)
    return with_overview(spec, overview)


async def _ask(spec: PipelineSpec, ctx: SkillContext, source: str | None) -> str | None:
    access = ctx.extras.get("model")
    if access is None:
        return None
    prompt = f"The pipeline's generated help:\n\n{help_text(spec)}"
    if source:
        prompt += f"\n\nIts YAML source:\n\n```yaml\n{source[:12_000]}\n```"
    try:
        completion = await access.complete(
            [{"role": "user", "content": prompt}], system=_SYSTEM, model="orchestrator", max_tokens=400
        )
    except SkillRunError as exc:  # no provider, or the provider failed: the plain help will do
        log.info("help for %s not improved: %s", spec.id, exc)
        return None
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
