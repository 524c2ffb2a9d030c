"""What can be traced and how a probe is rendered for it: the target (libzpool or the zfs module),
its struct offsets (offsets.json, BTF, compiled layouts), the probe scripts rendered for it, and
which tracer this platform uses. Imports nothing from the stages after it."""
