"""mkdocs-gen-files script: the generated references, and the repository files that are pages of the site.

Run by ``mkdocs build`` (mkdocs.yml, plugin ``gen-files``); nothing it writes is kept in the repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools import docgen, site

# a marker a hand-written page puts where a generated piece goes
MARKERS = {
    "<!-- generated: fault-table -->": docgen.fault_table,
    "<!-- generated: config-errors -->": docgen.config_errors,
}
HAND_WRITTEN_WITH_MARKERS = ("faults.md",)

# each generated page, and the file to edit to change it
GENERATED = {
    "reference/bundle.md": (docgen.bundle_reference, "packages/agentenv-core/src/agentenv/specs.py"),
    "reference/cli.md": (docgen.cli_reference, "packages/agentenv-core/src/agentenv/cli.py"),
    "reference/hooks.md": (docgen.hook_reference, "packages/agentenv-core/src/agentenv/plugins/hookspecs.py"),
}
for path, (make, source) in GENERATED.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(make())
    mkdocs_gen_files.set_edit_path(path, f"../{source}")

for source, page in site.INCLUDED.items():
    with mkdocs_gen_files.open(page, "w") as f:
        f.write(site.as_page(source, page))
    mkdocs_gen_files.set_edit_path(page, f"../{source}")

for page in HAND_WRITTEN_WITH_MARKERS:
    text = (site.ROOT / "docs" / page).read_text()
    for marker, make in MARKERS.items():
        text = text.replace(marker, make())
    with mkdocs_gen_files.open(page, "w") as f:
        f.write(text)
