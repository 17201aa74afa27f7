"""User-facing errors: the command line prints them as one line and exits non-zero."""


class UserError(Exception):
    """A problem the user can fix (bad config, missing file, bad input)."""


class ConfigError(UserError):
    pass


class InputError(UserError):
    pass
