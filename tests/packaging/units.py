#!/usr/bin/env python3
"""The unit each target's systemd gets, proven against that systemd (issue 38, point 1).

For every target in packaging/systemd/targets.tsv, on a kernel with CAP_BPF (cap_last_cap 40)
and one without (37): the base unit plus the drop-ins the generator lists for that systemd
(`hpcnode_exporter-generator --list`). Fails when
- a directive, SystemCallFilter group or capability name there is newer than the target's
  systemd, or missing from packaging/systemd/directives.tsv;
- `systemd-analyze verify` of the systemd here says anything about it;
- `systemd-analyze security --offline=true` rates it above 2.6 where the target has systemd 247
  or later (what the single unit scored before it was split);
- docs/security.md's directive table is not directives.tsv.
Then prints, per target, what it gets and what it goes without: the closing note's table.
Needs only systemd-analyze (no root).
"""

import csv
import functools
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "packaging/systemd"
BASE = REPO / "packaging/hpcnode_exporter.service"
GENERATOR = SYSTEMD / "hpcnode_exporter-generator"
MAX_EXPOSURE = 2.6
CAP_LAST_CAPS = (40, 37)  # 5.9 and later; before 5.8 (no CAP_PERFMON, CAP_BPF)
CAPABILITY_KEYS = {"CapabilityBoundingSet", "AmbientCapabilities"}
# The units verified here need these to load (After=, WantedBy=, the default dependencies).
SUPPORT_UNITS = ("*.target", "*.slice")


def table(path):
    rows = (line for line in path.read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(rows, delimiter="\t"))


def dropins(version, cap_last_cap):
    out = subprocess.run(
        [GENERATOR, "--list", str(version), str(cap_last_cap), SYSTEMD / "dropins"],
        check=True, capture_output=True, text=True,
    ).stdout
    return [Path(line) for line in out.split()]


def uses(files):
    """What the unit files use, as directives.tsv names it: key, key=value, @group, CAP_*."""
    found = set()
    for path in files:
        for line in path.read_text().splitlines():
            match = re.match(r"([A-Za-z]+)=(.*)", line)
            if not match:
                continue
            key, value = match.groups()
            found.add(key)
            found.add(f"{key}={value}")
            if key == "SystemCallFilter":
                found.update(w.lstrip("~") for w in value.split() if w.lstrip("~").startswith("@"))
            if key in CAPABILITY_KEYS:
                found.update(value.split())
    return found


def analyze(root, *args):
    result = subprocess.run(
        ["systemd-analyze", *args, f"--root={root}", "hpcnode_exporter.service"],
        capture_output=True, text=True,
    )
    return result.returncode, result.stdout + result.stderr


def make_root(root, files):
    """A root where systemd-analyze finds the unit and its drop-ins as the generator leaves them."""
    units = root / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    for pattern in SUPPORT_UNITS:
        for unit in Path("/usr/lib/systemd/system").glob(pattern):
            shutil.copy(unit, units)
    shutil.copy(files[0], units)
    dropin_dir = root / "etc/systemd/system/hpcnode_exporter.service.d"
    dropin_dir.mkdir(parents=True)
    for dropin in files[1:]:
        shutil.copy(dropin, dropin_dir)
    (root / "usr/bin").mkdir(parents=True)
    shutil.copy("/bin/true", root / "usr/bin/hpcnode_exporter")


@functools.cache
def analyzed(files, work):
    """systemd-analyze's complaints about one unit and its drop-ins, and their exposure score."""
    root = work / str(len(list(work.iterdir())))
    make_root(root, files)
    rc, out = analyze(root, "verify", "--man=no")
    failures = [f"systemd-analyze verify: {out.strip()}"] if rc != 0 or out.strip() else []
    _, out = analyze(root, "security", "--offline=true")
    return failures, float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", out).group(1))


def check_target(target, version, cap_last_cap, since, work):
    files = [BASE, *dropins(version, cap_last_cap)]
    used = uses(files)
    failures = [
        f"{key} needs systemd {since[key]}" for key in sorted(used & since.keys()) if since[key] > version
    ]
    known = {key.split("=")[0] for key in since}
    failures += [f"{key}: not in directives.tsv" for key in sorted(used) if "=" not in key and key not in known]
    verified, score = analyzed(tuple(files), work)
    failures += verified
    if version >= 247 and score > MAX_EXPOSURE:
        failures.append(f"exposure {score} above {MAX_EXPOSURE}")
    score = score if version >= 247 else None
    return [f"{target} (systemd {version}, cap_last_cap {cap_last_cap}): {f}" for f in failures], files, used, score


def check_docs(directives):
    text = (REPO / "docs/security.md").read_text()
    rows = set(re.findall(r"^\| `([^`]+)` \| (\d+) \| ([^|]+?) \|$", text, re.M))
    expected = {(row["key"], row["since"], row["source"]) for row in directives}
    return [f"docs/security.md's directive table lacks {row}" for row in sorted(expected - rows)] + [
        f"docs/security.md's directive table has {row}, directives.tsv does not" for row in sorted(rows - expected)
    ]


def main():
    directives = table(SYSTEMD / "directives.tsv")
    since = {row["key"]: int(row["since"]) for row in directives}
    failures, report = check_docs(directives), []
    newest = None
    with tempfile.TemporaryDirectory() as work:
        for row in table(SYSTEMD / "targets.tsv"):
            version = int(row["systemd"])
            for cap_last_cap in CAP_LAST_CAPS:
                found, files, used, score = check_target(row["target"], version, cap_last_cap, since, Path(work))
                failures += found
                if cap_last_cap == CAP_LAST_CAPS[0]:
                    report.append((row["target"], version, files, used, score))
                    newest = used if newest is None or len(used) > len(newest) else newest
    print("| target | systemd | drop-ins | without (directives, groups, capability names) | exposure |")
    print("|---|---|---|---|---|")
    for target, version, files, used, score in report:
        names = " ".join(f.name.split("-")[0] for f in files[1:]) or "none"
        left_out = sorted(k for k in newest - used if k in since)
        print(f"| {target} | {version} | {names} | {' '.join(left_out) or 'nothing'} | {score or ''} |")
    for failure in failures:
        print(f"tests/packaging/units.py: FAIL: {failure}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
