"""Load test of `rlanything serve` on loopback: bursts of concurrent requests, malformed ones among
them, and clients that leave mid-stream; the server must answer each as it should, keep
answering afterwards, hold its memory, and stop cleanly on SIGTERM.

Each burst sends `--requests` requests at once (default 64), cycling through these kinds, each
with the status it must get:

| kind | request | expected |
|---|---|---|
| chat | 16–32 tokens, its own seed | 200 |
| stream | the same, `stream: true`, read to [DONE] | 200 |
| n3_logprobs | `n: 3`, `logprobs`, `top_logprobs: 2` | 200 |
| stop | `stop: ["}", "."]` | 200 |
| disconnect | `stream: true`, 200 tokens (`ignore_eos`); the client leaves after 2 lines | 200 |
| malformed_json | a body that is not JSON | 400 |
| unsupported | `best_of: 2` | 400 |
| overlong | a 1 MB prompt (about 770k tokens against the context) | 400 |
| unknown_model | a model the server does not serve | 404 |

Anything else (another status, a transport error, a 5xx) counts as an error. The server's
resident memory is sampled every 50 ms (the process and its children). The script is bounded:
every request has a timeout and the run stops after `--bursts` bursts.

    python benchmarks/serve_load.py --out benchmarks/results/serve-load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from common import PeakRss, save

from rlanything_core.models.loading import resolve_source
from rlanything_core.models.services import Service, free_port, serve_command

QUESTION = [{"role": "user", "content": "Is the mug in the cabinet? Answer yes or no."}]
KINDS = (
    ("chat", 200),
    ("stream", 200),
    ("chat", 200),
    ("n3_logprobs", 200),
    ("malformed_json", 400),
    ("disconnect", 200),
    ("chat", 200),
    ("stop", 200),
    ("unsupported", 400),
    ("stream", 200),
    ("overlong", 400),
    ("chat", 200),
    ("unknown_model", 404),
    ("disconnect", 200),
    ("chat", 200),
    ("stream", 200),
)
HUGE = "lorem ipsum dolor " * 55_000  # 990 kB


async def one(http: httpx.AsyncClient, url: str, kind: str, seed: int) -> dict[str, Any]:
    """Send one request of `kind`; its status, seconds and what went wrong if anything."""
    body: dict[str, Any] = {
        "model": "judge",
        "messages": QUESTION,
        "max_tokens": 16 + seed % 17,
        "seed": seed,
    }
    start = time.perf_counter()
    try:
        if kind in ("stream", "disconnect"):
            body["stream"] = True
            if kind == "disconnect":
                body.update(max_tokens=200, ignore_eos=True)
            async with http.stream("POST", f"{url}/chat/completions", json=body) as response:
                lines = 0
                async for line in response.aiter_lines():
                    lines += line.startswith("data: ")
                    if kind == "disconnect" and lines >= 2:
                        break  # leave mid-stream: the context manager closes the connection
                    if line == "data: [DONE]":
                        break
                status = response.status_code
        elif kind == "malformed_json":
            response = await http.post(
                f"{url}/chat/completions",
                content=b'{"model": "judge", "messages": [',
                headers={"content-type": "application/json"},
            )
            status = response.status_code
        else:
            if kind == "n3_logprobs":
                body.update(n=3, logprobs=True, top_logprobs=2)
            elif kind == "stop":
                body["stop"] = ["}", "."]
            elif kind == "unsupported":
                body["best_of"] = 2
            elif kind == "overlong":
                body["messages"] = [{"role": "user", "content": HUGE}]
            elif kind == "unknown_model":
                body["model"] = "nope"
            response = await http.post(f"{url}/chat/completions", json=body)
            status = response.status_code
            if status >= 400 and "error" not in response.json():
                return {"kind": kind, "status": status, "s": 0.0, "problem": "not OpenAI-shaped"}
    except (httpx.HTTPError, ValueError) as exc:
        return {"kind": kind, "status": None, "s": 0.0, "problem": f"{type(exc).__name__}: {exc}"}
    return {"kind": kind, "status": status, "s": time.perf_counter() - start, "problem": None}


async def burst(url: str, requests: int, first_seed: int) -> list[dict[str, Any]]:
    limits = httpx.Limits(max_connections=requests, max_keepalive_connections=requests)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        jobs = [one(http, url, KINDS[i % len(KINDS)][0], first_seed + i) for i in range(requests)]
        return list(await asyncio.gather(*jobs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-judge:0", help="model source to serve")
    parser.add_argument("--requests", type=int, default=64, help="concurrent requests a burst")
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--out", default="runs/bench/serve-load.json")
    args = parser.parse_args()
    expected = dict(KINDS)
    port = free_port()
    command = [*serve_command(resolve_source(args.model), port, name="judge", device="cpu")]
    log = Path(tempfile.mkdtemp(prefix="rlanything-serve-load-")) / "serve.log"
    service = Service(command, port=port, log_path=log)
    wall = time.perf_counter()
    service.start()
    assert service.process is not None
    url = f"{service.url.rstrip('/').removesuffix('/v1')}/v1"
    httpx.post(  # one answer before measuring: the first decode allocates
        f"{url}/chat/completions",
        json={"model": "judge", "messages": QUESTION, "max_tokens": 8, "seed": 0},
        timeout=120,
    ).raise_for_status()
    sampler = PeakRss(service.process.pid, interval=0.05)
    baseline = sampler.now()
    results, after, seconds = [], [], []
    try:
        with sampler:
            for b in range(args.bursts):
                start = time.perf_counter()
                results += asyncio.run(burst(url, args.requests, 1000 * (b + 1)))
                seconds.append(time.perf_counter() - start)
                time.sleep(0.5)  # let disconnected streams stop decoding
                after.append(sampler.now())
                print(f"burst {b + 1}/{args.bursts}: {seconds[-1]:.1f} s, rss {after[-1] >> 20} MB")
            health = httpx.get(f"{url.removesuffix('/v1')}/health", timeout=30).status_code
            last = httpx.post(
                f"{url}/chat/completions",
                json={"model": "judge", "messages": QUESTION, "max_tokens": 8, "seed": 1},
                timeout=120,
            )
            still_answering = health == 200 and last.status_code == 200
            exposed = httpx.get(f"{url.removesuffix('/v1')}/metrics", timeout=30).text
            counters = dict(line.split() for line in exposed.splitlines())
    finally:
        stop_start = time.perf_counter()
        os.killpg(service.process.pid, signal.SIGTERM)
        try:
            returncode: int | None = service.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            returncode = None
        shutdown_s = time.perf_counter() - stop_start
        service.stop(grace_s=5)
    by_kind: dict[str, dict[str, Any]] = {}
    for r in results:
        k = by_kind.setdefault(
            r["kind"], {"sent": 0, "expected_status": expected[r["kind"]], "as_expected": 0}
        )
        k["sent"] += 1
        k["as_expected"] += r["status"] == expected[r["kind"]] and r["problem"] is None
    errors = [r for r in results if r["status"] != expected[r["kind"]] or r["problem"]]
    ok = [r["s"] for r in results if r["status"] == 200 and r["kind"] != "disconnect"]
    save(
        args.out,
        {
            "benchmark": "serve-load",
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "model": args.model,
            "requests_per_burst": args.requests,
            "bursts": args.bursts,
            "requests": len(results),
            "errors": len(errors),
            "error_samples": errors[:5],
            "by_kind": by_kind,
            "burst_seconds": [round(s, 2) for s in seconds],
            "latency_s_200": {
                "median": round(statistics.median(ok), 3),
                "p95": round(sorted(ok)[int(0.95 * (len(ok) - 1))], 3),
            },
            "rss_mb": {
                "baseline": baseline >> 20,
                "peak": sampler.peak >> 20,
                "after_each_burst": [a >> 20 for a in after],
            },
            "still_answering": still_answering,
            "server_metrics": {k: float(v) for k, v in counters.items()},
            "wall_seconds": round(time.perf_counter() - wall, 1),
            "sigterm": {"seconds_to_exit": round(shutdown_s, 2), "returncode": returncode},
            "server_log_tail": log.read_text()[-600:],
        },
    )
    print(json.dumps({"requests": len(results), "errors": len(errors)}))


if __name__ == "__main__":
    main()
