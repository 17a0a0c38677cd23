"""`ruvllm serve` through OpenAI's official Python client (the `openai` package, as Python apps and LangChain call it).

Run by npm/test/serve.test.mjs against a server it started (an API key, --max-queue 12, --embed-model):
    .venv/bin/python tests/python/openai_client.py BASE_URL API_KEY MODEL SERVER_PID
Checks chat (whole and streamed, the same greedy answer and usage), embeddings, a stream the client closes early
(the server aborts that generation), a wrong key (AuthenticationError), and 20 clients at once for three rounds:
each answered or refused with 429 (RateLimitError), none lost, and the server's resident memory flat across the
rounds. A failed check raises; the last line printed is a JSON summary the Node test reports.
"""

import asyncio
import json
import math
import sys
import time
import urllib.request

import openai
from openai import AsyncOpenAI, OpenAI

# A question the model answers "The capital of France is Paris." with a wide margin after SmolLM2's default system
# turn (llama.cpp's two likeliest first tokens 0.28 apart). "What is the capital of France?" there is a near tie
# (0.15 against 0.13) that llama.cpp itself answers "L'Étoile, …".
FRANCE = [{"role": "user", "content": "Name the capital of France."}]
CLIENTS = 20
ROUNDS = 3
# Growth of the server's resident memory allowed from the end of the first round to the end of the last: what a
# leak of a few KiB per request would pass over three rounds of 20 is far below what one would show over hundreds.
FLAT_KIB = 16 * 1024


def health(base_url):
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=10) as r:
        return json.load(r)


def until(base_url, check, seconds=10.0):
    deadline = time.monotonic() + seconds
    while True:
        h = health(base_url)
        if check(h):
            return h
        if time.monotonic() > deadline:
            raise AssertionError(f"/health never got there: {h}")
        time.sleep(0.05)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


def chat(client, model):
    whole = client.chat.completions.create(model=model, messages=FRANCE, temperature=0, max_tokens=32)
    text = whole.choices[0].message.content
    assert "Paris" in text, text
    assert whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens > 0, whole.usage
    parts, usage = [], None
    stream = client.chat.completions.create(
        model=model, messages=FRANCE, temperature=0, max_tokens=32, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    assert "".join(parts) == text, (parts, text)
    assert usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage
    return text


def embeddings(client, model):
    out = client.embeddings.create(model=model, input=["The sky is blue.", "Paris is in France."])
    vectors = [d.embedding for d in out.data]
    assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) == 384, [len(v) for v in vectors]
    for v in vectors:
        assert abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3, "normalized"
    assert vectors[0] != vectors[1]
    assert out.usage.prompt_tokens > 0
    return len(vectors[0])


def closed_stream(client, model, base_url):
    before = until(base_url, lambda h: h["requests"] == 0)
    with client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Tell me a very long story."}], max_tokens=4000, stream=True
    ) as stream:
        for n, _ in enumerate(stream, 1):
            if n == 5:
                break
    # Leaving the block closes the response: the server sees the client go and stops that generation.
    after = until(base_url, lambda h: h["requests"] == 0 and h["aborted"] == before["aborted"] + 1)
    assert after["served"] == before["served"], "the closed stream was not served to its end"


def wrong_key(base_url, model):
    try:
        OpenAI(base_url=base_url, api_key="not-the-key", max_retries=0).chat.completions.create(
            model=model, messages=FRANCE, max_tokens=1
        )
    except openai.AuthenticationError as e:
        assert e.status_code == 401
        return
    raise AssertionError("a wrong key was accepted")


async def at_once(base_url, key, model):
    """CLIENTS requests at once: (answered, refused with 429). Any other outcome raises (a request lost)."""
    async with AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300) as client:

        async def one(i):
            try:
                r = await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": f"Say the number {i}."}], temperature=0, max_tokens=4
                )
            except openai.RateLimitError as e:
                assert e.status_code == 429
                return "429"
            assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens >= 1, r
            return "answered"

        outcomes = await asyncio.gather(*(one(i) for i in range(CLIENTS)))
    return outcomes.count("answered"), outcomes.count("429")


def main():
    base_url, key, model, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    summary = {"client": f"openai {openai.__version__} (Python)", "chat": chat(client, model)}
    summary["embedding_dim"] = embeddings(client, model)
    closed_stream(client, model, base_url)
    wrong_key(base_url, model)
    rounds = []
    for _ in range(ROUNDS):
        answered, refused = asyncio.run(at_once(base_url, key, model))
        assert answered + refused == CLIENTS and answered >= 1, (answered, refused)
        until(base_url, lambda h: h["requests"] == 0)
        rounds.append({"answered": answered, "429": refused, "rss_kib": rss_kib(pid)})
    growth = rounds[-1]["rss_kib"] - rounds[0]["rss_kib"]
    assert growth < FLAT_KIB, f"the server's memory grew by {growth} KiB over rounds {rounds}"
    summary["rounds"] = rounds
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
