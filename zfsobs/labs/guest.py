"""The kernel lab's guest machine: its cached image (scripts/kernel-lab-image), the accelerator it runs
on, its data disks' layout and sizes, and the shell steps that load the module and create the pool."""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from zfsobs.errors import ZfsobsError

PROJECT = Path(__file__).resolve().parents[2]
BUILDER = PROJECT / "scripts" / "kernel-lab-image"
DEFAULT_CACHE = "/var/cache/zfsobs/kernel-lab"
POOL = "zfsobs_klab"
FLAVOURS = ("stock", "btf")     # zfs-dkms as Debian builds it (no module BTF), or with module BTF
# the Debian releases an image is built from (scripts/kernel-lab-image --distro), with what each holds
DISTROS = {"bookworm": "Debian 12: kernel 6.1, OpenZFS 2.1.11, bpftrace 0.17",
           "trixie": "Debian 13: kernel 6.12, OpenZFS 2.3.9, bpftrace 0.23",
           "trixie-backports": "Debian 13 with trixie-backports' OpenZFS (2.4.x) on its 6.12 kernel",
           "sid": "Debian sid: kernel 7.2, OpenZFS 2.4.4, bpftrace 0.27 and Oracle's DTrace 2.0.7"}
IMAGES = (("bookworm", "stock"), ("bookworm", "btf"), ("trixie", "stock"), ("trixie-backports", "stock"),
          ("sid", "stock"))
GUEST_LAYOUTS = "/var/cache/zfsobs/layouts"    # zfsobs/targets/layouts.py's cache, the host's cache_dir()/layouts
# a guest's memory, and per possible CPU it is given past its vCPUs (lab --kernel --possible-cpus): the
# kernel's per-CPU areas (~0.3 MiB a CPU at boot) and the default probes' per-CPU maps (~6.5 MiB a
# CPU, vdev_queue's 6 of it: docs/performance.md, "CPU count and memory")
GUEST_MIB, PER_CPU_MIB = 2048, 8


def guest_memory(possible_cpus: int | None) -> str:
    """qemu's -m for a guest with that many possible CPUs (None: its vCPUs only)."""
    return f"{GUEST_MIB + PER_CPU_MIB * (possible_cpus or 0)}M"


# Linux from 6.9 counts the firmware's disabled CPUs (qemu's -smp maxcpus) as hotpluggable only under
# a hypervisor it knows (arch/x86/kernel/acpi/boot.c, acpi_is_processor_usable), and TCG's CPUID
# signature is none it knows: under TCG the guest is made a VMware one (no hypervisor CPUID bit, an
# SMBIOS serial naming VMware, qemu's vmport answering the backdoor), which Linux detects. qemu 7.2
# under TCG has no x2APIC: APIC IDs, and so possible CPUs, stop at 255 there; qemu 10 has it, and
# past 255 the guest needs interrupt remapping (q35's intel-iommu) to use x2APIC IDs.
TCG_APIC_CPUS = 255
TCG_X2APIC_QEMU = (10, 0)       # the first qemu measured giving a TCG guest x2APIC (10.0.2)
VMWARE = ("-smbios", "type=1,serial=VMware-zfsobs-lab")


def qemu_binary() -> str:
    """The qemu the kernel lab runs: ZFSOBS_KLAB_QEMU (a newer one unpacked beside the host's, say),
    else the host's."""
    return os.environ.get("ZFSOBS_KLAB_QEMU") or "qemu-system-x86_64"


def tcg_thread() -> str:
    """TCG's threading: multi (a host thread per vCPU, the default) or single (ZFSOBS_KLAB_TCG_THREAD:
    the vCPUs take turns on one thread, so none runs code another is rewriting)."""
    mode = os.environ.get("ZFSOBS_KLAB_TCG_THREAD") or "multi"
    if mode not in ("multi", "single"):
        raise ZfsobsError(f"ZFSOBS_KLAB_TCG_THREAD={mode!r}: multi or single")
    return mode


def qemu_version(binary: str) -> tuple[int, ...]:
    """(major, minor) of `binary --version` ((0, 0) when it does not say)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    m = re.search(r"version (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


@dataclass(frozen=True)
class CpuArgs:
    append: str = ""            # kernel parameters
    smp: str = ""               # after -smp's vCPU count
    cpu: str = ""               # after -cpu's model
    qemu: tuple[str, ...] = ()  # further qemu arguments


def possible_cpu_args(possible_cpus: int | None, kernel: str, accel: str, qemu: str) -> CpuArgs:
    """What makes a guest running KERNEL (its release) report POSSIBLE_CPUS possible CPUs on its few
    vCPUs, under ACCEL and the qemu binary QEMU. Before Linux 6.9 the kernel parameter
    possible_cpus=N sets the count (up to NR_CPUS); from 6.9 it only lowers it, and the count is the
    firmware's list."""
    if not possible_cpus:
        return CpuArgs()
    if tuple(int(x) for x in re.findall(r"\d+", kernel)[:2]) < (6, 9):
        return CpuArgs(append=f" possible_cpus={possible_cpus}")
    if accel != "tcg":
        return CpuArgs(smp=f",maxcpus={possible_cpus}")
    if possible_cpus <= TCG_APIC_CPUS:
        return CpuArgs(smp=f",maxcpus={possible_cpus}", cpu=",hypervisor=off",
                       qemu=(*VMWARE, "-machine", "vmport=on"))
    version = qemu_version(qemu)
    if version < TCG_X2APIC_QEMU:
        raise ZfsobsError(f"lab --kernel: --possible-cpus {possible_cpus}: Linux {kernel} under qemu "
                          f"{'.'.join(map(str, version))}'s TCG (no x2APIC) takes at most {TCG_APIC_CPUS}; "
                          f"qemu {'.'.join(map(str, TCG_X2APIC_QEMU))} or later takes more (ZFSOBS_KLAB_QEMU)")
    return CpuArgs(smp=f",maxcpus={possible_cpus}", cpu=",hypervisor=off",
                   qemu=(*VMWARE, "-machine", "q35,vmport=on", "-device", "intel-iommu,intremap=on,eim=on"))


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


def recipe_key(script: Path = BUILDER, flavour: str = "stock", distro: str = "bookworm") -> str:
    """The image's cache key: the builder script's own sha256 with the flavour and the distro, as
    scripts/kernel-lab-image computes it."""
    try:
        tail = f"flavour {flavour}\ndistro {distro}\n".encode()
        return hashlib.sha256(script.read_bytes() + tail).hexdigest()[:16]
    except OSError as exc:
        raise ZfsobsError(f"cannot read the image recipe {script}: {exc.strerror}") from None


def cache_dir() -> Path:
    return Path(os.environ.get("ZFSOBS_KLAB_CACHE") or DEFAULT_CACHE)


def image_dir(key: str | None = None, flavour: str = "stock", distro: str = "bookworm") -> Path:
    if flavour not in FLAVOURS:
        raise ZfsobsError(f"no kernel lab image flavour {flavour!r} (have: {', '.join(FLAVOURS)})")
    if distro not in DISTROS:
        raise ZfsobsError(f"no kernel lab distro {distro!r} (have: {', '.join(DISTROS)})")
    if (distro, flavour) not in IMAGES:
        raise ZfsobsError(f"the kernel lab builds the {flavour} flavour for "
                          f"{', '.join(d for d, f in IMAGES if f == flavour)} only, not {distro}")
    return cache_dir() / f"{distro}-{flavour}-{key or recipe_key(flavour=flavour, distro=distro)}"


def builder_command(flavour: str = "stock", distro: str = "bookworm") -> list[str]:
    return [str(BUILDER)] + (["--distro", distro] if distro != "bookworm" else []) + \
        (["--btf"] if flavour == "btf" else [])


def images() -> list[dict]:
    """Every image this recipe builds, whether it is built, and what its manifest says it holds."""
    rows = []
    for distro, flavour in IMAGES:
        img = image_dir(flavour=flavour, distro=distro)
        row = {"distro": distro, "flavour": flavour, "dir": str(img), "built": (img / "complete").is_file(),
               "about": DISTROS[distro], "packages": {}}
        try:
            for line in (img / "manifest").read_text().splitlines():
                name, _, version = line.partition(" ")
                row["packages"][name] = version
        except OSError:
            pass
        rows.append(row)
    return rows


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


def ensure_image(build: bool = True, flavour: str = "stock", distro: str = "bookworm") -> Path:
    """The built image's directory; builds it first (a one-time ~5 min) when missing."""
    img = image_dir(flavour=flavour, distro=distro)
    if (img / "complete").is_file():
        return img
    if not BUILDER.is_file():
        raise ZfsobsError(f"the kernel lab needs a zfsobs source checkout ({BUILDER} is missing)")
    argv = builder_command(flavour, distro)
    builder = shlex.join(argv)
    if not build:
        raise ZfsobsError(f"no kernel lab image at {img}; build it with: sudo {builder}")
    if os.geteuid() != 0:
        raise ZfsobsError(f"no kernel lab image at {img}; build it (as root) with: sudo {builder}")
    print(f"zfsobs: kernel lab image not built yet: building it now with {builder} "
          "(once per recipe, ~5 min)", file=sys.stderr)
    res = subprocess.run(argv, stdout=sys.stderr, stdin=subprocess.DEVNULL)
    if res.returncode != 0 or not (img / "complete").is_file():
        raise ZfsobsError(f"building the kernel lab image failed (rc {res.returncode}); see the log above")
    return img


def parse_module_options(options: list[str]) -> list[tuple[str, str]]:
    """-o NAME=VALUE for the zfs module: given at load time, because some (zfs_vdev_cache_size) are
    read-only once it is loaded."""
    out = []
    for opt in options:
        m = re.fullmatch(r"([a-z][a-z0-9_]*)=([A-Za-z0-9_.:-]+)", opt)     # shell-safe as it is
        if not m:
            raise ZfsobsError(f"-o {opt!r}: use NAME=VALUE with a zfs module parameter, e.g. "
                              "zfs_vdev_cache_size=1048576")
        out.append((m.group(1), m.group(2)))
    return out


# Background fio workloads on an 8k-record dataset (a database's shape), started before CMD and left
# running until the guest powers off. primarycache=none makes every read reach the vdevs, including
# the indirect blocks that the vdev cache serves (it never caches level-0 data).
_FIO = (f"fio --name=zfsobs --directory=/{POOL}/work --filename=data --size=128m --bs=8k --ioengine=psync "
        "--time_based --runtime=1000000 --numjobs=2 --output=/dev/null")
WORKLOADS = {
    "mix": f"{_FIO} --rw=randrw --rwmixread=70 --fsync=4",     # 70/30 8k, like a vdbench OLTP run
    "sync-write": f"{_FIO} --rw=randwrite --fsync=1",          # every write a ZIL commit
    "random-read": f"{_FIO} --rw=randread",
    "none": "",
}


def parse_workload(name: str) -> str:
    if name not in WORKLOADS:
        raise ZfsobsError(f"no kernel lab workload {name!r} (have: {', '.join(WORKLOADS)})")
    return name


def setup_script(layout: Layout, options: list[tuple[str, str]] = (), workload: str = "none") -> str:
    """Load the module with the options (each checked: modprobe only warns about an unknown one),
    create the pool on the layout's disks and start the workload in the background."""
    start = []
    if WORKLOADS[workload]:
        start = [f"zfs create -o recordsize=8k -o compression=off -o primarycache=none {POOL}/work",
                 f"setsid {WORKLOADS[workload]} < /dev/null > /dev/null 2>&1 &"]
    params = "/sys/module/zfs/parameters"
    checks = [f'[ -e {params}/{n} ] || {{ echo "the zfs module has no parameter {n}"; exit 3; }}'
              for n, _ in options]
    return "\n".join([
        "set -ex",
        "modprobe zfs " + " ".join(f"{n}={v}" for n, v in options),
        *checks,
        "udevadm settle --timeout=60",
        f"zpool create -f -o ashift=12 -O mountpoint=/{POOL} {POOL} " + " ".join(layout.vdev_spec()),
        f"zpool status {POOL}",
        *start,
        "",
    ])
