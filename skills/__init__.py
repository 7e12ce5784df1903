"""The skills core: the Skill protocol, the Catalog, folder skills and their executors."""

import sys

from .core import base, errors, tracing  # the old module paths: see the end
from .core.base import Skill, SkillContext, SkillKind, SkillSource
from .core.catalog import RESERVED_NAMES, TOOL_NAME, Catalog, LoadProblem, Override, SkillProvider
from .core.contract import FrontMatter, SkillContract
from .core.errors import (
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
from .core.folder import FolderSkill, check_folder, load_folder
from .core.home import BUILTIN_SKILLS_DIR, Home
from .core.roots import AllowedRoots, PathNotAllowedError
from .core.sources import FolderSource, RootReport
from .executors.isolation import Isolation, IsolationSettings
from .executors.runners import register_runners

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
    "tracing",
]

# The executors of folder skills, made known to the core (`skills.core.runner`): every way into
# the package passes here, so a folder skill can always run.
register_runners()

# Python skills written before skills/ had its parts import these two modules by their old paths
# (the writing-skills reference taught `from skills.base import SkillContext`); they keep working.
# New code imports the names from `skills` itself.
sys.modules.setdefault(f"{__name__}.base", base)
sys.modules.setdefault(f"{__name__}.errors", errors)
