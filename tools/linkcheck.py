"""Check every link of the built site and of the repository's Markdown files; exit 1 naming each broken one.

    python -m tools.linkcheck [SITE_DIR]        (after mkdocs build; SITE_DIR defaults to site/)

- The site: every relative ``href``/``src`` of every page must reach a file of the site, and its
  ``#anchor`` an id on that page.
- The Markdown files (READMEs, changelogs, bench/README.md...): a link to the docs (mkdocs.yml's
  ``site_url``) must reach a built page and anchor; a link to the repository (``repo_url``, ``blob``
  or ``tree`` on ``main``) must name a path that exists; a relative link must reach a file, and its
  anchor a heading (as GitHub makes ids). A package README is its wheel's page on the package index,
  where nothing relative works but a link to one of its own headings: every other link must be absolute.
- Links to other sites are not checked (nothing outside this machine is reachable); they are counted.
"""

from __future__ import annotations

import posixpath
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

from tools.site import PACKAGES, ROOT, links, page_of_url, urls

SKIP_DIRS = {".venv", ".nox", "node_modules", "site", "dist", "build", ".git", ".pytest_cache", ".ruff_cache"}
INDEX_PAGES = {f"packages/{p}/README.md" for p in PACKAGES}
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


@dataclass
class Report:
    broken: list[str] = field(default_factory=list)
    checked: int = 0
    external: int = 0

    def bad(self, where: str, target: str, why: str) -> None:
        self.broken.append(f"{where}: {target}: {why}")


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script")):
                self.refs.append(value)


@cache
def _parsed(path: Path) -> _Html:
    parser = _Html()
    parser.feed(path.read_text(errors="replace"))
    return parser


def _site_target(site: Path, page: Path, ref: str) -> Path:
    prefix = urlparse(urls().site).path  # a link from the site's root (404.html has them): /agentenv/...
    if ref.startswith("/"):
        base = posixpath.normpath(ref.removeprefix(prefix)) if ref.startswith(prefix) else ref
    else:
        base = posixpath.normpath(posixpath.join(posixpath.dirname(page.relative_to(site).as_posix()), ref))
    target = site / base
    return target / "index.html" if target.is_dir() or ref.endswith("/") else target


def check_site(site: Path, report: Report) -> None:
    """Every relative link and anchor of every built page."""
    for page in sorted(site.rglob("*.html")):
        where = page.relative_to(site).as_posix()
        for ref in _parsed(page).refs:
            if _SCHEME.match(ref) or ref.startswith("//"):
                report.external += 1
                continue
            report.checked += 1
            base, _, anchor = ref.partition("#")
            target = _site_target(site, page, base) if base else page
            if not target.is_file():
                report.bad(where, ref, "no such file in the site")
            elif anchor and target.suffix == ".html" and anchor not in _parsed(target).ids:
                report.bad(where, ref, f"no id {anchor!r} on that page")


def github_ids(markdown: str) -> set[str]:
    """The ids GitHub gives a Markdown file's headings (lowercased, punctuation dropped, spaces to hyphens)."""
    ids: set[str] = set()
    seen: dict[str, int] = {}
    fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if fence or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def _md_anchor_ok(path: Path, anchor: str) -> bool:
    return not anchor or path.suffix.lower() != ".md" or anchor in github_ids(path.read_text())


def markdown_files() -> list[Path]:
    """The repository's Markdown files, outside virtual environments and build output."""
    found = [p for p in ROOT.rglob("*.md") if not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return sorted(p for p in found if p.relative_to(ROOT).parts[0] != "docs")


def check_markdown(files: Iterable[Path], site: Path, report: Report, root: Path = ROOT) -> None:
    """Every link of each Markdown file under ``root`` (docs pages are checked in the built site instead)."""
    u = urls()
    for path in files:
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        for link in links(text):
            where, target = f"{rel}:{link.line}", link.target
            base, _, anchor = target.partition("#")
            if base.startswith(u.site) or base.rstrip("/") == u.site.rstrip("/"):
                report.checked += 1
                page = page_of_url(base if base.endswith("/") else base + "/") or "index.md"
                built = site / ("" if page == "index.md" else page.removesuffix(".md")) / "index.html"
                if not built.is_file():
                    report.bad(where, target, "no such page on the docs site")
                elif anchor and anchor not in _parsed(built).ids:
                    report.bad(where, target, f"no id {anchor!r} on that page")
            elif base.startswith((f"{u.repo}/blob/main/", f"{u.repo}/tree/main/")):
                report.checked += 1
                repo_path = ROOT / base.split("/main/", 1)[1]
                if not repo_path.exists():
                    report.bad(where, target, "no such path in the repository")
                elif not _md_anchor_ok(repo_path, anchor):
                    report.bad(where, target, f"no heading {anchor!r} in that file")
            elif _SCHEME.match(target):
                report.external += 1
            elif rel in INDEX_PAGES and base:
                report.checked += 1
                fix = f"link to {u.site} or {u.repo}"
                report.bad(where, target, f"a relative link does not work on the package index; {fix}")
            else:
                report.checked += 1
                resolved = (path.parent / base).resolve() if base else path
                if root not in resolved.parents and resolved != root:
                    report.bad(where, target, "points outside the repository")
                elif not resolved.exists():
                    report.bad(where, target, "no such file")
                elif not _md_anchor_ok(resolved, anchor):
                    report.bad(where, target, f"no heading {anchor!r} in that file")


def main(argv: list[str]) -> int:
    site = Path(argv[0]) if argv else ROOT / "site"
    if not (site / "index.html").is_file():
        print(f"no built site at {site}; run mkdocs build first (nox -s docs)", file=sys.stderr)
        return 2
    report = Report()
    check_site(site, report)
    check_markdown(markdown_files(), site, report)
    for line in report.broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(
        f"{report.checked} links checked, {len(report.broken)} broken; {report.external} links to other sites "
        "not checked (nothing outside this machine is reachable)"
    )
    return 1 if report.broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
