"""The userland ZFS lab: OpenZFS's own ztest, from the OS package, on file vdevs in a private
temp directory, as a traced target. Removes its files on every exit it can see."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from zfsobs.errors import ZfsobsError
from zfsobs.procs import Watchdog, die_with_parent, in_group, remove_stale
from zfsobs.signals import whole
from zfsobs.targets.target import Target, libzpool, linked_library

ZTEST = "/usr/sbin/ztest"
# OpenZFS 2.3 from bookworm-backports, unpacked here by scripts/setup: its packages cannot be
# installed next to 2.1's.
OPENZFS_23 = "/var/lib/zfsobs/openzfs-2.3"


@dataclass(frozen=True)
class Build:
    """An OpenZFS the lab can run: its ztest, and for a private install its libraries and zdb."""
    ztest: str
    libdir: str = ""       # on LD_LIBRARY_PATH, so ztest and zdb load this build's libraries
    zdb: str = ""          # $ZDB with ZFSOBS_LAB_ZDB=1: ztest checks its pool with it, else the one on PATH


BUILDS = {"2.1": Build(ZTEST),
          "2.3": Build(f"{OPENZFS_23}/sbin/ztest", f"{OPENZFS_23}/lib", f"{OPENZFS_23}/sbin/zdb")}
PREFIX = "zfsobs-lab-"
# Sizes for a 2-core, 24 GiB machine: 5 vdevs of 64 MiB grow to ~1 GiB of files in a 30 s run.
VDEV_SIZE = "64M"
PASS_SECONDS = 60
# A failed ztest's log tail kept past the lab's removal (its failed check and zfs_dbgmsg dump).
KEPT_LOG = 64 << 10
# A run with --lab-time ends at most this long past it (or its own length, if longer). A pass ends
# when its threads' last operations do: often a minute late here, minutes on a loaded machine (CI:
# 210 s past a 30 s run), and ztest_device_removal waits for the removal and then a whole scrub
# (CI, quiet: 230 s past a 25 s run). ztest's own deadman would wait 10 min past the pass.
OVERDUE_S = 180
CHECK_FAILED = re.compile(r"^ztest: |VERIFY|ASSERT|assert|panic|failed|aborting")
# Workloads. ztest runs zil_commit at most ~10 times a second per process (ztest_zil_commit's
# zopt_incessant interval in a call state all its threads share), and one ztest already uses both
# cores here, so more processes do not add commits. "zil" makes each commit carry more instead:
# one dataset (-d 1) puts every thread's itxs into one zilog (~2x log bytes per commit) and
# 16 KiB log blocks (zil_maxblocksize) split them into ~2x the lwb writes. docs/lab.md.
PRESETS: dict[str, tuple[list[str], list[str]]] = {
    "default": ([], []),
    "zil": (["-d", "1"], ["zil_maxblocksize=16384"]),
    # ./scripts/demo's: every panel moves. ztest's dirty data peaks at ~10-12 MiB a txg here, far
    # below its default zfs_dirty_data_max (10 % of RAM): at 8 MiB the throttle (past 60 %, 4.8 MiB)
    # delays writers in 1 txg of 10 to 35, at 16 MiB in ~1 of 150 (docs/testing.md, "The demo"). The
    # vdev_cache is on where the build has one (2.1; 2.2 removed it): PRESET_OPTIONAL.
    "demo": ([], [f"zfs_dirty_data_max={8 << 20}", "zfs_vdev_cache_size=10485760"]),
}
# A preset's options the build may lack: left out where its libzpool does not export them.
PRESET_OPTIONAL = {"zfs_vdev_cache_size"}

# Every lab's, unless its --option sets the same tunable. ztest syncs many times a second, so the
# timeout never ends a txg while it runs; at its pool unloads (each pass's end, its export/import test)
# an idle pool's next txg opens only at the timeout, and each top-level vdev's autotrim thread
# waits for one in turn: at ZFS's 5 s a --lab-time run ended up to 2 min late (docs/lab.md).
LAB_OPTIONS = ["zfs_txg_timeout=1"]


def _workroot() -> str:
    """tmpfs when it has room (file vdevs on a disk make ztest I/O-bound), else /var/tmp."""
    for root in ("/dev/shm", "/var/tmp", tempfile.gettempdir()):
        try:
            st = os.statvfs(root)
        except OSError:
            continue
        if os.access(root, os.W_OK) and st.f_bavail * st.f_frsize >= 3 << 30:
            return root
    raise ZfsobsError("the lab needs 3 GiB free in /dev/shm or /var/tmp for its file vdevs")


def _build(zfs: str | None) -> Build:
    """The build `--zfs` names (None: the installed one), or a one-line reason it cannot run."""
    build = BUILDS.get(zfs or "2.1")
    if build is None:
        raise ZfsobsError(f"no lab for OpenZFS {zfs!r} (have: {', '.join(BUILDS)})")
    if not os.path.exists(build.ztest):
        if build.libdir:
            raise ZfsobsError(f"the OpenZFS {zfs} lab is not installed ({build.ztest} missing): run ./scripts/setup")
        raise ZfsobsError(f"{build.ztest} not found: the lab needs ztest (package zfs-test); run ./scripts/setup")
    return build


class Lab:
    def __init__(self, duration: float | None = None, options: list[str] | None = None,
                 library: str | None = None, preset: str = "default", zfs: str | None = None):
        self.build = _build(zfs)
        library = library or linked_library(self.build.ztest, self.build.libdir)
        if not library and self.build.libdir:   # do not fall back to the system's libzpool
            raise ZfsobsError(f"{self.build.ztest} finds no libzpool in {self.build.libdir}: run ./scripts/setup")
        self.target: Target = libzpool(library)
        if zfs and not self.target.version.startswith(zfs + "."):
            raise ZfsobsError(f"--zfs {zfs}: {self.build.ztest} runs OpenZFS {self.target.version}")
        self.zfs = zfs or ".".join(self.target.version.split(".")[:2])
        self.duration = duration
        if preset not in PRESETS:
            raise ZfsobsError(f"no lab workload {preset!r} (have: {', '.join(PRESETS)})")
        self.preset = preset
        self.args, preset_options = PRESETS[preset]
        preset_options = [o for o in preset_options if o.partition("=")[0] not in PRESET_OPTIONAL
                          or o.partition("=")[0] in self.target.symbols]
        given = {o.partition("=")[0] for o in options or []}
        self.options = [o for o in LAB_OPTIONS + preset_options
                        if o.partition("=")[0] not in given] + list(options or [])
        for opt in self.options:
            name, sep, value = opt.partition("=")
            if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ZfsobsError(f"lab option {opt!r}: expected NAME=INTEGER (a ZFS tunable)")
            # ztest -o sets unsigned 32-bit globals, and would truncate a larger value silently
            if not re.fullmatch(r"[0-9]+", value) or int(value) >= 1 << 32:
                raise ZfsobsError(f"lab option {opt!r}: {name} takes a whole number from 0 to 4294967295 "
                                  "(ztest sets tunables as unsigned 32-bit values)")
        self.dir = ""
        self.kept_log = ""
        self.proc: subprocess.Popen | None = None
        self.watchdog: Watchdog | None = None
        # A pool name of its own, so other ztest runs on this machine (same library) are told apart.
        self.pool = f"zfsobs_lab_{os.getpid()}"

    @property
    def tunables(self) -> dict[str, int]:
        return {name: int(value) for name, _, value in (o.partition("=") for o in self.options)}

    def start(self) -> "Lab":
        root = _workroot()
        remove_stale(root, PREFIX)
        self.dir = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
        # ztest's pass processes are ztest's children: no parent-death signal of ours reaches them
        self.watchdog = Watchdog(self.dir)
        libdir = os.path.join(self.dir, "lib")
        vdevs = os.path.join(self.dir, "vdevs")
        os.mkdir(libdir)
        os.mkdir(vdevs)
        # ztest -o dlopen()s "libzpool.so", which Debian ships only as libzpool.so.N: give it one.
        os.symlink(self.target.path, os.path.join(libdir, "libzpool.so"))
        env = dict(os.environ, LD_LIBRARY_PATH=":".join(filter(None, (libdir, self.build.libdir))))
        # ztest checks its pool with zdb after making it, around its freeze test and after every
        # pass: 30 s of a 5 s run here (42 s against 12). They check ztest, not what zfsobs shows,
        # so `true` stands in for zdb unless ZFSOBS_LAB_ZDB=1 (2.1's ztest reads ZDB_PATH, 2.3's ZDB)
        if os.environ.get("ZFSOBS_LAB_ZDB") == "1":
            if self.build.zdb:
                env["ZDB"] = self.build.zdb
        else:
            env["ZDB_PATH"] = env["ZDB"] = shutil.which("true") or "/bin/true"
        run_time = max(1, round(self.duration)) if self.duration else 10 * 365 * 86400
        cmd = [self.build.ztest, "-T", str(run_time), "-P", str(PASS_SECONDS), "-k", "0",
               "-s", VDEV_SIZE, "-f", vdevs, "-p", self.pool] + self.args
        for opt in self.options:
            cmd += ["-o", opt]
        self.log = open(os.path.join(self.dir, "ztest.log"), "wb")
        with whole():      # a Ctrl-C inside Popen would leave a ztest that stop() never sees
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=die_with_parent)
            self.watchdog.group(self.proc.pid)
        self.started = time.monotonic()
        return self

    def owns(self, pid: int) -> bool:
        """A ztest pass of this lab: not the parent, which never opens the pool (its tunables are
        ztest's defaults, e.g. zfs_dirty_data_max 0), nor the zdb it runs to check the pool."""
        try:
            return pid != self.proc.pid and in_group(pid, self.proc.pid, os.path.realpath(self.build.ztest))
        except OSError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def overdue(self) -> float:
        """Seconds a --lab-time run has gone past its time plus its grace (0: not overdue)."""
        if not self.duration or not self.alive():
            return 0.0
        late = time.monotonic() - self.started - self.duration
        return late if late > max(OVERDUE_S, self.duration) else 0.0

    def failure(self) -> str:
        """Why ztest ended badly, or '' if it is running or ended well: its last log line, the
        check that failed (ztest is a randomized stress test: now and then one of OpenZFS's own
        assertions ends a run, signal 6), and where the log's tail is kept (stop() removes the lab).
        A run overdue is a failure too: the caller stops it."""
        if self.proc is None:
            return ""
        late = self.overdue()
        if self.proc.poll() in (None, 0) and not late:
            return ""
        try:
            with open(os.path.join(self.dir, "ztest.log"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - KEPT_LOG), os.SEEK_SET)
                tail = f.read()
        except OSError:
            tail = b""
        lines = tail.decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else ""
        why = (f"ztest ran {late:.0f} s past its {self.duration:g} s run, stopped (its pass's last operation "
               f"ran on: a device removal, say, waits for a whole scrub)" if late
               else f"ztest exited with status {self.proc.returncode}") + (f": {last[:200]}" if last else "")
        check = next((l for l in reversed(lines[:-1]) if CHECK_FAILED.search(l)), "")
        if check:
            why += f" ({check.strip()[:300]})"
        if tail and not self.kept_log:
            kept = "/var/tmp" if os.access("/var/tmp", os.W_OK) else tempfile.gettempdir()
            # a new file of a name no one can guess (O_EXCL, O_NOFOLLOW): root writes it in a shared dir
            fd, self.kept_log = tempfile.mkstemp(prefix=f"zfsobs-ztest-{os.getpid()}-", suffix=".log", dir=kept)
            with open(fd, "wb") as f:
                f.write(tail)
        return why + (f"; its log: {self.kept_log}" if self.kept_log else "")

    def terminate(self) -> None:
        """SIGTERM to ztest's group without waiting: stop() then finds it ending or ended. With
        ztest gone, bpftrace's uprobe teardown has no process mapping libzpool to patch."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(self.proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.proc is not None:
            try:   # ztest's own children share its process group
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if getattr(self, "log", None):
            self.log.close()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = ""
        if self.watchdog is not None:
            self.watchdog.done()
            self.watchdog = None

    def __enter__(self) -> "Lab":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
