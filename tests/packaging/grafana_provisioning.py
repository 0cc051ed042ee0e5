#!/usr/bin/env python3
"""grafana_provisioning.py ROOT FILE DASHBOARD...: the dashboard provisioning FILE installed in
ROOT is what Grafana reads (apiVersion 1, file providers), and each provider's path holds
exactly the DASHBOARDs (their names), each a JSON dashboard (tests/packaging/rules.sh)."""
import json
import pathlib
import sys

import yaml

root, file, *dashboards = sys.argv[1:]
doc = yaml.safe_load(pathlib.Path(root, file.lstrip("/")).read_text())
providers = doc.get("providers") or []
if doc.get("apiVersion") != 1 or not providers:
    sys.exit(f"{file}: no apiVersion 1 with providers")
expected = sorted(pathlib.Path(d).name for d in dashboards)
for provider in providers:
    path = (provider.get("options") or {}).get("path", "")
    folder = pathlib.Path(root, path.lstrip("/"))
    if provider.get("type") != "file" or not path.startswith("/") or not folder.is_dir():
        sys.exit(f"{file}: provider {provider.get('name')}: path {path!r} is no installed directory")
    found = sorted(p.name for p in folder.glob("*.json"))
    if found != expected:
        sys.exit(f"{file}: {path} holds {found}, not {expected}")
    for name in found:
        if not json.loads((folder / name).read_text()).get("uid"):
            sys.exit(f"{path}/{name}: no dashboard uid")
    print(f"tests/packaging: {file}: provider {provider['name']} loads {len(found)} dashboards from {path}")
