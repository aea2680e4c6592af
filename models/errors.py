"""The error a user's input gets before anything is spent."""


class ConfigError(ValueError):
    """A parameter is out of range; the message says which one and what to change."""


class NonFiniteError(FloatingPointError):
    """An env or the learner produced NaN or infinity: the run stops before it saves or ships it."""
