"""`rlanything serve` driven by the official `openai` client, as a user's code would drive it:
the same answers as the in-process engine, streaming, stop strings, n, top log-probs, content
parts, OpenAI-format errors for every bad request, a bounded queue and a graceful SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rlanything_core.models.engines import HFEngine
from rlanything_core.models.loading import load_model
from rlanything_core.models.services import Service, free_port, serve_command

QUESTION = [{"role": "user", "content": "Is the mug in the cabinet? Answer yes or no."}]


def _v1(service: Service) -> str:
    url = service.url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


@pytest.fixture(scope="module")
def client(served: Service) -> openai.OpenAI:
    return openai.OpenAI(base_url=_v1(served), api_key="none", max_retries=0, timeout=120)


def _ask(client: openai.OpenAI, **kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "model": "judge",
        "messages": QUESTION,
        "seed": 7,
        "max_tokens": 24,
        "temperature": 1.0,
    }
    return client.chat.completions.create(**{**args, **kwargs})


def test_answers_equal_the_in_process_engine_also_from_text_parts(
    client: openai.OpenAI, base: str
) -> None:
    model, tokenizer = load_model(base, device="cpu")
    local = HFEngine(model, tokenizer).generate(
        [QUESTION], [7], max_new_tokens=24, temperature=1.0, batch_size=1
    )[0]
    served = _ask(client, extra_body={"return_token_ids": True})
    assert served.choices[0].message.content == local.text
    assert served.choices[0].model_extra["token_ids"] == local.token_ids
    assert served.usage.completion_tokens == len(local.token_ids)
    parts = [{"role": "user", "content": [{"type": "text", "text": QUESTION[0]["content"]}]}]
    assert _ask(client, messages=parts).choices[0].message.content == local.text


def test_stream_sends_the_same_answer_token_by_token(client: openai.OpenAI) -> None:
    whole = _ask(client)
    chunks = list(_ask(client, stream=True, stream_options={"include_usage": True}))
    content = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(content) == whole.choices[0].message.content
    # one chunk per sampled token that is not the end token, plus the role and finish chunks
    token_chunks = whole.usage.completion_tokens - (whole.choices[0].finish_reason == "stop")
    assert len(content) == token_chunks + 2
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finish == [whole.choices[0].finish_reason]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_stop_cuts_the_answer_before_the_stop_string_and_ends_decoding(
    client: openai.OpenAI,
) -> None:
    whole = _ask(client, max_tokens=40)
    text = whole.choices[0].message.content
    assert len(text) >= 5, text
    middle = len(text) // 2
    stop = text[middle : middle + 2]
    cut = text.index(stop)
    stopped = _ask(client, max_tokens=40, stop=[stop, "never appears \x00"])
    assert stopped.choices[0].message.content == text[:cut]
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < whole.usage.completion_tokens
    streamed = list(_ask(client, max_tokens=40, stop=stop, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == text[:cut]


def test_n_choices_are_the_answers_to_consecutive_seeds_and_top_logprobs_are_text(
    client: openai.OpenAI, base: str
) -> None:
    _, tokenizer = load_model(base, device="cpu")
    many = _ask(client, n=3, logprobs=True, top_logprobs=3)
    assert [c.index for c in many.choices] == [0, 1, 2]
    for k, choice in enumerate(many.choices):
        assert choice.message.content == _ask(client, seed=7 + k).choices[0].message.content
        entries = choice.logprobs.content
        assert len(entries) >= 1
        for entry in entries:
            tops = [t.logprob for t in entry.top_logprobs]
            assert len(tops) == 3 and tops == sorted(tops, reverse=True)
            assert entry.logprob <= tops[0] + 1e-6
            assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    ids = _ask(client, extra_body={"return_token_ids": True}, logprobs=True)
    tokens = [e.token for e in ids.choices[0].logprobs.content]
    assert tokens == [tokenizer.decode([t]) for t in ids.choices[0].model_extra["token_ids"]]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"extra_body": {"best_of": 2}}, "unsupported parameter 'best_of'"),
        ({"top_p": 0.5}, "top_p=0.5 is not supported"),
        ({"temperature": 5.0}, "temperature"),
        ({"top_logprobs": 2}, "top_logprobs needs logprobs"),
        ({"stop": [""]}, "non-empty strings"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "content parts of type 'image_url' are not supported",
        ),
        ({"messages": []}, "messages"),
        ({"seed": 2**64}, "seed: Input should be less than or equal to"),
        ({"seed": -1}, "seed: Input should be greater than or equal to 0"),
        ({"max_tokens": 4096}, "maximum context length is 4096 tokens"),
    ],
)
def test_bad_requests_get_a_400_that_names_the_problem(
    client: openai.OpenAI, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=match) as caught:
        _ask(client, **kwargs)
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"


def test_a_lone_surrogate_gets_a_400_in_plain_words(served: Service) -> None:
    """JSON may escape half of a surrogate pair ("\\ud800"): text no tokenizer can encode."""
    body = '{"model": "judge", "messages": [{"role": "user", "content": "a \\ud800 b"}]}'
    answer = httpx.post(
        f"{_v1(served)}/chat/completions",
        content=body.encode(),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "messages.0.content"
    assert "holds a character that is not valid Unicode text" in error["message"]


def test_a_bad_request_sent_beside_valid_ones_fails_alone(served: Service) -> None:
    """A seed past torch's range, sent among 19 concurrent valid requests that the server
    batches together: it gets a 400 naming `seed`, and every valid one its answer."""
    url = f"{_v1(served)}/chat/completions"
    body = {"model": "judge", "messages": QUESTION, "max_tokens": 8, "temperature": 1.0}
    results: dict[int, httpx.Response] = {}

    def send(i: int) -> None:
        seed = 18446744073709551616 if i == 0 else i
        results[i] = httpx.post(url, json={**body, "seed": seed}, timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0].status_code == 400
    assert results[0].json()["error"]["param"] == "seed"
    assert [results[i].status_code for i in range(1, 20)] == [200] * 19


def test_a_failure_decoding_one_answer_fails_that_request_alone(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six answers batched together, one of which the model cannot decode: the batch fails, so
    each answer is decoded again alone; the failing one gets its error, the other five their
    answers, each the answer it gets in a batch without the failing one."""
    from rlanything_core.models import serve

    real = serve.generate
    batches: list[int] = []

    def generate(model: Any, tokenizer: Any, messages: list[Any], *args: Any, **kw: Any) -> Any:
        batches.append(len(messages))
        if any("POISON" in m[-1]["content"] for m in messages):
            raise RuntimeError("this answer cannot be decoded")
        return real(model, tokenizer, messages, *args, **kw)

    monkeypatch.setattr(serve, "generate", generate)
    server = serve.ModelServer(base, name="judge", device="cpu", batch_wait_ms=500)

    def jobs(poisoned: bool) -> list[Any]:
        found = [
            serve._Job("judge", QUESTION, max_tokens=8, temperature=1.0, seed=i) for i in range(5)
        ]
        if poisoned:
            bad = [{"role": "user", "content": "POISON"}]
            found.insert(2, serve._Job("judge", bad, max_tokens=8, temperature=1.0, seed=9))
        return found

    clean = jobs(poisoned=False)
    server.submit(clean)
    expected = [j.done.result(timeout=120).token_ids for j in clean]
    batches.clear()
    mixed = jobs(poisoned=True)
    server.submit(mixed)
    with pytest.raises(RuntimeError, match="cannot be decoded"):
        mixed[2].done.result(timeout=120)
    answers = [j.done.result(timeout=120).token_ids for k, j in enumerate(mixed) if k != 2]
    assert batches == [6, 1, 1, 1, 1, 1, 1]  # the batch, then each answer alone
    assert all(len(a) > 0 for a in answers)
    assert answers == expected


def test_a_megabyte_prompt_is_refused_at_once_and_the_server_keeps_answering(
    client: openai.OpenAI,
) -> None:
    huge = [{"role": "user", "content": "lorem ipsum dolor " * 55_000}]  # 1 MB, 770k tokens
    start = time.monotonic()
    with pytest.raises(openai.BadRequestError, match="maximum context length is 4096") as caught:
        _ask(client, messages=huge)
    assert time.monotonic() - start < 30
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "context_length_exceeded"
    assert _ask(client).choices[0].message.content is not None


def test_raw_http_errors_are_openai_shaped(served: Service, base: str, tmp_path: Path) -> None:
    url = _v1(served)
    with httpx.Client(timeout=60) as http:
        bad_json = http.post(
            f"{url}/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert bad_json.status_code == 400
        assert "not valid JSON" in bad_json.json()["error"]["message"]
        assert http.get(f"{url}/nowhere").json()["error"]["type"] == "invalid_request_error"
        unknown = http.post(f"{url}/chat/completions", json={"model": "nope", "messages": QUESTION})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "model_not_found"
        big = http.post(
            f"{url}/chat/completions",
            content=b" " * (9 << 20),
            headers={"content-type": "application/json"},
        )
        assert (
            big.status_code == 413 and "over this server's limit" in big.json()["error"]["message"]
        )
        # An adapter whose config names no base model: a JSON 400, and the server serves on.
        (tmp_path / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4}')
        adapter = http.post(
            f"{url}/load_lora_adapter", json={"lora_name": "broken", "lora_path": str(tmp_path)}
        )
        assert adapter.status_code == 400, adapter.text
        assert "cannot be loaded" in adapter.json()["error"]["message"]
        assert "broken" not in [m["id"] for m in http.get(f"{url}/models").json()["data"]]
        answer = http.post(
            f"{url}/chat/completions",
            json={"model": "judge", "messages": QUESTION, "max_tokens": 4, "seed": 1},
        )
        assert answer.status_code == 200


def _metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url.removesuffix('/v1')}/metrics", timeout=30).text
    return {name: float(value) for name, value in (line.split() for line in text.splitlines())}


def test_a_client_that_leaves_mid_stream_stops_its_decoding_and_not_the_server(
    served: Service,
) -> None:
    url = _v1(served)
    before = _metrics(url)
    body = {
        "model": "judge",
        "messages": QUESTION,
        "max_tokens": 4000,
        "ignore_eos": True,
        "stream": True,
        "seed": 3,
    }
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", f"{url}/chat/completions", json=body) as response,
    ):
        lines = response.iter_lines()
        first = [next(lines) for _ in range(3)]
        assert all(line.startswith("data: ") for line in first if line)
    deadline = time.monotonic() + 60
    while (now := _metrics(url))["rlanything_serve_answers_total"] == before[
        "rlanything_serve_answers_total"
    ]:
        assert time.monotonic() < deadline, "the abandoned answer never ended"
        time.sleep(0.1)
    assert now["rlanything_serve_cancelled_answers_total"] == (
        before["rlanything_serve_cancelled_answers_total"] + 1
    )
    # It stopped long before its 4000 tokens.
    generated = now["rlanything_serve_generated_tokens_total"]
    assert generated - before["rlanything_serve_generated_tokens_total"] < 2000
    answer = httpx.post(
        f"{url}/chat/completions",
        json={"model": "judge", "messages": QUESTION, "max_tokens": 4, "seed": 1},
        timeout=60,
    )
    assert answer.status_code == 200


def test_a_full_queue_answers_503_and_sigterm_stops_a_busy_server(
    base: str, tmp_path: Path
) -> None:
    port = free_port()
    command = [
        *serve_command(base, port, name="judge", device="cpu"),
        *("--batch-size", "1", "--max-queue", "2", "--grace", "1"),
    ]
    service = Service(command, port=port, log_path=tmp_path / "serve.log")
    service.start()
    try:
        client = openai.OpenAI(base_url=_v1(service), api_key="none", max_retries=0, timeout=120)
        results: list[Any] = [None] * 6

        def ask(i: int) -> None:
            try:
                results[i] = _ask(client, max_tokens=4000, seed=i, extra_body={"ignore_eos": True})
            except openai.APIStatusError as exc:
                results[i] = exc

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
            time.sleep(0.2)
        busy = [r for r in results if isinstance(r, openai.APIStatusError)]
        # One answer decodes, two wait, the other three are refused at once.
        assert len(busy) >= 3, results
        assert all(r.status_code == 503 and "busy" in r.message for r in busy)
        assert service.process is not None
        pid = service.process.pid
        start = time.monotonic()
        os.killpg(pid, signal.SIGTERM)
        returncode = service.process.wait(timeout=30)
        assert time.monotonic() - start < 15
        assert returncode == 0
        for t in threads:
            t.join(timeout=30)
        # The decoding answer and the waiting ones were told why they ended.
        ended = [r for r in results if isinstance(r, openai.APIStatusError) and r not in busy]
        assert ended and all(r.status_code == 503 for r in ended)
        assert "shutting down" in (tmp_path / "serve.log").read_text()
    finally:
        service.stop(grace_s=5)
