from agentenv.client.settings import Shared
from agentenv.client.taskapi import probe


def test_serve_process_answers_probe(serve_process):
    server = serve_process()
    info = probe(Shared(server.url))
    assert info.name == "fake"
    assert info.splits == {"train": 11, "eval": 1, "test": 0}
