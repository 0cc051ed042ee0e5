#!/usr/bin/env bash
# apt: nodejs npm
# Type-checks every dashboards/*.json against Grafana's own Dashboard type: the @grafana/schema
# package (npm, the exact version in package-lock.json) and TypeScript, each dashboard's JSON text
# as an object literal that `satisfies JsonOf<Dashboard>` (json_of.ts; generate.mjs writes them),
# plus negative controls that must be rejected. No Grafana server is needed.
#   tests/grafana_schema/check.sh
# `npm ci` installs from package-lock.json only; with the packages in npm's cache it runs offline.
set -euo pipefail
cd "$(dirname "$0")"
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "schema: $tool not found (apt-get install nodejs npm)"; exit 1; }
done
npm ci --prefer-offline --no-audit --no-fund --loglevel=error
# Seen once in CI: npm ci said "added 2 packages" but left typescript a tenth extracted (no
# bin/, no node_modules/.bin/tsc); the same install again was whole. Say so and install once more.
if [ ! -x node_modules/.bin/tsc ]; then
  echo "schema: npm ci left no node_modules/.bin/tsc; installing again"
  npm ci --prefer-offline --no-audit --no-fund --loglevel=error
fi
node generate.mjs
node_modules/.bin/tsc -p .
echo "schema: every dashboard satisfies @grafana/schema $(node -p 'require("./node_modules/@grafana/schema/package.json").version')'s Dashboard (tsc $(node_modules/.bin/tsc --version | cut -d' ' -f2))"
