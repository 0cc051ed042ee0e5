#!/usr/bin/python3
"""Idle wake-ups: how often hpcnode_exporter and node_exporter wake between scrapes.

On an HPC compute node every wake-up of a daemon can delay a bulk-synchronous job, so an
exporter should sleep while nobody scrapes it. This starts both side by side on the benchmark's
RDMA tree (hpcnode_exporter with every collector on, the verbs probe scheduled and its responder
listening, the eBPF probes attached when run as root), scrapes each a few times, then scrapes
nothing for --seconds and counts the context switches of all their threads (voluntary +
involuntary, /proc/PID/task/*/status) over that window: every switch is one wake-up.
Standard library only; a benchmark, not a test. See tests/bench/README.md.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scrape_bench  # noqa: E402


def context_switches(pid):
    """Voluntary + involuntary context switches of each thread of `pid`, by thread id, with
    the thread's name: (name, switches)."""
    switches = {}
    task_dir = "/proc/%d/task" % pid
    for tid in os.listdir(task_dir):
        try:
            with open(os.path.join(task_dir, tid, "status")) as f:
                lines = f.read().splitlines()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
        name = next((line.split(None, 1)[1] for line in lines
                     if line.startswith("Name:")), "?")
        switches[tid] = (name, sum(int(line.split()[1]) for line in lines
                                   if line.startswith(("voluntary_ctxt_switches:",
                                                       "nonvoluntary_ctxt_switches:"))))
    return switches


def idle_switches(pids, seconds, every=0.25):
    """Context switches of each process over `seconds`: per thread, its last count seen minus
    its count at the start (0 for a thread born meanwhile), so threads that end in the window
    (an idle blocking-pool worker retiring) count too, with one more for the wake-up that ended
    each (its status is gone by then). Returns {pid: {thread name: (switches, threads)}}."""
    first = {pid: context_switches(pid) for pid in pids}
    last = {pid: dict(first[pid]) for pid in pids}
    now = first
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(every, max(0.0, deadline - time.monotonic())))
        now = {pid: context_switches(pid) for pid in pids}
        for pid in pids:
            last[pid].update(now[pid])
    counted = {}
    for pid in pids:
        by_name = counted.setdefault(pid, {})
        for tid, (name, n) in last[pid].items():
            woke = n - first[pid].get(tid, (name, 0))[1] + (tid not in now[pid])
            switches, threads = by_name.get(name, (0, 0))
            by_name[name] = (switches + woke, threads + 1)
    return counted


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--exporter", default=os.path.join(scrape_bench.REPO,
                                                       "target/release/hpcnode_exporter"))
    ap.add_argument("--node-exporter", default="prometheus-node-exporter")
    ap.add_argument("--hcas", type=int, default=16, help="HCAs in the tree (default 16)")
    ap.add_argument("--seconds", type=float, default=60.0, help="idle window (default 60)")
    ap.add_argument("--scrapes", type=int, default=5, help="scrapes before the window")
    args = ap.parse_args()
    node_exporter = shutil.which(args.node_exporter)
    if not os.access(args.exporter, os.X_OK) or node_exporter is None:
        print("need %s and %s" % (args.exporter, args.node_exporter), file=sys.stderr)
        return 2

    target_args = SimpleNamespace(start_timeout=20.0, request_timeout=30.0,
                                  prometheus_headers=False, new_connection=False)
    workdir = tempfile.mkdtemp(prefix="hpcnode-idle-")
    targets = []
    try:
        sysfs = scrape_bench.make_tree(workdir, args.hcas)
        responder = scrape_bench.free_port()
        hpcnode = [args.exporter, "--path.sysfs=%s" % sysfs,
                   "--collector.verbs.interval=1h",
                   "--collector.verbs.listen=127.0.0.1:%d" % responder,
                   "--collector.verbs.allow=127.0.0.1/32"]
        node = [node_exporter, "--collector.disable-defaults", "--collector.infiniband",
                "--path.sysfs=%s" % sysfs]
        for label, argv in [("hpcnode", hpcnode), ("node_exporter", node)]:
            targets.append(scrape_bench.Target(
                label, lambda port, argv=argv: argv + ["--web.listen-address=127.0.0.1:%d"
                                                       % port], workdir, target_args))
        for t in targets:
            t.start()
            for _ in range(args.scrapes):
                status, _ = t.scrape()
                if status != 200:
                    print("%s answered %d" % (t.label, status), file=sys.stderr)
            t.conn.close()
            t.conn = None
        # Let connection timers and the first scrapes' work settle.
        time.sleep(2)
        counted = idle_switches([t.proc.pid for t in targets], args.seconds)
        print("idle wake-ups over %.0f s without scrapes (voluntary + involuntary context "
              "switches, all threads, /proc/PID/task/*/status); %s as uid %d"
              % (args.seconds, os.uname().release, os.getuid()))
        for t in targets:
            by_name = counted[t.proc.pid]
            switches = sum(n for n, _ in by_name.values())
            threads = sum(k for _, k in by_name.values())
            print("  %-14s %6d switches  %6.2f per second  %3d threads  %s"
                  % (t.label, switches, switches / args.seconds, threads,
                     " ".join(os.path.basename(a) if i == 0 else a
                              for i, a in enumerate(t.argv))))
            woken = sorted(((n, k, name) for name, (n, k) in by_name.items() if n),
                           reverse=True)
            print("    by thread name: %s" % (", ".join(
                "%s %d (%d thread%s)" % (name, n, k, "" if k == 1 else "s")
                for n, k, name in woken) or "none woke"))
        ebpf = [line for line in targets[0].log_tail(20000).splitlines() if "ebpf" in line]
        for line in ebpf[:5]:
            print("  hpcnode log: %s" % line[:200])
        return 0
    finally:
        for t in targets:
            t.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
