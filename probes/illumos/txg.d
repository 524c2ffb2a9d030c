/*
 * txg.d - txg sync per pool and txg on illumos (metric: txg sync duration); the twin of
 * probes/linux/txg.bt: the same `txg` line (docs/events.md), one per synced txg, never per I/O.
 *
 * illumos has no spa_txg_history; the state times come from the sdt probes txg.c fires
 * (arg0 the dsl_pool_t *, arg1 the txg), the same moments OpenZFS records:
 *   open_ns     txg-quiescing - txg-opened   (its birth; the open state ends when quiescing starts)
 *   quiesce_ns  txg-quiesced - txg-quiescing
 *   wait_ns     txg-syncing - txg-quiesced
 *   stime_ns    txg-synced - txg-syncing
 *   dirty       dp_dirty_pertxg[txg & 3] at txg-syncing, just before spa_sync (CTF-typed)
 *   start, sync_ns   fbt spa_sync entry and return on the sync thread
 * The line comes at txg-synced. pid is 0: the kernel is one world (like the Linux kernel target).
 * Arguments: $$1 a pool name (empty: every pool).
 * Probes: sdt:::txg-opened sdt:::txg-quiescing sdt:::txg-quiesced sdt:::txg-syncing sdt:::txg-synced fbt::spa_sync:entry fbt::spa_sync:return
 * Requires: sdt:::txg-synced sdt:::txg-syncing fbt::spa_sync:entry fbt::spa_sync:return
 * Members: dsl_pool.dp_spa dsl_pool.dp_dirty_pertxg spa.spa_name
 * FreeBSD: the same sdt probes exist as sdt:zfs::txg-* (OpenZFS common code); spa_sync is global,
 *   so fbt has it; dsl_pool and spa keep these members in OpenZFS 2.x.
 * Overhead: 7 probe hits per txg.
 */
#pragma D option quiet
#pragma D option defaultargs
/* zfsobs passes $2 (the interval) to every script; this one has no use for it */
#pragma D option argref
#pragma D option dynvarsize=4m

/* read (txg-synced, below) before the clause that writes it: D needs it declared first */
uint64_t txg_last_start[uint64_t];

dtrace:::BEGIN
{
	printf("zfsobs 1 hello %d probe=txg target=kernel\n", timestamp);
}

sdt:::txg-opened
{
	txg_birth[arg0, arg1] = timestamp;
}

sdt:::txg-quiescing
{
	txg_open_end[arg0, arg1] = timestamp;
}

sdt:::txg-quiesced
{
	txg_quiesced[arg0, arg1] = timestamp;
}

sdt:::txg-syncing
{
	txg_syncing[arg0, arg1] = timestamp;
	/* +1 so that a pool with no dirty data still reads as known */
	txg_dirty[arg0, arg1] = ((dsl_pool_t *)arg0)->dp_dirty_pertxg[arg1 & 3] + 1;
}

fbt::spa_sync:entry
{
	self->start = timestamp;
}

fbt::spa_sync:return
/self->start/
{
	self->sync_ns = timestamp - self->start;
}

sdt:::txg-synced
/self->sync_ns/
{
	this->dp = arg0;
	this->txg = arg1;
	this->pool = stringof(((dsl_pool_t *)arg0)->dp_spa->spa_name);
	this->last = txg_last_start[this->dp];
	this->b = txg_birth[this->dp, this->txg];
	this->t1 = txg_open_end[this->dp, this->txg];
	this->t2 = txg_quiesced[this->dp, this->txg];
	this->t3 = txg_syncing[this->dp, this->txg];
	this->dirty = (int64_t)txg_dirty[this->dp, this->txg] - 1;
}

sdt:::txg-synced
/self->sync_ns && ($$1 == "" || this->pool == $$1)/
{
	printf("zfsobs 1 txg %d pool=%s pid=0 txg=%d start=%d sync_ns=%d interval_ns=%d dirty=%d open_ns=%d quiesce_ns=%d wait_ns=%d stime_ns=%d\n",
	    timestamp, this->pool, this->txg, self->start, self->sync_ns,
	    this->last ? (int64_t)(self->start - this->last) : -1,
	    this->dirty,
	    (this->b && this->t1) ? (int64_t)(this->t1 - this->b) : -1,
	    (this->t1 && this->t2) ? (int64_t)(this->t2 - this->t1) : -1,
	    (this->t2 && this->t3) ? (int64_t)(this->t3 - this->t2) : -1,
	    this->t3 ? (int64_t)(timestamp - this->t3) : -1);
}

sdt:::txg-synced
/self->sync_ns/
{
	txg_last_start[this->dp] = self->start;
	txg_birth[this->dp, this->txg] = 0;
	txg_open_end[this->dp, this->txg] = 0;
	txg_quiesced[this->dp, this->txg] = 0;
	txg_syncing[this->dp, this->txg] = 0;
	txg_dirty[this->dp, this->txg] = 0;
	self->start = 0;
	self->sync_ns = 0;
}

dtrace:::END
{
	/* first: zfsobs drops what probes printed after its SIGINT and before this (docs/events.md, bye) */
	printf("zfsobs 1 bye %d probe=txg\n", timestamp);
}
