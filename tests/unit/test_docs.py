"""The docs site's generated references cover everything they document, and links go where they say.

The site itself is built (warnings as errors) and link-checked by ``nox -s docs``; these checks run
with the unit tier, without MkDocs.
"""

from __future__ import annotations

import argparse
import inspect

import pytest
import yaml
from agentenv import specs
from agentenv.plugins import Plugins, plugins
from pydantic import BaseModel

from tests.support import ROOT
from tools import docgen, linkcheck, site

SPEC_MODELS = [getattr(specs, name) for name in specs.__all__ if isinstance(getattr(specs, name), type)]
SPEC_MODELS = [m for m in SPEC_MODELS if issubclass(m, BaseModel)]


def _nav_pages(nav: list) -> set[str]:
    pages: set[str] = set()
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


NAV = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


# --- the bundle file reference ----------------------------------------------------------------------------


def test_the_bundle_reference_walks_every_model_a_bundle_is_written_in():
    documented = {model for _, model in docgen.bundle_models()}
    assert documented == set(SPEC_MODELS), f"not reached from bundle.yaml or a task: {set(SPEC_MODELS) - documented}"


@pytest.mark.parametrize("model", SPEC_MODELS, ids=lambda m: m.__name__)
def test_every_field_of_every_bundle_model_has_a_description_and_a_row_in_the_reference(model):
    reference = docgen.bundle_reference()
    section = reference.split(f"## {model.__name__}\n", 1)[1].split("\n## ", 1)[0]
    for name, info in model.model_fields.items():
        assert info.description, f"{model.__name__}.{name} has no description: write a docstring under the field"
        if name == "name" and "Its name is the key it is written under" in section:
            continue
        assert f"| `{name}` |" in section, f"{model.__name__}.{name} is missing from the bundle reference"


def test_the_loader_knows_exactly_the_top_level_fields_the_reference_lists(tmp_path):
    (tmp_path / "bundle.yaml").write_text("name: x\ntasks: t/*.yaml\nenvz: {}\n")
    from agentenv import BundleError, load_bundle

    with pytest.raises(BundleError) as refused:
        load_bundle(tmp_path)
    assert f"the fields are {', '.join(sorted(specs.BundleFile.model_fields))}" in str(refused.value)


def test_the_bundle_reference_lists_every_registered_kind_with_what_it_does():
    reference = docgen.bundle_reference()
    loaded = plugins()
    registries = (
        loaded.env_kinds(),
        loaded.verifier_kinds(),
        loaded.agent_kinds(),
        loaded.reward_rules(),
        loaded.task_sources(),
    )
    for registry in registries:
        for name in registry:
            assert f"| `{name}` |" in reference
    builtin = Plugins(entry_points=False)
    for registry, attr in (
        (builtin.verifier_kinds(), "build"),
        (builtin.env_kinds(), "create"),
        (builtin.agent_kinds(), "launch"),
    ):
        for name, record in registry.items():
            assert inspect.getdoc(getattr(record, attr)), f"built-in kind {name!r} has no docstring to show"


# --- the command line and the hooks -----------------------------------------------------------------------


def test_the_cli_reference_has_every_command_and_every_option_of_its_parser():
    reference = docgen.cli_reference()
    commands = plugins().cli_commands()
    for name in commands:
        assert f"## `agentenv {name}`" in reference
    for prog, parser in docgen.cli_parsers():
        section = reference.split(f"## `{prog}`\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            for option in action.option_strings:
                assert option in section, f"{prog} {option} is missing from the CLI reference"


def test_the_cli_reference_reaches_nested_subcommands():
    progs = [prog for prog, _ in docgen.cli_parsers()]
    assert "agentenv verl write" in progs
    assert all(isinstance(parser, argparse.ArgumentParser) for _, parser in docgen.cli_parsers())


def test_the_hook_reference_has_every_hook_with_its_whole_docstring():
    reference = docgen.hook_reference()
    manager = Plugins(entry_points=False).manager
    for name in (n for n in vars(manager.hook) if n.startswith("agentenv_")):
        assert f"### `{name}`" in reference
        first_line = inspect.getdoc(getattr(manager.hook, name).spec.function).splitlines()[0]
        assert first_line.replace("``", "`") in reference
    assert "```python\n@hookimpl" in reference  # the examples are code blocks


def test_the_fault_page_shows_the_table_of_agentenv_faults():
    from agentenv.faults import RULES

    table = docgen.fault_table()
    assert all(f"`{rule.kind}`" in table for rule in RULES)
    assert "<!-- generated: fault-table -->" in (ROOT / "docs" / "faults.md").read_text()


# --- links ------------------------------------------------------------------------------------------------


def test_a_docs_link_in_a_readme_becomes_a_relative_page_link_on_the_site():
    u = site.urls()
    assert site.site_link(f"{u.site}faults/#kinds", "packages/agentenv-trl/README.md", "trl.md") == "faults.md#kinds"
    assert site.site_link(u.site, "README.md", "reference/core.md") == "../index.md"
    assert site.site_link(f"{u.site}reference/cli/", "x.md", "changelog/agentenv-trl.md") == "../reference/cli.md"


def test_a_repository_link_to_an_included_file_becomes_its_page_and_other_paths_their_repository_address():
    u = site.urls()
    page = site.site_link("packages/agentenv-trl/README.md#the-quickstart-agentenv-demo", "README.md", "index.md")
    assert page == "trl.md#the-quickstart-agentenv-demo"
    assert site.site_link(f"{u.repo}/blob/main/packages/agentenv-core/CHANGELOG.md", "x.md", "trl.md") == (
        "changelog/agentenv-core.md"
    )
    inbox = site.site_link("examples/bundles/inbox", "README.md", "index.md")
    assert inbox == f"{u.repo}/tree/main/examples/bundles/inbox"
    assert site.site_link("https://example.org/x", "README.md", "index.md") == "https://example.org/x"


def test_links_in_code_are_neither_found_nor_rewritten():
    text = "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n"
    assert [link.target for link in site.links(text)] == ["a.md"]


@pytest.mark.parametrize("distribution", site.PACKAGES)
def test_each_package_readme_works_as_its_index_page(distribution):
    readme = (ROOT / "packages" / distribution / "README.md").read_text()
    relative = [link.target for link in site.links(readme) if not link.target.startswith(("https://", "http://", "#"))]
    assert relative == [], f"{distribution}'s README has links that go nowhere on the package index"
    assert f"pip install {distribution}" in readme or f"pip install '{distribution}[" in readme, "no install line"


def test_every_docs_address_in_the_markdown_files_is_a_page_of_the_site():
    u = site.urls()
    for path in linkcheck.markdown_files():
        for link in site.links(path.read_text()):
            base = link.target.partition("#")[0]
            if base.startswith(u.site):
                page = site.page_of_url(base)
                assert page in NAV, f"{path.relative_to(ROOT)}:{link.line}: {link.target} is no page of the site"


def test_every_included_file_and_generated_page_is_in_the_nav():
    generated = {"reference/bundle.md", "reference/cli.md", "reference/hooks.md"}
    written = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert set(site.INCLUDED.values()) | generated | written == NAV


def test_the_link_check_names_a_broken_relative_link_and_a_missing_anchor(tmp_path):
    (tmp_path / "bundle.yaml").write_text("name: x\n")
    page = tmp_path / "README.md"
    page.write_text("[gone](missing.yaml) [there](bundle.yaml) [heading](#no-such-heading) [ok](#a-head)\n# A head")
    report = linkcheck.Report()
    linkcheck.check_markdown([page], tmp_path / "site", report, root=tmp_path)
    assert [line.split(": ", 2)[1] for line in report.broken] == ["missing.yaml", "#no-such-heading"]
    assert report.checked == 4


def test_github_heading_ids_are_made_as_github_makes_them():
    ids = linkcheck.github_ids("# The quickstart: `agentenv demo`\n## Train\n## Train\n```\n# not a heading\n```\n")
    assert ids == {"the-quickstart-agentenv-demo", "train", "train-1"}
