"""The skills core: the Skill protocol, the Catalog, folder skills and their executors."""

from .base import Skill, SkillContext, SkillKind, SkillSource
from .catalog import RESERVED_NAMES, TOOL_NAME, Catalog, FolderSource, LoadProblem, SkillProvider
from .contract import FrontMatter, SkillContract
from .errors import (
    ArgumentsError,
    DefinitionError,
    LimitExceededError,
    OutputError,
    Problem,
    SkillRunError,
    SkillsError,
    SkillTimeoutError,
    UnknownSkillError,
)
from .folder import FolderSkill, check_folder, load_folder
from .home import BUILTIN_SKILLS_DIR, Home

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "RESERVED_NAMES",
    "TOOL_NAME",
    "ArgumentsError",
    "Catalog",
    "DefinitionError",
    "FolderSkill",
    "FolderSource",
    "FrontMatter",
    "Home",
    "LimitExceededError",
    "LoadProblem",
    "OutputError",
    "Problem",
    "Skill",
    "SkillContext",
    "SkillContract",
    "SkillKind",
    "SkillProvider",
    "SkillRunError",
    "SkillSource",
    "SkillTimeoutError",
    "SkillsError",
    "UnknownSkillError",
    "check_folder",
    "load_folder",
]
