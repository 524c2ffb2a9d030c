"""The last lines of the vdev_cache probe, made from the maps its END prints.

In the kernel the counts of each vdev's last second of reads would come after the capture ended
(a kernel vdev outlives it), so END hands them over (zil's come from its map sets instead:
zfsobs/sources/set_dumps.py). It used to print those
lines itself, in a loop over pools (or vdevs) and CPUs, which the kernel's BPF verifier rejected on
machines with more than 14 CPUs (zil) or 28 (vdev_cache): END now prints the maps with bpftrace's
print(), which reads them from user space, and this makes the lines the loop made (docs/events.md),
for the kernel (pid 0) only, as before: a process's pools end with it. Other lines pass through;
vdev_cache's `vc` lines are read on the way for each vdev's identity and last counts."""
from __future__ import annotations

from zfsobs.events import format_line

MASK = (1 << 64) - 1
VC_CNT = ("reads", "read_bytes", "hits", "hit_bytes", "misses", "miss_bytes", "fill_bytes", "declined",
          "declined_bytes")
VC_TUN = ("size", "max", "bshift")
OWN = frozenset({"end_maps", "end_maps_end"})     # the marker lines, used up here
VC_STRIDE = 16          # vdev_cache.bt's counter slots per CPU


class EndMaps:
    def __init__(self):
        self.maps: dict[str, dict] | None = None    # map name -> key -> value, while END prints
        self.probe, self.ts = "", 0
        self.vc: dict[tuple, dict] = {}             # (pid, vd) -> its last vc line's fields

    def feed(self, line: str) -> list[str]:
        if line.startswith("@"):
            if self.maps is not None:
                name, _, rest = line.partition("[")
                keys, _, value = rest.partition("]: ")
                # bpftrace prints a key as a signed number: a kernel address (>= 2^63) comes out negative
                key = tuple(int(k) & MASK for k in keys.split(", "))
                self.maps.setdefault(name, {})[key] = value
            return []
        parts = line.split()
        kind = parts[2] if len(parts) > 3 and parts[0] == "zfsobs" else ""
        if kind == "end_maps":
            self.maps, self.probe, self.ts = {}, line.rsplit("probe=", 1)[-1].strip(), int(parts[3])
            return []
        if kind == "end_maps_end":
            maps, self.maps = self.maps or {}, None
            return self._vc(maps)
        if kind == "vc":
            fields = dict(p.split("=", 1) for p in parts[4:] if "=" in p)
            self.vc[(int(fields["pid"]), int(fields["vd"], 16))] = fields
        return [line] if line.strip() else []

    def _vc(self, maps: dict) -> list[str]:
        """vdev_cache.bt's EMIT with final=0 for every kernel vdev whose counts moved since its last
        line, summed over the CPUs, with the tunables as the probe last read them."""
        sums: dict[tuple, list] = {}
        for (pid, vd, slot), value in maps.get("@vc_n", {}).items():
            if pid == 0 and slot % VC_STRIDE < len(VC_CNT):
                sums.setdefault((pid, vd), [0] * len(VC_CNT))[slot % VC_STRIDE] += int(value)
        tun = {name: int(maps.get("@vc_tun", {}).get((i,), -1)) for i, name in enumerate(VC_TUN)}
        out = []
        for (pid, vd), counts in sorted(sums.items()):
            last = self.vc.get((pid, vd))
            if last is None or all(int(last.get(n, 0)) == c for n, c in zip(VC_CNT, counts)):
                continue        # no line yet (no read was counted), or nothing moved since it
            fields = {"pool": last.get("pool", "?"), "pid": pid, "vd": hex(vd), "final": 0,
                      **dict(zip(VC_CNT, counts)), **tun, "guid": last.get("guid", 0),
                      "path": last.get("path", "?")}
            out.append(format_line("vc", self.ts, fields))
        return out
