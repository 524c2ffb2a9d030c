"""The sources' one stop hook (zfsobs/sources/stopping.py): the session names the lab's stop once,
and every source runs it once from finish(), as soon as its stop is asked."""
from __future__ import annotations

from zfsobs.sources.bpftrace import BpftraceSource
from zfsobs.sources.dtrace import DtraceSource
from zfsobs.sources.stopping import Stopping


def test_bpftrace_runs_the_hook_once_after_asking_the_stop():
    source = object.__new__(BpftraceSource)
    source._runtime()
    seen = []
    source.on_stop = lambda: seen.append(source._stop_ns)
    assert source.finish() == [] and source.finish() == []
    assert len(seen) == 1 and seen[0] is not None      # once, after the stop was asked


def test_every_source_has_the_hook():
    from zfsobs.sources.kstat import KstatSource
    assert all(issubclass(cls, Stopping) for cls in (BpftraceSource, DtraceSource, KstatSource))
    assert DtraceSource.finish_timeout == 30.0 and BpftraceSource.finish_timeout == 5.0
    assert Stopping().on_stop is None
