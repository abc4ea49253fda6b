"""Errors a user can fix: they name the key, the value and what is allowed, and exit with status 2."""
from __future__ import annotations


class ConfigError(Exception):
    """A bad configuration value, reported before anything is written or submitted."""

    exit_code = 2

    def __init__(self, key: str, value: object, problem: str, allowed: str | None = None):
        self.key, self.value, self.problem, self.allowed = key, value, problem, allowed
        msg = f"{key} = {value!r}: {problem}"
        if allowed:
            msg += f" (allowed: {allowed})"
        super().__init__(msg)


class ConfigErrors(Exception):
    """Several ConfigErrors found in one pass, so the user fixes them all at once."""

    exit_code = 2

    def __init__(self, errors: list[ConfigError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


class UsageError(Exception):
    """A command used wrongly (run directory exists, unknown run, ...)."""

    exit_code = 2
