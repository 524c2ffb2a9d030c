"""The kernel lab: OpenZFS's real kernel module in a throwaway QEMU guest (docs/kernel-lab.md).

`zfsobs lab --kernel -- CMD ...` boots the cached image (kernel_guest.py), gives it sparse data
disks, loads the module (with -o parameters), creates pool zfsobs_klab, starts the workload, and runs
CMD with the project mounted read-only at its host path (and any --share writable). It streams CMD's
stdout/stderr back, passes Ctrl-C/SIGTERM on to CMD, and returns CMD's exit status. The guest is
always powered off and every temp file removed, whatever ends the run. The default image's zfs.ko is
a stock DKMS build (no module BTF: zfsobs compiles its struct layouts, once per image, into a cache
the guests share with the host); --btf boots the flavour built with module BTF; --distro trixie or
trixie-backports an image of Debian 13 with OpenZFS 2.3 or 2.4, --distro sid Debian sid's 2.4.4 with
Oracle's DTrace for the D scripts (kernel_guest.DISTROS).
"""
from __future__ import annotations

import collections
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zfsobs.errors import ZfsobsError
from zfsobs.procs import remove_stale
from zfsobs.labs.guest import (BUILDER, GUEST_LAYOUTS, POOL, PROJECT, cache_dir, ensure_image, guest_memory,
                                 image_dir, parse_layout, parse_module_options, parse_size, parse_workload,
                                 possible_cpu_args, probe_accel, qemu_binary, setup_script,
                                 tcg_thread)
from zfsobs.procs import die_with_parent, stop
from zfsobs.targets.cache_files import private_dir
from zfsobs.signals import Terminated, whole

AGENT = PROJECT / "scripts" / "kernel-lab-guest"
QEMU = qemu_binary()
STREAMS = ("console", "stdout", "stderr", "signal")   # qemu connects to one socket of ours for each
DEFAULT_TIMEOUT = 3600.0
TEMP_PREFIX = "zfsobs-klab-"
STOP_GRACE = 120.0        # after Ctrl-C: how long CMD gets to finish in the guest (TCG is slow)
POWEROFF_GRACE = 60.0     # after CMD ended (its rc written): how long the guest gets to power off
ATTACH_TIMEOUT_TCG = 900  # bpftrace compiles and attaches ~20x slower under TCG
CONSOLE_MAX = 32 << 20    # a run's whole console, kept in its directory up to this size
CONSOLES_KEPT = 20        # failed runs' consoles kept in the cache's consoles/, the newest
NR_CPUS = 8192            # Debian's kernels: the most possible CPUs a guest can be given
PANIC = re.compile(rb"Kernel panic - not syncing.*|Fatal exception.*|BUG: .*|Oops: .*")


def _manifest(img: Path) -> dict[str, str]:
    """The image's manifest (scripts/kernel-lab-image): a name and its value a line."""
    try:
        lines = (img / "manifest").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split(" ", 1) for line in lines if " " in line)


def _opt(path: Path) -> str:
    """A path inside a qemu option value: a comma would end the value, so qemu wants it doubled."""
    return str(path).replace(",", ",,")


class KernelLab:
    """One guest run. run() returns CMD's exit status; raises ZfsobsError when the guest fails."""

    def __init__(self, command: list[str], layout: str = "mirror-log", disk_size: str = "2G",
                 timeout: float = DEFAULT_TIMEOUT, console: bool = False, memory: str | None = None,
                 options: list[str] = (), shares: list[str] = (), workload: str = "mix", btf: bool = False,
                 distro: str = "bookworm", possible_cpus: int | None = None):
        if not command:
            raise ZfsobsError("lab --kernel: give the command to run in the guest: -- CMD ...")
        self.command = command
        self.options = parse_module_options(list(options))
        self.workload = parse_workload(workload)
        self.shares = [self._share(d) for d in shares]
        self.layout = parse_layout(layout)
        self.disk_size = parse_size(disk_size)
        self.timeout = timeout
        self.console = console
        self.flavour = "btf" if btf else "stock"
        self.distro = distro
        if possible_cpus is not None and not 2 <= possible_cpus <= NR_CPUS:
            raise ZfsobsError(f"lab --kernel: --possible-cpus {possible_cpus}: from 2 to {NR_CPUS}")
        self.possible_cpus = possible_cpus
        self.memory = memory or guest_memory(possible_cpus)
        image_dir(flavour=self.flavour, distro=distro)      # a wrong pair is an error before anything starts
        self.accel, self.accel_why = probe_accel()
        self.tcg_thread = tcg_thread()
        self.dir: Path | None = None
        self.qemu: subprocess.Popen | None = None
        self.console_tail: collections.deque[bytes] = collections.deque(maxlen=40)
        self.console_log = None       # the whole console, in the run's directory (up to CONSOLE_MAX)
        self._logged = 0
        self._panic = b""             # the guest kernel's first panic, oops or BUG line
        self.timings: dict[str, float] = {}
        self._partial = b""
        self._socks: list[socket.socket] = []
        self._signal_conn: socket.socket | None = None
        self._stopping = 0.0      # when CMD was asked to stop (Ctrl-C, SIGTERM)
        self._exited = 0.0        # when the agent said CMD exited (its rc written)
        self._spoke = False       # CMD's output came: it runs, even if the console says so later

    @staticmethod
    def _share(path: str) -> Path:
        d = Path(path).resolve()
        if not d.is_dir():
            raise ZfsobsError(f"--share {path}: not a directory")
        if any(ord(c) < 0x20 or ord(c) == 0x7f for c in str(d)) or str(d) != str(d).strip():
            # the guest reads the shares file a line at a time, words split at blanks
            raise ZfsobsError(f"--share {path!r}: a control character or an outer blank in the path")
        return d

    def _guest_env(self) -> str:
        """Environment for CMD in the guest: what the host terminal is, so `zfsobs top` draws its live
        view into it, and a longer bpftrace attach limit under TCG."""
        env = {}
        if sys.stdout.isatty():
            size = shutil.get_terminal_size()
            env.update(ZFSOBS_TTY="1", COLUMNS=str(size.columns), LINES=str(size.lines),
                       TERM=os.environ.get("TERM", "xterm-256color"))
        if self.possible_cpus:      # scripts/kernel-fidelity records the guest's possible CPUs then
            env["ZFSOBS_KLAB_POSSIBLE_CPUS"] = str(self.possible_cpus)
        if self.accel == "tcg":
            env["ZFSOBS_ATTACH_TIMEOUT"] = str(ATTACH_TIMEOUT_TCG)
        return "".join(f"{k}={v}\n" for k, v in env.items())

    # ------------------------------------------------------------------ set up
    def _prepare(self, img: Path) -> list[str]:
        tmp = Path(os.environ.get("ZFSOBS_KLAB_TMP") or "/var/tmp")
        remove_stale(str(tmp), TEMP_PREFIX)     # a run SIGKILLed (its qemu died with it: PDEATHSIG)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=tmp))
        ctl = self.dir / "ctl"
        ctl.mkdir()
        self.console_log = open(self.dir / "console.log", "wb")
        shutil.copy(AGENT, ctl / "agent.sh")
        (ctl / "project").write_text(str(PROJECT))
        (ctl / "setup.sh").write_text(setup_script(self.layout, self.options, self.workload))
        (ctl / "env").write_text(self._guest_env())
        # the layouts zfsobs compiles in a guest (no module BTF) outlive it, as on a machine's disk:
        # every boot of an image would compile them again (a minute under TCG), and that is not news
        # (a directory another user could write is not shared: the guest would read its offsets)
        layouts, _ = private_dir(cache_dir() / "layouts")
        keep = layouts is not None and os.access(layouts, os.W_OK)
        (ctl / "shares").write_text("".join(f"zfsobs_share{i} {d}\n" for i, d in enumerate(self.shares))
                                    + (f"zfsobs_layouts {GUEST_LAYOUTS}\n" if keep else ""))
        (ctl / "argv").write_bytes(b"".join(a.encode() + b"\0" for a in self.command))
        drives = []
        log_size = min(1 << 30, self.disk_size // 2)
        for i in range(self.layout.data_disks + self.layout.log):
            disk = self.dir / f"disk{i}.img"
            with open(disk, "wb") as f:      # sparse: only what ZFS writes takes space
                f.truncate(log_size if self.layout.log and i == self.layout.data_disks else self.disk_size)
            drives += ["-drive", f"file={_opt(disk)},format=raw,if=virtio,aio=threads"]
        cpus = possible_cpu_args(self.possible_cpus, _manifest(img).get("kernel", ""), self.accel, QEMU)
        if self.accel == "kvm":
            accel = ["-accel", "kvm", "-cpu", "host" + cpus.cpu]
        else:
            accel = ["-accel", f"tcg,thread={self.tcg_thread},tb-size=512",
                     "-cpu", os.environ.get("ZFSOBS_KLAB_CPU", "max") + cpus.cpu]
        append = ("root=/dev/vda rw rootfstype=ext4 console=ttyS0 init=/sbin/zfsobs-init panic=-1 "
                  "loglevel=4 modprobe.blacklist=kvm,kvm_amd,kvm_intel" + cpus.append)
        smp = str(max(2, min(4, os.cpu_count() or 2))) + cpus.smp
        socks = {name: self.dir / f"{name}.sock" for name in STREAMS}
        shares = ["-virtfs", f"local,path={_opt(layouts)},mount_tag=zfsobs_layouts,security_model=none,"
                             "id=layouts"] if keep else []
        for i, d in enumerate(self.shares):
            shares += ["-virtfs", f"local,path={_opt(d)},mount_tag=zfsobs_share{i},security_model=none,"
                                  f"id=share{i}"]
        return [QEMU, *accel, *cpus.qemu, "-m", self.memory, "-smp", smp,
                "-nodefaults", "-display", "none", "-no-reboot", "-nic", "none",
                "-kernel", str(img / "vmlinuz"), "-initrd", str(img / "initrd.img"), "-append", append,
                # snapshot=on: the guest's writes go to a qemu temp file, the cached image stays pristine
                "-drive", f"file={_opt(img / 'root.img')},format=raw,if=virtio,snapshot=on,cache=unsafe",
                *drives,
                "-virtfs", f"local,path={_opt(ctl)},mount_tag=zfsobs_ctl,security_model=none,id=ctl",
                "-virtfs", f"local,path={_opt(PROJECT)},mount_tag=zfsobs_project,security_model=none,"
                           "readonly=on,id=project",
                *shares,
                "-chardev", f"socket,id=console,path={_opt(socks['console'])}", "-serial", "chardev:console",
                "-device", "virtio-serial-pci",
                "-chardev", f"socket,id=out,path={_opt(socks['stdout'])}",
                "-device", "virtserialport,chardev=out,name=org.zfsobs.stdout",
                "-chardev", f"socket,id=err,path={_opt(socks['stderr'])}",
                "-device", "virtserialport,chardev=err,name=org.zfsobs.stderr",
                "-chardev", f"socket,id=sig,path={_opt(socks['signal'])}",
                "-device", "virtserialport,chardev=sig,name=org.zfsobs.signal"]

    # ------------------------------------------------------------------ run
    def run(self) -> int:
        if shutil.which(QEMU) is None:
            raise ZfsobsError(f"{QEMU} not found; install it with: sudo {BUILDER} (installs qemu, builds the image)")
        img = ensure_image(flavour=self.flavour, distro=self.distro)
        t0 = time.monotonic()
        try:
            return self._run(img, t0)
        finally:
            self.stop()

    def _run(self, img: Path, t0: float) -> int:
        argv = self._prepare(img)
        listeners = {}
        for name in STREAMS:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(self.dir / f"{name}.sock"))
            s.listen(1)
            listeners[name] = s
            self._socks.append(s)
        print(f"zfsobs: kernel lab: booting {img.name} with {self.accel.upper()} ({self.accel_why}), "
              f"layout {self.layout.name}, pool {POOL}, workload {self.workload}, project at {PROJECT} "
              "(read-only)", file=sys.stderr)
        env = dict(os.environ, TMPDIR=str(self.dir))   # qemu's snapshot overlay lands in our temp dir
        with whole():      # a Ctrl-C inside Popen would leave a qemu that stop() never sees
            self.qemu = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                         preexec_fn=lambda: die_with_parent(signal.SIGKILL))
        deadline = t0 + self.timeout
        sel = selectors.DefaultSelector()
        for name, s in listeners.items():
            sel.register(s, selectors.EVENT_READ, ("listen", name))
        sel.register(self.qemu.stdout, selectors.EVENT_READ, ("qemu", None))
        sinks = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
        open_streams = 1
        while open_streams:
            # Ctrl-C or SIGTERM waits for the end of a step (at most its 1 s select), then goes to
            # CMD: raised mid-write of CMD's output it escaped the loop and powered the guest off
            try:
                with whole():
                    opened = self._step(sel, sinks, deadline)
            except (KeyboardInterrupt, Terminated) as exc:
                self._forward(exc)
                continue
            if opened is None:
                break
            open_streams += opened
        self.qemu.wait()
        for name, s in listeners.items():     # connected only as qemu ended: drain what it sent
            if s.fileno() != -1 and name != "signal":
                self._drain(s, sinks.get(name))
        self.timings["guest"] = time.monotonic() - t0
        boot = self.timings.get("guest_running")
        print(f"zfsobs: kernel lab: guest powered off after {self.timings['guest']:.0f} s"
              + (f" (command started {boot:.0f} s after boot)" if boot else ""), file=sys.stderr)
        return self._result()

    def _step(self, sel, sinks: dict, deadline: float) -> int | None:
        """One wait for the guest's sockets and what came: streams opened minus closed, None once
        CMD is done and only the guest's own shutdown is left."""
        now, opened = time.monotonic(), 0
        if now > deadline:
            raise ZfsobsError(f"lab --kernel: timed out after {self.timeout:g} s; guest powered off")
        if self._exited and now - self._exited > POWEROFF_GRACE:
            # CMD is done and its rc is in; the rest is the guest's own shutdown, which under
            # TCG on a busy host can take minutes (a CI run): nothing left in it to wait for
            self.qemu.terminate()
            return None
        if self._stopping and not self._exited and now - self._stopping > STOP_GRACE:
            raise ZfsobsError(f"lab --kernel: the command did not stop within {STOP_GRACE:g} s "
                              "of being asked; guest powered off")
        ready = sel.select(timeout=1.0)
        for key, _ in ready:
            kind, name = key.data
            if kind == "listen":
                conn, _ = key.fileobj.accept()
                self._socks.append(conn)
                sel.unregister(key.fileobj)
                key.fileobj.close()
                if name == "signal":          # ours to write to, never read
                    self._signal_conn = conn
                    continue
                sel.register(conn, selectors.EVENT_READ, ("stream", name))
                opened += 1
                continue
            data = os.read(key.fileobj.fileno(), 65536)
            if not data:
                sel.unregister(key.fileobj)
                key.fileobj.close()
                opened -= 1
            elif kind == "stream" and name in sinks:
                self._spoke = True
                sinks[name].write(data)
                sinks[name].flush()
            else:            # the guest console and qemu's own messages: kept out of CMD's stream
                self._console(data)
        return opened

    def _forward(self, exc: BaseException) -> None:
        """Ctrl-C or SIGTERM: pass it to CMD in the guest, so it ends as it would on a host (a record
        closes its capture, top restores the terminal). A second one, or no CMD yet, powers off."""
        sig = "INT" if isinstance(exc, KeyboardInterrupt) else "TERM"
        if self._stopping or self._signal_conn is None or not ("guest_running" in self.timings or self._spoke):
            raise exc
        try:
            self._signal_conn.sendall(sig.encode() + b"\n")
        except OSError:
            raise exc from None
        self._stopping = time.monotonic()
        print(f"zfsobs: kernel lab: SIG{sig} passed to the command in the guest "
              "(again to power off at once)", file=sys.stderr)

    def _drain(self, listener: socket.socket, sink) -> None:
        listener.setblocking(False)
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        finally:
            listener.close()
        with conn:
            conn.setblocking(True)
            while data := conn.recv(65536):
                if sink:
                    sink.write(data)
                    sink.flush()
                else:
                    self._console(data)

    def _console(self, data: bytes) -> None:
        if self.console:
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
        if self.console_log is not None and self._logged < CONSOLE_MAX:
            self.console_log.write(data[:CONSOLE_MAX - self._logged])
            self._logged += min(len(data), CONSOLE_MAX - self._logged)
        *lines, self._partial = (self._partial + data).split(b"\n")   # a read may end mid-line
        for line in lines:
            line = line.rstrip(b"\r")
            if line.strip():
                self.console_tail.append(line)
            if not self._panic and (panic := PANIC.search(line)):
                self._panic = panic[0][:160]
            m = re.search(rb"zfsobs-agent: \[([\d.]+)s\] (up|running|command exited)", line)
            if m and m.group(2) == b"command exited":
                self._exited = time.monotonic()
            elif m:
                self.timings["guest_" + m.group(2).decode()] = float(m.group(1))

    def _result(self) -> int:
        ctl = self.dir / "ctl"
        rc_file, setup_rc = ctl / "rc", ctl / "setup.rc"
        if rc_file.is_file():
            return int(rc_file.read_text().strip() or 1)
        if not self.console:
            sys.stderr.buffer.write(b"".join(l + b"\n" for l in self.console_tail))
        kept = self._keep_console()
        if setup_rc.is_file() and setup_rc.read_text().strip() != "0":
            log = (ctl / "setup.log").read_text(errors="replace").strip().splitlines()
            raise ZfsobsError(f"lab --kernel: pool setup in the guest failed: {log[-1] if log else '?'}{kept}")
        panic = f"the guest kernel failed: {self._panic.decode(errors='replace')}; " if self._panic else ""
        if self._spoke or "guest_running" in self.timings:
            raise ZfsobsError(f"lab --kernel: the command ran, but the guest ended before it exited "
                              f"({panic}qemu rc {self.qemu.returncode}; console tail above){kept}")
        raise ZfsobsError(f"lab --kernel: the guest ended without running the command "
                          f"({panic}qemu rc {self.qemu.returncode}; console tail above){kept}")

    def _keep_console(self) -> str:
        """A failed run's whole console, moved out of its directory (which stop() removes) into the
        cache's private consoles/ (the newest CONSOLES_KEPT): '; whole console: PATH', or ''."""
        if self.console_log is None:
            return ""
        self.console_log.close()
        self.console_log = None
        keep, _ = private_dir(cache_dir() / "consoles")
        if keep is None:
            return ""
        dest = keep / f"console-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        try:
            shutil.move(str(self.dir / "console.log"), dest)
            old = sorted(keep.glob("console-*.log"), key=lambda p: p.stat().st_mtime)[:-CONSOLES_KEPT]
            for path in old:
                path.unlink()
        except OSError:
            return ""
        return f"; whole console: {dest}"

    # ------------------------------------------------------------------ tear down
    def stop(self) -> None:
        """Power the guest off (it has nothing to save: its disks are temp files) and remove them."""
        if self.qemu is not None:
            stop(self.qemu, 10)
        if self.qemu is not None and self.qemu.stdout:
            self.qemu.stdout.close()
        for s in self._socks:
            s.close()
        self._socks = []
        if self.console_log is not None:
            self.console_log.close()
            self.console_log = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
