"""flaky-check: a deterministic stand-in for an operation that fails a few times, then works."""

from __future__ import annotations

import re
from typing import Any

from skills.base import SkillContext
from skills.errors import SkillRunError


def _next_attempt(ctx: SkillContext, key: str) -> int:
    """Count this call in the run's artifact directory (one counter per key)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)[:100] or "default"
    counter = ctx.artifacts() / ".flaky-check" / f"{safe}.count"
    counter.parent.mkdir(parents=True, exist_ok=True)
    try:
        previous = int(counter.read_text(encoding="utf-8").strip() or 0)
    except (FileNotFoundError, ValueError):
        previous = 0
    counter.write_text(str(previous + 1), encoding="utf-8")
    return previous + 1


def flaky_check(
    attempt: int | None = None,
    succeed_at: int = 3,
    key: str = "default",
    fail_with_error: bool = False,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    if attempt is None:
        attempt = _next_attempt(ctx or SkillContext(skill="flaky-check"), key)
    ok = attempt >= succeed_at
    remaining = max(succeed_at - attempt, 0)
    if not ok and fail_with_error:
        raise SkillRunError(
            f"attempt {attempt} failed: flaky-check succeeds from attempt {succeed_at}",
            hint=f"retry {remaining} more time(s), e.g. with `retry: {{attempts: {succeed_at}}}` on the step",
        )
    return {
        "ok": ok,
        "attempt": attempt,
        "succeed_at": succeed_at,
        "remaining": remaining,
        "message": f"attempt {attempt}: "
        + ("success" if ok else f"not yet ({remaining} more attempt(s) needed)"),
    }
