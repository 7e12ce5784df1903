"""The skills core: the Skill protocol, the Catalog, folder skills and their executors."""

from .base import Skill, SkillContext, SkillKind, SkillSource
from .catalog import RESERVED_NAMES, TOOL_NAME, Catalog, LoadProblem, Override, SkillProvider
from .contract import FrontMatter, SkillContract
from .errors import (
    ArgumentsError,
    DefinitionError,
    ErrorEnvelope,
    ErrorType,
    LimitExceededError,
    NotConnectedError,
    OutputError,
    Problem,
    SkillCancelledError,
    SkillRunError,
    SkillsError,
    SkillTimeoutError,
    UnknownSkillError,
    error_envelope,
)
from .folder import FolderSkill, check_folder, load_folder
from .home import BUILTIN_SKILLS_DIR, Home
from .isolation import Isolation, IsolationSettings
from .roots import AllowedRoots, PathNotAllowedError
from .sources import FolderSource, RootReport

__all__ = [
    "BUILTIN_SKILLS_DIR",
    "RESERVED_NAMES",
    "TOOL_NAME",
    "AllowedRoots",
    "ArgumentsError",
    "Catalog",
    "DefinitionError",
    "ErrorEnvelope",
    "ErrorType",
    "FolderSkill",
    "FolderSource",
    "FrontMatter",
    "Home",
    "Isolation",
    "IsolationSettings",
    "LimitExceededError",
    "LoadProblem",
    "NotConnectedError",
    "OutputError",
    "Override",
    "PathNotAllowedError",
    "Problem",
    "RootReport",
    "Skill",
    "SkillCancelledError",
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
    "error_envelope",
    "load_folder",
]
