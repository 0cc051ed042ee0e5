#!/usr/bin/python3
"""eBPF benchmark: what the ebpf collector's probes cost, next to node_exporter.

1. starts `hpcnode_exporter --collector.disable-defaults --collector.ebpf` (all probes this kernel
   allows) and `prometheus-node-exporter` (its default collectors) side by side;
2. writes --lines lines to /dev/kmsg (one open per line: the per-open ratelimit) and reads each
   attached program's run count and run time from the exporter's own metrics (the kernel's BPF
   run-time statistics): nanoseconds per event per probe, and the exporter's user-space CPU
   per line (draining the ring buffer and matching);
3. leaves both idle for --idle seconds, no scrapes: CPU as % of one core (utime + stime from
   /proc/<pid>/stat) and RSS (VmRSS), with the ratio hpcnode / node_exporter.
Standard library only; needs root (BPF). A benchmark, not a test: exits 0 unless it cannot run.
"""

import argparse
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return body


def samples(text, name):
    """{labels-text: value} of one metric name."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", line)
        if m:
            found[m.group(1) or ""] = float(m.group(2))
    return found


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def wait_up(port, proc, what):
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            return scrape(port)
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not start")


def start(argv):
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exporter", default=os.path.join(REPO, "target/release/hpcnode_exporter"))
    parser.add_argument("--node-exporter", default="/usr/bin/prometheus-node-exporter")
    parser.add_argument("--lines", type=int, default=10000)
    parser.add_argument("--idle", type=float, default=30.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("ebpf_bench: needs root to load BPF programs")
    if not os.path.exists(args.exporter):
        sys.exit(f"ebpf_bench: {args.exporter} missing (cargo build --release)")

    hp_port, ne_port = free_port(), free_port()
    hpcnode = start([args.exporter, f"--web.listen-address=127.0.0.1:{hp_port}",
                     "--collector.disable-defaults", "--collector.ebpf"])
    peer = None
    try:
        before = wait_up(hp_port, hpcnode, "hpcnode_exporter")
        if os.path.exists(args.node_exporter):
            peer = start([args.node_exporter, f"--web.listen-address=127.0.0.1:{ne_port}"])
            wait_up(ne_port, peer, "node_exporter")
        attached = {k: v for k, v in samples(before, "hpcnode_ebpf_probe_attached").items()}
        print("probes:", ", ".join(f"{k}={int(v)}" for k, v in sorted(attached.items())))

        # Per-event cost: every attached program's runs and run time across the kmsg lines.
        runs0 = samples(before, "hpcnode_ebpf_program_runs_total")
        time0 = samples(before, "hpcnode_ebpf_program_run_seconds_total")
        cpu0 = cpu_ticks(hpcnode.pid)
        started = time.time()
        for i in range(args.lines):
            with open("/dev/kmsg", "w") as kmsg:
                kmsg.write(f"hpcnode ebpf bench line {i}\n")
        write_seconds = time.time() - started
        time.sleep(1.5)  # the exporter drains its ring buffer every 0.5 s
        after = scrape(hp_port)
        cpu1 = cpu_ticks(hpcnode.pid)
        runs1 = samples(after, "hpcnode_ebpf_program_runs_total")
        time1 = samples(after, "hpcnode_ebpf_program_run_seconds_total")
        print(f"\n{args.lines} /dev/kmsg lines written in {write_seconds:.2f} s")
        print(f"{'probe':<40} {'runs':>8} {'ns/run':>8}")
        for labels in sorted(runs1):
            runs = runs1[labels] - runs0.get(labels, 0)
            seconds = time1.get(labels, 0) - time0.get(labels, 0)
            per_run = seconds * 1e9 / runs if runs else float("nan")
            print(f"{labels:<40} {int(runs):>8} {per_run:>8.1f}")
        # CPU time has the resolution of one clock tick: below one tick, say so.
        per_line_us = max(cpu1 - cpu0, 1) / TICK * 1e6 / args.lines
        bound = "<" if cpu1 == cpu0 else "="
        print(f"exporter user+system CPU per line (drain + match): {bound} {per_line_us:.2f} us")

        # Idle: no scrapes, no log lines.
        pids = {"hpcnode_exporter": hpcnode.pid}
        if peer:
            pids["node_exporter"] = peer.pid
        ticks0 = {n: cpu_ticks(p) for n, p in pids.items()}
        time.sleep(args.idle)
        print(f"\nidle {args.idle:.0f} s, no scrapes:")
        idle = {}
        for name, pid in pids.items():
            ticks = cpu_ticks(pid) - ticks0[name]
            percent = max(ticks, 1) / TICK / args.idle * 100
            bound = "<" if ticks == 0 else "="
            idle[name] = (percent if ticks else 0.0, rss_kib(pid))
            print(f"  {name:<18} CPU {bound} {percent:.3f}% of one core   "
                  f"RSS {idle[name][1] / 1024:6.1f} MiB")
        if peer:
            hp, ne = idle["hpcnode_exporter"], idle["node_exporter"]
            cpu_ratio = f"{hp[0] / ne[0]:.2f}" if ne[0] else "n/a (node_exporter below one tick)"
            print(f"  ratio hpcnode/node_exporter: CPU {cpu_ratio}  RSS {hp[1] / ne[1]:.2f}")
    finally:
        stop(hpcnode)
        if peer:
            stop(peer)


if __name__ == "__main__":
    main()
