"""Where the tests' bundles live: the repository's root, the fixture bundles and the examples."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fixtures" / "bundles" / "fake"
HARNESS = ROOT / "tests" / "fixtures" / "bundles" / "harness"
VERDICTS = ROOT / "tests" / "fixtures" / "bundles" / "verdicts"
INBOX = ROOT / "examples" / "bundles" / "inbox"
ARITH = ROOT / "examples" / "bundles" / "arith"
