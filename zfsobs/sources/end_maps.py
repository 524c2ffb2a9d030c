"""The last lines of the zil and vdev_cache probes, made from the maps their END prints.

In the kernel the counts of a pool's open txgs and of each vdev's last second of reads would come
after the capture ended (a kernel pool outlives it), so END hands them over. It used to print those
lines itself, in a loop over pools (or vdevs) and CPUs, which the kernel's BPF verifier rejected on
machines with more than 14 CPUs (zil) or 28 (vdev_cache): END now prints the maps with bpftrace's
print(), which reads them from user space, and this makes the lines the loop made (docs/events.md),
for the kernel (pid 0) only, as before: a process's pools end with it. Other lines pass through;
vdev_cache's `vc` lines are read on the way for each vdev's identity and last counts."""
from __future__ import annotations

from zfsobs.events import format_line

MASK = (1 << 64) - 1
ZIL_CNT = ("itxs", "itx_bytes", "writes", "write_bytes", "copied", "copied_bytes", "needcopy",
           "needcopy_bytes", "indirect", "indirect_bytes", "lwbs", "nused", "size", "lwb_le4k",
           "lwb_4to32k", "lwb_ge32k")
VC_CNT = ("reads", "read_bytes", "hits", "hit_bytes", "misses", "miss_bytes", "fill_bytes", "declined",
          "declined_bytes")
VC_TUN = ("size", "max", "bshift")
OWN = frozenset({"end_maps", "end_maps_end"})     # the marker lines, used up here
LAT_SEGMENT = 25        # zil.bt's latency buckets per zil_lat line
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
            return self._zil(maps) if self.probe == "zil" else self._vc(maps)
        if kind == "vc":
            fields = dict(p.split("=", 1) for p in parts[4:] if "=" in p)
            self.vc[(int(fields["pid"]), int(fields["vd"], 16))] = fields
        return [line] if line.strip() else []

    def _zil(self, maps: dict) -> list[str]:
        """zil.bt's FLUSH for every (pool, txg, CPU) of the kernel that had activity: final=0 for a
        txg not yet synced, final=2 for one whose final lines a count came after (LATE)."""
        get = lambda name, key: int(maps.get(name, {}).get(key, 0))     # noqa: E731
        out = []
        for key in sorted(maps.get("@zil_any", {})):
            pid, spa, txg, cpu = key
            any_ = get("@zil_any", key)
            if pid != 0 or any_ not in (1, 3):     # 2: its final lines are out
                continue
            head = {"pool": maps.get("@zil_name", {}).get((pid, spa), "?"), "pid": pid, "txg": txg,
                    "cpu": cpu, "final": 2 if any_ == 3 else 0}
            commits = get("@zil_commits", key)
            fields = {**head, "commits": commits, "lat_ns": get("@zil_lat_sum", key),
                      "lat_max_ns": get("@zil_lat_max", key)}
            fields.update((name, get("@zil_cnt", key + (i,))) for i, name in enumerate(ZIL_CNT))
            out.append(format_line("zil", self.ts, fields))
            itx = {**head, **{f"tx{i}": get("@zil_itx", key + (i,)) for i in range(25)},
                   "txother": get("@zil_itx", key + (25,))}
            out.append(format_line("zil_itx", self.ts, itx))
            for seg in range(2 if commits else 0):
                lat = {**head, "seg": seg}
                lat.update((f"b{b}", get("@zil_lat", key + (seg * LAT_SEGMENT + b,))) for b in range(LAT_SEGMENT))
                out.append(format_line("zil_lat", self.ts, lat))
        return out

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
