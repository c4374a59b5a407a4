"""The one error type the stack raises for bad input."""

from __future__ import annotations


class ConfigError(ValueError):
    """A stack config value (or component argument) is invalid.

    The message always names the key, the bad value and what would be valid, so
    ``pulumi preview`` fails with something a user can act on before any
    resource is registered.
    """

    def __init__(self, key: str, value: object, expected: str):
        self.key = key
        self.value = value
        self.expected = expected
        super().__init__(f"invalid config {key}={value!r}: expected {expected}")
