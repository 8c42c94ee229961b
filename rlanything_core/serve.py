"""`rlanything serve`: a checkpoint behind an OpenAI-compatible API, on the Hugging Face engine.

It serves a reward model or an environment model as its own service on a machine without vLLM,
and it speaks the subset of vLLM's API that rlanything's client uses, so the vLLM client path
(`engines.OpenAIEngine`, adapter reloads included) runs end to end without a GPU:

- `GET /health`, `GET /v1/models` (the base model and loaded adapters);
- `POST /v1/chat/completions`: non-streaming, n = 1; `seed`, `temperature`, `max_tokens`,
  `logprobs`, and vLLM's `return_token_ids` (prompt_token_ids on the response, token_ids on the
  choice);
- `POST /v1/load_lora_adapter` {lora_name, lora_path} and `POST /v1/unload_lora_adapter`
  {lora_name}, with vLLM's answers: 400 when the name is already loaded, 404 when it is unknown.
  A loaded adapter is served merged into its own copy of the base model (memory: one model per
  adapter; fine for the small models this server is for).

Requests that arrive together are decoded together: a worker thread collects them for up to
`batch_wait_ms` and calls `models.generate` once per (model, max_tokens, temperature). Every
sample has its own seeded generator, so an answer does not depend on what it was batched with.
Bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from rlanything_core.models import Generation, generate, load_model


class ChatMessage(BaseModel):
    role: str
    content: str


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int = Field(256, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    seed: int | None = None
    n: int = 1
    logprobs: bool = False
    return_token_ids: bool = False


class AdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    lora_name: str
    lora_path: str | None = None


@dataclass
class _Job:
    model: str
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float
    seed: int
    done: Future[Generation] = field(default_factory=Future)


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
    ) -> None:
        self.base_name = name or model_path
        self.device, self.dtype = device, dtype
        self.models: dict[str, Any] = {
            self.base_name: load_model(model_path, device=device, dtype=dtype)
        }
        self.batch_size = batch_size
        self.batch_wait_s = batch_wait_ms / 1000
        self.jobs: queue.Queue[_Job] = queue.Queue()
        self.lock = threading.Lock()  # guards self.models against adapter (un)loading
        threading.Thread(target=self._work, daemon=True, name="rlanything-serve").start()

    def submit(self, job: _Job) -> Generation:
        self.jobs.put(job)
        return job.done.result()

    def _work(self) -> None:
        while True:
            batch = [self.jobs.get()]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.batch_size:
                try:
                    batch.append(self.jobs.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            groups: dict[tuple[str, int, float], list[_Job]] = {}
            for job in batch:
                groups.setdefault((job.model, job.max_tokens, job.temperature), []).append(job)
            for (name, max_tokens, temperature), jobs in groups.items():
                try:
                    with self.lock:
                        model, tokenizer = self.models[name]
                    outs = generate(
                        model,
                        tokenizer,
                        [j.messages for j in jobs],
                        [j.seed for j in jobs],
                        max_new_tokens=max_tokens,
                        temperature=temperature,
                        batch_size=self.batch_size,
                    )
                except Exception as exc:  # handed to the waiting requests
                    for j in jobs:
                        j.done.set_exception(exc)
                    continue
                for j, out in zip(jobs, outs, strict=True):
                    j.done.set_result(out)

    def load_adapter(self, name: str, path: str) -> None:
        loaded = load_model(path, device=self.device, dtype=self.dtype)
        with self.lock:
            self.models[name] = loaded

    def unload_adapter(self, name: str) -> None:
        with self.lock:
            del self.models[name]


def create_app(server: ModelServer) -> FastAPI:
    app = FastAPI(title="rlanything serve")

    @app.get("/health")
    def health() -> PlainTextResponse:
        return PlainTextResponse("")

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
                }
                for n in names
            ],
        }

    @app.post("/v1/chat/completions", response_model=None)
    def chat(request: ChatRequest) -> dict[str, Any] | JSONResponse:
        if request.model not in server.models:
            return _error(404, f"The model `{request.model}` does not exist.")
        if request.n != 1:
            return _error(400, "only n = 1 is supported")
        job = _Job(
            request.model,
            [m.model_dump() for m in request.messages],
            request.max_tokens,
            request.temperature,
            request.seed if request.seed is not None else time.time_ns() % (1 << 63),
        )
        out = server.submit(job)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": out.text},
            "finish_reason": out.finish_reason,
        }
        if request.logprobs:
            choice["logprobs"] = {
                "content": [
                    {"token": str(t), "logprob": lp}
                    for t, lp in zip(out.token_ids, out.logprobs, strict=True)
                ]
            }
        body: dict[str, Any] = {
            "id": f"chatcmpl-{time.time_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(out.prompt_token_ids),
                "completion_tokens": len(out.token_ids),
                "total_tokens": len(out.prompt_token_ids) + len(out.token_ids),
            },
        }
        if request.return_token_ids:
            body["prompt_token_ids"] = out.prompt_token_ids
            choice["token_ids"] = out.token_ids
        return body

    @app.post("/v1/load_lora_adapter", response_model=None)
    def load(request: AdapterRequest) -> PlainTextResponse | JSONResponse:
        if request.lora_name in server.models:
            return _error(400, f"The lora adapter '{request.lora_name}' has already been loaded.")
        if not request.lora_path or not (Path(request.lora_path) / "adapter_config.json").is_file():
            return _error(404, f"No adapter found for {request.lora_path}")
        server.load_adapter(request.lora_name, request.lora_path)
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


def _error(status: int, message: str) -> JSONResponse:
    kind = "NotFoundError" if status == 404 else "BadRequestError"
    return JSONResponse(
        {"object": "error", "message": message, "type": kind, "code": status}, status_code=status
    )
