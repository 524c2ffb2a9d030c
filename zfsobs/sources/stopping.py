"""What runs the moment a live source has asked its tracers to stop: one hook for every source
(bpftrace's, dtrace's, kstat's), so the session names it once. The lab's ztest gets its SIGTERM
there, while the tracers detach and print their last lines: with no process mapping libzpool left,
bpftrace's uprobe teardown is shorter (docs/performance.md, "Quitting")."""
from __future__ import annotations

from typing import Callable


class Stopping:
    """A source's stop hook: `on_stop` (None: nothing) runs once, from the source's finish(), as
    soon as the stop is asked."""
    on_stop: Callable[[], None] | None = None

    def _stopped(self) -> None:
        hook, self.on_stop = self.on_stop, None
        if hook is not None:
            hook()
