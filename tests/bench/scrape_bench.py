#!/usr/bin/python3
"""Scrape benchmark: hpcnode_exporter against node_exporter's infiniband collector.

Generates a sysfs tree of N mlx5-like HCAs x 2 ports, starts both exporters on it side by side,
scrapes them alternately and prints latency, CPU time per scrape and peak RSS for each.
Standard library only; a benchmark, not a test: it exits 0 unless it cannot run at all.
See tests/bench/README.md.
"""

import argparse
import gzip
import http.client
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PMA_COUNTERS = [
    "VL15_dropped", "excessive_buffer_overrun_errors", "link_downed",
    "link_error_recovery", "local_link_integrity_errors", "multicast_rcv_packets",
    "multicast_xmit_packets", "port_rcv_constraint_errors", "port_rcv_data",
    "port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_data",
    "port_xmit_discards", "port_xmit_packets", "port_xmit_wait", "symbol_error",
    "unicast_rcv_packets", "unicast_xmit_packets",
]  # 21, as an mlx5 port has

HW_COUNTERS = [
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect",
    "out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err",
    "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err",
    "resp_local_length_error", "resp_cqe_error", "req_cqe_error",
    "req_remote_invalid_request", "req_remote_access_errors", "resp_remote_access_errors",
    "resp_cqe_flush_error", "req_cqe_flush_error", "roce_adp_retrans", "roce_adp_retrans_to",
    "roce_slow_restart", "roce_slow_restart_cnps", "roce_slow_restart_trans", "lifespan",
]  # 25 with lifespan

PROM_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,"
               "text/plain;version=0.0.4;q=0.4,*/*;q=0.1")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# tree


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


# A RoCE port's GID table: mlx5's 255 entries, the first two (its default GIDs, RoCE v1 and v2)
# bound to its network device; the kernel fails reads of the unused ones, a tree has them empty.
ROCE_GIDS = 255


def make_tree(root, n_hcas, ports=2, ethernet=False, domain=0):
    """A sysfs root with n_hcas ConnectX-6-like devices in the real layout (class symlinks into
    devices/pci..., device and driver links); with `ethernet`, RoCE ports (link layer Ethernet,
    a GID table of ROCE_GIDS entries). Their PCI functions are in PCI `domain`, so that a tree
    another generator filled (check_bench.py: pci_bench.py's devices, domain 0) can have them
    too. Returns the sysfs root path."""
    sysfs = os.path.join(root, "sys")
    cls = os.path.join(sysfs, "class", "infiniband")
    drv = os.path.join(sysfs, "bus", "pci", "drivers", "mlx5_core")
    os.makedirs(cls, exist_ok=True)
    os.makedirs(drv, exist_ok=True)
    for i in range(n_hcas):
        name = "mlx5_%d" % i
        bridge = "%04x:00:%02x.%d" % (domain, 1 + i // 8, i % 8)
        addr = "%04x:%02x:00.0" % (domain, i + 1)
        pci = os.path.join(sysfs, "devices", "pci%04x:00" % domain, bridge, addr)
        dev = os.path.join(pci, "infiniband", name)
        os.makedirs(dev)
        _write(os.path.join(pci, "vendor"), "0x15b3\n")
        _write(os.path.join(pci, "device"), "0x101b\n")
        _write(os.path.join(pci, "class"), "0x020700\n")
        os.symlink(os.path.relpath(drv, pci), os.path.join(pci, "driver"))
        os.symlink(os.path.relpath(pci, drv), os.path.join(drv, addr))
        os.symlink(os.path.relpath(dev, cls), os.path.join(cls, name))
        os.symlink(os.path.join("../../..", addr), os.path.join(dev, "device"))
        guid = "506b:4b03:00%02x:%04x" % (i // 256, i % 256)
        for f, v in [("fw_ver", "20.39.1002"), ("board_id", "MT_0000000223"),
                     ("hca_type", "MT4123"), ("hw_rev", "0"), ("node_guid", guid),
                     ("sys_image_guid", guid), ("node_type", "1: CA"),
                     ("node_desc", "bench %s" % name)]:
            _write(os.path.join(dev, f), v + "\n")
        for p in range(1, ports + 1):
            pd = os.path.join(dev, "ports", str(p))
            for sub in ("counters", "hw_counters", "gid_attrs/types", "gid_attrs/ndevs", "gids"):
                os.makedirs(os.path.join(pd, sub))
            for f, v in [("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                         ("rate", "200 Gb/sec (4X HDR)"),
                         ("link_layer", "Ethernet" if ethernet else "InfiniBand"),
                         ("lid", "0x0" if ethernet else "0x%x" % (2 * i + p)),
                         ("sm_lid", "0x0" if ethernet else "0x1"),
                         ("lid_mask_count", "0"), ("sm_sl", "0"), ("cap_mask", "0x2659e848")]:
                _write(os.path.join(pd, f), v + "\n")
            _write(os.path.join(pd, "gids", "0"), "fe80:0000:0000:0000:%s\n" % guid)
            if ethernet:
                netdev = "ens%df%dnp%d\n" % (i + 1, p - 1, p - 1)
                for g in range(ROCE_GIDS):
                    used = g < 2
                    _write(os.path.join(pd, "gid_attrs", "types", str(g)),
                           ("IB/RoCE v1\n", "RoCE v2\n")[g] if used else "")
                    _write(os.path.join(pd, "gid_attrs", "ndevs", str(g)), netdev if used else "")
            else:
                _write(os.path.join(pd, "gid_attrs", "types", "0"), "IB/RoCE v1\n")
                _write(os.path.join(pd, "gid_attrs", "ndevs", "0"), "")
            for k, c in enumerate(PMA_COUNTERS):
                _write(os.path.join(pd, "counters", c), "%d\n" % ((i + 1) * 1000003 * (k + 1) + p))
            for k, c in enumerate(HW_COUNTERS):
                v = 10 if c == "lifespan" else (i + 1) * 7919 * (k + 1) + p
                _write(os.path.join(pd, "hw_counters", c), "%d\n" % v)
    return sysfs


# ---------------------------------------------------------------------------------------------
# processes


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Target:
    """One exporter process under test."""

    def __init__(self, label, argv_fn, logdir, args):
        self.label = label
        self.argv_fn = argv_fn
        self.logdir = logdir
        self.args = args
        self.proc = None
        self.port = None
        self.conn = None
        self.logfile = None
        self.argv = None
        self.latencies = []
        self.reconnects = 0
        self.body_bytes = 0
        self.samples = 0
        self.cpu_ticks = 0
        self.switch_count = 0  # switches() at the start of the timed scrapes, then the count
        self.hwm_kib = None
        self.anon_kib = None
        self.file_kib = None
        self.rss_kib = None
        self.check = ""

    def start(self):
        for _attempt in range(3):
            self.port = free_port()
            self.argv = self.argv_fn(self.port)
            self.logfile = open(os.path.join(self.logdir, "%s.log" % self.label), "wb")
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=self.logfile, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            deadline = time.monotonic() + self.args.start_timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    status, _ = self._get_once(new_conn=True)
                    if status == 200:
                        return
                except OSError:
                    pass
                time.sleep(0.05)
            tail = self.log_tail()
            rc = self.proc.poll()
            self.stop()
            if "address already in use" not in tail.lower():
                why = ("exited with status %d" % rc if rc is not None else
                       "did not answer on 127.0.0.1:%d within %.0fs"
                       % (self.port, self.args.start_timeout))
                raise RuntimeError("%s %s.\ncommand: %s\nlog tail:\n%s"
                                   % (self.label, why, " ".join(self.argv), tail))
        raise RuntimeError("%s: no free port after 3 tries" % self.label)

    def log_tail(self, n=2000):
        try:
            with open(os.path.join(self.logdir, "%s.log" % self.label), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def _headers(self):
        if self.args.prometheus_headers:
            return {"Accept": PROM_ACCEPT, "Accept-Encoding": "gzip"}
        return {}

    def _get_once(self, new_conn):
        if new_conn or self.conn is None:
            if self.conn is not None:
                self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                   timeout=self.args.request_timeout)
        self.conn.request("GET", "/metrics", headers=self._headers())
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if resp.will_close:
            self.conn.close()
            self.conn = None
        return resp.status, body

    def scrape(self):
        """One timed scrape; returns (status, body)."""
        t0 = time.perf_counter()
        try:
            status, body = self._get_once(new_conn=self.args.new_connection)
        except (http.client.HTTPException, ConnectionError):
            # the server dropped a kept-alive connection: retry once on a fresh one
            self.reconnects += 1
            t0 = time.perf_counter()
            status, body = self._get_once(new_conn=True)
        self.latencies.append(time.perf_counter() - t0)
        return status, body

    def cpu(self):
        return sum(self.cpu_split())

    def switches(self):
        """Voluntary and involuntary context switches so far, by thread id, of the threads
        alive now."""
        counts = {}
        for task in os.listdir("/proc/%d/task" % self.proc.pid):
            try:
                with open("/proc/%d/task/%s/status" % (self.proc.pid, task)) as f:
                    counts[task] = sum(int(line.split()[1]) for line in f
                                       if line.startswith(("voluntary_ctxt_switches:",
                                                           "nonvoluntary_ctxt_switches:")))
            except (OSError, IndexError, ValueError):
                pass
        return counts

    def switches_since(self, before):
        """Context switches since `before` (from `switches`), thread by thread: a thread made
        since counts whole, one that has exited since takes its switches with it."""
        return sum(n - before.get(task, 0) for task, n in self.switches().items())

    def cpu_split(self):
        """User and system CPU time so far, in clock ticks."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])  # utime, stime (fields 14, 15)

    def memory(self):
        vals = {}
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(("VmHWM:", "VmRSS:", "RssAnon:", "RssFile:")):
                    k, v = line.split(":", 1)
                    vals[k] = int(v.split()[0])
        self.hwm_kib = vals.get("VmHWM")
        self.rss_kib = vals.get("VmRSS")
        # What RSS is made of: the heap and stacks, and mapped files (the binary's own pages,
        # libraries), which differ between two builds of the same code with its layout.
        self.anon_kib = vals.get("RssAnon")
        self.file_kib = vals.get("RssFile")

    def _signal_and_wait(self, sig):
        """Signals the process group; True once the process has exited (waits at most 5 s)."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=5)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.proc is not None and self.proc.poll() is None:
            if not self._signal_and_wait(signal.SIGTERM) and \
                    not self._signal_and_wait(signal.SIGKILL):
                log("warning: %s (pid %d) did not exit after SIGKILL"
                    % (self.label, self.proc.pid))
        if self.logfile is not None:
            self.logfile.close()
            self.logfile = None


# ---------------------------------------------------------------------------------------------
# checks

PORT_SERIES = {
    "hpcnode": re.compile(r'^hpcnode_rdma_port_[a-z_]+\{([^}]*)\}'),
    "node_exporter": re.compile(r'^node_infiniband_[a-z_]+\{([^}]*)\}'),
}
PORT_SERIES["hpcnode-compare"] = PORT_SERIES["hpcnode"]
SUCCESS = {
    "hpcnode": 'hpcnode_scrape_collector_success{collector="rdma"} 1',
    "node_exporter": 'node_scrape_collector_success{collector="infiniband"} 1',
}
SUCCESS["hpcnode-compare"] = SUCCESS["hpcnode"]
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def check_body(label, status, body, n_ports):
    """Returns a short verdict string: 'ok ...' or 'BAD ...'."""
    if status != 200:
        return "BAD status %d" % status
    text = body.decode("utf-8", "replace")
    ports = set()
    samples = 0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        samples += 1
        m = PORT_SERIES[label].match(line)
        if m:
            labels = dict(LABEL.findall(m.group(1)))
            if "port" in labels:
                ports.add((labels.get("device"), labels["port"]))
    problems = []
    if len(ports) != n_ports:
        problems.append("%d port series, expected %d" % (len(ports), n_ports))
    if SUCCESS[label] not in text:
        problems.append("collector success != 1")
    verdict = "%d samples, %d ports" % (samples, len(ports))
    return ("BAD " + "; ".join(problems) + " (" + verdict + ")") if problems else "ok " + verdict


# ---------------------------------------------------------------------------------------------
# run


def prepared(args):
    """For a benchmark of one exporter whose own flags do not set them: gives `args` what Target
    reads, and says whether `args.exporter` is built (False after saying how to build it)."""
    args.start_timeout, args.request_timeout = 20.0, 30.0
    args.prometheus_headers, args.new_connection = False, False
    if not os.path.exists(args.exporter):
        print("no %s: build it first (cargo build --release)" % args.exporter)
        return False
    return True


def finish(targets, workdir, keep):
    """Stops `targets`, and removes `workdir` unless `keep` (then says where it is)."""
    for target in targets:
        target.stop()
    if keep:
        print("tree kept in " + workdir)
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def percentile(values, q):
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def run_one(n, args, exporter, node_exporter):
    workdir = tempfile.mkdtemp(prefix="hpcnode-bench-%d-" % n)
    targets = []
    try:
        sysfs = make_tree(workdir, n, ethernet=args.link_layer == "ethernet")
        n_files = sum(len(fs) for _, _, fs in os.walk(sysfs))
        floor_ms = read_floor(workdir, os.path.join(sysfs, "devices"))
        held_floor = read_floor(workdir, os.path.join(sysfs, "devices"), held=True)
        collectors = [] if args.all_collectors else ["--collector.disable-defaults",
                                                     "--collector.rdma"]
        if exporter:
            targets.append(Target(
                "hpcnode", lambda port: [exporter, "--web.listen-address=127.0.0.1:%d" % port]
                + collectors + ["--path.sysfs=%s" % sysfs] + args.exporter_arg,
                workdir, args))
        if args.compare:
            targets.append(Target(
                "hpcnode-compare",
                lambda port: [args.compare, "--web.listen-address=127.0.0.1:%d" % port]
                + collectors + ["--path.sysfs=%s" % sysfs] + args.exporter_arg,
                workdir, args))
        if node_exporter:
            targets.append(Target(
                "node_exporter",
                lambda port: [node_exporter, "--web.listen-address=127.0.0.1:%d" % port,
                              "--collector.disable-defaults", "--collector.infiniband",
                              "--path.sysfs=%s" % sysfs] + args.node_exporter_arg,
                workdir, args))
        for t in targets:
            t.start()
        # warm up, and check the content once
        for i in range(args.warmup):
            for t in targets:
                status, body = t.scrape()
                if i == 0:
                    t.check = check_body(t.label, status, body, 2 * n)
        for t in targets:
            t.latencies.clear()
            t.reconnects = 0
            t.cpu_ticks = t.cpu()
            t.switch_count = t.switches()
        last = {}
        for i in range(args.scrapes):
            order = targets if i % 2 == 0 else list(reversed(targets))
            for t in order:
                status, body = t.scrape()
                if status != 200:
                    t.check = "BAD status %d at scrape %d" % (status, i)
                last[t.label] = (status, body)
        for t in targets:
            t.cpu_ticks = t.cpu() - t.cpu_ticks
            t.switch_count = t.switches_since(t.switch_count)
            t.memory()
            status, body = last[t.label]
            t.body_bytes = len(body)
            t.samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            final = check_body(t.label, status, body, 2 * n)
            if final.startswith("BAD") and not t.check.startswith("BAD"):
                t.check = final + " (last scrape)"
        return {"n": n, "files": n_files, "targets": targets, "floor_ms": floor_ms,
                "held_floor": held_floor}
    finally:
        for t in targets:
            t.stop()
        if args.keep:
            log("kept %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def read_floor(workdir, tree, held=False):
    """Milliseconds one thread needs to open, read and close every file of the tree once
    (tests/bench/read_floor.c), or None without a C compiler; with `held`, (files, milliseconds)
    of one pread of each file kept open."""
    binary = os.path.join(workdir, "read_floor")
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "read_floor.c")
    try:
        subprocess.run(["cc", "-O2", "-o", binary, source], check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = subprocess.run([binary, tree, "50"] + (["held"] if held else []), check=True,
                             timeout=120, capture_output=True, text=True).stdout.split()
        return (int(out[0]), float(out[1])) if held else float(out[1])
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return None


def print_table(res, args):
    tick_ms = 1000.0 / os.sysconf("SC_CLK_TCK")
    by = {t.label: t for t in res["targets"]}
    rows = [
        ("latency median (ms)", lambda t: statistics.median(t.latencies) * 1000, "%.2f"),
        ("latency p99 (ms)", lambda t: percentile(t.latencies, 0.99) * 1000, "%.2f"),
        ("CPU per scrape (ms)", lambda t: t.cpu_ticks * tick_ms / args.scrapes, "%.2f"),
        ("context switches / scrape", lambda t: t.switch_count / args.scrapes, "%.1f"),
        ("peak RSS VmHWM (MiB)", lambda t: t.hwm_kib / 1024.0, "%.1f"),
        ("RSS at end: anon (MiB)", lambda t: t.anon_kib / 1024.0, "%.1f"),
        ("RSS at end: file (MiB)", lambda t: t.file_kib / 1024.0, "%.1f"),
        ("body, uncompressed (KiB)", lambda t: t.body_bytes / 1024.0, "%.1f"),
        ("samples per scrape", lambda t: t.samples, "%d"),
        ("CPU per 1000 samples (ms)",
         lambda t: t.cpu_ticks * tick_ms / args.scrapes / max(t.samples, 1) * 1000, "%.2f"),
    ]
    print()
    print("N=%d HCAs x 2 ports = %d ports, %d files in the tree; %d interleaved scrapes each "
          "after %d warm-up, %s%s"
          % (res["n"], 2 * res["n"], res["files"], args.scrapes, args.warmup,
             "new connection per scrape" if args.new_connection else "keep-alive",
             ", Prometheus Accept + gzip" if args.prometheus_headers else ""))
    if args.link_layer == "ethernet":
        print("  (RoCE ports: the kernel floors below read their GID tables too, which neither "
              "exporter reads whole)")
    print("  %-26s %12s %14s %18s" % ("", "hpcnode", "node_exporter", "hpcnode/node_exp"))
    for name, fn, fmt in rows:
        vals = {k: (fn(t) if t.latencies else None) for k, t in by.items()}
        h, ne = vals.get("hpcnode"), vals.get("node_exporter")
        ratio = "%.2f" % (h / ne) if h is not None and ne else "-"
        print("  %-26s %12s %14s %18s" % (name, fmt % h if h is not None else "-",
                                           fmt % ne if ne is not None else "-", ratio))
    if res.get("floor_ms") is not None:
        floor = res["floor_ms"]
        print("  kernel floor: open+read+close of every file in the tree, one thread, C: %.2f ms"
              % floor)
        for k, t in by.items():
            if t.latencies:
                print("  %s CPU per scrape / kernel floor: %.2f"
                      % (k, t.cpu_ticks * tick_ms / args.scrapes / floor))
    if res.get("held_floor") is not None:
        files, held = res["held_floor"]
        print("  held floor: one pread of each of the %d files kept open, C: %.2f ms (%.2f us per "
              "file)" % (files, held, held * 1000 / max(files, 1)))
    compare = by.get("hpcnode-compare")
    if compare is not None and compare.latencies and by.get("hpcnode") is not None:
        for name, fn, fmt in rows[:5]:
            h, c = fn(by["hpcnode"]), fn(compare)
            print("  %-26s hpcnode-compare %s, hpcnode / hpcnode-compare %s"
                  % (name, fmt % c, "%.2f" % (h / c) if c else "-"))
    for k, t in by.items():
        extra = ", %d reconnects" % t.reconnects if t.reconnects else ""
        print("  %s: %s%s" % (k, t.check, extra))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--exporter", default=os.path.join(REPO, "target/release/hpcnode_exporter"),
                    help="hpcnode_exporter binary (default: %(default)s)")
    ap.add_argument("--node-exporter", default="prometheus-node-exporter",
                    help="node_exporter binary or name on PATH (default: %(default)s)")
    ap.add_argument("--hcas", default="1,16,64",
                    help="comma-separated HCA counts, 2 ports each (default: %(default)s)")
    ap.add_argument("--scrapes", type=int, default=200, help="timed scrapes per exporter")
    ap.add_argument("--warmup", type=int, default=20, help="untimed scrapes per exporter first")
    ap.add_argument("--new-connection", action="store_true",
                    help="open a new TCP connection per scrape (default: keep-alive)")
    ap.add_argument("--prometheus-headers", action="store_true",
                    help="send Prometheus' Accept header and Accept-Encoding: gzip")
    ap.add_argument("--request-timeout", type=float, default=30.0, help="seconds per request")
    ap.add_argument("--start-timeout", type=float, default=20.0,
                    help="seconds to wait for an exporter to answer")
    ap.add_argument("--link-layer", choices=("infiniband", "ethernet"), default="infiniband",
                    help="the ports' link layer: ethernet makes RoCE ports, each with a GID table "
                         "of %d entries" % ROCE_GIDS)
    ap.add_argument("--all-collectors", action="store_true",
                    help="run hpcnode_exporter with every collector on by default, as a node "
                    "runs it (its eBPF probes need root), not the rdma collector alone")
    ap.add_argument("--exporter-arg", action="append", default=[],
                    help="extra argument for hpcnode_exporter (repeatable)")
    ap.add_argument("--node-exporter-arg", action="append", default=[],
                    help="extra argument for node_exporter (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the generated trees and logs")
    ap.add_argument("--compare", metavar="PATH",
                    help="another hpcnode_exporter build (main's), scraped in the same "
                         "interleaved run as hpcnode-compare")
    args = ap.parse_args()

    exporter = args.exporter
    if not (os.path.isfile(exporter) and os.access(exporter, os.X_OK)):
        log("hpcnode_exporter not found at %s (build it with `cargo build --release`, or pass "
            "--exporter); measuring node_exporter alone." % exporter)
        exporter = None
    node_exporter = shutil.which(args.node_exporter)
    if node_exporter is None:
        log("node_exporter %r not found (Debian: apt-get install prometheus-node-exporter); "
            "measuring hpcnode_exporter alone." % args.node_exporter)
    if exporter is None and node_exporter is None:
        log("nothing to measure.")
        return 2
    try:
        counts = [int(x) for x in args.hcas.split(",") if x.strip()]
    except ValueError:
        log("--hcas: expected comma-separated integers, got %r" % args.hcas)
        return 2
    if any(c < 1 or c > 255 for c in counts):
        log("--hcas: each count must be 1..255")
        return 2

    print("hpcnode_exporter: %s" % (exporter or "(absent)"))
    print("node_exporter:    %s" % (node_exporter or "(absent)"))
    print("host: %d CPUs, %s" % (os.cpu_count(), os.uname().release))
    for n in counts:
        try:
            res = run_one(n, args, exporter, node_exporter)
        except RuntimeError as e:
            log("N=%d: %s" % (n, e))
            continue
        print_table(res, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
