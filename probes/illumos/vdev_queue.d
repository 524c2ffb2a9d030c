/*
 * vdev_queue.d - queue depth per leaf vdev and I/O class on illumos (metric: vdev queue depth); the
 * twin of probes/linux/vdev_queue.bt: the same vq, vq_lat and vq_vdev lines (docs/events.md,
 * docs/vdev_queue.md), per vdev and class at most twice a second from that class's own events.
 *
 * illumos keeps static functions probe-able (no auto-inlining), so the probe sits where the queue
 * changes: vdev_queue_io_add (a zio ENTERS the class's queue), vdev_queue_io_remove (it leaves:
 * ISSUED, or MERGED when vdev_queue_aggregate takes it or it carries ZIO_FLAG_NODATA),
 * vdev_queue_pending_add (ACTIVE at the device; the aggregate vdev_queue_aggregate returned counts
 * in aggs) and vdev_queue_pending_remove (COMPLETES). All four run under the queue's vq_lock, which
 * serializes one vdev's events: so the state lives in global variables (exact, no race) and the
 * depths are the kernel's own counts (avl_numnodes of the class tree, vqc_active), read before
 * each change; pend_ns/act_ns integrate them between events. Fields the probe cannot know:
 * untracked and untracked_act are -1 (D has no failed-insert signal; dtrace reports dynamic
 * variable drops on stderr instead). vq lines are never final: vdev_free gives the vq_vdev line
 * final=1 and starts the address over (a new generation of its variables).
 * Arguments: $$1 a pool name (empty: every pool).
 * Probes: fbt::vdev_queue_io_add:entry fbt::vdev_queue_io_remove:entry fbt::vdev_queue_pending_add:entry fbt::vdev_queue_pending_remove:entry fbt::vdev_queue_aggregate:entry fbt::vdev_queue_aggregate:return fbt::vdev_free:entry
 * Requires: fbt::vdev_queue_io_add:entry fbt::vdev_queue_io_remove:entry fbt::vdev_queue_pending_add:entry fbt::vdev_queue_pending_remove:entry
 * Members: vdev_queue.vq_vdev vdev_queue.vq_class vdev_queue_class.vqc_queued_tree vdev_queue_class.vqc_active avl_tree.avl_numnodes zio.io_priority zio.io_size zio.io_flags vdev.vdev_spa vdev.vdev_guid vdev.vdev_path spa.spa_name
 * Globals: zfs_vdev_max_active zfs_vdev_sync_read_max_active zfs_vdev_sync_read_min_active zfs_vdev_sync_write_max_active zfs_vdev_sync_write_min_active zfs_vdev_async_read_max_active zfs_vdev_async_read_min_active zfs_vdev_async_write_max_active zfs_vdev_async_write_min_active zfs_vdev_scrub_max_active zfs_vdev_scrub_min_active zfs_vdev_removal_max_active zfs_vdev_removal_min_active zfs_vdev_initializing_max_active zfs_vdev_initializing_min_active
 * Classes: 0 sync_read .. 6 initializing (illumos has no REBUILD; the TRIM class 7 of later
 *   illumos-gate is traced with max_active/min_active -1).
 * FreeBSD (OpenZFS 2.x): these four functions are static there and usually inlined (no fbt
 *   probe; -Z loads the script, doctor says which are missing); OpenZFS 2.2+ also replaced
 *   vq_class[] by vq_cactive[]/vq_cqueued: this script is for illumos.
 * Overhead: 4 probe hits per queued I/O; output <= 2 lines per active vdev and class per second.
 */
#pragma D option quiet
#pragma D option defaultargs
/* zfsobs passes $2 (the interval) to every script; this one has no use for it */
#pragma D option argref
#pragma D option dynvarsize=32m

/* read before the clauses that assign them: D needs them declared first (keys: vdev, generation, class) */
uint64_t vq_gen[uint64_t];
uint64_t vq_vft[uint64_t];
uint64_t vq_t[uint64_t, uint64_t, int];
uint64_t vq_ft[uint64_t, uint64_t, int];
int64_t vq_pm[uint64_t, uint64_t, int];
int64_t vq_am[uint64_t, uint64_t, int];

dtrace:::BEGIN
{
	printf("zfsobs 1 hello %d probe=vdev_queue target=kernel\n", timestamp);
}

/* Every queue event: integrate the kernel's depths up to now, before this event changes them. */
fbt::vdev_queue_io_add:entry, fbt::vdev_queue_io_remove:entry,
fbt::vdev_queue_pending_add:entry, fbt::vdev_queue_pending_remove:entry
{
	this->now = timestamp;
	this->vq = (vdev_queue_t *)arg0;
	this->zio = (zio_t *)arg1;
	this->z = arg1;
	this->vd = (uint64_t)this->vq->vq_vdev;
	this->g = vq_gen[this->vd];
	this->p = (int)this->zio->io_priority;
	this->pend = (int64_t)this->vq->vq_class[this->p].vqc_queued_tree.avl_numnodes;
	this->act = (int64_t)this->vq->vq_class[this->p].vqc_active;
	this->last = vq_t[this->vd, this->g, this->p];
	this->dt = this->last ? this->now - this->last : (uint64_t)0;
	vq_pi[this->vd, this->g, this->p] += this->pend * this->dt;
	vq_ai[this->vd, this->g, this->p] += this->act * this->dt;
	vq_t[this->vd, this->g, this->p] = this->now;
	this->hk = 2;	/* no latency sample unless a clause below sets one */
}

fbt::vdev_queue_io_add:entry
{
	this->pend++;
	vq_enq[this->vd, this->g, this->p]++;
	vq_enqb[this->vd, this->g, this->p] += this->zio->io_size;
	vq_qin[this->z] = this->now;
}

/* merged: taken into an aggregate, or a no-data write dropped (ZIO_FLAG_NODATA, 1 << 12) */
fbt::vdev_queue_io_remove:entry
{
	this->pend--;
	this->merged = self->vq_agg || (this->zio->io_flags & (1 << 12));
	vq_mrg[this->vd, this->g, this->p] += this->merged;
	vq_iss[this->vd, this->g, this->p] += !this->merged;
	this->lat = vq_qin[this->z] ? this->now - vq_qin[this->z] : (uint64_t)0;
	this->hk = vq_qin[this->z] ? 0 : 2;
	vq_wait[this->vd, this->g, this->p] += this->lat;
	vq_qin[this->z] = 0;
}

fbt::vdev_queue_pending_add:entry
{
	this->act++;
	vq_aggs[this->vd, this->g, this->p] += this->z == self->vq_aio;
	self->vq_aio = 0;
	vq_ain[this->z] = this->now;
}

fbt::vdev_queue_pending_remove:entry
{
	this->act--;
	vq_done[this->vd, this->g, this->p]++;
	vq_doneb[this->vd, this->g, this->p] += this->zio->io_size;
	this->lat = vq_ain[this->z] ? this->now - vq_ain[this->z] : (uint64_t)0;
	this->hk = vq_ain[this->z] ? 1 : 2;
	vq_unseen[this->vd, this->g, this->p] += !vq_ain[this->z];
	vq_dev[this->vd, this->g, this->p] += this->lat;
	vq_ain[this->z] = 0;
}

fbt::vdev_queue_aggregate:entry
{
	self->vq_agg = 1;
}

fbt::vdev_queue_aggregate:return
{
	self->vq_agg = 0;
	self->vq_aio = arg1;
}

/* Latency buckets as on Linux: b0 < 2.048 us, bN = [1.024 us * 2^N, 2^(N+1)), b23 the rest. */
fbt::vdev_queue_io_remove:entry, fbt::vdev_queue_pending_remove:entry
/this->hk < 2/
{
	this->x = this->lat >> 11;
	this->s = (this->x >> 32) ? 32 : 0; this->hb = this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 16) ? 16 : 0; this->hb += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 8) ? 8 : 0; this->hb += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 4) ? 4 : 0; this->hb += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 2) ? 2 : 0; this->hb += this->s; this->x = this->x >> this->s;
	this->hb += this->x;
	this->hb = this->hb > 23 ? 23 : this->hb;
	vq_h[this->vd, this->g, this->p, this->hk, this->hb]++;
}

/* The depths after this event, the highest since the class's last line, and whether to print. */
fbt::vdev_queue_io_add:entry, fbt::vdev_queue_io_remove:entry,
fbt::vdev_queue_pending_add:entry, fbt::vdev_queue_pending_remove:entry
{
	vq_pm[this->vd, this->g, this->p] = this->pend > vq_pm[this->vd, this->g, this->p] ? this->pend : vq_pm[this->vd, this->g, this->p];
	vq_am[this->vd, this->g, this->p] = this->act > vq_am[this->vd, this->g, this->p] ? this->act : vq_am[this->vd, this->g, this->p];
	this->flush = this->now - vq_ft[this->vd, this->g, this->p] >= 500000000;
	this->pool = this->flush ? stringof(this->vq->vq_vdev->vdev_spa->spa_name) : "";
	this->flush = this->flush && ($$1 == "" || this->pool == $$1);
}

fbt::vdev_queue_io_add:entry, fbt::vdev_queue_io_remove:entry,
fbt::vdev_queue_pending_add:entry, fbt::vdev_queue_pending_remove:entry
/this->flush/
{
	vq_ft[this->vd, this->g, this->p] = this->now;
	this->maxa = this->p == 0 ? *(int *)&`zfs_vdev_sync_read_max_active : this->p == 1 ? *(int *)&`zfs_vdev_sync_write_max_active :
	    this->p == 2 ? *(int *)&`zfs_vdev_async_read_max_active : this->p == 3 ? *(int *)&`zfs_vdev_async_write_max_active :
	    this->p == 4 ? *(int *)&`zfs_vdev_scrub_max_active : this->p == 5 ? *(int *)&`zfs_vdev_removal_max_active :
	    this->p == 6 ? *(int *)&`zfs_vdev_initializing_max_active : -1;
	this->mina = this->p == 0 ? *(int *)&`zfs_vdev_sync_read_min_active : this->p == 1 ? *(int *)&`zfs_vdev_sync_write_min_active :
	    this->p == 2 ? *(int *)&`zfs_vdev_async_read_min_active : this->p == 3 ? *(int *)&`zfs_vdev_async_write_min_active :
	    this->p == 4 ? *(int *)&`zfs_vdev_scrub_min_active : this->p == 5 ? *(int *)&`zfs_vdev_removal_min_active :
	    this->p == 6 ? *(int *)&`zfs_vdev_initializing_min_active : -1;
	printf("zfsobs 1 vq %d pool=%s pid=0 vd=0x%x class=%d final=0 pend=%d act=%d pend_ns=%d act_ns=%d pend_max=%d act_max=%d enq=%d enq_bytes=%d issued=%d merged=%d aggs=%d done=%d done_bytes=%d wait_ns=%d dev_ns=%d untracked=-1 untracked_act=-1 unseen=%d max_active=%d min_active=%d\n",
	    this->now, this->pool, this->vd, this->p, this->pend, this->act,
	    vq_pi[this->vd, this->g, this->p], vq_ai[this->vd, this->g, this->p],
	    vq_pm[this->vd, this->g, this->p], vq_am[this->vd, this->g, this->p],
	    vq_enq[this->vd, this->g, this->p], vq_enqb[this->vd, this->g, this->p],
	    vq_iss[this->vd, this->g, this->p], vq_mrg[this->vd, this->g, this->p],
	    vq_aggs[this->vd, this->g, this->p], vq_done[this->vd, this->g, this->p],
	    vq_doneb[this->vd, this->g, this->p], vq_wait[this->vd, this->g, this->p],
	    vq_dev[this->vd, this->g, this->p], vq_unseen[this->vd, this->g, this->p],
	    this->maxa, this->mina);
	printf("zfsobs 1 vq_lat %d pid=0 vd=0x%x class=%d kind=0 b0=%d b1=%d b2=%d b3=%d b4=%d b5=%d b6=%d b7=%d b8=%d b9=%d b10=%d b11=%d b12=%d b13=%d b14=%d b15=%d b16=%d b17=%d b18=%d b19=%d b20=%d b21=%d b22=%d b23=%d\n",
	    this->now, this->vd, this->p,
	    vq_h[this->vd, this->g, this->p, 0, 0], vq_h[this->vd, this->g, this->p, 0, 1], vq_h[this->vd, this->g, this->p, 0, 2], vq_h[this->vd, this->g, this->p, 0, 3],
	    vq_h[this->vd, this->g, this->p, 0, 4], vq_h[this->vd, this->g, this->p, 0, 5], vq_h[this->vd, this->g, this->p, 0, 6], vq_h[this->vd, this->g, this->p, 0, 7],
	    vq_h[this->vd, this->g, this->p, 0, 8], vq_h[this->vd, this->g, this->p, 0, 9], vq_h[this->vd, this->g, this->p, 0, 10], vq_h[this->vd, this->g, this->p, 0, 11],
	    vq_h[this->vd, this->g, this->p, 0, 12], vq_h[this->vd, this->g, this->p, 0, 13], vq_h[this->vd, this->g, this->p, 0, 14], vq_h[this->vd, this->g, this->p, 0, 15],
	    vq_h[this->vd, this->g, this->p, 0, 16], vq_h[this->vd, this->g, this->p, 0, 17], vq_h[this->vd, this->g, this->p, 0, 18], vq_h[this->vd, this->g, this->p, 0, 19],
	    vq_h[this->vd, this->g, this->p, 0, 20], vq_h[this->vd, this->g, this->p, 0, 21], vq_h[this->vd, this->g, this->p, 0, 22], vq_h[this->vd, this->g, this->p, 0, 23]);
	printf("zfsobs 1 vq_lat %d pid=0 vd=0x%x class=%d kind=1 b0=%d b1=%d b2=%d b3=%d b4=%d b5=%d b6=%d b7=%d b8=%d b9=%d b10=%d b11=%d b12=%d b13=%d b14=%d b15=%d b16=%d b17=%d b18=%d b19=%d b20=%d b21=%d b22=%d b23=%d\n",
	    this->now, this->vd, this->p,
	    vq_h[this->vd, this->g, this->p, 1, 0], vq_h[this->vd, this->g, this->p, 1, 1], vq_h[this->vd, this->g, this->p, 1, 2], vq_h[this->vd, this->g, this->p, 1, 3],
	    vq_h[this->vd, this->g, this->p, 1, 4], vq_h[this->vd, this->g, this->p, 1, 5], vq_h[this->vd, this->g, this->p, 1, 6], vq_h[this->vd, this->g, this->p, 1, 7],
	    vq_h[this->vd, this->g, this->p, 1, 8], vq_h[this->vd, this->g, this->p, 1, 9], vq_h[this->vd, this->g, this->p, 1, 10], vq_h[this->vd, this->g, this->p, 1, 11],
	    vq_h[this->vd, this->g, this->p, 1, 12], vq_h[this->vd, this->g, this->p, 1, 13], vq_h[this->vd, this->g, this->p, 1, 14], vq_h[this->vd, this->g, this->p, 1, 15],
	    vq_h[this->vd, this->g, this->p, 1, 16], vq_h[this->vd, this->g, this->p, 1, 17], vq_h[this->vd, this->g, this->p, 1, 18], vq_h[this->vd, this->g, this->p, 1, 19],
	    vq_h[this->vd, this->g, this->p, 1, 20], vq_h[this->vd, this->g, this->p, 1, 21], vq_h[this->vd, this->g, this->p, 1, 22], vq_h[this->vd, this->g, this->p, 1, 23]);
	vq_pm[this->vd, this->g, this->p] = this->pend;
	vq_am[this->vd, this->g, this->p] = this->act;
}

/* The vdev's identity and the per-vdev limit, at most twice a second (and final at vdev_free). */
fbt::vdev_queue_io_add:entry, fbt::vdev_queue_io_remove:entry,
fbt::vdev_queue_pending_add:entry, fbt::vdev_queue_pending_remove:entry
/this->flush && this->now - vq_vft[this->vd] >= 500000000/
{
	vq_vft[this->vd] = this->now;
	this->v = this->vq->vq_vdev;
	printf("zfsobs 1 vq_vdev %d pool=%s pid=0 vd=0x%x guid=%d final=0 vdev_max=%d path=%s\n",
	    this->now, this->pool, this->vd, this->v->vdev_guid, *(int *)&`zfs_vdev_max_active,
	    this->v->vdev_path != NULL ? stringof(this->v->vdev_path) : "");
}

fbt::vdev_free:entry
/vq_vft[arg0]/
{
	this->vd = arg0;
	this->v = (vdev_t *)arg0;
	vq_vft[this->vd] = 0;
	vq_gen[this->vd]++;
	printf("zfsobs 1 vq_vdev %d pool=%s pid=0 vd=0x%x guid=%d final=1 vdev_max=%d path=%s\n",
	    timestamp, stringof(this->v->vdev_spa->spa_name), this->vd, this->v->vdev_guid,
	    *(int *)&`zfs_vdev_max_active, this->v->vdev_path != NULL ? stringof(this->v->vdev_path) : "");
}

dtrace:::END
{
	/* first: zfsobs drops what probes printed after its SIGINT and before this (docs/events.md, bye) */
	printf("zfsobs 1 bye %d probe=vdev_queue\n", timestamp);
}
