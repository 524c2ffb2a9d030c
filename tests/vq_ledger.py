"""The vdev queue's own books, checked line by line: what a lost count would break.

Every I/O the probe follows is counted once in and once out, so at every vq line of a series
completions never outnumber issues and issues never outnumber entries; and the time integrals of
depth grow, by no more than the depth ZFS allows over the time between two lines. A count written
into a map set after bpftrace printed it (CI's 2.4.4 guest, 2026-11-27) broke both: one issue's
count and its time went missing, so 'done' passed 'issued' and the active integral jumped by the
uptime (298 s in 0.5 s). A clear() in BEGIN, which bpftrace runs once every probe is attached,
took a busy pool's first issue the same way (sid's 2.4.4 guest: a depth of -1 for good).""" 
from __future__ import annotations

SLACK = 4       # our depth may run ahead of ZFS's by the threads between its lock and our probe


def ledger_errors(lines, late_ns: int = 0) -> list[str]:
    """Every broken rule in a capture's vq lines, one string each (empty: the books balance).
    late_ns: how far after its line's time a counted entry or issue may be stamped (D's totals are
    read by the consumer after the tick that stamps the dump: tests/test_kernel_dtrace.py)."""
    errors, last = [], {}
    for line in lines:
        p = line.split()
        if len(p) < 4 or p[2] != "vq":
            continue
        f = {k: int(v, 0) if k == "vd" else (int(v) if v.lstrip("-").isdigit() else v)
             for k, v in (kv.split("=", 1) for kv in p[4:])}
        ts, key = int(p[3]), (f["pid"], f["vd"], f["class"])
        where = f"vq {ts} vd={f['vd']:#x} class={f['class']}"
        if f["done"] > f["issued"] + f["aggs"] - f["untracked_act"]:
            errors.append(f"{where}: done {f['done']} > issued {f['issued']} + aggs {f['aggs']}")
        if f["issued"] + f["merged"] > f["enq"]:        # untracked I/Os are in neither
            errors.append(f"{where}: issued {f['issued']} + merged {f['merged']} > enq {f['enq']}")
        # every time counted into a set is before the set's end (the probes read the clock before
        # the set): what is still in flight adds a time of 0 or more
        if f["pend_ns"] < f["wait_ns"] - late_ns or f["act_ns"] < f["dev_ns"] - late_ns:
            errors.append(f"{where}: a depth integral below its completed part")
        prev = last.pop(key, None)
        if prev and not f["final"]:     # a final line drops what was still in flight
            dt = ts - prev[0]
            # the depth between the lines: at most the higher of the last line's and ZFS's maximum since
            for name, most in (("pend_ns", max(prev[1]["pend"], f["pend_max"])),
                               ("act_ns", max(prev[1]["act"], f["act_max"], f["max_active"]))):
                grew = f[name] - prev[1][name]
                if not 0 <= grew <= dt * (most + SLACK):
                    errors.append(f"{where}: {name} grew {grew} in {dt} ns (depth at most {most})")
        if not f["final"]:              # the next vdev_t at this address starts its own books
            last[key] = (ts, f)
    return errors
