"""A stand-in OpenAI-compatible server (an API like OpenAI's, text only) for the eval tests: a real HTTP server on
loopback whose chat completions are answered by a scripted policy (tool calls, replies, malformed calls, HTTP
errors). It records every request and counts the requests in flight (and the most ever in flight)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentenv import Bundle

from tests.support.standin.chat import completion, model_list, tool_call, unknown_model


@dataclass(frozen=True)
class Answer:
    """What the stand-in answers: a message (text and tool calls), or an HTTP error."""

    content: str = ""
    calls: Sequence[tuple[str, Any]] = ()  # (name, args): a dict is sent as JSON, a str as it is (malformed)
    status: int = 200
    error: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        if self.status != 200:
            return {"error": self.error or {"message": "error"}}
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.calls:
            message["tool_calls"] = [tool_call(f"call_{i}", name, args) for i, (name, args) in enumerate(self.calls)]
        return completion(message, 10, 5)


def reply(text: str) -> Answer:
    return Answer(content=text)


def calls(*items: tuple[str, Any], content: str = "") -> Answer:
    return Answer(content=content, calls=items)


def http_error(status: int, message: str, code: str | None = None) -> Answer:
    return Answer(status=status, error={"message": message, "type": "BadRequestError", "code": code or status})


CONTEXT_TOO_LONG = http_error(
    400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages."
)


@dataclass
class Conversation:
    """Where a request is in its episode: the task's first prompt, the turn (1-based), and the completions so far in
    this turn."""

    prompt: str
    turn: int
    step: int
    messages: list[dict[str, Any]]

    @classmethod
    def of(cls, request: dict[str, Any]) -> Conversation:
        messages = request["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        step = sum(1 for m in messages[users[-1] + 1 :] if m["role"] == "assistant")
        return cls(prompt=messages[users[0]]["content"], turn=len(users), step=step, messages=messages)


class Reference:
    """Plays each task's reference solution: a turn's calls at once (parallel tool calls), then its reply."""

    def __init__(self, *bundles: Bundle) -> None:
        self.solutions: dict[str, list[Any]] = {}
        self.ids: dict[str, str] = {}
        for bundle in bundles:
            for task in bundle.tasks:
                assert task.solution is not None, task.id
                self.solutions.setdefault(task.turns[0].prompt, task.solution)
                self.ids.setdefault(task.turns[0].prompt, task.id)

    def task(self, c: Conversation) -> str:
        return self.ids[c.prompt]

    def turn(self, c: Conversation, turn: int | None = None) -> Answer:
        """The reference answer for this point of the conversation (of turn ``turn``, default the current one)."""
        solution = self.solutions[c.prompt][(turn or c.turn) - 1]
        if c.step == 0 and solution.calls:
            return calls(*((call.tool, call.args) for call in solution.calls))
        return reply(solution.reply)

    def __call__(self, c: Conversation) -> Answer:
        return self.turn(c)


class Scripted:
    """Per task, one plan per episode in the order they start (``ref``, ``wrong``, ``half``: the first turn right and
    the rest wrong, ``malformed``: unreadable tool calls first, ``unknown``: a call to a tool nobody offers first,
    ``crash``: break the env, ``context``: the context is full, ``busy``: HTTP 503 once, ``tools-off``: vLLM
    without tool calls, ``401``: the key is refused); tasks without a script play the reference."""

    def __init__(self, reference: Reference, plans: dict[str, list[str]]) -> None:
        self.reference = reference
        self.plans = plans
        self.started: Counter[str] = Counter()
        self.current: dict[str, str] = {}
        self.lock = threading.Lock()
        self.busy: set[str] = set()

    def __call__(self, c: Conversation) -> Answer:
        task = self.reference.task(c)
        with self.lock:
            if c.turn == 1 and c.step == 0:
                plans = self.plans.get(task, [])
                n = self.started[task]
                self.started[task] += 1
                self.current[task] = plans[n] if n < len(plans) else "ref"
            plan = self.current.get(task, "ref")
        return self.answer(plan, c)

    def answer(self, plan: str, c: Conversation) -> Answer:
        first = c.turn == 1 and c.step == 0
        if plan == "wrong" or (plan == "half" and c.turn > 1):
            return reply("I do not know.")
        if plan == "malformed" and first:
            return calls(("search", '{"query": "budg'), ("", {}), ("read_email", "[1, 2]"))
        if plan == "unknown" and first:
            return calls(("delete_everything", {}))
        if plan == "crash" and first:
            return calls(("crash", {}))
        if plan == "context" and c.turn == 1:
            return CONTEXT_TOO_LONG
        if plan == "busy" and first and c.prompt not in self.busy:
            self.busy.add(c.prompt)  # once: the client's retry gets the reference
            return http_error(503, "the server is busy")
        if plan == "tools-off":
            return http_error(
                400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
            )
        if plan == "401":
            return http_error(401, "Incorrect API key provided.", "invalid_api_key")
        if plan in ("malformed", "unknown"):  # after the mistake: the reference, from its first step
            return self.reference.turn(Conversation(c.prompt, c.turn, c.step - 1 if c.turn == 1 else c.step, []))
        return self.reference(c)


Policy = Callable[[Conversation], Answer]


@dataclass
class StandIn:
    """The server. ``hold``: the first ``hold`` requests wait (up to 10 s) until ``hold`` are in flight at once, so a
    client that plays that many at once is seen to."""

    policy: Policy
    models: Sequence[str] = ("stand-in",)
    hold: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Condition()
        self._held = 0
        self._released = False
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, model_list(list(standin.models)))
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions":
                    self._send(404, {"detail": "Not Found"})
                    return
                if request.get("model") not in standin.models:
                    self._send(404, unknown_model(request.get("model")))
                    return
                answer = standin._answer(request)
                self._send(answer.status, answer.body())

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _answer(self, request: dict[str, Any]) -> Answer:
        with self._lock:
            self.requests.append(request)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if self._held < self.hold:
                self._held += 1
                if self.in_flight >= self.hold:
                    self._released = True  # a flag, not the count: the count may drop again before a waiter wakes
                    self._lock.notify_all()
                self._lock.wait_for(lambda: self._released, timeout=10)
        try:
            return self.policy(Conversation.of(request))
        finally:
            with self._lock:
                self.in_flight -= 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def episodes(self, reference: Reference) -> Counter[str]:
        """How many episodes of each task the model was asked to open (first completions of a first turn)."""
        return Counter(reference.task(c) for c in map(Conversation.of, self.requests) if c.turn == 1 and c.step == 0)
