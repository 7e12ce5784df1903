"""The skills core: the Skill protocol, the Catalog, folder skills and their executors."""

from .base import Skill, SkillContext, SkillKind, SkillSource
from .catalog import RESERVED_NAMES, TOOL_NAME, Catalog, FolderSource, LoadProblem, SkillProvider
from .contract import FrontMatter, SkillContract
from .errors import (
    ArgumentsError,
    DefinitionError,
    OutputError,
    Problem,
    SkillRunError,
    SkillsError,
    SkillTimeoutError,
    UnknownSkillError,
)
from .folder import FolderSkill, check_folder, load_folder
from .home import BUILTIN_SKILLS_DIR, Home
from .isolation import Isolation, IsolationSettings
from .roots import AllowedRoots, PathNotAllowedError

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "RESERVED_NAMES",
    "TOOL_NAME",
    "AllowedRoots",
    "ArgumentsError",
    "Catalog",
    "DefinitionError",
    "FolderSkill",
    "FolderSource",
    "FrontMatter",
    "Home",
    "Isolation",
    "IsolationSettings",
    "LoadProblem",
    "OutputError",
    "PathNotAllowedError",
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
