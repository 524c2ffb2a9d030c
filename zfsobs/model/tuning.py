"""ZFS tunables as the watcher saw them (`tunable` events, docs/events.md): the values at the
start, the values now, and every change with its time, so views can split the run at changes."""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import asdict, dataclass

from zfsobs.events import Event


@dataclass(frozen=True, slots=True)
class Change:
    ts: int                 # the poll that saw it: the change happened up to one poll before
    name: str
    old: int
    new: int
    pid: int
    src: str = ""
    since: int | None = None    # the previous poll: the change happened in (since, ts]

    def as_dict(self) -> dict:
        return asdict(self)


class TuningModel:
    kinds = ("tunable",)

    def __init__(self):
        self.values: dict[str, int] = {}     # latest value per tunable
        self.initial: dict[str, int] = {}    # value when first seen (the session start's snapshot)
        self.changes: list[Change] = []      # in time order; rare, so all are kept

    def feed(self, ev: Event) -> None:
        f = ev.fields
        name, new, old = str(f["name"]), int(f["new"]), f.get("old")
        self.values[name] = new
        if f.get("initial") == 1 or old is None:
            # a tunable first seen after the start counts as in force from the start
            self.initial.setdefault(name, new)
            return
        self.initial.setdefault(name, int(old))
        self.changes.append(Change(ev.ts, name, int(old), new, int(f.get("pid") or 0), str(f.get("src") or ""),
                                   f.get("since")))

    @property
    def latest(self) -> Change | None:
        return self.changes[-1] if self.changes else None

    def in_force(self, ts: int) -> dict[str, int]:
        """The values at time ts: the initial ones with every change up to and including ts."""
        values = dict(self.initial)
        for c in self.changes[:bisect_right(self.changes, ts, key=lambda c: c.ts)]:
            values[c.name] = c.new
        return values

    def opened_at(self, ts: int) -> list[Change]:
        """The changes seen at poll time ts (one poll may see several tunables change)."""
        return [c for c in self.changes if c.ts == ts]
