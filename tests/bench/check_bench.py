#!/usr/bin/python3
"""Benchmark of `hpcnode_exporter check --from`: how long a Slurm health check waits on a node.

Builds one tree with N HCAs (scrape_bench.py's generator: ConnectX-6-like, two ports each, in
PCI domain 2) and M PCI devices (pci_bench.py's: half T4s on vfio-pci, half ConnectX-5 PFs),
starts the release exporter on it with the rdma and pci collectors, then runs
`hpcnode_exporter check --from http://127.0.0.1:PORT/metrics` R times one after another, each
a new process, as Slurm's HealthCheckProgram would. Prints, per check: wall time (median, p90,
max), the check process's CPU (user + system), the exporter's CPU per check, the exit codes,
and the load average before and after. The target: every check answers within 1 s on 8 HCAs
and 256 PCI devices. Standard library only; a benchmark, not a test. See tests/bench/README.md.
"""

import argparse
import collections
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scrape_bench  # noqa: E402  (the HCA tree, the exporter process, percentile)
import pci_bench  # noqa: E402  (the PCI device tree)

REPO = scrape_bench.REPO


def make_tree(root, n_hcas, n_devices):
    """pci_bench's devices in PCI domain 0 (and 1 past bus 255), the HCAs in domain 2."""
    sysfs = pci_bench.make_tree(root, n_devices)
    scrape_bench.make_tree(root, n_hcas, domain=2)
    return sysfs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter", default=os.path.join(REPO, "target/release/hpcnode_exporter"),
                        help="the binary both serves and checks")
    parser.add_argument("--hcas", type=int, default=8)
    parser.add_argument("--devices", type=int, default=256)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not scrape_bench.prepared(args):
        return 1
    workdir = tempfile.mkdtemp(prefix="check-bench-")
    target = None
    try:
        root = os.path.join(workdir, "tree")
        sysfs = make_tree(root, args.hcas, args.devices)
        # Every check as built in, whatever this machine's /etc/hpcnode_exporter holds.
        checks = os.path.join(workdir, "checks.yml")
        with open(checks, "w") as f:
            f.write("# every check as built in\n")
        target = scrape_bench.Target("hpcnode", lambda port: [
            args.exporter, "--web.listen-address=127.0.0.1:%d" % port,
            "--collector.disable-defaults", "--collector.rdma", "--collector.pci",
            "--path.sysfs=" + sysfs, "--path.procfs=" + os.path.join(root, "proc"),
            "--path.rootfs=" + root], workdir, args)
        target.start()
        status, body = target.scrape()
        text = body.decode("utf-8", "replace")
        devices = len(pci_bench.series_devices(text, "hpcnode_pci_device_info{"))
        ports = sum(1 for line in text.splitlines() if line.startswith("hpcnode_rdma_port_state_id{"))
        print("%d HCAs (%d ports) and %d PCI devices: one page of %d samples, %.0f KiB"
              % (args.hcas, ports, devices, sum(1 for l in text.splitlines() if l and l[0] != "#"),
                 len(body) / 1024))
        command = [args.exporter, "check", "--checks", checks,
                   "--from", "http://127.0.0.1:%d/metrics" % target.port]
        load_before = os.getloadavg()
        walls, cpus, codes, outputs = [], [], collections.Counter(), collections.Counter()
        exporter_ticks = 0
        for run in range(args.warmup + args.runs):
            before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
            exporter_before = target.cpu()
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, timeout=60)
            wall = time.perf_counter() - started
            after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
            if run < args.warmup:
                continue
            walls.append(wall)
            cpus.append(after_children.ru_utime + after_children.ru_stime
                        - before_children.ru_utime - before_children.ru_stime)
            exporter_ticks += target.cpu() - exporter_before
            codes[done.returncode] += 1
            outputs[(done.stdout + done.stderr).strip()[:200]] += 1
        load_after = os.getloadavg()
        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        print("%d checks after %d warm-up, one at a time" % (args.runs, args.warmup))
        print("| wall median (ms) | wall p90 (ms) | wall max (ms) | check CPU median (ms) | exporter CPU per check (ms) | exit codes |")
        print("|---:|---:|---:|---:|---:|---|")
        print("| %.1f | %.1f | %.1f | %.1f | %.1f | %s |" % (
            statistics.median(walls) * 1000, scrape_bench.percentile(walls, 0.9) * 1000,
            max(walls) * 1000, statistics.median(cpus) * 1000,
            exporter_ticks * tick_ms / args.runs,
            ", ".join("%d: %d" % (code, n) for code, n in sorted(codes.items()))))
        for output, n in outputs.most_common(3):
            print("output (%d runs): %s" % (n, output or "(none)"))
        print("load average before: %.2f %.2f %.2f, after: %.2f %.2f %.2f" % (load_before + load_after))
        print("within 1 s: %s" % ("yes, every run" if max(walls) < 1.0 else "NO"))
        return 0
    finally:
        scrape_bench.finish([target] if target else [], workdir, args.keep)


if __name__ == "__main__":
    sys.exit(main())
