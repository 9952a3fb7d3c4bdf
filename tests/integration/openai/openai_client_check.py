#!/usr/bin/env python3
"""Drives treespec's OpenAI-compatible HTTP API with the official `openai` client.

Usage: openai_client_check.py BASE_URL [API_KEY] (e.g. http://127.0.0.1:8000/v1)
With API_KEY (a token of the coordinator's --auth-token-file) the checks run
with api_key=API_KEY, and a wrong key must raise openai.AuthenticationError (401).
Run by tests/integration/openai_http_test.cc inside a venv with `openai` from PyPI.
Exits non-zero with a message on the first failed check; prints "OK" at the end.
"""
import sys

import openai


def check(cond, message):
    if not cond:
        print("FAILED: " + message, file=sys.stderr)
        sys.exit(1)


def check_wrong_key_refused(base_url, api_key):
    wrong = openai.OpenAI(base_url=base_url, api_key=api_key + "-wrong", max_retries=0, timeout=60)
    for name, call in [
            ("models.list", lambda: wrong.models.list()),
            ("completions.create",
             lambda: wrong.completions.create(model="target", prompt="x", max_tokens=2)),
            ("chat.completions.create",
             lambda: wrong.chat.completions.create(
                 model="target", messages=[{"role": "user", "content": "x"}], max_tokens=2))]:
        try:
            call()
            check(False, "%s with a wrong api_key was accepted" % name)
        except openai.AuthenticationError as e:
            check(e.status_code == 401 and "invalid bearer token" in str(e),
                  "%s wrong-key error %r" % (name, e))
            check(api_key not in str(e), "%s error echoes the key" % name)


def main():
    base_url = sys.argv[1]
    api_key = sys.argv[2] if len(sys.argv) > 2 else "unused"
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
    if len(sys.argv) > 2:
        check_wrong_key_refused(base_url, api_key)

    models = client.models.list()
    model = models.data[0].id
    check(len(models.data) == 1 and model, "models.list: %r" % models)

    # Completion, whole.
    c = client.completions.create(model=model, prompt="Once upon a time", max_tokens=12,
                                  temperature=0, seed=3)
    check(c.object == "text_completion", "completion object %r" % c.object)
    check(len(c.choices) == 1 and len(c.choices[0].text) > 0, "completion text %r" % c.choices)
    check(c.choices[0].finish_reason in ("length", "stop"), "finish_reason %r" % c.choices[0].finish_reason)
    check(c.usage.completion_tokens > 0 and c.usage.total_tokens ==
          c.usage.prompt_tokens + c.usage.completion_tokens, "usage %r" % c.usage)
    spec = c.model_extra.get("speculation")
    check(spec is not None and "mean_accepted_length" in spec, "speculation extension %r" % spec)

    # Completion, streamed: the pieces add up to the whole greedy text.
    pieces = []
    for chunk in client.completions.create(model=model, prompt="Once upon a time", max_tokens=12,
                                           temperature=0, stream=True):
        pieces.extend(choice.text for choice in chunk.choices)
    check("".join(pieces) == c.choices[0].text,
          "streamed completion %r != whole %r" % ("".join(pieces), c.choices[0].text))

    # Chat, whole and streamed with usage.
    messages = [{"role": "system", "content": "You tell stories."},
                {"role": "user", "content": "Tell me about a cat."}]
    r = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=10,
                                       temperature=0)
    check(r.object == "chat.completion", "chat object %r" % r.object)
    check(r.choices[0].message.role == "assistant" and r.choices[0].message.content,
          "chat message %r" % r.choices[0].message)
    text, usage, roles = [], None, []
    stream = client.chat.completions.create(model=model, messages=messages, max_completion_tokens=10,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                text.append(choice.delta.content)
    check(roles == ["assistant"], "streamed roles %r" % roles)
    check("".join(text) == r.choices[0].message.content,
          "streamed chat %r != whole %r" % ("".join(text), r.choices[0].message.content))
    check(usage is not None and usage.completion_tokens == r.usage.completion_tokens,
          "streamed usage %r vs %r" % (usage, r.usage))

    # Bad requests raise the client's typed errors with our message.
    try:
        client.completions.create(model=model, prompt="x", max_tokens=4, n=2)
        check(False, "n=2 was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "'n' must be 1" in str(e), "n=2 error %r" % e)
    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=4)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError as e:
        check("no-such-model" in str(e), "unknown model error %r" % e)
    try:
        client.chat.completions.create(model=model, messages=[], max_tokens=4)
        check(False, "empty messages were accepted")
    except openai.BadRequestError as e:
        check("messages" in str(e), "empty messages error %r" % e)
    print("OK")


if __name__ == "__main__":
    main()
