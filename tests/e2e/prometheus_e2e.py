#!/usr/bin/python3
"""End to end against a real Prometheus: tests/e2e/run.sh <hpcnode_exporter binary>

Starts exporters on loopback, one on a writable copy of the real procfs fixture tree
(tests/fixtures/procfs/sys), one on tests/fixtures/rdma_edge/sys, and the modules collector
alone on the fixture roots tests/fixtures/modules_rhel7, modules_secureboot and modules_signed_files, and Debian's
prometheus on loopback with its own config (1 s scrapes, rule groups every 1.3 s), a temporary
storage directory and the rule files of alerts/. Then, through Prometheus's HTTP API:
  - `up` is 1 for both targets and every rule evaluates without error;
  - the recording rules give the numbers that the fixture's facts predict while the test
    drives the fixture's data counters at known rates (the data rates of 4X QDR, 4X EDR and
    1X EDR ports, the x4 data unit, the per-node sums, the transmit-wait fraction);
  - on the untouched edge tree exactly the expected alerts fire (the DOWN port, the four
    saturated counters), and none on the healthy procfs tree; on the modules roots exactly the
    missing expected modules, the unsigned loaded modules and the module files the kernel will
    refuse fire theirs;
  - an alert reaches `firing` when the test turns a port DOWN and resolves when it is ACTIVE
    again; symbol errors, a vanished port and a killed exporter fire theirs;
  - every dashboard query executes, and returns data except where the fixtures lack the input
    (hours of history; the ebpf collector's counters, not on this branch);
  - on a root with the incident's two copies of libibverbs (tests/fixtures/rdma_userspace_root.sh
    stale) its stale-library alert fires, naming the copy the linker takes;
  - an exporter under --web.config.file (TLS with a CA made here by openssl, basic auth) is
    scraped by Prometheus with `scheme: https`, `tls_config` and `basic_auth`, and a job with
    a wrong password is refused (up 0, counted by the exporter).
Every wait is bounded; the exporters and Prometheus are stopped on every exit path.

The alerting rules are loaded with their `for:` durations shortened to FOR_IN_TEST (minutes
would make the test take minutes); everything else, the recording rules and thresholds
included, is loaded exactly as in alerts/.
"""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
import lint  # noqa: E402  (the rule and dashboard helpers)

ROOT = lint.ROOT
PROCFS_TREE = ROOT / "tests" / "fixtures" / "procfs" / "sys"
EDGE_TREE = ROOT / "tests" / "fixtures" / "rdma_edge" / "sys"
# Xeon Phi host: mic0 online with a micras copy, mic1 stuck booting.
MIC_ROOT = ROOT / "tests" / "fixtures" / "mic_mpss3"
MODULES_ROOTS = {name: ROOT / "tests" / "fixtures" / f"modules_{name}" for name in ("rhel7", "secureboot", "signed_files")}
# PCI roots: a passthrough host (with its Kolla Nova configs: compute and API files, and the
# scheduler's), a failing host (with a nova.conf Nova refuses), and an SR-IOV host whose Nova
# alias names VFs.
KOLLA = ROOT / "tests" / "fixtures" / "pci_host" / "etc" / "kolla" / "config"
PCI_ROOTS = {
    "host": (ROOT / "tests" / "fixtures" / "pci_host",
             [f"--collector.pci.nova-config={KOLLA}/nova.conf",
              f"--collector.pci.nova-config={KOLLA}/nova/nova-compute.conf",
              f"--collector.pci.nova-config={KOLLA}/nova/nova-api.conf",
              f"--collector.pci.nova-scheduler-config={KOLLA}/nova.conf",
              f"--collector.pci.nova-scheduler-config={KOLLA}/nova/nova-scheduler.conf"]),
    "failing_host": (ROOT / "tests" / "fixtures" / "pci_failing_host",
                     ["--collector.pci.passthrough-device=10de:1eb8",
                      f"--collector.pci.nova-config={ROOT}/tests/fixtures/pci_failing_host/etc/nova/nova.conf"]),
    "sriov_host": (ROOT / "tests" / "fixtures" / "pci_sriov_host",
                   [f"--collector.pci.nova-config={ROOT}/tests/fixtures/pci_sriov_host/etc/nova/nova.conf"]),
}
# The incident's RDMA userspace: bookworm's libibverbs in the multiarch directory, bullseye's in
# /usr/local/lib64 first in the cache (built at test time from Debian's unpacked packages).
USERSPACE_ROOT_SCRIPT = ROOT / "tests" / "fixtures" / "rdma_userspace_root.sh"
MODULES_EXPECTED = "--collector.modules.expected=mlx5_core,mlx5_ib,ib_uverbs,rdma_ucm,ib_ipoib,vfio_pci,nvidia"
# The signed-files root's own modules (exporter/tests/it/modules.rs uses the same list).
MODULES_EXPECTED_FOR = {"signed_files": "--collector.modules.expected=geniv,pcspkr,lab_mok,lab_foreign_keyid,"
                                        "lab_foreign_serial,lab_unsigned,lab_debian,lab_truncated,8250"}
# Metrics only a kernel lab guest produces: this kernel has no modules, kprobes or IOMMU, so they stay
# empty here; tests/lab drives real module loads on Debian kernels and checks them there.
NEEDS_LAB_KERNEL = {
    "hpcnode_module_loads_total", "hpcnode_module_tainted_loads_total",
    "hpcnode_module_signature_checks_total", "hpcnode_module_load_failures_total",
    "hpcnode_kernel_log_events_total",
    # RDMA port events: the rdma_port_events probe on rxe0 (the lab's rdma_softroce group).
    "hpcnode_rdma_port_events_total",
    # Kernel-log events from before start: the lab refuses a module before starting the exporter.
    "hpcnode_kernel_log_events_before_start", "hpcnode_kernel_log_before_start_complete",
    # IOMMU faults from the kernel log: exporter/tests/it/pci.rs writes DMAR lines to /dev/kmsg for them.
    "hpcnode_iommu_faults_total",
    # DMAR fault interrupts and vfio failures: kprobes on an emulated Intel IOMMU and vfio-pci
    # in the kernel lab.
    "hpcnode_iommu_fault_interrupts_total", "hpcnode_vfio_enable_failures_total",
    "hpcnode_vfio_aer_errors_total", "hpcnode_vfio_pin_failures_total",
}
FOR_IN_TEST = "2s"
# Rule groups are evaluated every 1.3 s against 1 s scrapes, so that an evaluation and a scrape
# drift past each other: at one interval for both, a run whose evaluations happened to fall
# while a scrape was in flight (begun, not yet committed) recorded every sample without it, and
# no recorded sample equalled the formula evaluated afterwards at its timestamp.
RULE_INTERVAL_IN_TEST = "1300ms"
OVERALL_TIMEOUT_S = 240
REL = 1e-9  # recorded value against the same formula evaluated by Prometheus

# Facts of the procfs fixture: the data rate of each port after line encoding, bytes/s.
DATA_RATE = {("hfi1_0", "1"): 1.25e10,   # 100 Gb/sec (4X EDR)
             ("mlx4_0", "1"): 4e9,       # 40 Gb/sec (4X QDR): 32 Gb/s of data
             ("mlx4_0", "2"): 4e9,
             ("mlx5_0", "1"): 3.125e9}   # 25 Gb/sec (1X EDR)
# What the test adds to sysfs counters, per second: (device, port, file) -> increment.
# port_*_data count 4-byte words: 250,000,000 words/s is 1e9 bytes/s.
DRIVE = {("mlx4_0", "1", "port_xmit_data"): 250_000_000,    # 1e9 B/s: 25 % of 4e9
         ("mlx4_0", "1", "port_rcv_data"): 125_000_000,     # 5e8 B/s
         ("hfi1_0", "1", "port_xmit_data"): 312_500_000,    # 1.25e9 B/s: 10 % of 1.25e10
         ("mlx5_0", "1", "port_xmit_data"): 390_625_000,    # 1.5625e9 B/s: 50 % of 3.125e9
         ("mlx4_0", "1", "port_xmit_wait"): 5_000_000}      # x 8 bytes / 4e9 B/s = 1 % of the time

children = []
failures = []
passes = 0


def log(msg):
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(ok, what):
    global passes
    if ok:
        passes += 1
        log(f"ok    {what}")
    else:
        failures.append(what)
        log(f"FAIL  {what}")
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, logfile):
    p = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
    children.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def stop_all(*_):
    for p in children:
        stop(p)


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def wait_until(what, fn, timeout):
    """Polls fn() until it returns a true value or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    log(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
    return None


class Prom:
    def __init__(self, base):
        self.base = base

    def api(self, path, **params):
        url = f"{self.base}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            body = json.loads(http_get(url, timeout=10))
        except urllib.error.HTTPError as e:
            body = json.loads(e.read().decode())
        if body.get("status") != "success":
            raise ValueError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, q, at=None):
        params = {"query": q}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)["result"]

    def alerts(self, name=None, state="firing"):
        return [a for a in self.api("alerts")["alerts"]
                if a["state"] == state and (name is None or a["labels"]["alertname"] == name)]


def key(labels, *names):
    return tuple(labels.get(n, "") for n in names)


# ---------------------------------------------------------------- fixture driver

class CounterDriver(threading.Thread):
    """Rewrites the driven sysfs counters every 100 ms as base + increment x elapsed time,
    so that any scrape reads a value proportional to its time. Files are replaced with a
    rename, so the exporter never reads half a number."""

    def __init__(self, sysfs, scratch):
        super().__init__(daemon=True)
        self.sysfs, self.scratch = sysfs, scratch
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.written = {k: set() for k in DRIVE}  # every value written, per counter
        self.base = {}
        for (dev, port, name) in DRIVE:
            path = self.path(dev, port, name)
            self.base[(dev, port, name)] = int(path.read_text().split()[0])
        self.t0 = time.monotonic()

    def path(self, dev, port, name):
        return self.sysfs / "class" / "infiniband" / dev / "ports" / port / "counters" / name

    def was_written(self, k, value):
        with self.lock:
            return value in self.written[k] or value == self.base[k]

    def run(self):
        while not self.stop_event.is_set():
            elapsed = time.monotonic() - self.t0
            for k, per_s in DRIVE.items():
                value = self.base[k] + int(per_s * elapsed)
                with self.lock:
                    self.written[k].add(value)
                write_atomically(self.path(*k), f"{value}\n", self.scratch)
            self.stop_event.wait(0.1)


def write_atomically(path, text, scratch):
    tmp = scratch / f"{path.name}.{threading.get_ident()}"
    tmp.write_text(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------- the checks

def check_targets_and_rules(prom, targets):
    """Returns when every target was first seen up."""
    ups = wait_until("every target up", lambda: len(prom.query('up{job="hpcnode"} == 1')) == targets, 30)
    check(ups is not None, f"up == 1 for all {targets} exporters")
    all_up = time.monotonic()

    def rules_evaluated():
        rules = [r for g in prom.api("rules")["groups"] for r in g["rules"]]
        return rules if rules and all(not r["lastEvaluation"].startswith("0001") for r in rules) else None
    rules = wait_until("every rule evaluated", rules_evaluated, 30) or []
    bad = [(r["name"], r.get("lastError")) for r in rules if r.get("health") != "ok"]
    check(rules and not bad, f"all {len(rules)} rules evaluate with health ok {bad or ''}")
    expected = {r["record"] for _, _, r in lint.load_rules() if "record" in r} | \
               {r["alert"] for _, _, r in lint.load_rules() if "alert" in r}
    loaded = {r["name"] for r in rules}
    check(expected <= loaded, f"Prometheus loaded every rule of alerts/ (missing: {sorted(expected - loaded)})")
    return all_up


def recent_recorded(prom, series, window="8s"):
    """[(labels, timestamp, value)] of the samples recorded in the last `window`."""
    out = []
    for r in prom.query(f"{series}[{window}]"):
        for ts, v in r["values"]:
            out.append((r["metric"], float(ts), float(v)))
    return out


def compare_at_timestamps(prom, what, recorded, reference):
    """Each recorded sample against `reference(labels)` (a PromQL expression) evaluated at the
    sample's own timestamp. A scrape committed just after a rule evaluation can make a single
    sample differ, so at least half must match to REL and all within 5 %."""
    exact, close, total, worst = 0, 0, 0, None
    for labels, ts, v in recorded:
        res = prom.query(reference(labels), at=ts)
        if len(res) != 1:
            continue
        ref = float(res[0]["value"][1])
        total += 1
        if math.isclose(v, ref, rel_tol=REL, abs_tol=1e-12):
            exact += 1
        if math.isclose(v, ref, rel_tol=0.05, abs_tol=1e-9):
            close += 1
        else:
            worst = (labels, ts, v, ref)
    check(total > 0 and exact * 2 >= total and close == total,
          f"{what}: {exact}/{total} recorded samples equal the formula at their timestamp"
          + (f" (off by more than 5 %: {worst})" if worst else ""))


def check_recording_rules(prom, inst, driver):
    sel = f'instance="{inst}"'
    # The x4 data unit, applied once: every scraped byte count is 4 x a word count the test
    # wrote into port_xmit_data; port_xmit_wait ticks are exported as they are.
    for (dev, port, name), metric, factor in (
            (("mlx4_0", "1", "port_xmit_data"), "hpcnode_rdma_port_data_transmitted_bytes_total", 4),
            (("mlx4_0", "1", "port_rcv_data"), "hpcnode_rdma_port_data_received_bytes_total", 4),
            (("mlx4_0", "1", "port_xmit_wait"), "hpcnode_rdma_port_transmit_wait_total", 1)):
        res = prom.query(f'{metric}{{{sel}, device="{dev}", port="{port}"}}[10s]')
        values = [int(float(v)) for _, v in res[0]["values"]] if res else []
        matched = [v for v in values if v % factor == 0 and driver.was_written((dev, port, name), v // factor)]
        check(len(values) >= 5 and len(matched) == len(values) and len(set(values)) > 1,
              f"{metric}: all {len(values)} samples of the last 10s are {factor} x a value written to {name}")

    for direction, metric in (("transmit", "hpcnode_rdma_port_data_transmitted_bytes_total"),
                              ("receive", "hpcnode_rdma_port_data_received_bytes_total")):
        rec = recent_recorded(prom, f'hpcnode:rdma_port_data_bytes:rate5m{{{sel}, direction="{direction}"}}')
        check(len({key(l, "device", "port") for l, _, _ in rec}) == 4,
              f"hpcnode:rdma_port_data_bytes:rate5m has all 4 fixture ports ({direction})")
        compare_at_timestamps(
            prom, f"{direction} bytes/s per port = rate(bytes[5m])", rec,
            lambda l, m=metric: f'rate({m}{{{sel}, device="{l["device"]}", port="{l["port"]}"}}[5m])')
        util = recent_recorded(prom, f'hpcnode:rdma_port_utilisation:ratio_rate5m{{{sel}, direction="{direction}"}}')
        compare_at_timestamps(
            prom, f"{direction} utilisation = rate(bytes[5m]) / the fixture's encoding-adjusted data rate", util,
            lambda l, m=metric: f'rate({m}{{{sel}, device="{l["device"]}", port="{l["port"]}"}}[5m]) / {DATA_RATE[(l["device"], l["port"])]!r}')
        node = recent_recorded(prom, f'hpcnode:rdma_node_data_bytes:rate5m{{{sel}, direction="{direction}"}}')
        compare_at_timestamps(prom, f"node {direction} bytes/s = sum over ports", node,
                              lambda l, m=metric: f'sum(rate({m}{{{sel}}}[5m]))')
        node_util = recent_recorded(prom, f'hpcnode:rdma_node_utilisation:ratio_rate5m{{{sel}, direction="{direction}"}}')
        compare_at_timestamps(prom, f"node {direction} utilisation = sum of bytes/s / sum of data rates", node_util,
                              lambda l, m=metric: f'sum(rate({m}{{{sel}}}[5m])) / {sum(DATA_RATE.values())!r}')

    cap = prom.query(f'hpcnode:rdma_node_data_rate_bytes_per_second:sum_active{{{sel}}}')
    got = float(cap[0]["value"][1]) if cap else float("nan")
    check(got == sum(DATA_RATE.values()),
          f"node data rate of the ACTIVE ports = 1.25e10 + 2 x 4e9 + 3.125e9 = {sum(DATA_RATE.values())!r} (got {got!r})")

    wait = recent_recorded(prom, f'hpcnode:rdma_port_transmit_wait:ratio_rate5m{{{sel}, device="mlx4_0", port="1"}}')
    compare_at_timestamps(prom, "transmit-wait fraction = rate(ticks[5m]) x 8 bytes / 4e9 B/s", wait,
                          lambda l: f'rate(hpcnode_rdma_port_transmit_wait_total{{{sel}, device="mlx4_0", port="1"}}[5m]) * 8 / 4e9')
    check(all(v > 0 for _, _, v in wait), "the driven port's transmit-wait fraction is above 0")

    p95 = prom.query(f'hpcnode:rdma_port_utilisation:p95_1d{{{sel}}}')
    check(len(p95) == 8 and all(0 <= float(r["value"][1]) <= 1 for r in p95),
          f"daily p95 recorded for 4 ports x 2 directions, within [0, 1] ({len(p95)} series)")


# Alerts whose input is this machine's own kernel log, not a fixture: the exporters on the
# fixture trees run the default collectors, ebpf included, and the suite itself writes forged
# Lockdown lines into the log (exporter/tests/it/ebpf.rs, exporter/tests/it/metrics_catalog.rs), which an exporter
# started later reads from before its start. check_host_kernel_log_alert checks them apart.
HOST_KERNEL_LOG_ALERTS = {"HpcnodeModuleRefusedBeforeStart"}
REFUSALS = "unsigned_module_rejected|unverifiable_module_rejected|lockdown_refused_module"


def alert_keys(prom, inst, state="firing"):
    return sorted(key(a["labels"], "alertname", "device", "port", "counter")
                  for a in prom.alerts(state=state) if a["labels"].get("instance") == inst
                  and a["labels"]["alertname"] not in HOST_KERNEL_LOG_ALERTS)


def check_host_kernel_log_alert(prom, inst):
    """HpcnodeModuleRefusedBeforeStart fires on an exporter of this machine's kernel for
    exactly the refusal events its before-start gauge read, whichever there are."""
    attached = prom.query(f'hpcnode_ebpf_probe_attached{{instance="{inst}",probe="kernel_log",hook!="none"}} == 1')
    if not attached:
        log(f"{inst}: kernel_log probe not attached (no BPF here): HpcnodeModuleRefusedBeforeStart not checked")
        return
    read = wait_until("the kernel log from before start read",
                      lambda: prom.query(f'hpcnode_kernel_log_before_start_complete{{instance="{inst}"}}'), 30)
    check(read is not None, f"{inst}: the kernel log from before start is read")
    refused = {r["metric"]["event"] for r in prom.query(
        f'hpcnode_kernel_log_events_before_start{{instance="{inst}",event=~"{REFUSALS}"}} > 0')}

    def firing():
        return {a["labels"]["event"] for a in prom.alerts("HpcnodeModuleRefusedBeforeStart")
                if a["labels"].get("instance") == inst}
    got = wait_until("HpcnodeModuleRefusedBeforeStart to match the gauge", lambda: firing() == refused, 30)
    check(got is not None, f"{inst}: HpcnodeModuleRefusedBeforeStart fires for the refusals read from before "
                           f"start ({sorted(refused)}; firing {sorted(firing())})")


def check_mic_alerts(prom, mic_inst):
    expected = [("HpcnodeMicCardStuckBooting", "mic1", "", "")]
    got = wait_until("the mic tree's alerts", lambda: alert_keys(prom, mic_inst) == expected, 30)
    check(got is not None, f"mic tree: only the booting card's alert fires (firing: {alert_keys(prom, mic_inst)})")


# What the PCI roots must fire, by (alert, device): see tests/fixtures/README.md.
PCI_EXPECTED_ALERTS = {
    # The Radeon of the real capture trained x4 in an x16 slot (06:00.0 idle, 07:00.0 active),
    # the ConnectX-5 x8 of x16; the T4 behind a switch shares its group with a NIC; the
    # ConnectX-5 a Nova spec selects is not on vfio-pci; an alias without device_type names only
    # that type-PF; nova-api.conf defines that alias otherwise; nova-scheduler.conf's filter list
    # lacks PciPassthroughFilter. Its QEMUs' links to /dev/vfio are names, not holds (see
    # NEEDS_HELD_VFIO_DEVICE): no stale holder.
    "host": [("HpcnodeNovaAliasDefinitionsDiffer", ""), ("HpcnodeNovaAliasTypeMismatch", ""),
             ("HpcnodeNovaPciFilterDisabled", ""),
             ("HpcnodePciLinkDegraded", "0000:06:00.0"),
             ("HpcnodePciLinkDegraded", "0000:07:00.0"), ("HpcnodePciLinkDegraded", "0000:d8:00.0"),
             ("HpcnodePciPassthroughNotReady", "0000:af:00.0"), ("HpcnodePciPassthroughNotReady", "0000:d8:00.0")],
    # The T4 without driver, IOMMU or BARs; the ConnectX-4 whose driver an install rule disables;
    # an alias name repeated without device_type, which Nova refuses (its parse error also
    # counts in hpcnode_collector_errors_total: the generic info alert).
    "failing_host": [("HpcnodeCollectorReadErrors", ""), ("HpcnodeNovaConfigInvalid", ""),
                     ("HpcnodePciDeviceWithoutDriver", "0000:3b:00.0"), ("HpcnodePciDeviceWithoutDriver", "0000:5e:00.0"),
                     ("HpcnodePciPassthroughNotReady", "0000:3b:00.0")],
    # Two VFs on vfio-pci, ready, and an alias without device_type that Nova fills with them.
    "sriov_host": [],
}


def check_userspace_alerts(prom, inst):
    """Two versions of libibverbs on the stale root: its alert, which names the linker's copy."""
    expected = [("HpcnodeRdmaStaleUserspaceLibrary", "libibverbs.so.1")]

    def firing():
        return sorted((a["labels"]["alertname"], a["labels"].get("library", "")) for a in prom.alerts()
                      if a["labels"].get("instance") == inst)
    got = wait_until("the userspace root's alerts", lambda: firing() == expected, 30)
    check(got is not None, f"rdma_userspace: only libibverbs' two versions fire (firing: {firing()})")
    descriptions = [a["annotations"]["description"] for a in prom.alerts("HpcnodeRdmaStaleUserspaceLibrary")
                    if a["labels"].get("instance") == inst]
    linker = "/usr/local/lib64/libibverbs.so.1 (1.11.33.2, the one the linker takes)"
    check(any(linker in d for d in descriptions),
          f"rdma_userspace: the alert names the stale copy as the linker's ({descriptions})")


def check_pci_alerts(prom, pci_insts):
    for name, inst in pci_insts.items():
        def firing(i=inst):
            return sorted({(a["labels"]["alertname"], a["labels"].get("device", "")) for a in prom.alerts()
                           if a["labels"].get("instance") == i})
        got = wait_until(f"the pci {name} root's alerts", lambda: firing() == PCI_EXPECTED_ALERTS[name], 30)
        check(got is not None, f"pci_{name}: exactly the expected alerts fire (firing: {firing()})")


def check_module_alerts(prom, modules_insts):
    """Exactly the missing expected modules, the loaded unsigned modules (taint letter E in the
    fixture's /proc/modules) and the module files the kernel will refuse fire on the modules
    roots."""
    for name, inst in modules_insts.items():
        modules = (MODULES_ROOTS[name] / "proc" / "modules").read_text().splitlines()
        unsigned = {("HpcnodeUnsignedModuleLoaded", line.split()[0]) for line in modules
                    if line.endswith(")") and "E" in line.rsplit("(", 1)[1]}
        missing = {"rhel7": {"vfio_pci"}, "secureboot": {"mlx5_ib", "rdma_ucm", "nvidia"}, "signed_files": set()}[name]
        # RHEL 7 runs 3.10.0-1160 without headers; 1160.80.1 and its headers are installed.
        # The lab guest whose modules signed_files holds has no headers either.
        kernel = {"rhel7": {("HpcnodeKernelHeadersMissing", ""), ("HpcnodeKernelRebootPending", "")},
                  "signed_files": {("HpcnodeKernelHeadersMissing", "")}}.get(name, set())
        # The files the kernel (booted with module.sig_enforce=1) will refuse: unsigned, or signed
        # by a key identifier /proc/keys lacks.
        refused = {"signed_files": {"lab_unsigned", "lab_foreign_keyid"}}.get(name, set())
        # Its cut-short lab_truncated.ko.xz is a parse error of the modules collector.
        read_errors = {("HpcnodeCollectorReadErrors", "")} if name == "signed_files" else set()
        expected = sorted(unsigned | kernel | read_errors | {("HpcnodeModuleExpectedMissing", m) for m in missing}
                          | {("HpcnodeModuleFileWillBeRefused", m) for m in refused})

        def firing(i=inst):
            return sorted(key(a["labels"], "alertname", "module") for a in prom.alerts() if a["labels"].get("instance") == i)
        got = wait_until(f"the {name} root's alerts", lambda: firing() == expected, 30)
        check(got is not None, f"modules_{name}: exactly {len(expected)} module alerts fire (firing: {firing()})")


def check_alerts(prom, procfs_inst, edge_inst, tree, scratch, exporter_procfs, modules_insts):
    expected_edge = sorted([
        ("HpcnodeRdmaPortNotActive", "mlx4_1", "1", ""),
        ("HpcnodeRdmaPortPhysicalStateNotLinkUp", "mlx4_1", "1", ""),
        ("HpcnodeRdmaErrorCounterSaturated", "mlx5_1", "1", "link_downed"),
        ("HpcnodeRdmaErrorCounterSaturated", "mlx5_1", "1", "local_link_integrity_errors"),
        ("HpcnodeRdmaErrorCounterSaturated", "mlx5_1", "1", "port_xmit_discards"),
        ("HpcnodeRdmaErrorCounterSaturated", "mlx5_1", "1", "port_xmit_wait"),
        ("HpcnodeRdmaErrorCounterSaturated", "mlx5_1", "1", "symbol_error"),
    ])
    got = wait_until("the edge tree's alerts", lambda: alert_keys(prom, edge_inst) == expected_edge, 30)
    check(got is not None, f"edge tree: exactly the DOWN port's and the 4 saturated counters' alerts fire "
                           f"(firing: {alert_keys(prom, edge_inst)})")
    pending_or_firing = alert_keys(prom, procfs_inst) + alert_keys(prom, procfs_inst, "pending")
    check(pending_or_firing == [], f"procfs tree (healthy, mlx5_0 phys_state '4: ACTIVE'): no alert ({pending_or_firing})")
    check_host_kernel_log_alert(prom, procfs_inst)

    port = tree / "class" / "infiniband" / "mlx4_0" / "ports" / "1"
    state0, phys0 = (port / "state").read_bytes(), (port / "phys_state").read_bytes()
    write_atomically(port / "state", "1: DOWN\n", scratch)
    write_atomically(port / "phys_state", "2: Polling\n", scratch)
    t = time.monotonic()
    down = ("HpcnodeRdmaPortNotActive", "mlx4_0", "1", "")
    got = wait_until("HpcnodeRdmaPortNotActive firing", lambda: down in alert_keys(prom, procfs_inst), 30)
    check(got is not None, f"mlx4_0/1 turned DOWN: HpcnodeRdmaPortNotActive firing after {time.monotonic() - t:.1f}s")
    phys = ("HpcnodeRdmaPortPhysicalStateNotLinkUp", "mlx4_0", "1", "")
    check(wait_until("physical state alert", lambda: phys in alert_keys(prom, procfs_inst), 15) is not None,
          "mlx4_0/1 Polling: HpcnodeRdmaPortPhysicalStateNotLinkUp firing")
    lower = sum(DATA_RATE.values()) - 4e9
    check(wait_until("the node's ACTIVE data rate to drop", lambda: [
        r for r in prom.query(f'hpcnode:rdma_node_data_rate_bytes_per_second:sum_active{{instance="{procfs_inst}"}}')
        if float(r["value"][1]) == lower], 15) is not None,
        f"node data rate of the ACTIVE ports drops by the DOWN port's 4e9 to {lower!r}")
    write_atomically(port / "state", state0.decode(), scratch)
    write_atomically(port / "phys_state", phys0.decode(), scratch)
    t = time.monotonic()
    gone = wait_until("the alerts to resolve", lambda: down not in alert_keys(prom, procfs_inst) and
                      down not in alert_keys(prom, procfs_inst, "pending") and phys not in alert_keys(prom, procfs_inst), 30)
    check(gone is not None, f"mlx4_0/1 ACTIVE again: alerts resolved after {time.monotonic() - t:.1f}s")

    # 20 symbol errors on mlx4_0/2 (threshold 10 an hour, from config.rules.yml).
    write_atomically(tree / "class" / "infiniband" / "mlx4_0" / "ports" / "2" / "counters" / "symbol_error", "20\n", scratch)
    sym = ("HpcnodeRdmaPortSymbolErrors", "mlx4_0", "2", "symbol_error")
    check(wait_until("symbol error alert", lambda: sym in alert_keys(prom, procfs_inst), 30) is not None,
          "20 symbol errors on mlx4_0/2: HpcnodeRdmaPortSymbolErrors firing")

    # The port disappears from sysfs while the collector keeps working.
    shutil.move(str(tree / "class" / "infiniband" / "mlx4_0" / "ports" / "2"), str(scratch / "mlx4_0-port-2"))
    van = ("HpcnodeRdmaPortVanished", "mlx4_0", "2", "")
    check(wait_until("vanished alert", lambda: van in alert_keys(prom, procfs_inst), 30) is not None,
          "mlx4_0/2 removed from sysfs: HpcnodeRdmaPortVanished firing")

    check_module_alerts(prom, modules_insts)

    stop(exporter_procfs)
    dead = ("HpcnodeExporterDown", "", "", "")
    check(wait_until("exporter down alert", lambda: dead in alert_keys(prom, procfs_inst), 30) is not None,
          "exporter killed: HpcnodeExporterDown firing")


# RDMA netlink's resources, which need a real RDMA device: the kernel lab's rdma_netlink group.
NEEDS_RDMA_NETLINK = {"hpcnode_rdma_holder_pinned_bytes", "hpcnode_rdma_holder_resources",
                      "hpcnode:rdma_slurm_job_pinned_bytes:sum", "hpcnode_rdma_queue_pairs"}

# vfio holds, which only a process with the device open makes: a fixture's /proc is links, names
# that prove none (exporter/tests/it/pci.rs holds a node with a real process; the kernel lab's vfio_holders
# scenario, a device and a stale holder). The holder table joins them to the device info.
NEEDS_HELD_VFIO_DEVICE = {"hpcnode_pci_vfio_holder_info", "hpcnode_pci_vfio_stale_holder_info",
                          "hpcnode_pci_device_info"}

# Series only a running verbs probe mesh exports (three exporters on Soft-RoCE in the kernel lab).
NEEDS_MESH = {"hpcnode_verbs_probe_mesh_peer_success"}


def check_dashboards(prom):
    # Panels whose input needs more history than a test has: the crossing prediction fits a
    # line through hourly points of the daily p95, so it needs two hours of recordings.
    needs_history = {"Predicted threshold crossing"}
    # Series only a successful verbs probe or RDMA netlink produces, which need an RDMA device
    # (the kernel lab).
    # Exempted by the query's metric names, not the panel: a panel's other queries (the
    # efficiency threshold) must still return data.
    needs_rdma_device = {"hpcnode_verbs_probe_bandwidth_bytes_per_second",
                         "hpcnode_verbs_probe_efficiency_ratio",
                         "hpcnode_verbs_probe_latency_seconds"} | NEEDS_RDMA_NETLINK
    values = {"job": "hpcnode", "__rate_interval": "10s", "__range": "1m"}
    for name, where, title, q in lint.e2e_dashboard_queries(values):
        try:
            res = prom.query(q)
        except ValueError as e:
            check(False, f"{name}: {where} executes: {e}")
            continue
        # A query without a metric name (vector(1)) is a subset of every set: never exempt.
        names = lint.metric_names(q)
        if title in needs_history:
            check(True, f"{name}: {where} executes ({len(res)} series; needs hours of history)")
        elif names and names <= NEEDS_LAB_KERNEL:
            check(True, f"{name}: {where} executes ({len(res)} series; module events, checked in the kernel lab)")
        elif names and names <= needs_rdma_device:
            check(True, f"{name}: {where} executes ({len(res)} series; needs an RDMA device)")
        elif names and names <= NEEDS_HELD_VFIO_DEVICE:
            check(True, f"{name}: {where} executes ({len(res)} series; needs a held vfio device)")
        elif names and names <= NEEDS_MESH:
            check(True, f"{name}: {where} executes ({len(res)} series; needs a verbs probe mesh, the kernel lab's verbs_probe group)")
        else:
            check(len(res) > 0, f"{name}: {where} executes and returns data ({len(res)} series)")


# The password of the TLS exporter's one user, and its bcrypt hash (cost 4: a test).
WEB_PASSWORD = "e2e-secret"
WEB_PASSWORD_HASH = "$2b$04$wI4NR/XUVYUUlWR5/Fj7r.dLQbf8MhwCXeVS6cBTgdu9o7oBrfwPy"


def make_web_config(dest):
    """A CA, a server certificate for 127.0.0.1 signed by it, and a web config file with TLS
    and basic auth, all in `dest`; returns the config's path."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=dest, check=True, capture_output=True, timeout=60)
    for name in ("ca", "server"):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")
    openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=e2e-ca", "-days", "2", "-out", "ca.crt")
    openssl("req", "-new", "-key", "server.key", "-subj", "/CN=exporter", "-out", "server.csr")
    (dest / "server.ext").write_text("basicConstraints=critical,CA:FALSE\nsubjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "server.ext", "-out", "server.crt")
    config = dest / "web.yml"
    config.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"},
        "basic_auth_users": {"prometheus": WEB_PASSWORD_HASH},
    }))
    return config


def check_tls_scrape(prom, tls_inst):
    up = wait_until("the TLS exporter up", lambda: prom.query('up{job="hpcnode_tls"} == 1'), 30)
    check(up is not None, f"Prometheus scrapes {tls_inst} over https with basic auth (up 1)")
    info = prom.query('hpcnode_build_info{job="hpcnode_tls"}')
    check(len(info) == 1, "hpcnode_build_info scraped over TLS")
    refused = wait_until("the wrong password refused",
                         lambda: prom.query('up{job="hpcnode_tls_wrong_password"} == 0'), 30)
    check(refused is not None, "a scrape with a wrong password is refused (up 0)")
    failures = wait_until("auth failures counted",
                          lambda: prom.query('hpcnode_web_auth_failures_total{job="hpcnode_tls"} > 0'), 30)
    check(failures is not None, "the exporter counts the refused scrapes in hpcnode_web_auth_failures_total")


def rule_files_for_test(dest):
    """alerts/*.yml as Prometheus loads them, with every alert's `for:` set to FOR_IN_TEST and
    every group evaluated every RULE_INTERVAL_IN_TEST."""
    files = []
    for path in lint.rule_files():
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            group["interval"] = RULE_INTERVAL_IN_TEST
            for rule in group["rules"]:
                if "alert" in rule and "for" in rule:
                    rule["for"] = FOR_IN_TEST
        out = dest / path.name
        out.write_text(yaml.safe_dump(doc, sort_keys=False))
        files.append(out)
    return files


def on_overall_timeout(*_):
    raise TimeoutError(f"the test took over {OVERALL_TIMEOUT_S}s")


def main():
    if len(sys.argv) != 2:
        print("usage: prometheus_e2e.sh <path of the hpcnode_exporter binary>", file=sys.stderr)
        return 2
    exporter = Path(sys.argv[1]).resolve()
    if not os.access(exporter, os.X_OK):
        print(f"e2e: {exporter} is not an executable (run cargo build first)", file=sys.stderr)
        return 2
    prometheus = shutil.which("prometheus")
    if not prometheus:
        print("e2e: prometheus not found (apt-get install prometheus)", file=sys.stderr)
        return 2

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGALRM, on_overall_timeout)
    signal.alarm(OVERALL_TIMEOUT_S)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="hpcnode-e2e-"))
    driver = None
    try:
        tree = tmp / "procfs" / "sys"
        shutil.copytree(PROCFS_TREE, tree, symlinks=True)
        scratch = tmp / "scratch"
        scratch.mkdir()
        logs = tmp / "logs"
        logs.mkdir()
        rules_dir = tmp / "rules"
        rules_dir.mkdir()

        p_procfs, p_edge, p_mic, p_prom = free_port(), free_port(), free_port(), free_port()
        procfs_inst, edge_inst = f"127.0.0.1:{p_procfs}", f"127.0.0.1:{p_edge}"
        mic_inst = f"127.0.0.1:{p_mic}"
        driver = CounterDriver(tree, scratch)
        driver.start()
        # The RDMA and MIC trees' exporters run the other default collectors on this machine's
        # own kernel, except modules and rdma_userspace: their alerts would say what this
        # machine lacks (headers; the providers of the trees' HCAs: qemu brings libibverbs1 here,
        # not ibverbs-providers).
        exp_procfs = start([str(exporter), f"--web.listen-address={procfs_inst}", f"--path.sysfs={tree}",
                            "--no-collector.modules", "--no-collector.rdma_userspace"],
                           open(logs / "exporter-procfs.log", "w"))
        start([str(exporter), f"--web.listen-address={edge_inst}", f"--path.sysfs={EDGE_TREE}",
               "--no-collector.modules", "--no-collector.rdma_userspace"],
              open(logs / "exporter-edge.log", "w"))
        start([str(exporter), f"--web.listen-address={mic_inst}", f"--path.sysfs={MIC_ROOT / 'sys'}",
               "--no-collector.modules",
               f"--path.rootfs={MIC_ROOT}", "--collector.mic.micras-path=mic0=/var/lib/micras/mic0",
               "--no-collector.mic.libmicmgmt"],
              open(logs / "exporter-mic.log", "w"))
        modules_insts = {name: f"127.0.0.1:{free_port()}" for name in MODULES_ROOTS}
        for name, inst in modules_insts.items():
            root = MODULES_ROOTS[name]
            start([str(exporter), f"--web.listen-address={inst}", "--collector.disable-defaults",
                   "--collector.modules", MODULES_EXPECTED_FOR.get(name, MODULES_EXPECTED), f"--path.procfs={root / 'proc'}",
                   f"--path.sysfs={root / 'sys'}", f"--path.rootfs={root}"],
                  open(logs / f"exporter-modules-{name}.log", "w"))
        pci_insts = {name: f"127.0.0.1:{free_port()}" for name in PCI_ROOTS}
        for name, inst in pci_insts.items():
            root, flags = PCI_ROOTS[name]
            start([str(exporter), f"--web.listen-address={inst}", "--collector.disable-defaults",
                   "--collector.pci", *flags, f"--path.procfs={root / 'proc'}",
                   f"--path.sysfs={root / 'sys'}", f"--path.rootfs={root}"],
                  open(logs / f"exporter-pci-{name}.log", "w"))
        userspace_root = tmp / "userspace"
        subprocess.run([str(USERSPACE_ROOT_SCRIPT), str(userspace_root), "stale"], check=True, timeout=60)
        userspace_inst = f"127.0.0.1:{free_port()}"
        start([str(exporter), f"--web.listen-address={userspace_inst}", "--collector.disable-defaults",
               "--collector.rdma_userspace", f"--path.rootfs={userspace_root}"],
              open(logs / "exporter-userspace.log", "w"))
        targets = [procfs_inst, edge_inst, mic_inst, *modules_insts.values(), *pci_insts.values(), userspace_inst]
        web_dir = tmp / "web"
        web_dir.mkdir()
        web_config = make_web_config(web_dir)
        tls_inst = f"127.0.0.1:{free_port()}"
        start([str(exporter), f"--web.listen-address={tls_inst}", "--collector.disable-defaults",
               f"--web.config.file={web_config}"],
              open(logs / "exporter-tls.log", "w"))
        for inst in targets:
            ok = wait_until(f"exporter {inst}", lambda i=inst: "hpcnode_scrape_collector_success" in http_get(f"http://{i}/metrics"), 30)
            if not check(ok is not None, f"exporter serves /metrics on {inst}"):
                return 1

        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(f) for f in rule_files_for_test(rules_dir)],
            "scrape_configs": [{"job_name": "hpcnode",
                                "static_configs": [{"targets": targets}]},
                               *({"job_name": job,
                                  "scheme": "https",
                                  "tls_config": {"ca_file": str(web_dir / "ca.crt")},
                                  "basic_auth": {"username": "prometheus", "password": password},
                                  "static_configs": [{"targets": [tls_inst]}]}
                                 for job, password in (("hpcnode_tls", WEB_PASSWORD),
                                                       ("hpcnode_tls_wrong_password", "wrong")))],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        start([prometheus, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
               f"--web.listen-address=127.0.0.1:{p_prom}", "--log.level=warn"],
              open(logs / "prometheus.log", "w"))
        prom = Prom(f"http://127.0.0.1:{p_prom}")
        ready = wait_until("prometheus ready", lambda: "Ready" in http_get(f"{prom.base}/-/ready"), 60)
        if not check(ready is not None, "prometheus is ready"):
            print((logs / "prometheus.log").read_text()[-3000:])
            return 1

        all_up = check_targets_and_rules(prom, len(targets))
        check_tls_scrape(prom, tls_inst)
        # Let the rates build up over a dozen scrapes before checking numbers, counted from when
        # every exporter answers: attaching the eBPF probes takes seconds on a loaded machine.
        time.sleep(max(0.0, driver.t0 + 15 - time.monotonic(), all_up + 12 - time.monotonic()))
        check_recording_rules(prom, procfs_inst, driver)
        check_dashboards(prom)
        check_mic_alerts(prom, mic_inst)
        check_pci_alerts(prom, pci_insts)
        check_userspace_alerts(prom, userspace_inst)
        check_alerts(prom, procfs_inst, edge_inst, tree, scratch, exp_procfs, modules_insts)
    except Exception as e:  # a crash of the test itself is a failure, with its reason
        check(False, f"e2e aborted: {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
        if driver:
            driver.stop_event.set()
        stop_all()
        if failures:
            for name in sorted((tmp / "logs").glob("*.log")) if (tmp / "logs").exists() else []:
                tail = name.read_text()[-1500:]
                if tail.strip():
                    print(f"--- {name.name} (tail)\n{tail}")
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"prometheus e2e: {passes} passed, {len(failures)} failed in {time.monotonic() - started:.0f}s")
    for f in failures:
        log(f"failed: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
