"""What the server and its python worker processes agree on (`_channel` and `_worker`).

Kept apart from both ends so that the server side never imports the worker's module, nor the
worker the server side's: the frame format, its size limit and the names skill modules are
imported under.
"""

from __future__ import annotations

import struct

__all__ = ["CLIENT_KEY", "HEADER", "MAX_FRAME", "SKILL_MODULE_PREFIX"]

HEADER = struct.Struct("!I")
"""The length of a frame's payload, 4 bytes big-endian, before the payload (both sides use it)."""
SKILL_MODULE_PREFIX = "_orchestrator_skill_"
"""The private module names under which `_python.load_entry` imports skill modules."""
MAX_FRAME = 256 << 20
"""Largest frame either side sends: a skill's result above this is refused as too large."""

CLIENT_KEY = "client"
"""`ctx.extras` key where the server names who called (an authenticated identity, else the
session): the worker pool of sync python skills shares its workers fairly between clients."""
