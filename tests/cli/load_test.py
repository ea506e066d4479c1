#!/usr/bin/env python3
"""End-to-end tests of `infer-bench load` and `infer-bench merge` against `infer-bench serve`.

load_test.py BINARY SOURCE_DIR

Starts servers on free ports with our trained ib-draft-1m, then: a load whose every request
completes with the prompt lengths the server counted; a server that refuses every request (an API
key the client lacks): every request failed with its reason, the row still written; the same load
sent by two shards from a common start and merged: the whole load's requests at the whole load's
arrival times, as one unsharded client sent them; JSON Schema requests whose answers our validator
checks; a paired A/B of prefix caching on against off on a shared system prompt: a verdict with
its interval, identical greedy texts; prompts from a dataset, arrivals and shared blocks from a
trace, a duration bound, warm-up passes; a speculating server's drafted tokens kept, by its own
counters; chat prompts exact under SmolLM2's template; and against scripts/paced-server, latencies
that match the server's known schedule.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from serve_http import check, fail


class Server:
    def __init__(self, binary, model, *extra):
        self.p = subprocess.Popen([binary, "serve", model, "--port", "0", *extra], stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if not m:
            self.p.kill()
            fail(f"the server did not print its address: {line!r}")
        self.url = f"http://127.0.0.1:{m.group(1)}"
        threading.Thread(target=lambda: [None for _ in self.p.stderr], daemon=True).start()

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()


def served(url):
    """The completion requests the server at `url` has received (its /metrics)."""
    import urllib.request
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return int(float(re.search(r"^infer_bench_http_requests_total\{[^}]*\} (\S+)$", text, re.M).group(1)))


SPEC = ""  # experiments/load.yaml of the source tree (ctest runs in the build directory)


def load(binary, out, *args, expect=0):
    cmd = [binary, "load", SPEC, "-q", "--format", "json", "-o", out, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    check(r.returncode == expect, f"{' '.join(cmd)}: exit {r.returncode} (expected {expect}): {r.stderr[-800:]}")
    rows = json.load(open(os.path.join(out, "results.json")))["experiments"][0]["rows"]
    return rows, {m["key"]: m["value"] for m in rows[0].get("metrics", [])}


def main(binary, src):
    global SPEC
    SPEC = os.path.join(src, "experiments/load.yaml")
    model = os.path.join(src, "data/models/ib-draft-1m")
    common = ["--weights", model, "--prompt-len", "24", "--output-len", "8"]
    with tempfile.TemporaryDirectory() as tmp:
        plain = Server(binary, model, "--max-seqs", "8")
        keyed = Server(binary, model, "--api-key", "sesame")
        cached = Server(binary, model, "--max-seqs", "8", "--enable-prefix-caching")
        try:
            # Every request completes, and the server counted the prompt tokens sent.
            rows, m = load(binary, f"{tmp}/a", "--endpoint", plain.url, "--requests", "16", "--qps", "40", *common)
            check(rows[0]["validation"]["ok"] and rows[0]["validation"]["value"] == 0, f"validation: {rows[0]['validation']}")
            check(m["completed"] == 16 and m["failed"] == 0, f"completed/failed: {m}")
            check(m["ttft p50"] > 0 and m["tpot p50"] > 0 and m["e2e p99"] >= m["e2e p50"], f"latencies: {m}")
            print("load_test: 16 of 16 requests completed, every prompt length as counted by the server", flush=True)

            # A server that refuses them all: each request fails with its reason; the row is written.
            rows, m = load(binary, f"{tmp}/b", "--endpoint", keyed.url, "--requests", "6", "--qps", "0", *common, expect=1)
            check("401" in json.dumps(rows[0]), f"the refusal's status is not in the row: {rows[0]}")
            # One connection for all six (a refused request's body once became the next one's 400).
            rows, m = load(binary, f"{tmp}/b2", "--endpoint", keyed.url, "--served-model", "ib-draft-1m", "--requests", "6",
                           "--qps", "0", "--max-concurrency", "1", *common, expect=1)
            check("6 failed: 6 × HTTP 401" in json.dumps(rows[0], ensure_ascii=False), f"not each request failed: {rows[0]}")
            print("load_test: a refusing server: the row failed, naming HTTP 401", flush=True)

            # JSON Schema requests: every answer checked by our validator, not only parsed.
            schema = f"{tmp}/schema.json"
            json.dump({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}, "ok": {"type": "boolean"}},
                       "required": ["n", "ok"], "additionalProperties": False}, open(schema, "w"))
            rows, m = load(binary, f"{tmp}/s", "--endpoint", plain.url, "--requests", "6", "--qps", "0", "--set",
                           f"response_schema={schema}", "--weights", model, "--prompt-len", "24", "--output-len", "48")
            check(m["completed"] == 6 and m["valid"] == 100.0 and m["parsed"] == 100.0, f"schema answers: {m}")
            check("valid documents by our validator" in rows[0]["message"], f"note: {rows[0]['message']}")
            print("load_test: 6 of 6 response_format answers valid by our validator", flush=True)

            # Prompts from ShareGPT conversations, arrivals and shared prompt blocks from a Mooncake
            # trace, a duration bound: the server counted every prompt token sent.
            words = "the cat sat on a mat and then it ran over the hill to see what was there".split()
            convs = [{"id": str(i), "conversations": [{"from": "human", "value": " ".join(words[: 4 + i % 12])},
                                                      {"from": "gpt", "value": " ".join(words[: 5 + i % 7])}]} for i in range(10)]
            convs.append({"id": "x", "conversations": [{"from": "gpt", "value": "no user turn"}]})
            json.dump(convs, open(f"{tmp}/sharegpt.json", "w"), indent=2)
            rows, m = load(binary, f"{tmp}/ds", "--endpoint", plain.url, "--requests", "8", "--qps", "20", "--set",
                           f"dataset={tmp}/sharegpt.json", *common)
            check(rows[0]["validation"]["ok"] and m["completed"] == 8, f"dataset: {rows[0]['validation']} {m}")
            check("prompts from" in rows[0]["message"] and "1 without an answered user turn" in rows[0]["message"],
                  f"dataset note: {rows[0]['message']}")
            with open(f"{tmp}/trace.jsonl", "w") as f:
                for i in range(8):
                    f.write(json.dumps({"timestamp": 1000 + 50 * i, "input_length": 300, "output_length": 3 + i % 3,
                                        "hash_ids": [7, 8, 9 + i]}) + "\n")
            rows, m = load(binary, f"{tmp}/tr", "--endpoint", cached.url, "--requests", "100", "--set",
                           f"trace={tmp}/trace.jsonl", "--set", "trace_block=128", "--max-concurrency", "1", *common)
            check(rows[0]["validation"]["ok"] and m["completed"] == 8, f"trace: {rows[0]['validation']} {m}")
            # Blocks 7 and 8 (256 of 300 tokens) are every request's: all but the first request's hit.
            check(m.get("prefix hit", 0) > 70, f"trace blocks shared no prefix: {m}")
            check("8 with its shared 128-token prompt blocks" in rows[0]["message"], f"trace note: {rows[0]['message']}")
            # Past its listed blocks a prompt is its own: two requests naming block 1 share its 128 tokens only.
            with open(f"{tmp}/own.jsonl", "w") as f:
                for t in (0, 10):
                    f.write(json.dumps({"timestamp": t, "input_length": 300, "output_length": 2, "hash_ids": [1]}) + "\n")
            rows, m = load(binary, f"{tmp}/own", "--endpoint", cached.url, "--set", f"trace={tmp}/own.jsonl", "--set",
                           "trace_block=128", "--max-concurrency", "1", *common)
            check(abs(m.get("prefix hit", 0) - 100 * 128 / 600) < 0.5, f"past the listed blocks: {m.get('prefix hit')}% hit")
            rows, m = load(binary, f"{tmp}/du", "--endpoint", plain.url, "--requests", "100", "--qps", "20", "--set",
                           "arrival=constant", "--set", "duration=0.5s", *common)
            check(m["completed"] == 10 and "cut at 0.5 s: 10 of 100 requests sent" in rows[0]["message"],
                  f"duration: {m['completed']} {rows[0]['message']}")
            r = subprocess.run([binary, "load", SPEC, "-q", "-o", f"{tmp}/bad", "--endpoint", plain.url, "--set",
                                f"trace={tmp}/sharegpt.json", *common], capture_output=True, text=True, timeout=60)
            check(r.returncode == 2 and r.stderr.count("\n") == 1 and "trace: " in r.stderr and "sharegpt.json:1:" in r.stderr
                  and not os.path.exists(f"{tmp}/bad"), f"a bad trace: exit {r.returncode}: {r.stderr}")
            print("load_test: dataset prompts, trace arrivals with shared blocks, a duration bound", flush=True)

            # Warm-up passes: sent (the server counts them), not measured (the row counts one pass).
            before = served(plain.url)
            rows, m = load(binary, f"{tmp}/wu", "--endpoint", plain.url, "--requests", "5", "--qps", "0", "--warmup", "2",
                           *common)
            check(served(plain.url) - before == 15 and m["completed"] == 5 and "after 2 unmeasured warm-up passes" in
                  rows[0]["message"], f"warm-up: {served(plain.url) - before} requests served, {m['completed']} measured")

            # Two shards from a common start, merged, equal one unsharded client's load.
            whole, parts = f"{tmp}/whole.json", [f"{tmp}/s0.json", f"{tmp}/s1.json"]
            load(binary, f"{tmp}/c", "--endpoint", plain.url, "--requests", "12", "--qps", "20", "--set", f"save_result={whole}",
                 *common)
            start = time.time() + 3.0
            procs = [subprocess.Popen([binary, "load", SPEC, "-q", "-o", f"{tmp}/d{i}", "--endpoint", plain.url, "--requests", "12",
                                       "--qps", "20", "--set", f"shard={i}/2", "--set", f"start_at={start}", "--set",
                                       f"save_result={parts[i]}", *common], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True) for i in range(2)]
            for p in procs:
                _, err = p.communicate(timeout=240)
                check(p.returncode == 0, f"a shard exited {p.returncode}: {err[-500:]}")
            merged = f"{tmp}/merged.json"
            r = subprocess.run([binary, "merge", *parts, "-o", merged], capture_output=True, text=True, timeout=60)
            check(r.returncode == 0 and "| 12 | 12 | 0 |" in r.stdout, f"merge: exit {r.returncode}: {r.stdout}{r.stderr}")
            a, b = json.load(open(whole)), json.load(open(merged))
            check(b["num_prompts"] == a["num_prompts"] == 12, f"requests: {b['num_prompts']} vs {a['num_prompts']}")
            sa = [q["scheduled"] for q in a["infer_bench"]["requests"]]
            sb = [q["scheduled"] for q in b["infer_bench"]["requests"]]
            check(all(abs(x - y) < 0.05 for x, y in zip(sa, sb)), f"arrivals differ: {sa} vs {sb}")
            check(b["input_lens"] == a["input_lens"], "prompt lengths differ")
            r = subprocess.run([binary, "merge", parts[0]], capture_output=True, text=True, timeout=60)
            check(r.returncode == 2 and "shard 1/2 is missing" in r.stderr, f"a missing shard: exit {r.returncode} {r.stderr}")
            print("load_test: two shards merged = the unsharded load (12 requests, the same arrivals)", flush=True)

            # Paired A/B: prefix caching on against off, the same requests in turns.
            rows, m = load(binary, f"{tmp}/e", "--endpoint", cached.url, "--set", f"baseline_endpoint={plain.url}", "--set",
                           "variants=[paired]", "--requests", "12", "--qps", "10", "--set", "system_prompt=400",
                           "--min-samples", "2", *common)
            check(m["same text"] == 100.0, f"greedy texts differ with prefix caching: {m['same text']}%")
            check(m["ttft p50 × lo"] <= m["ttft p50 ×"] <= m["ttft p50 × hi"], f"interval: {m}")
            check(m.get("prefix hit", 0) > 50, f"the server's counters show no prefix hits: {m}")
            check("ttft p50" in rows[0]["message"] and ("faster" in rows[0]["message"] or "same" in rows[0]["message"]),
                  f"no verdict in the note: {rows[0]['message']}")
            print(f"load_test: paired prefix caching on/off: ttft p50 {m['ttft p50 ×']:.2f}x "
                  f"[{m['ttft p50 × lo']:.2f}, {m['ttft p50 × hi']:.2f}], {m['prefix hit']:.0f}% hit", flush=True)
            speculating(binary, model, tmp, common)
            chat(binary, src, tmp)
            known_latencies(binary, src, tmp)
        finally:
            for s in (plain, keyed, cached):
                s.stop()
    print("load_test: all passed", flush=True)


def speculating(binary, model, tmp, common):
    """A server that speculates (the model drafting for itself): the row reports the drafted tokens
    kept, from the server's own vllm:spec_decode_* counters, as it would for vLLM."""
    spec = Server(binary, model, "--speculative-config", json.dumps({"model": model, "num_speculative_tokens": 3}))
    try:
        rows, m = load(binary, f"{tmp}/spec", "--endpoint", spec.url, "--requests", "6", "--qps", "0", *common)
        check(m["completed"] == 6 and 0 < m.get("draft kept", 0) <= 100, f"draft kept: {m}")
        check("speculative decoding by the server's own counters" in rows[0]["message"], f"note: {rows[0]['message']}")
        print(f"load_test: a speculating server: {m['draft kept']:.0f}% of drafted tokens kept, by its counters", flush=True)
    finally:
        spec.stop()


def known_latencies(binary, src, tmp):
    """Against scripts/paced-server (each answer's first token 100 ms after the request, then one per
    20 ms) the client measures what the server did: TTFT and E2E no less than its schedule (and not
    far past it), TPOT its 20 ms (E2E - TTFT over the tokens after the first: over all 16 it would
    read 18.75)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    paced = subprocess.Popen([sys.executable, os.path.join(src, "scripts/paced-server"), str(port), "--ttft", "100", "--itl",
                              "20"])
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        rows, m = load(binary, f"{tmp}/paced", "--endpoint", url, "--weights", os.path.join(src, "data/models/ib-draft-1m"),
                       "--requests", "12", "--qps", "8", "--prompt-len", "16", "--output-len", "16")
        check(m["completed"] == 12 and 100 <= m["ttft p50"] < 160, f"TTFT against a 100 ms server: {m}")
        check(19.3 <= m["tpot p50"] <= 22, f"TPOT against a 20 ms server: {m['tpot p50']}")
        check(400 <= m["e2e p50"] < 480, f"E2E against a 400 ms server: {m['e2e p50']}")
        print(f"load_test: a server of known latencies: TTFT p50 {m['ttft p50']:.1f} ms (100), TPOT {m['tpot p50']:.2f} (20), "
              f"E2E {m['e2e p50']:.1f} (400)", flush=True)
    finally:
        paced.kill()
        paced.wait()


def chat(binary, src, tmp):
    """Chat prompts fitted to their length under SmolLM2's own chat template, and checked against the
    server's count: exact on a server using that template, off on one with another."""
    gguf = os.path.join(src, "data/models/smollm2-135m-instruct-q4_1.gguf")
    if not os.path.exists(gguf):
        print("load_test: chat lengths skipped: no SmolLM2 GGUF (scripts/get-models)", flush=True)
        return
    own = Server(binary, gguf)
    other = Server(binary, gguf, "--chat-template", "{role}: {content}\n")
    try:
        args = ["--weights", gguf, "--api", "chat", "--requests", "4", "--qps", "0", "--prompt-len", "80", "--output-len", "2"]
        rows, m = load(binary, f"{tmp}/chat", "--endpoint", own.url, *args)
        v = rows[0]["validation"]
        check(v["ok"] and v["value"] == 0 and "4 of 4 chat prompts counted by the server as the checkpoint's chat template"
              in v["detail"] and "every prompt fitted" in v["detail"], f"chat lengths: {v}")
        rows, m = load(binary, f"{tmp}/chat2", "--endpoint", other.url, *args, expect=1)
        v = rows[0]["validation"]
        check(not v["ok"] and v["value"] == 4 and "0 of 4 chat prompts" in v["detail"], f"another template: {v}")
        r = subprocess.run([binary, "load", SPEC, "-q", "-o", f"{tmp}/chat3", "--endpoint", own.url, *args[:-4],
                            "--prompt-len", "10"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "leaves no room for a message" in r.stderr, f"a prompt_len below the template: {r.stderr}")
        print("load_test: chat prompts exactly their length under the checkpoint's template; another template is off",
              flush=True)
    finally:
        own.stop()
        other.stop()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2])
