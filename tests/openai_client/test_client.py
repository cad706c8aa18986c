#!/usr/bin/env python3
"""Checks an OpenAI-compatible Ferry server with the official `openai` client.

Usage: test_client.py BASE_URL MODEL [--concurrency 16] [--long-prompt-words N]
                      [--api-key KEY] [--rate-limited-key KEY]

BASE_URL is the server root with the /v1 prefix, e.g. http://127.0.0.1:8000/v1.
Works against the mock (crates/openai/examples/mock_server.rs) and `ferry serve`.
Greedy decoding (temperature 0, fixed seed) is used wherever streamed and
non-streamed answers are compared, so a deterministic engine must agree with itself.
Against a gateway with keys: --api-key is the key used for every call (a wrong key
must then raise AuthenticationError), and --rate-limited-key a key with a small RPM
that must end in RateLimitError carrying a Retry-After header.
Exits non-zero on the first failed check.
"""

import argparse
import asyncio
import sys

import openai
from openai import AsyncOpenAI, OpenAI

GREEDY = {"temperature": 0, "seed": 1}


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok   {what}")


def check_usage(usage, max_tokens, what):
    check(usage is not None, f"{what}: usage present")
    check(usage.prompt_tokens > 0, f"{what}: prompt_tokens > 0 ({usage.prompt_tokens})")
    check(
        1 <= usage.completion_tokens <= max_tokens,
        f"{what}: 1 <= completion_tokens ({usage.completion_tokens}) <= {max_tokens}",
    )
    check(
        usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
        f"{what}: total_tokens = prompt + completion",
    )


def chat_messages(text):
    return [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": text},
    ]


def test_models(client, model):
    ids = [m.id for m in client.models.list().data]
    check(model in ids, f"/v1/models lists {model!r} (got {ids})")


def test_chat(client, model):
    msgs = chat_messages("Tell me about rivers.")
    full = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, **GREEDY)
    choice = full.choices[0]
    check(full.object == "chat.completion", "chat: object is chat.completion")
    check(choice.message.role == "assistant", "chat: role is assistant")
    check(isinstance(choice.message.content, str), "chat: content is text")
    check(choice.finish_reason in ("stop", "length"), f"chat: finish_reason {choice.finish_reason}")
    check_usage(full.usage, 8, "chat")

    stream = client.chat.completions.create(
        model=model,
        messages=msgs,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
    )
    text, finish, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    check(chunks >= 2, f"chat stream: {chunks} chunks")
    check(text == choice.message.content, "chat stream: text equals the non-streamed answer")
    check(finish == choice.finish_reason, "chat stream: same finish_reason")
    check_usage(usage, 8, "chat stream")
    check(usage == full.usage, "chat stream: usage equals the non-streamed usage")


def test_completions(client, model):
    prompt = "Once upon a time"
    full = client.completions.create(model=model, prompt=prompt, max_tokens=6, **GREEDY)
    check(full.object == "text_completion", "completions: object is text_completion")
    check(isinstance(full.choices[0].text, str), "completions: text present")
    check_usage(full.usage, 6, "completions")

    stream = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text or ""
    check(text == full.choices[0].text, "completions stream: text equals the non-streamed answer")
    check(usage == full.usage, "completions stream: usage equals the non-streamed usage")

    plain = client.completions.create(model=model, prompt=prompt, max_tokens=6, stream=True, **GREEDY)
    saw_usage = any(chunk.usage is not None for chunk in plain)
    check(not saw_usage, "completions stream without include_usage: no usage chunk")


async def one_stream(aclient, model, i, max_tokens):
    stream = await aclient.chat.completions.create(
        model=model,
        messages=chat_messages(f"Client {i}: name a boat."),
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        **GREEDY,
    )
    text, usage, finish = "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, usage, finish


def test_concurrent(base_url, client, model, n):
    max_tokens = 12

    async def run():
        async with AsyncOpenAI(base_url=base_url, api_key=client.api_key, max_retries=0, timeout=120) as aclient:
            return await asyncio.gather(*(one_stream(aclient, model, i, max_tokens) for i in range(n)))

    results = asyncio.run(run())
    check(len(results) == n, f"{n} concurrent streams all returned")
    for i, (text, usage, finish) in enumerate(results):
        check(finish in ("stop", "length"), f"stream {i}: finished ({finish})")
        check_usage(usage, max_tokens, f"stream {i}")
        # The prompt's token count must not depend on concurrency.
        alone = client.chat.completions.create(
            model=model, messages=chat_messages(f"Client {i}: name a boat."), max_tokens=1, **GREEDY
        )
        check(
            usage.prompt_tokens == alone.usage.prompt_tokens,
            f"stream {i}: prompt_tokens matches a lone request ({usage.prompt_tokens})",
        )


def expect_error(exc_type, what, fn, code=None):
    try:
        fn()
    except exc_type as e:
        body = e.body if isinstance(e.body, dict) else {}
        # openai unwraps {"error": {...}} into e.body
        err = body.get("error", body)
        check(bool(err.get("message")), f"{what}: raises {exc_type.__name__} with a message")
        if code is not None:
            check(err.get("code") == code, f"{what}: code {code!r} (got {err.get('code')!r})")
        return
    except openai.APIError as e:  # wrong class
        raise AssertionError(f"{what}: expected {exc_type.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"{what}: expected {exc_type.__name__}, the call succeeded")


def still_serving(client, model, after):
    r = client.chat.completions.create(model=model, messages=chat_messages("ping"), max_tokens=2)
    check(r.usage.completion_tokens >= 1, f"server still serves after {after}")


def test_errors(client, model, long_words):
    msgs = chat_messages("hello")
    expect_error(
        openai.BadRequestError,
        "max_tokens=0",
        lambda: client.chat.completions.create(model=model, messages=msgs, max_tokens=0),
    )
    still_serving(client, model, "max_tokens=0")
    expect_error(
        openai.BadRequestError,
        "max_tokens=-1 (completions)",
        lambda: client.completions.create(model=model, prompt="x", max_tokens=-1),
    )
    still_serving(client, model, "max_tokens=-1")
    expect_error(
        openai.BadRequestError,
        "n=2",
        lambda: client.chat.completions.create(model=model, messages=msgs, max_tokens=2, n=2),
    )
    expect_error(
        openai.BadRequestError,
        "temperature=3",
        lambda: client.chat.completions.create(model=model, messages=msgs, max_tokens=2, temperature=3),
    )
    still_serving(client, model, "n=2 and temperature=3")
    expect_error(
        openai.NotFoundError,
        "unknown model",
        lambda: client.chat.completions.create(model=model + "-does-not-exist", messages=msgs, max_tokens=2),
        code="model_not_found",
    )
    still_serving(client, model, "unknown model")
    long_text = "hello " * long_words
    expect_error(
        openai.BadRequestError,
        "prompt too long (chat)",
        lambda: client.chat.completions.create(
            model=model, messages=chat_messages(long_text), max_tokens=2
        ),
        code="context_length_exceeded",
    )
    expect_error(
        openai.BadRequestError,
        "prompt too long (completions, streaming)",
        lambda: list(client.completions.create(model=model, prompt=long_text, max_tokens=2, stream=True)),
        code="context_length_exceeded",
    )
    still_serving(client, model, "prompts too long")


def test_gateway_keys(base_url, model, api_key, limited_key):
    if api_key:
        bad = OpenAI(base_url=base_url, api_key=api_key + "-wrong", max_retries=0, timeout=30)
        expect_error(
            openai.AuthenticationError,
            "wrong API key",
            lambda: bad.chat.completions.create(model=model, messages=chat_messages("hi"), max_tokens=2),
            code="invalid_api_key",
        )
    if limited_key:
        lim = OpenAI(base_url=base_url, api_key=limited_key, max_retries=0, timeout=30)
        for i in range(1000):
            try:
                lim.chat.completions.create(model=model, messages=chat_messages(f"hi {i}"), max_tokens=2)
            except openai.RateLimitError as e:
                retry = e.response.headers.get("retry-after")
                check(retry is not None and int(retry) >= 1, f"rate limit: Retry-After {retry!r} after {i} calls")
                err = e.body.get("error", e.body) if isinstance(e.body, dict) else {}
                check(err.get("code") == "rate_limit_exceeded", "rate limit: code rate_limit_exceeded")
                break
        else:
            raise AssertionError("the rate-limited key was never limited")
        if api_key:
            ok = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
            still_serving(ok, model, "another key hit its rate limit")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base_url")
    ap.add_argument("model")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument(
        "--long-prompt-words",
        type=int,
        default=0,
        help="words in the too-long prompt (default: 2 x max_model_len from /v1/models, else 100000)",
    )
    ap.add_argument("--api-key", default="", help="key for every call (gateway with keys)")
    ap.add_argument("--rate-limited-key", default="", help="a key with a small RPM, to check 429")
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key=args.api_key or "unused", max_retries=0, timeout=120)
    long_words = args.long_prompt_words
    if long_words <= 0:
        info = next((m for m in client.models.list().data if m.id == args.model), None)
        ctx = getattr(info, "max_model_len", None) if info is not None else None
        long_words = 2 * int(ctx) if ctx else 100_000
    try:
        test_models(client, args.model)
        test_chat(client, args.model)
        test_completions(client, args.model)
        test_concurrent(args.base_url, client, args.model, args.concurrency)
        test_errors(client, args.model, long_words)
        test_gateway_keys(args.base_url, args.model, args.api_key, args.rate_limited_key)
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    print(f"all checks passed against {args.base_url} ({args.model}) with openai {openai.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
