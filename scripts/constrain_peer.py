#!/usr/bin/env python3
"""XGrammar or llguidance on one JSON Schema and vocabulary: the `xgrammar` and `llguidance` peer
rows of infer-bench's constrain-compile and constrain-mask kinds.

infer-bench runs this file (compiled into the binary, so it travels with it) as
`PYTHON -c SCRIPT ARGS` once per row, with --input naming a JSON file it wrote:
    {"schema": TEXT, "whitespace": "compact" | "flexible", "strict_properties": BOOL,
     "vocab": {"name": ..., "eos": ID, "tokens": [HEX, ...], "special": [ID, ...], "preferred": [ID, ...]},
     "documents": [[ID, ...], ...], "mask_steps": [[DOC, STEP], ...],
     "walks": N, "walk_tokens": N, "seed": N}
`tokens` are infer-bench's own token bytes (hex, "" for special and unused ids), so the peer sees
exactly its ids and bytes, EOS included; `preferred` names, where several ids spell one byte string,
the one infer-bench's tokeniser emits; `documents` are random valid documents of infer-bench's
DFA, tokenised by its greedy tokeniser, the very sequences its constrain-mask rows walk.

The peer is built on those bytes (XGrammar: TokenizerInfo over the raw bytes, EOS the stop token;
llguidance: LLTokenizer over a TokenizerWrapper with those bytes, whose tokenize callback is the
same greedy longest match, used by llguidance for the canonical tokens of forced bytes). Then:

- check (never timed): each document walked with a fresh matcher: at every step the mask is
  filled and the target token's bit read, then the token accepted; at the end EOS's bit, then EOS
  accepted. The masks of `mask_steps` are returned whole (hex of the little-endian uint32 words),
  for infer-bench to compare with its DFA's. `walks` random walks under the peer's mask (seeded;
  a closing token (one holding '"', '}', ']' or ',') is picked half the time, EOS half the time
  where allowed, at most `walk_tokens` tokens) return their text for infer-bench's validator.
  Only if every target token and every final EOS was allowed are the timings taken;
- compile (--mode compile): one sample = the schema to a ready matcher. XGrammar:
  GrammarCompiler.compile_json_schema (the grammar and its adaptive token-mask cache, on --threads
  threads, the compiler's cache off) + GrammarMatcher. llguidance: grammar_from_json_schema +
  LLMatcher (lexer and parser; llguidance computes masks at each step, so none is built here).
  The tokenizer (TokenizerInfo / LLTokenizer) is built once per process, untimed, as infer-bench's
  vocabulary trie is;
- mask (--mode mask): one sample = every document decoded once: a fresh matcher per document
  (built untimed: one per request, as serving engines do), then per step the mask filled into the
  bitmask and the document's token accepted, each step timed with perf_counter_ns (the step after
  the last token fills the mask only, as infer-bench's rows do). The per-step mean, p50 and p99 are
  computed as infer-bench's stats do (linear interpolation between order statistics); the Python
  cost of a timed step around two no-op calls is reported as py_overhead_us.

Samples are taken until infer-bench's stopping rule holds. It prints exactly one JSON line on
stdout, whatever happens:
    {"status": "ok" | "unsupported" | "failed", "reason": ..., "peer": ..., "peer_version": ...,
     "check": {"documents": [{"steps": "1101...", "eos": BOOL, "accepted": BOOL, "error": ...}],
               "masks": [{"doc": D, "step": S, "words": HEX}], "walks": [{"text": HEX, "finished": BOOL}]},
     "samples_ms": [...], "stop_reason": ..., "metrics": {...}, "note": ...}
A missing package, or a schema the peer refuses, is "unsupported" with the reason in one line.
"""

import argparse
import json
import math
import random
import sys
import time

RESULT_VERSION = 1


def parse_args(argv):
    p = argparse.ArgumentParser(prog="constrain_peer.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", choices=["xgrammar", "llguidance"], required=True)
    p.add_argument("--mode", choices=["compile", "mask"], default="compile")
    p.add_argument("--input", required=True, help="the JSON file infer-bench wrote (schema, vocabulary, documents)")
    p.add_argument("--threads", type=int, default=0, help="XGrammar's compile threads (0 = its default, 8)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-samples", type=int, default=10)
    p.add_argument("--min-time", type=float, default=0.25, help="seconds of measured time at least")
    p.add_argument("--max-noise", type=float, default=0.01, help="stop when the relative stdev is at most this")
    p.add_argument("--timeout", type=float, default=10.0, help="wall-clock cap on the measurement (s)")
    return p.parse_args(argv)


def emit(result):
    result.setdefault("version", RESULT_VERSION)
    sys.stdout.write(json.dumps(result, allow_nan=False) + "\n")
    sys.stdout.flush()


def one_line(text, limit=400):
    first = next((line for line in str(text).splitlines() if line.strip()), "")
    first = " ".join(first.split())
    return first if len(first) <= limit else first[:limit - 3] + "..."


class StoppingRule:
    """infer-bench's rule (as in torch_sdpa_peer.py): at least min_samples and min_time of
    measured time, then stop at a relative stdev <= max_noise, or when the noise estimate settled
    (it moved by under 10% of itself over the last window of max(20, n/5) samples), or at the
    wall-clock timeout."""

    def __init__(self, a):
        self.a = a
        self.n, self.mean, self.m2, self.measured = 0, 0.0, 0.0, 0.0
        self.history = []
        self.reason = ""

    def noise(self):
        if self.n < 2 or self.mean == 0:
            return 0.0
        return math.sqrt(self.m2 / (self.n - 1)) / self.mean

    def add(self, x, wall):
        self.n += 1
        self.measured += x
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        nz = self.noise()
        self.history.append(nz)
        a = self.a
        enough_samples, enough_time = self.n >= a.min_samples, self.measured >= a.min_time
        if enough_samples and enough_time:
            if nz <= a.max_noise:
                self.reason = "noise %.2f%% <= %.2f%%" % (nz * 100, a.max_noise * 100)
                return True
            window = max(20, self.n // 5)
            if self.n >= 2 * window:
                recent = self.history[-window:]
                if nz > 0 and max(recent) - min(recent) <= 0.10 * nz:
                    self.reason = "noise settled at %.2f%%" % (nz * 100)
                    return True
        if wall >= a.timeout:
            if not enough_samples:
                unmet = "min_samples %d of %d" % (self.n, a.min_samples)
            elif not enough_time:
                unmet = "min_time %.3g s of %.3g s" % (self.measured, a.min_time)
            else:
                unmet = "max_noise %.2f%% > %.2f%%" % (nz * 100, a.max_noise * 100)
            self.reason = "timeout %.3g s (unmet: %s)" % (a.timeout, unmet)
            return True
        return False


def percentile_sorted(s, q):
    """lib/core/stats.cpp's percentile: linear interpolation between order statistics."""
    if not s:
        return 0.0
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Refused(Exception):
    """The peer refused the schema: an unsupported row, not a failure."""


class Vocab:
    def __init__(self, v):
        self.name = v.get("name", "?")
        self.tokens = [bytes.fromhex(t) for t in v["tokens"]]
        self.size = len(self.tokens)
        self.eos = int(v["eos"])
        self.special = sorted(set(int(i) for i in v.get("special", [])) | {self.eos})
        self.ids = {}
        for i, t in enumerate(self.tokens):
            if t and t not in self.ids:
                self.ids[t] = i
        for i in v.get("preferred", []):  # the id infer-bench's tokeniser emits for a string spelt by several
            self.ids[self.tokens[int(i)]] = int(i)
        self.longest = max((len(t) for t in self.tokens), default=1)

    def greedy(self, data):
        """Longest-match tokenisation (every single byte is a token in infer-bench's vocabularies)."""
        out, p = [], 0
        while p < len(data):
            for n in range(min(self.longest, len(data) - p), 0, -1):
                t = self.ids.get(bytes(data[p:p + n]))
                if t is not None:
                    out.append(t)
                    p += n
                    break
            else:
                p += 1  # a byte no token spells: skipped
        return out


class Peer:
    """What both peers do for the check and the timings, over one bitmask row (numpy int32)."""

    def __init__(self, np, vocab):
        self.np = np
        self.vocab = vocab
        self.words = (vocab.size + 31) // 32
        self.bitmask = np.full((1, self.words), -1, dtype=np.int32)

    def allowed(self, token):
        return (int(self.bitmask[0, token >> 5]) >> (token & 31)) & 1 == 1

    def allowed_tokens(self):
        np = self.np
        bits = np.unpackbits(self.bitmask.view(np.uint8), bitorder="little")[: self.vocab.size]
        return np.flatnonzero(bits)

    def mask_hex(self):
        return self.bitmask.astype("<i4").tobytes().hex()


class XGrammar(Peer):
    def __init__(self, mod, np, vocab, a, opts):
        super().__init__(np, vocab)
        self.xgr = mod
        self.version = package_version("xgrammar", mod)
        self.opts = opts
        self.info = mod.TokenizerInfo(vocab.tokens, mod.VocabType.RAW, vocab_size=vocab.size, stop_token_ids=[vocab.eos])
        kw = {"cache_enabled": False}
        if a.threads > 0:
            kw["max_threads"] = a.threads
        self.threads = a.threads if a.threads > 0 else 8
        self.compiler = mod.GrammarCompiler(self.info, **kw)

    def describe(self):
        return "xgrammar %s: compile = compile_json_schema + GrammarMatcher (%d threads, no cache)" % (self.version, self.threads)

    def compile(self, schema):
        flexible = self.opts["whitespace"] == "flexible"
        kw = {"any_whitespace": flexible, "strict_mode": self.opts["strict_properties"]}
        if flexible:
            kw["max_whitespace_cnt"] = 2
        else:
            kw["separators"] = (",", ":")
        try:
            compiled = self.compiler.compile_json_schema(schema, **kw)
        except Exception as e:  # noqa: BLE001 - XGrammar raises RuntimeError/ValueError on schemas it does not take
            raise Refused("xgrammar %s refused the schema: %s: %s" % (self.version, type(e).__name__, one_line(e)))
        matcher = self.xgr.GrammarMatcher(compiled)
        return compiled, matcher

    def matcher(self, compiled):
        return self.xgr.GrammarMatcher(compiled[0])

    def fill(self, m):
        m.fill_next_token_bitmask(self.bitmask)

    def accept(self, m, token):
        return m.accept_token(token)

    def finished(self, m):
        return m.is_terminated()

    def error(self, m):
        return ""

    def extra_metrics(self, compiled):
        try:
            return {"index_mb": compiled[0].memory_size_bytes / 1e6}
        except Exception:  # noqa: BLE001 - only a metric is lost
            return {}


class _Wrapper:
    """llguidance's TokenizerWrapper protocol over infer-bench's token bytes."""

    def __init__(self, vocab):
        self.eos_token_id = vocab.eos
        self.bos_token_id = None
        self.tokens = vocab.tokens
        self.special_token_ids = vocab.special
        self.is_tokenizer_wrapper = True
        self._vocab = vocab

    def __call__(self, text):
        return self._vocab.greedy(text.encode("utf-8") if isinstance(text, str) else text)


class LLGuidance(Peer):
    def __init__(self, mod, np, vocab, a, opts):
        super().__init__(np, vocab)
        self.llg = mod
        self.version = package_version("llguidance", mod)
        self.tokenizer = mod.LLTokenizer(_Wrapper(vocab), n_vocab=vocab.size, eos_token=vocab.eos)
        flexible = opts["whitespace"] == "flexible"
        # JSON's escapes: every \uXXXX, not only those of control characters (llguidance's default).
        self.options = {"item_separator": ",", "key_separator": ":", "whitespace_flexible": flexible,
                        "json_allow_general_unicode_escapes": True}
        if flexible:
            self.options["whitespace_pattern"] = r"[\x20\x0A\x09]{1,2}"  # infer-bench's: up to 2 of space/newline/tab
        self.ptr = self.bitmask.ctypes.data
        self.nbytes = self.bitmask.nbytes
        self.strict = opts["strict_properties"]

    def describe(self):
        note = "llguidance %s: compile = grammar_from_json_schema + LLMatcher (masks at each step)" % self.version
        if self.strict:
            note += "; no strict mode: undeclared keys allowed where the schema has no additionalProperties"
        return note

    def compile(self, schema):
        try:
            grammar = self.llg.LLMatcher.grammar_from_json_schema(schema, defaults=self.options)
        except Exception as e:  # noqa: BLE001
            raise Refused("llguidance %s refused the schema: %s: %s" % (self.version, type(e).__name__, one_line(e)))
        matcher = self.llg.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise Refused("llguidance %s refused the schema: %s" % (self.version, one_line(matcher.get_error())))
        return grammar, matcher

    def matcher(self, compiled):
        return self.llg.LLMatcher(self.tokenizer, compiled[0], log_level=0)

    def fill(self, m):
        # What llguidance.numpy.fill_next_token_bitmask does, without its per-call checks.
        m.unsafe_compute_mask_ptr(self.ptr, self.nbytes)

    def accept(self, m, token):
        return m.consume_token(token)

    def finished(self, m):
        return m.is_stopped() and not m.is_error()

    def error(self, m):
        return one_line(m.get_error()) if m.is_error() else ""

    def extra_metrics(self, compiled):
        return {}


def check(peer, compiled, job):
    vocab = peer.vocab
    want = {}
    for d, s in job.get("mask_steps", []):
        want.setdefault(int(d), set()).add(int(s))
    docs, masks = [], []
    for d, doc in enumerate(job["documents"]):
        m = peer.matcher(compiled)
        bits, eos, accepted, error = [], False, False, ""
        for i in range(len(doc) + 1):
            peer.fill(m)
            if i in want.get(d, ()):
                masks.append({"doc": d, "step": i, "words": peer.mask_hex()})
            if i == len(doc):
                eos = peer.allowed(vocab.eos)
                if eos:
                    accepted = bool(peer.accept(m, vocab.eos)) and peer.finished(m)
                    if not accepted:
                        error = peer.error(m) or "EOS allowed, then not accepted"
                break
            t = int(doc[i])
            bits.append("1" if peer.allowed(t) else "0")
            if not peer.accept(m, t):
                error = peer.error(m) or "token %d at step %d not accepted" % (t, i)
                break
        docs.append({"steps": "".join(bits), "eos": eos, "accepted": accepted, "error": error})

    rng = random.Random(int(job.get("seed", 0)))
    closing = peer.np.zeros(vocab.size, dtype=bool)
    for i, t in enumerate(vocab.tokens):
        closing[i] = any(c in t for c in b'"}],')
    walks = []
    for _ in range(int(job.get("walks", 0))):
        m = peer.matcher(compiled)
        text, finished, error = bytearray(), False, ""
        for _step in range(int(job.get("walk_tokens", 256))):
            peer.fill(m)
            allowed = peer.allowed_tokens()
            if len(allowed) == 0:
                error = "an empty mask"
                break
            others = allowed[allowed != vocab.eos]
            if peer.allowed(vocab.eos) and (len(others) == 0 or rng.random() < 0.5):
                finished = bool(peer.accept(m, vocab.eos)) and peer.finished(m)
                if not finished:
                    error = peer.error(m) or "EOS allowed, then not accepted"
                break
            closers = others[closing[others]]
            pool = closers if len(closers) and rng.random() < 0.5 else others
            t = int(pool[rng.randrange(len(pool))])
            if not peer.accept(m, t):
                error = peer.error(m) or "token %d allowed by the mask, then not accepted" % t
                break
            text += vocab.tokens[t]
        walks.append({"text": bytes(text).hex(), "finished": finished, "error": error})
    return {"documents": docs, "masks": masks, "walks": walks}


def passed(c):
    return all(d["eos"] and d["accepted"] and "0" not in d["steps"] for d in c["documents"])


def time_compile(a, peer, schema):
    for _ in range(a.warmup):
        peer.compile(schema)
    samples, rule = [], StoppingRule(a)
    t0 = time.perf_counter()
    while True:
        c0 = time.perf_counter()
        peer.compile(schema)
        ms = (time.perf_counter() - c0) * 1e3
        samples.append(ms)
        if rule.add(ms / 1e3, time.perf_counter() - t0):
            break
    return samples, rule.reason, {}


def time_mask(a, peer, compiled, docs):
    clock = time.perf_counter_ns
    fill, accept = peer.fill, peer.accept

    def one_sample(steps):
        total = 0
        for doc in docs:
            m = peer.matcher(compiled)
            n = len(doc)
            for i in range(n + 1):
                s0 = clock()
                fill(m)
                if i < n:
                    accept(m, doc[i])
                s1 = clock()
                steps.append((s1 - s0) / 1e3)
                total += s1 - s0
        return total / 1e6  # ms

    for _ in range(a.warmup):
        one_sample([])
    samples, steps, rule = [], [], StoppingRule(a)
    t0 = time.perf_counter()
    while True:
        ms = one_sample(steps)
        samples.append(ms)
        if rule.add(ms / 1e3, time.perf_counter() - t0):
            break

    def noop(*_):
        return None

    overhead = []
    for _ in range(2000):
        s0 = clock()
        noop(None)
        noop(None, 0)
        overhead.append((clock() - s0) / 1e3)
    steps.sort()
    overhead.sort()
    metrics = {"step_mean": sum(steps) / len(steps) if steps else 0.0, "step_p50": percentile_sorted(steps, 0.5),
               "step_p99": percentile_sorted(steps, 0.99), "steps_timed": len(steps),
               "py_overhead_us": percentile_sorted(overhead, 0.5)}
    return samples, rule.reason, metrics


def package_version(name, mod):
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - a package without metadata
        return getattr(mod, "__version__", "?")


def run(a, mod, np):
    with open(a.input, encoding="utf-8") as f:
        job = json.load(f)
    vocab = Vocab(job["vocab"])
    opts = {"whitespace": job.get("whitespace", "compact"), "strict_properties": bool(job.get("strict_properties", True))}
    info = {"peer": a.peer, "peer_version": package_version(a.peer, mod), "python": sys.version.split()[0]}
    t0 = time.perf_counter()
    peer = (XGrammar if a.peer == "xgrammar" else LLGuidance)(mod, np, vocab, a, opts)
    tokenizer_ms = (time.perf_counter() - t0) * 1e3
    schema = job["schema"]
    compiled = peer.compile(schema)
    c = check(peer, compiled, job)
    result = dict(info, status="ok", check=c, note=peer.describe())
    if not passed(c):
        return result  # the gate failed: never timed
    docs = [[int(t) for t in doc] for doc in job["documents"]]
    if a.mode == "compile":
        samples, reason, metrics = time_compile(a, peer, schema)
    else:
        samples, reason, metrics = time_mask(a, peer, compiled, docs)
    metrics["tokenizer_ms"] = tokenizer_ms
    metrics.update(peer.extra_metrics(compiled))
    result.update(samples_ms=samples, stop_reason=reason, metrics=metrics)
    return result


def main(argv):
    a = parse_args(argv)
    import importlib
    for name in (a.peer, "numpy"):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import failure means no usable peer
            emit({"status": "unsupported", "peer": a.peer,
                  "reason": "python3 with %s not found: %s cannot import %s (%s: %s)" % (a.peer, sys.executable, name,
                                                                                       type(e).__name__, one_line(e))})
            return 0
    mod = importlib.import_module(a.peer)
    import numpy as np
    version = package_version(a.peer, mod)
    try:
        emit(run(a, mod, np))
    except Refused as e:
        emit({"status": "unsupported", "peer": a.peer, "peer_version": version, "reason": str(e)})
    except Exception as e:  # noqa: BLE001 - reported as the row's failure, never a traceback alone
        emit({"status": "failed", "peer": a.peer, "peer_version": version, "reason": "%s: %s" % (type(e).__name__, one_line(e))})
    return 0


if __name__ == "__main__":
    # Run as `python3 -c SCRIPT ARGS`, sys.argv[0] is "-c".
    sys.exit(main(sys.argv[1:]))
