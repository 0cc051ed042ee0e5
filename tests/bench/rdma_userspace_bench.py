#!/usr/bin/python3
"""Scrape benchmark of the rdma_userspace collector: a root with N libraries and its ld.so.cache.

Builds a root as a Debian 12 node lays it out (its ld.so.conf and ld.so.conf.d, a site's
/usr/local/lib64 listed), with bookworm's real rdma-core libraries in the multiarch directory,
bullseye's libibverbs in /usr/local/lib64 (the incident's stale copy), and N more shared
objects (real ELF files, each its own soname), then writes the cache with the real
`ldconfig -r`. Starts hpcnode_exporter with only the rdma_userspace collector on it and
measures the CPU a scrape costs in the steady state (nothing changed since the last scrape:
the kept reading, after a stat of each file and directory it came from) and in a scrape after
a change (bullseye's copy moved out of or back into /usr/local/lib64, then `ldconfig -r` run
again, as the incident's fix and its undoing). Standard library only; a benchmark, not a test.
See tests/bench/README.md.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scrape_bench  # noqa: E402  (the process wrapper and helpers of the RDMA benchmark)

REPO = scrape_bench.REPO
MULTIARCH = "usr/lib/x86_64-linux-gnu"
STALE_DIR = "usr/local/lib64"
ROOT_SCRIPT = os.path.join(REPO, "tests/fixtures/rdma_userspace_root.sh")
# The shared object each generated library is a copy of, its soname patched (same length).
SOURCE = "int bench_symbol(void) { return 1; }\n"
TEMPLATE_SONAME = b"libbench_00000"
DURATION = re.compile(
    rb'^hpcnode_scrape_collector_duration_seconds\{collector="rdma_userspace"\} (\S+)$', re.M)
IBVERBS_COPIES = re.compile(
    rb'^hpcnode_rdma_userspace_library_copies\{library="libibverbs.so.1"\} (\d+)$', re.M)


def make_root(workdir, n_libraries, ldconfig):
    """The incident's root (tests/fixtures/rdma_userspace_root.sh) and N more libraries."""
    root = os.path.join(workdir, "root")
    subprocess.run([ROOT_SCRIPT, root, "stale"], check=True)
    multiarch = os.path.join(root, MULTIARCH)
    # One small real shared object, copied N times with its soname patched: ldconfig reads
    # each one's ELF header and dynamic section, as it would a package's library.
    source = os.path.join(workdir, "bench.c")
    template = os.path.join(workdir, "template.so")
    with open(source, "w") as f:
        f.write(SOURCE)
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-s",
                    "-Wl,-soname," + TEMPLATE_SONAME.decode() + ".so.1",
                    "-Wl,-z,noseparate-code", "-o", template, source], check=True)
    with open(template, "rb") as f:
        elf = f.read()
    if elf.count(TEMPLATE_SONAME) != 1:
        raise RuntimeError("the template's soname is not where it was expected")
    for i in range(n_libraries):
        soname = b"libbench_%05d" % i
        with open(os.path.join(multiarch, soname.decode() + ".so.1.0.0"), "wb") as f:
            f.write(elf.replace(TEMPLATE_SONAME, soname))
    # Without -X: ldconfig makes each new soname's link, as on a node.
    subprocess.run([ldconfig, "-r", root], check=True)
    return root


def check(status, body, copies):
    """'ok ...' when the scrape succeeded and shows `copies` copies of libibverbs."""
    if status != 200:
        return "BAD status %d" % status
    ok = b'hpcnode_scrape_collector_success{collector="rdma_userspace"} 1\n' in body
    found = IBVERBS_COPIES.search(body)
    seen = int(found.group(1)) if found else None
    if not ok or seen != copies:
        return "BAD (collector success %s, %s copies of libibverbs, %d expected)" % (ok, seen, copies)
    return "ok"


def collector_seconds(body):
    found = DURATION.search(body)
    return float(found.group(1)) if found else float("nan")


def move_stale_copy(root, parking, out):
    """Moves bullseye's libibverbs out of the root (`out`) or back into it."""
    stale = os.path.join(root, STALE_DIR)
    src, dst = (stale, parking) if out else (parking, stale)
    for name in os.listdir(src):
        os.rename(os.path.join(src, name), os.path.join(dst, name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporter", default=os.path.join(REPO, "target/release/hpcnode_exporter"))
    parser.add_argument("--libraries", type=int, default=3000)
    parser.add_argument("--scrapes", type=int, default=2000,
                        help="steady-state scrapes (nothing changed)")
    parser.add_argument("--changes", type=int, default=100,
                        help="scrapes each after a change and an ldconfig run")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--ldconfig", default=shutil.which("ldconfig") or "/sbin/ldconfig")
    parser.add_argument("--keep", action="store_true")
    # What scrape_bench.Target reads from its arguments.
    parser.set_defaults(start_timeout=20.0, request_timeout=30.0, prometheus_headers=False,
                        new_connection=False)
    args = parser.parse_args()
    if not os.access(args.exporter, os.X_OK):
        print("no %s: build it first (cargo build --release)" % args.exporter)
        return 1
    workdir = tempfile.mkdtemp(prefix="rdma-userspace-bench-")
    if args.keep:
        print("root kept in " + workdir)
    target = None
    try:
        load_before = os.getloadavg()
        root = make_root(workdir, args.libraries, args.ldconfig)
        parking = os.path.join(workdir, "parked")
        os.makedirs(parking)
        target = scrape_bench.Target("hpcnode", lambda port: [
            args.exporter, "--web.listen-address=127.0.0.1:%d" % port,
            "--collector.disable-defaults", "--collector.rdma_userspace",
            "--path.rootfs=" + root], workdir, args)
        target.start()
        for _ in range(args.warmup):
            status, body = target.scrape()
        checks = ["first: " + check(status, body, 2)]

        # Steady state: nothing changes between scrapes.
        target.latencies.clear()
        durations = []
        ticks = -target.cpu()
        for _ in range(args.scrapes):
            status, body = target.scrape()
            durations.append(collector_seconds(body))
        ticks += target.cpu()
        checks.append("steady: " + check(status, body, 2))
        steady = (ticks, statistics.median(target.latencies), durations)

        # A change before each scrape: the stale copy removed (or put back), ldconfig run.
        target.latencies.clear()
        durations = []
        ticks = 0
        bad = 0
        for i in range(args.changes):
            out = i % 2 == 0
            move_stale_copy(root, parking, out)
            subprocess.run([args.ldconfig, "-r", root], check=True)
            before = target.cpu()
            status, body = target.scrape()
            ticks += target.cpu() - before
            durations.append(collector_seconds(body))
            if check(status, body, 1 if out else 2) != "ok":
                bad += 1
        checks.append("after a change: %d of %d scrapes saw it" % (args.changes - bad, args.changes))
        changed = (ticks, statistics.median(target.latencies), durations)
        target.memory()
        load_after = os.getloadavg()

        tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
        with open(os.path.join(root, "etc/ld.so.cache"), "rb") as f:
            cache_bytes = len(f.read())
        print("%d libraries generated (%d files in the multiarch directory), ld.so.cache %d KiB; "
              "load average %.2f %.2f %.2f before, %.2f %.2f %.2f after"
              % (args.libraries, len(os.listdir(os.path.join(root, MULTIARCH))),
                 cache_bytes // 1024, *load_before, *load_after))
        print("checks: " + "; ".join(checks))
        print("| scrape | scrapes | CPU per scrape (ms) | collector median (ms) | collector p99 (ms) | latency median (ms) |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, count, (ticks, latency, durations) in (
                ("steady (nothing changed)", args.scrapes, steady),
                ("after a change and ldconfig", args.changes, changed)):
            print("| %s | %d | %.3f | %.3f | %.3f | %.2f |" % (
                label, count, ticks * tick_ms / count, statistics.median(durations) * 1000,
                scrape_bench.percentile(durations, 0.99) * 1000, latency * 1000))
        print("peak RSS %.1f MiB (RssAnon %.1f MiB at the end)"
              % (target.hwm_kib / 1024, target.anon_kib / 1024))
        return 0
    finally:
        if target is not None:
            target.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
