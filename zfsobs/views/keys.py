"""Single keypresses from the terminal (cbreak mode), restored on every exit."""
from __future__ import annotations

import os
import select
import sys
import termios
import tty


class Keys:
    def __init__(self):
        self.fd = sys.stdin.fileno() if sys.stdin and sys.stdin.isatty() else None
        self._saved = None

    def __enter__(self) -> "Keys":
        if self.fd is not None:
            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        """The terminal's modes as they were; once only (a quit restores them before the probes stop)."""
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None

    def read(self, timeout: float = 0.0) -> str | None:
        if self.fd is None:
            return None
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(self.fd, 1)
        return data.decode(errors="ignore") or None
