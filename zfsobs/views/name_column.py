"""The name column of the line-mode outputs (line mode's and zilstat's pool, vqstat's pool/vdev):
as wide as the longest name printed so far, at least its least width. A longer name widens it, and
the caller prints its header again over the new columns."""
from __future__ import annotations


class NameColumn:
    def __init__(self, least: int):
        self.width = least

    def widen(self, names) -> bool:
        """Whether one of the names is longer than the column (it is now as wide as the longest)."""
        longest = max(map(len, names), default=0)
        if longest <= self.width:
            return False
        self.width = longest
        return True
