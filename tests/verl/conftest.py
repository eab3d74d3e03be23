"""Fixtures of the verl tier: the tokenizer, a model folder verl can read, and the written datasets."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Before verl, transformers and datasets are imported: no hub, and datasets' cache out of $HOME.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_DATASETS_CACHE", os.path.join(tempfile.gettempdir(), "agentenv-verl-tests-datasets"))

import pytest
from agentenv_server import ServerThread, build_app
from agentenv_verl import Written, write
from transformers import PreTrainedTokenizerFast

from tests.support.verl import FAKE, INBOX, build_tokenizer, dataset_rows, save_model_dir

Rows = dict[str, dict[str, Any]]


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerFast:
    """The Qwen-style tokenizer built here."""
    return build_tokenizer()


@pytest.fixture(scope="session")
def model_dir(tokenizer: PreTrainedTokenizerFast, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the tokenizer and a Qwen2 model config: a model path for --tokenizer and verl's config."""
    return save_model_dir(tokenizer, tmp_path_factory.mktemp("model"))


def _write(bundle: Path, out: Path) -> Written:
    server = ServerThread(build_app(bundle)).start()
    try:
        return write(server.url, out)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fake_dataset(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """The fake bundle written by the real writer (a row holds no server URL, so any fake server plays it)."""
    return _write(FAKE, tmp_path_factory.mktemp("fake-dataset"))


@pytest.fixture(scope="session")
def fake_rows(
    fake_dataset: Written, tokenizer: PreTrainedTokenizerFast, tmp_path_factory: pytest.TempPathFactory
) -> Rows:
    """The fake bundle's train and eval rows as verl's worker hands them to ``run``, by task id."""
    cache = tmp_path_factory.mktemp("rlhf-cache")
    return {
        **dataset_rows(fake_dataset.files["train"], tokenizer, cache),
        **dataset_rows(fake_dataset.files["eval"], tokenizer, cache),
    }


@pytest.fixture(scope="session")
def inbox_rows(tokenizer: PreTrainedTokenizerFast, tmp_path_factory: pytest.TempPathFactory) -> Rows:
    """The inbox example's train rows as verl's worker hands them to ``run``, by task id."""
    written = _write(INBOX, tmp_path_factory.mktemp("inbox-dataset"))
    return dataset_rows(written.files["train"], tokenizer, tmp_path_factory.mktemp("rlhf-cache"))


@pytest.fixture
def fake_server(serve: Any) -> Iterator[Any]:
    """A fake-bundle server in this process (short deadlines for the failure tests)."""
    yield serve(FAKE, tool_timeout=1, reset_timeout=1)
