"""The one exception type users see: its message is printed as a single line, no traceback, and
holds no control character (zfsobs/safe.py): a message quoting a hostile path or value shows it escaped."""

from zfsobs import safe

# The exit status of an unexpected exception (a bug), sysexits.h's EX_SOFTWARE: zfsobs/cli.py's guard.
INTERNAL_ERROR_STATUS = 70


class ZfsobsError(Exception):
    """A problem the user can act on (bad input, missing tool, no target). Exit status 2 unless set."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(safe.text(message))
        self.status = status


class FeatureAbsent(ZfsobsError):
    """The ZFS build has no such feature any more (a probe script's "Absent:" line says why):
    a state to report, not a failure."""


def describe(exc: BaseException) -> str:
    """An unexpected exception on one line: its type and message."""
    text = safe.text(" ".join(str(exc).split()))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
