"""The one error type every package raises for bad input."""


class ConfigError(ValueError):
    """A config value, component argument, command-line flag or MaxText key is invalid.

    ``key`` is what the user wrote the value under: a stack config key
    (``gke-ray-tpu:releaseChannel``), a component argument
    (``TpuSliceNodePoolArgs.topology``), a flag (``--slices``) or a MaxText key.
    The message names the key, the bad value and what would be valid, so a
    preview or a submission fails with something a user can act on before
    anything is created.
    """

    def __init__(self, key: str, value: object, expected: str):
        self.key = key
        self.value = value
        self.expected = expected
        super().__init__(f"invalid config {key}={value!r}: expected {expected}")

    def renamed(self, key: str) -> "ConfigError":
        """The same error under the key the user actually set (a component argument seen from a stack)."""
        return ConfigError(key, self.value, self.expected)
