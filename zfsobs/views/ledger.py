"""A report's txg and ZIL rows, kept out of memory. The model hands each row it stops keeping to
the ledger, and the rest at the end; the ledger adds the row's figures to its pool's statistics
and, when the report prints rows (JSON, CSV), writes the row to a temporary file that the report
reads back, in order, as it writes them out. A week's report holds statistics, not 240,000 rows
(docs/performance.md); the temporary files take about what the printed rows take."""
from __future__ import annotations

import json
import tempfile
from typing import IO, Iterator

from zfsobs.model.txg import TxgRow, TxgStats
from zfsobs.model.zil import ZilRow, ZilStats

BATCH = 1024         # rows added to their statistics at once (summed a figure at a time, add_all)


class Ledger:
    def __init__(self, rows: bool = True):
        self.keeps_rows = rows
        self.txg_stats: dict[str, TxgStats] = {}
        self.zil_stats: dict[str, ZilStats] = {}
        self._pending: dict[tuple[str, str], list] = {}      # (section, pool) -> rows not yet added
        self._files: dict[tuple[str, str], IO[str]] = {}

    def txg(self, row: TxgRow) -> None:
        self._add("txgs", self.txg_stats, TxgStats, row)

    def zil(self, row: ZilRow) -> None:
        self._add("zil", self.zil_stats, ZilStats, row)

    def _add(self, section: str, stats: dict, make, row) -> None:
        acc = stats.get(row.pool)
        if acc is None:
            acc = stats[row.pool] = make()
        pending = self._pending.setdefault((section, row.pool), [])
        pending.append(row)
        if len(pending) >= BATCH:
            acc.add_all(pending)
            pending.clear()
        if self.keeps_rows:
            self._spill(section, row.pool, row.as_dict())

    def take_rest(self, model) -> None:
        """The rows the model still keeps, in their order: the end of the capture."""
        for state in model.txg.pools.values():
            for row in state.rows:
                self.txg(row)
        for state in model.zil.pools.values():
            for row in state.order:
                self.zil(row)
        for (section, pool), pending in self._pending.items():
            (self.txg_stats if section == "txgs" else self.zil_stats)[pool].add_all(pending)
        self._pending.clear()

    def _spill(self, section: str, pool: str, row: dict) -> None:
        f = self._files.get((section, pool))
        if f is None:
            f = self._files[(section, pool)] = tempfile.TemporaryFile("w+", encoding="utf-8", prefix="zfsobs-report-")
        f.write(json.dumps(row, separators=(",", ":")))
        f.write("\n")

    def rows(self, section: str, pool: str) -> Iterator[dict]:
        """A pool's rows of a section ("txgs" or "zil"), in the order the model made them."""
        f = self._files.get((section, pool))
        if f is None:
            return
        f.seek(0)
        for line in f:
            yield json.loads(line)

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
