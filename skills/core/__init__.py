"""The core of skills: the Skill protocol, the Catalog and its sources, folder skills (SKILL.md +
skill.yaml) and their checks, the home, roles, models and errors.

It imports neither `skills.executors` nor `skills.creation` (tests/test_layers.py): a folder
skill's code runs through the `Runner` of its kind, which the executors register.
"""
