"""Errors the CLI turns into exit code 2 with a one-line message."""


class SetupError(Exception):
    """Bad usage or a missing build: say what is wrong and the command that fixes it."""
