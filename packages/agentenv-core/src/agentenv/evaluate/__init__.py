"""Evaluate a model served by any OpenAI-compatible endpoint on a bundle: ``agentenv eval``, and its parts.

    from agentenv.evaluate import Endpoint, EvalConfig, run_eval, compare, Summary
    summary = run_eval(EvalConfig("examples/bundles/arith", Endpoint("http://localhost:8000/v1", "my-model"),
                                  samples=4, out=Path("evals/step-0")))
    print(summary.table())
    print(compare(Summary.read("evals/step-0"), Summary.read("evals/step-400")).table())

For a trainer's own eval (the results of its episodes), ``summarize_results(results, split=...)`` gives
the same ``Summary``, so numbers from training and from ``agentenv eval`` compare with ``compare``.
The names below load on first use (``import agentenv.evaluate`` imports no HTTP client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentenv.lazy import lazy_exports

_EXPORTS = {
    "ChatClient": "chat",
    "ContextTooLong": "chat",
    "Endpoint": "chat",
    "EndpointError": "chat",
    "RESULTS": "results",
    "Sample": "results",
    "read_samples": "results",
    "Stats": "summary",
    "Summary": "summary",
    "TaskStats": "summary",
    "pass_at_k": "summary",
    "summarize": "summary",
    "summarize_results": "summary",
    "Comparison": "report",
    "Delta": "report",
    "compare": "report",
    "EvalConfig": "runner",
    "evaluate": "runner",
    "run_eval": "runner",
    "is_url": "runner",
    "play_sample": "loop",
}

__all__ = [
    "RESULTS",
    "ChatClient",
    "Comparison",
    "ContextTooLong",
    "Delta",
    "Endpoint",
    "EndpointError",
    "EvalConfig",
    "Sample",
    "Stats",
    "Summary",
    "TaskStats",
    "compare",
    "evaluate",
    "is_url",
    "pass_at_k",
    "play_sample",
    "read_samples",
    "run_eval",
    "summarize",
    "summarize_results",
]

if TYPE_CHECKING:
    from agentenv.evaluate.chat import ChatClient, ContextTooLong, Endpoint, EndpointError
    from agentenv.evaluate.loop import play_sample
    from agentenv.evaluate.report import Comparison, Delta, compare
    from agentenv.evaluate.results import RESULTS, Sample, read_samples
    from agentenv.evaluate.runner import EvalConfig, evaluate, is_url, run_eval
    from agentenv.evaluate.summary import Stats, Summary, TaskStats, pass_at_k, summarize, summarize_results

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
