#!/usr/bin/env python3
"""prometheus_configs.py DOCUMENT... PREFIX: writes every ```yaml block of the documents that
has `rule_files:` to PREFIX.<n>.yml, for promtool to read as the admin would (tests/packaging/rules.sh).
Fails when a document has none: the documents say how Prometheus loads the rules."""
import re
import sys
import textwrap

*documents, prefix = sys.argv[1:]
n = 0
for document in documents:
    # A block may be indented, inside a list item.
    found = re.findall(r"^( *)```yaml\n(.*?)^\1```", open(document).read(), re.M | re.S)
    blocks = [textwrap.dedent(b) for _, b in found if "rule_files:" in b]
    if not blocks:
        sys.exit(f"{document}: no ```yaml block with rule_files:")
    for block in blocks:
        n += 1
        with open(f"{prefix}.{n}.yml", "w") as out:
            out.write(block)
