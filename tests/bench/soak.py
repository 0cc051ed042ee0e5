#!/usr/bin/python3
"""Soak bench: hpcnode_exporter scraped for a long time under churn and hostile clients.

Scrapes at a steady rate a 64-HCA tree whose devices appear and vanish, while other clients
hold idle connections, send request heads a line at a time, never read their responses and
send garbage. Reports the exporter's RSS, open fds and threads over the run, scrape latency,
HTTP errors and the exporter's own error counters. Standard library only; a benchmark, not a
test: it exits 0 unless it cannot run or the exporter dies. See tests/bench/README.md.
"""

import argparse
import collections
import multiprocessing
import os
import queue
import random
import re
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scrape_bench  # noqa: E402  (the tree generator and the process wrapper)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the exporter's resources


def resources(pid):
    """(RSS in KiB, open fds, threads) of a process."""
    rss = threads = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, len(os.listdir("/proc/%d/fd" % pid)), threads


class Sampler(threading.Thread):
    """Samples the exporter's resources once a second."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.samples = []  # (seconds since start, rss KiB, fds, threads)
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        while not self.stop.wait(1.0):
            try:
                self.samples.append((time.monotonic() - self.t0,) + resources(self.pid))
            except OSError:
                return  # the exporter is gone; the main loop notices


# ---------------------------------------------------------------------------------------------
# devices that appear and vanish


class Churn(threading.Thread):
    """Every tick, one device of the pool vanishes (its class link, then its PCI function
    directory, moved out of the tree, the order of the kernel's device_del) or comes back
    (directory, then link). Renames within one filesystem, so each step is atomic."""

    def __init__(self, sysfs, parking, pool, hz, seed):
        super().__init__(daemon=True)
        self.cls = os.path.join(sysfs, "class", "infiniband")
        self.parking = parking
        self.hz = hz
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.toggles = 0
        self.errors = collections.Counter()
        self.present = {}
        for name in pool:
            link = os.path.join(self.cls, name)
            function = os.path.dirname(os.path.dirname(os.path.realpath(link)))
            self.present[name] = (link, function)
        os.makedirs(os.path.join(parking, "class"))
        os.makedirs(os.path.join(parking, "devices"))

    def parked(self, name):
        link, function = self.present[name]
        return (os.path.join(self.parking, "class", name),
                os.path.join(self.parking, "devices", os.path.basename(function)))

    def toggle(self, name):
        link, function = self.present[name]
        parked_link, parked_function = self.parked(name)
        if os.path.lexists(link):
            os.rename(link, parked_link)
            os.rename(function, parked_function)
        else:
            os.rename(parked_function, function)
            os.rename(parked_link, link)

    def run(self):
        names = sorted(self.present)
        if not names:
            return
        period = 1.0 / self.hz
        next_t = time.monotonic()
        while not self.stop.is_set():
            try:
                self.toggle(self.rng.choice(names))
                self.toggles += 1
            except OSError as e:
                self.errors[type(e).__name__] += 1
            next_t += period
            self.stop.wait(max(0.0, next_t - time.monotonic()))

    def restore(self):
        for name in self.present:
            if not os.path.lexists(self.present[name][0]):
                self.toggle(name)

    def missing(self):
        return sum(1 for link, _ in self.present.values() if not os.path.lexists(link))


# ---------------------------------------------------------------------------------------------
# hostile clients, in a process of their own so that they do not share the scraper's GIL

GARBAGE = {
    "random_bytes": lambda: os.urandom(1024),
    "tls_client_hello": lambda: b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + os.urandom(32),
    "unknown_method": lambda: b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "http_9_9": lambda: b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
    "http_0_9": lambda: b"GET /metrics\r\n\r\n",
    "long_uri": lambda: b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "huge_header": lambda: (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20000
                            + b"\r\n\r\n"),
    "bad_content_length": lambda: b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "bad_chunk": lambda: (b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"zz\r\n"),
    "huge_body_then_close": lambda: (b"POST /metrics HTTP/1.1\r\nHost: x\r\n"
                                     b"Content-Length: 100000000\r\n\r\n" + b"c" * 4096),
    "path_traversal": lambda: b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    "nul_in_header": lambda: b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "pipelined_100": lambda: b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n" * 100,
}

STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3})")


def connect(port, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def closed_by_server(s):
    """True once the server has closed or reset a connection (an error response before the
    close counts as closed: nothing else comes on these connections)."""
    try:
        s.setblocking(False)
        s.recv(65536)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.setblocking(True)


HELD = {
    # kind: (receive buffer, sent on connect, sent every second, detect the server's close)
    "idle": (None, b"", None, True),
    "slowloris": (None, b"GET /metrics HTTP/1.1\r\n", b"X-Slow: y\r\n", True),
    # A small receive buffer, so the response fills it at once; the server's close is not
    # watched, since it would mean reading.
    "no_read": (4096, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", None, False),
}


def held_connections(kind, port, n, hold, stop, stats, lifetimes):
    """Keeps n connections of one kind open; replaces those the server closes, and all after
    `hold` seconds (if given)."""
    rcvbuf, first, every_second, watch = HELD[kind]
    conns = []
    while not stop.is_set():
        while len(conns) < n and not stop.is_set():
            try:
                s = connect(port, rcvbuf)
                s.sendall(first)
                conns.append((s, time.monotonic()))
                stats[kind + ".opened"] += 1
            except OSError as e:
                stats[kind + ".connect_error_" + type(e).__name__] += 1
                stop.wait(0.5)
        kept = []
        for s, opened in conns:
            age = time.monotonic() - opened
            try:
                if watch and closed_by_server(s):
                    raise ConnectionResetError
                if every_second:
                    s.sendall(every_second)
            except OSError:
                stats[kind + ".closed_by_server"] += 1
                lifetimes.append(age)
                s.close()
                continue
            if hold and age >= hold:
                stats[kind + ".replaced"] += 1
                s.close()
                continue
            kept.append((s, opened))
        conns = kept
        stop.wait(1.0)
    for s, _ in conns:
        s.close()


def send_garbage(port, rate, seed, stop, stats):
    """Connects, sends one garbage payload, reads the status line if any, closes; `rate` a
    second."""
    rng = random.Random(seed)
    names = sorted(GARBAGE)
    next_t = time.monotonic()
    while not stop.is_set():
        name = rng.choice(names)
        try:
            s = connect(port)
            try:
                s.settimeout(3)
                try:
                    s.sendall(GARBAGE[name]())
                except OSError:
                    pass  # the server may answer and close before it has taken it all
                data = s.recv(256)
                m = STATUS.match(data)
                outcome = m.group(1).decode() if m else ("closed" if not data else "no_status")
            finally:
                s.close()
        except socket.timeout:
            outcome = "timeout"
        except OSError as e:
            outcome = type(e).__name__
        stats["garbage.%s.%s" % (name, outcome)] += 1
        next_t += 1.0 / rate
        stop.wait(max(0.0, next_t - time.monotonic()))


def hostile_main(port, cfg, stop, results):
    """The hostile clients, one thread per kind; puts their counts on `results` when `stop`
    is set."""
    counts = [collections.Counter() for _ in range(len(HELD) + 1)]  # one per thread
    lifetimes = collections.defaultdict(list)
    threads = [threading.Thread(target=send_garbage, args=(
        port, cfg["garbage_rate"], cfg["seed"], stop, counts[0]))]
    for kind, count in zip(HELD, counts[1:]):
        hold = cfg["no_read_hold"] if kind == "no_read" else None
        threads.append(threading.Thread(target=held_connections, args=(
            kind, port, cfg[kind], hold, stop, count, lifetimes[kind])))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = sum(counts, collections.Counter())
    for kind, ages in lifetimes.items():
        if ages:
            stats[kind + ".median_seconds_to_close"] = round(statistics.median(ages))
    results.put(dict(stats))


# ---------------------------------------------------------------------------------------------
# the run

ERRORS = re.compile(r'^hpcnode_collector_errors_total\{collector="([^"]+)",kind="([^"]+)"\} (\d+)$',
                    re.M)
SUCCESS = re.compile(r'^hpcnode_scrape_collector_success\{collector="([^"]+)"\} (\d+)$', re.M)
MESSAGE = re.compile(r' msg=("[^"]*"|\S+)')
DEVICE = re.compile(r'^hpcnode_rdma_port_state_id\{device="([^"]+)"', re.M)


def fmt_res(sample):
    _, rss, fds, threads = sample
    return "RSS %6.1f MiB  fds %4d  threads %3d" % (rss / 1024.0, fds, threads)


def ms(values, q):
    return scrape_bench.percentile(values, q) * 1000 if values else float("nan")


def soak(args):
    workdir = tempfile.mkdtemp(prefix="hpcnode-soak-")
    target = None
    churn = sampler = hostile = None
    stop_hostile = multiprocessing.Event()
    results = multiprocessing.Queue()
    try:
        sysfs = scrape_bench.make_tree(workdir, args.hcas)
        pool = ["mlx5_%d" % i for i in range(args.hcas - args.churn_pool, args.hcas)]
        churn = Churn(sysfs, os.path.join(workdir, "parked"), pool, args.churn_hz, args.seed)
        target = scrape_bench.Target(
            "hpcnode", lambda port: [args.exporter, "--web.listen-address=127.0.0.1:%d" % port,
                                     "--path.sysfs=%s" % sysfs, "--collector.disable-defaults",
                                     "--collector.rdma"] + args.exporter_arg,
            workdir, args)
        target.start()
        pid = target.proc.pid
        for _ in range(args.warmup):
            target.scrape()
        baseline = (0.0,) + resources(pid)
        target.latencies.clear()
        target.reconnects = 0

        # Forked before this process starts threads of its own.
        hostile = multiprocessing.Process(target=hostile_main, daemon=True, args=(
            target.port, {"idle": args.idle, "slowloris": args.slowloris,
                          "no_read": args.no_read, "no_read_hold": args.no_read_hold,
                          "garbage_rate": args.garbage_rate, "seed": args.seed},
            stop_hostile, results))
        hostile.start()
        sampler = Sampler(pid)
        sampler.start()
        churn.start()

        http_errors = collections.Counter()
        success_zero = collections.Counter()
        device_counts = collections.Counter()
        scrapes = late = 0
        last_body = ""
        period = 1.0 / args.rate
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        next_t = t0
        next_report = t0 + args.report_every
        window = []
        print("%6s  %-44s %8s %8s %8s" % ("t (s)", "exporter", "scrapes", "p50 ms", "p99 ms"))
        while time.monotonic() < end:
            if target.proc.poll() is not None:
                raise RuntimeError("the exporter exited with status %d after %.0f s; log tail:\n%s"
                                   % (target.proc.returncode, time.monotonic() - t0,
                                      target.log_tail()))
            before = len(target.latencies)
            try:
                status, body = target.scrape()
                scrapes += 1
                if status != 200:
                    http_errors["status %d" % status] += 1
                else:
                    last_body = body.decode("utf-8", "replace")
                    for collector, value in SUCCESS.findall(last_body):
                        if value == "0":
                            success_zero[collector] += 1
                    device_counts[len(set(DEVICE.findall(last_body)))] += 1
            except Exception as e:  # noqa: BLE001  (every failure of a scrape is a result)
                http_errors[type(e).__name__] += 1
                if target.conn is not None:
                    target.conn.close()
                    target.conn = None
            window.extend(target.latencies[before:])
            now = time.monotonic()
            if now >= next_report and sampler.samples:
                print("%6.0f  %-44s %8d %8.2f %8.2f" % (
                    now - t0, fmt_res(sampler.samples[-1]), scrapes, ms(window, 0.5),
                    ms(window, 0.99)), flush=True)
                window = []
                next_report += args.report_every
            next_t += period
            if next_t < now - period:
                late += 1  # more than one period behind: start again from now, no burst
                next_t = now
            time.sleep(max(0.0, next_t - time.monotonic()))
        elapsed = time.monotonic() - t0

        run_samples = list(sampler.samples)
        missing_at_end = churn.missing()
        stop_hostile.set()
        churn.stop.set()
        churn.join(5)
        try:
            hostile_stats = results.get(timeout=30)
        except queue.Empty:
            hostile_stats = {}
        hostile.join(10)
        time.sleep(3)  # closed connections and finished threads released
        after = (0.0,) + resources(pid)
        churn.restore()
        try:
            status, body = target.scrape()
            final = body.decode("utf-8", "replace") if status == 200 else last_body
        except Exception:  # noqa: BLE001  (then the last good scrape of the run)
            final = last_body
        sampler.stop.set()

        report(args, elapsed, scrapes, late, target, http_errors, success_zero, device_counts,
               baseline, run_samples, after, churn, missing_at_end, hostile_stats, final)
        return 0
    finally:
        stop_hostile.set()
        if hostile is not None:
            hostile.join(10)
            if hostile.is_alive():
                hostile.terminate()
        if churn is not None:
            churn.stop.set()
        if target is not None:
            target.stop()
        if args.keep:
            log("kept %s (exporter log: hpcnode.log)" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def report(args, elapsed, scrapes, late, target, http_errors, success_zero, device_counts,
           baseline, samples, after, churn, missing_at_end, hostile, final):
    lat = target.latencies
    print()
    print("%.1f min, %d HCAs x 2 ports, %d of them appearing and vanishing (%d moves at %g Hz); "
          "target %g scrapes/s, Prometheus headers, keep-alive"
          % (elapsed / 60, args.hcas, args.churn_pool, churn.toggles, args.churn_hz, args.rate))
    print("hostile clients: %d idle, %d slowloris, %d never reading (each held %g s), "
          "garbage %g/s" % (args.idle, args.slowloris, args.no_read, args.no_read_hold,
                            args.garbage_rate))
    print()
    print("exporter resources:")
    print("  before load  %s" % fmt_res(baseline))
    if samples:
        # Start: once every hostile client has connected (the held ones within seconds).
        start = next((x for x in samples if x[0] >= 10), samples[-1])
        print("  start (%3.0fs) %s" % (start[0], fmt_res(start)))
        print("  end (%5.0fs) %s" % (samples[-1][0], fmt_res(samples[-1])))
        print("  max          RSS %6.1f MiB  fds %4d  threads %3d" % (
            max(s[1] for s in samples) / 1024.0, max(s[2] for s in samples),
            max(s[3] for s in samples)))
    print("  after load   %s  (3 s after the hostile clients closed)" % fmt_res(after))
    print()
    print("scrapes: %d (%.2f/s), %d fell more than one period behind" % (
        scrapes, scrapes / elapsed, late))
    if lat:
        print("  latency p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (
            ms(lat, 0.5), ms(lat, 0.99), max(lat) * 1000))
    print("  HTTP errors: %s; reconnects (server closed a kept-alive connection): %d" % (
        ", ".join("%s %d" % kv for kv in sorted(http_errors.items())) or "none",
        target.reconnects))
    print("  collector success 0 in: %s" % (
        ", ".join("%s %d scrapes" % kv for kv in sorted(success_zero.items())) or "no scrape"))
    lo, hi = args.hcas - args.churn_pool, args.hcas
    odd = {n: c for n, c in device_counts.items() if not lo <= n <= hi}
    print("  devices per scrape: %d..%d (expected %d..%d)%s" % (
        min(device_counts) if device_counts else 0, max(device_counts) if device_counts else 0,
        lo, hi, "; outside: %s" % odd if odd else ""))
    print("  churn: %d moves, %d devices parked when the run ended, move errors: %s" % (
        churn.toggles, missing_at_end, dict(churn.errors) or "none"))
    print()
    print("hpcnode_collector_errors_total at the end (all kinds, every collector):")
    for collector, kind, value in ERRORS.findall(final):
        print("  %-8s %-18s %s" % (collector, kind, value))
    print()
    print("hostile clients:")
    if not hostile:
        print("  (no report from the hostile process)")
    groups = collections.defaultdict(dict)
    for key, value in sorted(hostile.items()):
        kind, _, what = key.partition(".")
        groups[kind][what] = value
    for kind in ("idle", "slowloris", "no_read"):
        if kind in groups:
            print("  %-10s %s" % (kind, ", ".join("%s %d" % kv for kv in
                                                  sorted(groups[kind].items()))))
    garbage = collections.defaultdict(dict)
    for what, value in groups.get("garbage", {}).items():
        name, _, outcome = what.partition(".")
        garbage[name][outcome] = value
    for name in sorted(garbage):
        print("  garbage %-22s %s" % (name, ", ".join(
            "%s x%d" % kv for kv in sorted(garbage[name].items()))))
    print()
    print("exporter log: %d lines; by message:" % len(log_lines(target)))
    messages = collections.Counter(
        m.group(1).strip('"') for m in map(MESSAGE.search, log_lines(target)) if m)
    for message, count in messages.most_common(10):
        print("  %6d  %s" % (count, message))
    sys.stdout.flush()


def log_lines(target):
    try:
        with open(os.path.join(target.logdir, "hpcnode.log"), "rb") as f:
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--exporter",
                    default=os.path.join(scrape_bench.REPO, "target/release/hpcnode_exporter"),
                    help="hpcnode_exporter binary (default: %(default)s)")
    ap.add_argument("--minutes", type=float, default=30.0, help="length of the run")
    ap.add_argument("--rate", type=float, default=20.0, help="scrapes per second")
    ap.add_argument("--hcas", type=int, default=64, help="HCAs in the tree, 2 ports each")
    ap.add_argument("--churn-pool", type=int, default=16,
                    help="how many of the HCAs (the last ones) appear and vanish")
    ap.add_argument("--churn-hz", type=float, default=10.0, help="device moves per second")
    ap.add_argument("--idle", type=int, default=50, help="idle connections held open")
    ap.add_argument("--slowloris", type=int, default=20,
                    help="connections sending a request head one line a second")
    ap.add_argument("--no-read", type=int, default=10,
                    help="connections that request /metrics and never read")
    ap.add_argument("--no-read-hold", type=float, default=30.0,
                    help="seconds a never-reading connection is held before it is replaced")
    ap.add_argument("--garbage-rate", type=float, default=5.0, help="garbage requests per second")
    ap.add_argument("--warmup", type=int, default=20, help="scrapes before the load starts")
    ap.add_argument("--report-every", type=float, default=60.0,
                    help="seconds between progress lines")
    ap.add_argument("--seed", type=int, default=1, help="seed of the churn and garbage choices")
    ap.add_argument("--exporter-arg", action="append", default=[],
                    help="extra argument for hpcnode_exporter (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the tree and the exporter log")
    args = ap.parse_args()
    # What scrape_bench.Target reads from its arguments.
    args.start_timeout, args.request_timeout = 20.0, 10.0
    args.prometheus_headers, args.new_connection = True, False

    if not (os.path.isfile(args.exporter) and os.access(args.exporter, os.X_OK)):
        log("no %s: build it first (cargo build --release), or pass --exporter" % args.exporter)
        return 2
    if not 1 <= args.hcas <= 255 or not 0 <= args.churn_pool <= args.hcas:
        log("--hcas must be 1..255 and --churn-pool 0..--hcas")
        return 2
    print("hpcnode_exporter: %s" % args.exporter)
    print("host: %d CPUs, %s, load average %s" % (
        os.cpu_count(), os.uname().release, " ".join("%.2f" % x for x in os.getloadavg())))
    try:
        return soak(args)
    except RuntimeError as e:
        log(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
