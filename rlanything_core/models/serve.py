"""`rlanything serve`: a checkpoint behind an OpenAI-compatible API, on the Hugging Face engine.

It serves a reward model or an environment model as its own service on a machine without vLLM,
and it speaks the part of the OpenAI API (with vLLM's extensions) that clients such as the
`openai` package and rlanything's `engines.OpenAIEngine` use:

- `GET /health` (503 while shutting down), `GET /v1/models` (the base model and loaded adapters),
  `GET /metrics` (Prometheus text: tokens generated, answers, answers cut short because their
  client left, answers waiting);
- `POST /v1/chat/completions` with `model`, `messages` (content as a string or as text parts),
  `max_tokens` / `max_completion_tokens` (default 256, never past the context), `temperature`,
  `seed`, `n` (choice k samples with seed + k), `stop` (strings, cut from the answer),
  `stream` (server-sent events, one chunk per token; `stream_options.include_usage`),
  `logprobs` and `top_logprobs` (decoded token text, temperature-scaled log-probs), and vLLM's
  `return_token_ids` (prompt_token_ids on the response, token_ids on each choice) and
  `ignore_eos` (always `max_tokens` tokens: load tests). `top_p`,
  `frequency_penalty`, `presence_penalty` and `logit_bias` are accepted at their neutral values
  only; `user` is accepted and does not change the answer. Any other parameter is refused with a
  400 that names it: nothing is ignored silently;
- `POST /v1/load_lora_adapter` {lora_name, lora_path} and `POST /v1/unload_lora_adapter`
  {lora_name}, with vLLM's answers: 400 when the name is already loaded, 404 when it is unknown.
  A loaded adapter is served merged into its own copy of the base model (memory: one model per
  adapter; fine for the small models this server is for).

Every error is OpenAI's `{"error": {"message", "type", "param", "code"}}`. Bounds: a prompt plus
its completion must fit the model's context (400 `context_length_exceeded` before any work), at
most `max_queue` answers wait (503 `server_busy` beyond), request bodies are at most
`max_body_bytes` (413). SIGTERM stops accepting, lets the running batch finish for `grace_s`,
then answers what is left with 503 and exits.

Requests that arrive together are decoded together: a worker thread collects them for up to
`batch_wait_ms` and calls `modelling.generate` once per (model, max_tokens, temperature,
ignore_eos). Every sample has its own seeded generator, so an answer does not depend on what it
was batched with.
A streamed answer whose client disconnects stops decoding at its next token.
Bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from rlanything_core.base.generation import Generation
from rlanything_core.models.loading import load_model
from rlanything_core.models.modelling import encode_chat, generate

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 256
MAX_N = 16
MAX_SEED = 2**63 - 1 - MAX_N
"""The largest `seed`: choice k samples with seed + k, and torch's generators take seeds below
2**63."""
MAX_TOP_LOGPROBS = 20
MAX_STOPS = 16


class ServeError(Exception):
    """A request the server answers with an OpenAI-format error."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object (`type` as OpenAI names it for the status)."""
    kind = {
        401: "authentication_error",
        404: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, message, param=param, code=code), status_code=status)


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, content: Any) -> Any:
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind != "text":
                raise ValueError(
                    f"content parts of type {kind!r} are not supported: the served models read "
                    "text only; send {'type': 'text', 'text': ...} parts or a string"
                )
        return content

    def as_template_message(self) -> dict[str, str]:
        """The message as the chat template takes it: text parts joined, `developer` as
        `system` (OpenAI's newer name for it)."""
        text = (
            self.content
            if isinstance(self.content, str)
            else "".join(p.text for p in self.content or [])
        )
        return {"role": "system" if self.role == "developer" else self.role, "content": text}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    return_token_ids: bool = False
    ignore_eos: bool = False
    user: str | None = None
    # Accepted at their neutral values only: the sampler draws from the full distribution.
    top_p: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatRequest:
        neutral = {
            "top_p": (self.top_p, 1.0),
            "frequency_penalty": (self.frequency_penalty, 0.0),
            "presence_penalty": (self.presence_penalty, 0.0),
        }
        for name, (value, default) in neutral.items():
            if value != default:
                raise ValueError(
                    f"{name}={value} is not supported: the server samples from the full "
                    f"distribution with temperature only; omit {name} or send {default}"
                )
        if self.logit_bias:
            raise ValueError("logit_bias is not supported; omit it")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options needs stream: true")
        if (
            self.max_tokens is not None
            and self.max_completion_tokens is not None
            and self.max_tokens != self.max_completion_tokens
        ):
            raise ValueError("max_tokens and max_completion_tokens differ; send one of them")
        stops = self.stops()
        if len(stops) > MAX_STOPS or any(not s for s in stops):
            raise ValueError(f"stop takes 1 to {MAX_STOPS} non-empty strings")
        return self

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class AdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    lora_name: str
    lora_path: str | None = None


# (choice index, text delta, token id, log-prob, top alternatives): one streamed token.
TokenEvent = tuple[int, str, int, float, list[tuple[int, float]]]


class _ShuttingDown(Exception):
    """Raised inside the decoding loop when the shutdown grace period is over."""


@dataclass
class _Job:
    """One choice to decode, and what the worker tells its request while and after it does."""

    model: str
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool = False
    index: int = 0
    stops: list[str] = field(default_factory=list)
    top_logprobs: int = 0
    on_event: Callable[[TokenEvent], None] | None = None  # streaming: called from the worker
    cancelled: threading.Event = field(default_factory=threading.Event)
    done: Future[Generation] = field(default_factory=Future)
    ids: list[int] = field(default_factory=list)
    sent: str = ""  # text already streamed
    cut_text: str | None = None  # the answer up to the first stop string, once one appeared

    def push(
        self, tokenizer: Any, token: int, logprob: float, top: list[tuple[int, float]]
    ) -> bool:
        """Take one sampled token; True ends the answer (a stop string, or the client left)."""
        if self.cancelled.is_set():
            return True
        self.ids.append(token)
        if not self.stops and self.on_event is None:
            return False
        text = str(tokenizer.decode(self.ids, skip_special_tokens=True))
        cut = min((i for s in self.stops if (i := text.find(s)) >= 0), default=None)
        if cut is not None:
            self.cut_text = text[:cut]
            visible = self.cut_text
        else:
            visible = text[: _settled(text, self.stops)]
        if self.on_event is not None:
            delta = visible[len(self.sent) :] if visible.startswith(self.sent) else ""
            self.sent += delta
            self.on_event((self.index, delta, token, logprob, top))
        return cut is not None

    def text(self, out: Generation) -> str:
        """The answer's text: cut at the first stop string when one appeared."""
        return out.text if self.cut_text is None else self.cut_text


def _settled(text: str, stops: list[str]) -> int:
    """How much of `text` can be streamed: not a trailing incomplete character (U+FFFD) and not
    a tail that may still grow into a stop string."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, end), hold, -1):
            if text[:end].endswith(s[:k]):
                hold = k
                break
    return end - hold


class ModelServer:
    """The models behind the API and the batching worker."""

    def __init__(
        self,
        model_path: str,
        *,
        name: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 32,
        batch_wait_ms: float = 20.0,
        max_queue: int = 256,
        max_model_len: int | None = None,
        max_body_bytes: int = 8 << 20,
    ) -> None:
        self.base_name = name or model_path
        self.device, self.dtype = device, dtype
        self.models: dict[str, Any] = {
            self.base_name: load_model(model_path, device=device, dtype=dtype)
        }
        model, _ = self.models[self.base_name]
        self.max_model_len = max_model_len or int(
            getattr(model.config, "max_position_embeddings", 0) or 4096
        )
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.max_queue = max_queue
        self.max_body_bytes = max_body_bytes
        self.jobs: queue.Queue[_Job] = queue.Queue()
        self.lock = threading.Lock()  # guards self.models against adapter (un)loading
        self.submit_lock = threading.Lock()  # queue bound and shutdown decided together
        self.closing = False
        self.abort_at: float | None = None
        self._chars_per_token: dict[int, int] = {}
        self.counters = {"generated_tokens": 0, "answers": 0, "cancelled_answers": 0}
        threading.Thread(target=self._work, daemon=True, name="rlanything-serve").start()

    def chars_per_token(self, tokenizer: Any) -> int:
        """The longest token's spelling (byte-level BPE: bytes, SentencePiece: characters), so
        that a prompt of c characters is at least c / this many tokens."""
        key = id(tokenizer)
        if key not in self._chars_per_token:
            spelled = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
            self._chars_per_token[key] = max((len(t) for t in spelled if t), default=1)
        return self._chars_per_token[key]

    def loaded(self, name: str) -> tuple[Any, Any]:
        """(model, tokenizer) served as `name`, or a 404 `model_not_found`."""
        with self.lock:
            if name not in self.models:
                raise ServeError(
                    404,
                    f"The model `{name}` does not exist.",
                    param="model",
                    code="model_not_found",
                )
            return self.models[name]

    def submit(self, jobs: list[_Job]) -> None:
        """Queue a request's choices, or refuse them all: full queue or shutting down (503)."""
        with self.submit_lock:
            if self.closing:
                raise ServeError(503, "the server is shutting down", code="shutting_down")
            waiting = self.jobs.qsize()
            if waiting + len(jobs) > self.max_queue:
                raise ServeError(
                    503,
                    f"the server is busy: {waiting} answers are waiting (at most "
                    f"{self.max_queue}, `rlanything serve --max-queue`); retry later",
                    code="server_busy",
                )
            for job in jobs:
                self.jobs.put(job)

    def close(self, grace_s: float) -> None:
        """Refuse new requests, fail the waiting ones, and give the running batch `grace_s`."""
        with self.submit_lock:
            self.closing = True
            self.abort_at = time.monotonic() + grace_s
            while True:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    break
                job.done.set_exception(ServeError(503, "the server is shutting down"))

    def _work(self) -> None:
        while True:
            batch = [self.jobs.get()]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.batch_size:
                try:
                    batch.append(self.jobs.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            groups: dict[tuple[str, int, float, bool], list[_Job]] = {}
            for job in batch:
                if job.cancelled.is_set():
                    job.done.set_exception(ServeError(499, "the client went away"))
                    continue
                key = (job.model, job.max_tokens, job.temperature, job.ignore_eos)
                groups.setdefault(key, []).append(job)
            for (name, max_tokens, temperature, ignore_eos), jobs in groups.items():
                self._decode(name, max_tokens, temperature, ignore_eos, jobs)

    def _decode(
        self, name: str, max_tokens: int, temperature: float, ignore_eos: bool, jobs: list[_Job]
    ) -> None:
        try:
            model, tokenizer = self.loaded(name)

            def on_token(i: int, token: int, logprob: float, top: list[tuple[int, float]]) -> bool:
                if self.abort_at is not None and time.monotonic() > self.abort_at:
                    raise _ShuttingDown
                return jobs[i].push(tokenizer, token, logprob, top)

            outs = generate(
                model,
                tokenizer,
                [j.messages for j in jobs],
                [j.seed for j in jobs],
                max_new_tokens=max_tokens,
                temperature=temperature,
                batch_size=self.batch_size,
                on_token=on_token,
                top_logprobs=max(j.top_logprobs for j in jobs),
                ignore_eos=ignore_eos,
            )
        except _ShuttingDown:
            for j in jobs:
                j.done.set_exception(ServeError(503, "the server shut down during the answer"))
            return
        except Exception as exc:
            fresh = [j for j in jobs if not j.ids]
            if len(jobs) > 1 and fresh:
                # one request's failure must not fail the others batched with it: decode each
                # answer that has not started alone, so the error reaches only its own request
                for j in jobs:
                    if j.ids:
                        j.done.set_exception(exc)
                for j in fresh:
                    self._decode(name, max_tokens, temperature, ignore_eos, [j])
                return
            log.exception("decoding failed")  # handed to the waiting request(s)
            for j in jobs:
                j.done.set_exception(exc)
            return
        self.counters["generated_tokens"] += sum(len(out.token_ids) for out in outs)
        self.counters["answers"] += len(outs)
        self.counters["cancelled_answers"] += sum(j.cancelled.is_set() for j in jobs)
        for j, out in zip(jobs, outs, strict=True):
            j.done.set_result(out)

    def load_adapter(self, name: str, path: str) -> None:
        loaded = load_model(path, device=self.device, dtype=self.dtype)
        with self.lock:
            self.models[name] = loaded

    def unload_adapter(self, name: str) -> None:
        with self.lock:
            del self.models[name]


class BodyLimit:
    """Refuse request bodies over `limit` bytes (413), and POSTs that do not state their size
    (411), before the app reads them."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            length = headers.get(b"content-length")
            if length is None or not length.isdigit():
                response = _error(411, "send the request with a Content-Length header")
                return await response(scope, receive, send)
            if int(length) > self.limit:
                response = _error(
                    413,
                    f"the request body is {int(length)} bytes, over this server's limit of "
                    f"{self.limit} bytes",
                    code="request_too_large",
                )
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def _token_text(tokenizer: Any, token: int) -> str:
    return str(tokenizer.decode([token]))


def _logprob_entry(
    tokenizer: Any, token: int, logprob: float, top: list[tuple[int, float]], k: int
) -> dict[str, Any]:
    text = _token_text(tokenizer, token)
    return {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode("utf-8")),
        "top_logprobs": [
            {
                "token": (t := _token_text(tokenizer, i)),
                "logprob": lp,
                "bytes": list(t.encode("utf-8")),
            }
            for i, lp in top[:k]
        ],
    }


def create_app(server: ModelServer) -> FastAPI:
    app = FastAPI(title="rlanything serve")
    app.add_middleware(BodyLimit, limit=server.max_body_bytes)
    encoding = asyncio.Semaphore(4)  # prompts tokenized at once: bounds the memory it takes

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        # A message of our own (a failed check) says more than a union's wrong-type branches.
        first = next((e for e in errors if e.get("type") == "value_error"), errors[0])
        where = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(where) or None
        if first.get("type") == "extra_forbidden":
            message = (
                f"unsupported parameter {param!r}: rlanything serve does not implement it and "
                "does not ignore it; remove it"
            )
        elif first.get("type") == "json_invalid":
            message = f"the request body is not valid JSON: {first.get('msg')}"
            param = None
        else:
            text = str(first.get("msg")).removeprefix("Value error, ")
            message = f"{param}: {text}" if param else text
        return _error(400, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(ServeError)
    async def serve_error(_: Request, exc: ServeError) -> JSONResponse:
        return _error(exc.status, exc.message, param=exc.param, code=exc.code)

    @app.exception_handler(Exception)
    async def crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed")
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    @app.get("/health")
    def health() -> PlainTextResponse:
        return PlainTextResponse(
            "shutting down" if server.closing else "", 503 if server.closing else 200
        )

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        """Prometheus text format: counters since start, answers waiting now."""
        lines = [
            f"rlanything_serve_{name}_total {value}" for name, value in server.counters.items()
        ]
        lines.append(f"rlanything_serve_waiting_answers {server.jobs.qsize()}")
        return PlainTextResponse("\n".join(lines) + "\n")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        with server.lock:
            names = list(server.models)
        return {
            "object": "list",
            "data": [
                {
                    "id": n,
                    "object": "model",
                    "owned_by": "rlanything",
                    "parent": None if n == server.base_name else server.base_name,
                    "max_model_len": server.max_model_len,
                }
                for n in names
            ],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: ChatRequest) -> dict[str, Any] | StreamingResponse:
        _, tokenizer = server.loaded(request.model)
        messages = [m.as_template_message() for m in request.messages]
        for i, message in enumerate(messages):
            try:
                message["content"].encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ServeError(
                    400,
                    f"messages[{i}].content holds a character that is not valid Unicode text "
                    f"(a lone surrogate, {exc.object[exc.start]!r} at position {exc.start}); "
                    "send UTF-8 text",
                    param=f"messages.{i}.content",
                ) from exc
        # A prompt far past the context is refused without tokenizing it: tokenizing a megabyte
        # takes about a second and leaves the allocator hundreds of MB larger each time.
        at_least = sum(len(m["content"]) for m in messages) // server.chars_per_token(tokenizer)
        _max_tokens(request, at_least, server.max_model_len, exact=False)
        try:
            async with encoding:
                prompt_ids = await run_in_threadpool(encode_chat, tokenizer, messages)
        except Exception as exc:
            raise ServeError(
                400, f"the chat template cannot render these messages: {exc}", param="messages"
            ) from exc
        max_tokens = _max_tokens(request, len(prompt_ids), server.max_model_len)
        seed = request.seed if request.seed is not None else time.time_ns() % (1 << 62)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[TokenEvent | int] = asyncio.Queue()

        def on_event(event: TokenEvent) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        jobs = [
            _Job(
                request.model,
                messages,
                max_tokens,
                request.temperature,
                seed + k,
                ignore_eos=request.ignore_eos,
                index=k,
                stops=request.stops(),
                top_logprobs=request.top_logprobs or 0,
                on_event=on_event if request.stream else None,
            )
            for k in range(request.n)
        ]
        server.submit(jobs)
        if request.stream:
            for job in jobs:
                job.done.add_done_callback(functools.partial(_announce, loop, events, job.index))
            return StreamingResponse(
                _stream(request, jobs, events, tokenizer, len(prompt_ids)),
                media_type="text/event-stream",
            )
        try:
            outs = await asyncio.gather(*(asyncio.wrap_future(j.done) for j in jobs))
        finally:
            for job in jobs:
                job.cancelled.set()  # the client left: the remaining choices stop decoding
        choices = []
        for job, out in zip(jobs, outs, strict=True):
            choice: dict[str, Any] = {
                "index": job.index,
                "message": {"role": "assistant", "content": job.text(out)},
                "logprobs": None,
                "finish_reason": out.finish_reason,
            }
            if request.logprobs:
                tops = out.top_logprobs or [[] for _ in out.token_ids]
                choice["logprobs"] = {
                    "content": [
                        _logprob_entry(tokenizer, t, lp, top, request.top_logprobs or 0)
                        for t, lp, top in zip(out.token_ids, out.logprobs, tops, strict=True)
                    ]
                }
            if request.return_token_ids:
                choice["token_ids"] = out.token_ids
            choices.append(choice)
        completion = sum(len(out.token_ids) for out in outs)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": completion,
                "total_tokens": len(prompt_ids) + completion,
            },
        }
        if request.return_token_ids:
            body["prompt_token_ids"] = prompt_ids
        return body

    @app.post("/v1/load_lora_adapter", response_model=None)
    def load(request: AdapterRequest) -> PlainTextResponse | JSONResponse:
        if request.lora_name in server.models:
            return _error(400, f"The lora adapter '{request.lora_name}' has already been loaded.")
        if not request.lora_path or not (Path(request.lora_path) / "adapter_config.json").is_file():
            return _error(404, f"No adapter found for {request.lora_path}", param="lora_path")
        try:
            server.load_adapter(request.lora_name, request.lora_path)
        except Exception as exc:
            return _error(
                400,
                f"the adapter at {request.lora_path} cannot be loaded ({type(exc).__name__}: "
                f"{exc}); its adapter_config.json must name a base_model_name_or_path that "
                "this machine can load",
                param="lora_path",
            )
        return PlainTextResponse(f"Success: LoRA adapter '{request.lora_name}' added successfully.")

    @app.post("/v1/unload_lora_adapter", response_model=None)
    def unload(request: AdapterRequest) -> PlainTextResponse | JSONResponse:
        if request.lora_name not in server.models or request.lora_name == server.base_name:
            return _error(404, f"The lora adapter '{request.lora_name}' cannot be found.")
        server.unload_adapter(request.lora_name)
        return PlainTextResponse(
            f"Success: LoRA adapter '{request.lora_name}' removed successfully."
        )

    return app


def _announce(
    loop: asyncio.AbstractEventLoop,
    events: asyncio.Queue[TokenEvent | int],
    index: int,
    _: Future[Generation],
) -> None:
    """Tell the streaming response (from the worker thread) that choice `index` is done."""
    loop.call_soon_threadsafe(events.put_nowait, index)


def _max_tokens(
    request: ChatRequest, prompt_tokens: int, context: int, *, exact: bool = True
) -> int:
    """The completion budget: as asked (default 256, shortened to the context when not asked),
    or a 400 that states the context when prompt and completion do not fit. `exact=False`:
    `prompt_tokens` is a lower bound (the prompt is not tokenized yet)."""
    asked = request.max_completion_tokens or request.max_tokens
    room = context - prompt_tokens
    wanted = asked if asked is not None else min(DEFAULT_MAX_TOKENS, room)
    if wanted < 1 or prompt_tokens + wanted > context:
        more = "" if exact else "at least "
        raise ServeError(
            400,
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{more}{prompt_tokens + max(wanted, 1)} tokens ({more}{prompt_tokens} in the "
            f"messages, {max(wanted, 1)} in the completion). Please reduce the length of the "
            "messages or completion.",
            param="messages",
            code="context_length_exceeded",
        )
    return wanted


async def _stream(
    request: ChatRequest,
    jobs: list[_Job],
    events: asyncio.Queue[TokenEvent | int],
    tokenizer: Any,
    prompt_tokens: int,
) -> AsyncIterator[str]:
    """Server-sent chat.completion.chunk events: a role chunk per choice, a chunk per token, a
    last chunk per choice with its finish reason and the text held back for stop strings, the
    usage when asked, then [DONE]. An error after the first chunk is sent as an error event."""
    head = {
        "id": f"chatcmpl-{time.time_ns()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model,
    }

    def chunk(index: int, delta: dict[str, Any], **extra: Any) -> str:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        return f"data: {json.dumps({**head, 'choices': [{**choice, **extra}]})}\n\n"

    k = request.top_logprobs or 0
    open_choices = {j.index for j in jobs}
    completion = 0
    try:
        for job in jobs:
            yield chunk(job.index, {"role": "assistant", "content": ""})
        while open_choices:
            event = await events.get()
            if isinstance(event, int):  # choice `event` is decoded (or failed)
                job = jobs[event]
                open_choices.discard(event)
                try:
                    out = job.done.result()
                except ServeError as exc:
                    body = error_body(exc.status, exc.message, code=exc.code)
                    yield f"data: {json.dumps(body)}\n\n"
                    return
                text = job.text(out)
                rest = text[len(job.sent) :] if text.startswith(job.sent) else ""
                completion += len(out.token_ids)
                yield chunk(
                    job.index, {"content": rest} if rest else {}, finish_reason=out.finish_reason
                )
                continue
            index, delta, token, logprob, top = event
            extra = (
                {"logprobs": {"content": [_logprob_entry(tokenizer, token, logprob, top, k)]}}
                if request.logprobs
                else {}
            )
            yield chunk(index, {"content": delta}, **extra)
        if request.stream_options is not None and request.stream_options.include_usage:
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            }
            yield f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        for job in jobs:
            job.cancelled.set()  # a client that left mid-stream stops its decoding
