"""The core of skills: the Skill protocol, the Catalog and its sources, folder skills (SKILL.md +
skill.yaml) and their checks, the home, roles, models and errors.

It imports neither `skills.executors` nor `skills.creation` (tests/test_layers.py): a folder
skill's code runs through the `Runner` of its kind, which the executors register.
"""

from .base import Skill, SkillContext, SkillKind, SkillSource
from .catalog import RESERVED_NAMES, TOOL_NAME, Catalog, LoadProblem, Override, SkillProvider
from .contract import FrontMatter, SkillContract
from .errors import ErrorEnvelope, ErrorType, SkillsError, error_envelope
from .folder import FolderSkill, check_folder, load_folder
from .home import BUILTIN_SKILLS_DIR, Home
from .roots import AllowedRoots, PathNotAllowedError
from .sources import FolderSource, RootReport

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "RESERVED_NAMES",
    "TOOL_NAME",
    "AllowedRoots",
    "Catalog",
    "ErrorEnvelope",
    "ErrorType",
    "FolderSkill",
    "FolderSource",
    "FrontMatter",
    "Home",
    "LoadProblem",
    "Override",
    "PathNotAllowedError",
    "RootReport",
    "Skill",
    "SkillContext",
    "SkillContract",
    "SkillKind",
    "SkillProvider",
    "SkillSource",
    "SkillsError",
    "check_folder",
    "error_envelope",
    "load_folder",
]
