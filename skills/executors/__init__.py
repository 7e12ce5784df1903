"""The executors of folder skills: `python` (a worker pool), `script` (confined by bubblewrap),
`prompt` and `agent` (a model, through `ctx.models`), and the isolation settings they share.

They import the core, never `skills.creation`.
"""

from .isolation import Isolation, IsolationSettings
from .runners import register_runners

__all__ = ["Isolation", "IsolationSettings", "register_runners"]
