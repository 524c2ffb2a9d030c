"""The kernel lab: OpenZFS's real kernel module in a throwaway QEMU guest (docs/kernel-lab.md).

`zfsobs lab --kernel -- CMD ...` boots the cached image (scripts/kernel-lab-image), gives it sparse
data disks, creates pool zfsobs_klab in the guest, runs CMD there with the project mounted read-only
at its host path, streams CMD's stdout/stderr back and returns its exit status. The guest is always
powered off and every temp file removed, whatever ends the run.
"""
from __future__ import annotations

import collections
import hashlib
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
from dataclasses import dataclass
from pathlib import Path

from zfsobs.errors import ZfsobsError
from zfsobs.procs import die_with_parent

PROJECT = Path(__file__).resolve().parent.parent
BUILDER = PROJECT / "scripts" / "kernel-lab-image"
AGENT = PROJECT / "scripts" / "kernel-lab-guest"
DEFAULT_CACHE = "/var/cache/zfsobs/kernel-lab"
POOL = "zfsobs_klab"
QEMU = "qemu-system-x86_64"
DEFAULT_TIMEOUT = 3600.0
TEMP_PREFIX = "zfsobs-klab-"


@dataclass(frozen=True)
class Layout:
    name: str
    data_disks: int
    log: bool

    def vdev_spec(self) -> list[str]:
        """zpool create's vdev arguments; data disks are vdb, vdc, ... after the root disk vda."""
        disks = [f"/dev/vd{chr(ord('b') + i)}" for i in range(self.data_disks + self.log)]
        spec = (["mirror"] if self.data_disks > 1 else []) + disks[: self.data_disks]
        return spec + (["log", disks[-1]] if self.log else [])


LAYOUTS = {
    "mirror-log": Layout("mirror-log", 2, True),
    "mirror": Layout("mirror", 2, False),
    "single": Layout("single", 1, False),
}


def parse_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ZfsobsError(f"no layout {name!r} (have: {', '.join(LAYOUTS)})") from None


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MIN_DISK = 128 << 20    # ZFS refuses vdevs under 64 MiB; a log device gets half a data disk


def parse_size(text: str) -> int:
    """'2G', '512M', '1.5G', bytes: a disk size in bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ZfsobsError(f"not a size: {text!r} (e.g. 2G, 512M)")
    size = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if size < MIN_DISK:
        raise ZfsobsError(f"disk size {text!r} is too small (at least {MIN_DISK >> 20}M)")
    return size


def recipe_key(script: Path = BUILDER) -> str:
    """The image's cache key: the builder script's own sha256, as scripts/kernel-lab-image computes it."""
    try:
        return hashlib.sha256(script.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise ZfsobsError(f"cannot read the image recipe {script}: {exc.strerror}") from None


def image_dir(key: str | None = None) -> Path:
    cache = Path(os.environ.get("ZFSOBS_KLAB_CACHE") or DEFAULT_CACHE)
    return cache / f"bookworm-{key or recipe_key()}"


def probe_accel() -> tuple[str, str]:
    """('kvm' | 'tcg', why). KVM only when it can really run a stock guest: /dev/kvm usable, the CPU
    has VMX/SVM and the KVM module is not the PVM flavour (which emulates a stock kernel ~1000x slower
    and dies on some instructions). ZFSOBS_KLAB_ACCEL=kvm|tcg overrides."""
    forced = os.environ.get("ZFSOBS_KLAB_ACCEL", "")
    if forced:
        if forced not in ("kvm", "tcg"):
            raise ZfsobsError(f"ZFSOBS_KLAB_ACCEL={forced!r}: use kvm or tcg")
        return forced, "ZFSOBS_KLAB_ACCEL"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg", "no usable /dev/kvm"
    if os.path.isdir("/sys/module/kvm_pvm"):
        return "tcg", "/dev/kvm is the PVM flavour (no VMX), useless for a stock guest"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    if not re.search(r"^flags\s*:.*\b(vmx|svm)\b", flags, re.MULTILINE):
        return "tcg", "the CPU shows no VMX/SVM"
    if not (os.path.isdir("/sys/module/kvm_intel") or os.path.isdir("/sys/module/kvm_amd")):
        return "tcg", "neither kvm_intel nor kvm_amd is loaded"
    return "kvm", "/dev/kvm with hardware virtualisation"


def ensure_image(build: bool = True) -> Path:
    """The built image's directory; builds it first (a one-time ~10 min) when missing."""
    img = image_dir()
    if (img / "complete").is_file():
        return img
    if not BUILDER.is_file():
        raise ZfsobsError(f"the kernel lab needs a zfsobs source checkout ({BUILDER} is missing)")
    if not build:
        raise ZfsobsError(f"no kernel lab image at {img}; build it with: sudo {BUILDER}")
    if os.geteuid() != 0:
        raise ZfsobsError(f"no kernel lab image at {img}; build it (as root) with: sudo {BUILDER}")
    print(f"zfsobs: kernel lab image not built yet: building it now with {BUILDER} "
          "(once per recipe, ~10 min)", file=sys.stderr)
    res = subprocess.run([str(BUILDER)], stdout=sys.stderr, stdin=subprocess.DEVNULL)
    if res.returncode != 0 or not (img / "complete").is_file():
        raise ZfsobsError(f"building the kernel lab image failed (rc {res.returncode}); see the log above")
    return img


def sweep_stale(tmp: Path) -> None:
    """Remove temp dirs left by a run that was SIGKILLed (its qemu died with it: PDEATHSIG)."""
    for d in tmp.glob(TEMP_PREFIX + "*"):
        m = re.match(re.escape(TEMP_PREFIX) + r"(\d+)-", d.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            shutil.rmtree(d, ignore_errors=True)


def _opt(path: Path) -> str:
    """A path inside a qemu option value: a comma would end the value, so qemu wants it doubled."""
    return str(path).replace(",", ",,")


def setup_script(layout: Layout) -> str:
    return "\n".join([
        "set -ex",
        "modprobe zfs",
        "udevadm settle --timeout=60",
        f"zpool create -f -o ashift=12 -O mountpoint=/{POOL} {POOL} " + " ".join(layout.vdev_spec()),
        f"zpool status {POOL}",
        "",
    ])


class KernelLab:
    """One guest run. run() returns CMD's exit status; raises ZfsobsError when the guest fails."""

    def __init__(self, command: list[str], layout: str = "mirror-log", disk_size: str = "2G",
                 timeout: float = DEFAULT_TIMEOUT, console: bool = False, memory: str = "2G"):
        if not command:
            raise ZfsobsError("lab --kernel: give the command to run in the guest: -- CMD ...")
        self.command = command
        self.layout = parse_layout(layout)
        self.disk_size = parse_size(disk_size)
        self.timeout = timeout
        self.console = console
        self.memory = memory
        self.accel, self.accel_why = probe_accel()
        self.dir: Path | None = None
        self.qemu: subprocess.Popen | None = None
        self.console_tail: collections.deque[bytes] = collections.deque(maxlen=40)
        self.timings: dict[str, float] = {}
        self._partial = b""
        self._socks: list[socket.socket] = []

    # ------------------------------------------------------------------ set up
    def _prepare(self, img: Path) -> list[str]:
        tmp = Path(os.environ.get("ZFSOBS_KLAB_TMP") or "/var/tmp")
        sweep_stale(tmp)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=tmp))
        ctl = self.dir / "ctl"
        ctl.mkdir()
        shutil.copy(AGENT, ctl / "agent.sh")
        (ctl / "project").write_text(str(PROJECT))
        (ctl / "setup.sh").write_text(setup_script(self.layout))
        (ctl / "argv").write_bytes(b"".join(a.encode() + b"\0" for a in self.command))
        drives = []
        log_size = min(1 << 30, self.disk_size // 2)
        for i in range(self.layout.data_disks + self.layout.log):
            disk = self.dir / f"disk{i}.img"
            with open(disk, "wb") as f:      # sparse: only what ZFS writes takes space
                f.truncate(log_size if self.layout.log and i == self.layout.data_disks else self.disk_size)
            drives += ["-drive", f"file={_opt(disk)},format=raw,if=virtio,aio=threads"]
        if self.accel == "kvm":
            accel = ["-accel", "kvm", "-cpu", "host"]
        else:
            accel = ["-accel", "tcg,thread=multi,tb-size=512", "-cpu", "max"]
        append = ("root=/dev/vda rw rootfstype=ext4 console=ttyS0 init=/sbin/zfsobs-init panic=-1 "
                  "loglevel=4 modprobe.blacklist=kvm,kvm_amd,kvm_intel")
        socks = {name: self.dir / f"{name}.sock" for name in ("console", "stdout", "stderr")}
        return [QEMU, *accel, "-m", self.memory, "-smp", str(max(2, min(4, os.cpu_count() or 2))),
                "-nodefaults", "-display", "none", "-no-reboot", "-nic", "none",
                "-kernel", str(img / "vmlinuz"), "-initrd", str(img / "initrd.img"), "-append", append,
                # snapshot=on: the guest's writes go to a qemu temp file, the cached image stays pristine
                "-drive", f"file={_opt(img / 'root.img')},format=raw,if=virtio,snapshot=on,cache=unsafe",
                *drives,
                "-virtfs", f"local,path={_opt(ctl)},mount_tag=zfsobs_ctl,security_model=none,id=ctl",
                "-virtfs", f"local,path={_opt(PROJECT)},mount_tag=zfsobs_project,security_model=none,"
                           "readonly=on,id=project",
                "-chardev", f"socket,id=console,path={_opt(socks['console'])}", "-serial", "chardev:console",
                "-device", "virtio-serial-pci",
                "-chardev", f"socket,id=out,path={_opt(socks['stdout'])}",
                "-device", "virtserialport,chardev=out,name=org.zfsobs.stdout",
                "-chardev", f"socket,id=err,path={_opt(socks['stderr'])}",
                "-device", "virtserialport,chardev=err,name=org.zfsobs.stderr"]

    # ------------------------------------------------------------------ run
    def run(self) -> int:
        if shutil.which(QEMU) is None:
            raise ZfsobsError(f"{QEMU} not found; install it with: sudo {BUILDER} (installs qemu, builds the image)")
        img = ensure_image()
        t0 = time.monotonic()
        try:
            return self._run(img, t0)
        finally:
            self.stop()

    def _run(self, img: Path, t0: float) -> int:
        argv = self._prepare(img)
        listeners = {}
        for name in ("console", "stdout", "stderr"):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(self.dir / f"{name}.sock"))
            s.listen(1)
            listeners[name] = s
            self._socks.append(s)
        print(f"zfsobs: kernel lab: booting {img.name} with {self.accel.upper()} ({self.accel_why}), "
              f"layout {self.layout.name}, pool {POOL}, project at {PROJECT} (read-only)", file=sys.stderr)
        env = dict(os.environ, TMPDIR=str(self.dir))   # qemu's snapshot overlay lands in our temp dir
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
            if time.monotonic() > deadline:
                raise ZfsobsError(f"lab --kernel: timed out after {self.timeout:g} s; guest powered off")
            for key, _ in sel.select(timeout=1.0):
                kind, name = key.data
                if kind == "listen":
                    conn, _ = key.fileobj.accept()
                    self._socks.append(conn)
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    sel.register(conn, selectors.EVENT_READ, ("stream", name))
                    open_streams += 1
                    continue
                data = os.read(key.fileobj.fileno(), 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                    open_streams -= 1
                elif kind == "stream" and name in sinks:
                    sinks[name].write(data)
                    sinks[name].flush()
                else:            # the guest console and qemu's own messages: kept out of CMD's stream
                    self._console(data)
        self.qemu.wait()
        for name, s in listeners.items():     # connected only as qemu ended: drain what it sent
            if s.fileno() != -1:
                self._drain(s, sinks.get(name))
        self.timings["guest"] = time.monotonic() - t0
        boot = self.timings.get("guest_running")
        print(f"zfsobs: kernel lab: guest powered off after {self.timings['guest']:.0f} s"
              + (f" (command started {boot:.0f} s after boot)" if boot else ""), file=sys.stderr)
        return self._result()

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
        *lines, self._partial = (self._partial + data).split(b"\n")   # a read may end mid-line
        for line in lines:
            line = line.rstrip(b"\r")
            if line.strip():
                self.console_tail.append(line)
            m = re.search(rb"zfsobs-agent: \[([\d.]+)s\] (up|running)", line)
            if m:
                self.timings["guest_" + m.group(2).decode()] = float(m.group(1))

    def _result(self) -> int:
        ctl = self.dir / "ctl"
        rc_file, setup_rc = ctl / "rc", ctl / "setup.rc"
        if rc_file.is_file():
            return int(rc_file.read_text().strip() or 1)
        if not self.console:
            sys.stderr.buffer.write(b"".join(l + b"\n" for l in self.console_tail))
        if setup_rc.is_file() and setup_rc.read_text().strip() != "0":
            log = (ctl / "setup.log").read_text(errors="replace").strip().splitlines()
            raise ZfsobsError(f"lab --kernel: pool setup in the guest failed: {log[-1] if log else '?'}")
        raise ZfsobsError(f"lab --kernel: the guest ended without running the command "
                          f"(qemu rc {self.qemu.returncode}; console tail above)")

    # ------------------------------------------------------------------ tear down
    def stop(self) -> None:
        """Power the guest off (it has nothing to save: its disks are temp files) and remove them."""
        if self.qemu is not None and self.qemu.poll() is None:
            self.qemu.terminate()
            try:
                self.qemu.wait(10)
            except subprocess.TimeoutExpired:
                self.qemu.kill()
                self.qemu.wait()
        if self.qemu is not None and self.qemu.stdout:
            self.qemu.stdout.close()
        for s in self._socks:
            s.close()
        self._socks = []
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
