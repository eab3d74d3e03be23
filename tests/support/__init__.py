"""What the tests of every tier share: bundles and their paths, real servers, the stand-in models, /proc, waiting.

Its fixtures come from :mod:`tests.support.fixtures`, a pytest plugin the root ``tests/conftest.py`` registers; a
test module imports helpers from here, never a fixture and never a conftest.
"""
