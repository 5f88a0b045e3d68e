"""A real OpenAI-compatible HTTP server on loopback that serves scripted chat answers.

``FakeOpenAI(reply)`` listens on ``127.0.0.1:<free port>`` in a thread; ``reply(body)``
gets each request's JSON body and returns a ``Reply`` (status, JSON body or raw text, a
delay before answering). ``choice(...)`` builds one OpenAI choice. Every request body is
kept in ``requests``, so tests can check what the client sent (n, stop, messages).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # a dict is sent as JSON; a str is sent as it is (malformed answers)
    delay_s: float = 0.0


def choice(content: str | None, index: int = 0, finish_reason: str = "stop", **message: Any) -> dict[str, Any]:
    extra = {k: v for k, v in message.items() if k == "stop_reason"}
    msg = {"role": "assistant", "content": content, **{k: v for k, v in message.items() if k != "stop_reason"}}
    return {"index": index, "message": msg, "finish_reason": finish_reason, **extra}


def completion(*choices: dict[str, Any]) -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": "chat.completion", "model": "fake", "choices": list(choices)}


class FakeOpenAI:
    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": f"no route {self.path}"})
                    return
                answer = server.reply(body)
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                self._send(answer.status, answer.body)

            def _send(self, status: int, body: Any) -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
