"""Reading the cached model overviews of pipeline help (`pipelines.planning.help_ai` writes them).

Part of the language (beside `describe`, the help generated from the YAML) and not of planning:
a published pipeline (`source.PipelineSkill`) reads its overview for its tool description, while
planning's background writer looks for published pipelines. With the reading half here, the
published pipelines never import planning, and planning may build on them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from .describe import help_text

if TYPE_CHECKING:
    from pathlib import Path

    from .spec import PipelineSpec

__all__ = ["cached_overview", "help_cache_file", "text_hash", "with_overview"]


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
