#!/usr/bin/python3
"""The fleet end to end, on a distributed path: tests/fleet/run.sh <hpcnode_exporter binary>

20 exporters on copies of the typical node (tests/fixtures/typical_node.sh), some made faulty
in the kernel's own formats: an RDMA port DOWN/Polling, the GPU's PCIe link trained at half
width (its Link Status register in config space), a Xeon Phi card stuck booting, the GPU
unbound from vfio-pci (not passthrough-ready), an unsigned out-of-tree module loaded (taint OE),
a stale libibverbs in /usr/local/lib64 that ld.so.cache gives the linker.
Debian's prometheus in agent mode scrapes them (target labels cluster, rack, switch, as a
site sets them) and remote-writes into Debian's victoria-metrics (single node); Debian's
vmalert evaluates every rule file of alerts/ against VictoriaMetrics and writes the recorded
series back into it. Then:
  - vmalert loaded every rule of alerts/, and every rule evaluates without error;
  - each alert fires for exactly the nodes whose fixture has its fault, nothing on the healthy ones;
  - the fleet rules give the numbers the faults predict (nodes failing each check per cluster,
    degraded links per rack and switch, the clusters' RDMA capacity and headroom);
  - every query of every dashboard (fleet and node) returns data from VictoriaMetrics, except
    where the fixtures lack the input (said per query).
The exporters run without the ebpf collector: its probes read this machine's kernel, not the
fixture (tests/e2e and the kernel lab check it). Alerts' `for:` durations
are shortened to FOR_IN_TEST; everything else is loaded as in alerts/.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rules"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import lint  # noqa: E402  (rule and dashboard helpers)
import prometheus_e2e as e2e  # noqa: E402  (process, HTTP and wait helpers; the lab-only metrics)
from prometheus_e2e import check, free_port, log, start, wait_until  # noqa: E402

ROOT = lint.ROOT
TYPICAL_NODE = ROOT / "tests" / "fixtures" / "typical_node.sh"
USERSPACE_ROOT = ROOT / "tests" / "fixtures" / "rdma_userspace_root.sh"
MIC_CARD = ROOT / "tests" / "fixtures" / "mic_mpss3" / "sys" / "class" / "mic" / "mic0"
MICRAS = ROOT / "tests" / "fixtures" / "mic_mpss3" / "var" / "lib" / "micras" / "mic0"  # the card's telemetry
GPU = "0000:01:00.0"
GPU_IDS = "1002:665c"  # the typical node's Radeon: meant for passthrough whatever it is bound to
EXPECTED_MODULES = "mlx5_core,ib_uverbs,ib_ipoib"
FOR_IN_TEST = "2s"
OVERALL_TIMEOUT_S = 160

# name -> (cluster, rack, switch, fault). Two nodes of each fault, in different clusters.
NODES = {}
for i in range(1, 21):
    cluster = "a" if i <= 10 else "b"
    rack = f"r{(i - 1) // 5 + 1}"
    NODES[f"n{i:02d}"] = (cluster, rack, f"s{(i - 1) // 5 + 1}", None)
FAULTS = {"n02": "port_down", "n13": "port_down", "n03": "link_degraded", "n16": "link_degraded",
          "n04": "mic_booting", "n17": "mic_booting", "n07": "gpu_not_ready", "n18": "gpu_not_ready",
          "n08": "unsigned_module", "n19": "unsigned_module", "n05": "mic_online",
          "n09": "stale_library", "n20": "stale_library"}
for name, fault in FAULTS.items():
    NODES[name] = NODES[name][:3] + (fault,)

# What each fault fires, as (alert, the label that names the part).
FIRES = {
    "port_down": {("HpcnodeRdmaPortNotActive", "mlx4_0/1"), ("HpcnodeRdmaPortPhysicalStateNotLinkUp", "mlx4_0/1")},
    "link_degraded": {("HpcnodePciLinkDegraded", GPU)},
    "mic_booting": {("HpcnodeMicCardStuckBooting", "mic0")},
    "gpu_not_ready": {("HpcnodePciPassthroughNotReady", GPU), ("HpcnodePciDeviceWithoutDriver", GPU)},
    "unsigned_module": {("HpcnodeUnsignedModuleLoaded", "lab_oot")},
    "stale_library": {("HpcnodeRdmaStaleUserspaceLibrary", "libibverbs.so.1")},
    "mic_online": set(),
    None: set(),
}
# The readiness check each fault fails (alerts/fleet.rules.yml).
FAILS_CHECK = {"port_down": "rdma_port_active", "link_degraded": "pci_link_width",
               "mic_booting": "mic_card_online", "gpu_not_ready": "pci_passthrough_ready",
               "unsigned_module": "modules_signed"}
# Data rate of the typical node's ACTIVE ports, bytes/s: mlx4_0 2 x 4X QDR (4e9), mlx5_0 1X EDR.
NODE_DATA_RATE = 2 * 4e9 + 3.125e9

# Dashboard queries whose input these fixtures do not have, by the metric names they select.
EBPF_COLLECTOR = {"hpcnode_ebpf_probe_attached", "hpcnode_ebpf_probe_failure_info", "hpcnode_ebpf_program_runs_total",
                  "hpcnode_ebpf_program_run_seconds_total", "hpcnode_ebpf_events_lost_total"} | e2e.NEEDS_LAB_KERNEL
NO_INPUT = [
    (EBPF_COLLECTOR, "the ebpf collector is off in the fleet (its probes read this machine's kernel)"),
    ({"hpcnode_verbs_probe_bandwidth_bytes_per_second", "hpcnode_verbs_probe_efficiency_ratio",
      "hpcnode_verbs_probe_latency_seconds", "hpcnode_verbs_probe_available"}, "needs an RDMA device (the kernel lab)"),
    (e2e.NEEDS_MESH, "needs a verbs probe mesh (the kernel lab's verbs_probe group)"),
    (e2e.NEEDS_RDMA_NETLINK, "RDMA netlink's resources need a real RDMA device (the kernel lab's rdma_netlink group)"),
    ({"hpcnode_nova_config_errors", "hpcnode_nova_alias_type_mismatch_devices", "hpcnode_nova_alias_matching_devices",
      "hpcnode_nova_config_valid", "hpcnode_nova_scheduler_pci_filter_enabled", "hpcnode_nova_alias_definitions"},
     "the typical node runs no Nova (the e2e checks them on pci_host)"),
    ({"hpcnode_rdma_port_netdev_carrier_changes_total"},
     "the typical node's HCAs are InfiniBand, no RoCE port has a netdev (the e2e: rdma_edge's rocep1s0f0)"),
    ({"hpcnode_module_modprobe_rule"}, "no variant has a modprobe.d rule against an expected module"),
    ({"hpcnode_module_file_signed", "hpcnode_module_file_signer_trust"},
     "the typical node has no module files (the e2e checks them on modules_signed_files)"),
    (e2e.NEEDS_HELD_VFIO_DEVICE, "no VM runs on the typical node (exporter/tests/it/pci.rs holds a node, the lab holds edu)"),
    ({"hpcnode_pci_aer_messages_total", "hpcnode_pci_aer_root_port_messages_total", "hpcnode_pci_aer_errors_total"},
     "the typical node's GPU is a capture from a 3.13 kernel, without AER statistics (the e2e: pci_host)"),
]
NEEDS_HISTORY = {"Predicted threshold crossing"}


# ---------------------------------------------------------------- the nodes

def set_link_width(config_path, fraction):
    """Sets the negotiated width in the PCIe capability's Link Status register (bits 9:4) of a
    config space dump to `fraction` of the maximum in Link Capabilities (bits 9:4)."""
    config = bytearray(config_path.read_bytes())
    ptr = config[0x34] & ~3
    while config[ptr] != 0x10:  # the PCI Express capability
        ptr = config[ptr + 1] & ~3
        if not ptr:
            raise ValueError(f"{config_path}: no PCI Express capability")
    maximum = (int.from_bytes(config[ptr + 0x0C:ptr + 0x10], "little") >> 4) & 0x3F
    status = int.from_bytes(config[ptr + 0x12:ptr + 0x14], "little")
    status = (status & ~(0x3F << 4)) | (int(maximum * fraction) << 4)
    config[ptr + 0x12:ptr + 0x14] = status.to_bytes(2, "little")
    config_path.write_bytes(bytes(config))


def make_node(dest, fault):
    subprocess.run([str(TYPICAL_NODE), str(dest)], check=True, timeout=60)
    sysfs = dest / "sys"
    # The captured Radeon trained x4 in its x16 slot: healthy nodes get the full width, the
    # degraded ones half of it.
    set_link_width(sysfs / "bus" / "pci" / "devices" / GPU / "config", 0.5 if fault == "link_degraded" else 1)
    if fault == "port_down":
        port = sysfs / "class" / "infiniband" / "mlx4_0" / "ports" / "1"
        (port / "state").write_text("1: DOWN\n")
        (port / "phys_state").write_text("2: Polling\n")
    elif fault in ("mic_booting", "mic_online"):
        mic = sysfs / "class" / "mic"
        mic.mkdir(parents=True)
        shutil.copytree(MIC_CARD, mic / "mic0")
        shutil.copytree(MICRAS, dest / "var" / "lib" / "micras" / "mic0")
        if fault == "mic_booting":
            (mic / "mic0" / "state").write_text("booting\n")
    elif fault == "gpu_not_ready":
        (sysfs / "bus" / "pci" / "devices" / GPU / "driver").unlink()
    elif fault == "unsigned_module":
        modules = dest / "proc" / "modules"
        modules.write_text(modules.read_text() + "lab_oot 16384 0 - Live 0xffffffffc0e00000 (OE)\n")
        # TAINT_OOT_MODULE (4096, O) and TAINT_UNSIGNED_MODULE (8192, E).
        (dest / "proc" / "sys" / "kernel" / "tainted").write_text("12288\n")
    elif fault == "stale_library":
        # The incident: bullseye's libibverbs in /usr/local/lib64, first in the cache.
        subprocess.run([str(USERSPACE_ROOT), str(dest), "stale"], check=True, timeout=60)


def exporter_argv(exporter, root, inst, fault):
    mic = ["--collector.mic.micras-path=mic0=/var/lib/micras/mic0"] if fault in ("mic_booting", "mic_online") else []
    return [str(exporter), *mic, f"--web.listen-address={inst}", "--no-collector.ebpf",
            f"--path.rootfs={root}", f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}",
            f"--collector.modules.expected={EXPECTED_MODULES}", f"--collector.pci.passthrough-device={GPU_IDS}",
            "--no-collector.mic.libmicmgmt"]


# ---------------------------------------------------------------- the servers

class Alertmanager(ThreadingHTTPServer):
    """Takes vmalert's notifications (POST /api/v2/alerts) and keeps the last alert list."""

    def __init__(self, port):
        self.posted = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler):
                handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
                self.posted += 1
                handler.send_response(200)
                handler.end_headers()

            def log_message(handler, *_):
                pass
        super().__init__(("127.0.0.1", port), Handler)


def rule_files_for_test(dest):
    """alerts/*.rules.yml with every alert's `for:` set to FOR_IN_TEST (the text otherwise as is)."""
    files = []
    for path in lint.rule_files():
        out = dest / path.name
        out.write_text(re.sub(r"^(\s+for:) \S+$", rf"\1 {FOR_IN_TEST}", path.read_text(), flags=re.M))
        files.append(out)
    return files


class Api:
    def __init__(self, base):
        self.base = base

    def get(self, path, **params):
        url = f"{self.base}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
        return json.loads(e2e.http_get(url, timeout=10))

    def query(self, q):
        body = self.get("/api/v1/query", query=q)
        if body.get("status") != "success":
            raise ValueError(f"{q}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]["result"]


# ---------------------------------------------------------------- the checks

def check_rules_loaded(vmalert):
    expected = {r.get("record") or r.get("alert") for _, _, r in lint.load_rules()}
    expected_count = len(lint.load_rules())

    def evaluated():
        rules = [r for g in vmalert.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
        return rules if len(rules) == expected_count and all(
            not r["lastEvaluation"].startswith("0001") for r in rules) else None
    rules = wait_until("vmalert evaluated every rule", evaluated, 40) or []
    check({r["name"] for r in rules} == expected, f"vmalert loaded all {expected_count} rules of alerts/ "
          f"(missing: {sorted(expected - {r['name'] for r in rules})})")
    bad = [(r["name"], r.get("lastError")) for r in rules if r.get("lastError")]
    check(rules and not bad, f"every rule evaluates on VictoriaMetrics without error {bad or ''}")


def firing(vmalert, insts):
    by_node = {}
    # vmalert answers `"alerts": null` until a rule has an alert (a Go nil slice).
    for a in vmalert.get("/api/v1/alerts")["data"]["alerts"] or []:
        if a["state"] != "firing":
            continue
        labels = a["labels"]
        node = insts.get(labels.get("instance"))
        part = labels.get("module") or labels.get("library") or labels.get("device", "")
        if labels.get("port"):
            part += "/" + labels["port"]
        by_node.setdefault(node, set()).add((labels["alertname"], part))
    return by_node


def check_alerts(vmalert, insts):
    expected = {name: FIRES[fault] for name, (_, _, _, fault) in NODES.items() if FIRES[fault]}
    got = wait_until("every fault's alerts, and no others", lambda: firing(vmalert, insts) == expected, 45)
    now = firing(vmalert, insts)
    check(got is not None, f"each alert fires for exactly the nodes with its fault "
          f"({sum(map(len, expected.values()))} alerts on {len(expected)} nodes)"
          + ("" if got else f": expected {sorted(expected.items())}, firing {sorted(now.items(), key=str)}"))
    for fault in sorted({f for _, _, _, f in NODES.values() if FIRES[f]}):
        nodes = sorted(n for n, v in NODES.items() if v[3] == fault)
        check(all(now.get(n) == FIRES[fault] for n in nodes),
              f"{fault}: {sorted(a for a, _ in FIRES[fault])} on {nodes}")


def check_fleet_rules(vm):
    def failing_per_cluster():
        return {(r["metric"]["cluster"], r["metric"]["check"]): float(r["value"][1])
                for r in vm.query('cluster:hpcnode_node_readiness_check_failing:sum{job="hpcnode"}')}
    expected = {}
    for cluster, _, _, fault in NODES.values():
        for check_name in set(FAILS_CHECK.values()) | {"modules_expected_loaded"}:
            if check_name == "mic_card_online" and not any(
                    c == cluster and f in ("mic_booting", "mic_online") for c, _, _, f in NODES.values()):
                continue
            expected.setdefault((cluster, check_name), 0.0)
        if fault in FAILS_CHECK:
            expected[(cluster, FAILS_CHECK[fault])] += 1
    got = wait_until("nodes failing each check", lambda: failing_per_cluster() == expected, 20)
    check(got is not None, f"cluster:hpcnode_node_readiness_check_failing:sum = the faults per cluster and check "
          f"({expected}; got {failing_per_cluster()})")

    grid = {r["metric"]["instance"]: float(r["value"][1])
            for r in vm.query('hpcnode:node_readiness:failing_checks{job="hpcnode"}')}
    check(len(grid) == len(NODES) and sorted(v for v in grid.values()) == sorted(
        1.0 if NODES[n][3] in FAILS_CHECK else 0.0 for n in NODES),
        f"hpcnode:node_readiness:failing_checks: 1 on each faulty node, 0 on the others ({len(grid)} nodes)")

    links = {(r["metric"]["cluster"], r["metric"]["rack"], r["metric"]["switch"]): float(r["value"][1])
             for r in vm.query('cluster_rack_switch:hpcnode_pci_links_degraded:count{job="hpcnode"}')}
    expected_links = {v[:3]: 1.0 for v in NODES.values() if v[3] == "link_degraded"}
    check(links == expected_links, f"degraded PCIe links per cluster, rack and switch: {expected_links} (got {links})")

    for cluster in ("a", "b"):
        down = sum(1 for c, _, _, f in NODES.values() if c == cluster and f == "port_down")
        nodes = sum(1 for c, _, _, _ in NODES.values() if c == cluster)
        capacity = nodes * NODE_DATA_RATE - down * 4e9
        def headroom(c=cluster):
            res = vm.query(f'cluster:hpcnode_rdma_headroom_bytes_per_second:rate5m{{job="hpcnode", cluster="{c}"}}')
            return sorted(float(r["value"][1]) for r in res)
        # Nothing drives the counters: the whole data rate of the ACTIVE ports is headroom. It
        # comes last in a chain of four rules (port rate, node sum, cluster sum, headroom), each
        # reading the one before from VictoriaMetrics after vmalert's remote write.
        wait_until(f"cluster {cluster}'s headroom", lambda c=cluster: headroom(c) == [capacity, capacity], 40)
        values = headroom()
        check(values == [capacity, capacity], f"cluster {cluster}: headroom = {nodes} nodes x {NODE_DATA_RATE!r} "
              f"- {down} DOWN QDR port(s) = {capacity!r} B/s in both directions (got {values})")
        def ratio(c=cluster):
            res = vm.query(f'cluster:hpcnode_rdma_headroom:ratio_rate5m{{job="hpcnode", cluster="{c}"}}')
            return sorted(float(r["value"][1]) for r in res)
        wait_until(f"cluster {cluster}'s headroom ratio", lambda c=cluster: ratio(c) == [1.0, 1.0], 15)
        check(ratio() == [1.0, 1.0], f"cluster {cluster}: headroom ratio 1 (idle) (got {ratio()})")


def check_dashboards(vm):
    values = {"job": "hpcnode", "__rate_interval": "10s", "__range": "1m"}
    for name, where, title, q in lint.e2e_dashboard_queries(values):
        try:
            res = vm.query(q)
        except (ValueError, OSError) as err:
            check(False, f"{name}: {where} executes on VictoriaMetrics: {err}")
            continue
        selected = lint.metric_names(q)
        reason = next((why for metrics, why in NO_INPUT if selected and selected <= metrics), None)
        if title in NEEDS_HISTORY:
            reason = "needs hours of history"
        if reason:
            check(True, f"{name}: {where} executes ({len(res)} series; {reason})")
        else:
            check(len(res) > 0, f"{name}: {where} returns data from VictoriaMetrics ({len(res)} series)")


# ---------------------------------------------------------------- main

def main():
    if len(sys.argv) != 2:
        print("usage: tests/fleet/run.sh <path of the hpcnode_exporter binary>", file=sys.stderr)
        return 2
    exporter = Path(sys.argv[1]).resolve()
    tools = {name: shutil.which(name) for name in ("prometheus", "victoria-metrics", "vmalert")}
    missing = [name for name, path in tools.items() if not path]
    if missing or not os.access(exporter, os.X_OK):
        print(f"fleet: missing {missing or exporter} (apt-get install prometheus victoria-metrics; cargo build)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGALRM, e2e.on_overall_timeout)
    signal.alarm(OVERALL_TIMEOUT_S)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="hpcnode-fleet-"))
    logs = tmp / "logs"
    logs.mkdir()
    am = None
    try:
        insts = {}
        targets = []
        for name, (cluster, rack, switch, fault) in NODES.items():
            root = tmp / "nodes" / name
            make_node(root, fault)
            inst = f"127.0.0.1:{free_port()}"
            insts[inst] = name
            start(exporter_argv(exporter, root, inst, fault), open(logs / f"exporter-{name}.log", "w"))
            targets.append({"targets": [inst], "labels": {"cluster": cluster, "rack": rack, "switch": switch}})
        log(f"{len(NODES)} exporters started in {time.monotonic() - started:.1f}s")

        vm_port, prom_port, vmalert_port, am_port = (free_port() for _ in range(4))
        vm = Api(f"http://127.0.0.1:{vm_port}")
        start([tools["victoria-metrics"], f"-storageDataPath={tmp / 'vm'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
               "-retentionPeriod=1d", "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=WARN"],
              open(logs / "victoria-metrics.log", "w"))
        # Agent mode: no local queries or rules, only scrape and remote_write (JSON is YAML).
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [{"job_name": "hpcnode", "static_configs": targets}],
                  "remote_write": [{"url": f"{vm.base}/api/v1/write",
                                    "queue_config": {"batch_send_deadline": "1s"}}]}
        (tmp / "prometheus.yml").write_text(json.dumps(config))
        start([tools["prometheus"], "--enable-feature=agent", f"--config.file={tmp / 'prometheus.yml'}",
               f"--storage.agent.path={tmp / 'agent'}", f"--web.listen-address=127.0.0.1:{prom_port}",
               "--log.level=warn"], open(logs / "prometheus.log", "w"))
        am = Alertmanager(am_port)
        threading.Thread(target=am.serve_forever, daemon=True).start()
        rules_dir = tmp / "rules"
        rules_dir.mkdir()
        start([tools["vmalert"], *(f"-rule={f}" for f in rule_files_for_test(rules_dir)),
               f"-datasource.url={vm.base}", f"-remoteWrite.url={vm.base}", "-remoteWrite.flushInterval=1s",
               f"-notifier.url=http://127.0.0.1:{am_port}", "-evaluationInterval=1s",
               f"-httpListenAddr=127.0.0.1:{vmalert_port}", "-loggerLevel=WARN"],
              open(logs / "vmalert.log", "w"))
        vmalert = Api(f"http://127.0.0.1:{vmalert_port}")

        up = wait_until("every exporter up in VictoriaMetrics",
                        lambda: len(vm.query('up{job="hpcnode"} == 1')) == len(NODES), 60)
        check(up is not None, f"up == 1 in VictoriaMetrics for all {len(NODES)} exporters (remote_write from the agent)")
        labelled = vm.query('count by (cluster, rack, switch) (hpcnode_build_info{job="hpcnode"})')
        check(len(labelled) == 4, f"the target labels cluster, rack and switch arrive with every series ({len(labelled)} groups)")
        check_rules_loaded(vmalert)
        check_alerts(vmalert, insts)
        check(am.posted > 0, f"vmalert sent its alerts to the notifier ({am.posted} posts)")
        check_fleet_rules(vm)
        check_dashboards(vm)
    except Exception as err:  # a crash of the test itself is a failure, with its reason
        check(False, f"fleet e2e aborted: {type(err).__name__}: {err}")
    finally:
        signal.alarm(0)
        # Last started, first stopped: vmalert and the agent must not retry into a stopped store.
        for child in reversed(e2e.children):
            e2e.stop(child)
        if am:
            am.shutdown()
        if e2e.failures:
            for name in sorted(logs.glob("*.log")):
                tail = name.read_text()[-1500:]
                if tail.strip() and not name.name.startswith("exporter-n") or "error" in tail:
                    print(f"--- {name.name} (tail)\n{tail}")
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"fleet e2e: {e2e.passes} passed, {len(e2e.failures)} failed in {time.monotonic() - started:.0f}s")
    for f in e2e.failures:
        log(f"failed: {f}")
    return 1 if e2e.failures else 0


if __name__ == "__main__":
    sys.exit(main())
