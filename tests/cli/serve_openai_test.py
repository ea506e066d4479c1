#!/usr/bin/env python3
"""`infer-bench serve` through the `openai` package's client (exit 77, skipped, when it is not
installed: scripts/test-venv makes .venv-test with it; run from another interpreter, the test
restarts itself in .venv-test).

serve_openai_test.py BINARY SOURCE_DIR

Completions and chats, streamed and not; stop; response_format with a JSON Schema; logprobs; n
choices; the client's errors; tool calls with the book's tool-call schema; SmolLM2's chat template
against transformers (when scripts/get-models fetched the GGUF).
"""
import json
import os
import sys

from serve_http import SKIP, Server, check, fail


def with_openai(binary, src):
    try:
        import openai
    except ImportError:
        venv_python = os.path.join(src, ".venv-test", "bin", "python")
        if os.path.exists(venv_python) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(src, ".venv-test")):
            os.execv(venv_python, [venv_python, os.path.abspath(__file__), *sys.argv[1:]])
        print("serve_openai_test: the openai package is not installed (scripts/test-venv makes .venv-test): skipped")
        sys.exit(SKIP)
    s = Server(binary, os.path.join(src, "data/models/ib-draft-1m"))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none")
        ids = [m.id for m in client.models.list()]
        check(ids == ["ib-draft-1m"], f"models.list: {ids}")
        r = client.completions.create(model="ib-draft-1m", prompt="def main():", max_tokens=10, temperature=0)
        check(r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens <= 10, f"completions: {r}")
        whole = client.chat.completions.create(model="ib-draft-1m", messages=[{"role": "user", "content": "Write a loop."}],
                                               max_tokens=16, temperature=0)
        text = whole.choices[0].message.content
        check(whole.choices[0].message.role == "assistant" and isinstance(text, str), f"chat: {whole}")
        pieces = []
        for chunk in client.chat.completions.create(model="ib-draft-1m", messages=[{"role": "user", "content": "Write a loop."}],
                                                    max_tokens=16, temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        check("".join(pieces) == text, f"streamed {''.join(pieces)!r} != {text!r}")
        # stop through the client: the same greedy text, cut before the stop sequence.
        golden = json.load(open(os.path.join(src, "tests/data/models/ib-draft-1m.golden.json")))
        r = client.completions.create(model="ib-draft-1m", prompt=golden["prompt"], max_tokens=len(golden["greedy_ids"]),
                                      temperature=0, stop=["jango"], extra_body={"ignore_eos": True})
        want = golden["greedy_text"][:golden["greedy_text"].find("jango")]
        check(r.choices[0].text == want and r.choices[0].finish_reason == "stop", f"stop: {r.choices[0]} (want {want!r})")
        # Structured output as the chapter's client asks for it: response_format with a JSON Schema.
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                                   "population": {"type": "integer", "minimum": 0}},
                  "required": ["city", "population"], "additionalProperties": False}
        response = client.chat.completions.create(
            model="ib-draft-1m", messages=[{"role": "user", "content": "Describe a city as JSON."}], max_tokens=48,
            response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}})
        doc = json.loads(response.choices[0].message.content)
        check(set(doc) == {"city", "population"} and isinstance(doc["population"], int), f"structured output {doc}")
        # logprobs through the client: one entry per generated token, each with its two alternatives.
        r = client.chat.completions.create(model="ib-draft-1m", messages=[{"role": "user", "content": "x"}], max_tokens=6,
                                           temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        check(len(content) == r.usage.completion_tokens == 6 and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
              and all(t.logprob == t.top_logprobs[0].logprob for t in content), f"logprobs: {r.choices[0].logprobs}")
        # n choices through the client: choice i is the request with seed + i alone.
        r = client.chat.completions.create(model="ib-draft-1m", messages=[{"role": "user", "content": "x"}], n=3, max_tokens=8,
                                           seed=11, temperature=1.0)
        alone = [client.chat.completions.create(model="ib-draft-1m", messages=[{"role": "user", "content": "x"}], max_tokens=8,
                                                seed=11 + i, temperature=1.0).choices[0].message.content for i in range(3)]
        check([c.index for c in r.choices] == [0, 1, 2] and [c.message.content for c in r.choices] == alone,
              f"n=3: {[c.message.content for c in r.choices]} != alone {alone}")
        try:
            client.chat.completions.create(model="ib-draft-1m", messages=[{"role": "user", "content": "x"}], n=17)
            fail("n=17 was accepted")
        except openai.BadRequestError as e:
            check("'n' must be in [1, 16]" in str(e), f"BadRequestError: {e}")
        try:
            client.completions.create(model="nope", prompt="x")
            fail("an unknown model was accepted")
        except openai.NotFoundError:
            pass
    finally:
        s.stop()
    tool_calls(binary, src, openai)
    smollm2_chat(binary, src, openai)
    print(f"serve_test: openai {openai.__version__}: all checks passed")


def tool_calls(binary, src, openai):
    """Tool calling through the client: a named function and "required" come back as tool_calls
    whose arguments hold the functions' parameters (streamed: the same calls); a conversation's tool
    turns reach the template as transformers renders them; "auto" needs a parser, and with hermes a
    model that calls nothing answers as with tool_choice "none"."""
    golden = json.load(open(os.path.join(src, "tests/data/chat/hermes-tools.golden.json")))
    template = os.path.join(src, "tests/data/chat/hermes-tools.jinja")
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
    clock = {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"],
        "additionalProperties": False}}}
    ask = [{"role": "user", "content": "Weather in Oslo?"}]
    for parser in ([], ["--tool-call-parser", "hermes"]):
        s = Server(binary, os.path.join(src, "data/models/ib-draft-1m"), "--chat-template", template, *parser)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none")
            if not parser:
                named = {"type": "function", "function": {"name": "get_weather"}}
                r = client.chat.completions.create(model="ib-draft-1m", messages=ask, tools=[weather, clock], tool_choice=named,
                                                   max_tokens=60, seed=5, temperature=1.0)
                c = r.choices[0]
                check(c.message.content is None and len(c.message.tool_calls) == 1 and c.finish_reason == "stop",
                      f"named tool choice: {c}")
                call = c.message.tool_calls[0]
                args = json.loads(call.function.arguments)
                check(call.function.name == "get_weather" and set(args) == {"city", "unit"} and args["unit"] in ("c", "f")
                      and call.id and call.type == "function", f"named call {call}")
                # Streamed, the same call: its id and name first, then the arguments in pieces.
                pieces, names, ids, finish = [], [], set(), None
                for chunk in client.chat.completions.create(model="ib-draft-1m", messages=ask, tools=[weather, clock],
                                                            tool_choice=named, max_tokens=60, seed=5, temperature=1.0,
                                                            stream=True):
                    d = chunk.choices[0].delta
                    for t in d.tool_calls or []:
                        check(t.index == 0, f"streamed call index {t.index}")
                        if t.id:
                            ids.add(t.id)
                            names.append(t.function.name)
                        pieces.append(t.function.arguments or "")
                    finish = chunk.choices[0].finish_reason or finish
                check(names == ["get_weather"] and len(ids) == 1 and "".join(pieces) == call.function.arguments
                      and finish == "stop", f"streamed named call: {names} {''.join(pieces)!r} != {call.function.arguments!r}")
                # required: one or more calls of the offered functions.
                want = None  # the unstreamed calls, which the streamed ones must equal
                for stream in (False, True):
                    kw = dict(model="ib-draft-1m", messages=ask, tools=[weather, clock], tool_choice="required", max_tokens=90,
                              seed=9, temperature=1.0)
                    if stream:
                        calls, finish = {}, None
                        for chunk in client.chat.completions.create(stream=True, **kw):
                            for t in chunk.choices[0].delta.tool_calls or []:
                                calls[t.index] = (t.function.name, t.function.arguments)
                            finish = chunk.choices[0].finish_reason or finish
                        got = [calls[i] for i in sorted(calls)]
                    else:
                        m = client.chat.completions.create(**kw)
                        finish = m.choices[0].finish_reason
                        got = [(t.function.name, t.function.arguments) for t in m.choices[0].message.tool_calls]
                    check(finish == "tool_calls" and got and all(n in ("get_weather", "get_time") for n, _ in got),
                          f"required (stream={stream}): {finish} {got}")
                    for n, a in got:
                        keys = set(json.loads(a))
                        check(keys == ({"city", "unit"} if n == "get_weather" else {"zone"}), f"required call {n} {a}")
                    if stream:
                        check(got == want, f"required streamed {got} != {want}")
                    else:
                        want = got
                # A conversation with tools, calls and their results renders as transformers renders it.
                case = golden["cases"][1]
                msgs = [dict(m, tool_calls=[dict(t, function=dict(t["function"], arguments=json.dumps(t["function"]["arguments"])))
                                            for t in m["tool_calls"]]) if m.get("tool_calls") else m for m in case["messages"]]
                r = client.chat.completions.create(model="ib-draft-1m", messages=msgs, tools=case["tools"], tool_choice="none",
                                                   max_tokens=1)
                status, tok = s.json("POST", "/tokenize", {"model": "ib-draft-1m", "prompt": case["rendered"],
                                                          "add_special_tokens": False})
                check(status == 200 and r.usage.prompt_tokens == tok["count"],
                      f"tool conversation: {r.usage.prompt_tokens} prompt tokens, transformers' render is {tok['count']}")
                try:
                    client.chat.completions.create(model="ib-draft-1m", messages=ask, tools=[weather], max_tokens=4)
                    fail("tool_choice auto was accepted without a tool-call parser")
                except openai.BadRequestError as e:
                    check("--tool-call-parser" in str(e), f"auto without a parser: {e}")
            else:
                plain = client.chat.completions.create(model="ib-draft-1m", messages=ask, tools=[weather, clock],
                                                       tool_choice="none", max_tokens=24, seed=3, temperature=1.0)
                auto = client.chat.completions.create(model="ib-draft-1m", messages=ask, tools=[weather, clock], max_tokens=24,
                                                      seed=3, temperature=1.0)
                streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
                    model="ib-draft-1m", messages=ask, tools=[weather, clock], max_tokens=24, seed=3, temperature=1.0,
                    stream=True) if ch.choices)
                text = plain.choices[0].message.content
                check("<tool_call>" not in text and auto.choices[0].message.content == text and streamed == text
                      and not auto.choices[0].message.tool_calls, f"auto without a call: {auto.choices[0]} {streamed!r} vs {text!r}")
        finally:
            s.stop()
    print("serve_test: tool calls (named, required, streamed, a tool conversation, auto with hermes) passed")


def smollm2_chat(binary, src, openai):
    """A real pretrained model served from its GGUF file: the client's chat requests go through the
    model's own Jinja template, and each answer is transformers' greedy one, stopped where its
    generate() stops (<|im_end|>, the GGUF's end-of-sequence id), as tests/data/gguf/smollm2.json has it."""
    gguf = os.path.join(src, "data/models/smollm2-135m-instruct-q4_1.gguf")
    if not os.path.exists(gguf):
        print("serve_test: SmolLM2 is not in data/models (scripts/get-models): its chat checks skipped")
        return
    golden = json.load(open(os.path.join(src, "tests/data/gguf/smollm2.json")))
    s = Server(binary, gguf)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none")
        name = client.models.list().data[0].id
        for chat in golden["chats"]:
            r = client.chat.completions.create(model=name, messages=chat["messages"], max_tokens=64, temperature=0)
            c = r.choices[0]
            check(c.message.content == chat["text"], f"SmolLM2 chat {chat['messages']}: {c.message.content!r} != {chat['text']!r}")
            check(c.finish_reason == "stop" and r.usage.completion_tokens == len(chat["generated"]),
                  f"SmolLM2 chat: finish {c.finish_reason}, {r.usage.completion_tokens} tokens (transformers stopped after "
                  f"{len(chat['generated'])})")
            check(r.usage.prompt_tokens == len(chat["ids"]), f"SmolLM2 chat: {r.usage.prompt_tokens} prompt tokens, "
                  f"transformers' template gave {len(chat['ids'])}")
        print(f"serve_test: SmolLM2 GGUF: {len(golden['chats'])} chats through its own template match transformers")
    finally:
        s.stop()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    with_openai(sys.argv[1], sys.argv[2])
