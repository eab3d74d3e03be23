"""Episode records: every episode a server plays, as one JSON line in a folder of shards (``agentenv serve --record``).

``Recorder`` writes them (off the event loop, each line whole and flushed to disk, shards rotated by size, the
folder bounded); ``read`` reads them back as dicts, one per episode, in the order they were written. The fields of
a record are ``FIELDS``' (the docs' records page has them); a shard is plain JSON lines, so pandas
(``pd.read_json(path, lines=True)``) and ``datasets`` (``load_dataset("json", data_files=...)``) read it too.
"""

from __future__ import annotations

from agentenv.record.build import RECORD_VERSION
from agentenv.record.reader import read, rollouts, shards
from agentenv.record.writer import DEFAULT_MAX_BYTES, DEFAULT_SHARD_BYTES, FIELDS, Recorder

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_SHARD_BYTES",
    "FIELDS",
    "RECORD_VERSION",
    "Recorder",
    "read",
    "rollouts",
    "shards",
]
