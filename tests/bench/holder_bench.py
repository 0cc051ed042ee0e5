#!/usr/bin/python3
"""vfio holders with and without the vfio_holders probe's events, at a million descriptors.

node_bench.py's node (256 PCI devices, 8 GPUs on vfio-pci in their IOMMU groups, 4 processes
named as QEMU holding two group nodes each) with `--processes` x `--fds` more descriptors open
(2000 x 500 by default: a million), and the pci collector alone run in-process by
`exporter/examples/vfio_holder_bench.rs` over it, each mode in turn: `events` (the probe's set,
in memory: seeded by the first scrape's scan, then the recorded processes only) and `scan` (no
probe: every process's descriptors at the first scrape, then the scan kept while nothing
changes); each run's mean scrape is timed after five untimed ones. The same again with no extra descriptors, so that what grows with them shows.
Prints each run's first scrape and mean scrape CPU (CLOCK_PROCESS_CPUTIME_ID) and the load
average. Needs root (a mount namespace, device nodes). A benchmark, not a test; see
tests/bench/README.md.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import node_bench  # noqa: E402  (the node's tree, its processes and procfs)

REPO = node_bench.REPO


def run(bench, root, procfs, scrapes, events):
    argv = [bench, "--sysfs", os.path.join(root, "sys"), "--procfs", procfs,
            "--scrapes", str(scrapes)] + (["--events"] if events else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return dict(field.split("=") for field in out.split())


def measure(args, workdir, root, extra_processes, extra_fds, numbers):
    holders = node_bench.Holders(extra_processes, extra_fds, node_bench.GPUS // 2,
                                 list(range(node_bench.GPUS)))
    procfs = os.path.join(workdir, "procfs-%d" % extra_processes)
    try:
        node_bench.merged_procfs(os.path.join(root, "proc"), procfs)
        processes, fds = node_bench.descriptors_in(procfs)
        rows = []
        for _ in range(args.runs):
            for events in (True, False):
                result = run(args.bench, root, procfs, args.scrapes, events)
                rows.append(("events" if events else "scan", result))
        return processes, fds, rows
    finally:
        holders.stop()
        node_bench.unmount(procfs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.path.join(REPO, "target/release/examples/vfio_holder_bench"))
    ap.add_argument("--processes", type=int, default=2000)
    ap.add_argument("--fds", type=int, default=500, help="descriptors each")
    ap.add_argument("--scrapes", type=int, default=200, help="timed scrapes after the first")
    ap.add_argument("--runs", type=int, default=2, help="runs of each mode, alternating")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("holder_bench: needs root (a mount namespace, device nodes)", file=sys.stderr)
        return 2
    if not os.access(args.bench, os.X_OK):
        print("need %s (cargo build --release --locked --example vfio_holder_bench)"
              % args.bench, file=sys.stderr)
        return 2
    load_start = node_bench.loadavg()
    node_bench.private_mount_namespace()
    workdir = tempfile.mkdtemp(prefix="hpcnode-holder-bench-")
    try:
        numbers = node_bench.stand_in_numbers(node_bench.GPUS)
        shape = SimpleNamespace(modules=150, vms=node_bench.GPUS // 2,
                                lab_cache=os.path.join(workdir, "no-lab-cache"))
        root, _, _ = node_bench.build_node(workdir, shape, numbers)
        node_bench.vfio_dev_nodes(workdir, dict(enumerate(numbers)))
        print("host: %d CPUs, %s; load average at start %s" % (
            os.cpu_count(), os.uname().release, load_start))
        print("| descriptors on the node | mode | first scrape (ms) | a scrape after (ms) "
              "| holders found | read from events |")
        print("|---|---|---|---|---|---|")
        for extra in ((args.processes, args.fds), (0, 3)):
            processes, fds, rows = measure(args, workdir, root, extra[0], extra[1], numbers)
            for mode, r in rows:
                print("| %d in %d processes | %s | %.1f | %.3f | %s | %s |" % (
                    fds, processes, mode, int(r["first_scrape_us"]) / 1000,
                    int(r["scrape_us"]) / 1000, r["device_holders"], r["from_events"]))
        print("%d timed scrapes a run after the first; load average at end %s"
              % (args.scrapes, node_bench.loadavg()))
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
