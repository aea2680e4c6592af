"""The error a user's input gets before anything is spent."""


class ConfigError(ValueError):
    """A parameter is out of range; the message says which one and what to change."""
