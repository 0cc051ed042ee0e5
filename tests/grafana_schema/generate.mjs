// Writes generated/<dashboard>.ts for every dashboards/*.json: the JSON text verbatim as an
// object literal with `satisfies Dashboard`, so tsc checks every field against Grafana's
// own type (string literal unions, enums, excess properties), not a widened JSON import.
import { readdirSync, readFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dashboards = join(here, "..", "..", "dashboards");
const out = join(here, "generated");
rmSync(out, { recursive: true, force: true });
mkdirSync(out);
const files = readdirSync(dashboards).filter((name) => name.endsWith(".json")).sort();
if (files.length === 0) {
  console.error(`no dashboards in ${dashboards}`);
  process.exit(1);
}
for (const name of files) {
  const text = readFileSync(join(dashboards, name), "utf8");
  JSON.parse(text); // a syntax error is reported here with the file's name
  writeFileSync(join(out, name.replace(/\.json$/, ".ts")),
    `// Generated from dashboards/${name} by generate.mjs.\n` +
    `import type { Dashboard } from "@grafana/schema";\nimport type { JsonOf } from "../json_of.ts";\n\n` +
    `export const dashboard = ${text.trimEnd()} satisfies JsonOf<Dashboard>;\n`);
}
// Negative controls: each must be rejected, or tsc reports the unused @ts-expect-error, so
// a JsonOf or a package that stopped checking anything fails the check too.
writeFileSync(join(out, "negative_controls.ts"), `import type { Dashboard } from "@grafana/schema";
import type { JsonOf } from "../json_of.ts";

// @ts-expect-error a colour mode Grafana does not know
export const badColour = { panels: [{ type: "stat", fieldConfig: { defaults: { color: { mode: "rainbow" } }, overrides: [] } }] } satisfies JsonOf<Dashboard>;
// @ts-expect-error graphTooltip is 0, 1 or 2
export const badTooltip = { graphTooltip: 7 } satisfies JsonOf<Dashboard>;
// @ts-expect-error a misspelt dashboard field
export const misspelt = { shemaVersion: 42 } satisfies JsonOf<Dashboard>;
`);
console.log(`schema: ${files.length} dashboards: ${files.join(", ")}`);
