/*
 * throttle.d - the write throttle per pool and txg on illumos (metric: txg write throttle); the
 * twin of probes/linux/throttle.bt: the same `txg_thr` line (docs/events.md, docs/txg.md).
 *
 * A transaction the throttle holds back is marked tx_wait_dirty by dmu_tx_try_assign() (the
 * dmu_tx kstat's dmu_tx_dirty_delay); with TXG_WAIT it waits inside dmu_tx_assign(), in
 * dmu_tx_wait(); without, dmu_tx_assign() returns ERESTART with the mark still set, counted
 * there, and the caller's dmu_tx_wait() adds its time only. Leventhal's delay-mintime sdt probe
 * fires only when dmu_tx_delay() sleeps; the mark counts what the kstat counts.
 * Attribution as on Linux: every event counts to the txg OPEN in its pool (dp_tx.tx_open_txg).
 * Counting is in D aggregations (race free across CPUs), never emptied (DTrace 2.0 drops what a
 * probe adds between the consumer's snapshot and trunc()), keyed by (pool, spa_t, txg & 7): a slot
 * the txg reuses eight txgs later. Every interval ($2 seconds, default 1), as a txg starts to sync
 * (txg-syncing: its transactions are all in) and at the end, printa prints each slot's totals
 * since the start as a txg_thr_c line with the txg it holds, and zfsobs turns each slot's rise into
 * that txg's txg_thr line (zfsobs/sources/d_slots.py): a txg's lines add up (the reader sums
 * counts and times and takes the largest maxima). A maximum carries the txg's round (txg >> 3)
 * above bit 40, so an older round's never wins.
 * Arguments: $$1 a pool name (empty: every pool), $2 the flush interval in seconds.
 * Probes: fbt::dmu_tx_assign:entry fbt::dmu_tx_assign:return fbt::dmu_tx_wait:entry fbt::dmu_tx_wait:return sdt:::txg-syncing
 * Requires: fbt::dmu_tx_assign:entry fbt::dmu_tx_assign:return fbt::dmu_tx_wait:entry fbt::dmu_tx_wait:return
 * Members: dmu_tx.tx_pool dmu_tx.tx_wait_dirty dsl_pool.dp_spa dsl_pool.dp_tx dsl_pool.dp_dirty_total tx_state.tx_open_txg spa.spa_name
 * Globals: zfs_dirty_data_max zfs_delay_min_dirty_percent zfs_delay_scale
 * FreeBSD (OpenZFS 2.x): the same functions and members (tx_wait_dirty, dp_dirty_total).
 * Overhead: 2 probe hits per transaction assigned, 2 more per one that waits; output per txg and interval.
 */
#pragma D option quiet
#pragma D option defaultargs
#pragma D option aggrate=100ms
#pragma D option switchrate=100ms

dtrace:::BEGIN
{
	thr_every = $2 > 0 ? $2 : 1;
	printf("zfsobs 1 hello %d probe=throttle target=kernel\n", timestamp);
}

fbt::dmu_tx_assign:entry
{
	self->atx = (dmu_tx_t *)arg0;
	self->pend = 0;
}

/* this-> variables are not zeroed between firings: every flag a later clause tests is set first */
fbt::dmu_tx_assign:return
{
	this->on = 0;
}

fbt::dmu_tx_assign:return
/self->atx/
{
	this->dp = self->atx->tx_pool;
	this->spa = (uint64_t)this->dp->dp_spa;
	this->pool = stringof(this->dp->dp_spa->spa_name);
	this->txg = this->dp->dp_tx.tx_open_txg;
	this->slot = this->txg & 7;
	this->tag = ((this->txg >> 3) & 0xffffff) << 40;
	this->refused = self->atx->tx_wait_dirty ? 1 : 0;
	self->pend = this->refused;
	self->atx = 0;
	this->on = $$1 == "" || this->pool == $$1;
}

fbt::dmu_tx_assign:return
/this->on/
{
	@tts[this->pool, this->spa, this->slot] = max(timestamp);
	@tt[this->pool, this->spa, this->slot] = max(this->txg);
	@tdirty[this->pool, this->spa, this->slot] = max(this->tag | (this->dp->dp_dirty_total & 0xffffffffff));
	@tn[this->pool, this->spa, this->slot] = sum(this->refused);
	@tmax[this->pool, this->spa, this->slot] = max(this->tag | (*(uint64_t *)&`zfs_dirty_data_max & 0xffffffffff));
	@tpct[this->pool, this->spa, this->slot] = max(this->tag | *(uint32_t *)&`zfs_delay_min_dirty_percent);
	@tscale[this->pool, this->spa, this->slot] = max(this->tag | (*(uint64_t *)&`zfs_delay_scale & 0xffffffffff));
}

/* throttled: tx_wait_dirty set (dmu_tx_wait() clears it before it returns); 2: already counted */
fbt::dmu_tx_wait:entry
{
	self->wtx = (dmu_tx_t *)arg0;
	self->wt0 = timestamp;
	self->wd = self->wtx->tx_wait_dirty ? (self->pend ? 2 : 1) : 0;
	self->pend = 0;
}

fbt::dmu_tx_wait:return
{
	this->on = 0;
	this->wd = 0;
	this->b = 0;
}

fbt::dmu_tx_wait:return
/self->wt0/
{
	this->ns = timestamp - self->wt0;
	this->dp = self->wtx->tx_pool;
	this->spa = (uint64_t)this->dp->dp_spa;
	this->pool = stringof(this->dp->dp_spa->spa_name);
	this->txg = this->dp->dp_tx.tx_open_txg;
	this->slot = this->txg & 7;
	this->tag = ((this->txg >> 3) & 0xffffff) << 40;
	this->wd = self->wd;
	self->wtx = 0;
	self->wt0 = 0;
	self->wd = 0;
	/* d0..d5: < 10 us, < 100 us, < 1 ms, < 10 ms, < 100 ms, >= 100 ms */
	this->b = this->ns < 10000 ? 0 : this->ns < 100000 ? 1 : this->ns < 1000000 ? 2 :
	    this->ns < 10000000 ? 3 : this->ns < 100000000 ? 4 : 5;
	this->on = $$1 == "" || this->pool == $$1;
}

fbt::dmu_tx_wait:return
/this->on/
{
	@tts[this->pool, this->spa, this->slot] = max(timestamp);
	@tt[this->pool, this->spa, this->slot] = max(this->txg);
	@tmax[this->pool, this->spa, this->slot] = max(this->tag | (*(uint64_t *)&`zfs_dirty_data_max & 0xffffffffff));
	@tpct[this->pool, this->spa, this->slot] = max(this->tag | *(uint32_t *)&`zfs_delay_min_dirty_percent);
	@tscale[this->pool, this->spa, this->slot] = max(this->tag | (*(uint64_t *)&`zfs_delay_scale & 0xffffffffff));
}

fbt::dmu_tx_wait:return
/this->on && this->wd/
{
	@tn[this->pool, this->spa, this->slot] = sum(this->wd == 1 ? 1 : 0);
	@tns[this->pool, this->spa, this->slot] = sum(this->ns);
	@tnsmax[this->pool, this->spa, this->slot] = max(this->tag | (this->ns > 0xffffffffff ? 0xffffffffff : this->ns));
}

fbt::dmu_tx_wait:return /this->on && this->wd && this->b == 0/ { @td0[this->pool, this->spa, this->slot] = count(); }
fbt::dmu_tx_wait:return /this->on && this->wd && this->b == 1/ { @td1[this->pool, this->spa, this->slot] = count(); }
fbt::dmu_tx_wait:return /this->on && this->wd && this->b == 2/ { @td2[this->pool, this->spa, this->slot] = count(); }
fbt::dmu_tx_wait:return /this->on && this->wd && this->b == 3/ { @td3[this->pool, this->spa, this->slot] = count(); }
fbt::dmu_tx_wait:return /this->on && this->wd && this->b == 4/ { @td4[this->pool, this->spa, this->slot] = count(); }
fbt::dmu_tx_wait:return /this->on && this->wd && this->b == 5/ { @td5[this->pool, this->spa, this->slot] = count(); }

fbt::dmu_tx_wait:return
/this->on && !this->wd/
{
	@tw[this->pool, this->spa, this->slot] = count();
	@twns[this->pool, this->spa, this->slot] = sum(this->ns);
}

profile:::tick-1s
{
	this->tflush = 0;
}

profile:::tick-1s
/++thr_ticks >= thr_every/
{
	thr_ticks = 0;
	this->tflush = 1;
}

sdt:::txg-syncing
{
	this->tflush = 1;
}

dtrace:::END
{
	/* first: zfsobs drops what probes printed after its SIGINT and before this (docs/events.md, bye) */
	printf("zfsobs 1 bye %d probe=throttle\n", timestamp);
	this->tflush = 1;
}

/* The flush: each slot's totals since the start (a slot that did not move prints the same). */
profile:::tick-1s, sdt:::txg-syncing, dtrace:::END
/this->tflush/
{
	printa("zfsobs 1 txg_thr_c %@d pool=%s spa=%x slot=%d txg=%@d dirty_max=%@d dirty_data_max=%@d delay_min_pct=%@d delay_scale=%@d delays=%@d delay_ns=%@d delay_max_ns=%@d d0=%@d d1=%@d d2=%@d d3=%@d d4=%@d d5=%@d waits=%@d wait_ns=%@d\n",
	    @tts, @tt, @tdirty, @tmax, @tpct, @tscale, @tn, @tns, @tnsmax, @td0, @td1, @td2, @td3, @td4, @td5, @tw, @twns);
}
