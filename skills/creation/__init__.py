"""Model-driven skill creation (`create_skill`): a model writes a skill, its tests run, and it is
installed in the home when they pass. It builds on the core and on the executors (the tests run
the new skill's script)."""

from .creator import Creation, TestCase, ask_json, create_skill, fenced_blocks

__all__ = ["Creation", "TestCase", "ask_json", "create_skill", "fenced_blocks"]
