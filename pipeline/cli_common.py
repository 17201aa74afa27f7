"""What both commands share: logging, and one clear stderr line for a user error."""
from __future__ import annotations

import logging
import sys
from contextlib import contextmanager

from pipeline.errors import UserError


@contextmanager
def user_errors():
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        yield
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except OSError as exc:
        from pipeline.diskspace import disk_full_line, is_disk_full
        if not is_disk_full(exc):
            raise
        print(f"error: {disk_full_line(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: unfinished stages will restart from scratch on the next run", file=sys.stderr)
        sys.exit(130)
