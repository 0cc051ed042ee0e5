#!/usr/bin/python3
"""Generates the Grafana dashboards in this directory from the panel definitions below.

    /usr/bin/python3 dashboards/generate.py           # rewrite dashboards/*.json
    /usr/bin/python3 dashboards/generate.py --check   # exit 1 if a committed file differs

The JSON files are committed (Grafana provisioning reads them); edit this file, not the
JSON, and run it. Each collector owns one function that returns its panels, so a new
collector adds its section here, its alerts and recording rules in alerts/, and its
promtool tests in alerts/tests/; tests/rules/check.sh lints all of them.
Standard library only.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 42  # the latest of Grafana's classic-model migrations
DS = {"type": "prometheus", "uid": "${datasource}"}

# Label matchers every query carries, so the variables at the top of a dashboard apply.
NODE = 'job=~"$job", instance=~"$instance"'
PORT = NODE + ', device=~"$device", port=~"$port"'

PORT_STATES = {1: ("DOWN", "red"), 2: ("INIT", "orange"), 3: ("ARMED", "orange"),
               4: ("ACTIVE", "green"), 5: ("ACTIVE_DEFER", "green")}
PHYS_STATES = {1: ("Sleep", "red"), 2: ("Polling", "red"), 3: ("Disabled", "red"),
               4: ("PortConfigurationTraining", "orange"), 5: ("LinkUp", "green"),
               6: ("LinkErrorRecovery", "orange"), 7: ("PhyTest", "orange")}
# hw_counters that say something about congestion and retransmission (mlx5 names).
HW_CONGESTION = ("out_of_buffer|out_of_sequence|duplicate_request|local_ack_timeout_err|"
                 "rnr_nak_retry_err|packet_seq_err|implied_nak_seq_err|roce_adp_retrans|"
                 "roce_adp_retrans_to|roce_slow_restart|np_cnp_sent|rp_cnp_handled|"
                 "np_ecn_marked_roce_packets")


# ---------------------------------------------------------------- building blocks

def value_mappings(states):
    return [{"type": "value", "options": {
        str(k): {"text": text, "color": color, "index": i}
        for i, (k, (text, color)) in enumerate(sorted(states.items()))}}]


def target(expr, legend="", ref="A", instant=False, table=False):
    t = {"datasource": DS, "refId": ref, "expr": expr, "editorMode": "code",
         "legendFormat": legend or "__auto", "range": not instant, "instant": instant}
    if table:
        t["format"] = "table"
    return t


def panel(kind, title, description, targets, unit, w=12, h=8, decimals=None,
          mappings=None, thresholds=None, custom=None, options=None, overrides=None,
          transformations=None, extra=None):
    defaults = {"unit": unit, "color": {"mode": "palette-classic"}}
    if decimals is not None:
        defaults["decimals"] = decimals
    if mappings:
        defaults["mappings"] = mappings
        defaults["color"] = {"mode": "thresholds"}
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
        defaults["color"] = {"mode": "thresholds"}
    if custom:
        defaults["custom"] = custom
    p = {"type": kind, "title": title, "description": description, "datasource": DS,
         "gridPos": {"w": w, "h": h},
         "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
         "options": options or {}, "targets": targets}
    if transformations:
        p["transformations"] = transformations
    if extra:
        p.update(extra)
    return p


def timeseries(title, description, targets, unit, w=12, h=8, **kw):
    kw.setdefault("options", {
        "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                   "calcs": ["mean", "max"]},
        "tooltip": {"mode": "multi", "sort": "desc"}})
    kw.setdefault("custom", {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                             "showPoints": "never", "spanNulls": False})
    return panel("timeseries", title, description, targets, unit, w, h, **kw)


def stat(title, description, targets, unit, w=4, h=4, **kw):
    kw.setdefault("options", {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "background", "graphMode": "none", "textMode": "auto",
        "justifyMode": "auto", "orientation": "auto"})
    return panel("stat", title, description, targets, unit, w, h, **kw)


# Stat options that show the series' name (its legend) instead of its value.
STAT_NAME = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
             "colorMode": "none", "graphMode": "none", "textMode": "name",
             "justifyMode": "auto", "orientation": "auto"}


def state_timeline(title, description, targets, states, w=12, h=8):
    return panel("state-timeline", title, description, targets, "none", w, h,
                 mappings=value_mappings(states),
                 thresholds=[{"color": "text", "value": None}],
                 options={"showValue": "auto", "mergeValues": True, "rowHeight": 0.9,
                          "legend": {"displayMode": "list", "placement": "bottom",
                                     "showLegend": False},
                          "tooltip": {"mode": "single", "sort": "none"}})


def column(ref, name, unit, mappings=None, cell=None):
    props = [{"id": "displayName", "value": name}, {"id": "unit", "value": unit}]
    if mappings:
        props.append({"id": "mappings", "value": mappings})
    if cell:
        props.append({"id": "custom.cellOptions", "value": {"type": cell}})
    return {"matcher": {"id": "byName", "options": "Value #" + ref}, "properties": props}


def table(title, description, targets, unit, columns, hide, order, w=24, h=8, sort=None):
    """An instant table: the queries' rows merged on their labels, `hide` label columns
    dropped, `order` label columns first, value columns described by `columns`."""
    organize = {"excludeByName": {name: True for name in ["Time"] + hide},
                "indexByName": {name: i for i, name in enumerate(order)},
                "renameByName": {}}
    options = {"showHeader": True, "cellHeight": "sm",
               "footer": {"show": False, "reducer": ["sum"], "countRows": False}}
    if sort:
        options["sortBy"] = [{"displayName": sort, "desc": False}]
    return panel("table", title, description, targets, unit, w, h,
                 custom={"align": "auto", "cellOptions": {"type": "auto"}},
                 thresholds=[{"color": "text", "value": None}],
                 overrides=columns, options=options,
                 transformations=[{"id": "merge", "options": {}},
                                  {"id": "organize", "options": organize}])


def text(title, description, content, w=24, h=3):
    return {"type": "text", "title": title, "description": description,
            "gridPos": {"w": w, "h": h},
            "options": {"mode": "markdown", "content": content,
                        "code": {"language": "plaintext", "showLineNumbers": False,
                                 "showMiniMap": False}}}


def row(title, panels, collapsed=False):
    return {"type": "row", "title": title, "collapsed": collapsed, "panels": panels}


def layout(sections):
    """Numbers the panels and places them left to right, top to bottom, on the 24-column
    grid. A collapsed row carries its panels inside it, as Grafana saves them."""
    out, next_id, y = [], 1, 0

    def place(panels, y):
        nonlocal next_id
        x, row_h = 0, 0
        for p in panels:
            w, h = p["gridPos"]["w"], p["gridPos"]["h"]
            if x + w > 24:
                x, y, row_h = 0, y + row_h, 0
            p["id"] = next_id
            next_id += 1
            p["gridPos"] = {"h": h, "w": w, "x": x, "y": y}
            x += w
            row_h = max(row_h, h)
        return y + row_h

    for section in sections:
        section["id"] = next_id
        next_id += 1
        section["gridPos"] = {"h": 1, "w": 24, "x": 0, "y": y}
        y += 1
        out.append(section)
        if section["collapsed"]:
            place(section["panels"], y)
        else:
            y = place(section["panels"], y)
            out.extend(section["panels"])
            section["panels"] = []
    return out


def query_variable(name, label, query, multi=True, include_all=True):
    v = {"name": name, "label": label, "type": "query", "datasource": DS,
         "query": {"qryType": 1, "query": query,
                   "refId": "PrometheusVariableQueryEditor-VariableQuery"},
         "refresh": 2, "regex": "", "sort": 1,
         "multi": multi, "includeAll": include_all, "options": [],
         "hide": 0}
    if include_all:
        v["allValue"] = ".*"
    return v


def datasource_variable():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "regex": "", "options": [],
            "refresh": 1, "hide": 0, "multi": False, "includeAll": False}


def dashboard(uid, title, description, tags, variables, sections, time_from="now-6h"):
    return {
        "uid": uid, "title": title, "description": description, "tags": tags,
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True,
        "graphTooltip": 1, "liveNow": False, "refresh": "1m", "timezone": "",
        "time": {"from": time_from, "to": "now"}, "timepicker": {},
        "fiscalYearStartMonth": 0, "weekStart": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "hpcnode dashboards", "type": "dashboards", "tags": ["hpcnode"],
                   "asDropdown": True, "includeVars": True, "keepTime": True,
                   "icon": "external link", "targetBlank": False, "tooltip": "", "url": ""}],
        "templating": {"list": variables},
        "panels": layout(sections),
    }


def node_variables(single_instance):
    return [
        datasource_variable(),
        query_variable("job", "Job", "label_values(hpcnode_build_info, job)"),
        query_variable("instance", "Node", 'label_values(hpcnode_build_info{job=~"$job"}, instance)',
                       multi=not single_instance, include_all=not single_instance),
        query_variable("device", "RDMA device",
                       'label_values(hpcnode_rdma_port_state_id{job=~"$job", instance=~"$instance"}, device)'),
        query_variable("port", "Port",
                       'label_values(hpcnode_rdma_port_state_id{job=~"$job", instance=~"$instance", device=~"$device"}, port)'),
    ]


# ---------------------------------------------------------------- exporter health

def exporter_panels():
    return [
        stat("Exporter up", "Whether Prometheus scraped the exporter at its last attempt (the `up` series of the scrape job). DOWN means none of the panels below are current.",
             [target(f'up{{{NODE}}}', "{{instance}}", instant=True)], "none",
             mappings=value_mappings({0: ("DOWN", "red"), 1: ("UP", "green")})),
        stat("Exporter version", "hpcnode_exporter version and git revision (hpcnode_build_info).",
             [target(f'hpcnode_build_info{{{NODE}}}', "{{version}} ({{revision}})", instant=True)], "none",
             options=STAT_NAME),
        stat("Collectors failing", "Collectors whose last run failed, overran --scrape.timeout or is still stuck (hpcnode_scrape_collector_success == 0). Alert: HpcnodeCollectorFailing.",
             [target(f'count(hpcnode_scrape_collector_success{{{NODE}}} == 0) or vector(0)', "failing", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Collector errors in range", "Read and parse errors of all collectors in the dashboard's time range (hpcnode_collector_errors_total). One bad file never hides the other devices; the exporter log names it. Alert: HpcnodeCollectorReadErrors.",
             [target(f'sum(increase(hpcnode_collector_errors_total{{{NODE}}}[$__range]))', "errors", instant=True)], "none",
             decimals=0, thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("RDMA ports not ACTIVE", "Ports whose state is neither ACTIVE nor ACTIVE_DEFER. Alert: HpcnodeRdmaPortNotActive.",
             [target(f'count(hpcnode_rdma_port_state_id{{{PORT}}} != 4 and hpcnode_rdma_port_state_id{{{PORT}}} != 5) or vector(0)', "ports", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Saturated counters", "PMA counters stuck at their maximum: they no longer count, so their rates read 0 (hpcnode_rdma_port_pma_saturated). Reset them with perfquery -R. Alert: HpcnodeRdmaErrorCounterSaturated.",
             [target(f'sum(hpcnode_rdma_port_pma_saturated{{{PORT}}}) or vector(0)', "counters", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        state_timeline("Collector health", "Each collector's result at every scrape: OK, or FAILED when it failed, overran --scrape.timeout or was still stuck in an earlier run.",
                       [target(f'hpcnode_scrape_collector_success{{{NODE}}}', "{{instance}} {{collector}}")],
                       {0: ("FAILED", "red"), 1: ("OK", "green")}, w=8),
        timeseries("Collector duration", "Time each collector took per scrape; an overrun shows the deadline (--scrape.timeout).",
                   [target(f'hpcnode_scrape_collector_duration_seconds{{{NODE}}}', "{{instance}} {{collector}}")], "s", w=8),
        timeseries("Collector errors", "Errors per second by collector and kind: io (a read failed), parse (unexpected content), not_regular_file, timeout, still_running.",
                   [target(f'sum by (instance, collector, kind) (rate(hpcnode_collector_errors_total{{{NODE}}}[$__rate_interval]))', "{{instance}} {{collector}} {{kind}}")], "cps", w=8),
    ]


# ---------------------------------------------------------------- rdma collector

# Query B of a two-direction panel is drawn below the axis.
RECEIVE_BELOW_AXIS = {"matcher": {"id": "byFrameRefID", "options": "B"},
                      "properties": [{"id": "custom.transform", "value": "negative-Y"}]}


def rdma_port_table():
    """One row per port: the same label joins on every query, so that `merge` lines them up."""
    def joined(metric_expr):
        return (f'{metric_expr}\n'
                f'* on (job, instance, device, port) group_left (link_layer, netdev, lid)\n'
                f'  hpcnode_rdma_port_info{{{PORT}}}\n'
                f'* on (job, instance, device) group_left (firmware_version, hca_type, board_id)\n'
                f'  hpcnode_rdma_device_info{{{NODE}}}')
    targets = [
        target(joined(f'hpcnode_rdma_port_state_id{{{PORT}}}'), ref="A", instant=True, table=True),
        target(joined(f'hpcnode_rdma_port_physical_state_id{{{PORT}}}'), ref="B", instant=True, table=True),
        target(joined(f'hpcnode_rdma_port_rate_bytes_per_second{{{PORT}}} * 8'), ref="C", instant=True, table=True),
        target(joined(f'hpcnode_rdma_port_data_rate_bytes_per_second{{{PORT}}} * 8'), ref="D", instant=True, table=True),
    ]
    columns = [
        column("A", "State", "none", value_mappings(PORT_STATES), "color-background"),
        column("B", "Physical state", "none", value_mappings(PHYS_STATES), "color-background"),
        column("C", "Rate", "bps"),
        column("D", "Data rate", "bps"),
    ]
    return table(
        "RDMA ports at a glance",
        "Every RDMA port of the node at a glance: state (ACTIVE expected), physical state (LinkUp expected; "
        "some mlx5 firmware prints 4 for a working link), the signalling rate the port trained at, the data rate "
        "after line encoding (QDR 40 Gb/s carries 32 Gb/s), link layer, network device, LID, firmware and HCA type. "
        "A rate lower than the node's peers means a link trained at lower width or speed.",
        targets, "none", columns, hide=["job", "__name__"],
        order=["instance", "device", "port", "Value #A", "Value #B", "Value #C", "Value #D",
               "link_layer", "netdev", "lid", "firmware_version", "hca_type", "board_id"],
        h=7)


def rdma_node_panels():
    return [
        rdma_port_table(),
        state_timeline("Port state over time", "Port state at every scrape (hpcnode_rdma_port_state_id): when a link went down and came back.",
                       [target(f'hpcnode_rdma_port_state_id{{{PORT}}}', "{{instance}} {{device}}/{{port}}")], PORT_STATES),
        state_timeline("Physical state over time", "Physical link state at every scrape (hpcnode_rdma_port_physical_state_id). Polling: no link partner; LinkErrorRecovery: retraining.",
                       [target(f'hpcnode_rdma_port_physical_state_id{{{PORT}}}', "{{instance}} {{device}}/{{port}}")], PHYS_STATES),
        timeseries("Port downs and carrier changes", "Downs per scrape interval as the scrapes see them (hpcnode_rdma_port_downs_total: link_downed's increase, or a port that left ACTIVE; a lower bound), and for RoCE ports the kernel's count of carrier changes of the port's network device (hpcnode_rdma_port_netdev_carrier_changes_total: each down and each up). A port that flaps between scrapes reads ACTIVE in the state timeline but shows here. Alert: HpcnodeRdmaPortFlapping.",
                   [target(f'sum by (instance, device, port) (increase(hpcnode_rdma_port_downs_total{{{PORT}}}[$__rate_interval]))', "{{instance}} {{device}}/{{port}} downs", "A"),
                    target(f'sum by (instance, device, port) (increase(hpcnode_rdma_port_netdev_carrier_changes_total{{{PORT}}}[$__rate_interval]))', "{{instance}} {{device}}/{{port}} carrier changes", "B")],
                   "none", decimals=0,
                   custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 60,
                           "showPoints": "never", "spanNulls": False}),
        timeseries("Port events (kernel)", "Every event the RDMA core delivered per port and scrape interval, counted in the kernel by the rdma_port_events eBPF probe (hpcnode_rdma_port_events_total): port_err and port_active are the link going down and up, however short; lid_change, sm_change, client_reregister: the subnet manager; gid_change: addresses; device_fatal: the HCA died (port empty). Empty where the probe is not attached (see hpcnode_ebpf_probe_attached).",
                   [target(f'sum by (instance, device, port, event) (increase(hpcnode_rdma_port_events_total{{{PORT}}}[$__rate_interval]))', "{{instance}} {{device}}/{{port}} {{event}}")],
                   "none", decimals=0,
                   custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 60,
                           "showPoints": "never", "spanNulls": False, "stacking": {"mode": "normal"}}),
        timeseries("Throughput", "Bytes per second sent (above the axis) and received (below it) per port; the exporter already converts the 4-byte PMA data words to bytes.",
                   [target(f'rate(hpcnode_rdma_port_data_transmitted_bytes_total{{{PORT}}}[$__rate_interval])', "{{instance}} {{device}}/{{port}} transmit", "A"),
                    target(f'rate(hpcnode_rdma_port_data_received_bytes_total{{{PORT}}}[$__rate_interval])', "{{instance}} {{device}}/{{port}} receive", "B")], "Bps",
                   overrides=[RECEIVE_BELOW_AXIS]),
        timeseries("Utilisation of the data rate", "Throughput as a fraction of the port's data rate after line encoding (hpcnode_rdma_port_data_rate_bytes_per_second), per direction. Ports with a data rate of 0 are left out.",
                   [target(f'rate(hpcnode_rdma_port_data_transmitted_bytes_total{{{PORT}}}[$__rate_interval]) / (hpcnode_rdma_port_data_rate_bytes_per_second{{{PORT}}} > 0)', "{{instance}} {{device}}/{{port}} transmit", "A"),
                    target(f'rate(hpcnode_rdma_port_data_received_bytes_total{{{PORT}}}[$__rate_interval]) / (hpcnode_rdma_port_data_rate_bytes_per_second{{{PORT}}} > 0)', "{{instance}} {{device}}/{{port}} receive", "B")], "percentunit"),
        timeseries("Packets", "Packets per second sent (above the axis) and received (below it) per port.",
                   [target(f'rate(hpcnode_rdma_port_packets_transmitted_total{{{PORT}}}[$__rate_interval])', "{{instance}} {{device}}/{{port}} transmit", "A"),
                    target(f'rate(hpcnode_rdma_port_packets_received_total{{{PORT}}}[$__rate_interval])', "{{instance}} {{device}}/{{port}} receive", "B")], "pps",
                   overrides=[RECEIVE_BELOW_AXIS]),
        timeseries("Error counters", "PMA error counters per second, by counter (hpcnode_rdma_port_errors_total). symbol_error, link_error_recovery and link_downed: the physical link; port_rcv_errors: bad packets on this link; port_rcv_remote_physical_errors: bad packets from elsewhere; port_xmit_discards: packets the fabric did not take.",
                   [target(f'sum by (instance, device, port, counter) (rate(hpcnode_rdma_port_errors_total{{{PORT}}}[$__rate_interval]))', "{{instance}} {{device}}/{{port}} {{counter}}")], "cps"),
        timeseries("Congestion and retransmission (hw_counters)", "Driver hw_counters per second that count drops, retransmissions and congestion notifications (mlx5 names: out_of_buffer, local_ack_timeout_err, roce_adp_retrans*, np_cnp_sent, rp_cnp_handled, ...). Empty for drivers without hw_counters.",
                   [target(f'sum by (instance, device, port, counter) (rate(hpcnode_rdma_port_hw_stat_total{{{PORT}, counter=~"{HW_CONGESTION}"}}[$__rate_interval]))', "{{instance}} {{device}}/{{port}} {{counter}}")], "cps"),
        timeseries("Transmit wait", "port_xmit_wait ticks per second: ticks in which the port had data to send but could not (no credits from the other end: congestion downstream). The tick length is HCA-specific; the capacity planning dashboard converts ticks into a fraction of time under a stated assumption.",
                   [target(f'rate(hpcnode_rdma_port_transmit_wait_total{{{PORT}}}[$__rate_interval])', "{{instance}} {{device}}/{{port}}")], "suffix: ticks/s"),
    ]


# ---------------------------------------------------------------- rdma_userspace collector

LINKER_TAKES = {0: ("", "text"), 1: ("the linker's", "green")}
LIBRARY_INFO = f'hpcnode_rdma_userspace_library_info{{{NODE}}}'
# Versions of each library on the path, a copy without one not counted (as the alert counts).
LIBRARY_VERSIONS = (f'count by (job, instance, library) (count by (job, instance, library, version) '
                    f'(hpcnode_rdma_userspace_library_info{{{NODE}, version!=""}}))')


def per_copy(expr):
    """A per-library value on each copy's row: the same labels as the Resolved column."""
    return f'sum without (resolved) ({expr} * on (job, instance, library) group_right {LIBRARY_INFO})'


def rdma_userspace_panels():
    return [
        stat("Libraries in several versions", "RDMA userspace libraries whose copies on the library path are of two versions or more (hpcnode_rdma_userspace_library_info; a copy without a version not counted). The table beside lists each copy; an application loads the one the linker takes, whatever its packages installed. Alert: HpcnodeRdmaStaleUserspaceLibrary.",
             [target(f'count({LIBRARY_VERSIONS} > 1) or vector(0)', "libraries", instant=True)], "none",
             w=4, h=8, thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        table("RDMA userspace libraries", "Every copy of the RDMA userspace libraries (libibverbs, librdmacm, libibumad, the mlx5, mlx4 and EFA providers, libmicmgmt) on the library path under --path.rootfs: ld.so.conf and its includes, the default directories, /usr/local/lib64 and /usr/local/lib (hpcnode_rdma_userspace_library_info). Version: the real file's name after the soname (empty: none, or a cache entry whose file is gone). The linker's: the copy ld.so.cache gives the dynamic linker (without a cache, the first in the default directories). Copies and versions: of the library on this node (hpcnode_rdma_userspace_library_copies).",
              [target(f'sum without (resolved) (hpcnode_rdma_userspace_library_info{{{NODE}, resolved="1"}} '
                      f'or hpcnode_rdma_userspace_library_info{{{NODE}, resolved="0"}} * 0)', ref="A", instant=True, table=True),
               target(per_copy(f'hpcnode_rdma_userspace_library_copies{{{NODE}}}'), ref="B", instant=True, table=True),
               target(per_copy(LIBRARY_VERSIONS), ref="C", instant=True, table=True)],
              "none", [column("A", "Resolved", "none", value_mappings(LINKER_TAKES), "color-background"),
                       column("B", "Copies", "none"), column("C", "Versions", "none")],
              hide=["job", "__name__"],
              order=["instance", "library", "path", "version", "Value #A", "Value #B", "Value #C"],
              w=20, h=8, sort="library"),
    ]


# ---------------------------------------------------------------- mic collector

# Card states folded into four classes for the timeline; the state itself is a label.
MIC_STATE_CLASSES = {1: ("ONLINE", "green"), 2: ("BOOTING", "orange"),
                     3: ("NOT STARTED", "blue"), 4: ("FAILED", "red")}
MIC_STATES_BOOTING = "booting|booting_firmware"
MIC_STATES_NOT_STARTED = "ready|shutdown|shutting_down|resetting|online_firmware"


def mic_state_class():
    """One series per card whose value is its state's class (MIC_STATE_CLASSES)."""
    def cls(states, code):
        return f'(hpcnode_mic_card_state{{{NODE}, state=~"{states}"}} == 1) * {code}'
    failed = f'(hpcnode_mic_card_state{{{NODE}, state!~"online|{MIC_STATES_BOOTING}|{MIC_STATES_NOT_STARTED}"}} == 1) * 4'
    return ("max by (instance, device) (\n  "
            + "\nor\n  ".join([cls("online", 1), cls(MIC_STATES_BOOTING, 2),
                                 cls(MIC_STATES_NOT_STARTED, 3), failed])
            + "\n)")


def dashed(name, match="byRegexp"):
    """A series drawn as a dashed red line: a threshold next to what it bounds."""
    return {"matcher": {"id": match, "options": name},
            "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                           {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]}


def mic_panels():
    # Two sources may give a reading (libmicmgmt, micras): the panels ignore which one did.
    return [
        stat("Cards not online", "Xeon Phi cards whose state is anything but online (hpcnode_mic_card_state). Alerts: HpcnodeMicCardNotOnline, HpcnodeMicCardStuckBooting.",
             [target(f'count(hpcnode_mic_card_state{{{NODE}, state!="online"}} == 1) or vector(0)', "cards", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Card crashes in range", "Crashes of the cards' OS in the dashboard's time range (hpcnode_mic_card_crashes_total). Alert: HpcnodeMicCardCrashed.",
             [target(f'sum(increase(hpcnode_mic_card_crashes_total{{{NODE}}}[$__range])) or vector(0)', "crashes", instant=True)], "none",
             decimals=0, thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Cards with telemetry, by source", "Cards for which each telemetry source gave readings in the last scrape (hpcnode_mic_source_available). libmicmgmt at 0 means the library is missing or incomplete, the exporter is not root (the log says which), or the cards are not online; micras at 0 means a configured micras directory is missing.",
             [target(f'sum by (source) (hpcnode_mic_source_available{{{NODE}}})', "{{source}}", instant=True)], "none",
             thresholds=[{"color": "orange", "value": None}, {"color": "green", "value": 1}]),
        table("Cards", "Every card with its identity, last POST code (FF once booted; a code that stays while the card boots names the stage that hangs) and flash version (a flash that does not match the MPSS release keeps a card booting; the build number under MPSS 3, the BIOS version under MPSS 4), from hpcnode_mic_card_info and hpcnode_mic_card_post_code_info.",
              [target(f'hpcnode_mic_card_info{{{NODE}}}\n* on (job, instance, device) group_left (post_code)\nhpcnode_mic_card_post_code_info{{{NODE}}}', ref="A", instant=True, table=True)],
              "none", [], hide=["job", "__name__", "Value #A", "Value"],
              order=["instance", "device", "post_code", "flash_version", "family", "stepping", "sku", "serial_number", "mode", "mpss_version"],
              w=12, h=4),
        state_timeline("Card state over time", "Each card's state at every scrape (hpcnode_mic_card_state): ONLINE; BOOTING (booting, booting_firmware); NOT STARTED (ready, shutdown, shutting_down, resetting, online_firmware); FAILED (lost, no response, boot failed, reset failed, error, invalid, unknown).",
                       [target(mic_state_class(), "{{instance}} {{device}}")], MIC_STATE_CLASSES, w=24, h=6),
        timeseries("Temperatures", "Card temperatures by sensor (hpcnode_mic_temperature_celsius; vccp, vddg and vddq are the voltage regulators'), with the die temperature alert threshold (hpcnode:threshold{threshold=\"mic_die_temperature_high_celsius\"}) dashed. Sensors whose status is unavailable are left out. Alert: HpcnodeMicDieTemperatureHigh.",
                   [target(f'max without (source) (hpcnode_mic_temperature_celsius{{{NODE}}})', "{{instance}} {{device}} {{sensor}}", "A"),
                    target('hpcnode:threshold{threshold="mic_die_temperature_high_celsius"}', "die threshold", "B")],
                   "celsius", overrides=[dashed("die threshold")]),
        timeseries("Power against its limit", "Card power over the first averaging window (hpcnode_mic_power_watts, reading total_window0) and the card's physical power limit (hpcnode_mic_power_limit_watts), with the level at which HpcnodeMicPowerNearLimit fires (the limit times hpcnode:threshold{threshold=\"mic_power_limit_ratio\"}) dashed.",
                   [target(f'max without (source) (hpcnode_mic_power_watts{{{NODE}, reading="total_window0"}})', "{{instance}} {{device}} power", "A"),
                    target(f'max without (source) (hpcnode_mic_power_limit_watts{{{NODE}, limit="physical"}})', "{{instance}} {{device}} limit", "B"),
                    target(f'max without (source) (hpcnode_mic_power_limit_watts{{{NODE}, limit="physical"}})\n* on () group_left ()\nhpcnode:threshold{{threshold="mic_power_limit_ratio"}}', "{{instance}} {{device}} alert level", "C")],
                   "watt", overrides=[dashed(".* alert level")]),
        timeseries("Boots and crashes", "Boot and crash counts of each card since the host driver loaded (hpcnode_mic_card_boots_total, hpcnode_mic_card_crashes_total): a step is a reboot or a crash.",
                   [target(f'hpcnode_mic_card_boots_total{{{NODE}}}', "{{instance}} {{device}} boots", "A"),
                    target(f'hpcnode_mic_card_crashes_total{{{NODE}}}', "{{instance}} {{device}} crashes", "B")], "none"),
        timeseries("Core and memory voltage", "Core and GDDR voltage of each card (hpcnode_mic_core_voltage_volts, hpcnode_mic_memory_voltage_volts).",
                   [target(f'max without (source) (hpcnode_mic_core_voltage_volts{{{NODE}}})', "{{instance}} {{device}} core", "A"),
                    target(f'max without (source) (hpcnode_mic_memory_voltage_volts{{{NODE}}})', "{{instance}} {{device}} memory", "B")], "volt"),
    ]


# ---------------------------------------------------------------- modules collector (and the ebpf collector's module counters)

ON_OFF = {0: ("OFF", "orange"), 1: ("ON", "green")}
PRESENT = {0: ("MISSING", "red"), 1: ("present", "green")}
YES_NO = {0: ("no", "text"), 1: ("yes", "green")}
READ_BACK = {0: ("NO", "orange"), 1: ("yes", "green")}
LOADED = {0: ("MISSING", "red"), 1: ("loaded", "green")}
SIGNED = {0: ("UNSIGNED", "red"), 1: ("signed", "green")}


def events(title, description, metric, by, legend):
    """Events per scrape interval of an ebpf counter, one series per `by` label set."""
    return timeseries(title, description,
                      [target(f'sum by (instance, {by}) (increase({metric}{{{NODE}}}[$__rate_interval]))', legend)],
                      "none", w=8, decimals=0,
                      custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 60,
                              "showPoints": "never", "spanNulls": False, "stacking": {"mode": "normal"}})


def modules_panels():
    return [
        stat("Expected modules missing", "Modules of --collector.modules.expected that are neither loaded (Live) nor built in (hpcnode_module_expected_loaded == 0). The table below says which, and the modprobe.d rules that name them. Alert: HpcnodeModuleExpectedMissing.",
             [target(f'count(hpcnode_module_expected_loaded{{{NODE}}} == 0) or vector(0)', "missing", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Kernel taint", "The raw taint value of the kernel (hpcnode_kernel_taint_mask); 0 is untainted. The flags set are listed below. Alert: HpcnodeKernelTainted, for the flags chosen in config.rules.yml.",
             [target(f'hpcnode_kernel_taint_mask{{{NODE}}}', "{{instance}}", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Secure Boot", "UEFI Secure Boot state from the SecureBoot EFI variable (hpcnode_secure_boot_enabled). No data on BIOS boots. With Secure Boot on, most distribution kernels run in lockdown and refuse unsigned modules.",
             [target(f'hpcnode_secure_boot_enabled{{{NODE}}}', "{{instance}}", instant=True)], "none",
             mappings=value_mappings(ON_OFF)),
        stat("Lockdown", "The kernel's lockdown mode (hpcnode_kernel_lockdown_mode == 1): none, integrity or confidentiality. In integrity and confidentiality, modules without a trusted signature are refused with EPERM. No data on kernels without lockdown.",
             [target(f'hpcnode_kernel_lockdown_mode{{{NODE}}} == 1', "{{mode}}", instant=True)], "none",
             options=STAT_NAME),
        stat("Signatures enforced", "module.sig_enforce (hpcnode_module_sig_enforce): yes means modules without a valid signature are refused (EKEYREJECTED); no means they load and taint the kernel E.",
             [target(f'hpcnode_module_sig_enforce{{{NODE}}}', "{{instance}}", instant=True)], "none",
             mappings=value_mappings(YES_NO)),
        stat("Kernel headers", "Whether /lib/modules/$(uname -r)/build leads to the running kernel's headers (hpcnode_kernel_build_dir_present). MISSING: DKMS, OFED and NVIDIA builds fail (kernel-devel or linux-headers for another release installed).",
             [target(f'hpcnode_kernel_build_dir_present{{{NODE}}}', "{{release}}", instant=True)], "none",
             mappings=value_mappings(PRESENT)),
        stat("Newer kernels installed", "Installed kernels newer than the running one (hpcnode_kernel_newer_installed): above 0 a reboot is pending, and DKMS, OFED or NVIDIA modules built now may be built for, or against the headers of, the other release. Alert: HpcnodeKernelRebootPending.",
             [target(f'hpcnode_kernel_newer_installed{{{NODE}}}', "{{instance}}", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        table("Installed kernels", "Kernels installed on the root filesystem (an image in /boot or /lib/modules/<release>/vmlinuz, and its /lib/modules directory: hpcnode_kernel_installed), whether their headers are installed (hpcnode_kernel_installed_build_dir_present), and the running one (hpcnode_kernel_build_dir_present carries its release).",
              [target(f'hpcnode_kernel_installed_build_dir_present{{{NODE}}}', ref="A", instant=True, table=True),
               target(f'hpcnode_kernel_build_dir_present{{{NODE}}} * 0 + 1', ref="B", instant=True, table=True)],
              "none", [column("A", "Headers", "none", value_mappings(PRESENT), "color-background"),
                       column("B", "Running", "none", value_mappings(YES_NO))],
              hide=["job", "__name__"], order=["instance", "release", "Value #A", "Value #B"], w=20, sort="release"),
        table("Expected modules", "Each module of --collector.modules.expected: loaded (Live, or built in) or MISSING, and whether it is built into the kernel (hpcnode_module_expected_loaded, hpcnode_module_expected_builtin).",
              [target(f'hpcnode_module_expected_loaded{{{NODE}}}', ref="A", instant=True, table=True),
               target(f'hpcnode_module_expected_builtin{{{NODE}}}', ref="B", instant=True, table=True)],
              "none", [column("A", "Loaded", "none", value_mappings(LOADED), "color-background"),
                       column("B", "Built in", "none", value_mappings(YES_NO))],
              hide=["job", "__name__"], order=["instance", "module", "Value #A", "Value #B"], w=8, sort="Loaded"),
        table("modprobe rules on expected modules", "modprobe.d and kernel command line rules that name an expected module (hpcnode_module_modprobe_rule): install_disabled (install <module> /bin/false or /bin/true: never loads), blacklist (no autoload), module_blacklist (the kernel refuses it), install (a custom command replaces the load).",
              [target(f'hpcnode_module_modprobe_rule{{{NODE}}}', ref="A", instant=True, table=True)],
              "none", [], hide=["job", "__name__", "Value #A", "Value"], order=["instance", "module", "rule", "file"], w=16),
        stat("Module files refused at next load", "Files modprobe would load for an expected module that this kernel will refuse: not signed, or signed by key identifier with a key /proc/keys does not hold (hpcnode_module_file_signed == 0, hpcnode_module_file_signer_trust{state=\"untrusted\"}), while module.sig_enforce or lockdown enforces signatures. The table beside says which. Alert: HpcnodeModuleFileWillBeRefused.",
             [target(f'count((hpcnode_module_file_signed{{{NODE}}} == 0 or hpcnode_module_file_signer_trust{{{NODE}, state="untrusted"}} == 1) and on (job, instance) (hpcnode_module_sig_enforce{{{NODE}}} == 1 or on (job, instance) max by (job, instance) (hpcnode_kernel_lockdown_mode{{{NODE}, mode!="none"}}) == 1)) or vector(0)', "refused", instant=True)], "none",
             w=4, h=8, thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        table("Module files of expected modules", "Each file modprobe would load for an expected module (modules.dep: the module and its dependencies), whether it carries an appended signature, who signed it and whether /proc/keys shows the kernel holding that key: trusted, untrusted (refused where signatures are enforced), issuer_name_match (a key of the issuer's name; /proc/keys cannot show its serial), unknown (keys not visible, or nothing to compare) (hpcnode_module_file_signed, hpcnode_module_file_signer_trust).",
              [target(f'hpcnode_module_file_signed{{{NODE}}}', ref="A", instant=True, table=True),
               target(f'hpcnode_module_file_signer_trust{{{NODE}}}', ref="B", instant=True, table=True)],
              "none", [column("A", "Signed", "none", value_mappings(SIGNED), "color-background")],
              hide=["job", "__name__", "Value #B"], order=["instance", "module", "file", "Value #A", "signer", "state"], w=20, sort="Signed"),
        table("Tainted modules", "Loaded modules that carry taint letters (hpcnode_module_info with taints): O out of tree, E unsigned, P proprietary, F forced, C staging. module=\"other\" counts the modules past --collector.modules.max-modules.",
              [target(f'hpcnode_module_info{{{NODE}, taints!=""}}', ref="A", instant=True, table=True)],
              "none", [], hide=["job", "__name__", "Value #A", "Value"], order=["instance", "module", "taints", "state"], w=12),
        table("Kernel taint flags set", "Each taint flag set in the kernel (hpcnode_kernel_tainted == 1), with its letter as `Tainted:` lines in oops reports print it.",
              [target(f'hpcnode_kernel_tainted{{{NODE}}} == 1', ref="A", instant=True, table=True)],
              "none", [], hide=["job", "__name__", "Value #A", "Value"], order=["instance", "letter", "flag"], w=12),
        events("Module loads", "Module loads per interval, by module (hpcnode_module_loads_total, from the ebpf collector's module_load tracepoint probe).",
               "hpcnode_module_loads_total", "module", "{{instance}} {{module}}"),
        events("Tainted module loads", "Loads of modules that taint the kernel, by module and taint: unsigned_module, oot_module, proprietary_module, forced_module (hpcnode_module_tainted_loads_total). Alert for unsigned: HpcnodeUnsignedModuleLoaded.",
               "hpcnode_module_tainted_loads_total", "module, taint", "{{instance}} {{module}} {{taint}}"),
        events("Signature verdicts", "Module signature checks by module and result (hpcnode_module_signature_checks_total): ok, key_rejected, unknown_key, bad_message, no_signature, no_crypto, lockdown, other. Anything but ok refused the module. module=unknown: the probe could not name it (no kernel BTF). Alerts: HpcnodeModuleSignatureRejected, HpcnodeModuleLockdownRefused.",
               "hpcnode_module_signature_checks_total", "module, result", "{{instance}} {{module}} {{result}}"),
        events("Failed module loads", "init_module and finit_module calls that failed, by module, system call and errno (hpcnode_module_load_failures_total): EKEYREJECTED for a refused signature, EPERM under lockdown, EEXIST for an already loaded module. The module is the file's name for finit_module, the name inside the image for init_module; unknown where the probe could not read it.",
               "hpcnode_module_load_failures_total", "module, syscall, errno", "{{instance}} {{module}} {{syscall}} {{errno}}"),
        events("Kernel log: module events", "Module lines of the kernel log (hpcnode_kernel_log_events_total): module_verification_failed (printed once per boot, for the first unsigned module), unsigned_module_rejected, unverifiable_module_rejected, lockdown_refused_module. source=kernel_log: lines the kernel logged; lines processes write to /dev/kmsg are not counted (hpcnode_kernel_log_process_lines_total).",
               "hpcnode_kernel_log_events_total", "event, source", "{{instance}} {{event}} ({{source}})"),
        table("Kernel log: module events before start", "Module lines among the records the kernel log still held when the exporter started (hpcnode_kernel_log_events_before_start): refusals at boot, such as openibd loading OFED before the exporter runs, are only there. Read once at start, then constant: events seen by a previous exporter appear here again after a restart. Alert: HpcnodeModuleRefusedBeforeStart.",
              [target(f'hpcnode_kernel_log_events_before_start{{{NODE}}}', ref="A", instant=True, table=True)],
              "none", [], hide=["job", "__name__"], order=["instance", "event", "module", "source", "Value"], w=12),
        stat("Kernel log read back to boot", "Whether the records read at start reached back to the kernel's first and were all read (hpcnode_kernel_log_before_start_complete). No: older records had been overwritten (a busy node's ring buffer wraps), so an empty table beside proves nothing.",
             [target(f'hpcnode_kernel_log_before_start_complete{{{NODE}}}', "{{instance}}", instant=True)], "none",
             mappings=value_mappings(READ_BACK)),
    ]


# ---------------------------------------------------------------- pci collector

READY = {0: ("NOT READY", "red"), 1: ("READY", "green")}
CHECK = {0: ("FAIL", "red"), 1: ("ok", "green")}
# Query ref, check label, column title of the readiness table.
PASSTHROUGH_CHECKS = [("B", "present", "Present"), ("C", "iommu_enabled", "IOMMU on"),
                      ("D", "vfio_bound", "vfio-pci"), ("E", "group_isolated", "Group isolated"),
                      ("F", "bars_assigned", "BARs assigned")]


def pci_panels():
    """Passthrough readiness per device with the failing checks named, the host's IOMMU state
    and faults, links trained down, devices without a driver, and Nova: alias mismatches, the
    config files' problems, the scheduler's PCI filter and aliases defined differently."""
    info = f'hpcnode_pci_device_info{{{NODE}}}'
    return [
        stat("IOMMU", "Whether an IOMMU is active on the node (hpcnode_iommu_enabled: /sys/class/iommu has an entry, or on kernels before 3.17 /sys/kernel/iommu_groups has a group). Without it no device can be passed through.",
             [target(f'hpcnode_iommu_enabled{{{NODE}}}', "{{instance}}", instant=True)], "none",
             mappings=value_mappings({0: ("OFF", "red"), 1: ("ON", "green")})),
        stat("Passthrough devices not ready", "Devices meant for passthrough (bound to vfio-pci, matched by a Nova device_spec or named by --collector.pci.passthrough-device) that fail a check. Alert: HpcnodePciPassthroughNotReady.",
             [target(f'count(hpcnode_pci_passthrough_ready{{{NODE}}} == 0) or vector(0)', "devices", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Devices without driver", "GPUs, accelerators and HCAs with no driver bound (hpcnode_pci_driver_bound == 0). Alert: HpcnodePciDeviceWithoutDriver.",
             [target(f'count(hpcnode_pci_driver_bound{{{NODE}}} == 0) or vector(0)', "devices", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Links below maximum width", "Devices whose PCIe link trained narrower than it can (hpcnode_pci_link_width current < maximum). Alert: HpcnodePciLinkDegraded.",
             [target(f'count(hpcnode_pci_link_width{{{NODE}, link="current"}} < ignoring (link) hpcnode_pci_link_width{{{NODE}, link="maximum"}}) or vector(0)', "devices", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Nova alias mismatches", "Nova aliases that no present device satisfies while devices of another type match their ids (an alias without device_type takes type-PCI and type-VF devices, never a type-PF): \"No valid host was found\" (hpcnode_nova_alias_type_mismatch_devices). Alert: HpcnodeNovaAliasTypeMismatch.",
             [target(f'count(hpcnode_nova_alias_type_mismatch_devices{{{NODE}}} > 0 and on (job, instance, path, alias, alias_device_type) hpcnode_nova_alias_matching_devices{{{NODE}}} == 0) or vector(0)', "aliases", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Nova config", "Whether every Nova config file given with --collector.pci.nova-config or --collector.pci.nova-scheduler-config was read and every [pci] device_spec and alias in it is valid (hpcnode_nova_config_valid); the table \"Nova config problems\" says why not, the exporter log names the rejected line. Alerts: HpcnodeNovaConfigInvalid, HpcnodeNovaConfigUnchecked.",
             [target(f'min(hpcnode_nova_config_valid{{{NODE}}})', "valid", instant=True)], "none",
             mappings=value_mappings({0: ("INVALID", "red"), 1: ("valid", "green")})),
        stat("Nova scheduler PCI filter", "Whether PciPassthroughFilter is in nova-scheduler's [filter_scheduler] enabled_filters, from the files given with --collector.pci.nova-scheduler-config (hpcnode_nova_scheduler_pci_filter_enabled). Without it, flavors with a PCI alias land on hosts without free devices and end in \"No valid host was found\". Alert: HpcnodeNovaPciFilterDisabled.",
             [target(f'min(hpcnode_nova_scheduler_pci_filter_enabled{{{NODE}}})', "enabled", instant=True)], "none",
             mappings=value_mappings({0: ("MISSING", "red"), 1: ("enabled", "green")})),
        stat("Nova aliases defined differently", "Nova aliases that the config files given define in more than one way (hpcnode_nova_alias_definitions > 1): the API, the scheduler and the compute node ask for different devices. Alert: HpcnodeNovaAliasDefinitionsDiffer.",
             [target(f'count(hpcnode_nova_alias_definitions{{{NODE}}} > 1) or vector(0)', "aliases", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        table("Nova config problems", "Why a Nova config file is not valid, one row per file and reason (hpcnode_nova_config_errors): unreadable, invalid_device_spec, invalid_alias, conflicting_alias (entries of one alias name Nova cannot join), too_many_values. The exporter log names each rejected line.",
              [target(f'hpcnode_nova_config_errors{{{NODE}}}', ref="A", instant=True, table=True)], "none",
              [column("A", "Values", "none")],
              hide=["job", "__name__"], order=["instance", "path", "reason", "Value #A"], w=16, h=4),
        table("Passthrough readiness", "One row per device meant for passthrough: the verdict and each check (present, iommu_enabled, vfio_bound, group_isolated, bars_assigned), with its identity. An idle GPU on vfio-pci with memory decode off, IRQ 255 and D3hot is normal and READY.",
              [target(f'hpcnode_pci_passthrough_ready{{{NODE}}}\n* on (job, instance, device) group_left (vendor_id, device_id, driver, iommu_group)\n  {info}', ref="A", instant=True, table=True)]
              + [target(f'max by (job, instance, device) (hpcnode_pci_passthrough_check{{{NODE}, check="{check}"}})', ref=ref, instant=True, table=True)
                 for ref, check, _ in PASSTHROUGH_CHECKS],
              "none",
              [column("A", "Verdict", "none", value_mappings(READY), "color-background")]
              + [column(ref, name, "none", value_mappings(CHECK), "color-background") for ref, _, name in PASSTHROUGH_CHECKS],
              hide=["job", "__name__"],
              order=["instance", "device", "Value #A"] + ["Value #" + ref for ref, _, _ in PASSTHROUGH_CHECKS]
              + ["vendor_id", "device_id", "driver", "iommu_group"], h=7),
        table("Failing passthrough checks", "The checks that fail right now, one row per device and check (hpcnode_pci_passthrough_check == 0): what to fix first.",
              [target(f'hpcnode_pci_passthrough_check{{{NODE}}} == 0', ref="A", instant=True, table=True)], "none",
              [column("A", "Result", "none", value_mappings(CHECK), "color-background")],
              hide=["job", "__name__"], order=["instance", "device", "check", "Value #A"], w=12, h=7),
        table("Devices without driver and the modules that claim them", "For each GPU or HCA without a driver, every module whose modules.alias entry matches its modalias, the modprobe.d install command that replaces loading it, and whether it is blacklisted. Two modules, or an install rule, explain a driver that never loads at boot.",
              [target(f'hpcnode_pci_unbound_device_alias_module{{{NODE}}}', ref="A", instant=True, table=True)], "none",
              [column("A", "Alias entries", "none")],
              hide=["job", "__name__"], order=["instance", "device", "module", "install", "blacklisted", "Value #A"], w=12, h=7),
        timeseries("PCIe link width", "Current link width of each device as a fraction of its maximum (1 = full width); a line below 1 is a link trained down. Speed is not shown: GPUs lower their link speed when idle on purpose.",
                   [target(f'hpcnode_pci_link_width{{{NODE}, link="current"}} / ignoring (link) hpcnode_pci_link_width{{{NODE}, link="maximum"}}', "{{instance}} {{device}}")], "percentunit"),
        timeseries("IOMMU faults by device", "IOMMU faults per device, access, reason and source (hpcnode_iommu_faults_total): source=kernel_log from the lines the kernel logged (DMAR, AMD-Vi; a lower bound, the kernel ratelimits them; Intel prints the device without PCI segment, 3b:00.0), source=tracepoint from iommu:io_page_fault (AMD-Vi, ARM SMMU). Alert: HpcnodeIommuFaults.",
                   [target(f'sum by (instance, device, access, reason, source) (increase(hpcnode_iommu_faults_total{{{NODE}}}[$__rate_interval]))', "{{instance}} {{device}} {{access}} {{reason}} ({{source}})")], "none",
                   custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 80, "showPoints": "never", "spanNulls": False}),
        timeseries("IOMMU fault interrupts and vfio failures", "Intel VT-d fault interrupts per IOMMU unit (hpcnode_iommu_fault_interrupts_total: every interrupt, where the kernel log is ratelimited; one may carry several faults), failed vfio-pci device enables and failed DMA pinnings by errno (ENOMEM: the VMM's memlock limit is below the guest's memory), AER errors on assigned devices. From the ebpf collector's dmar_fault and vfio probes. Alert: HpcnodeVfioFailures.",
                   [target(f'sum by (instance, iommu) (increase(hpcnode_iommu_fault_interrupts_total{{{NODE}}}[$__rate_interval]))', "{{instance}} {{iommu}} fault interrupts", ref="A"),
                    target(f'sum by (instance, errno) (increase(hpcnode_vfio_enable_failures_total{{{NODE}}}[$__rate_interval]))', "{{instance}} vfio enable failed {{errno}}", ref="B"),
                    target(f'sum by (instance, errno) (increase(hpcnode_vfio_pin_failures_total{{{NODE}}}[$__rate_interval]))', "{{instance}} vfio pin failed {{errno}}", ref="C"),
                    target(f'sum by (instance, device, state) (increase(hpcnode_vfio_aer_errors_total{{{NODE}}}[$__rate_interval]))', "{{instance}} {{device}} AER {{state}}", ref="D")], "none",
                   custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 80, "showPoints": "never", "spanNulls": False}),
        timeseries("PCIe AER error messages", "AER error messages the kernel handled per device of interest and severity (hpcnode_pci_aer_messages_total: correctable ones the link retried, nonfatal ones that lost a transaction, fatal ones that reset the link), and those the root ports above them received from themselves and the devices below (hpcnode_pci_aer_root_port_messages_total). Empty without AER (no capability, kernels before 4.19, AER owned by the firmware). Alerts: HpcnodePciAerFatalErrors, HpcnodePciAerNonFatalErrors, HpcnodePciAerCorrectableErrors.",
                   [target(f'sum by (instance, device, severity) (increase(hpcnode_pci_aer_messages_total{{{NODE}}}[$__rate_interval]))', "{{instance}} {{device}} {{severity}}", ref="A"),
                    target(f'sum by (instance, device, severity) (increase(hpcnode_pci_aer_root_port_messages_total{{{NODE}}}[$__rate_interval]))', "{{instance}} root port {{device}} {{severity}} received", ref="B")], "none",
                   custom={"drawStyle": "bars", "lineWidth": 1, "fillOpacity": 80, "showPoints": "never", "spanNulls": False}),
        table("PCIe AER errors by name", "Every AER error bit a device of interest (or a root port above one) has counted since boot, by severity and the kernel's name for it (hpcnode_pci_aer_errors_total > 0): BadTLP, BadDLLP and RxErr point at the link (slot, riser, card), CmpltTO and UnsupReq at the device or its driver.",
              [target(f'hpcnode_pci_aer_errors_total{{{NODE}}} > 0', ref="A", instant=True, table=True)], "none",
              [column("A", "Since boot", "none")],
              hide=["job", "__name__"], order=["instance", "device", "severity", "error", "Value #A"], w=12, h=7),
        state_timeline("Passthrough readiness over time", "Each passthrough device's verdict at every scrape (hpcnode_pci_passthrough_ready): when it stopped being ready.",
                       [target(f'hpcnode_pci_passthrough_ready{{{NODE}}}', "{{instance}} {{device}}")], READY),
    ]


def vfio_holder_panels():
    """Which process, and for QEMU which guest, holds each device bound to vfio-pci; idle devices;
    processes holding a device that left vfio-pci; holders the exporter could not see."""
    return [
        stat("Idle passthrough devices", "Devices bound to vfio-pci that no process holds open (hpcnode_pci_vfio_device_holders == 0): free for the next VM.",
             [target(f'count(hpcnode_pci_vfio_device_holders{{{NODE}}} == 0) or vector(0)', "devices", instant=True)], "none"),
        stat("Devices in use by a VM", "Devices bound to vfio-pci that a process (a VM) holds open (hpcnode_pci_vfio_device_holders > 0).",
             [target(f'count(hpcnode_pci_vfio_device_holders{{{NODE}}} > 0) or vector(0)', "devices", instant=True)], "none"),
        stat("Stale holders", "Processes holding a vfio group or device node whose device is no longer on vfio-pci: removed or rebound under a running VM (hpcnode_pci_vfio_stale_holder_info). Alert: HpcnodeVfioStaleHolder.",
             [target(f'count(hpcnode_pci_vfio_stale_holder_info{{{NODE}}}) or vector(0)', "processes", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Processes not inspected", "Processes whose open files the exporter could not read (hpcnode_pci_vfio_holder_unreadable_processes: another user's, without CAP_SYS_PTRACE): holders among them are missing from the tables.",
             [target(f'max(hpcnode_pci_vfio_holder_unreadable_processes{{{NODE}}})', "processes", instant=True)], "none",
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        table("Passthrough devices and their VMs", "One row per device bound to vfio-pci and process holding it: pid, command and, for QEMU, the guest name and UUID from its command line (libvirt and Nova: instance-<id> and the instance UUID), with the device's identity (hpcnode_pci_vfio_holder_info).",
              [target(f'hpcnode_pci_vfio_holder_info{{{NODE}}}\n* on (job, instance, device) group_left (vendor_id, device_id, iommu_group)\n  hpcnode_pci_device_info{{{NODE}}}', ref="A", instant=True, table=True)], "none",
              [column("A", "Held", "none")],
              hide=["job", "__name__", "Value #A"], order=["instance", "device", "guest", "uuid", "pid", "comm", "vendor_id", "device_id", "iommu_group"], w=16, h=7),
        table("Stale holders", "Processes holding a vfio node (node) whose device left vfio-pci (hpcnode_pci_vfio_stale_holder_info): the VM lost its device.",
              [target(f'hpcnode_pci_vfio_stale_holder_info{{{NODE}}}', ref="A", instant=True, table=True)], "none",
              [column("A", "Held", "none")],
              hide=["job", "__name__", "Value #A"], order=["instance", "node", "guest", "uuid", "pid", "comm"], w=8, h=7),
    ]


def collapsed_rows():
    """The hardware-specific rows, collapsed: most nodes have only some of this hardware."""
    return [
        row("Xeon Phi (MIC) cards", mic_panels(), collapsed=True),
        row("GPU passthrough", pci_panels(), collapsed=True),
        row("Passthrough devices and their VMs", vfio_holder_panels(), collapsed=True),
    ]


def driver_stack_dashboard():
    return dashboard(
        "hpcnode-driver-stack", "Node driver stack",
        "Per node: is the accelerator and fabric driver stack healthy? RDMA port state, rates, errors and "
        "congestion counters, the RDMA userspace libraries applications load, and the exporter's own collector health.",
        ["hpcnode", "rdma", "infiniband"], node_variables(single_instance=True),
        [row("Exporter and collectors", exporter_panels()),
         row("RDMA ports", rdma_node_panels()),
         row("RDMA userspace libraries", rdma_userspace_panels()),
         row("Kernel modules and signatures", modules_panels())] + collapsed_rows())


# ---------------------------------------------------------------- rdma capacity planning

FLEET = 'job=~"$job", instance=~"$instance"'
FLEET_PORT = FLEET + ', device=~"$device", port=~"$port"'


def capacity_dashboard():
    variables = node_variables(single_instance=False) + [{
        "name": "topn", "label": "Top N", "type": "custom", "query": "5,10,20,50",
        "current": {"text": "10", "value": "10"}, "multi": False, "includeAll": False,
        "options": [{"text": n, "value": n, "selected": n == "10"} for n in ("5", "10", "20", "50")],
        "hide": 0}]
    now = [
        stat("Fleet transmit", "Bytes per second sent by all selected ports (hpcnode:rdma_node_data_bytes:rate5m).",
             [target(f'sum(hpcnode:rdma_node_data_bytes:rate5m{{{FLEET}, direction="transmit"}})', "transmit", instant=True)], "Bps", w=6,
             thresholds=[{"color": "blue", "value": None}]),
        stat("Fleet receive", "Bytes per second received by all selected ports.",
             [target(f'sum(hpcnode:rdma_node_data_bytes:rate5m{{{FLEET}, direction="receive"}})', "receive", instant=True)], "Bps", w=6,
             thresholds=[{"color": "blue", "value": None}]),
        stat("Fleet utilisation", "Total throughput over the total data rate of the ACTIVE ports, per direction (5m rates).",
             [target(f'sum by (direction) (hpcnode:rdma_node_data_bytes:rate5m{{{FLEET}}})\n/ ignoring (direction) group_left ()\nsum(hpcnode:rdma_node_data_rate_bytes_per_second:sum_active{{{FLEET}}})', "{{direction}}", instant=True)], "percentunit", w=6,
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.7}, {"color": "red", "value": 0.9}]),
        stat("Ports above the high-utilisation threshold", "Ports whose 5m utilisation exceeds hpcnode:threshold{threshold=\"rdma_port_utilisation_high_ratio\"} (alerts/config.rules.yml) right now, in either direction.",
             [target(f'count(\n  hpcnode:rdma_port_utilisation:ratio_rate5m{{{FLEET_PORT}}}\n    > on () group_left ()\n  hpcnode:threshold{{threshold="rdma_port_utilisation_high_ratio"}}\n) or vector(0)', "ports", instant=True)], "none", w=6,
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        timeseries("Fleet throughput", "Bytes per second over all selected nodes, by direction (5m rates from the recording rules).",
                   [target(f'sum by (direction) (hpcnode:rdma_node_data_bytes:rate5m{{{FLEET}}})', "{{direction}}")], "Bps"),
        timeseries("Busiest nodes", "The $topn nodes with the highest throughput, by direction.",
                   [target(f'topk($topn, hpcnode:rdma_node_data_bytes:rate5m{{{FLEET}}})', "{{instance}} {{direction}}")], "Bps"),
        table("Top $topn busiest ports", "The ports with the highest 5m utilisation of their data rate right now, either direction.",
              [target(f'topk($topn, hpcnode:rdma_port_utilisation:ratio_rate5m{{{FLEET_PORT}}})', ref="A", instant=True, table=True),
               target(f'hpcnode:rdma_port_data_bytes:rate5m{{{FLEET_PORT}}}\nand on (job, instance, device, port, direction)\ntopk($topn, hpcnode:rdma_port_utilisation:ratio_rate5m{{{FLEET_PORT}}})', ref="B", instant=True, table=True)],
              "percentunit",
              [column("A", "Utilisation", "percentunit", cell="gauge"), column("B", "Throughput", "Bps")],
              hide=["job", "__name__"], order=["instance", "device", "port", "direction", "Value #A", "Value #B"],
              w=12, h=8, sort="Utilisation"),
        timeseries("Transmit wait (congestion)", "Fraction of time the $topn most congested ports had data to send but no credits to send it (hpcnode:rdma_port_transmit_wait:ratio_rate5m). port_xmit_wait counts ticks whose length the InfiniBand specification leaves to the hardware: this assumes one tick is the time to send hpcnode:setting{setting=\"rdma_transmit_wait_bytes_per_tick\"} = 8 bytes at the port's data rate (NVIDIA's figure for current devices; Switch-IB/SwitchX count 32 bytes per lane, HCAs are not documented). Compare ports with each other rather than reading it as an exact fraction.",
                   [target(f'topk($topn, hpcnode:rdma_port_transmit_wait:ratio_rate5m{{{FLEET_PORT}}})', "{{instance}} {{device}}/{{port}}")], "percentunit"),
        panel("histogram", "Utilisation distribution", "How many ports run at each level of utilisation right now (5m rates, both directions), in buckets of 5 %.",
              [target(f'hpcnode:rdma_port_utilisation:ratio_rate5m{{{FLEET_PORT}}}', "{{instance}} {{device}}/{{port}} {{direction}}", instant=True)],
              "percentunit", w=12, h=8,
              options={"bucketSize": 0.05, "bucketOffset": 0, "combine": True,
                       "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False}},
              custom={"fillOpacity": 80, "lineWidth": 1}),
    ]
    trends = [
        timeseries("Daily p95 utilisation, 30 days", "Each port's rolling daily 95th percentile of utilisation (hpcnode:rdma_port_utilisation:p95_1d) over 30 days, with the planning threshold (hpcnode:threshold{threshold=\"rdma_port_utilisation_planning_ratio\"}) as a dashed line.",
                   [target(f'hpcnode:rdma_port_utilisation:p95_1d{{{FLEET_PORT}}}', "{{instance}} {{device}}/{{port}} {{direction}}", "A"),
                    target('hpcnode:threshold{threshold="rdma_port_utilisation_planning_ratio"}', "planning threshold", "B")],
                   "percentunit", extra={"timeFrom": "30d"},
                   overrides=[dashed("planning threshold", match="byName")]),
        timeseries("Fleet throughput, 30 days", "Total bytes per second by direction over 30 days: the long-term trend behind the per-port predictions.",
                   [target(f'sum by (direction) (hpcnode:rdma_node_data_bytes:rate5m{{{FLEET}}})', "{{direction}}")], "Bps",
                   extra={"timeFrom": "30d"}),
        table("Predicted threshold crossing", "For every port whose daily p95 utilisation rises, the date at which a straight line fitted to its last 30 days (hourly points) reaches the planning threshold (hpcnode:rdma_port_utilisation_p95_1d:crossing_timestamp_seconds), soonest first, with today's p95. Ports that are flat, falling or already above the threshold have no date. Needs more than an hour of recorded p95 to appear.",
              [target(f'hpcnode:rdma_port_utilisation_p95_1d:crossing_timestamp_seconds{{{FLEET_PORT}}} * 1000', ref="A", instant=True, table=True),
               target(f'hpcnode:rdma_port_utilisation:p95_1d{{{FLEET_PORT}}}\nand on (job, instance, device, port, direction)\nhpcnode:rdma_port_utilisation_p95_1d:crossing_timestamp_seconds{{{FLEET_PORT}}}', ref="B", instant=True, table=True)],
              "dateTimeAsIso",
              [column("A", "Predicted crossing", "dateTimeAsIso"), column("B", "Daily p95 now", "percentunit")],
              hide=["job", "__name__"], order=["instance", "device", "port", "direction", "Value #A", "Value #B"],
              w=24, h=8, sort="Predicted crossing"),
    ]
    probe_legend = "{{instance}} {{device}}/{{port}} {{mode}} {{peer}}"
    floor = 'hpcnode:threshold{threshold="verbs_probe_efficiency_min_ratio"}'
    dashed_red = [{"matcher": {"id": "byName", "options": "efficiency floor"},
                   "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                                  {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]}]
    probe = [
        timeseries("Measured RDMA bandwidth per port", "RDMA WRITE bandwidth of each port's last successful verbs probe (hpcnode_verbs_probe_bandwidth_bytes_per_second, ib_write_bw's BW average), over time: what the link really delivers, not what it carried. The value changes when a probe finishes (--collector.verbs.interval).",
                   [target(f'hpcnode_verbs_probe_bandwidth_bytes_per_second{{{FLEET_PORT}}}', probe_legend)], "Bps"),
        timeseries("Probe efficiency per port", "Measured bandwidth over the port's effective data rate (hpcnode_verbs_probe_efficiency_ratio), with the floor below which HpcnodeVerbsProbeEfficiencyLow fires (hpcnode:threshold{threshold=\"verbs_probe_efficiency_min_ratio\"}, alerts/config.rules.yml) as a dashed line. Healthy EDR/HDR links reach 0.95 to 0.98.",
                   [target(f'hpcnode_verbs_probe_efficiency_ratio{{{FLEET_PORT}}}', probe_legend, "A"),
                    target(floor, "efficiency floor", "B")],
                   "percentunit", overrides=dashed_red),
        timeseries("Probe latency per port", "Typical one-way latency of each port's last successful probe: half the median round trip of an 8-byte RDMA WRITE ping-pong (hpcnode_verbs_probe_latency_seconds, ib_write_lat's t_typical).",
                   [target(f'hpcnode_verbs_probe_latency_seconds{{{FLEET_PORT}}}', probe_legend)], "s"),
        stat("Ports below the efficiency floor", "Ports whose last probe measured less than the efficiency floor of their data rate (alerts/config.rules.yml).",
             [target(f'count(\n  hpcnode_verbs_probe_efficiency_ratio{{{FLEET_PORT}}}\n    < on () group_left ()\n  {floor}\n) or vector(0)', "ports", instant=True)], "none", w=6,
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        stat("Probe unavailable", "Exporters configured to probe whose libibverbs.so.1 did not load (hpcnode_verbs_probe_available == 0): no bandwidth figures from them.",
             [target(f'count(hpcnode_verbs_probe_available{{{FLEET}}} == 0) or vector(0)', "exporters", instant=True)], "none", w=6,
             thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
    ]
    holder = FLEET + ', device=~"$device"'
    holder_labels = "job, instance, device, holder, pid, comm, slurm_job"
    holders = [
        table("Who holds the fabric", "The $topn holders of RDMA resources pinning the most memory now, per node and device (hpcnode_rdma_holder_pinned_bytes, from the kernel's RDMA resource tracking over netlink, as `rdma resource show` lists it), with their queue pairs and memory regions. A process shows its pid, comm and Slurm job; a kernel module (ib_core, ib_ipoib, rdma_cm) its name with holder kernel; holder other sums each node's holders beyond --collector.rdma_netlink.max-holders.",
              [target(f'topk($topn, hpcnode_rdma_holder_pinned_bytes{{{holder}}})', ref="A", instant=True, table=True),
               target(f'hpcnode_rdma_holder_resources{{{holder}, resource="qp"}}\nand on ({holder_labels})\ntopk($topn, hpcnode_rdma_holder_pinned_bytes{{{holder}}})', ref="B", instant=True, table=True),
               target(f'hpcnode_rdma_holder_resources{{{holder}, resource="mr"}}\nand on ({holder_labels})\ntopk($topn, hpcnode_rdma_holder_pinned_bytes{{{holder}}})', ref="C", instant=True, table=True)],
              "bytes",
              [column("A", "Pinned", "bytes"), column("B", "QPs", "none"), column("C", "MRs", "none")],
              hide=["job", "__name__", "resource"], order=["instance", "device", "holder", "slurm_job", "pid", "comm", "Value #A", "Value #B", "Value #C"],
              w=24, h=8, sort="Pinned"),
        timeseries("Pinned memory per Slurm job", "Memory registered for RDMA by the $topn Slurm jobs pinning the most, summed over every device of the selected nodes they run on (hpcnode:rdma_slurm_job_pinned_bytes:sum, alerts/rdma.rules.yml; the job from each process's cgroup).",
                   [target(f'topk($topn, sum by (slurm_job) (hpcnode:rdma_slurm_job_pinned_bytes:sum{{{FLEET}}}))', "job {{slurm_job}}")], "bytes"),
        timeseries("Queue pairs by state", "Queue pairs on the selected nodes' devices by state (hpcnode_rdma_queue_pairs): connected QPs are RTS; many in ERR mean jobs whose peers went away.",
                   [target(f'sum by (state) (hpcnode_rdma_queue_pairs{{{holder}}})', "{{state}}")], "none"),
    ]
    return dashboard(
        "hpcnode-rdma-capacity", "RDMA capacity planning",
        "Fleet-wide RDMA throughput and utilisation of the ports' data rates, the busiest ports, congestion, "
        "and 30-day trends with the date each port's daily p95 is predicted to cross the planning threshold. "
        "Built on the recording rules in alerts/rdma.rules.yml.",
        ["hpcnode", "rdma", "capacity"], variables,
        [row("Now", now), row("Who holds the fabric", holders), row("30-day trends", trends),
         row("Measured capacity (verbs probe)", probe)],
        time_from="now-24h")


# ---------------------------------------------------------------- fleet

# The site's target labels (alerts/fleet.rules.yml): a fleet rule carries job and cluster, a
# node rule every target label.
CLUSTER = 'job=~"$job", cluster=~"$cluster"'
FLEET_NODE = CLUSTER + ', instance=~"$instance"'
READINESS_CHECKS = ("rdma_port_active", "pci_link_width", "pci_passthrough_ready",
                    "mic_card_online", "modules_expected_loaded", "modules_signed")


def node_dashboard_link(title="Node driver stack: ${__field.labels.instance}"):
    """A data link from a series with an instance label to its node's driver-stack dashboard."""
    return {"title": title, "targetBlank": False,
            "url": "/d/hpcnode-driver-stack/node-driver-stack?var-job=${__field.labels.job}"
                   "&var-instance=${__field.labels.instance}&${__url_time_range}"}


def with_links(p, links):
    p["fieldConfig"]["defaults"]["links"] = links
    return p


def fleet_dashboard():
    variables = [
        datasource_variable(),
        query_variable("job", "Job", "label_values(hpcnode_build_info, job)"),
        query_variable("cluster", "Cluster", 'label_values(hpcnode_build_info{job=~"$job"}, cluster)'),
        query_variable("instance", "Node", 'label_values(hpcnode_build_info{job=~"$job", cluster=~"$cluster"}, instance)'),
        query_variable("device", "RDMA device",
                       'label_values(hpcnode_rdma_port_state_id{job=~"$job", cluster=~"$cluster", instance=~"$instance"}, device)'),
        query_variable("port", "Port",
                       'label_values(hpcnode_rdma_port_state_id{job=~"$job", cluster=~"$cluster", instance=~"$instance", device=~"$device"}, port)'),
        {"name": "topn", "label": "Top N", "type": "custom", "query": "5,10,20,50",
         "current": {"text": "10", "value": "10"}, "multi": False, "includeAll": False,
         "options": [{"text": n, "value": n, "selected": n == "10"} for n in ("5", "10", "20", "50")],
         "hide": 0},
    ]
    check_list = ", ".join(READINESS_CHECKS)
    grid_options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "none", "textMode": "value_and_name",
                    "justifyMode": "center", "orientation": "auto", "wideLayout": True}
    readiness = [
        stat("Nodes ready", "Nodes that pass every readiness check (hpcnode:node_readiness:failing_checks == 0).",
             [target(f'count(hpcnode:node_readiness:failing_checks{{{FLEET_NODE}}} == 0) or vector(0)', "ready", instant=True)], "none",
             w=6, thresholds=[{"color": "green", "value": None}]),
        stat("Nodes failing a check", "Nodes that fail at least one readiness check; the grid below names them.",
             [target(f'count(hpcnode:node_readiness:failing_checks{{{FLEET_NODE}}} > 0) or vector(0)', "failing", instant=True)], "none",
             w=6, thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Exporters down", "Targets whose last scrape failed (up == 0): their nodes' state is unknown. Alert: HpcnodeExporterDown.",
             [target(f'count(up{{{FLEET_NODE}}} == 0) or vector(0)', "down", instant=True)], "none",
             w=6, thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
        stat("Degraded PCIe links", "PCIe links trained below the width threshold, over all selected clusters, racks and switches (cluster_rack_switch:hpcnode_pci_links_degraded:count). Alert: HpcnodePciLinkDegraded.",
             [target(f'sum(cluster_rack_switch:hpcnode_pci_links_degraded:count{{{CLUSTER}}}) or vector(0)', "links", instant=True)], "none",
             w=6, thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}]),
        with_links(stat("Node grid", f"One tile per node: the number of readiness checks it fails ({check_list}; hpcnode:node_readiness:failing_checks, alerts/fleet.rules.yml); green is ready. A tile opens the node's driver-stack dashboard.",
                        [target(f'hpcnode:node_readiness:failing_checks{{{FLEET_NODE}}}', "{{instance}}", instant=True)], "none",
                        w=24, h=8, options=grid_options,
                        mappings=[{"type": "value", "options": {"0": {"text": "ready", "color": "green", "index": 0}}}],
                        thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}]),
                   [node_dashboard_link()]),
        panel("bargauge", "Nodes failing each check", "Per cluster, the nodes that fail each readiness check now (cluster:hpcnode_node_readiness_check_failing:sum): which check to fix first across the fleet.",
              [target(f'cluster:hpcnode_node_readiness_check_failing:sum{{{CLUSTER}}}', "{{cluster}} {{check}}", instant=True)], "none",
              w=12, h=8, thresholds=[{"color": "green", "value": None}, {"color": "red", "value": 1}],
              options={"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                       "orientation": "horizontal", "displayMode": "basic", "showUnfilled": True,
                       "valueMode": "color", "namePlacement": "auto", "sizing": "auto", "minVizHeight": 16,
                       "minVizWidth": 8, "maxVizHeight": 300}),
        with_links(table("Failing checks by node", "Every node and readiness check that fails now (hpcnode:node_readiness_check:failing == 1), with the node's rack and switch. A row opens the node's driver-stack dashboard.",
                         [target(f'hpcnode:node_readiness_check:failing{{{FLEET_NODE}}} == 1', ref="A", instant=True, table=True)], "none",
                         [column("A", "Failing", "none")],
                         hide=["job", "__name__"], order=["cluster", "rack", "switch", "instance", "check", "Value #A"], w=12, h=8),
                   [node_dashboard_link()]),
        table("Degraded PCIe links by rack and switch", "PCIe links trained below their width per cluster, rack and switch (cluster_rack_switch:hpcnode_pci_links_degraded:count): many in one rack or behind one switch point at shared hardware or a firmware roll-out.",
              [target(f'cluster_rack_switch:hpcnode_pci_links_degraded:count{{{CLUSTER}}}', ref="A", instant=True, table=True)], "none",
              [column("A", "Links", "none")],
              hide=["job", "__name__"], order=["cluster", "rack", "switch", "Value #A"], w=24, h=6),
    ]
    rdma = [
        timeseries("Cluster RDMA throughput", "Bytes per second over every node of each cluster, by direction (cluster:hpcnode_rdma_data_bytes:sum_rate5m).",
                   [target(f'cluster:hpcnode_rdma_data_bytes:sum_rate5m{{{CLUSTER}}}', "{{cluster}} {{direction}}")], "Bps"),
        timeseries("Node throughput p95 per cluster", "The 95th percentile over a cluster's nodes of their RDMA throughput (cluster:hpcnode_rdma_node_data_bytes:p95_rate5m): what a busy node of the cluster carries.",
                   [target(f'cluster:hpcnode_rdma_node_data_bytes:p95_rate5m{{{CLUSTER}}}', "{{cluster}} {{direction}}")], "Bps"),
        timeseries("RDMA headroom per cluster", "The share of the ACTIVE ports' data rate that a cluster does not use, by direction (cluster:hpcnode_rdma_headroom:ratio_rate5m); 1 is idle. cluster:hpcnode_rdma_headroom_bytes_per_second:rate5m holds the same in bytes per second.",
                   [target(f'cluster:hpcnode_rdma_headroom:ratio_rate5m{{{CLUSTER}}}', "{{cluster}} {{direction}}")], "percentunit"),
        with_links(table("Top $topn nodes by RDMA utilisation", "The nodes using the largest share of their ACTIVE ports' data rate now, either direction (hpcnode:rdma_node_utilisation:ratio_rate5m). A row opens the node's driver-stack dashboard.",
                         [target(f'topk($topn, hpcnode:rdma_node_utilisation:ratio_rate5m{{{FLEET_NODE}}})', ref="A", instant=True, table=True)],
                         "percentunit", [column("A", "Utilisation", "percentunit", cell="gauge")],
                         hide=["job", "__name__"], order=["cluster", "instance", "direction", "Value #A"], w=12, h=8,
                         sort="Utilisation"),
                   [node_dashboard_link()]),
    ]
    red_from_one = [{"color": "green", "value": None}, {"color": "red", "value": 1}]
    mesh = [
        stat("Mesh nodes no prober reached", "Nodes of the verbs probe mesh (--collector.verbs.peers) whose every prober (of the selected nodes) failed or skipped its probe this round (max by peer of hpcnode_verbs_probe_mesh_peer_success == 0): a responder, its link or its port is down. The table names them.",
             [target(f'count(max by (job, cluster, peer) (hpcnode_verbs_probe_mesh_peer_success{{{FLEET_NODE}}}) == 0) or vector(0)', "nodes", instant=True)], "none",
             w=8, thresholds=red_from_one),
        stat("Broken peers files", "Exporters whose peers file did not parse when last read (hpcnode_verbs_probe_mesh_file_valid == 0): they probe on with the last good copy; their log names the file and line.",
             [target(f'count(hpcnode_verbs_probe_mesh_file_valid{{{FLEET_NODE}}} == 0) or vector(0)', "exporters", instant=True)], "none",
             w=8, thresholds=red_from_one),
        stat("Nodes outside the mesh", "Exporters with --collector.verbs.peers whose node name is not in the file (hpcnode_verbs_probe_mesh_member == 0): they probe nobody.",
             [target(f'count(hpcnode_verbs_probe_mesh_member{{{FLEET_NODE}}} == 0) or vector(0)', "exporters", instant=True)], "none",
             w=8, thresholds=red_from_one),
        with_links(table("Mesh probes this round", "Each prober and the peers it probed this round, failed first (hpcnode_verbs_probe_mesh_peer_success: 1 succeeded, 0 failed or skipped): a peer failing from several probers is the suspect; one prober failing to several peers is. A row opens the prober's driver-stack dashboard.",
                         [target(f'hpcnode_verbs_probe_mesh_peer_success{{{FLEET_NODE}}}', ref="A", instant=True, table=True)], "none",
                         [column("A", "Succeeded", "none")],
                         hide=["job", "__name__", "mode"], order=["cluster", "instance", "device", "port", "peer", "Value #A"], w=24, h=8,
                         sort="Succeeded"),
                   [node_dashboard_link()]),
    ]
    return dashboard(
        "hpcnode-fleet", "Fleet",
        "The whole fleet: nodes by readiness, the nodes failing each check, degraded links by rack and switch, "
        "RDMA throughput, its p95 over nodes and headroom per cluster, the busiest nodes, and the verbs probe mesh, each linked to its "
        "node dashboard. Built on alerts/fleet.rules.yml; nodes are grouped by the target labels cluster, rack and switch.",
        ["hpcnode", "fleet"], variables,
        [row("Readiness", readiness), row("RDMA per cluster", rdma), row("Verbs probe mesh", mesh)])


DASHBOARDS = {
    "hpcnode-driver-stack.json": driver_stack_dashboard,
    "hpcnode-rdma-capacity.json": capacity_dashboard,
    "hpcnode-fleet.json": fleet_dashboard,
}


def render(build):
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main(argv):
    check = argv[1:] == ["--check"]
    if argv[1:] and not check:
        print(__doc__, file=sys.stderr)
        return 2
    stale = []
    for name, build in DASHBOARDS.items():
        path = HERE / name
        text_out = render(build)
        if check:
            if not path.exists() or path.read_text() != text_out:
                stale.append(name)
        else:
            path.write_text(text_out)
    if stale:
        print("dashboards out of date (run /usr/bin/python3 dashboards/generate.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
