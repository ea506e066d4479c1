#!/usr/bin/env python3
"""End-to-end tests of `infer-bench serve` through the standard library's HTTP client.

serve_test.py BINARY SOURCE_DIR

Starts the server on a free port with our trained ib-draft-1m, then: /v1/models; a greedy
completion equal to transformers' greedy continuation (tests/data/models/ib-draft-1m.golden.json);
a chat streamed as server-sent events whose text equals the same request unstreamed; bad input as
4xx with OpenAI's error object; concurrent requests; a client that disconnects mid-stream (its
request cancelled, every KV reservation back, read from /metrics); SIGINT drains a request in
flight and exits 130; LoRA adapters, paged KV with prefix caching, speculative decoding and
--api-key. Hostile and slow clients: serve_faults_test.py; the `openai` package's client:
serve_openai_test.py.
"""
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

from serve_http import Server, check, sse_events


def plain(binary, src):
    model = os.path.join(src, "data/models/ib-draft-1m")
    golden = json.load(open(os.path.join(src, "tests/data/models/ib-draft-1m.golden.json")))
    s = Server(binary, model)
    try:
        status, models = s.json("GET", "/v1/models")
        check(status == 200 and models["data"][0]["id"] == "ib-draft-1m", f"/v1/models: {status} {models}")

        # Greedy through the whole path (tokenizer, scheduler, engine, detokenizer) against transformers.
        n = len(golden["greedy_ids"])
        status, r = s.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": golden["prompt"], "max_tokens": n,
                                                        "temperature": 0, "ignore_eos": True})
        check(status == 200, f"completion: {status} {r}")
        check(r["choices"][0]["text"] == golden["greedy_text"],
              f"greedy text {r['choices'][0]['text']!r} != transformers' {golden['greedy_text']!r}")
        check(r["usage"] == {"prompt_tokens": len(golden["prompt_ids"]), "completion_tokens": n,
                             "total_tokens": len(golden["prompt_ids"]) + n}, f"usage {r['usage']}")
        check(r["choices"][0]["finish_reason"] == "length", f"finish_reason {r['choices'][0]['finish_reason']}")

        # Stop sequences and stop_token_ids (#45): transformers' greedy text cut where they occur,
        # whole and streamed alike.
        base = {"model": "ib-draft-1m", "prompt": golden["prompt"], "max_tokens": n, "temperature": 0, "ignore_eos": True}
        text = golden["greedy_text"]
        status, ids3 = s.json("POST", "/detokenize", {"model": "ib-draft-1m", "tokens": golden["greedy_ids"][:3]})
        for extra, want in [({"stop": "jango"}, text[:text.find("jango")]),
                            ({"stop": ["\n\n", "zzz"], "include_stop_str_in_output": True}, text[:text.find("\n\n") + 2]),
                            ({"stop_token_ids": [golden["greedy_ids"][3]]}, ids3["prompt"])]:
            status, r = s.json("POST", "/v1/completions", {**base, **extra})
            check(status == 200 and r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "stop"
                  and r["usage"]["completion_tokens"] < n, f"{extra}: {status} {r} (want {want!r})")
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            c.request("POST", "/v1/completions", json.dumps({**base, **extra, "stream": True}), {"Content-Type": "application/json"})
            events = [json.loads(e) for e in sse_events(c.getresponse()) if e != "[DONE]"]
            c.close()
            streamed = "".join(e["choices"][0]["text"] for e in events if e["choices"])
            reasons = [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
            check(streamed == want and reasons == ["stop"], f"{extra} streamed: {streamed!r} {reasons}")

        # logprobs against transformers: the first token's log-probability and the five most likely,
        # from the log-softmax of transformers' logits at the prompt's last position (golden).
        import math
        logits = golden["last_logits"]
        mx = max(logits)
        log_z = mx + math.log(sum(math.exp(x - mx) for x in logits))
        ref = sorted(((x - log_z, i) for i, x in enumerate(logits)), key=lambda p: (-p[0], p[1]))[:5]
        status, r = s.json("POST", "/v1/completions", {**base, "max_tokens": 3, "logprobs": 5})
        lp = r["choices"][0]["logprobs"] if status == 200 else None
        check(lp and len(lp["token_logprobs"]) == 3 and abs(lp["token_logprobs"][0] - ref[0][0]) < 1e-3
              and len(lp["top_logprobs"][0]) == 5 and all(abs(a - b[0]) < 1e-3 for a, b in zip(sorted(lp["top_logprobs"][0].values(), reverse=True), ref)),
              f"logprobs {lp} against transformers' {ref}")
        check("".join(lp["tokens"]) == r["choices"][0]["text"], f"logprobs tokens {lp['tokens']} != {r['choices'][0]['text']!r}")
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({**base, "max_tokens": 3, "logprobs": 5, "stream": True}),
                  {"Content-Type": "application/json"})
        events = [json.loads(e) for e in sse_events(c.getresponse()) if e != "[DONE]"]
        c.close()
        streamed = [x for e in events if e["choices"] and e["choices"][0]["logprobs"] for x in e["choices"][0]["logprobs"]["token_logprobs"]]
        check(streamed == lp["token_logprobs"], f"streamed logprobs {streamed} != whole {lp['token_logprobs']}")

        # logit_bias +100 on one token makes every greedy token that one; penalties are taken.
        forced = golden["greedy_ids"][5]
        status, r = s.json("POST", "/v1/completions", {**base, "max_tokens": 4, "logit_bias": {str(forced): 100}, "logprobs": 0})
        check(status == 200 and r["choices"][0]["logprobs"]["tokens"] == [r["choices"][0]["logprobs"]["tokens"][0]] * 4
              and s.json("POST", "/detokenize", {"model": "ib-draft-1m", "tokens": [forced] * 4})[1]["prompt"]
              == r["choices"][0]["text"], f"logit_bias: {status} {r}")
        status, r = s.json("POST", "/v1/completions", {**base, "max_tokens": 8, "frequency_penalty": 1.5, "presence_penalty": 0.5,
                                                        "repetition_penalty": 1.3})
        check(status == 200 and r["usage"]["completion_tokens"] == 8, f"penalties: {status} {r}")

        # A list of prompts (lm-eval's batched completions): prompt p's choice i at index p·n + i,
        # each as its prompt alone.
        prompts = ["x = 1", "def f(", "import"]
        alone = [s.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": p, "max_tokens": 6, "temperature": 0,
                                                    "ignore_eos": True})[1]["choices"][0]["text"] for p in prompts]
        status, r = s.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": prompts, "n": 2, "max_tokens": 6,
                                                        "temperature": 0, "ignore_eos": True})
        check(status == 200 and [c["index"] for c in r["choices"]] == list(range(6))
              and [c["text"] for c in r["choices"]] == [a for a in alone for _ in range(2)]
              and r["usage"]["completion_tokens"] == 36, f"a list of prompts: {status} {r} (alone {alone})")

        # n choices, whole and streamed: greedy, each is transformers' text; sampled, choice i is the
        # request with seed + i alone (a request's draws do not depend on its batch).
        status, r = s.json("POST", "/v1/completions", {**base, "n": 3})
        check(status == 200 and [c["text"] for c in r["choices"]] == [text] * 3 and [c["index"] for c in r["choices"]] == [0, 1, 2]
              and r["usage"]["completion_tokens"] == 3 * n, f"n=3 greedy: {status} {r}")
        sampled = {"model": "ib-draft-1m", "prompt": "def f(", "max_tokens": 12, "temperature": 1.0, "seed": 5}
        alone = [s.json("POST", "/v1/completions", {**sampled, "seed": 5 + i})[1]["choices"][0]["text"] for i in range(2)]
        status, r = s.json("POST", "/v1/completions", {**sampled, "n": 2})
        check(status == 200 and [c["text"] for c in r["choices"]] == alone, f"n=2 sampled: {r} != alone {alone}")
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({**sampled, "n": 2, "stream": True}), {"Content-Type": "application/json"})
        events = [json.loads(e) for e in sse_events(c.getresponse()) if e != "[DONE]"]
        c.close()
        streamed = ["".join(e["choices"][0]["text"] for e in events if e["choices"] and e["choices"][0]["index"] == i)
                    for i in range(2)]
        finals = sorted(e["choices"][0]["index"] for e in events if e["choices"] and e["choices"][0]["finish_reason"])
        check(streamed == alone and finals == [0, 1], f"n=2 streamed: {streamed} {finals} != {alone}")

        # A chat streamed, against the same request answered whole.
        chat = {"model": "ib-draft-1m", "messages": [{"role": "system", "content": "You write Python."},
                                                     {"role": "user", "content": "def parse(text):"}],
                "max_tokens": 20, "temperature": 0, "ignore_eos": True}
        status, whole = s.json("POST", "/v1/chat/completions", chat)
        check(status == 200 and whole["object"] == "chat.completion", f"chat: {status} {whole}")
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/chat/completions", json.dumps({**chat, "stream": True, "stream_options": {"include_usage": True}}),
                  {"Content-Type": "application/json"})
        resp = c.getresponse()
        check(resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream"),
              f"stream: {resp.status} {resp.getheader('Content-Type')}")
        events = list(sse_events(resp))
        c.close()
        check(events and events[-1] == "[DONE]", f"the stream does not end with [DONE]: {events[-3:]}")
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks if ch["choices"])
        check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", f"first chunk {chunks[0]}")
        check(text == whole["choices"][0]["message"]["content"], f"streamed {text!r} != whole {whole['choices'][0]['message']['content']!r}")
        finals = [ch for ch in chunks if ch["choices"] and ch["choices"][0]["finish_reason"]]
        check(len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length", f"finish chunks {finals}")
        check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 20, f"usage chunk {chunks[-1]}")
        # Tokens that reach the writer together go out in one chunk (as vLLM's do): a fast engine may
        # finish all 20 before the first write, so the count of text chunks is not fixed; the role,
        # the text, the finish reason and the usage are each there, in that order.
        check(len(chunks) >= 3 and chunks[-2]["choices"] and chunks[-2]["choices"][0]["finish_reason"] == "length",
              f"{len(chunks)} chunks: {chunks}")

        # response_format: a JSON Schema through our constrained decoding, whole and streamed.
        person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                   "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                  "required": ["name", "age"], "additionalProperties": False}
        for stream in (False, True):
            body = {"model": "ib-draft-1m", "messages": [{"role": "user", "content": "A person as JSON."}], "max_tokens": 40,
                    "temperature": 0.7, "seed": 3, "stream": stream,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": person}}}
            if not stream:
                status, r = s.json("POST", "/v1/chat/completions", body)
                check(status == 200, f"response_format: {status} {r}")
                content, reason = r["choices"][0]["message"]["content"], r["choices"][0]["finish_reason"]
            else:
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
                c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
                events = [json.loads(e) for e in sse_events(c.getresponse()) if e != "[DONE]"]
                c.close()
                content = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
                reason = [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]][0]
            doc = json.loads(content)
            check(set(doc) == {"name", "age"} and isinstance(doc["name"], str) and len(doc["name"]) <= 12
                  and isinstance(doc["age"], int) and 0 <= doc["age"] <= 120, f"document {content!r}")
            check(reason == "stop", f"response_format finish_reason {reason}")
        # The book's tool-call schema: `arguments` is any object at any depth on the grammar path (the
        # default); a logit_bias toward the token '{"' nests it past the depth one DFA holds (2): in a
        # value it opens an object and its key, in a key it closes the key. Two choices share the
        # compile, each its own document.
        tool = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "arguments": {"type": "object"}},
                "required": ["name", "arguments"]}
        _, brace = s.json("POST", "/tokenize", {"model": "ib-draft-1m", "prompt": 'x{"'})
        _, x = s.json("POST", "/tokenize", {"model": "ib-draft-1m", "prompt": "x"})
        check(brace["count"] == x["count"] + 1, f"'{{\"' is not one token: {brace}")
        status, r = s.json("POST", "/v1/chat/completions", {
            "model": "ib-draft-1m", "messages": [{"role": "user", "content": "Call a tool."}], "max_tokens": 80,
            "temperature": 0, "n": 2, "logit_bias": {str(brace["tokens"][-1]): 10},
            "response_format": {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": tool}}})
        check(status == 200 and len(r["choices"]) == 2, f"tool call: {status} {r}")
        def depth(v):
            return 1 + max([depth(x) for x in (v.values() if isinstance(v, dict) else v)], default=0) \
                if isinstance(v, (dict, list)) else 0
        for ch in r["choices"]:
            call = json.loads(ch["message"]["content"])
            check(set(call) == {"name", "arguments"} and isinstance(call["arguments"], dict), f"tool call {call}")
            check(depth(call["arguments"]) > 3, f"arguments nested {depth(call['arguments'])} deep: {call}")
        status, data = s.request("POST", "/v1/chat/completions", {
            "model": "ib-draft-1m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": person}}})
        check(status == 400 and json.loads(data)["error"]["param"] == "max_tokens", f"a budget too small: {status} {data}")
        status, data = s.request("POST", "/v1/chat/completions", {
            "model": "ib-draft-1m", "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"$ref": "#/missing"}}}})
        check(status == 400 and json.loads(data)["error"]["param"] == "response_format", f"a refused schema: {status} {data}")

        # Bad input: a 4xx with OpenAI's error object, the field named where there is one.
        for body, want, param in [("{not json", 400, None),
                                  ({"model": "other", "prompt": "x"}, 404, "model"),
                                  ({"model": "ib-draft-1m", "prompt": list(range(3000))}, 400, "prompt"),
                                  ({"model": "ib-draft-1m", "prompt": "x", "n": 0}, 400, "n"),
                                  ({"model": "ib-draft-1m", "prompt": "x", "n": 2, "best_of": 3}, 400, "best_of")]:
            status, data = s.request("POST", "/v1/completions", body)
            err = json.loads(data).get("error", {})
            check(status == want and err.get("message") and (param is None or err.get("param") == param),
                  f"{body!r:.60}: {status} {data}")
        # A field the server does not know is ignored with a warning, as vLLM does (GuideLLM sends
        # stream_options.continuous_usage_stats: the usage so far in every chunk).
        status, data = s.request("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": "x", "max_tokens": 3,
                                                             "vendor_extension": {"a": 1}})
        check(status == 200, f"an unknown field: {status} {data}")
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({"model": "ib-draft-1m", "prompt": "x", "max_tokens": 4, "ignore_eos": True,
                                                         "stream": True, "stream_options": {"include_usage": True,
                                                                                            "continuous_usage_stats": True}}),
                  {"Content-Type": "application/json"})
        events = [json.loads(e) for e in sse_events(c.getresponse()) if e != "[DONE]"]
        c.close()
        counts = [e["usage"]["completion_tokens"] for e in events if e.get("usage")]
        check(len(counts) == len(events) and counts == sorted(counts) and counts[-1] == 4, f"continuous usage: {counts}")
        status, _ = s.request("GET", "/v2/nothing")
        check(status == 404, f"unknown route: {status}")

        # Concurrent clients.
        results = []
        def one(i):
            results.append(s.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": f"x = {i}", "max_tokens": 8,
                                                               "temperature": 0.8, "seed": i, "ignore_eos": True}))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        check(len(results) == 8 and all(st == 200 and r["usage"]["completion_tokens"] == 8 for st, r in results),
              f"concurrent: {[st for st, _ in results]}")

        # vLLM's metric names and latency histograms: every finished request observed once.
        _, text = s.request("GET", "/metrics")
        finished = s.metrics()["requests_finished_total"]
        for h in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds"):
            count = re.search(rf"^vllm:{h}_count\{{[^}}]*\}} (\S+)$", text, re.M)
            inf = re.search(rf'^vllm:{h}_bucket\{{[^}}]*le="\+Inf"\}} (\S+)$', text, re.M)
            # Every finished request ended once; requests cut by a stop sequence were cancelled after
            # their first token (counted in TTFT and queue time, not in E2E).
            ok = count and (float(count.group(1)) == finished if h == "e2e_request_latency_seconds"
                            else float(count.group(1)) >= finished)
            check(ok and inf and count.group(1) == inf.group(1)
                  and float(count.group(1)) >= 8, f"vllm:{h}: {count and count.group(0)} {inf and inf.group(0)} ({finished} finished)")
        check(re.search(r"^vllm:num_requests_running\{model_name=\"ib-draft-1m\"\} 0$", text, re.M), "vllm:num_requests_running")

        # A client that goes away mid-stream: its request is cancelled and its reservation returned.
        before = s.metrics()
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps({"model": "ib-draft-1m", "prompt": "import os", "max_tokens": 1500,
                                                         "ignore_eos": True, "stream": True}), {"Content-Type": "application/json"})
        resp = c.getresponse()
        next(sse_events(resp))
        c.sock.close()
        c.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            m = s.metrics()
            if m["requests_cancelled_total"] > before["requests_cancelled_total"] and m["kv_reserved_tokens"] == 0:
                break
            time.sleep(0.1)
        check(m["requests_cancelled_total"] == before["requests_cancelled_total"] + 1 and m["kv_reserved_tokens"] == 0
              and m["num_requests_running"] == 0, f"after a disconnect: {m}")
        check(m["generation_tokens_total"] - before["generation_tokens_total"] < 1500, "the cancelled request ran to its end")

        # SIGINT while a request is in flight: it is answered, then the server exits 130.
        answer = []
        t = threading.Thread(target=lambda: answer.append(s.json("POST", "/v1/completions", {
            "model": "ib-draft-1m", "prompt": "class A:", "max_tokens": 1500, "ignore_eos": True})))
        t.start()
        deadline = time.time() + 30
        running = 0
        while time.time() < deadline and running < 1:  # SIGINT once it is under way
            running = s.metrics()["num_requests_running"]
        check(running == 1, "the request never showed as running")
        code = s.stop()
        t.join(timeout=60)
        check(answer and answer[0][0] == 200 and answer[0][1]["usage"]["completion_tokens"] == 1500,
              f"the request in flight at SIGINT: {answer}")
        check(code == 130, f"exit code {code} after SIGINT: {''.join(s.err)}")
    finally:
        if s.p.poll() is None:
            s.p.kill()
    lora(binary, src)
    paged(binary, src)
    speculative(binary, src)
    api_key(binary, src)
    print("serve_test: plain HTTP: all checks passed")


def api_key(binary, src):
    """--api-key: the /v1 routes need the bearer key (401 without it or with another); /health does not."""
    s = Server(binary, os.path.join(src, "data/models/ib-draft-1m"), "--api-key", "s3cret")
    try:
        for headers, want in [({}, 401), ({"Authorization": "Bearer wrong!"}, 401), ({"Authorization": "Bearer s3cret"}, 200)]:
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            c.request("GET", "/v1/models", headers=headers)
            r = c.getresponse()
            body = r.read()
            c.close()
            check(r.status == want and (want == 200 or json.loads(body)["error"]["type"] == "authentication_error"),
                  f"/v1/models with {headers}: {r.status} {body[:200]!r}")
        status, _ = s.request("GET", "/health")
        check(status == 200, f"/health with --api-key: {status}")
        # A refused POST's body is never read: the server closes that connection, so a client
        # that keeps connections alive sends its next request on a new one (once it was parsed
        # from the refused body: a 400 for the request after a 401).
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        body = json.dumps({"model": "ib-draft-1m", "prompt": "Once upon a time", "max_tokens": 2})
        for key, want in [("wrong!", 401), ("s3cret", 200), ("wrong!", 401), ("s3cret", 200)]:
            c.request("POST", "/v1/completions", body=body,
                      headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
            r = c.getresponse()
            text = r.read()
            check(r.status == want, f"keep-alive POST with key {key!r}: {r.status} {text[:200]!r} (expected {want})")
            check(want == 200 or r.getheader("Connection") == "close", f"a refused POST kept its connection: {r.getheaders()}")
        c.close()
    finally:
        s.p.kill()


def paged(binary, src):
    """A paged KV cache too small for four requests at once, with prefix caching: requests sent
    together are preempted and recomputed yet each gets the text it gets alone; a repeated prompt
    is a prefix hit with transformers' greedy text; /metrics counts both."""
    model = os.path.join(src, "data/models/ib-draft-1m")
    golden = json.load(open(os.path.join(src, "tests/data/models/ib-draft-1m.golden.json")))
    s = Server(binary, model, "--kv-blocks", "24", "--block-size", "8", "--enable-prefix-caching")
    try:
        n = len(golden["greedy_ids"])
        body = {"model": "ib-draft-1m", "prompt": golden["prompt"], "max_tokens": n, "temperature": 0, "ignore_eos": True}
        for attempt in ("miss", "hit"):
            status, r = s.json("POST", "/v1/completions", body)
            check(status == 200 and r["choices"][0]["text"] == golden["greedy_text"],
                  f"paged, prefix {attempt}: {status} {r}")
        m = s.metrics()
        check(m["prefix_cache_hits_total"] >= len(golden["prompt_ids"]) - 1,
              f"a repeated prompt found {m['prefix_cache_hits_total']} cached tokens of {len(golden['prompt_ids'])}")
        prompts = [f"{golden['prompt']} # part {i}" for i in range(8)]
        def ask(p):
            return s.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": p, "max_tokens": 64,
                                                      "temperature": 0, "ignore_eos": True})
        alone = [ask(p)[1]["choices"][0]["text"] for p in prompts]
        def together(server):  # the eight sent at once, their answers in order
            got = [None] * len(prompts)
            def one(i):
                got[i] = server.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": prompts[i],
                                                                 "max_tokens": 64, "temperature": 0, "ignore_eos": True})
            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
            [t.start() for t in threads]
            [t.join() for t in threads]
            return got
        for i, (status, r) in enumerate(together(s)):
            check(status == 200 and r["choices"][0]["text"] == alone[i],
                  f"request {i} sent with seven others: {status} {r} != alone {alone[i]!r}")
        m = s.metrics()
        check(m["num_preemptions_total"] > 0, f"192 KV positions for four requests of ~80 tokens: no preemption ({m})")
        check(m["num_requests_running"] == 0 and m["kv_blocks_used"] <= m["kv_blocks_total"] == 24, f"blocks: {m}")
        # The same eight on a server that preempts by swap: each text again, its K/V back from host
        # memory (nothing recomputed), no host memory held when idle.
        w = Server(binary, model, "--kv-blocks", "24", "--block-size", "8", "--preemption-mode", "swap")
        try:
            for i, (status, r) in enumerate(together(w)):
                check(status == 200 and r["choices"][0]["text"] == alone[i],
                      f"swap: request {i} sent with seven others: {status} {r} != alone {alone[i]!r}")
            wm = w.metrics()
            check(wm["num_preemptions_total"] > 0 and wm["swapped_out_total"] == wm["num_preemptions_total"]
                  and wm["swapped_in_total"] == wm["swapped_out_total"] and wm["swap_bytes"] == 0
                  and wm["num_requests_swapped"] == 0, f"swap: {wm}")
        finally:
            w.p.kill()
        # echo with logprobs (lm-eval's loglikelihood): the prompt and transformers' greedy
        # continuation sent as token ids, scored with max_tokens 0. Every greedy token is the most
        # likely at its position of one prefill, so its log-probability is the top one there; the
        # request takes nothing from the prefix cache and gives the same answer twice.
        ids = golden["prompt_ids"] + golden["greedy_ids"]
        scored = []
        for attempt in range(2):
            status, r = s.json("POST", "/v1/completions", {"model": "ib-draft-1m", "prompt": ids, "max_tokens": 0,
                                                           "echo": True, "logprobs": 1})
            check(status == 200, f"echo: {status} {r}")
            scored.append(r["choices"][0])
            lp = r["choices"][0]["logprobs"]
            check(len(lp["tokens"]) == len(ids) and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
                  and r["usage"]["completion_tokens"] == 0, f"echo: {len(lp['tokens'])} tokens of {len(ids)}, {r['usage']}")
            for i in range(len(golden["prompt_ids"]), len(ids)):
                (top_token, top_lp), = lp["top_logprobs"][i].items()
                check(top_token == lp["tokens"][i] and abs(top_lp - lp["token_logprobs"][i]) < 1e-4,
                      f"echo: greedy token {i} {lp['tokens'][i]!r} ({lp['token_logprobs'][i]}) is not the top {lp['top_logprobs'][i]}")
            check("".join(lp["tokens"]).endswith(golden["greedy_text"]) and r["choices"][0]["text"].endswith(golden["greedy_text"]),
                  f"echo text: {r['choices'][0]['text']!r}")
        check(scored[0] == scored[1], "echo: a second request scored differently")
        # Streamed, the same: the prompt and its log-probabilities in the first chunk, nothing
        # generated shown, finish_reason length, usage completion_tokens 0; and with max_tokens 3,
        # the prompt then the unstreamed answer's text, offsets continuing across chunks.
        for max_tokens in (0, 3):
            echo_body = {"model": "ib-draft-1m", "prompt": ids, "max_tokens": max_tokens, "echo": True, "logprobs": 1,
                    "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            c.request("POST", "/v1/completions", json.dumps(echo_body), {"Content-Type": "application/json"})
            events = [json.loads(e) for e in sse_events(c.getresponse()) if e != "[DONE]"]
            c.close()
            chunks = [e["choices"][0] for e in events if e["choices"]]
            text = "".join(ch["text"] for ch in chunks)
            tokens, token_lps, offsets = [], [], []
            for ch in chunks:
                if ch.get("logprobs"):
                    tokens += ch["logprobs"]["tokens"]
                    token_lps += ch["logprobs"]["token_logprobs"]
                    offsets += ch["logprobs"]["text_offset"]
            del echo_body["stream"], echo_body["stream_options"]
            status, whole = s.json("POST", "/v1/completions", echo_body)
            w = whole["choices"][0]
            check(status == 200 and text == w["text"] and tokens == w["logprobs"]["tokens"]
                  and offsets == w["logprobs"]["text_offset"]
                  and all(a == b or abs(a - b) < 1e-6 for a, b in zip(token_lps[1:], w["logprobs"]["token_logprobs"][1:]))
                  and chunks[-1]["finish_reason"] == w["finish_reason"]
                  and events[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"] == max_tokens,
                  f"echo streamed (max_tokens {max_tokens}): {text!r} vs {w['text']!r}, {len(tokens)} vs "
                  f"{len(w['logprobs']['tokens'])} tokens, {chunks[-1]['finish_reason']} vs {w['finish_reason']}, {events[-1]}")
        # Idle, the blocks in use are the prefix cache's; released (vLLM's /reset_prefix_cache), every block is free.
        check(m["kv_blocks_used"] > 0 and m["prefix_cache_entries"] > 0, f"an idle server with prefix caching: {m}")
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/reset_prefix_cache")  # bodiless, as vLLM's clients send it
        status = c.getresponse().status
        c.close()
        m = s.metrics()
        check(status == 200 and m["kv_blocks_used"] == 0 and m["prefix_cache_entries"] == 0,
              f"after /reset_prefix_cache: {status} {m}")
        status, r = s.json("POST", "/v1/completions", body)
        check(status == 200 and r["choices"][0]["text"] == golden["greedy_text"], f"after the reset: {status} {r}")
        check(s.stop() == 130, f"paged server's exit: {''.join(s.err)}")
    finally:
        if s.p.poll() is None:
            s.p.kill()


def speculative(binary, src):
    """Speculative decoding by prompt lookup and by a draft model (--speculative-config, vLLM's
    JSON): the greedy text is transformers' (tests/data/models), whole and streamed; sampled
    requests get the tokens they get from a server without it (same seed), and so does a
    response_format request (verified under its schema; the draft model drafts under it too);
    drafts are verified and some kept (/metrics); a bad config is refused at start with exit 2."""
    model = os.path.join(src, "data/models/ib-draft-1m")
    golden = json.load(open(os.path.join(src, "tests/data/models/ib-draft-1m.golden.json")))
    n = len(golden["greedy_ids"])
    body = {"model": "ib-draft-1m", "prompt": golden["prompt"], "max_tokens": n, "temperature": 0, "ignore_eos": True}
    sampled = [{"model": "ib-draft-1m", "prompt": golden["prompt"] + "\n" + golden["prompt"][:40 + 9 * i], "max_tokens": 40,
                "temperature": 0.9, "seed": 17 + i, "ignore_eos": True} for i in range(4)]
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "count": {"type": "integer"}},
              "required": ["name", "count"], "additionalProperties": False}
    constrained = {"model": "ib-draft-1m", "prompt": golden["prompt"], "max_tokens": 40, "temperature": 0,
                   "response_format": {"type": "json_schema", "json_schema": {"name": "record", "schema": schema}}}
    texts, documents = {}, {}
    # The draft model: the model itself (one vocabulary; its greedy drafts all kept at temperature 0).
    draft = json.dumps({"model": model, "num_speculative_tokens": 3})
    for config in (None, '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}', draft):
        s = Server(binary, model, *(["--speculative-config", config] if config else []))
        try:
            status, r = s.json("POST", "/v1/completions", body)
            check(status == 200 and r["choices"][0]["text"] == golden["greedy_text"], f"speculative {config}: {status} {r}")
            got = [None] * len(sampled)
            def one(i):
                got[i] = s.json("POST", "/v1/completions", sampled[i])[1]
            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(sampled))]
            [t.start() for t in threads]
            [t.join() for t in threads]
            texts[config] = [g["choices"][0]["text"] for g in got]
            status, doc = s.json("POST", "/v1/completions", constrained)
            check(status == 200 and doc["choices"][0]["finish_reason"] == "stop", f"response_format with {config}: {status} {doc}")
            documents[config] = doc["choices"][0]["text"]
            parsed = json.loads(documents[config])
            check(set(parsed) == {"name", "count"} and isinstance(parsed["count"], int), f"not the schema's: {parsed}")
            if config:
                m = s.metrics()
                check(m["spec_decode_draft_tokens_total"] > 0 and 0 < m["spec_decode_accepted_tokens_total"]
                      <= m["spec_decode_draft_tokens_total"], f"speculation's counters: {m}")
                # Per request: usage.spec_decode, summing to the server's counters.
                per = [g["usage"].get("spec_decode", {"num_draft_tokens": 0, "num_accepted_tokens": 0}) for g in got]
                per.append(r["usage"].get("spec_decode", {"num_draft_tokens": 0, "num_accepted_tokens": 0}))
                per.append(doc["usage"].get("spec_decode", {"num_draft_tokens": 0, "num_accepted_tokens": 0}))
                if config == draft:  # the model drafting for itself under the schema: its drafts are its draws
                    check(per[-1]["num_accepted_tokens"] > 0, f"no draft kept under the schema: {per[-1]}")
                check(sum(p["num_draft_tokens"] for p in per) == m["spec_decode_draft_tokens_total"]
                      and sum(p["num_accepted_tokens"] for p in per) == m["spec_decode_accepted_tokens_total"]
                      and all(p["num_accepted_tokens"] <= p["num_draft_tokens"] for p in per), f"usage.spec_decode {per} vs {m}")
                print(f"serve_test: {'a draft model' if config == draft else 'prompt lookup'} kept "
                      f"{m['spec_decode_accepted_tokens_total']:.0f} of {m['spec_decode_draft_tokens_total']:.0f} drafted tokens")
        finally:
            s.stop()
    for config, t in texts.items():
        check(t == texts[None], f"sampled with speculation {config}: {t} != without {texts[None]}")
        check(documents[config] == documents[None], f"response_format with {config}: {documents[config]!r} != {documents[None]!r}")
    for config in ('{"method": "eagle"}', '{"method": "draft_model", "num_speculative_tokens": 2}',
                   json.dumps({"model": os.path.join(src, "no-such-model"), "num_speculative_tokens": 2})):
        bad = subprocess.run([binary, "serve", model, "--port", "0", "--speculative-config", config],
                             capture_output=True, text=True, timeout=60)
        check(bad.returncode == 2 and "--speculative-config" in bad.stderr, f"a bad config {config}: {bad.returncode} {bad.stderr}")


def lora(binary, src):
    """LoRA adapters beside the model, each request naming its own by `model` (vLLM's --lora-modules),
    sent at once so the scheduler batches across adapters: each greedy continuation equals PEFT's
    (tests/data/lora/expected.json, written by scripts/make-lora-fixtures)."""
    want = json.load(open(os.path.join(src, "tests/data/lora/expected.json")))
    names = list(want["adapters"])
    s = Server(binary, os.path.join(src, want["base"]),
               *[f"--lora={n}={os.path.join(src, 'data/adapters', n)}" for n in names])
    try:
        status, models = s.json("GET", "/v1/models")
        ids = [m["id"] for m in models["data"]]
        check(status == 200 and ids == ["ib-draft-1m", *names] and all(m["parent"] == "ib-draft-1m" for m in models["data"][1:]),
              f"/v1/models with adapters: {models}")
        got = {}
        def one(name):
            n = len(want["adapters"][name]["greedy_ids"])
            got[name] = s.json("POST", "/v1/completions", {"model": name, "prompt": want["prompt_ids"], "max_tokens": n,
                                                            "temperature": 0, "ignore_eos": True})
        threads = [threading.Thread(target=one, args=(n,)) for n in names * 1]
        [t.start() for t in threads]
        [t.join() for t in threads]
        for name in names:
            status, r = got[name]
            check(status == 200, f"adapter {name}: {status} {r}")
            _, text = s.json("POST", "/detokenize", {"model": name, "tokens": want["adapters"][name]["greedy_ids"]})
            check(r["choices"][0]["text"] == text["prompt"],
                  f"adapter {name}: {r['choices'][0]['text']!r} != PEFT's greedy continuation {text['prompt']!r}")
        _, t = s.json("POST", "/tokenize", {"model": "ib-draft-1m", "prompt": "def main():"})
        check(t["count"] == len(t["tokens"]) > 0, f"/tokenize: {t}")
        status, _ = s.json("POST", "/v1/completions", {"model": "no-such-adapter", "prompt": "x"})
        check(status == 404, f"an unknown adapter: {status}")
    finally:
        s.stop()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    plain(sys.argv[1], sys.argv[2])
