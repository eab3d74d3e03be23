"""The release check: build every package as the index will see it, check it, and install each alone.

    python -m tools.release OUT_DIR

1. ``uv build --all-packages --no-sources``: a wheel and an sdist of each package, the wheel built from
   the sdist, with no workspace sources (what a user's installer sees).
2. ``twine check --strict``: the metadata the index reads (name, version, the README as its description).
3. Each README rendered as the index renders it (readme_renderer, GitHub-flavoured Markdown): it must
   render, and every link and image in it must be absolute (relative ones go nowhere on the index).
4. Each wheel installed alone into a fresh venv (its agentenv dependencies from OUT_DIR, the rest from
   the index), then imported there, from outside the repository, with its version checked.

Prints the tags a release of these files would get (``agentenv-core-v0.2.0``...). Exit 1 on any problem.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from html.parser import HTMLParser
from pathlib import Path

from tools.site import PACKAGES, ROOT

IMPORT_NAMES = {
    "agentenv-core": "agentenv",
    "agentenv-server": "agentenv_server",
    "agentenv-trl": "agentenv_trl",
    "agentenv-verl": "agentenv_verl",
    "agentenv-harness": "agentenv_harness",
    "agentenv-docker": "agentenv_docker",
}


def tag(distribution: str, version: str) -> str:
    """The release tag of one package's version: ``agentenv-core-v0.2.0``."""
    return f"{distribution}-v{version}"


def version_of(distribution: str) -> str:
    """The version a package's pyproject.toml declares."""
    with open(ROOT / "packages" / distribution / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise SystemExit("uv is not on PATH; install it (pip install uv)")
    return uv


def _run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and ((tag == "a" and name == "href") or (tag == "img" and name == "src")):
                self.refs.append(value)
            elif value and name in ("id", "name"):
                self.ids.add(value)


def metadata(wheel: Path) -> email.message.Message:
    """A wheel's METADATA (headers, and the README as the body)."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def readme_problems(wheel: Path) -> list[str]:
    """What is wrong with a wheel's README as the index shows it: it does not render, or a link is relative."""
    from readme_renderer.markdown import render

    meta = metadata(wheel)
    if not (meta.get("Description-Content-Type") or "").startswith("text/markdown"):
        return [f'{wheel.name}: the README is not declared as Markdown (readme = "README.md")']
    html = render(meta.get_payload(), variant="GFM")
    if html is None:
        return [f"{wheel.name}: the README does not render as the index renders it"]
    refs = _Refs()
    refs.feed(html)
    return [
        f"{wheel.name}: README link {ref!r} is not absolute: it goes nowhere on the index"
        for ref in refs.refs
        if not ref.startswith(("https://", "http://", "mailto:")) and ref.removeprefix("#") not in refs.ids
    ]


def project_urls(wheel: Path) -> dict[str, str]:
    """The wheel's Project-URLs, label -> address."""
    return dict(line.split(", ", 1) for line in metadata(wheel).get_all("Project-URL") or [])


def install_alone(distribution: str, dist: Path, scratch: Path) -> str:
    """Install one wheel into a fresh venv (agentenv packages from ``dist``), import it; return its version."""
    wheel = next(dist.glob(f"{distribution.replace('-', '_')}-*.whl"))
    venv = scratch / f"venv-{distribution}"
    _run(_uv(), "venv", "--quiet", venv, "--python", sys.executable)
    python = venv / "bin" / "python"
    _run(_uv(), "pip", "install", "--quiet", "--python", python, "--find-links", dist, wheel, cwd=scratch)
    code = f"import {IMPORT_NAMES[distribution]} as m, importlib.metadata as md; print(md.version({distribution!r}))"
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=scratch, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"importing {distribution} alone failed:\n{done.stderr}")
    return done.stdout.strip()


def main(argv: list[str]) -> int:
    dist = Path(argv[0] if argv else "dist").resolve()
    shutil.rmtree(dist, ignore_errors=True)
    print(f"building every package with --no-sources into {dist}")
    _run(_uv(), "build", "--all-packages", "--no-sources", "--out-dir", dist, cwd=ROOT)
    wheels = sorted(dist.glob("*.whl"))
    sdists = sorted(dist.glob("*.tar.gz"))
    problems = []
    for distribution in PACKAGES:
        stem = distribution.replace("-", "_")
        for kind, files in (("wheel", wheels), ("sdist", sdists)):
            if not any(f.name.startswith(f"{stem}-{version_of(distribution)}") for f in files):
                problems.append(f"{distribution}: no {kind} of version {version_of(distribution)} was built")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print("twine check --strict")
    _run(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists)
    for wheel in wheels:
        problems += readme_problems(wheel)
        missing = {"Documentation", "Source", "Changelog"} - set(project_urls(wheel))
        if missing:
            problems.append(f"{wheel.name}: no Project-URL {', '.join(sorted(missing))}")
    with tempfile.TemporaryDirectory(prefix="agentenv-release-") as scratch:
        for distribution in PACKAGES:
            installed = install_alone(distribution, dist, Path(scratch))
            print(f"{distribution}: installed alone and imported ({installed})")
            if installed != version_of(distribution):
                declared = version_of(distribution)
                problems.append(f"{distribution}: installed {installed}, pyproject.toml says {declared}")
    for line in problems:
        print(f"problem: {line}", file=sys.stderr)
    if not problems:
        print("tags for these files: " + " ".join(tag(d, version_of(d)) for d in PACKAGES))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
