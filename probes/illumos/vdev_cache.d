/*
 * vdev_cache.d - read inflation by the vdev cache per leaf vdev on illumos (metric: vdev_cache
 * inflation); the twin of probes/linux/vdev_cache.bt: the same `vc` line (docs/events.md,
 * docs/vdev_cache.md). illumos ZFS still has the vdev cache (zfs_vdev_cache_size 0, off, since 2011).
 *
 * vdev_cache_read(zio) is offered every leaf read: without ZIO_FLAG_DONT_CACHE (1 << 11) it is
 * counted in reads; its return says what the cache did: B_TRUE with a fill issued from inside the
 * call (zio_vdev_delegated_io, a whole 1 << zfs_vdev_cache_bshift line) is a MISS, B_TRUE without
 * one a HIT (or a delegation to a fill in flight), B_FALSE DECLINED. Calls nest on a thread (the
 * fill's own pipeline calls it again, with DONT_CACHE): only the outermost call is counted.
 * Counters are D aggregations (race free), cumulative, printed every $2 seconds (default 1) for
 * every vdev seen; ts is the time of the vdev's latest read, so an idle vdev repeats its line
 * unchanged. size, max, bshift are the kernel's tunables at the vdev's latest read (each a sum of
 * changes; two CPUs reading one vdev in the same instant a tunable changes may add the change twice).
 * Lines are never final: printa cannot drop one vdev's key (docs/illumos.md).
 * Arguments: $$1 a pool name (empty: every pool), $2 the interval in seconds.
 * Probes: fbt::vdev_cache_read:entry fbt::vdev_cache_read:return fbt::zio_vdev_delegated_io:entry
 * Requires: fbt::vdev_cache_read:entry fbt::vdev_cache_read:return
 * Absent: OpenZFS 2.2 and later removed the vdev cache (vdev_cache_read and its kstat are gone)
 * Members: zio.io_flags zio.io_size zio.io_vd vdev.vdev_spa vdev.vdev_guid vdev.vdev_path spa.spa_name
 * Globals: zfs_vdev_cache_size zfs_vdev_cache_max zfs_vdev_cache_bshift
 * FreeBSD: OpenZFS 2.0/2.1 (FreeBSD 13) has vdev_cache_read with the same flow; 2.2+ (FreeBSD 14)
 *   removed the vdev cache: no probe, and doctor reports the metric absent.
 * Overhead: 2 probe hits per leaf read (+1 per miss); output per vdev and interval.
 */
#pragma D option quiet
#pragma D option defaultargs
#pragma D option aggrate=100ms

/* read (vdev_cache_read:entry) before the assignments below them: D needs them declared first */
int64_t vc_lsize[uint64_t];
int64_t vc_lmax[uint64_t];
int64_t vc_lbshift[uint64_t];

dtrace:::BEGIN
{
	vc_every = $2 > 0 ? $2 : 1;
	printf("zfsobs 1 hello %d probe=vdev_cache target=kernel\n", timestamp);
}

fbt::vdev_cache_read:entry
{
	self->vc_depth++;
	this->zio = (zio_t *)arg0;
	this->offered = self->vc_depth == 1 && (this->zio->io_flags & (1 << 11)) == 0;
	this->pool = this->offered ? stringof(this->zio->io_vd->vdev_spa->spa_name) : "";
}

fbt::vdev_cache_read:entry
/this->offered && ($$1 == "" || this->pool == $$1)/
{
	self->vc_vd = this->zio->io_vd;
	self->vc_size = this->zio->io_size;
	this->path = self->vc_vd->vdev_path != NULL ? stringof(self->vc_vd->vdev_path) : "";
	this->vd = (uint64_t)self->vc_vd;
	this->guid = self->vc_vd->vdev_guid;
	@vts[this->pool, this->vd, this->guid, this->path] = max(timestamp);
	@vreads[this->pool, this->vd, this->guid, this->path] = count();
	@vrb[this->pool, this->vd, this->guid, this->path] = sum(self->vc_size);
	/* the tunables now: each aggregation sums the changes, so it reads the latest value */
	this->t = *(int32_t *)&`zfs_vdev_cache_size;
	@vsize[this->pool, this->vd, this->guid, this->path] = sum(this->t - vc_lsize[this->vd]);
	vc_lsize[this->vd] = this->t;
	this->t = *(int32_t *)&`zfs_vdev_cache_max;
	@vmax[this->pool, this->vd, this->guid, this->path] = sum(this->t - vc_lmax[this->vd]);
	vc_lmax[this->vd] = this->t;
	this->t = *(int32_t *)&`zfs_vdev_cache_bshift;
	@vbshift[this->pool, this->vd, this->guid, this->path] = sum(this->t - vc_lbshift[this->vd]);
	vc_lbshift[this->vd] = this->t;
}

/* A miss: the fill of the whole cache line, issued from inside the counted call. */
fbt::zio_vdev_delegated_io:entry
/self->vc_vd && self->vc_depth == 1/
{
	self->vc_fill = arg3;
}

fbt::vdev_cache_read:return
/self->vc_vd && self->vc_depth == 1/
{
	this->vd = (uint64_t)self->vc_vd;
	this->guid = self->vc_vd->vdev_guid;
	this->pool = stringof(self->vc_vd->vdev_spa->spa_name);
	this->path = self->vc_vd->vdev_path != NULL ? stringof(self->vc_vd->vdev_path) : "";
	this->taken = arg1 != 0;
	this->hit = this->taken && self->vc_fill == 0;
	this->miss = this->taken && self->vc_fill != 0;
	@vts[this->pool, this->vd, this->guid, this->path] = max(timestamp);
	@vhits[this->pool, this->vd, this->guid, this->path] = sum(this->hit);
	@vhb[this->pool, this->vd, this->guid, this->path] = sum(this->hit ? self->vc_size : (uint64_t)0);
	@vmiss[this->pool, this->vd, this->guid, this->path] = sum(this->miss);
	@vmb[this->pool, this->vd, this->guid, this->path] = sum(this->miss ? self->vc_size : (uint64_t)0);
	@vfb[this->pool, this->vd, this->guid, this->path] = sum(self->vc_fill);
	@vdecl[this->pool, this->vd, this->guid, this->path] = sum(!this->taken);
	@vdb[this->pool, this->vd, this->guid, this->path] = sum(this->taken ? (uint64_t)0 : self->vc_size);
	self->vc_vd = 0;
	self->vc_size = 0;
	self->vc_fill = 0;
}

fbt::vdev_cache_read:return
/self->vc_depth/
{
	self->vc_depth--;
}

profile:::tick-1s
{
	this->flush = (++vc_ticks % vc_every) == 0;
}

dtrace:::END
{
	/* first: zfsobs drops what probes printed after its SIGINT and before this (docs/events.md, bye) */
	printf("zfsobs 1 bye %d probe=vdev_cache\n", timestamp);
	this->flush = 1;
}

profile:::tick-1s, dtrace:::END
/this->flush/
{
	printa("zfsobs 1 vc %@d pool=%s pid=0 vd=0x%x final=0 reads=%@d read_bytes=%@d hits=%@d hit_bytes=%@d misses=%@d miss_bytes=%@d fill_bytes=%@d declined=%@d declined_bytes=%@d size=%@d max=%@d bshift=%@d guid=%d path=%s\n",
	    @vts, @vreads, @vrb, @vhits, @vhb, @vmiss, @vmb, @vfb, @vdecl, @vdb, @vsize, @vmax, @vbshift);
}
