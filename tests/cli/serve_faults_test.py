#!/usr/bin/env python3
"""#48: `infer-bench serve` against hostile, careless and slow clients.

serve_faults_test.py BINARY SOURCE_DIR

Malformed requests (bytes that are not UTF-8, nesting 15,000 deep, numbers past double, foreign
origins and hosts, bodies past the limit, chunked and gzip bodies, an empty language) each answered
with a 4xx whose body is OpenAI's error object; an unsatisfiable constraint fails alone; requests
past --max-concurrent-requests get 429 with Retry-After; 300 fuzzed requests leave the server alive
and idle; Ctrl-C ends streams with [DONE]; slowloris clients are cut at --receive-deadline and a
request whose client has gone is cancelled.
"""
import http.client
import json
import os
import re
import sys
import threading
import time

from serve_http import Server, check, fail, post, raw, sse_events


def hostile(binary, src):
    """#48: what hostile and careless clients send is answered with a 4xx whose body is valid JSON,
    one request never fails another, limits hold, and after a few hundred fuzzed requests the
    server is alive, answers /health and is idle."""
    import random
    model = os.path.join(src, "data/models/ib-draft-1m")
    s = Server(binary, model, "--max-body-bytes", "200000", "--max-concurrent-requests", "6", "--shutdown-grace", "1",
               "--read-timeout", "1")
    try:
        ok = json.dumps({"model": "ib-draft-1m", "prompt": "x = 1", "max_tokens": 4}).encode()
        deep = b'{"model": "ib-draft-1m", "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": ' + \
            b'{"not": ' * 15000 + b"{}" + b"}" * 15000 + b"}}}"
        cases = [
            ("a path with the byte 0xFF", b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 404),
            ("a request line that is not UTF-8", b"G\xc3T /\xc3( HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", None),
            ("a schema nested 15,000 deep", post(b"/v1/completions", deep), 400),
            ("invalid UTF-8 in a string", post(b"/v1/completions", b'{"model": "ib-draft-1m", "prompt": "a\xff\xfeb"}'), 400),
            ("a number 1e400", post(b"/v1/completions", b'{"model": "ib-draft-1m", "prompt": "x", "max_tokens": 1e400}'), 400),
            ("text/plain from another origin", post(b"/v1/completions", ok, b"text/plain", b"Origin: http://evil.example\r\n"), 403),
            ("text/plain", post(b"/v1/completions", ok, b"text/plain"), 415),
            ("a foreign Host (DNS rebinding)", post(b"/v1/completions", ok).replace(b"Host: 127.0.0.1", b"Host: evil.example"), 403),
            ("a body past --max-body-bytes", post(b"/v1/completions", b'{"prompt": "' + b"a" * 300000 + b'"}'), 413),
            ("a chunked body", b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: "
                               b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n0\r\n\r\n", 411),
            ("a gzip body", post(b"/v1/completions", ok, extra=b"Content-Encoding: gzip\r\n"), 415),
            ("an empty language", post(b"/v1/completions", json.dumps({
                "model": "ib-draft-1m", "prompt": "x", "max_tokens": 8, "response_format": {"type": "json_schema", "json_schema": {
                    "name": "e", "schema": {"allOf": [{"type": "string"}, {"type": "integer"}]}}}}).encode()), 400),
        ]
        for what, data, want in cases:
            status, head, body = raw(s.port, data)
            check(s.p.poll() is None, f"{what}: the server died ({''.join(s.err)[-400:]})")
            check(400 <= status < 500 and (want is None or status == want), f"{what}: {status} (want {want}) {body[:200]!r}")
            if body:
                try:
                    err = json.loads(body)["error"]
                except (ValueError, KeyError):
                    fail(f"{what}: the error body is not OpenAI's error object: {body[:200]!r}")
                check(err["message"] and "exception" not in err["message"], f"{what}: {err}")

        # An unsatisfiable constraint sent beside four ordinary requests fails alone.
        got = {}
        def ask(i, schema):
            body = {"model": "ib-draft-1m", "prompt": f"y = {i}", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
            if schema:
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "e", "schema": schema}}
            got[i] = s.request("POST", "/v1/completions", body)
        threads = [threading.Thread(target=ask, args=(i, {"type": "array", "items": False, "minItems": 1} if i == 2 else None))
                   for i in range(5)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        check(got[2][0] == 400 and all(got[i][0] == 200 for i in (0, 1, 3, 4)), f"one empty language among five: {got}")

        # Past --max-concurrent-requests: 429 with Retry-After, the others served.
        statuses, retry = [], []
        def long(i):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
            c.request("POST", "/v1/completions", json.dumps({"model": "ib-draft-1m", "prompt": f"z{i}", "max_tokens": 300,
                                                             "ignore_eos": True}), {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            statuses.append(r.status)
            retry.append(r.getheader("Retry-After"))
            c.close()
        threads = [threading.Thread(target=long, args=(i,)) for i in range(12)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        check(statuses.count(429) >= 1 and statuses.count(200) >= 6 and set(statuses) <= {200, 429}
              and all(r == "1" for st, r in zip(statuses, retry) if st == 429), f"12 at once past a limit of 6: {statuses}")

        # Fuzzed requests: byte edits of real requests, paths and headers.
        rng = random.Random(48)
        seeds = [post(b"/v1/completions", ok), post(b"/v1/chat/completions", json.dumps({
                     "model": "ib-draft-1m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                     "response_format": {"type": "json_object"}}).encode()),
                 b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                 post(b"/tokenize", b'{"model": "ib-draft-1m", "prompt": "abc"}')]
        pieces = [b"\xff", b"\x00", b"\r\n", b"{", b"[", b"1e400", b'"', b"\\ud800", b"-", b"99999999999999999999", b"%00", b"/.."]
        for i in range(300):
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                at = rng.randrange(len(data))
                op = rng.randrange(3)
                if op == 0:
                    data[at] = rng.randrange(256)
                elif op == 1:
                    data[at:at] = rng.choice(pieces)
                else:
                    del data[at:at + rng.randint(1, 8)]
            # Most keep a true Content-Length and end their sending side; a few (a false length, the
            # connection left open) wait out --read-timeout, 1 s here.
            head, sep, body = bytes(data).partition(b"\r\n\r\n")
            silent = not sep or rng.random() < 0.03
            if not silent:
                data = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: " + str(len(body)).encode(), head) + sep + body
            status, _, _ = raw(s.port, bytes(data), timeout=30, close_write=not silent or i % 4 != 0)
            check(s.p.poll() is None, f"fuzzed request {i} killed the server: {bytes(data)[:200]!r}")
            check(status != 500, f"fuzzed request {i}: 500 for {bytes(data)[:200]!r}")
        status, _ = s.request("GET", "/health")
        check(status == 200, f"/health after the fuzzing: {status}")
        deadline = time.time() + 30
        while time.time() < deadline:
            m = s.metrics()
            if m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0 and m["kv_reserved_tokens"] == 0:
                break
            time.sleep(0.1)
        check(m["num_requests_running"] == 0 and m["num_requests_waiting"] == 0 and m["kv_reserved_tokens"] == 0,
              f"not idle after the fuzzing: {m}")

        # Ctrl-C past the grace period (1 s): streams in flight end with an event and [DONE].
        ends = []
        def stream(i):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            c.request("POST", "/v1/completions", json.dumps({"model": "ib-draft-1m", "prompt": f"w{i}", "max_tokens": 100000 // 64,
                                                             "ignore_eos": True, "stream": True}), {"Content-Type": "application/json"})
            ends.append(list(sse_events(c.getresponse()))[-2:])
            c.close()
        threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
        [t.start() for t in threads]
        deadline = time.time() + 30
        while time.time() < deadline and s.metrics()["num_requests_running"] < 3:
            time.sleep(0.05)
        started = time.time()
        code = s.stop()
        [t.join(timeout=60) for t in threads]
        check(code == 130 and time.time() - started < 15, f"exit {code} after {time.time() - started:.1f} s")
        check(len(ends) == 3 and all(e and e[-1] == "[DONE]" for e in ends), f"streams at Ctrl-C ended with {ends}")
    finally:
        if s.p.poll() is None:
            s.p.kill()


def slow_and_gone_clients(binary, src):
    """#48: clients that trickle a request a byte at a time, each byte inside the read timeout
    (slowloris), are cut at --receive-deadline and cannot keep /health from being answered; a
    non-streamed request whose client has gone away is cancelled, not generated to its end; Ctrl-C
    does not wait for slow clients."""
    import socket
    model = os.path.join(src, "data/models/ib-draft-1m")
    s = Server(binary, model, "--http-threads", "2", "--read-timeout", "1", "--receive-deadline", "2", "--shutdown-grace", "1")
    try:
        cut = []
        def trickle(i, seconds):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=0.3)
            start = time.time()
            for b in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
                if time.time() - start > seconds:
                    break
                try:
                    c.send(bytes([b]))
                    if c.recv(1) == b"":
                        cut.append(time.time() - start)
                        break
                except socket.timeout:
                    pass
                except OSError:
                    cut.append(time.time() - start)
                    break
            c.close()
        slow = [threading.Thread(target=trickle, args=(i, 30)) for i in range(6)]
        [t.start() for t in slow]
        time.sleep(0.5)
        started = time.time()
        status, _ = s.request("GET", "/health", timeout=30)
        took = time.time() - started
        [t.join() for t in slow]
        # Six slow clients on two threads: two cut at 2 s, then two a second for the queued ones.
        check(status == 200 and took < 10, f"/health behind 6 slow clients on 2 threads: {status} after {took:.1f} s")
        check(len(cut) == 6 and max(cut) < 10, f"slow clients cut after {cut} s (deadline 2 s)")
        m = s.metrics()
        check(m["http_connections_cut_total"] == 6, f"connections cut: {m['http_connections_cut_total']}")

        # Three non-streamed requests of 1,500 tokens each, their clients gone after 0.2 s.
        before = s.metrics()
        def gone(i):
            body = json.dumps({"model": "ib-draft-1m", "prompt": f"g{i}", "max_tokens": 1500, "ignore_eos": True}).encode()
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(post(b"/v1/completions", body).replace(b"Connection: close\r\n", b""))
            time.sleep(0.2)
            c.close()
        threads = [threading.Thread(target=gone, args=(i,)) for i in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        # Until all three have ended: the third may still wait for one of the two connection threads
        # (under the sanitizers, past the moment the first two have left the engine).
        def ended(m):
            return (m["requests_cancelled_total"] - before["requests_cancelled_total"]
                    + m["requests_finished_total"] - before["requests_finished_total"])
        deadline = time.time() + 30
        while time.time() < deadline and (ended(m := s.metrics()) < 3
                                          or m["num_requests_running"] + m["num_requests_waiting"] > 0):
            time.sleep(0.05)
        idle = time.time() - deadline + 30
        check(m["requests_cancelled_total"] - before["requests_cancelled_total"] == 3
              and m["requests_finished_total"] == before["requests_finished_total"],
              f"3 requests whose clients went away: cancelled {m['requests_cancelled_total']}, finished "
              f"{m['requests_finished_total']} (before {before['requests_cancelled_total']}, "
              f"{before['requests_finished_total']}); idle {idle:.1f} s after")

        # Ctrl-C with slow clients connected: they do not hold the exit.
        slow = [threading.Thread(target=trickle, args=(i, 20)) for i in range(3)]
        [t.start() for t in slow]
        time.sleep(0.5)
        started = time.time()
        code = s.stop()
        check(code == 130 and time.time() - started < 5, f"Ctrl-C with slow clients: exit {code} after "
              f"{time.time() - started:.1f} s")
        [t.join() for t in slow]
    finally:
        if s.p.poll() is None:
            s.p.kill()


def main(binary, src):
    hostile(binary, src)
    slow_and_gone_clients(binary, src)
    print("serve_faults_test: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2])
