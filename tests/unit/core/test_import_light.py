"""``import agentenv`` stays light: a training process pays for nothing heavy (checked in fresh interpreters).

The probe is bench/import_time.py's own, so the benchmark and this test judge the same thing.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.support import ROOT

HEAVY_EVERYWHERE = {"torch", "transformers", "gradio", "fastapi", "uvicorn", "datasets", "pyarrow", "trl", "verl"}


def _bench():
    spec = importlib.util.spec_from_file_location("import_time_bench", ROOT / "bench" / "import_time.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _bench()


def test_the_bench_looks_for_every_heavy_module(bench):
    assert set(bench.HEAVY) >= HEAVY_EVERYWHERE
    assert "openenv.core.env_server" in bench.HEAVY_SUBMODULES


def test_import_agentenv_loads_no_heavy_module_and_not_even_pydantic(bench):
    loaded = bench.modules_loaded("import agentenv")
    assert loaded["heavy"] == []
    assert loaded["reported"] == []  # pydantic, jsonschema, yaml, pluggy, httpx, openenv all load on first use


@pytest.mark.parametrize(
    "statement",
    ["from agentenv import load_bundle, Episode", "import agentenv.client.session", "import agentenv.cli"],
)
def test_the_core_api_loads_no_heavy_module(bench, statement):
    assert bench.modules_loaded(statement)["heavy"] == []


def test_the_bench_reports_a_heavy_module_it_finds(bench):
    assert bench.modules_loaded("import json as torch; import sys; sys.modules['torch'] = torch")["heavy"] == ["torch"]


def test_loading_every_plugin_imports_no_server_stack_and_no_trainer(bench):
    # every `agentenv` command and every load_bundle() loads the plugins: integrations must stay light
    statement = "from agentenv.plugins import plugins; p = plugins(); p.cli_commands(); p.integrations()"
    loaded = bench.modules_loaded(statement)
    assert loaded["heavy"] == []
