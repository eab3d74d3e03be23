"""A client of an OpenAI-compatible chat completions endpoint (vLLM, SGLang, OpenAI...), over aiohttp.

Only what the tool-calling loop needs: one completion with tools, the usage, and errors that tell the
endpoint's problems (``EndpointError``: refused, unauthorized, no such model, context too long, tool calls
not enabled) apart from the env's failures and the model's mistakes, each naming the fix. Busy answers
(HTTP 429 and 5xx), timeouts and dropped connections mid-run are retried a few times first.

aiohttp rather than httpx: at a thousand requests in flight and more, httpx's CPU per request grows with what is in
flight, aiohttp's does not (bench/eval_client.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
from dataclasses import dataclass
from typing import Any, Final

from agentenv.client.settings import Shared
from agentenv.errors import AgentEnvError

__all__ = ["ChatClient", "Completion", "ContextTooLong", "Endpoint", "EndpointError", "ToolCall"]

RETRIES: Final = 5  # tries of a request the endpoint answered busy, timed out or dropped
POOL: Final = 1024  # the most connections open at once; more requests wait for one (an engine batches fewer anyway)
_BUSY: Final = frozenset({408, 429, 500, 502, 503, 504})
_CONTEXT = re.compile(
    r"context[ _-]length|maximum context|context window|max_model_len|too many tokens|prompt is too long|"
    r"input is too long|reduce the length",
    re.I,
)
_TOOLS_OFF = re.compile(r"tool[ _-]call[ _-]parser|auto-tool-choice|\"auto\" tool choice|tool choice", re.I)
_NO_MODEL = re.compile(r"model.*(does not exist|not found|not exist)|model_not_found|unknown model|no such model", re.I)


class EndpointError(AgentEnvError):
    """The model's endpoint failed the request: neither the env's failure nor the model's mistake.

    ``kind``: ``unreachable``, ``unauthorized``, ``no_model``, ``bad_url``, ``tool_calls_off``, ``context``,
    ``unavailable``, ``bad_request`` or ``bad_response``. The message names the fix.
    """

    def __init__(self, message: str, *, kind: str) -> None:
        self.kind = kind
        super().__init__(message)


class ContextTooLong(EndpointError):
    """The conversation no longer fits the model's context; the sample ends there (scored as it stands)."""


@dataclass(frozen=True)
class Endpoint:
    """Where the model is served and how to ask it.

    ``url``: the API's base URL as the ``openai`` client takes it (``http://host:8000/v1``).
    ``api_key_var``: the environment variable holding the API key (read when used; None: no key).
    ``temperature`` and ``max_tokens`` go into every request (``max_tokens`` None: the endpoint's limit).
    ``timeout``: seconds one completion may take.
    """

    url: str
    model: str
    api_key_var: str | None = None
    temperature: float = 1.0
    max_tokens: int | None = None
    timeout: float = 600.0

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^/\s]+", self.url):
            raise AgentEnvError(f"--llm-url {self.url!r} is not of the form http://host:port/v1; fix the URL")
        object.__setattr__(self, "url", self.url.rstrip("/"))

    def headers(self) -> dict[str, str]:
        """The Authorization header, when a key variable is named (refuses an unset one)."""
        if self.api_key_var is None:
            return {}
        key = os.environ.get(self.api_key_var)
        if not key:
            raise EndpointError(
                f"${self.api_key_var} is not set or empty, but the API key for {self.url} is read "
                f"from it: export {self.api_key_var}=<key>",
                kind="unauthorized",
            )
        return {"Authorization": f"Bearer {key}"}


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model wrote it: ``arguments`` is the raw JSON text (it may not parse)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    """One answer of the model: its text, its tool calls, the message as sent back, and the tokens used."""

    content: str
    tool_calls: list[ToolCall]
    message: dict[str, Any]
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class _Answer:
    """An HTTP answer, read whole: its status and body."""

    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _message_of(response: Any) -> str:
    """The error text of an answer: OpenAI's ``error.message``, vLLM's ``message``, FastAPI's ``detail``."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:300].strip()
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            return str(error.get("message") or error.get("code") or error)[:300]
        for key in ("message", "detail", "error"):
            if data.get(key):
                return str(data[key])[:300]
    return str(data)[:300]


class ChatClient:
    """Chat completions on one endpoint, from one event loop (one connection pool, shared by the workers).

    ``connections``: the most requests on the wire at once (the eval's ``--concurrency``), capped at ``POOL``;
    a request past it waits for a connection, however long (only the endpoint's own answer is timed).
    """

    def __init__(self, endpoint: Endpoint, *, connections: int = POOL) -> None:
        self.endpoint = endpoint
        self._headers = endpoint.headers()
        self._size = max(1, min(int(connections), POOL))
        self._trust_env = not Shared(endpoint.url).loopback  # a proxy is for remote endpoints only
        self._http: Any = None
        self._answered = False

    def _session(self) -> Any:
        """The connection pool, made on first use (aiohttp binds it to the running event loop)."""
        if self._http is None:
            import aiohttp

            self._http = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(
                    limit=self._size, limit_per_host=self._size, ssl=_tls(self.endpoint.url, self._trust_env)
                ),
                # no total and no pool wait: a request queued for a connection is not failed for waiting
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=self.endpoint.timeout),
                trust_env=self._trust_env,
            )
        return self._http

    async def _send(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> _Answer:
        import aiohttp

        # None would mean no timeout at all to aiohttp: leave the session's
        when = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(sock_connect=timeout, sock_read=timeout)}
        url = self.endpoint.url + path
        async with self._session().request(method, url, json=body, **when) as response:
            return _Answer(response.status, await response.read())

    async def aclose(self) -> None:
        """Close the connections."""
        if self._http is not None:
            await self._http.close()

    # -- errors -------------------------------------------------------------------------------------

    def _unreachable(self, exc: Exception) -> EndpointError:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return EndpointError(
            f"no OpenAI-compatible server answered at {self.endpoint.url} ({why}): start it "
            "(e.g. vllm serve MODEL --port 8000) or fix --llm-url",
            kind="unreachable",
        )

    def _refused(self, status: int, text: str, models: list[str] | None = None) -> EndpointError:
        url, model = self.endpoint.url, self.endpoint.model
        if status in (401, 403):
            fix = (
                f"set ${self.endpoint.api_key_var} to its API key"
                if self.endpoint.api_key_var
                else "pass --api-key-var NAME naming the variable that holds its API key"
            )
            return EndpointError(f"{url} refused the request (HTTP {status}: {text}): {fix}", kind="unauthorized")
        if _CONTEXT.search(text):
            return ContextTooLong(
                f"the conversation outgrew the model's context at {url} ({text}): raise the "
                "server's context length (vLLM: --max-model-len) or lower --max-turns / --max-tokens",
                kind="context",
            )
        if status == 404 and (models is not None or _NO_MODEL.search(text)):
            served = f"; it serves: {', '.join(models)}" if models else ""
            return EndpointError(f"{url} has no model {model!r}{served}: fix --model", kind="no_model")
        if status in (404, 405):
            return EndpointError(
                f"{url}/chat/completions answered HTTP {status}: give --llm-url the base URL of an "
                "OpenAI-compatible API (it usually ends in /v1)",
                kind="bad_url",
            )
        if _TOOLS_OFF.search(text):
            return EndpointError(
                f"{url} does not accept tool calls ({text}): start vLLM with "
                "--enable-auto-tool-choice --tool-call-parser NAME (the parser of the model's family)",
                kind="tool_calls_off",
            )
        if status in _BUSY:
            return EndpointError(
                f"{url} answered HTTP {status} {RETRIES} times ({text}): check the server's log, "
                "or lower --concurrency",
                kind="unavailable",
            )
        return EndpointError(
            f"{url} refused the request (HTTP {status}: {text}): check --model and the server's options",
            kind="bad_request",
        )

    # -- requests -----------------------------------------------------------------------------------

    async def check(self) -> None:
        """Fail early on an endpoint that cannot serve the run: nothing listening, a refused key, no such model.

        Reads ``GET /models``; a server without that route is not held against it.
        """
        import aiohttp

        try:
            response = await self._send("GET", "/models", timeout=30.0)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc) from None
        if response.status_code in (401, 403):
            raise self._refused(response.status_code, _message_of(response))
        if response.status_code != 200:
            return
        try:
            data = response.json().get("data")
            models = [str(m["id"]) for m in data]
        except (ValueError, AttributeError, KeyError, TypeError):
            return
        if models and self.endpoint.model not in models:
            raise self._refused(404, "model not found", models)

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Completion:
        """The model's next message for ``messages``, offered ``tools`` (OpenAI function tools)."""
        import aiohttp

        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": messages,
            "temperature": self.endpoint.temperature,
        }
        if tools:
            body["tools"] = tools
        if self.endpoint.max_tokens is not None:
            body["max_tokens"] = self.endpoint.max_tokens
        delay = 0.5
        for attempt in range(1, RETRIES + 1):
            last = attempt == RETRIES
            try:
                response = await self._send("POST", "/chat/completions", body)
            except TimeoutError:  # aiohttp's timeouts are TimeoutErrors: connecting, or waiting for the answer
                if last:
                    raise EndpointError(
                        f"{self.endpoint.url} did not answer within --request-timeout="
                        f"{self.endpoint.timeout:g} s, {RETRIES} times: raise it or lower --concurrency",
                        kind="unavailable",
                    ) from None
            except aiohttp.ClientError as exc:
                # refused before any answer: nothing is listening; after one, the server may be restarting: retried
                if last or (isinstance(exc, aiohttp.ClientConnectorError) and not self._answered):
                    raise self._unreachable(exc) from None
            else:
                if response.status_code == 200:
                    self._answered = True
                    return self._read(response)
                if response.status_code not in _BUSY or last:
                    raise self._refused(response.status_code, _message_of(response))
            await asyncio.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, response: Any) -> Completion:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = dict(choice["message"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise EndpointError(
                f"{self.endpoint.url}/chat/completions answered something that is not a chat "
                "completion: is --llm-url an OpenAI-compatible API?",
                kind="bad_response",
            ) from None
        calls = []
        for number, raw in enumerate(message.get("tool_calls") or []):
            function = raw.get("function") if isinstance(raw, dict) else None
            function = function if isinstance(function, dict) else {}
            arguments = function.get("arguments")
            calls.append(
                ToolCall(
                    id=str((raw.get("id") if isinstance(raw, dict) else None) or f"call_{number}"),
                    name=str(function.get("name") or ""),
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
        usage = data.get("usage") or {}
        return Completion(
            content=str(message.get("content") or ""),
            tool_calls=calls,
            message={k: v for k, v in message.items() if v is not None},
            finish_reason=str(choice.get("finish_reason") or ""),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )


def _tls(url: str, trust_env: bool) -> ssl.SSLContext | bool:
    """The certificates an https endpoint is checked against: certifi's, as httpx did; with ``trust_env``,
    ``$SSL_CERT_FILE`` or ``$SSL_CERT_DIR`` when set."""
    if not url.startswith("https:"):
        return True  # plain HTTP: no TLS to set up
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if trust_env and (cafile or capath):
        return ssl.create_default_context(cafile=cafile or None, capath=capath or None)
    import certifi

    return ssl.create_default_context(cafile=certifi.where())
