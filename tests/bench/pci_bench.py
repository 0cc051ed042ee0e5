#!/usr/bin/python3
"""Scrape benchmark of the PCI collector: N PCI devices of interest in a generated tree.

Builds a sysfs tree with N devices (half T4s on vfio-pci, each in its own IOMMU group; half
ConnectX-5 PFs on mlx5_core with MSI-X and SR-IOV), full 4096-byte config spaces, laid out as
the fixture generator lays out its trees (tests/fixtures/pci_generate.py, whose device builders
are reused). Starts hpcnode_exporter with only the pci collector, and node_exporter with only
its pcidevice collector when the installed node_exporter has one (`--help` lists
`--collector.pcidevice`; node_exporter 1.5.0 has none: then hpcnode is measured alone). Scrapes
alternately and prints latency, CPU time per scrape and per device, and peak RSS.
Standard library only; a benchmark, not a test. See tests/bench/README.md.
"""

import argparse
import importlib.util
import os
import pwd
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scrape_bench  # noqa: E402  (the process wrapper and helpers of the RDMA benchmark)

REPO = scrape_bench.REPO
spec = importlib.util.spec_from_file_location(
    "pci_generate", os.path.join(REPO, "tests/fixtures/pci_generate.py"))
pci_generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pci_generate)


def make_tree(root, n_devices):
    """N devices of interest, half GPUs on vfio-pci and half HCAs on mlx5_core."""
    sysfs = pci_generate.host_common(
        root, "BOOT_IMAGE=/boot/vmlinuz ro intel_iommu=on vfio-pci.ids=10de:1eb8", iommu=True,
        modules=["vfio", "vfio_iommu_type1", "vfio_pci", "mlx5_core"])
    for i in range(n_devices):
        bus = 1 + i
        domain = bus // 256
        address = "%04x:%02x:00.0" % (domain, bus % 256)
        root_port = "%04x:%02x:%02x.0" % (domain, 0, 1 + (bus % 256) // 8)
        if i % 2 == 0:
            dev = pci_generate.t4(address, iommu_group=i)
        else:
            dev = pci_generate.connectx(address, 0x1017, 0x0020, 0x020000, iommu_group=i)
        pci_generate.add_device(sysfs, root_port, dev, 4096)
    return sysfs


def host_device_ids(device_dir):
    """`vendor:device` of a device of this machine, as --collector.pci.device takes it."""
    ids = []
    for name in ("vendor", "device"):
        with open(os.path.join(device_dir, name)) as f:
            ids.append(f.read().strip()[2:])
    return ":".join(ids)


def node_exporter_has_pcidevice(binary):
    try:
        help_text = subprocess.run([binary, "--help"], capture_output=True, text=True,
                                   timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--collector.pcidevice" in help_text


def series_devices(text, prefix):
    return {line.split('device="', 1)[1].split('"', 1)[0]
            for line in text.splitlines()
            if line.startswith(prefix) and 'device="' in line}


def check(label, status, body, n_devices):
    if status != 200:
        return "BAD status %d" % status
    text = body.decode("utf-8", "replace")
    samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    if label.startswith("hpcnode"):
        devices = len(series_devices(text, "hpcnode_pci_device_info{"))
        ok = 'hpcnode_scrape_collector_success{collector="pci"} 1' in text
    else:
        devices = sum(1 for line in text.splitlines() if line.startswith("node_pcidevice_info"))
        ok = 'node_scrape_collector_success{collector="pcidevice"} 1' in text
    verdict = "%d samples, %d devices" % (samples, devices)
    if devices != n_devices or not ok:
        return "BAD (%s; collector success %s)" % (verdict, ok)
    return "ok " + verdict


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter", default=os.path.join(REPO, "target/release/hpcnode_exporter"))
    parser.add_argument("--node-exporter", default="/usr/bin/prometheus-node-exporter")
    parser.add_argument("--devices", type=int, default=256)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--compare", metavar="PATH",
                        help="another hpcnode_exporter build (main's), scraped in the same interleaved run")
    parser.add_argument("--host-sysfs", action="store_true",
                        help="scrape this machine's own /sys, every PCI device named with "
                             "--collector.pci.device, instead of a generated tree (real config "
                             "space reads; --devices is ignored)")
    parser.add_argument("--user", metavar="NAME",
                        help="run the hpcnode exporters as this user (setpriv), as a site's "
                             "service user: without root, config space stops at 64 bytes")
    args = parser.parse_args()
    if not scrape_bench.prepared(args):
        return 1
    workdir = tempfile.mkdtemp(prefix="pci-bench-")
    as_user = []
    if args.user:
        user = pwd.getpwnam(args.user)
        as_user = ["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                   "--clear-groups"]
        # The tree reachable by that user (the logs are written through this process's
        # descriptors).
        os.chmod(workdir, 0o755)
    targets = []
    try:
        if args.host_sysfs:
            root, sysfs = "/", "/sys"
            devices = os.path.join(sysfs, "bus/pci/devices")
            args.devices = len(os.listdir(devices))
            named = sorted({host_device_ids(os.path.join(devices, d)) for d in os.listdir(devices)})
            paths = ["--collector.pci.device=" + ids for ids in named]
        else:
            root = os.path.join(workdir, "tree")
            sysfs = make_tree(root, args.devices)
            paths = []
        paths += ["--path.sysfs=" + sysfs, "--path.procfs=" + os.path.join(root, "proc"),
                  "--path.rootfs=" + root]
        hpcnode = scrape_bench.Target("hpcnode", lambda port: as_user + [
            args.exporter, "--web.listen-address=127.0.0.1:%d" % port,
            "--collector.disable-defaults", "--collector.pci"] + paths, workdir, args)
        targets.append(hpcnode)
        if args.compare:
            targets.append(scrape_bench.Target("hpcnode-compare", lambda port: as_user + [
                args.compare, "--web.listen-address=127.0.0.1:%d" % port,
                "--collector.disable-defaults", "--collector.pci"] + paths, workdir, args))
        if node_exporter_has_pcidevice(args.node_exporter):
            targets.append(scrape_bench.Target("node_exporter", lambda port: [
                args.node_exporter, "--web.listen-address=127.0.0.1:%d" % port,
                "--collector.disable-defaults", "--collector.pcidevice", "--path.sysfs=" + sysfs],
                workdir, args))
        else:
            print("%s has no pcidevice collector (`--help` does not list --collector.pcidevice): "
                  "hpcnode_exporter is measured alone." % args.node_exporter)
        for target in targets:
            target.start()
            for _ in range(args.warmup):
                status, body = target.scrape()
            target.check = check(target.label, status, body, args.devices)
            target.latencies.clear()
            target.cpu_ticks = -target.cpu()
            target.system_ticks = -target.cpu_split()[1]
        for _ in range(args.scrapes):
            for target in targets:
                target.last = target.scrape()
                target.body_bytes, target.samples = len(target.last[1]), target.last[1].count(b"\n")
        for target in targets:
            target.cpu_ticks += target.cpu()
            target.system_ticks += target.cpu_split()[1]
            # Each target's own last scrape (not whichever target the loop scraped last).
            status, body = target.last
            target.check += "; last: " + check(target.label, status, body, args.devices)
            target.memory()
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        print("%d devices, %d scrapes each after %d warm-up" % (args.devices, args.scrapes, args.warmup))
        print("| exporter | check | latency median (ms) | latency p99 (ms) | CPU per scrape (ms) | CPU per device (us) | peak RSS (MiB) | body (KiB) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for target in targets:
            cpu_ms = target.cpu_ticks * tick_ms / args.scrapes
            print("| %s | %s | %.2f | %.2f | %.2f | %.1f | %.1f | %.0f |" % (
                target.label, target.check,
                statistics.median(target.latencies) * 1000,
                scrape_bench.percentile(target.latencies, 0.99) * 1000,
                cpu_ms, cpu_ms * 1000 / args.devices, target.hwm_kib / 1024, target.body_bytes / 1024))
        for target in targets:
            per_device_us = tick_ms * 1000 / args.scrapes / args.devices
            system_us = target.system_ticks * per_device_us
            print("%s: CPU per device %.1f us in the kernel (stime), %.1f us in user space (utime)"
                  % (target.label, system_us, target.cpu_ticks * per_device_us - system_us))
        if args.compare:
            first, second = targets[0], targets[1]
            print("hpcnode / compare: CPU per scrape %.2f, latency median %.2f, peak RSS %.2f" % (
                first.cpu_ticks / max(second.cpu_ticks, 1),
                statistics.median(first.latencies) / statistics.median(second.latencies),
                first.hwm_kib / second.hwm_kib))
            # Whether the two builds said the same of every device (timings aside).
            series = [sorted(line for line in target.last[1].decode("utf-8", "replace").splitlines()
                             if line.startswith("hpcnode_pci_") and "duration" not in line)
                      for target in (first, second)]
            differ = len(set(series[0]) ^ set(series[1]))
            print("hpcnode_pci_* series: %s" % ("identical" if differ == 0 else
                                                 "%d lines differ" % differ))
        return 0
    finally:
        scrape_bench.finish(targets, workdir, args.keep)


if __name__ == "__main__":
    sys.exit(main())
