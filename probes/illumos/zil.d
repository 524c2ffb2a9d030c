/*
 * zil.d - ZFS intent log activity per pool and txg on illumos (metric: ZIL commits per txg); the
 * twin of probes/linux/zil.bt: the same zil, zil_itx and zil_lat lines (docs/events.md, docs/zil.md).
 *
 * Attribution as on Linux: every event counts to the txg OPEN in its pool when it happened
 * (zl_dmu_pool->dp_tx.tx_open_txg): a commit when zil_commit_impl returns, an itx when it is
 * assigned (zil_itx_assign), a log block when it is issued (zil_lwb_write_issue: lwb_nused,
 * lwb_sz, what zilstat.ksh read).
 * Counting is in D aggregations (race free across CPUs, summed when printed), never emptied:
 * DTrace 2.0 drops what a probe adds between the consumer's snapshot and trunc(). They are keyed
 * by (pool, spa_t, txg & 7), a slot the txg reuses eight txgs later; every interval ($2 seconds,
 * default 1) and when a txg has synced, printa prints each slot's totals since the start as zil_c,
 * zil_itx_c and zil_lat_c lines with the txg the slot holds, and zfsobs turns each slot's rise
 * into the txg's zil, zil_itx and zil_lat lines (zfsobs/sources/d_slots.py). A per-txg maximum
 * carries the txg's round (txg >> 3) above bit 40, so an older round's never wins.
 * final=1 comes as one line of zeros per synced txg (txg-synced, after the flush; ts = spa_sync
 * entry, which joins it to the txg line), since printa cannot print one key alone.
 * Arguments: $$1 a pool name (empty: every pool), $2 the flush interval in seconds.
 * Probes: fbt::zil_commit_impl:entry fbt::zil_commit_impl:return fbt::zil_itx_assign:entry fbt::zil_lwb_write_issue:entry fbt::spa_sync:entry sdt:::txg-synced
 * Requires: fbt::zil_commit_impl:entry fbt::zil_commit_impl:return sdt:::txg-synced
 * Members: zilog.zl_spa zilog.zl_dmu_pool dsl_pool.dp_tx dsl_pool.dp_spa tx_state.tx_open_txg spa.spa_name itx.itx_lr itx.itx_wr_state lr.lrc_txtype lr.lrc_reclen lr_write.lr_length lwb.lwb_nused lwb.lwb_sz
 * FreeBSD (OpenZFS 2.x): the same functions (zil_commit_impl 2.0-2.3; master renamed it
 *   zil_commit_flags); zil_lwb_write_issue is static there and may be inlined: -Z loads the
 *   script without it and the lwb fields stay 0; doctor lists the missing probe.
 * Overhead: 2 probe hits per commit, 1 per itx, 1 per log block; output per txg and interval.
 */
#pragma D option quiet
#pragma D option defaultargs
#pragma D option aggrate=100ms
#pragma D option switchrate=100ms

dtrace:::BEGIN
{
	zil_every = $2 > 0 ? $2 : 1;
	printf("zfsobs 1 hello %d probe=zil target=kernel\n", timestamp);
}

fbt::zil_commit_impl:entry
{
	self->zstart = timestamp;
	self->zilog = (zilog_t *)arg0;
}

/* A commit counts when it returns: its log blocks are then on disk. */
/* this-> variables are not zeroed between firings: every flag a later clause tests is set first */
fbt::zil_commit_impl:return
{
	this->on = 0;
	this->b = 0;
}

fbt::zil_commit_impl:return
/self->zstart/
{
	this->lat = timestamp - self->zstart;
	this->spa = (uint64_t)self->zilog->zl_spa;
	this->pool = stringof(self->zilog->zl_spa->spa_name);
	this->txg = self->zilog->zl_dmu_pool->dp_tx.tx_open_txg;
	this->slot = this->txg & 7;
	this->tag = ((this->txg >> 3) & 0xffffff) << 40;
	self->zstart = 0;
	self->zilog = 0;
	/* bucket 0: < 1.024 us; then two per power of two (docs/zil.md; zfsobs/model/zil.py lat_bucket) */
	this->x = this->lat;
	this->s = (this->x >> 32) ? 32 : 0; this->e = this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 16) ? 16 : 0; this->e += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 8) ? 8 : 0; this->e += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 4) ? 4 : 0; this->e += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 2) ? 2 : 0; this->e += this->s; this->x = this->x >> this->s;
	this->e += (this->x >> 1) ? 1 : 0;
	this->bk = this->lat < 1024 ? 0 : 1 + (this->e - 10) * 2 + ((this->lat >> (this->e - 1)) & 1);
	this->bk = this->bk > 49 ? 49 : this->bk;
	this->seg = this->bk / 25;
	this->b = this->bk % 25;
	this->on = $$1 == "" || this->pool == $$1;
}

fbt::zil_commit_impl:return
/this->on/
{
	@zts[this->pool, this->spa, this->slot] = max(timestamp);
	@zt[this->pool, this->spa, this->slot] = max(this->txg);
	@zcommits[this->pool, this->spa, this->slot] = count();
	@zlat[this->pool, this->spa, this->slot] = sum(this->lat);
	@zlatmax[this->pool, this->spa, this->slot] = max(this->tag | (this->lat > 0xffffffffff ? 0xffffffffff : this->lat));
	@zlts[this->pool, this->spa, this->slot, this->seg] = max(timestamp);
	@zlt[this->pool, this->spa, this->slot, this->seg] = max(this->txg);
}

fbt::zil_commit_impl:return /this->on && this->b == 0/ { @zl0[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 1/ { @zl1[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 2/ { @zl2[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 3/ { @zl3[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 4/ { @zl4[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 5/ { @zl5[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 6/ { @zl6[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 7/ { @zl7[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 8/ { @zl8[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 9/ { @zl9[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 10/ { @zl10[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 11/ { @zl11[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 12/ { @zl12[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 13/ { @zl13[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 14/ { @zl14[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 15/ { @zl15[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 16/ { @zl16[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 17/ { @zl17[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 18/ { @zl18[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 19/ { @zl19[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 20/ { @zl20[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 21/ { @zl21[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 22/ { @zl22[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 23/ { @zl23[this->pool, this->spa, this->slot, this->seg] = count(); }
fbt::zil_commit_impl:return /this->on && this->b == 24/ { @zl24[this->pool, this->spa, this->slot, this->seg] = count(); }

/* Every itx (log record) is assigned to its zilog here, the commit markers (TX_COMMIT, 0) too. */
fbt::zil_itx_assign:entry
{
	this->zilog = (zilog_t *)arg0;
	this->itx = (itx_t *)arg1;
	this->spa = (uint64_t)this->zilog->zl_spa;
	this->pool = stringof(this->zilog->zl_spa->spa_name);
	this->txg = this->zilog->zl_dmu_pool->dp_tx.tx_open_txg;
	this->slot = this->txg & 7;
	this->type = this->itx->itx_lr.lrc_txtype & 0xffff;     /* without TX_CI (bit 63) */
	this->tx = this->type > 24 ? 25 : this->type;     /* its zil_itx bucket (tx0..tx24, txother) */
	this->rec = this->type != 0 ? this->itx->itx_lr.lrc_reclen : (uint64_t)0;
	/* TX_WRITE (9) and TX_WRITE2 (20) carry lr_write_t; itx_wr_state 0 indirect, 1 copied, 2 needcopy */
	this->wr = this->type == 9 || this->type == 20;
	this->len = this->wr ? ((lr_write_t *)&this->itx->itx_lr)->lr_length : (uint64_t)0;
	this->state = this->wr ? (int)this->itx->itx_wr_state : 3;
	this->on = $$1 == "" || this->pool == $$1;
}

fbt::zil_itx_assign:entry
/this->on/
{
	@zts[this->pool, this->spa, this->slot] = max(timestamp);
	@zt[this->pool, this->spa, this->slot] = max(this->txg);
	@zitxs[this->pool, this->spa, this->slot] = sum(this->type != 0);
	@zitxb[this->pool, this->spa, this->slot] = sum(this->rec);
	@zwr[this->pool, this->spa, this->slot] = sum(this->wr);
	@zwrb[this->pool, this->spa, this->slot] = sum(this->len);
	@zcop[this->pool, this->spa, this->slot] = sum(this->state == 1);
	@zcopb[this->pool, this->spa, this->slot] = sum(this->state == 1 ? this->len : 0);
	@zneed[this->pool, this->spa, this->slot] = sum(this->state == 2);
	@zneedb[this->pool, this->spa, this->slot] = sum(this->state == 2 ? this->len : 0);
	@zind[this->pool, this->spa, this->slot] = sum(this->state == 0);
	@zindb[this->pool, this->spa, this->slot] = sum(this->state == 0 ? this->len : 0);
}

fbt::zil_itx_assign:entry /this->on && this->tx == 0/ { @zx0[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 1/ { @zx1[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 2/ { @zx2[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 3/ { @zx3[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 4/ { @zx4[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 5/ { @zx5[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 6/ { @zx6[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 7/ { @zx7[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 8/ { @zx8[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 9/ { @zx9[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 10/ { @zx10[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 11/ { @zx11[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 12/ { @zx12[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 13/ { @zx13[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 14/ { @zx14[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 15/ { @zx15[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 16/ { @zx16[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 17/ { @zx17[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 18/ { @zx18[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 19/ { @zx19[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 20/ { @zx20[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 21/ { @zx21[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 22/ { @zx22[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 23/ { @zx23[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 24/ { @zx24[this->pool, this->spa, this->slot] = count(); }
fbt::zil_itx_assign:entry /this->on && this->tx == 25/ { @zx25[this->pool, this->spa, this->slot] = count(); }

/* One call per log block issued; zilstat's N-Bytes (lwb_nused) and B-Bytes (lwb_sz). */
fbt::zil_lwb_write_issue:entry
{
	this->zilog = (zilog_t *)arg0;
	this->lwb = (lwb_t *)arg1;
	this->spa = (uint64_t)this->zilog->zl_spa;
	this->pool = stringof(this->zilog->zl_spa->spa_name);
	this->txg = this->zilog->zl_dmu_pool->dp_tx.tx_open_txg;
	this->slot = this->txg & 7;
	this->sz = this->lwb->lwb_sz;
}

fbt::zil_lwb_write_issue:entry
/$$1 == "" || this->pool == $$1/
{
	@zts[this->pool, this->spa, this->slot] = max(timestamp);
	@zt[this->pool, this->spa, this->slot] = max(this->txg);
	@zlwbs[this->pool, this->spa, this->slot] = count();
	@znused[this->pool, this->spa, this->slot] = sum(this->lwb->lwb_nused);
	@zsize[this->pool, this->spa, this->slot] = sum(this->sz);
	@zle4k[this->pool, this->spa, this->slot] = sum(this->sz <= 4096);
	@z4to32k[this->pool, this->spa, this->slot] = sum(this->sz > 4096 && this->sz < 32768);
	@zge32k[this->pool, this->spa, this->slot] = sum(this->sz >= 32768);
}

fbt::spa_sync:entry
{
	self->zsync = timestamp;
}

profile:::tick-1s
{
	this->zflush = (++zil_ticks % zil_every) == 0;
}

sdt:::txg-synced
{
	this->zflush = 1;
}

dtrace:::END
{
	/* first: zfsobs drops what probes printed after its SIGINT and before this (docs/events.md, bye) */
	printf("zfsobs 1 bye %d probe=zil\n", timestamp);
	this->zflush = 1;
}

/* The flush: each slot's totals since the start (a slot that did not move prints the same). */
profile:::tick-1s, sdt:::txg-synced, dtrace:::END
/this->zflush/
{
	printa("zfsobs 1 zil_c %@d pool=%s spa=%x slot=%d txg=%@d commits=%@d lat_ns=%@d lat_max_ns=%@d itxs=%@d itx_bytes=%@d writes=%@d write_bytes=%@d copied=%@d copied_bytes=%@d needcopy=%@d needcopy_bytes=%@d indirect=%@d indirect_bytes=%@d lwbs=%@d nused=%@d size=%@d lwb_le4k=%@d lwb_4to32k=%@d lwb_ge32k=%@d\n",
	    @zts, @zt, @zcommits, @zlat, @zlatmax, @zitxs, @zitxb, @zwr, @zwrb, @zcop, @zcopb, @zneed, @zneedb, @zind, @zindb,
	    @zlwbs, @znused, @zsize, @zle4k, @z4to32k, @zge32k);
	printa("zfsobs 1 zil_itx_c %@d pool=%s spa=%x slot=%d txg=%@d tx0=%@d tx1=%@d tx2=%@d tx3=%@d tx4=%@d tx5=%@d tx6=%@d tx7=%@d tx8=%@d tx9=%@d tx10=%@d tx11=%@d tx12=%@d tx13=%@d tx14=%@d tx15=%@d tx16=%@d tx17=%@d tx18=%@d tx19=%@d tx20=%@d tx21=%@d tx22=%@d tx23=%@d tx24=%@d txother=%@d\n",
	    @zts, @zt, @zx0, @zx1, @zx2, @zx3, @zx4, @zx5, @zx6, @zx7, @zx8, @zx9, @zx10, @zx11, @zx12, @zx13,
	    @zx14, @zx15, @zx16, @zx17, @zx18, @zx19, @zx20, @zx21, @zx22, @zx23, @zx24, @zx25);
	printa("zfsobs 1 zil_lat_c %@d pool=%s spa=%x slot=%d seg=%d txg=%@d b0=%@d b1=%@d b2=%@d b3=%@d b4=%@d b5=%@d b6=%@d b7=%@d b8=%@d b9=%@d b10=%@d b11=%@d b12=%@d b13=%@d b14=%@d b15=%@d b16=%@d b17=%@d b18=%@d b19=%@d b20=%@d b21=%@d b22=%@d b23=%@d b24=%@d\n",
	    @zlts, @zlt, @zl0, @zl1, @zl2, @zl3, @zl4, @zl5, @zl6, @zl7, @zl8, @zl9, @zl10, @zl11, @zl12,
	    @zl13, @zl14, @zl15, @zl16, @zl17, @zl18, @zl19, @zl20, @zl21, @zl22, @zl23, @zl24);
}

/* The txg has synced: its last counts were flushed just above; mark its row final. */
sdt:::txg-synced
{
	this->zsync = (uint64_t)0;	/* its first assignment types it: 64 bits, a timestamp */
}

sdt:::txg-synced
/self->zsync/
{
	this->pool = stringof(((dsl_pool_t *)arg0)->dp_spa->spa_name);
	this->zsync = $$1 == "" || this->pool == $$1 ? self->zsync : (uint64_t)0;
	self->zsync = 0;
}

sdt:::txg-synced
/this->zsync/
{
	printf("zfsobs 1 zil %d pool=%s pid=0 txg=%d cpu=%d final=1 commits=0 lat_ns=0 lat_max_ns=0 itxs=0 itx_bytes=0 writes=0 write_bytes=0 copied=0 copied_bytes=0 needcopy=0 needcopy_bytes=0 indirect=0 indirect_bytes=0 lwbs=0 nused=0 size=0 lwb_le4k=0 lwb_4to32k=0 lwb_ge32k=0\n",
	    this->zsync, this->pool, arg1, this->zsync);
}
