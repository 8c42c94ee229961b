"""One generation interface, several engines: the rollout, the reward model's votes and tests, and
the environment model's rewrites all sample through `Engine.generate`.

- `HFEngine`: Hugging Face transformers in this process (the default).
- `OpenAIEngine`: any OpenAI-compatible chat-completions server: vLLM (`vllm serve`, started by
  `open_engine` through `rlanything_core.models.services`), `rlanything serve`, or a model served
  anywhere. Requests carry the
  per-sample seed and ask for sampled-token log-probs and token ids (vLLM's `return_token_ids`,
  0.10.2 and newer); a server that returns no token ids gets the prompt tokenized locally and the
  answer re-tokenized (marked in `Generation.finish_reason` as usual; log-probs then empty).
  Concurrency is bounded; transient errors (connection failures, time-outs, HTTP 429 and 5xx) are
  retried with exponential backoff, everything else fails at once with a message naming the fix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from transformers import PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from rlanything_core.base.generation import AnswerScore, Engine, Generation, Messages
from rlanything_core.models.config import EngineConfig, ModelConfig
from rlanything_core.models.constraints import JsonKeys
from rlanything_core.models.loading import load_model, load_tokenizer, resolve_source
from rlanything_core.models.modelling import choose_answers, encode_chat, generate
from rlanything_core.models.services import Service, free_port, vllm_command


class HFEngine:
    """A loaded transformers model in this process. `share_prefix=False` prefills every distinct
    prompt whole instead of a batch's shared prefix once, `lean_decoding=False` decodes with
    transformers' step instead of `decoding.LeanDecoder` (`modelling.generate`; benchmarks)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        share_prefix: bool = True,
        lean_decoding: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.share_prefix = share_prefix
        self.lean_decoding = lean_decoding
        self._json_keys: dict[tuple[str, ...], JsonKeys] = {}

    def generate(
        self,
        prompts: Sequence[Messages],
        seeds: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float,
        batch_size: int,
        on_batch: Callable[[int], None] | None = None,
        json_keys: Sequence[str] | None = None,
    ) -> list[Generation]:
        constraint = None
        if json_keys is not None:
            names = tuple(sorted(set(json_keys)))
            if names not in self._json_keys:  # decodes every token once: kept per key set
                self._json_keys[names] = JsonKeys(self.tokenizer, names)
            constraint = self._json_keys[names]
        return generate(
            self.model,
            self.tokenizer,
            prompts,
            seeds,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            batch_size=batch_size,
            on_batch=on_batch,
            share_prefix=self.share_prefix,
            constraint=constraint,
            lean_decoding=self.lean_decoding,
        )

    def choose(
        self,
        prompts: Sequence[Messages],
        answers: Sequence[Sequence[str]],
        seeds: Sequence[int],
        *,
        temperature: float,
        batch_size: int,
        score: AnswerScore = "sum",
    ) -> list[Generation]:
        return choose_answers(
            self.model,
            self.tokenizer,
            prompts,
            answers,
            seeds,
            temperature=temperature,
            batch_size=batch_size,
            score=score,
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids)))


class EngineError(RuntimeError):
    """A served model cannot be used: unreachable URL, unknown model name, bad request."""


_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}


class OpenAIEngine:
    """An OpenAI-compatible chat-completions endpoint.

    Args:
        url: the server's base URL, e.g. "http://127.0.0.1:8000" (with or without "/v1").
        model: the served model (or loaded adapter) name to request.
        tokenizer: the model's tokenizer, for decoding token ids and as a fallback tokenizer.
        concurrency: requests in flight at once.
        retries: attempts after the first for transient errors.
    """

    def __init__(
        self,
        url: str,
        model: str,
        tokenizer: PreTrainedTokenizerBase,
        *,
        concurrency: int = 8,
        retries: int = 4,
        timeout_s: float = 300.0,
        backoff_s: float = 0.5,
        api_key: str | None = None,
    ) -> None:
        base = url.rstrip("/")
        self.base = base if base.endswith("/v1") else f"{base}/v1"
        self.model = model
        self.tokenizer = tokenizer
        self.concurrency = concurrency
        self.retries = retries
        self.backoff_s = backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(timeout=timeout_s, headers=headers)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self.client.post(f"{self.base}{path}", json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if last:
                    raise EngineError(
                        f"cannot reach {self.base}{path} after {self.retries + 1} attempts "
                        f"({type(exc).__name__}: {exc}). Check the URL and that the server runs "
                        "(`rlanything serve --model PATH` or `vllm serve`)."
                    ) from exc
            else:
                if response.status_code < 400:
                    try:
                        data: dict[str, Any] = response.json()
                    except ValueError:  # vLLM answers adapter loading with plain text
                        data = {"text": response.text}
                    return data
                if response.status_code not in _TRANSIENT_STATUS or last:
                    raise self._http_error(response)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _http_error(self, response: httpx.Response) -> EngineError:
        detail = response.text[:300]
        try:  # OpenAI's {"error": {...}}, or vLLM's older flat {"message": ..., "code": ...}
            body = response.json()
            error = body.get("error", body) if isinstance(body, dict) else {}
            error = error if isinstance(error, dict) else {"message": str(error)}
            message = str(error.get("message", detail))[:300]
            code = error.get("code")
        except ValueError:
            message, code = detail, None
        unknown_model = code == "model_not_found" or (
            response.status_code in (400, 404) and "does not exist" in message
        )
        if unknown_model:
            served = self.served_models()
            return EngineError(
                f"{self.base} does not serve a model named {self.model!r} (HTTP "
                f"{response.status_code}: {message}). Served: {served}. Set the model name (or "
                "the adapter name) to one of them."
            )
        return EngineError(f"{self.base} answered HTTP {response.status_code}: {message}")

    def served_models(self) -> list[str]:
        """The model and adapter names the server lists at /v1/models ([] if it lists none)."""
        try:
            data = self.client.get(f"{self.base}/models").json()
        except (httpx.HTTPError, ValueError):
            return []
        return [str(m.get("id")) for m in data.get("data", [])]

    def _one(
        self,
        prompt: Messages,
        seed: int,
        max_new_tokens: int,
        temperature: float,
        json_keys: Sequence[str] | None = None,
    ) -> Generation:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(prompt),
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "seed": seed,
            "n": 1,
            "logprobs": True,
            "return_token_ids": True,
        }
        if json_keys is not None:
            # vLLM's structured outputs: the whole answer is one JSON object of these keys.
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": "fields",
                    "schema": {
                        "type": "object",
                        "properties": {k: {} for k in sorted(set(json_keys))},
                        "additionalProperties": False,
                    },
                },
            }
        data = self._post("/chat/completions", body)
        choice = data["choices"][0]
        content_text = choice["message"].get("content")
        # Model outputs are data: JSON may carry lone surrogates ("\ud800"), which no Parquet
        # file can hold; they become U+FFFD. Content that is not text counts as no answer.
        text = (
            content_text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            if isinstance(content_text, str)
            else ""
        )
        prompt_ids = data.get("prompt_token_ids") or encode_chat(self.tokenizer, prompt)
        token_ids = choice.get("token_ids")
        content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(t["logprob"]) for t in content]
        finish = "stop" if choice.get("finish_reason") == "stop" else "length"
        if token_ids is None:  # a server without token ids: re-tokenize the text
            token_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if finish == "stop" and self.tokenizer.eos_token_id is not None:
                token_ids.append(self.tokenizer.eos_token_id)
        if len(logprobs) != len(token_ids):
            logprobs = []
        return Generation(text, list(prompt_ids), list(token_ids), logprobs, finish)

    def generate(
        self,
        prompts: Sequence[Messages],
        seeds: Sequence[int],
        *,
        max_new_tokens: int,
        temperature: float,
        batch_size: int,
        on_batch: Callable[[int], None] | None = None,
        json_keys: Sequence[str] | None = None,
    ) -> list[Generation]:
        """One request per prompt, at most `concurrency` in flight (`batch_size` is the
        server's business). `json_keys` is sent as a JSON-schema `response_format`, which vLLM
        enforces on the whole answer (`rlanything serve` refuses it)."""
        if len(prompts) != len(seeds):
            raise ValueError(f"got {len(prompts)} prompts but {len(seeds)} seeds")

        def one(args: tuple[Messages, int]) -> Generation:
            out = self._one(args[0], args[1], max_new_tokens, temperature, json_keys)
            if on_batch is not None:
                on_batch(1)
            return out

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(one, zip(prompts, seeds, strict=True)))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(token_ids)))

    def load_adapter(self, name: str, path: str) -> None:
        """Serve the LoRA adapter at `path` under `name` (vLLM's runtime adapter loading; needs
        VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 there). A name already loaded is unloaded first: vLLM
        before 0.16 refuses to load a name twice."""
        if name in self.served_models():
            self._post("/unload_lora_adapter", {"lora_name": name})
        self._post("/load_lora_adapter", {"lora_name": name, "lora_path": path})
        self.model = name


# Servers started by `open_engine`, one per role, kept across stages and rounds of this process
# and stopped at exit: role → (service, the model path it serves).
_STARTED: dict[str, tuple[Service, str]] = {}


def _vllm_url(engine: EngineConfig, role: str, model_path: str, lora_rank: int) -> str:
    """The URL of the vLLM server for `role`, (re)starting it to serve `model_path`."""
    running = _STARTED.get(role)
    if running is not None and running[1] == model_path:
        return running[0].url
    if running is not None:  # a new full checkpoint: vLLM serves it after a restart
        running[0].stop()
    port = free_port()
    command = vllm_command(
        engine.vllm,
        model_path,
        port,
        served_name=engine.served_name or model_path,
        lora_rank=lora_rank,
        extra=engine.serve_args,
    )
    gpus = {} if engine.gpus is None else {"CUDA_VISIBLE_DEVICES": engine.gpus}
    service = Service(
        command, port=port, startup_timeout_s=engine.startup_timeout_s, env=gpus
    ).start()
    _STARTED[role] = (service, model_path)
    return service.url


def open_engine(model: ModelConfig, source: str, role: str, lora_rank: int = 0) -> Engine:
    """The engine `model.engine` asks for, sampling from the checkpoint or model `source`.

    With a server ("vllm", "openai"): a LoRA checkpoint is loaded into the server as adapter
    `<role>-lora` (vLLM's runtime adapter loading; the name is unloaded first when taken). A full
    checkpoint other than the configured model restarts a vLLM server started here; an external
    server ("openai", or "vllm" with a url) cannot take it, which is an error naming the fix.
    """
    engine = model.engine
    if engine.kind == "hf":
        return HFEngine(*load_model(source, device=model.device, dtype=model.dtype))
    path = resolve_source(source)
    adapter_cfg = Path(path) / "adapter_config.json"
    base = (
        resolve_source(json.loads(adapter_cfg.read_text())["base_model_name_or_path"])
        if adapter_cfg.is_file()
        else path
    )
    configured = resolve_source(model.source)
    served_base = configured if adapter_cfg.is_file() else base
    if engine.kind == "vllm" and engine.url is None:
        url = _vllm_url(engine, role, served_base, lora_rank)
        name = engine.served_name or served_base
    else:
        if not adapter_cfg.is_file() and base != configured:
            raise EngineError(
                f"the {role} server at {engine.url} serves {model.source!r} and cannot take the "
                f"full checkpoint {source}: train a LoRA adapter (update.lora_rank > 0), which is "
                "loaded into the server, or use engine.kind 'vllm' without a url (restarted "
                "with each checkpoint), or 'hf'."
            )
        assert engine.url is not None
        url, name = engine.url, engine.served_name or model.source
    client = OpenAIEngine(
        url,
        name,
        load_tokenizer(path if (Path(path) / "tokenizer_config.json").is_file() else base),
        concurrency=engine.concurrency,
        retries=engine.retries,
    )
    if adapter_cfg.is_file():
        client.load_adapter(f"{role}-lora", path)
    return client
