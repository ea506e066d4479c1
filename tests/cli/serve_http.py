"""What the serve tests share (tests/cli/serve_test.py, serve_faults_test.py, serve_openai_test.py;
load_test.py its checks): `infer-bench serve` on a free port, checks that end a test with its
reason, server-sent events, and requests sent byte for byte over a socket."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading

SKIP = 77  # ctest's SKIP_RETURN_CODE


def fail(msg):
    print(f"{os.path.splitext(os.path.basename(sys.argv[0]))[0]}: FAILED: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Server:
    def __init__(self, binary, model, *extra):
        self.p = subprocess.Popen([binary, "serve", model, "--port", "0", "--max-seqs", "4", "--token-budget", "64",
                                   "--long-prefill", "32", *extra], stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if not m:
            self.p.kill()
            fail(f"the server did not print its address: {line!r} {self.p.stderr.read()!r}")
        self.port = int(m.group(1))
        self.err = []
        threading.Thread(target=lambda: self.err.extend(self.p.stderr), daemon=True).start()

    def request(self, method, path, body=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request(method, path, body=None if body is None else (body if isinstance(body, str) else json.dumps(body)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
        c.close()
        return r.status, data

    def json(self, method, path, body=None):
        status, data = self.request(method, path, body)
        return status, json.loads(data) if data else None

    def metrics(self):
        _, text = self.request("GET", "/metrics")
        out = {}
        for line in text.splitlines():
            m = re.match(r"infer_bench_(\w+)\{[^}]*\} (\S+)", line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                return self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                fail("the server did not exit within 60 s of SIGINT")
        return self.p.returncode


def sse_events(resp):
    """The `data:` payloads of a server-sent-event stream, as they arrive."""
    for raw in resp:
        line = raw.decode().rstrip("\r\n")
        if line.startswith("data: "):
            yield line[6:]



def raw(port, data, timeout=60, close_write=False):
    """Sends `data` (bytes) as it is and reads the answer to the end: (status, headers, body).
    `close_write`: then ends the sending side, as a client that sent all it will does (the server
    sees the end of a cut request at once instead of waiting out its read timeout)."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as c:
        try:
            c.sendall(data)
            if close_write:
                c.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # refused before the body was read: its answer follows
        got = b""
        while True:
            try:
                part = c.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not part:
                break
            got += part
            head, sep, body = got.partition(b"\r\n\r\n")
            if sep:
                length = re.search(rb"(?im)^content-length: *(\d+)", head)
                if length and len(body) >= int(length.group(1)):
                    break
    head, _, body = got.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d+)", head)
    return (int(m.group(1)) if m else 0), head.decode("latin-1"), body


def post(path, body, content_type=b"application/json", extra=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: " + content_type +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)
