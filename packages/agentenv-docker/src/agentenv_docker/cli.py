"""``agentenv image build BUNDLE`` and ``agentenv image base NAME``."""

from __future__ import annotations

import argparse

from .images import build_base, build_bundle

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """``agentenv image {build,base}``."""
    sub = parser.add_subparsers(dest="image_command", metavar="{build,base}", required=True)
    build = sub.add_parser("build", help="build each container env's image from the Dockerfile in its build folder")
    build.add_argument("bundle", help="the bundle folder, or an installed bundle's name")
    build.add_argument("--base", metavar="IMAGE", help="the base image, given to the Dockerfile as its BASE argument")
    build.add_argument("--env", action="append", default=[], metavar="NAME", help="only this env (repeat for more)")
    base = sub.add_parser("base", help="make a Python base image from Debian packages (debootstrap; needs root)")
    base.add_argument("name", help="the image's name, e.g. agentenv/python:bookworm")
    base.add_argument("--suite", default="bookworm", help="the Debian release (default: bookworm)")
    base.add_argument("--include", default="python3", help="packages to install, comma-separated (default: python3)")


def run(args: argparse.Namespace) -> int:
    """Build what was asked; an ``ImageError`` is printed by the CLI as ``error: ...`` (exit 2)."""
    if args.image_command == "base":
        build_base(args.name, suite=args.suite, include=[p for p in args.include.split(",") if p])
        return 0
    built = build_bundle(args.bundle, base=args.base, only=args.env)
    print(f"built {len(built)} image(s){': ' + ', '.join(built) if built else ''}")
    return 0
