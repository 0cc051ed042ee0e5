#!/usr/bin/python3
"""Node-shaped benchmark: the default hpcnode_exporter next to node_exporter's defaults.

Builds the shape of a real GPU/HCA node and scrapes both exporters on it, interleaved:
- the large node of tests/fixtures/large_node.sh (8 single-port HCAs with every hw_counter,
  150 loaded modules), its PCI devices replaced by 256 in 64 IOMMU groups (8 T4s on vfio-pci,
  8 ConnectX-6 HCAs, 240 devices of no interest to the exporter), the expected modules loaded
  and their modules.dep closure as real signed files (Debian's, from the kernel lab's cache);
  its running kernel renamed to this host's release, which the eBPF probes load into;
- 2000 real processes holding 100 descriptors each (`cat` with /dev/null open), and 4 processes
  named as QEMU holding two GPUs' vfio group nodes each: character devices made at /dev/vfio/N
  in a mount namespace of the bench's own, numbered as the tree's class/vfio/N/dev says;
- a procfs for both exporters that is the running kernel's (bind mounts of every /proc entry)
  with the node's files over it (modules, cmdline, osrelease, tainted);
- lines written to /dev/kmsg at a steady trickle while it scrapes.

Prints CPU per scrape, median and p99 latency, peak RSS, samples and series per scrape, the
series and scrape time per collector, and the load average. Needs root (mounts, BPF).
Standard library only; a benchmark, not a test. See tests/bench/README.md ("Node-shaped").
"""

import argparse
import ctypes
import glob
import os
import re
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scrape_bench  # noqa: E402  (the process wrapper)
import pci_bench  # noqa: E402  (its pci_generate: the fixture device builders)

pci_generate = pci_bench.pci_generate
REPO = scrape_bench.REPO
FIXTURES = os.path.join(REPO, "tests", "fixtures")

# What a GPU/HCA node expects loaded (docs/configuration.md's example, without nvidia: its GPUs
# are for VMs, and the typical node's command line blacklists nvidia).
EXPECTED_MODULES = ["mlx5_core", "mlx5_ib", "ib_uverbs", "rdma_ucm", "ib_ipoib", "vfio_pci"]
# /proc/modules lines of the expected modules and vfio's that the large node lacks, newest
# first; vfio's count is set from the VMs' holds.
LOADED_LINES = [
    "vfio_pci 16384 0 - Live 0x0000000000000000",
    "vfio_pci_core 86016 1 vfio_pci, Live 0x0000000000000000",
    "vfio_iommu_type1 49152 {vms} - Live 0x0000000000000000",
    "irqbypass 12288 1 vfio_pci_core, Live 0x0000000000000000",
    "vfio 69632 {vfio_refs} vfio_pci_core,vfio_iommu_type1, Live 0x0000000000000000",
    "rdma_ucm 32768 0 - Live 0x0000000000000000",
    "rdma_cm 147456 1 rdma_ucm, Live 0x0000000000000000",
    "iw_cm 61440 1 rdma_cm, Live 0x0000000000000000",
    "configfs 61440 2 rdma_cm, Live 0x0000000000000000",
    "mlx5_ib 495616 0 - Live 0x0000000000000000",
]
# The modules linked against vfio (its holders/): each holds one reference.
VFIO_HOLDER_MODULES = ["vfio_iommu_type1", "vfio_pci_core"]

GPUS, HCAS, PCI_DEVICES, IOMMU_GROUPS = 8, 8, 256, 64
# Devices of no interest to the pci collector (listed, not read): bridges, NVMe, Ethernet,
# USB, SATA, a system peripheral without a driver. (driver, vendor, device, class)
OTHER_DEVICES = [
    ("pcieport", 0x8086, 0x347a, 0x060400),
    ("nvme", 0x144d, 0xa80a, 0x010802),
    ("ice", 0x8086, 0x1593, 0x020000),
    ("pcieport", 0x8086, 0x347b, 0x060400),
    ("xhci_hcd", 0x8086, 0x1bcd, 0x0c0330),
    ("ahci", 0x8086, 0x1bd2, 0x010601),
    (None, 0x8086, 0x09a2, 0x088000),
]
# Character devices whose numbers stand in for the GPUs' vfio group nodes: any driver this host
# has that lets a process open it and hold it doing nothing. Only a descriptor whose link reads
# /dev/vfio/<N> is looked at by the exporter, so these numbers elsewhere do not count.
STAND_IN_NODES = ["/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/null",
                  "/dev/fuse", "/dev/loop-control", "/dev/hwrng"]
# A process QEMU by its command line (the exporter takes argv[0]'s name): holds its group nodes
# and waits for the bench to close its stdin.
VM_PROGRAM = ("import os, sys\n"
              "held = [os.open(path, os.O_RDONLY) for path in sys.argv[1].split(',')]\n"
              "os.read(0, 1)\n")

# ---------------------------------------------------------------------------------------------
# mounts (ctypes: Python 3.11 has no os.unshare)

LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MNT_DETACH = 2


def _bytes(text):
    return None if text is None else os.fsencode(text)


def mount(source, target, fstype=None, flags=0, data=None):
    rc = LIBC.mount(_bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags),
                    _bytes(data))
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "mount %s on %s: %s" % (source, target, os.strerror(errno)))


def unmount(target):
    """`target` and every mount below it, at once (lazily: a process still in it keeps it)."""
    if LIBC.umount2(_bytes(target), MNT_DETACH) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "umount %s: %s" % (target, os.strerror(errno)))


def private_mount_namespace():
    """This process and its children in a mount namespace of their own, nothing propagated
    back: every mount below is gone when the last of them exits."""
    if LIBC.unshare(CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "unshare(CLONE_NEWNS): %s" % os.strerror(errno))
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def merged_procfs(tree_proc, dest):
    """`dest`: the node's proc files (tree_proc) over the running kernel's /proc, every entry
    the tree lacks bind-mounted from /proc (its processes as they are now, and what node_exporter
    reads: stat, meminfo, net, ...). `/proc/self` is left out: neither exporter reads itself
    through --path.procfs. `dest` is a tmpfs of its own, so that one unmount takes it all back.
    Returns (mounts, failures)."""
    os.mkdir(dest)
    mount("tmpfs", dest, "tmpfs", 0, "mode=0755")
    shutil.copytree(tree_proc, dest, symlinks=True, dirs_exist_ok=True)
    done = [0, 0]

    def merge(real, into):
        try:
            names = os.listdir(real)
        except OSError:
            return
        for name in names:
            if name in ("self", "thread-self"):
                continue
            source, target = os.path.join(real, name), os.path.join(into, name)
            if os.path.lexists(target):
                if os.path.isdir(target) and not os.path.islink(target) and \
                        os.path.isdir(source) and not os.path.islink(source):
                    merge(source, target)
                continue
            # /proc/net -> self/net: the bench's own, in the network namespace the exporters share.
            source = os.path.realpath(source)
            try:
                if os.path.isdir(source):
                    os.mkdir(target)
                else:
                    open(target, "w").close()
                mount(source, target, None, MS_BIND)
                done[0] += 1
            except OSError:
                done[1] += 1  # a process that exited meanwhile

    merge("/proc", dest)
    return tuple(done)


def vfio_dev_nodes(workdir, groups):
    """/dev/vfio/<group> for each group, and /dev/vfio/vfio, in an overlay on /dev that only
    this mount namespace sees. `groups`: {group: (major, minor)}."""
    upper, work = os.path.join(workdir, "dev-upper"), os.path.join(workdir, "dev-work")
    os.mkdir(upper)
    os.mkdir(work)
    mount("overlay", "/dev", "overlay", 0,
          "lowerdir=/dev,upperdir=%s,workdir=%s" % (upper, work))
    os.mkdir("/dev/vfio")
    os.mknod("/dev/vfio/vfio", stat.S_IFCHR | 0o600, os.stat("/dev/null").st_rdev)
    for group, (major, minor) in groups.items():
        os.mknod("/dev/vfio/%d" % group, stat.S_IFCHR | 0o600, os.makedev(major, minor))


def stand_in_numbers(count):
    """`count` (major, minor) of character devices that open, for the GPUs' group nodes."""
    numbers = []
    for path in STAND_IN_NODES:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        os.close(fd)
        rdev = os.stat(path).st_rdev
        numbers.append((os.major(rdev), os.minor(rdev)))
    if len(numbers) < count:
        raise RuntimeError("only %d character devices to stand in for %d vfio group nodes"
                           % (len(numbers), count))
    return numbers[:count]


# ---------------------------------------------------------------------------------------------
# the node's tree


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def pci_devices(root, release, cmdline, group_numbers):
    """The large node's PCI devices replaced by PCI_DEVICES in IOMMU_GROUPS groups: GPUs (T4,
    vfio-pci) and HCAs (ConnectX-6, mlx5_core) in a group each, the other devices five to a
    group. `group_numbers`: the numbers of the GPUs' group nodes, in GPU order."""
    sysfs = os.path.join(root, "sys")
    for path in ("bus/pci", "devices/pci0000:00", "kernel/iommu_groups", "class/vfio",
                 "devices/virtual/vfio"):
        shutil.rmtree(os.path.join(sysfs, path), ignore_errors=True)
    pci_generate.host_common(root, cmdline + " intel_iommu=on iommu=pt", iommu=True,
                             modules=["vfio", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1",
                                      "mlx5_core"], release=release)
    others = PCI_DEVICES - GPUS - HCAS
    per_group = others // (IOMMU_GROUPS - GPUS - HCAS)
    for i in range(PCI_DEVICES):
        bus = 1 + i
        domain = bus // 256
        address = "%04x:%02x:00.0" % (domain, bus % 256)
        root_port = "%04x:%02x:%02x.0" % (domain, 0, 1 + (bus % 256) // 8)
        numa = {"numa_node": i * 2 // PCI_DEVICES}
        if i < GPUS:
            dev = pci_generate.t4(address, iommu_group=i, **numa)
        elif i < GPUS + HCAS:
            dev = pci_generate.connectx(address, 0x101b, 0x0007, 0x020700, iommu_group=i, **numa)
        else:
            k = i - GPUS - HCAS
            driver, vendor, device, cls = OTHER_DEVICES[k % len(OTHER_DEVICES)]
            dev = {
                "address": address, "vendor": vendor, "device": device,
                "subsystem_vendor": vendor, "subsystem_device": 0x0000, "class": cls,
                "interrupt_line": 0x0b, "irq": 32 + k,
                "command": pci_generate.COMMAND_MEMORY | pci_generate.COMMAND_BUS_MASTER,
                "power_state": "D0", "driver": driver, "iommu_group": GPUS + HCAS + k // per_group,
                "bars": {0: (0x90000000 + (k << 20), 1 << 20, pci_generate.MEM32)},
                "capabilities": [(0x40, "pm", {"d_state": 0}),
                                 (0x70, "pcie", {"max": (16.0, 4), "current": (16.0, 4)})],
            }
            dev.update(numa)
        pci_generate.add_device(sysfs, root_port, dev, 4096)
    # The GPUs' group nodes, numbered as the stand-ins made at /dev/vfio/<group> are.
    for group, (major, minor) in enumerate(group_numbers):
        _write(os.path.join(sysfs, "devices/virtual/vfio/%d/dev" % group),
               "%d:%d\n" % (major, minor))


def vfio_module(root, vms, gpus_per_vm):
    """vfio's reference count as on a host where `vms` VMs run: one per open container, group
    and device file of theirs, one per module linked against it. Returns the count."""
    module = os.path.join(root, "sys/module/vfio")
    refs = len(VFIO_HOLDER_MODULES) + vms * (1 + 2 * gpus_per_vm)
    _write(os.path.join(module, "refcnt"), "%d\n" % refs)
    os.makedirs(os.path.join(module, "holders"), exist_ok=True)
    for holder in VFIO_HOLDER_MODULES:
        os.symlink("../../%s" % holder, os.path.join(module, "holders", holder))
    return refs


def loaded_modules(root, vms, vfio_refs):
    """The expected modules and vfio's loaded: their lines on top of /proc/modules in place of
    as many of the large node's made-up ones, so the count stays."""
    path = os.path.join(root, "proc/modules")
    lines = _read(path).splitlines()
    present = {line.split()[0] for line in lines}
    added = [line.format(vms=vms, vfio_refs=vfio_refs) for line in LOADED_LINES
             if line.split()[0] not in present]
    fillers = [line for line in lines if line.startswith("node_module_")]
    drop = set(fillers[:len(added)])
    _write(path, "\n".join(added + [line for line in lines if line not in drop]) + "\n")


def module_files(root, release, lab_cache):
    """modules.dep of a real kernel (Debian's, from the kernel lab's cache) and the signed files
    of the expected modules' closure, under the node's release. Returns (files, source) or
    None without the cache."""
    deps = sorted(glob.glob(os.path.join(lab_cache, "kernel-*/lib/modules/*/modules.dep")))
    if not deps:
        return None
    source = os.path.dirname(deps[-1])
    dest = os.path.join(root, "lib/modules", release)
    shutil.copy(os.path.join(source, "modules.dep"), dest)
    by_name = {}
    for line in _read(os.path.join(source, "modules.dep")).splitlines():
        file, _, needs = line.partition(":")
        name = os.path.basename(file).split(".ko")[0].replace("-", "_")
        by_name[name] = [file.strip()] + needs.split()
    files = sorted({f for module in EXPECTED_MODULES for f in by_name.get(module, [])})
    for file in files:
        os.makedirs(os.path.dirname(os.path.join(dest, file)), exist_ok=True)
        shutil.copy(os.path.join(source, file), os.path.join(dest, file))
    return files, source


def running_release(root, old, new):
    """The node's running kernel renamed to this host's: the ebpf collector takes the release
    from --path.procfs to choose its hooks (printk:console only from 5.19) while its programs
    load into this kernel. Its modules, headers, boot files and their links follow."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        if os.path.relpath(dirpath, root).split(os.sep)[0] == "sys":
            continue
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) and old in os.readlink(path):
                target = os.readlink(path).replace(old, new)
                os.unlink(path)
                os.symlink(target, path)
            if old in name:
                os.rename(path, os.path.join(dirpath, name.replace(old, new)))
    for name in ("proc/cmdline", "proc/sys/kernel/osrelease"):
        path = os.path.join(root, name)
        _write(path, _read(path).replace(old, new))


def build_node(workdir, args, group_numbers):
    root = os.path.join(workdir, "root")
    subprocess.run([os.path.join(FIXTURES, "large_node.sh"), root, str(args.modules),
                    str(HCAS)], check=True, stdout=subprocess.DEVNULL)
    release = os.uname().release
    running_release(root, _read(os.path.join(root, "proc/sys/kernel/osrelease")).strip(), release)
    cmdline = _read(os.path.join(root, "proc/cmdline")).strip()
    pci_devices(root, release, cmdline, group_numbers)
    refs = vfio_module(root, args.vms, GPUS // max(args.vms, 1))
    loaded_modules(root, args.vms, refs)
    files = module_files(root, release, args.lab_cache)
    return root, release, files


# ---------------------------------------------------------------------------------------------
# processes on the node


def _inheritable(fd):
    try:
        return os.get_inheritable(fd)
    except OSError:
        return False  # the listing's own descriptor, closed since


class Holders:
    """`count` processes (`cat`, reading a pipe the bench holds) with `fds` descriptors each
    (stdin, and /dev/null for the rest), and the VMs: all exit when the pipe closes."""

    def __init__(self, count, fds, vms, groups):
        self.pids = []
        self.read_end, self.write_end = os.pipe()
        null = [os.open("/dev/null", os.O_RDONLY) for _ in range(fds - 1)]
        try:
            cat = shutil.which("cat")
            actions = [(os.POSIX_SPAWN_DUP2, self.read_end, 0),
                       (os.POSIX_SPAWN_DUP2, null[0], 1), (os.POSIX_SPAWN_DUP2, null[1], 2)]
            for fd in null[2:]:
                os.set_inheritable(fd, True)
            # Whatever else this process was given that is inheritable (its caller's pipes).
            keep = set(null[2:]) | {0, 1, 2}
            actions += [(os.POSIX_SPAWN_CLOSE, int(fd)) for fd in os.listdir("/proc/self/fd")
                        if int(fd) not in keep and _inheritable(int(fd))]
            for _ in range(count):
                self.pids.append(os.posix_spawn(cat, ["cat"], os.environ, file_actions=actions))
        finally:
            for fd in null:
                os.close(fd)
        per_vm = len(groups) // max(vms, 1)
        self.vms = []
        for vm in range(vms):
            nodes = ["/dev/vfio/vfio"] + ["/dev/vfio/%d" % g for g in
                                          groups[vm * per_vm:(vm + 1) * per_vm]]
            self.vms.append(subprocess.Popen(
                ["qemu-system-x86_64", "-c", VM_PROGRAM, ",".join(nodes),
                 "-name", "guest=instance-%08x,debug-threads=on" % (0x2a + vm),
                 "-uuid", str(uuid.UUID(int=0x8f0c6a3e5b0e4f6b9d2a1c3e5f7a9b00 + vm))],
                executable=sys.executable, stdin=self.read_end, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))

    def stop(self):
        if self.write_end is not None:
            os.close(self.write_end)
            self.write_end = None
        deadline = time.monotonic() + 20
        for pid in self.pids:
            try:
                while os.waitpid(pid, os.WNOHANG) == (0, 0):
                    if time.monotonic() > deadline:
                        os.kill(pid, 9)
                    time.sleep(0.01)
            except ChildProcessError:
                pass
        for vm in self.vms:
            try:
                vm.wait(timeout=5)
            except subprocess.TimeoutExpired:
                vm.kill()
                vm.wait()


class KmsgTrickle(threading.Thread):
    """`rate` lines a second to /dev/kmsg (one open per line: the per-open rate limit), neutral
    text, until stopped."""

    def __init__(self, rate):
        super().__init__(daemon=True)
        self.rate, self.lines, self.stopping = rate, 0, threading.Event()

    def run(self):
        while not self.stopping.wait(1.0 / self.rate):
            try:
                with open("/dev/kmsg", "w") as kmsg:
                    kmsg.write("hpcnode node bench line %d\n" % self.lines)
                self.lines += 1
            except OSError:
                return


def descriptors_in(procfs):
    """(processes, open descriptors) under a procfs."""
    processes = fds = 0
    for name in os.listdir(procfs):
        if name.isdigit():
            try:
                fds += len(os.listdir(os.path.join(procfs, name, "fd")))
                processes += 1
            except OSError:
                pass
    return processes, fds


# ---------------------------------------------------------------------------------------------
# the exposition


def metric_collectors():
    """Metric name -> collector, from METRICS.md's sections (`## ... (`name` collector ...`);
    the exporter's own and the web server's are `exporter`."""
    owner, collectors = "exporter", {}
    for line in _read(os.path.join(REPO, "METRICS.md")).splitlines():
        if line.startswith("## "):
            m = re.search(r"\(`(\w+)` collector", line)
            owner = m.group(1) if m else "exporter"
        m = re.match(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \|", line)
        if m:
            collectors[m.group(1)] = owner
    return collectors


def series_of(body):
    """The distinct series of an exposition (name and labels), and its sample count."""
    samples, series = 0, set()
    for line in body.decode("utf-8", "replace").splitlines():
        if line and not line.startswith("#"):
            samples += 1
            series.add(line.rsplit(" ", 1)[0])
    return samples, series


def by_group(series, group):
    counts = {}
    for s in series:
        key = group(s.split("{", 1)[0])
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def framework_pattern(prefix, metric):
    """`<prefix>_scrape_collector_<metric>{collector="..."} value`, for either exporter."""
    return re.compile(rb'^' + prefix + rb'_scrape_collector_' + metric
                      + rb'\{collector="([^"]+)"\} (\S+)$', re.M)


DURATION = {"hpcnode": framework_pattern(b"hpcnode", b"duration_seconds"),
            "node_exporter": framework_pattern(b"node", b"duration_seconds")}
SUCCESS = {"hpcnode": framework_pattern(b"hpcnode", b"success"),
           "node_exporter": framework_pattern(b"node", b"success")}


def kind(label):
    return "node_exporter" if label == "node_exporter" else "hpcnode"


def failed_collectors(label, body):
    return sorted(c.decode() for c, v in SUCCESS[kind(label)].findall(body) if float(v) != 1)


def vfio_check(body):
    text = body.decode("utf-8", "replace")
    held = len(re.findall(r'^hpcnode_pci_vfio_device_holders\{[^}]*\} [1-9]', text, re.M))
    guests = set(re.findall(r'^hpcnode_pci_vfio_holder_info\{[^}]*guest="([^"]+)"', text, re.M))
    complete = re.search(r'^hpcnode_pci_vfio_holder_scan_complete (\S+)', text, re.M)
    files = len(re.findall(r'^hpcnode_module_file_signed\{', text, re.M))
    expected = len(re.findall(r'^hpcnode_module_expected_loaded\{[^}]*\} 1', text, re.M))
    probes = re.findall(r'^hpcnode_ebpf_probe_attached\{probe="([^"]+)",hook="([^"]*)"\} (\S+)',
                        text, re.M)
    return ("%d of %d GPUs held, by %d QEMU guests; holder scan complete %s; %d module files "
            "checked; %d of %d expected modules loaded; eBPF probes attached: %s; not: %s"
            % (held, GPUS, len(guests), complete.group(1) if complete else "absent", files,
               expected, len(EXPECTED_MODULES),
               ", ".join("%s (%s)" % (p, h) for p, h, v in probes if v == "1") or "none",
               ", ".join(sorted({p for p, _, v in probes if v != "1"})) or "none"))


# ---------------------------------------------------------------------------------------------
# run


def loadavg():
    return " ".join(_read("/proc/loadavg").split()[:3])


def reset_peak(target):
    """VmHWM set back to the current RSS (clear_refs 5), so that the peak read after the scrapes
    is theirs, not the start's; returns the peak before."""
    target.memory()
    before = target.hwm_kib
    with open("/proc/%d/clear_refs" % target.proc.pid, "w") as f:
        f.write("5")
    return before


def measure(args, workdir, root, procfs, exporter, node_exporter):
    paths = ["--path.sysfs=" + os.path.join(root, "sys"), "--path.procfs=" + procfs,
             "--path.rootfs=" + root]
    hpcnode = [exporter] + paths + ["--collector.modules.expected=" + ",".join(EXPECTED_MODULES)]
    hpcnode += args.exporter_arg
    runs = [("hpcnode", hpcnode), ("node_exporter", [node_exporter] + paths)]
    if args.hw_counter_include:
        runs.append(("hpcnode-include",
                     hpcnode + ["--collector.rdma.hw-counter-include=" + args.hw_counter_include]))
    settings = SimpleNamespace(start_timeout=60.0, request_timeout=60.0,
                               prometheus_headers=False, new_connection=False)
    targets = [scrape_bench.Target(label, lambda port, argv=argv: argv + [
        "--web.listen-address=127.0.0.1:%d" % port], workdir, settings) for label, argv in runs]
    try:
        for t in targets:
            t.start()
        for i in range(args.warmup):
            for t in targets:
                status, body = t.scrape()
                if i == 0:
                    t.first = (status, body)
        for t in targets:
            t.startup_hwm = reset_peak(t)
            t.latencies.clear()
            t.cpu_ticks = t.cpu()
            t.system_ticks = t.cpu_split()[1]
            t.switch_count = t.switches()
            t.durations = {}
        for i in range(args.scrapes):
            for t in (targets if i % 2 == 0 else list(reversed(targets))):
                status, body = t.scrape()
                t.last = (status, body)
                if status != 200:
                    t.check = "status %d at scrape %d" % (status, i)
                for collector, seconds in DURATION[kind(t.label)].findall(body):
                    t.durations.setdefault(collector.decode(), []).append(float(seconds))
        for t in targets:
            t.cpu_ticks = t.cpu() - t.cpu_ticks
            t.system_ticks = t.cpu_split()[1] - t.system_ticks
            t.switch_count = t.switches_since(t.switch_count)
            t.memory()
            t.samples, t.series = series_of(t.last[1])
            t.failed = failed_collectors(t.label, t.last[1])
        return targets
    finally:
        for t in targets:
            t.stop()


def report(args, targets, context):
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    by = {t.label: t for t in targets}
    hp, ne = by["hpcnode"], by["node_exporter"]
    print()
    print("| exporter | CPU per scrape, ms (in the kernel) | median latency (ms) | "
          "p99 latency (ms) | peak RSS during scrapes, MiB (at start) | RSS at end, MiB (anon) | "
          "context switches per scrape | samples | series |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cpu(t):
        return t.cpu_ticks * tick_ms / args.scrapes

    for t in targets:
        print("| %s | %.2f (%.0f %%) | %.2f | %.2f | %.1f (%.1f) | %.1f (%.1f) | %.1f | %d | %d |"
              % (t.label, cpu(t), 100.0 * t.system_ticks / max(t.cpu_ticks, 1),
                 statistics.median(t.latencies) * 1000,
                 scrape_bench.percentile(t.latencies, 0.99) * 1000, t.hwm_kib / 1024,
                 t.startup_hwm / 1024, t.rss_kib / 1024, t.anon_kib / 1024,
                 t.switch_count / args.scrapes, t.samples, len(t.series)))
    for t in targets:
        if t is ne:
            continue
        print("%s / node_exporter: CPU per scrape %.2fx, median latency %.2fx, p99 %.2fx, "
              "peak RSS during scrapes %.2fx (with the start's %.2fx), series %.2fx" % (
                  t.label, cpu(t) / cpu(ne),
                  statistics.median(t.latencies) / statistics.median(ne.latencies),
                  scrape_bench.percentile(t.latencies, 0.99)
                  / scrape_bench.percentile(ne.latencies, 0.99),
                  t.hwm_kib / ne.hwm_kib,
                  max(t.hwm_kib, t.startup_hwm) / max(ne.hwm_kib, ne.startup_hwm),
                  len(t.series) / len(ne.series)))
    rss = hp.hwm_kib / ne.hwm_kib
    whole = max(hp.hwm_kib, hp.startup_hwm) / max(ne.hwm_kib, ne.startup_hwm)
    print("targets (issue 42): CPU per scrape at most node_exporter's: %s; peak RSS at most "
          "0.5x node_exporter's: %s during the scrapes (%.2fx counting the start's peak)" % (
              "met" if cpu(hp) <= cpu(ne) else "missed, %.2fx" % (cpu(hp) / cpu(ne)),
              "met, %.2fx" % rss if rss <= 0.5 else "missed, %.2fx" % rss, whole))
    for t in targets:
        print("%s: collectors not successful: %s" % (t.label, ", ".join(t.failed) or "none"))
        if t.check:
            print("%s: %s" % (t.label, t.check))
    print("hpcnode on the node: %s" % vfio_check(hp.last[1]))

    owners = metric_collectors()
    print("\nseries per collector, hpcnode_exporter (METRICS.md's sections), and its own scrape "
          "time (hpcnode_scrape_collector_duration_seconds: median, p99 ms, share of the "
          "medians' sum):")
    series = dict(by_group(hp.series, lambda name: owners.get(name, "not in METRICS.md")))
    medians = {c: statistics.median(v) for c, v in hp.durations.items()}
    total = sum(medians.values()) or 1.0
    include = by.get("hpcnode-include")
    saved = dict(by_group(include.series, lambda n: owners.get(n, "not in METRICS.md"))) \
        if include else {}
    print("| collector | series | scrape time median (ms) | p99 (ms) | share |%s" % (
        " series with --hw-counter-include |" if include else ""))
    print("|---|---:|---:|---:|---:|%s" % ("---:|" if include else ""))
    for name in sorted(set(series) | set(medians), key=lambda c: (-series.get(c, 0), c)):
        times = hp.durations.get(name)
        timing = ("%.2f | %.2f | %.0f %%" % (medians[name] * 1000,
                                             scrape_bench.percentile(times, 0.99) * 1000,
                                             100 * medians[name] / total) if times else "- | - | -")
        print("| %s | %d | %s |%s" % (name, series.get(name, 0), timing,
                                      " %d |" % saved.get(name, 0) if include else ""))
    if include:
        print("--hw-counter-include %s: %d series instead of %d (%d fewer, %d a port of %d "
              "ports); rdma scrape time median %.2f ms instead of %.2f" % (
                  args.hw_counter_include, len(include.series), len(hp.series),
                  len(hp.series) - len(include.series),
                  (len(hp.series) - len(include.series)) // HCAS, HCAS,
                  statistics.median(include.durations.get("rdma", [0])) * 1000,
                  medians.get("rdma", 0) * 1000))
    ne_series = by_group(ne.series, lambda n: "_".join(n.split("_")[:2]))
    print("\nnode_exporter series by name prefix: %s" % ", ".join(
        "%s %d" % kv for kv in ne_series[:12]))
    ne_medians = sorted(((statistics.median(v), c) for c, v in ne.durations.items()),
                        reverse=True)
    print("node_exporter's own scrape time per collector (median ms), the largest: %s" % ", ".join(
        "%s %.2f" % (c, m * 1000) for m, c in ne_medians[:8]))
    print("\n%s" % context)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exporter", default=os.path.join(REPO, "target/release/hpcnode_exporter"))
    ap.add_argument("--node-exporter", default="/usr/bin/prometheus-node-exporter")
    ap.add_argument("--scrapes", type=int, default=200, help="timed scrapes per exporter")
    ap.add_argument("--warmup", type=int, default=10, help="untimed scrapes per exporter first")
    ap.add_argument("--processes", type=int, default=2000,
                    help="processes holding descriptors (default: %(default)s)")
    ap.add_argument("--fds", type=int, default=100,
                    help="descriptors each holds (default: %(default)s)")
    ap.add_argument("--vms", type=int, default=4, choices=(0, 1, 2, 4, 8),
                    help="QEMU-named processes holding the 8 GPUs' group nodes; 0: none, so "
                         "vfio's reference count proves no holder and the exporter scans no "
                         "process (default: %(default)s)")
    ap.add_argument("--modules", type=int, default=150, help="loaded modules")
    ap.add_argument("--kmsg-rate", type=float, default=3.0,
                    help="lines a second written to /dev/kmsg while scraping")
    ap.add_argument("--lab-cache", default=os.environ.get(
        "HPCNODE_LAB_CACHE", os.path.join(REPO, "tests/lab/.cache")),
        help="the kernel lab's cache, whose Debian modules.dep and signed module files the node "
             "gets (default: $HPCNODE_LAB_CACHE or tests/lab/.cache)")
    ap.add_argument("--hw-counter-include", metavar="REGEX",
                    help="also run hpcnode_exporter with --collector.rdma.hw-counter-include="
                         "REGEX in the same interleaved run, and print the series it saves")
    ap.add_argument("--exporter-arg", action="append", default=[],
                    help="extra argument for hpcnode_exporter (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the tree and the logs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("node_bench: needs root (a mount namespace, device nodes, BPF)", file=sys.stderr)
        return 2
    node_exporter = shutil.which(args.node_exporter)
    if not os.access(args.exporter, os.X_OK) or node_exporter is None:
        print("need %s (cargo build --release --locked) and %s"
              % (args.exporter, args.node_exporter), file=sys.stderr)
        return 2

    started, load_start = time.monotonic(), loadavg()
    private_mount_namespace()
    workdir = tempfile.mkdtemp(prefix="hpcnode-node-bench-")
    holders = trickle = None
    mounted = []
    try:
        numbers = stand_in_numbers(GPUS)
        root, release, files = build_node(workdir, args, numbers)
        vfio_dev_nodes(workdir, dict(enumerate(numbers)))
        mounted.append("/dev")
        holders = Holders(args.processes, args.fds, args.vms, list(range(GPUS)))
        procfs = os.path.join(workdir, "procfs")
        mounted.append(procfs)
        mounts, failed = merged_procfs(os.path.join(root, "proc"), procfs)
        processes, fds = descriptors_in(procfs)
        built = time.monotonic() - started
        print("hpcnode_exporter: %s\nnode_exporter:    %s" % (args.exporter, node_exporter))
        print("host: %d CPUs, %s; load average at start %s" % (
            os.cpu_count(), os.uname().release, load_start))
        print("node: %d HCAs x 1 port, %d PCI devices in %d IOMMU groups (%d GPUs on vfio-pci, "
              "held by %d QEMU-named processes), %d loaded modules, kernel %s; expected %s, %s" % (
                  HCAS, PCI_DEVICES, IOMMU_GROUPS, GPUS, args.vms, args.modules, release,
                  ",".join(EXPECTED_MODULES),
                  "their closure's %d signed files from %s" % (len(files[0]), files[1])
                  if files else "no module files (no kernel lab cache at %s)" % args.lab_cache))
        print("procfs: %d processes with %d open descriptors (%d x %d of them the bench's), "
              "%d bind mounts of /proc (%d failed); built in %.0f s" % (
                  processes, fds, args.processes, args.fds, mounts, failed, built))
        trickle = KmsgTrickle(args.kmsg_rate)
        trickle.start()
        scrapes_started = time.monotonic()
        targets = measure(args, workdir, root, procfs, args.exporter, node_exporter)
        trickle.stopping.set()
        elapsed = time.monotonic() - scrapes_started
        context = ("%d interleaved scrapes each after %d warm-up, keep-alive, in %.0f s; %d lines "
                   "written to /dev/kmsg meanwhile; load average at start %s, at end %s"
                   % (args.scrapes, args.warmup, elapsed, trickle.lines, load_start, loadavg()))
        report(args, targets, context)
        return 0
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        print("node_bench: %s" % e, file=sys.stderr)
        return 1
    finally:
        if trickle is not None:
            trickle.stopping.set()
        if holders is not None:
            holders.stop()
        for target in reversed(mounted):
            try:
                unmount(target)
            except OSError as e:
                print("node_bench: %s" % e, file=sys.stderr)
        if args.keep:
            print("kept %s (its procfs and /dev/vfio only existed in the bench's mount "
                  "namespace)" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
