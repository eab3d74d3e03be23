"""The fast path of ``agentenv.bundle.yaml_lines``: a document built straight from libyaml's events, and the bounds
a document with anchors and aliases must keep before PyYAML's own loader builds it.

``from_events`` builds what ``yaml.safe_load`` would for the common case (no anchors, aliases, explicit tags
or merge keys: ``Unusual`` otherwise) and records lines when asked. ``bounded`` reads an unusual document's
events once and refuses one whose aliases expand it past ``MAX_EXPANSION`` times what it writes, that aliases a
collection inside itself, that nests deeper than ``MAX_DEPTH`` or holds a value PyYAML cannot make: an alias
repeats its anchor's whole value, so a few hundred bytes of aliases of aliases would otherwise expand to
billions of values.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["MAX_DEPTH", "MAX_EXPANSION", "BadValue", "Parser", "Unusual", "bounded", "from_events", "typed_value"]

Parser: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR = "tag:yaml.org,2002:str"
_KEEP = 40  # plain scalars up to this long are resolved once (keys, splits, small answers): see _resolved
_resolved: dict[str, Any] = {}  # plain scalar -> its value (immutable values only: str, int, float, bool, ...)

MAX_DEPTH = 100  # collections inside collections (a task needs about 8; JSON frames are held to 100 as well)
MAX_EXPANSION = 10  # aliases may make a document at most this many times the values it writes (+ _SPARE)
_SPARE = 100_000


class BadValue(Exception):
    """What makes a document unreadable (``what``), at ``line``, and the ``fix``."""

    def __init__(self, line: int, what: str, fix: str = "quote it to keep it as text") -> None:
        super().__init__(what)
        self.line = line
        self.what = what
        self.fix = fix


class Unusual(Exception):
    """The document uses YAML this reader leaves to PyYAML (anchors, aliases, tags, merge keys)."""


def typed_value(loader: Any, tag: str, raw: str, event: yaml.ScalarEvent) -> Any:
    """The value of a typed scalar, as PyYAML's safe constructor makes it; ``BadValue`` when it cannot."""
    try:
        return loader.yaml_constructors[tag](loader, yaml.ScalarNode(tag, raw))
    except (ValueError, OverflowError) as exc:  # an int past 4,300 digits, a date with month 13, ...
        shown = raw if len(raw) <= 40 else f"{raw[:30]}... ({len(raw):,} characters)"
        kind = tag.rsplit(":", 1)[-1]
        what = f"{shown!r} reads as a YAML {kind} that Python cannot make ({exc})"
        raise BadValue(event.start_mark.line + 1, what) from None


def bounded(text: str) -> None:
    """Refuse (``BadValue``) a document whose aliases expand it past the bound, alias a collection inside itself,
    nest collections deeper than ``MAX_DEPTH`` or hold a value Python cannot make, at its line; PyYAML builds it
    only after this.

    The parser's events are read once: an anchor's size (its values, aliases expanded) is known when its
    node ends, and an alias adds its anchor's size, so the count costs nothing however far it expands.
    """
    loader = Parser(text)
    sizes: dict[str, int] = {}  # anchor -> its size
    frames: list[list[Any]] = []  # per open collection: [its anchor, its size so far]
    written = expanded = biggest = 0
    worst = 1  # the line of the alias that adds the most
    try:
        while True:
            event = loader.get_event()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                if any(frame[0] == event.anchor for frame in frames):
                    loop = f"alias *{event.anchor} is inside the value it names (a loop)"
                    raise BadValue(line, loop, "write the value out instead")
                size = sizes.get(event.anchor, 1)  # an undefined one: PyYAML's composer says so
                if size > biggest:
                    biggest, worst = size, line
            elif isinstance(event, yaml.ScalarEvent):
                written += 1
                size = 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
                tag = (
                    loader.resolve(yaml.ScalarNode, event.value, event.implicit)
                    if event.tag in (None, "!")
                    else event.tag
                )
                if tag != _STR and tag in loader.yaml_constructors and tag != "tag:yaml.org,2002:merge":
                    typed_value(loader, tag, event.value, event)  # a value PyYAML cannot make is told at its line
            elif isinstance(event, yaml.CollectionStartEvent):
                written += 1
                if len(frames) >= MAX_DEPTH:
                    raise BadValue(line, f"collections are nested more than {MAX_DEPTH} deep", "flatten it")
                frames.append([event.anchor, 1])
                continue
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, size = frames.pop()
                if anchor is not None:
                    sizes[anchor] = size
            elif isinstance(event, yaml.StreamEndEvent):
                break
            else:
                continue
            if frames:
                frames[-1][1] += size
            else:
                expanded += size
    finally:
        loader.dispose()
    limit = MAX_EXPANSION * written + _SPARE
    if expanded > limit:
        raise BadValue(
            worst,
            f"aliases expand this file to {expanded:,} values, more than {limit:,} (it writes {written:,}); the "
            f"alias here alone repeats {biggest:,}",
            "write the repeated part out, or repeat it less",
        )


_NO_KEY: Any = object()


def from_events(text: str, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    """The document built from the parser's events, as PyYAML's safe constructor builds it.

    Raises ``Unusual`` for what only the full loader handles; records lines when ``lines`` is given.
    """
    loader = Parser(text)
    try:
        get = loader.get_event
        get()  # stream start
        if isinstance(get(), yaml.StreamEndEvent):
            return None
        root = _document(loader, lines)
        if not isinstance(get(), yaml.StreamEndEvent):
            raise Unusual  # a second document: the full loader refuses it, saying so
        return root
    finally:
        loader.dispose()


def _document(loader: Any, lines: dict[tuple[str | int, ...], int] | None) -> Any:
    """The value of the document whose start ``loader`` has just read, built from its events through its end."""
    get = loader.get_event
    resolved = _resolved
    if len(resolved) > 100_000:
        resolved.clear()
    # one frame per open collection: the container, the key waiting for its value (maps), its path
    containers: list[Any] = []
    keys: list[Any] = []
    raw_keys: list[Any] = []
    paths: list[tuple[str | int, ...]] = []
    root: Any = None
    scalar, map_start, seq_start = yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent
    map_end, seq_end, doc_end = yaml.MappingEndEvent, yaml.SequenceEndEvent, yaml.DocumentEndEvent
    while True:
        event = get()
        kind = event.__class__
        if kind is scalar:
            tag = event.tag
            if event.anchor is not None or (tag is not None and tag != "!"):
                raise Unusual
            raw = event.value
            if event.implicit[0]:  # plain: typed by YAML 1.1's implicit resolvers, as safe_load does
                value = resolved.get(raw, _NO_KEY)
                if value is _NO_KEY:
                    value = _plain(loader, raw, event)
            else:
                value = raw
            opened = False
        elif kind is map_start or kind is seq_start:
            tag = event.tag
            if event.anchor is not None or (tag is not None and tag != "!") or len(containers) >= MAX_DEPTH:
                raise Unusual  # (too deep: _bounded says where)
            value, raw, opened = ({} if kind is map_start else []), None, True
        elif kind is map_end or kind is seq_end:
            value = containers.pop()
            keys.pop()
            raw_keys.pop()
            if lines is not None:
                paths.pop()
            if not containers:
                root = value
                continue
            parent = containers[-1]
            if parent.__class__ is dict:
                parent[keys[-1]] = value
                keys[-1] = _NO_KEY
            else:
                parent.append(value)
            continue
        elif kind is doc_end:
            return root
        else:  # an alias (or anything else): the full loader decides
            raise Unusual
        if containers or opened:
            _place(value, raw, opened, event, containers, keys, raw_keys, paths, lines)
        else:
            root = value


def _plain(loader: Any, raw: str, event: yaml.ScalarEvent) -> Any:
    """The value of plain scalar ``raw`` as YAML 1.1's implicit resolvers type it, kept in ``_resolved`` if short;
    ``Unusual`` for a merge key or a tag without a constructor."""
    tag = loader.resolve(yaml.ScalarNode, raw, (True, False))
    if tag == _STR:
        value = raw
    elif tag in loader.yaml_constructors and tag != "tag:yaml.org,2002:merge":
        value = typed_value(loader, tag, raw, event)
    else:
        raise Unusual
    if len(raw) <= _KEEP:
        _resolved[raw] = value
    return value


def _place(
    value: Any,
    raw: str | None,
    opened: bool,
    event: yaml.NodeEvent,
    containers: list[Any],
    keys: list[Any],
    raw_keys: list[Any],
    paths: list[tuple[str | int, ...]],
    lines: dict[tuple[str | int, ...], int] | None,
) -> None:
    """Place a new node in the open collection: a scalar now, a collection (``opened``) by opening its frame, where
    it is placed when it ends; with no collection open, open the root's frame."""
    if not containers:
        containers.append(value)
        keys.append(_NO_KEY)
        raw_keys.append(None)
        if lines is not None:
            paths.append(())
        return
    parent = containers[-1]
    if parent.__class__ is dict:
        if keys[-1] is _NO_KEY:  # this node is a key
            if opened:
                raise Unusual  # a collection as a key: the full loader says what is wrong
            keys[-1] = value
            raw_keys[-1] = raw
            if lines is not None:
                lines[(*paths[-1], raw)] = event.start_mark.line + 1
            return
        if opened:
            if lines is not None:
                paths.append((*paths[-1], raw_keys[-1]))
            containers.append(value)
            keys.append(_NO_KEY)
            raw_keys.append(None)
        else:
            parent[keys[-1]] = value
            keys[-1] = _NO_KEY
    else:
        if lines is not None:
            here = (*paths[-1], len(parent))
            lines[here] = event.start_mark.line + 1
        if opened:
            if lines is not None:
                paths.append(here)
            containers.append(value)
            keys.append(_NO_KEY)
            raw_keys.append(None)
        else:
            parent.append(value)
