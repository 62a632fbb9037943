"""The errors cdi raises. Each carries `what` went wrong and `where` (a file, a variable, a device id),
so every program can print the project's one-line form `<program>: error: <what> (<where>)`."""
from __future__ import annotations


class CdiError(ValueError):
    def __init__(self, what: str, where: str | None = None):
        self.what = what
        self.where = where
        super().__init__(f"{what} ({where})" if where else what)


class InvalidNameError(CdiError):
    """A CDI kind or device name that breaks the naming rules; the message says which rule."""


class SpecError(CdiError):
    """A CDI spec that cannot be read, parsed or validated."""


class ConfigError(CdiError):
    """A config.toml that cannot be read or holds a value of the wrong type."""


class RequestError(CdiError):
    """A container's GPU request that is malformed, refused or names something that does not exist."""


class RequirementError(CdiError):
    """An NVIDIA_REQUIRE_* constraint that is malformed or not met."""
