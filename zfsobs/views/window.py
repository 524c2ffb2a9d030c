"""The label of a panel's time window ("last 60 s"): what the view holds of it. A run younger than
the window holds less: the label then says the seconds since the view's first event, not the
window's length. A replay's far seek holds the same (views/far_seek.py keeps twice the window's
rows, and the first events whole), so its screen is a full replay's."""
from __future__ import annotations


def label(window_ns: int, newest_ns: int, held_from_ns: int | None) -> str:
    """`newest_ns`: where the window ends; `held_from_ns`: the view's first event (None: none yet,
    the whole window is said)."""
    if held_from_ns is None or newest_ns - held_from_ns >= window_ns:
        return f"last {window_ns / 1e9:g} s"
    return f"last {max(1, round((newest_ns - held_from_ns) / 1e9))} s"
