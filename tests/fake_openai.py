"""A scripted OpenAI-compatible endpoint on 127.0.0.1 for tests: ``POST /v1/chat/completions`` plays back
replies from an iterator, one per request, and records every request it received.

A script that runs out answers HTTP 500 "script exhausted" and marks itself ``exhausted`` (it never
cycles). A step is a reply (``completion(...)`` or ``failure(...)``) or a callable that builds one from
the request body, so a reply can echo what the client sent (``propose(spec)`` reads the planning
request from the system prompt and proposes ``spec`` for it).

    with FakeOpenAI([propose("tp=1"), completion("done")]) as fake:
        env = {**os.environ, **fake.env()}           # for a subprocess
        fake.patch(monkeypatch)                      # or for this process
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Script", "completion", "failure", "propose", "request_args", "API_KEY"]

API_KEY = "sk-fake-eval-key"
"""The key the fake endpoint's clients are given."""

Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def completion(content: str | None = None, calls: list[tuple[str, dict[str, Any] | str]] | None = None,
               tokens: tuple[int, int] = (10, 5)) -> dict[str, Any]:
    """A 200 reply with one chat completion: text ``content`` and/or tool ``calls`` (name, arguments);
    ``tokens`` is the (prompt, completion) usage it reports."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}_{name}", "type": "function",
             "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
            for i, (name, args) in enumerate(calls)]
    body = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)}}
    return {"status": 200, "json": body}


def failure(status: int, message: str | None = None, **headers: str) -> dict[str, Any]:
    """An error reply with HTTP ``status`` and response ``headers`` (e.g. ``retry-after-ms``).

    Any step may also carry ``"sleep": seconds``, a delay before the reply (for client timeouts)."""
    return {"status": status, "json": {"error": {"message": message or f"scripted {status}", "type": "server_error"}},
            "headers": headers}


def request_args(body: dict[str, Any], marker: str = "Request JSON: ") -> dict[str, Any]:
    """The planning request's tool arguments, read from the ``marker`` line of the body's system message."""
    for message in body.get("messages", []):
        if message.get("role") == "system" and isinstance(message.get("content"), str):
            for line in message["content"].splitlines():
                if line.startswith(marker):
                    return dict(json.loads(line[len(marker):]))
    raise AssertionError("the request carries no planning request in its system message")


def propose(spec: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A step that calls ``propose_strategy`` with the request's own arguments and ``strategy=spec``."""
    def step(body: dict[str, Any]) -> dict[str, Any]:
        return completion(calls=[("propose_strategy", {**request_args(body), "strategy": spec})])

    return step


class Script:
    """Steps consumed once each, and the requests received (``path``, ``authorization``, ``body`` each)."""

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps: Iterator[Step] = iter(steps)
        self.requests: list[dict[str, Any]] = []
        self.exhausted = False
        self.lock = threading.Lock()

    def reply(self, body: dict[str, Any], path: str = "", authorization: str | None = None) -> dict[str, Any]:
        """The next step's reply to ``body``; 500 once the script has run out."""
        with self.lock:
            self.requests.append({"path": path, "authorization": authorization, "body": body})
            step = next(self.steps, None)
            if step is None:
                self.exhausted = True
                return failure(500, "script exhausted")
        return step(body) if callable(step) else step


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/").endswith("/chat/completions"):
            step = self.server.script.reply(body, self.path, self.headers.get("Authorization"))
        else:
            step = failure(404, f"no route {self.path}")
        time.sleep(step.get("sleep", 0))
        payload = json.dumps(step["json"]).encode()
        try:
            self.send_response(step["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in step.get("headers", {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (http.server's name)
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    script: Script

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-reply is part of the timeout tests, not an error


class FakeOpenAI:
    """The endpoint: a ThreadingHTTPServer on 127.0.0.1 and a free port, serving ``steps``."""

    def __init__(self, steps: Iterable[Step] = (), *, api_key: str = API_KEY, timeout_s: float = 10,
                 retries: int = 0) -> None:
        self.api_key, self.timeout_s, self.retries = api_key, timeout_s, retries
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.script = Script(steps)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def script(self) -> Script:
        """The script being played."""
        return self.server.script

    def load(self, steps: Iterable[Step]) -> Script:
        """Replace the script."""
        self.server.script = Script(steps)
        return self.server.script

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this endpoint (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def env(self) -> dict[str, str]:
        """Environment variables that point an OpenAI client (and shardplan's policy) here."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": self.api_key, "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost", "SHARDPLAN_OPENAI_TIMEOUT": f"{self.timeout_s:g}",
                "SHARDPLAN_OPENAI_RETRIES": str(self.retries)}

    def patch(self, monkeypatch: Any) -> None:
        """Set :meth:`env` in this process with pytest's ``monkeypatch`` and drop proxy settings."""
        for name, value in self.env().items():
            monkeypatch.setenv(name, value)
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.delenv(name, raising=False)

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
