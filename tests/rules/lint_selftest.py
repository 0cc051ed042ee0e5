#!/usr/bin/python3
"""Shows that each lint in lint.py can fail: copies alerts/, dashboards/, METRICS.md and the
lint into a temporary tree, breaks one thing at a time, and expects the matching lint to
reject it with the matching message (and the unbroken copy to pass)."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def edit_dashboard(name, change):
    def apply(tree):
        path = tree / "dashboards" / name
        d = json.loads(path.read_text())
        change(d)
        path.write_text(json.dumps(d, indent=2))
    return apply


def edit_text(rel, old, new):
    def apply(tree):
        path = tree / rel
        text = path.read_text()
        assert old in text, f"self-test is out of date: {old!r} not in {rel}"
        path.write_text(text.replace(old, new, 1))
    return apply


def panel(d, title):
    for p in d["panels"]:
        for q in [p] + p.get("panels", []):
            if q.get("title") == title:
                return q
    raise AssertionError(f"self-test is out of date: no panel {title!r}")


def set_in(d, title, fn):
    fn(panel(d, title))


DRIVER = "hpcnode-driver-stack.json"
CAPACITY = "hpcnode-rdma-capacity.json"

CASES = [
    ("dashboards", "has no description",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Throughput", lambda p: p.update(description="")))),
    ("dashboards", "has no unit",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p["fieldConfig"]["defaults"].pop("unit")))),
    ("dashboards", "is not the $datasource variable",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p.update(datasource={"type": "prometheus", "uid": "P1809F7CD0C75ACF3"})))),
    ("dashboards", "must use $__rate_interval",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p["targets"][0].update(
         expr=p["targets"][0]["expr"].replace("$__rate_interval", "5m"))))),
    ("dashboards", "missing or duplicated",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p.update(id=panel(d, "Throughput")["id"])))),
    ("dashboards", "variable $device missing",
     edit_dashboard(CAPACITY, lambda d: d["templating"].update(
         list=[v for v in d["templating"]["list"] if v["name"] != "device"]))),
    ("dashboards", "schemaVersion",
     edit_dashboard(CAPACITY, lambda d: d.update(schemaVersion=36))),
    ("dashboards", "does not follow $job and $instance",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p["targets"][0].update(
         expr=p["targets"][0]["expr"].replace('job=~"$job", ', ""))))),
    ("dashboards", "differ from dashboards/generate.py",
     edit_dashboard(CAPACITY, lambda d: d.update(title="RDMA capacity"))),
    ("promql", "promtool cannot parse",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p["targets"][0].update(
         expr="rate(" + p["targets"][0]["expr"])))),
    ("metric-names", "is not in METRICS.md",
     edit_dashboard(DRIVER, lambda d: set_in(d, "Packets", lambda p: p["targets"][0].update(
         expr=p["targets"][0]["expr"].replace("hpcnode_rdma_port_packets_transmitted_total", "hpcnode_rdma_port_packets_sent_total"))))),
    ("metric-names", "is recorded by no rule",
     edit_text("alerts/rdma.rules.yml", "hpcnode:rdma_port_utilisation:ratio_rate5m\n            > on ()",
               "hpcnode:rdma_port_utilization:ratio_rate5m\n            > on ()")),
    ("metric-names", "is not in METRICS.md",
     edit_text("alerts/rdma.rules.yml", "expr: hpcnode_rdma_port_pma_saturated == 1", "expr: hpcnode_rdma_port_counter_saturated == 1")),
    ("rules", "severity",
     edit_text("alerts/rdma.rules.yml", "        for: 5m\n        labels:\n          severity: critical\n", "        for: 5m\n        labels:\n          severity: page\n")),
    ("rules", "annotation runbook missing",
     edit_text("alerts/exporter.rules.yml", "          runbook: >-\n            On the node", "          hint: >-\n            On the node")),
    ("rules", 'no hpcnode:threshold{threshold="rdma_port_errors_increase_1h", counter="port_xmit_discards"}',
     edit_text("alerts/config.rules.yml", "          counter: port_xmit_discards", "          counter: port_xmit_discard")),
    ("rules", "mixes alerts and recording rules",
     edit_text("alerts/exporter.rules.yml", "    rules:\n", "    rules:\n      - record: hpcnode:exporter_up:sum\n        expr: sum(up)\n")),
    ("coverage", "HpcnodeExporterDown: no test case where it fires",
     edit_text("alerts/tests/exporter_test.yml", "      - eval_time: 7m\n        alertname: HpcnodeExporterDown\n        exp_alerts:\n",
               "      - eval_time: 7m\n        alertname: HpcnodeExporterDown\n        exp_alerts: []\n        unused:\n")),
]


def copy_tree(dest):
    for rel in ("alerts", "dashboards"):
        shutil.copytree(ROOT / rel, dest / rel)
    (dest / "tests" / "rules").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "rules" / "lint.py", dest / "tests" / "rules" / "lint.py")
    shutil.copy(ROOT / "METRICS.md", dest / "METRICS.md")


def lint(tree, check):
    res = subprocess.run([sys.executable, str(tree / "tests" / "rules" / "lint.py"), check],
                         capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout + res.stderr


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        clean = Path(tmp) / "clean"
        copy_tree(clean)
        for check in sorted({c for c, _, _ in CASES}):
            rc, out = lint(clean, check)
            if rc != 0:
                failures += 1
                print(f"FAIL unbroken copy: lint {check} fails:\n{out}")
        for i, (check, message, breakage) in enumerate(CASES):
            tree = Path(tmp) / f"case{i}"
            copy_tree(tree)
            breakage(tree)
            rc, out = lint(tree, check)
            if rc == 0 or message not in out:
                failures += 1
                print(f"FAIL lint {check} did not report {message!r} (rc {rc}):\n{out}")
            else:
                print(f"ok   lint {check} rejects: {message}")
    print(f"lint self-test: {len(CASES) - failures} of {len(CASES)} breakages caught")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
