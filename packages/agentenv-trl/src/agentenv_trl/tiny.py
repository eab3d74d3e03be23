"""Tiny Qwen3-style models with a tokenizer built on the spot: CPU smoke runs with no model hub.

``tiny_tokenizer`` trains a byte-level BPE on the texts it is given and uses the Qwen2.5 chat template
TRL ships (so TRL recognises it and sets the tool-call parser); ``tiny_model`` builds a randomly
initialised ``Qwen3ForCausalLM`` for it; ``warm_start`` fits a model to whole conversations (loss on
the assistant's tokens) so that it emits tool calls at all. Imports transformers and torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["Conversation", "render", "tiny_model", "tiny_tokenizer", "warm_start"]

# Markup the Qwen chat template writes; ordinary (non-special) added tokens, as in Qwen's own tokenizer.
MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

Conversation = tuple[list[dict[str, Any]], list[Callable[..., Any]]]
"""Chat messages (TRL's form: assistant ``tool_calls``, ``tool`` messages) and the tools shown with them."""

_Rows = list[tuple[list[int], list[int]]]  # a conversation's token ids and its labels (-100: not trained on)


def tiny_tokenizer(
    conversations: Sequence[Conversation] = (), texts: Iterable[str] = (), *, vocab_size: int = 1024
) -> Any:
    """A fast tokenizer trained on ``conversations`` (as the chat template writes them) and ``texts``.

    It has TRL's Qwen2.5 chat template and tool-call parser; digits are single tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    def build(corpus: list[str], size: int) -> Any:
        bpe = Tokenizer(models.BPE())
        # single digits: numbers are copied digit by digit, which a tiny model learns far sooner than BPE chunks.
        # Merges cross words (no regex split): the system prompt and tool list every conversation repeats become a
        # few dozen tokens instead of hundreds, so the positions the model must learn to point at (the digits) are
        # not lost among them, and a tool call is a handful of tokens to generate
        bpe.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        bpe.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        bpe.train_from_iterator(corpus, trainer)
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
        )
        tokenizer.add_tokens(MARKUP)
        tokenizer.chat_template = qwen2_5_chat_template
        return add_response_schema(tokenizer)  # TRL recognises its own template and sets the tool-call parser

    # rendering needs a tokenizer object but not its vocabulary: a bytes-only one renders the corpus
    bootstrap = build(["0"], 0)
    corpus = [render(bootstrap, c) for c in conversations] + list(texts)
    return build(corpus or ["0"], vocab_size)


def tiny_model(tokenizer: Any, *, hidden_size: int = 128, layers: int = 4, heads: int = 4, seed: int = 0) -> Any:
    """A randomly initialised ``Qwen3ForCausalLM`` sized for ``tokenizer`` (about a million parameters)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden_size // heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def render(tokenizer: Any, conversation: Conversation) -> str:
    """The conversation as the chat template writes it, with its tools."""
    messages, tools = conversation
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False)


def _assistant_spans(tokenizer: Any, conversation: Conversation, text: str) -> list[tuple[int, int]] | None:
    """Character spans of what the model generates (each assistant message through its end-of-turn token)."""
    messages, tools = conversation
    eos = tokenizer.eos_token
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = tokenizer.apply_chat_template(
            messages[:i], tools=tools or None, tokenize=False, add_generation_prompt=True
        )
        through = tokenizer.apply_chat_template(messages[: i + 1], tools=tools or None, tokenize=False)
        if not text.startswith(before) or not text.startswith(through):
            return None  # a template that rewrites earlier turns: train on everything instead
        end = through.rfind(eos)
        spans.append((len(before), end + len(eos) if end >= len(before) else len(through)))
    return spans


def warm_start(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[Conversation],
    *,
    steps: int,
    learning_rate: float = 3e-3,
    batch_size: int = 8,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
    weights: Sequence[float] | None = None,
    decay: bool = False,
) -> list[float]:
    """Fit ``model`` to ``conversations`` for ``steps`` AdamW steps (loss on the assistant's tokens).

    ``weights``: how often each conversation is drawn, relative to the others (all alike by default).
    ``decay``: the learning rate falls to zero along a cosine instead of staying constant. Returns the
    loss of each step; ``progress(step, loss)`` is called after each.
    """
    import math

    import torch

    if steps <= 0 or not conversations:
        return []
    groups, shares = _grouped(tokenizer, conversations, weights)
    batches = [(rows, _common_prefix([ids for ids, _ in rows])) for rows in groups.values()]
    row_weights = [torch.tensor(shares[key]) for key in groups]
    group_weights = torch.tensor([float(sum(shares[key])) for key in groups])
    cache_argument = _cache_argument()
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    # with decay: at a constant rate the copying a model must learn to generalise (digits from the prompt into a
    # call, from a tool's answer into the reply) came late or not at all, depending on the seed
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, (lambda s: 0.5 * (1 + math.cos(math.pi * s / steps))) if decay else (lambda s: 1.0)
    )
    model.train()
    losses = []
    for step in range(steps):
        g = int(torch.multinomial(group_weights, 1, generator=generator))
        rows, prefix = batches[g]
        if weights is None:
            pick = torch.randperm(len(rows), generator=generator)[:batch_size].tolist()
        else:
            drawn = min(batch_size, int((row_weights[g] > 0).sum()))
            pick = torch.multinomial(row_weights[g], drawn, replacement=False, generator=generator).tolist()
        ids, labels, mask = _batch(tokenizer, [rows[i] for i in pick], prefix)
        cache = None
        if prefix:
            # the shared opening is computed once, without gradients; the rest of each conversation attends to it
            with torch.no_grad():
                out = model(input_ids=torch.tensor([rows[0][0][:prefix]]), use_cache=True)
                cache = out.get(cache_argument)
                if cache is None:  # transformers before 5.x
                    cache = out.past_key_values
            cache.batch_repeat_interleave(len(pick))
            mask = torch.cat([torch.ones((len(pick), prefix), dtype=torch.long), mask], dim=1)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels, **{cache_argument: cache}).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, losses[-1])
    model.eval()
    return losses


def _grouped(
    tokenizer: Any, conversations: Sequence[Conversation], weights: Sequence[float] | None
) -> tuple[dict[tuple[str, ...], _Rows], dict[tuple[str, ...], list[float]]]:
    """Each conversation's token ids and labels (the assistant's tokens only, where its spans are found), and its
    weight, grouped by the names of the tools shown with it."""
    groups: dict[tuple[str, ...], _Rows] = {}
    shares: dict[tuple[str, ...], list[float]] = {}
    for number, conversation in enumerate(conversations):
        text = render(tokenizer, conversation)
        encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
        spans = _assistant_spans(tokenizer, conversation, text)
        labels = []
        for token, (start, end) in zip(encoded["input_ids"], encoded["offset_mapping"]):
            trained = spans is None or any(s <= start and end <= e for s, e in spans)
            labels.append(token if trained else -100)
        # conversations with the same tools open with the same system prompt and tool list, most of each sequence
        tools = tuple(getattr(t, "__name__", str(t)) for t in conversation[1])
        groups.setdefault(tools, []).append((encoded["input_ids"], labels))
        shares.setdefault(tools, []).append(1.0 if weights is None else float(weights[number]))
    return groups, shares


def _batch(tokenizer: Any, picked: _Rows, prefix: int) -> tuple[Any, Any, Any]:
    """The ids, labels and attention mask of the ``picked`` rows past their first ``prefix`` tokens, padded to the
    longest (torch tensors)."""
    import torch

    width = max(len(ids) for ids, _ in picked) - prefix
    ids = torch.full((len(picked), width), tokenizer.pad_token_id)
    labels = torch.full((len(picked), width), -100)
    mask = torch.zeros((len(picked), width), dtype=torch.long)
    for row, (row_ids, row_labels) in enumerate(picked):
        n = len(row_ids) - prefix
        ids[row, :n] = torch.tensor(row_ids[prefix:])
        labels[row, :n] = torch.tensor(row_labels[prefix:])
        mask[row, :n] = 1
    return ids, labels, mask


def _cache_argument() -> str:
    """The name transformers gives the KV-cache argument (``cache`` from 5.x on, ``past_key_values`` before)."""
    import inspect

    from transformers import Qwen3ForCausalLM

    return "cache" if "cache" in inspect.signature(Qwen3ForCausalLM.forward).parameters else "past_key_values"


def _common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Tokens every sequence starts with (at least one token of each is left after them; 0 when few)."""
    if len(sequences) < 2:
        return 0
    shortest = min(len(s) for s in sequences)
    n = 0
    while n < shortest - 1 and all(s[n] == sequences[0][n] for s in sequences):
        n += 1
    return n if n >= 16 else 0  # a short shared prefix is not worth a second forward pass
