/*
 * vdev_queue.d (OpenZFS 2.2+) - queue depth per leaf vdev and I/O class, for DTrace where
 * probes/illumos/vdev_queue.d cannot run: OpenZFS 2.2 and later as Linux (Oracle's DTrace 2.x,
 * --tracer dtrace) and FreeBSD 14 build it, where vdev_queue_io_add/remove and
 * vdev_queue_pending_add/remove are static and inlined (no fbt probe) and vq_class[] lost its
 * counters (vq_cactive[]). The twin of probes/linux/vdev_queue.bt, event for event:
 *
 * A zio ENTERS the queue at vdev_queue_io (without ZIO_FLAG_DONT_QUEUE; its class fixed up as the
 * library does), is ISSUED when vdev_queue_io returns it or vdev_queue_io_done reissues it
 * (zio_vdev_io_reissue), or MERGED into an aggregate (zio_vdev_io_bypass; the aggregate itself, a
 * zio_vdev_delegated_io with DONT_QUEUE, is issued in its place), is ACTIVE at the device and
 * COMPLETES at vdev_queue_io_done. vdev_queue_change_io_priority moves a pending zio.
 * Counts are D aggregations (race free across CPUs) keyed as the .bt's maps: @vq_n[pid, vd,
 * generation << 4 | class, slot] = sum, @vq_x[..., kind] = max, the same slots, each written as
 * SLOT of its name in zfsobs/fields.py VDEV_QUEUE (docs/events.md, zfsobs/sources/vq_dumps.py).
 * Every 250 ms they are printed the way bpftrace prints maps, between a vq_dump and a vq_dump_end
 * line, never emptied: DTrace 2.0 drops what probes add between the
 * consumer's snapshot and trunc(). A dump holds the totals since the start, and a maximum carries
 * the dump's round (vq_round, counted per dump) above bit 32, so the newest round's is the
 * largest; zfsobs/sources/d_slots.py DumpTotals makes them the dumps of what moved, and
 * zfsobs/sources/vq_dumps.py the vq, vq_lat and vq_vdev lines of both tracers alike.
 * Per-zio state (when it entered, when it went to the device, and the vdev, generation, offset and
 * size that say it is the same zio) is in global arrays keyed by the zio: one zio's events are
 * ordered by the queue's lock. A firing DTrace dropped, or a dynamic variable drop (dtrace says so
 * on stderr), loses a zio's event: its state is retired as untracked when the address comes back,
 * and a completion never seen issued counts in unseen.
 * A flag's value (CONST of its name) is the module's own, put in by zfsobs (zfsobs/targets/d_render.py).
 * Arguments: $$1 a pool name (empty: every pool; the filter is zfsobs's), $2 unused.
 * Probes: fbt::vdev_queue_io:entry fbt::vdev_queue_io:return fbt::zio_vdev_io_reissue:entry fbt::zio_vdev_io_bypass:entry fbt::zio_vdev_delegated_io:return fbt::vdev_queue_io_done:entry fbt::vdev_queue_change_io_priority:entry fbt::vdev_free:entry
 * Requires: fbt::vdev_queue_io:entry fbt::vdev_queue_io:return fbt::vdev_queue_io_done:entry fbt::zio_vdev_io_reissue:entry fbt::zio_vdev_io_bypass:entry
 * Requires constants: ZIO_FLAG_DONT_QUEUE
 * Members: zio.io_vd zio.io_type zio.io_priority zio.io_flags zio.io_size zio.io_offset vdev.vdev_queue vdev.vdev_spa vdev.vdev_guid vdev.vdev_path vdev_queue.vq_class vdev_queue.vq_cactive avl_tree.avl_numnodes spa.spa_name
 * Overhead: ~4 probe hits per queued I/O; output: one dump per 250 ms, a line per key touched.
 */
#pragma D option quiet
#pragma D option defaultargs
#pragma D option argref
#pragma D option dynvarsize=32m
#pragma D option aggrate=50ms
#pragma D option switchrate=50ms

/* read before the clauses that assign them: D needs them declared first */
uint64_t vq_pc[uint64_t];
uint64_t vq_pv[uint64_t];
uint64_t vq_pg[uint64_t];
uint64_t vq_po[uint64_t];
uint64_t vq_ps[uint64_t];
uint64_t vq_ac[uint64_t];
uint64_t vq_av[uint64_t];
uint64_t vq_ag[uint64_t];
uint64_t vq_ao[uint64_t];
uint64_t vq_as[uint64_t];
uint64_t vq_gen[uint64_t];
uint64_t vq_ft[uint64_t];
int64_t vq_round;

dtrace:::BEGIN
{
	printf("zfsobs 1 hello %d probe=vdev_queue target=kernel\n", timestamp);
}

/* A zio enters its class's queue: the class fixed up as vdev_queue_io does, after this probe. An
 * entry this address still holds is a zio gone before: retired below. */
fbt::vdev_queue_io:entry
{
	this->zio = (zio_t *)arg0;
	this->q = (this->zio->io_flags & CONST(ZIO_FLAG_DONT_QUEUE)) == 0;
	this->now = timestamp;
	this->vdp = this->zio->io_vd;
	this->vd = (uint64_t)this->vdp;
	this->g = vq_gen[this->vd];
	this->type = (int)this->zio->io_type;
	this->p = (int)this->zio->io_priority;
	this->p = this->type == 1 && this->p != 0 && this->p != 2 && this->p != 4 && this->p != 5 &&
	    this->p != 6 && this->p != 8 ? 2 : this->p;
	this->p = this->type == 2 && this->p != 1 && this->p != 3 && this->p != 5 && this->p != 6 &&
	    this->p != 8 ? 3 : this->p;
	this->q = this->q && this->p < 9;
	this->k = (this->g << 4) | this->p;
	this->rp = this->q && vq_pc[arg0] ? arg0 : 0;
	this->ra = this->q && vq_ac[arg0] ? arg0 : 0;
}

/* ISSUED: vdev_queue_io returns the zio to issue now (any queued one; a DONT_QUEUE one is returned
 * as it came), or NULL; vdev_queue_io_done reissues the next ones. MERGED: a queued zio taken into
 * an aggregate. The zio must be the one that entered: same vdev, offset and size. */
fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry, fbt::zio_vdev_io_bypass:entry
{
	this->z = probename == "return" ? arg1 : arg0;
	this->zio = (zio_t *)this->z;
	this->e = this->z != 0 ? vq_pc[this->z] : (uint64_t)0;
	this->same = this->e ? vq_pv[this->z] == (uint64_t)this->zio->io_vd &&
	    vq_po[this->z] == this->zio->io_offset && vq_ps[this->z] == this->zio->io_size : 0;
	this->rp = this->e && !this->same ? this->z : 0;
	this->e = this->same ? this->e : 0;
	this->merged = probefunc == "zio_vdev_io_bypass";
	this->ra = this->e && !this->merged && vq_ac[this->z] ? this->z : 0;
	this->hk = 0;
}

/* An aggregate I/O: only vdev_queue_aggregate delegates one with DONT_QUEUE set. */
fbt::zio_vdev_delegated_io:return
{
	this->zio = (zio_t *)arg1;
	this->agg = arg1 != 0 && (this->zio->io_flags & CONST(ZIO_FLAG_DONT_QUEUE)) != 0 &&
	    (int)this->zio->io_priority < 9;
	this->rp = this->agg && vq_pc[arg1] ? arg1 : 0;
	this->ra = this->agg && vq_ac[arg1] ? arg1 : 0;
}

/* COMPLETES: every leaf I/O, queued or aggregate; one never seen issued (its issue not seen, or
 * not the zio that was: another vdev, offset or size) counts in unseen. */
fbt::vdev_queue_io_done:entry
{
	this->now = timestamp;
	this->zio = (zio_t *)arg0;
	this->vdp = this->zio->io_vd;
	this->vd = (uint64_t)this->vdp;
	this->e = vq_ac[arg0];
	this->same = this->e ? vq_av[arg0] == this->vd && vq_ao[arg0] == this->zio->io_offset &&
	    vq_as[arg0] == this->zio->io_size : 0;
	this->ra = this->e && !this->same ? arg0 : 0;
	this->e = this->same ? this->e : 0;
	this->rp = vq_pc[arg0] ? arg0 : 0;
	this->lp = (int)this->zio->io_priority;
	this->p = this->e ? (int)(this->e & 15) : this->lp;
	this->k = (vq_gen[this->vd] << 4) | this->p;
	this->ok = this->e || this->lp < 9;
	this->hk = 0;
}

/*
 * Retire what an address still holds when a new zio uses it: DTrace 2.0 on Linux drops a firing,
 * uncounted, when another program of the same dtrace is running on that CPU (docs/illumos.md), and
 * a zio whose issue or completion was dropped would stay pending or active in these counts for good
 * (a sid guest's burst, 2026-11-29: an async write depth of 178 against a limit of 10) and hand its
 * class and time to the next zio allocated there. It leaves the depth as untracked (pending) or
 * untracked_act (active): what the probe could not follow, as bpftrace counts its full maps. Its
 * time until now stays in the depth's integral (pend_gone_ns, act_gone_ns), which would
 * otherwise drop by it.
 */
fbt::vdev_queue_io:entry, fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry,
fbt::zio_vdev_io_bypass:entry, fbt::zio_vdev_delegated_io:return, fbt::vdev_queue_io_done:entry
/this->rp/
{
	this->re = vq_pc[this->rp];
	this->rv = vq_pv[this->rp];
	this->rs = vq_ps[this->rp];
	this->rlive = vq_pg[this->rp] == vq_gen[this->rv];	/* a freed vdev's counts are final */
	this->rt = timestamp;
	this->rk = (vq_pg[this->rp] << 4) | (this->re & 15);
	vq_pc[this->rp] = 0;
	vq_pv[this->rp] = 0;
	vq_pg[this->rp] = 0;
	vq_po[this->rp] = 0;
	vq_ps[this->rp] = 0;
}

fbt::vdev_queue_io:entry, fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry,
fbt::zio_vdev_io_bypass:entry, fbt::zio_vdev_delegated_io:return, fbt::vdev_queue_io_done:entry
/this->rp && this->rlive/
{
	@vq_n[0, this->rv, this->rk, SLOT(enq)] = sum((int64_t)-1);
	@vq_n[0, this->rv, this->rk, SLOT(enq_bytes)] = sum(-(int64_t)this->rs);
	@vq_n[0, this->rv, this->rk, SLOT(pend_us)] = sum(-(int64_t)((this->re >> 4) / 1000));
	@vq_n[0, this->rv, this->rk, SLOT(untracked)] = sum((int64_t)1);
	@vq_n[0, this->rv, this->rk, SLOT(pend_gone_ns)] = sum((int64_t)(this->rt - (this->re >> 4)));
}

fbt::vdev_queue_io:entry, fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry,
fbt::zio_vdev_io_bypass:entry, fbt::zio_vdev_delegated_io:return, fbt::vdev_queue_io_done:entry
/this->ra/
{
	this->ae = vq_ac[this->ra];
	this->av = vq_av[this->ra];
	this->alive = vq_ag[this->ra] == vq_gen[this->av];
	this->at = timestamp;
	this->ak = (vq_ag[this->ra] << 4) | (this->ae & 15);
	vq_ac[this->ra] = 0;
	vq_av[this->ra] = 0;
	vq_ag[this->ra] = 0;
	vq_ao[this->ra] = 0;
	vq_as[this->ra] = 0;
}

fbt::vdev_queue_io:entry, fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry,
fbt::zio_vdev_io_bypass:entry, fbt::zio_vdev_delegated_io:return, fbt::vdev_queue_io_done:entry
/this->ra && this->alive/
{
	@vq_n[0, this->av, this->ak, SLOT(act_us)] = sum(-(int64_t)((this->ae >> 4) / 1000));
	@vq_n[0, this->av, this->ak, SLOT(untracked_act)] = sum((int64_t)1);
	@vq_n[0, this->av, this->ak, SLOT(act_gone_ns)] = sum((int64_t)(this->at - (this->ae >> 4)));
}

fbt::vdev_queue_io:entry
/this->q/
{
	vq_pc[arg0] = (this->now << 4) | this->p;
	vq_pv[arg0] = this->vd;
	vq_pg[arg0] = this->g;
	vq_po[arg0] = this->zio->io_offset;
	vq_ps[arg0] = this->zio->io_size;
	@vq_n[0, this->vd, this->k, SLOT(enq)] = sum((int64_t)1);
	@vq_n[0, this->vd, this->k, SLOT(enq_bytes)] = sum((int64_t)(this->zio->io_size));
	@vq_n[0, this->vd, this->k, SLOT(pend_us)] = sum((int64_t)(this->now / 1000));
	/* the library's pending count before this one joins it, plus this one: a FIFO class's
	 * (sync read, sync write, trim) list length, else its tree's node count. Both are at the
	 * start of the class's union (vqc_list_numnodes its first word, vqc_tree the other arm):
	 * read through the union's start, not the members of its anonymous struct */
	this->vqc = (uintptr_t)&this->vdp->vdev_queue.vq_class[this->p];
	this->m = (this->p == 0 || this->p == 1 || this->p == 7 ? (int64_t)*(ulong_t *)this->vqc :
	    (int64_t)((avl_tree_t *)this->vqc)->avl_numnodes) + 1;
	@vq_x[0, this->vd, this->k, SLOT(pend_max)] = max(vq_round << 32 | this->m);
}

/* The vdev's identity and the per-vdev limit, at most twice a second per vdev. */
fbt::vdev_queue_io:entry
/this->q && this->now - vq_ft[this->vd] >= 500000000/
{
	vq_ft[this->vd] = this->now;
	printf("zfsobs 1 vq_id %d pool=%s pid=0 vd=0x%x gen=%d guid=%d vdev_max=%d path=%s\n",
	    this->now, stringof(this->vdp->vdev_spa->spa_name), this->vd, this->g, this->vdp->vdev_guid,
	    *(int *)&`zfs_vdev_max_active, this->vdp->vdev_path != NULL ? stringof(this->vdp->vdev_path) : "");
}

fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry, fbt::zio_vdev_io_bypass:entry
/this->e/
{
	this->now = timestamp;
	this->vd = (uint64_t)this->zio->io_vd;
	this->p = this->e & 15;
	this->t0 = this->e >> 4;
	this->k = (vq_gen[this->vd] << 4) | this->p;
	this->lat = this->now - this->t0;
	vq_pc[this->z] = 0;
	vq_pv[this->z] = 0;
	vq_pg[this->z] = 0;
	vq_po[this->z] = 0;
	vq_ps[this->z] = 0;
	@vq_n[0, this->vd, this->k, SLOT(pend_us)] = sum(-(int64_t)(this->t0 / 1000));
	@vq_n[0, this->vd, this->k, SLOT(wait_ns)] = sum((int64_t)(this->lat));
	@vq_n[0, this->vd, this->k, SLOT(merged)] = sum((int64_t)(this->merged));
	this->hk = SLOT(wait_b0);	/* the wait histogram's slots (below) */
}

fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry, fbt::zio_vdev_io_bypass:entry
/this->e && !this->merged/
{
	vq_ac[this->z] = (this->now << 4) | this->p;
	vq_av[this->z] = this->vd;
	vq_ag[this->z] = vq_gen[this->vd];
	vq_ao[this->z] = this->zio->io_offset;
	vq_as[this->z] = this->zio->io_size;
	@vq_n[0, this->vd, this->k, SLOT(act_us)] = sum((int64_t)(this->now / 1000));
}

fbt::zio_vdev_delegated_io:return
/this->agg/
{
	this->now = timestamp;
	this->vd = (uint64_t)this->zio->io_vd;
	this->p = (int)this->zio->io_priority;
	this->k = (vq_gen[this->vd] << 4) | this->p;
	vq_ac[arg1] = (this->now << 4) | this->p;
	vq_av[arg1] = this->vd;
	vq_ag[arg1] = vq_gen[this->vd];
	vq_ao[arg1] = this->zio->io_offset;
	vq_as[arg1] = this->zio->io_size;
	@vq_n[0, this->vd, this->k, SLOT(aggs)] = sum((int64_t)1);
	@vq_n[0, this->vd, this->k, SLOT(act_us)] = sum((int64_t)(this->now / 1000));
}

fbt::vdev_queue_io_done:entry
/this->e/
{
	this->t1 = this->e >> 4;
	this->lat = this->now - this->t1;
	vq_ac[arg0] = 0;
	vq_av[arg0] = 0;
	vq_ag[arg0] = 0;
	vq_ao[arg0] = 0;
	vq_as[arg0] = 0;
	@vq_n[0, this->vd, this->k, SLOT(act_us)] = sum(-(int64_t)(this->t1 / 1000));
	@vq_n[0, this->vd, this->k, SLOT(done_bytes)] = sum((int64_t)(this->zio->io_size));
	@vq_n[0, this->vd, this->k, SLOT(dev_ns)] = sum((int64_t)(this->lat));
	this->hk = SLOT(dev_b0);	/* the device histogram's slots (below) */
}

fbt::vdev_queue_io_done:entry
/!this->e && this->lp < 9/
{
	@vq_n[0, this->vd, this->k, SLOT(unseen)] = sum((int64_t)1);
}

/* Latency histograms, wait (wait_b0..) and device (dev_b0..): b0 < 2.048 us, bN = [1.024 us * 2^N,
 * 2^(N+1)), b23 the rest. */
fbt::vdev_queue_io:return, fbt::zio_vdev_io_reissue:entry, fbt::zio_vdev_io_bypass:entry,
fbt::vdev_queue_io_done:entry
/this->hk/
{
	this->x = this->lat >> 11;
	this->s = (this->x >> 32) ? 32 : 0; this->b = this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 16) ? 16 : 0; this->b += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 8) ? 8 : 0; this->b += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 4) ? 4 : 0; this->b += this->s; this->x = this->x >> this->s;
	this->s = (this->x >> 2) ? 2 : 0; this->b += this->s; this->x = this->x >> this->s;
	this->b += this->x;
	@vq_n[0, this->vd, this->k, this->hk + (this->b > 23 ? 23 : this->b)] = sum((int64_t)1);
}

/* The library's active count of the class still includes this zio here: the highest of these
 * reads is the highest it reached, to hold against the limit. */
fbt::vdev_queue_io_done:entry
/this->ok && this->p < 9/
{
	@vq_x[0, this->vd, this->k, SLOT(act_max)] = max(vq_round << 32 | (int64_t)this->vdp->vdev_queue.vq_cactive[this->p]);
}

/* A pending zio moves to another class (the library's own fix-up). */
fbt::vdev_queue_change_io_priority:entry
{
	this->e = vq_pc[arg0];
	this->zio = (zio_t *)arg0;
	this->type = this->e ? (int)this->zio->io_type : 0;
	this->np = (int)arg1;
	this->np = this->type == 1 && this->np != 0 && this->np != 2 && this->np != 4 ? 2 : this->np;
	this->np = this->type == 2 && this->np != 1 && this->np != 3 ? 3 : this->np;
	this->p = (int)(this->e & 15);
	this->mv = this->e && this->np != this->p && this->np < 9;
}

fbt::vdev_queue_change_io_priority:entry
/this->mv/
{
	this->vd = (uint64_t)this->zio->io_vd;
	this->g = vq_gen[this->vd] << 4;
	this->tu = (int64_t)((this->e >> 4) / 1000);
	@vq_n[0, this->vd, this->g | this->p, SLOT(enq)] = sum((int64_t)-1);
	@vq_n[0, this->vd, this->g | this->p, SLOT(pend_us)] = sum((int64_t)(-this->tu));
	@vq_n[0, this->vd, this->g | this->np, SLOT(enq)] = sum((int64_t)1);
	@vq_n[0, this->vd, this->g | this->np, SLOT(pend_us)] = sum((int64_t)(this->tu));
	vq_pc[arg0] = (this->e >> 4 << 4) | this->np;
}

/* The vdev goes away: zfsobs gives its last lines final=1, and a vdev_t allocated at this address
 * later starts from zero (a new generation). */
fbt::vdev_free:entry
{
	printf("zfsobs 1 vq_free %d pid=0 vd=0x%x gen=%d\n", timestamp, arg0, vq_gen[arg0]);
	vq_gen[arg0] = vq_gen[arg0] + 1;
	vq_ft[arg0] = 0;
}

/* Every 250 ms: the totals and this round's maxima, and each class's limits now. */
profile:::tick-250ms
{
	vq_round = vq_round + 1;
	printf("zfsobs 1 vq_dump %d set=0 end=%d round=%d\n", timestamp, timestamp, vq_round);
	printa("@vq_n0[%d, %d, %d, %d]: %@d\n", @vq_n);
	printa("@vq_x0[%d, %d, %d, %d]: %@d\n", @vq_x);
	printf("@vq_lma[0, 0]: %d\n@vq_lmi[0, 0]: %d\n", *(int *)&`zfs_vdev_sync_read_max_active, *(int *)&`zfs_vdev_sync_read_min_active);
	printf("@vq_lma[0, 1]: %d\n@vq_lmi[0, 1]: %d\n", *(int *)&`zfs_vdev_sync_write_max_active, *(int *)&`zfs_vdev_sync_write_min_active);
	printf("@vq_lma[0, 2]: %d\n@vq_lmi[0, 2]: %d\n", *(int *)&`zfs_vdev_async_read_max_active, *(int *)&`zfs_vdev_async_read_min_active);
	printf("@vq_lma[0, 3]: %d\n@vq_lmi[0, 3]: %d\n", *(int *)&`zfs_vdev_async_write_max_active, *(int *)&`zfs_vdev_async_write_min_active);
	printf("@vq_lma[0, 4]: %d\n@vq_lmi[0, 4]: %d\n", *(int *)&`zfs_vdev_scrub_max_active, *(int *)&`zfs_vdev_scrub_min_active);
	printf("@vq_lma[0, 5]: %d\n@vq_lmi[0, 5]: %d\n", *(int *)&`zfs_vdev_removal_max_active, *(int *)&`zfs_vdev_removal_min_active);
	printf("@vq_lma[0, 6]: %d\n@vq_lmi[0, 6]: %d\n", *(int *)&`zfs_vdev_initializing_max_active, *(int *)&`zfs_vdev_initializing_min_active);
	printf("@vq_lma[0, 7]: %d\n@vq_lmi[0, 7]: %d\n", *(int *)&`zfs_vdev_trim_max_active, *(int *)&`zfs_vdev_trim_min_active);
	printf("@vq_lma[0, 8]: %d\n@vq_lmi[0, 8]: %d\n", *(int *)&`zfs_vdev_rebuild_max_active, *(int *)&`zfs_vdev_rebuild_min_active);
	printf("@vq_lt[0]: %d\nzfsobs 1 vq_dump_end %d\n", timestamp, timestamp);
}

dtrace:::END
{
	/* first: zfsobs drops what probes printed after its SIGINT and before this (docs/events.md, bye) */
	printf("zfsobs 1 bye %d probe=vdev_queue\n", timestamp);
}
