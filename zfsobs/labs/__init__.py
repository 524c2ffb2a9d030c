"""What runs ZFS for us: the userland lab (ztest on libzpool), its knob (`lab set`) and the /proc
memory access both it and the watcher use, and the kernel lab (a QEMU guest)."""
