#!/usr/bin/python3
"""Static checks of alerts/ and dashboards/ (run by tests/rules/check.sh).

    lint.py rules         rule files: group conventions, alert labels and annotations,
                          recording rule names, thresholds defined and used
    lint.py coverage      every alert has a promtool test where it fires and one where it
                          must not; every recording rule appears in a promql_expr_test
    lint.py dashboards    Grafana conventions: schemaVersion, stable uids, the datasource
                          variable, job/instance/device/port variables, units, titles and
                          descriptions, unique panel ids, $__rate_interval in rates
    lint.py promql        every dashboard query parses (promtool check rules on a generated
                          rule file with one recording rule per query)
    lint.py metric-names  every metric name used by rules and dashboards is listed in
                          METRICS.md or recorded by a rule in alerts/

Each prints what it found and exits 1 on a failure. Needs python3-yaml and promtool.
The e2e test (prometheus_e2e.py) imports the query helpers from here.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
DASHBOARDS = ROOT / "dashboards"
METRICS_MD = ROOT / "METRICS.md"

SCHEMA_VERSION = 42
SEVERITIES = {"critical", "warning", "info"}
REQUIRED_ANNOTATIONS = ("summary", "description", "runbook")
REQUIRED_VARIABLES = ("datasource", "job", "instance", "device", "port")
DATASOURCE_REF = "${datasource}"
# Series Prometheus itself attaches to every scrape; dashboards may use them.
PROMETHEUS_SERIES = {"up"}
# Values Grafana would put in for its variables, for parsing and for the e2e test.
GRAFANA_SUBSTITUTIONS = {
    "__rate_interval": "15s", "__interval": "5s", "__range": "5m",
    "job": ".*", "instance": ".*", "device": ".*", "port": ".*", "topn": "10",
}
PROMQL_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
                   "group_right", "bool", "offset", "inf", "nan", "atan2", "start", "end"}


# ---------------------------------------------------------------- loading

def rule_files():
    return sorted(ALERTS.glob("*.yml"))


def test_files():
    return sorted((ALERTS / "tests").glob("*_test.yml"))


def load_rules():
    """[(file, group, rule)] for every rule in alerts/*.yml."""
    out = []
    for path in rule_files():
        doc = yaml.safe_load(path.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                out.append((path, group, rule))
    return out


def dashboard_files():
    return sorted(DASHBOARDS.glob("*.json"))


def all_panels(dash):
    """Every panel, rows and the panels inside collapsed rows included."""
    for p in dash.get("panels", []):
        yield p
        for inner in p.get("panels", []) or []:
            yield inner


def dashboard_queries(dash):
    """[(where, expr)] for every PromQL query of a dashboard, variable queries included
    (label_values(selector, label) contributes its selector; query_result(q) its query)."""
    out = []
    for p in all_panels(dash):
        for t in p.get("targets", []) or []:
            if "expr" in t:
                out.append((f'panel {p.get("id")} "{p.get("title")}" {t.get("refId")}', t["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q, re.S)
        if m:
            out.append((f'variable {v["name"]}', m.group(1)))
            continue
        m = re.fullmatch(r"\s*(?:query_result|metrics|label_names)\((.*)\)\s*", q, re.S)
        out.append((f'variable {v["name"]}', m.group(1) if m else q))
    return out


def substitute(expr, values=None):
    """Replaces Grafana's $var, ${var} and [[var]] by the values Grafana would use."""
    values = dict(GRAFANA_SUBSTITUTIONS, **(values or {}))

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise KeyError(name)
        return values[name]
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]", repl, expr)


def e2e_dashboard_queries(values):
    """[(file name, where, panel title, query)] for every query of every dashboard, the
    variables replaced by `values`, GRAFANA_SUBSTITUTIONS, or match-anything: what the
    end-to-end tests run against a real server."""
    out = []
    for path in dashboard_files():
        d = json.loads(path.read_text())
        names = {v["name"] for v in d["templating"]["list"]}
        for where, expr in dashboard_queries(d):
            title = where.split('"')[1] if '"' in where else where
            out.append((path.name, where, title, substitute(expr, dict(other_variables(names), **values))))
    return out


def other_variables(names):
    """A dashboard's own variables that GRAFANA_SUBSTITUTIONS does not know: match anything."""
    return {v: ".*" for v in names if v not in GRAFANA_SUBSTITUTIONS}


# ---------------------------------------------------------------- PromQL tokens

def metric_names(expr):
    """Metric names a PromQL expression selects, found lexically: strings, label matchers,
    grouping lists, ranges and function names are removed first."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_KEYWORDS:
            continue
        names.add(word)
    return names


def selectors(expr):
    """[(metric name, matcher text)] for every `name{...}` or bare `name` selector."""
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    out = []
    for m in re.finditer(r'(?<![\w.$"])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?(\s*\()?', e):
        name, matchers, call = m.group(1), m.group(2) or "", m.group(3)
        if call or name.lower() in PROMQL_KEYWORDS:
            continue
        out.append((name, matchers))
    return out


def metrics_md_names():
    return set(re.findall(r"`(hpcnode_[a-z0-9_]+)`", METRICS_MD.read_text()))


def recorded_names():
    return {r["record"] for _, _, r in load_rules() if "record" in r}


# ---------------------------------------------------------------- checks

class Report:
    def __init__(self, name):
        self.name, self.errors, self.checked = name, [], 0

    def check(self, ok, message):
        self.checked += 1
        if not ok:
            self.errors.append(message)

    def finish(self):
        for e in self.errors:
            print(f"  {self.name}: {e}")
        print(f"  {self.name}: {self.checked} checked, {len(self.errors)} failed")
        return 1 if self.errors else 0


def check_rules():
    r = Report("rules")
    rules = load_rules()
    thresholds_defined, settings_defined = set(), set()
    for path, group, rule in rules:
        if rule.get("record") == "hpcnode:threshold":
            thresholds_defined.add((rule["labels"]["threshold"], rule["labels"].get("counter")))
        if rule.get("record") == "hpcnode:setting":
            settings_defined.add(rule["labels"]["setting"])
    group_names = set()
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            kinds = {"alert" if "alert" in x else "record" for x in group["rules"]}
            r.check(len(kinds) == 1, f'{path.name}: group {group["name"]} mixes alerts and recording rules')
            r.check(group["name"] not in group_names, f'group name {group["name"]} used twice')
            group_names.add(group["name"])
            if kinds == {"record"}:
                r.check(group["name"].endswith(".rules"), f'{path.name}: recording group {group["name"]} should be named *.rules')
            else:
                r.check(not group["name"].endswith(".rules"), f'{path.name}: alerting group {group["name"]} should not be named *.rules')
    alert_names = set()
    for path, group, rule in rules:
        text = rule["expr"]
        used = set(re.findall(r'hpcnode:threshold\{threshold="(\w+)"\}', text))
        if "alert" in rule:
            name = rule["alert"]
            r.check(re.fullmatch(r"Hpcnode[A-Z][A-Za-z]+", name) is not None, f"{name}: alert names are HpcnodeCamelCase")
            r.check(name not in alert_names, f"{name}: defined twice")
            alert_names.add(name)
            sev = (rule.get("labels") or {}).get("severity")
            r.check(sev in SEVERITIES, f"{name}: severity {sev!r} not in {sorted(SEVERITIES)}")
            ann = rule.get("annotations") or {}
            for key in REQUIRED_ANNOTATIONS:
                r.check(bool(str(ann.get(key, "")).strip()), f"{name}: annotation {key} missing")
            # A per-counter threshold join must have a threshold for every counter selected.
            for th in used:
                if "on (counter)" in text:
                    sel = re.search(r'counter=~?"([^"]+)"', text)
                    counters = sel.group(1).split("|") if sel else []
                    for c in counters:
                        r.check((th, c) in thresholds_defined, f'{name}: no hpcnode:threshold{{threshold="{th}", counter="{c}"}} in config.rules.yml')
                else:
                    r.check((th, None) in thresholds_defined, f'{name}: no hpcnode:threshold{{threshold="{th}"}} in config.rules.yml')
        else:
            name = rule["record"]
            r.check(re.fullmatch(r"[a-z][a-z0-9_]*:[a-z0-9_]+(:[a-z0-9_]+)?", name) is not None,
                    f"{name}: recording rule names are level:metric:operations")
            for th in used:
                r.check(any(t == th for t, _ in thresholds_defined), f'{name}: threshold {th} not defined')
    # Every threshold and setting defined is used by a rule or a dashboard query.
    users = [x["expr"] for _, _, x in rules if x.get("record") not in ("hpcnode:threshold", "hpcnode:setting")]
    for path in dashboard_files():
        users += [e for _, e in dashboard_queries(json.loads(path.read_text()))]
    for th in sorted({t for t, _ in thresholds_defined}):
        r.check(any(f'threshold="{th}"' in u for u in users), f"threshold {th} is defined but nothing uses it")
    for st in sorted(settings_defined):
        r.check(any(f'setting="{st}"' in u for u in users), f"setting {st} is defined but nothing uses it")
    return r.finish()


def check_coverage():
    r = Report("coverage")
    alerts = {x["alert"] for _, _, x in load_rules() if "alert" in x}
    records = recorded_names() - {"hpcnode:threshold", "hpcnode:setting"}
    fires, silent, exprs, tested_files = set(), set(), [], set()
    for path in test_files():
        doc = yaml.safe_load(path.read_text())
        for f in doc.get("rule_files", []):
            tested_files.add((path.parent / f).resolve())
        for t in doc.get("tests", []):
            for a in t.get("alert_rule_test", []) or []:
                (fires if a.get("exp_alerts") else silent).add(a["alertname"])
            for q in t.get("promql_expr_test", []) or []:
                exprs.append(q["expr"])
    for f in rule_files():
        r.check(f.resolve() in tested_files, f"{f.name} is not loaded by any test in alerts/tests/")
    for a in sorted(alerts):
        r.check(a in fires, f"{a}: no test case where it fires")
        r.check(a in silent, f"{a}: no test case where it must not fire")
    for a in sorted((fires | silent) - alerts):
        r.check(False, f"tests name an alert that does not exist: {a}")
    for rec in sorted(records):
        r.check(any(rec in metric_names(e) for e in exprs), f"{rec}: no promql_expr_test evaluates it")
    return r.finish()


def check_dashboards():
    r = Report("dashboards")
    uids, titles = set(), set()
    gen = subprocess.run([sys.executable, str(DASHBOARDS / "generate.py"), "--check"],
                         capture_output=True, text=True)
    r.check(gen.returncode == 0, "dashboards/*.json differ from dashboards/generate.py: " + gen.stdout.strip())
    files = dashboard_files()
    r.check(len(files) >= 2, "expected the driver-stack and capacity dashboards")
    provisioning = sorted((DASHBOARDS / "provisioning").glob("*.yml"))
    r.check(bool(provisioning), "dashboards/provisioning/*.yml missing")
    for path in provisioning:
        doc = yaml.safe_load(path.read_text())
        providers = doc.get("providers") or []
        r.check(doc.get("apiVersion") == 1 and providers, f"{path.name}: apiVersion 1 with providers")
        for p in providers:
            r.check(p.get("type") == "file" and (p.get("options") or {}).get("path"), f"{path.name}: provider {p.get('name')} needs type file and options.path")
    for path in files:
        d = json.loads(path.read_text())
        n = path.name
        uid = d.get("uid", "")
        r.check(re.fullmatch(r"hpcnode-[a-z0-9-]{1,32}", uid or "") is not None, f"{n}: uid {uid!r} must be a fixed hpcnode-* string")
        r.check(uid not in uids, f"{n}: uid {uid} used twice")
        uids.add(uid)
        r.check(d.get("title") and d["title"] not in titles, f"{n}: missing or duplicate title")
        titles.add(d.get("title"))
        r.check(d.get("schemaVersion") == SCHEMA_VERSION, f"{n}: schemaVersion {d.get('schemaVersion')} != {SCHEMA_VERSION}")
        r.check(d.get("id") is None, f"{n}: dashboards carry no database id")
        variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
        for name in REQUIRED_VARIABLES:
            r.check(name in variables, f"{n}: variable ${name} missing")
        ds = variables.get("datasource", {})
        r.check(ds.get("type") == "datasource" and ds.get("query") == "prometheus", f"{n}: $datasource must be a Prometheus datasource variable")
        # No datasource uid anywhere but the variable (Grafana's built-in annotation aside).
        def walk(node, where):
            if isinstance(node, dict):
                if "datasource" in node:
                    ref = node["datasource"]
                    builtin = isinstance(ref, dict) and ref.get("uid") == "-- Grafana --"
                    ok = builtin or (isinstance(ref, dict) and ref.get("uid") == DATASOURCE_REF)
                    r.check(ok, f"{n}: {where}: datasource {ref!r} is not the $datasource variable")
                for k, v in node.items():
                    if k != "datasource":
                        walk(v, f"{where}.{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{where}[{i}]")
        walk(d, "dashboard")
        ids = set()
        for p in all_panels(d):
            pid, title = p.get("id"), p.get("title", "")
            r.check(isinstance(pid, int) and pid not in ids, f"{n}: panel id {pid} ({title!r}) missing or duplicated")
            ids.add(pid)
            r.check(bool(title.strip()), f"{n}: panel {pid} has no title")
            gp = p.get("gridPos", {})
            r.check(all(k in gp for k in "hwxy") and gp.get("x", 0) + gp.get("w", 0) <= 24, f"{n}: panel {pid} gridPos {gp}")
            if p.get("type") == "row":
                continue
            r.check(bool(p.get("description", "").strip()), f"{n}: panel {pid} {title!r} has no description")
            if p.get("targets"):
                unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
                r.check(bool(unit), f"{n}: panel {pid} {title!r} has no unit")
                for o in p.get("fieldConfig", {}).get("overrides", []):
                    r.check(o.get("matcher", {}).get("id") in ("byName", "byFrameRefID", "byRegexp"), f"{n}: panel {pid}: unexpected override matcher")
        for where, expr in dashboard_queries(d):
            for fn, rng in re.findall(r"\b(rate|irate|increase|delta|idelta|deriv)\s*\([^\[]*\[([^\]]*)\]", expr):
                allowed = {"$__rate_interval"} | ({"$__range"} if fn == "increase" else set())
                r.check(rng in allowed, f"{n}: {where}: {fn}(...[{rng}]) must use $__rate_interval")
            for rng in re.findall(r"\[([^\]]*)\]", expr):
                r.check(rng in ("$__rate_interval", "$__range"), f"{n}: {where}: range [{rng}] must be a Grafana interval variable")
            try:
                substitute(expr, other_variables(variables))
            except KeyError as e:
                r.check(False, f"{n}: {where}: unknown variable ${e.args[0]}")
            # Every exporter series a panel selects follows the job and instance variables.
            if where.startswith("panel"):
                for name, matchers in selectors(expr):
                    if name.startswith("hpcnode_") or (name.startswith("hpcnode:") and name not in ("hpcnode:threshold", "hpcnode:setting")) or name == "up":
                        r.check('job=~"$job"' in matchers and 'instance=~"$instance"' in matchers,
                                f"{n}: {where}: {name} does not follow $job and $instance")
    return r.finish()


def check_promql():
    r = Report("promql")
    queries = []
    for path in dashboard_files():
        d = json.loads(path.read_text())
        names = {v["name"] for v in d.get("templating", {}).get("list", [])}
        for where, expr in dashboard_queries(d):
            try:
                queries.append((f"{path.name}: {where}", substitute(expr, other_variables(names))))
            except KeyError:
                queries.append((f"{path.name}: {where}", expr))
    # One recording rule per query; promtool parses them all, then one by one on failure.
    def promtool_ok(items):
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            yaml.safe_dump({"groups": [{"name": "dashboard-queries.rules", "rules": [
                {"record": f"dashboard:query_{i}:parse", "expr": e} for i, (_, e) in enumerate(items)]}]}, f)
            name = f.name
        try:
            res = subprocess.run(["promtool", "check", "rules", name], capture_output=True, text=True)
            return res.returncode == 0, res.stdout + res.stderr
        finally:
            Path(name).unlink()
    ok, out = promtool_ok(queries)
    if ok:
        for _ in queries:
            r.check(True, "")
    else:
        for where, e in queries:
            one_ok, one_out = promtool_ok([(where, e)])
            r.check(one_ok, f"{where}: promtool cannot parse {e!r}: {one_out.strip().splitlines()[-1] if one_out.strip() else ''}")
    print(f"  promql: {len(queries)} dashboard queries handed to promtool check rules")
    return r.finish()


def check_metric_names():
    r = Report("metric-names")
    listed, recorded = metrics_md_names(), recorded_names()
    r.check(len(listed) > 10, "found almost no backticked hpcnode_* names in METRICS.md")
    used = []
    for path, group, rule in load_rules():
        used.append((f"{path.name}: {rule.get('alert') or rule.get('record')}", rule["expr"]))
        for key, value in (rule.get("annotations") or {}).items():
            for q in re.findall(r'printf\s+"((?:[^"\\]|\\.)*)"', value):
                used.append((f"{path.name}: {rule.get('alert')} annotation {key}", q))
    for path in dashboard_files():
        d = json.loads(path.read_text())
        for where, expr in dashboard_queries(d):
            used.append((f"{path.name}: {where}", expr))
    for where, expr in used:
        for name in metric_names(expr):
            if name.startswith("hpcnode_"):
                r.check(name in listed, f"{where}: {name} is not in METRICS.md")
            elif ":" in name:
                r.check(name in recorded, f"{where}: {name} is recorded by no rule in alerts/")
            else:
                r.check(name in PROMETHEUS_SERIES, f"{where}: {name} is neither in METRICS.md nor a Prometheus series")
    # Names that dashboards mention in prose (descriptions) must exist as well.
    for path in dashboard_files():
        text = path.read_text()
        # A name after a colon is part of a recorded name (cluster:hpcnode_..., below).
        for name in set(re.findall(r"(?<![\w:])hpcnode_[a-z0-9_]+\b", text)) - {"hpcnode_exporter"}:
            r.check(name in listed, f"{path.name}: text mentions {name}, which METRICS.md lacks")
        for name in set(re.findall(r"\bhpcnode:[a-z0-9_:]+|\b[a-z][a-z0-9_]*:hpcnode_[a-z0-9_:]+", text)):
            r.check(name in recorded, f"{path.name}: text mentions {name}, which no rule records")
    return r.finish()


CHECKS = {"rules": check_rules, "coverage": check_coverage, "dashboards": check_dashboards,
          "promql": check_promql, "metric-names": check_metric_names}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(CHECKS[sys.argv[1]]())
