"""User-facing errors: the command line prints them as one line and exits non-zero."""


class UserError(Exception):
    """A problem the user can fix (bad config, missing file, bad input)."""


class ConfigError(UserError):
    pass


class InputError(UserError):
    pass


class StageFailed(UserError):
    """A stage could not run: its setup failed (a model file that is not a model) or a worker
    process died. One line naming the stage and the cause."""
