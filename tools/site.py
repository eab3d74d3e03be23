"""The site's addresses, the files it is made of, and how their links become site links.

Package READMEs are the wheels' pages on the package index, so their links are absolute: to the docs
(``site_url``) or to the repository (``repo_url``). The same files are pages of the site (one source):
included there, a link to the docs becomes a relative page link (that MkDocs checks), and a link to a
repository file that is itself a page (a README, a changelog) becomes a link to that page.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agentenv-core", "agentenv-server", "agentenv-trl", "agentenv-verl", "agentenv-harness", "agentenv-docker")

# repository file -> the site page made from it
INCLUDED: dict[str, str] = {
    "README.md": "index.md",
    "packages/agentenv-core/README.md": "reference/core.md",
    "packages/agentenv-server/README.md": "serving.md",
    "packages/agentenv-trl/README.md": "trl.md",
    "packages/agentenv-verl/README.md": "verl.md",
    "packages/agentenv-harness/README.md": "harness.md",
    "packages/agentenv-docker/README.md": "containers.md",
    "bench/README.md": "benchmarks.md",
    **{f"packages/{p}/CHANGELOG.md": f"changelog/{p}.md" for p in PACKAGES},
}
# the example plugin's README is the worked example of the plugin guide, once the example exists
if (ROOT / "examples/plugins/agentenv-kv/README.md").is_file():
    INCLUDED["examples/plugins/agentenv-kv/README.md"] = "plugins-example.md"


@dataclass(frozen=True)
class Urls:
    """The project's two addresses, as mkdocs.yml declares them (``site`` ends with a slash)."""

    site: str
    repo: str

    def page_url(self, page: str) -> str:
        """The published address of a site page (``reference/cli.md`` -> ``SITE/reference/cli/``)."""
        stem = page.removesuffix(".md")
        stem = stem.removesuffix("index") if stem == "index" or stem.endswith("/index") else stem + "/"
        return self.site + stem

    def repo_file(self, path: str) -> str:
        """A repository file's address (``blob``) or a folder's (``tree``) on the main branch."""
        kind = "tree" if (ROOT / path).is_dir() else "blob"
        return f"{self.repo}/{kind}/main/{path}"


@cache
def urls() -> Urls:
    """Read ``site_url`` and ``repo_url`` from mkdocs.yml, the one place they are written."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    site, repo = config["site_url"], config["repo_url"].rstrip("/")
    assert site.endswith("/"), "mkdocs.yml: site_url must end with a slash"
    return Urls(site, repo)


# [text](target "title") and ![alt](target); <a href=..> and <img src=..>. Code is skipped by links().
_LINK = re.compile(r"(!?\[(?:[^\[\]]|\[[^\]]*\])*\])\(\s*<?([^)\s>]+)>?((?:\s+\"[^\"]*\")?\s*)\)")
_HTML = re.compile(r"""(\b(?:href|src)=)(["'])([^"']+)\2""")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")


@dataclass(frozen=True)
class Link:
    """A link of a Markdown file: its target as written and the line it is on."""

    target: str
    line: int


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """Each line outside fenced code, with its number."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and line.lstrip().startswith(fence):
            fence = None
        elif fence is None:
            yield number, line


def links(text: str) -> list[Link]:
    """Every link target of a Markdown text, outside code blocks and code spans."""
    found = []
    for number, line in _prose(text):
        line = _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        found += [Link(m.group(2), number) for m in _LINK.finditer(line)]
        found += [Link(m.group(3), number) for m in _HTML.finditer(line)]
        found += [Link(m.group(1), number) for m in _AUTOLINK.finditer(line)]
    return found


def _map_targets(text: str, change: Callable[[str], str]) -> str:
    out, fence = [], None
    for line in text.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and line.lstrip().startswith(fence):
            fence = None
        elif fence is None:
            spans = [m.group(0) for m in _CODE_SPAN.finditer(line)]  # masked so that no link in code changes
            masked = _CODE_SPAN.sub(lambda m: "\0", line)
            masked = _LINK.sub(lambda m: f"{m.group(1)}({change(m.group(2))}{m.group(3)})", masked)
            masked = _HTML.sub(lambda m: f"{m.group(1)}{m.group(2)}{change(m.group(3))}{m.group(2)}", masked)
            pieces = masked.split("\0")
            line = "".join(p + (spans[i] if i < len(spans) else "") for i, p in enumerate(pieces))
        out.append(line)
    return "".join(out)


def _relative(page: str, target_page: str) -> str:
    return posixpath.relpath(target_page, posixpath.dirname(page) or ".")


def page_of_url(url: str) -> str | None:
    """The site page a docs address points at (``SITE/trl/`` -> ``trl.md``), or None if it is not one."""
    site = urls().site
    if not url.startswith(site):
        return None
    path = url[len(site) :].strip("/")
    return f"{path}.md" if path else "index.md"


def site_link(target: str, source: str, page: str) -> str:
    """``target``, a link of repository file ``source``, as written on site page ``page``."""
    base, hash_, anchor = target.partition("#")
    fragment = hash_ + anchor
    if not base:
        return target
    on_site = page_of_url(base)
    if on_site is not None:
        return _relative(page, on_site) + fragment
    repo = urls().repo
    for kind in ("/blob/main/", "/tree/main/"):
        if base.startswith(repo + kind):
            path = base[len(repo + kind) :]
            return _relative(page, INCLUDED[path]) + fragment if path in INCLUDED else target
    if re.match(r"^[a-z][a-z0-9+.-]*:", base):
        return target  # another site, mailto:
    path = posixpath.normpath(posixpath.join(posixpath.dirname(source), base))
    if path in INCLUDED:
        return _relative(page, INCLUDED[path]) + fragment
    if path.startswith("docs/") and path.endswith(".md"):  # a page of the site, as the repository holds it
        return _relative(page, path.removeprefix("docs/")) + fragment
    return urls().repo_file(path) + fragment


def as_page(source: str, page: str) -> str:
    """The text of repository file ``source`` as site page ``page``: its links rewritten for the site."""
    text = (ROOT / source).read_text()
    return _map_targets(text, lambda target: site_link(target, source, page))
