"""text-stats: counts and reading time of a text or a text file."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from skills.base import SkillContext
from skills.errors import SkillRunError
from skills.roots import allowed_path

_WORD = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?:['\u2019-][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?\u2026]+(?=[\s\"'\u201d\u2019)\]]|$)")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_MAX_FILE_BYTES = 50_000_000

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves s t don""".split()
)


def _load(text: str | None, path: str | None, encoding: str, ctx: SkillContext | None) -> tuple[str, str | None]:
    if (text is None) == (path is None):
        raise SkillRunError(
            "give exactly one of `text` or `path`", hint="text counts the string given; path reads a file"
        )
    if text is not None:
        return text, None
    assert path is not None
    file = allowed_path(ctx, path)
    if not file.is_file():
        raise SkillRunError(
            f"file not found: {path}" if not file.exists() else f"{path} is not a file",
            hint="give the path of a text file, or pass the text itself as `text`",
        )
    if file.stat().st_size > _MAX_FILE_BYTES:
        raise SkillRunError(f"{path} is larger than 50 MB", hint="read a part of it with read-file first")
    try:
        return file.read_text(encoding=encoding), str(file)
    except LookupError:
        raise SkillRunError(f"unknown encoding {encoding!r}", hint="use a codec name such as utf-8") from None
    except UnicodeDecodeError as exc:
        raise SkillRunError(
            f"{path} is not valid {encoding} text ({exc.reason} at byte {exc.start})",
            hint="pass the file's `encoding`",
        ) from None


def text_stats(
    text: str | None = None,
    path: str | None = None,
    encoding: str = "utf-8",
    top: int = 10,
    exclude_stopwords: bool = True,
    min_word_length: int = 1,
    words_per_minute: int = 200,
    ctx: SkillContext | None = None,
) -> dict[str, Any]:
    body, source = _load(text, path, encoding, ctx)
    words = _WORD.findall(body)
    lowered = [w.lower() for w in words]
    counted = Counter(
        w
        for w in lowered
        if len(w) >= min_word_length and not (exclude_stopwords and w in STOPWORDS) and not w.isdigit()
    )
    sentences = 0
    start = 0
    for match in _SENTENCE_END.finditer(body):
        if _WORD.search(body, start, match.start()):
            sentences += 1
        start = match.end()
    if _WORD.search(body, start):
        sentences += 1  # a last sentence without final punctuation
    paragraphs = sum(1 for block in _PARAGRAPH_BREAK.split(body) if block.strip())
    seconds = round(len(words) / words_per_minute * 60)
    return {
        "path": source,
        "characters": len(body),
        "characters_no_spaces": sum(1 for c in body if not c.isspace()),
        "words": len(words),
        "unique_words": len(set(lowered)),
        "lines": body.count("\n") + (1 if body and not body.endswith("\n") else 0),
        "sentences": sentences,
        "paragraphs": paragraphs,
        "average_word_length": round(sum(len(w) for w in words) / len(words), 2) if words else 0.0,
        "average_sentence_words": round(len(words) / sentences, 2) if sentences else 0.0,
        "top_words": [{"word": w, "count": n} for w, n in counted.most_common(top)],
        "reading_time_seconds": seconds,
        "reading_time_minutes": round(seconds / 60, 1),
    }
