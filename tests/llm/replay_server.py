"""An OpenAI-compatible chat-completions server on localhost that replays scripted responses.

It lets the real `ChatOpenAI` client (HTTP, retries, response parsing) run in tests without a model:
each POST to /v1/chat/completions gets the next scripted reply, and every request body is kept.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def completion(content: str | None = None, tool: str | None = None, args: dict[str, Any] | None = None,
               prompt_tokens: int = 120, completion_tokens: int = 30, model: str = "replay-model") -> Reply:
    """A chat completion with text content, or with one call of `tool` with `args`."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool:
        message["tool_calls"] = [{"id": "call_0", "type": "function",
                                  "function": {"name": tool, "arguments": json.dumps(args)}}]
    return Reply(200, {
        "id": "chatcmpl-replay", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def error(status: int, message: str = "server busy") -> Reply:
    """An error status; `retry-after-ms` keeps the client's backoff short."""
    return Reply(status, {"error": {"message": message, "type": "server_error", "code": None}}, {"retry-after-ms": "10"})


class ReplayServer:
    """`with ReplayServer([...]) as server:` serves the replies in order at `server.url`."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append({"path": self.path, **body})
                reply = outer.replies.pop(0) if outer.replies else error(500, "the replay script is exhausted")
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ReplayServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def texts(self, n: int) -> str:
        """All message contents of request n, as one string."""
        return "\n".join(str(m.get("content") or "") for m in self.requests[n].get("messages", []))
