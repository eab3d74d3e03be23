"""Repository tooling: the documentation site's generated pages, its link check and the release check.

Not shipped in any wheel; run by the ``docs`` and ``release`` nox sessions and imported by tests/unit.
"""
