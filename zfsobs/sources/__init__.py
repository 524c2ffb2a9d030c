"""What produces event lines: bpftrace (and the helpers that turn its maps into lines), dtrace,
kstat, the kstat queue sampler, the tunable watcher and the self-cost meter."""
