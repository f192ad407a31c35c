"""Bad user input, as one exception type. No heavy imports: every command can raise and catch it."""


class ConfigError(ValueError):
    """Bad user input; the message is one line that names the field."""
