#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on one attention shape: the `torch_sdpa*` peer rows of
infer-bench's `attention` kind.

infer-bench runs this file (compiled into the binary, so it travels with it) as
`PYTHON -c SCRIPT ARGS` once per row; it can also be run by hand:
    python3 scripts/torch_sdpa_peer.py --device cuda --backend flash --seq-k 8192

It builds its own inputs on the shape it is given (uniform in [-1, 1) times 2 for Q and 1 for K
and V, rounded to the element type, as infer-bench's inputs are), makes one checked call and
compares a subset of the output rows with a float64 reference computed in torch (relative L2,
plus a NaN/inf scan of every row), and only if that passes warms up and takes samples: one call
between two CUDA events each (time.perf_counter on the CPU) until the same stopping rule as
infer-bench's runner holds. It prints exactly one JSON line on stdout, whatever happens:
    {"status": "ok" | "unsupported" | "oom" | "failed", "reason": ..., "check": {...},
     "samples_ms": [...], "stop_reason": ..., "peak_memory_bytes": ..., "io_bytes": ..., ...}

Semantics match infer-bench's variants: tensors [batch][heads][seq][head_dim]; grouped-query
attention through enable_gqa=True, or, when the backend refuses that, K/V repeated to `heads`
before timing (the result says so in "note"); causal masks aligned bottom-right (query i sees
key j iff j <= i + seq_k - seq_q): is_causal=True when seq_q == seq_k, else the lower-right
CausalBias; a sliding window is an explicit boolean mask (backends without masks refuse it).
"""

import argparse
import json
import math
import random
import re
import sys
import time
import warnings

RESULT_VERSION = 1


def parse_args(argv):
    p = argparse.ArgumentParser(prog="torch_sdpa_peer.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--backend", choices=["default", "flash", "efficient", "cudnn", "math"], default="default",
                   help="the SDPA backend forced with torch.nn.attention.sdpa_kernel; default = torch's own choice")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=0, help="key/value heads (grouped-query); 0 = heads")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--seq-k", type=int, default=2048, help="keys")
    p.add_argument("--seq-q", type=int, default=0, help="queries; 0 = seq-k")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--window", type=int, default=0, help="causal only: sliding window of this many keys (0 = none)")
    p.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--compute", choices=["dtype", "fp32"], default="dtype",
                   help="fp32: inputs rounded to --dtype, then attention in fp32 (what infer-bench's CPU variants do)")
    p.add_argument("--seed", type=int, default=20260101)
    p.add_argument("--tolerance", type=float, default=1e-2, help="relative L2 error the check allows")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-samples", type=int, default=10)
    p.add_argument("--min-time", type=float, default=0.25, help="seconds of measured time at least")
    p.add_argument("--max-noise", type=float, default=0.01, help="stop when the relative stdev is at most this")
    p.add_argument("--timeout", type=float, default=10.0, help="wall-clock cap on the measurement (s)")
    p.add_argument("--cold-l2", action="store_true", help="overwrite a buffer twice the L2 before every sample")
    p.add_argument("--memory-limit", type=int, default=0, help="bytes the CUDA caching allocator may use (0 = all)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0 = torch's default)")
    a = p.parse_args(argv)
    a.kv_heads = a.kv_heads or a.heads
    a.seq_q = a.seq_q or a.seq_k
    return a


def emit(result):
    result.setdefault("version", RESULT_VERSION)
    sys.stdout.write(json.dumps(result, allow_nan=False) + "\n")
    sys.stdout.flush()


def clean_warning(text):
    # torch's C++ warnings end with "(Triggered internally at /path/file.cpp:123.)".
    text = re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", str(text))
    return " ".join(text.split())


# ---- the attention problem (the same geometry as lib/kinds/attention/problem.cpp) ----

def visible_keys(a, i):
    """Keys query i sees end here (exclusive): bottom-right causal alignment."""
    if not a.causal:
        return a.seq_k
    return min(max(i + a.seq_k - a.seq_q + 1, 0), a.seq_k)


def first_key(a, i):
    if not a.causal or a.window <= 0:
        return 0
    return max(0, visible_keys(a, i) - a.window)


class StoppingRule:
    """infer-bench's rule: at least min_samples and min_time of measured time, then stop at a
    relative stdev <= max_noise, or when the noise estimate settled (it moved by under 10% of
    itself over the last window of max(20, n/5) samples), or at the wall-clock timeout."""

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


# ---- the peer ----

# What torch says when no kernel of the allowed backends takes the inputs (as opposed to a failure).
REFUSALS = (r"No available kernel|No viable backend|not supported|does not support|NOT_SUPPORTED|No execution plans|"
            r"unexpected keyword argument 'enable_gqa'")


class Refused(Exception):
    """The backend refused the shape (no kernel for it): an unsupported row, not a failure."""


def run(a, torch):
    import torch.nn.functional as F
    from torch.nn import attention as tna

    info = {"torch": torch.__version__, "backend": a.backend, "device_kind": a.device}
    if a.device == "cuda":
        if not torch.cuda.is_available():
            return dict(info, status="unsupported", reason="torch %s has no CUDA device" % torch.__version__)
        dev = torch.device("cuda")
        info["device"] = torch.cuda.get_device_name(dev)
    else:
        dev = torch.device("cpu")
        if a.threads > 0:
            torch.set_num_threads(a.threads)
        info["device"] = "CPU, %d torch threads" % torch.get_num_threads()

    if a.heads % a.kv_heads != 0:
        return dict(info, status="unsupported", reason="heads (%d) must be a multiple of kv_heads (%d)" % (a.heads, a.kv_heads))
    if a.window > 0 and not a.causal:
        return dict(info, status="unsupported", reason="a sliding window needs causal")
    if a.causal and a.seq_q > a.seq_k:
        return dict(info, status="unsupported",
                    reason="causal with seq_q > seq: the first rows see no key, and torch leaves them undefined")

    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    forced = None
    if a.backend != "default":
        forced = getattr(tna.SDPBackend, names[a.backend], None)
        if forced is None:
            return dict(info, status="unsupported", reason="torch %s has no SDPBackend.%s" % (torch.__version__, names[a.backend]))

    if a.device == "cuda" and a.memory_limit > 0:
        total = torch.cuda.get_device_properties(dev).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.memory_limit / total), dev)

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    compute = torch.float32 if a.compute == "fp32" else dtype
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)

    def uniform(heads, seq, scale):
        x = torch.rand((a.batch, heads, seq, a.head_dim), generator=gen, device=dev, dtype=torch.float32)
        return ((x * 2 - 1) * scale).to(dtype).to(compute)

    if a.device == "cuda":
        torch.cuda.synchronize()
        base_bytes = torch.cuda.memory_allocated(dev)
    q = uniform(a.heads, a.seq_q, 2.0)
    k = uniform(a.kv_heads, a.seq_k, 1.0)
    v = uniform(a.kv_heads, a.seq_k, 1.0)
    scale = 1.0 / math.sqrt(a.head_dim)

    mask, is_causal = None, False
    if a.causal and a.window > 0:
        i = torch.arange(a.seq_q, device=dev).unsqueeze(1)
        j = torch.arange(a.seq_k, device=dev).unsqueeze(0)
        last = i + (a.seq_k - a.seq_q)
        mask = (j <= last) & (j > last - a.window)  # True = attend
    elif a.causal and a.seq_q == 1:
        pass  # one query at the end sees every key: no mask at all
    elif a.causal and a.seq_q == a.seq_k:
        is_causal = True
    elif a.causal:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(a.seq_q, a.seq_k)

    notes = []
    kv = {"k": k, "v": v, "gqa": a.kv_heads != a.heads}

    def sdpa():
        kw = {"enable_gqa": True} if kv["gqa"] else {}
        return F.scaled_dot_product_attention(q, kv["k"], kv["v"], attn_mask=mask, is_causal=is_causal, scale=scale, **kw)

    def restricted():
        return tna.sdpa_kernel(forced) if forced is not None else _Null()

    def first_call():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with restricted():
                    out = sdpa()
                if a.device == "cuda":
                    torch.cuda.synchronize()
                return out
            except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
                if isinstance(e, torch.cuda.OutOfMemoryError if a.device == "cuda" else ()):
                    raise
                why = [clean_warning(w.message) for w in caught if re.search(r"attention|kernel|sdp", str(w.message), re.I)]
                text = clean_warning(e)
                if not re.search(REFUSALS, text, re.I):
                    raise
                reason = "; ".join(dict.fromkeys(why)) or text
                raise Refused(reason if len(reason) <= 400 else reason[:397] + "...")

    try:
        out = first_call()
    except Refused as refusal:
        if not kv["gqa"]:
            raise
        # No enable_gqa in this backend (or this torch): K/V repeated to every query head instead,
        # outside the timed region; the row says so.
        g = a.heads // a.kv_heads
        kv.update(k=k.repeat_interleave(g, dim=1), v=v.repeat_interleave(g, dim=1), gqa=False)
        out = first_call()
        notes.append("K/V repeated to %d heads before timing (enable_gqa refused: %s)" % (a.heads, refusal))

    chosen = dispatch_choice(torch, q, kv["k"], kv["v"], mask, is_causal, scale, kv["gqa"]) if forced is None else None
    if chosen:
        notes.append("torch dispatched to %s" % chosen)

    check = check_output(a, torch, q, k, v, out, scale, dev)
    result = dict(info, status="ok", check=check, note="; ".join(notes))
    if check["nan_rows"] > 0 or not check["value"] <= a.tolerance:
        return result  # the gate failed: never timed

    io_bytes = sum(t.numel() * t.element_size() for t in (q, kv["k"], kv["v"], out))
    del out, k, v  # the timed calls hold Q, the K/V they read, one output and their workspace
    flush = None
    if a.cold_l2 and a.device == "cuda":
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 64 << 20) or (64 << 20)
        flush = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
    if a.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    samples = []
    rule = StoppingRule(a)
    with restricted():
        for _ in range(a.warmup):
            sdpa()
        if a.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        while True:
            if flush is not None:
                flush.zero_()
            if a.device == "cuda":
                start.record()
                sdpa()
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end)
            else:
                c0 = time.perf_counter()
                sdpa()
                ms = (time.perf_counter() - c0) * 1e3
            samples.append(ms)
            if rule.add(ms / 1e3, time.perf_counter() - t0):
                break
    result.update(samples_ms=samples, stop_reason=rule.reason, io_bytes=io_bytes)
    if a.device == "cuda":
        flush_bytes = flush.numel() if flush is not None else 0
        result["peak_memory_bytes"] = torch.cuda.max_memory_allocated(dev) - base_bytes - flush_bytes
    return result


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def dispatch_choice(torch, q, k, v, mask, is_causal, scale, gqa):
    """The backend torch's own dispatch picks, through a private hook (None where it is absent)."""
    try:
        kw = {"enable_gqa": True} if gqa else {}
        if mask is not None and type(mask) is not torch.Tensor:
            return None  # a CausalBias (a Tensor subclass) dispatches itself
        index = int(torch._fused_sdp_choice(q, k, v, mask, 0.0, is_causal, scale=scale, **kw))
        return {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}.get(index)
    except Exception:  # noqa: BLE001 - only a note is lost
        return None


def check_output(a, torch, q, k, v, out, scale, dev):
    """NaN/inf over every row; relative L2 against float64 over every row when small, else over
    64 rows (the first, the last and random ones), as infer-bench's gate does."""
    finite = torch.isfinite(out).all(dim=-1)  # [b, h, i]
    nan_rows = int((~finite).sum().item())
    rows = a.batch * a.heads * a.seq_q
    if rows * a.seq_k * a.head_dim <= 4e7:
        picked = list(range(rows))
    else:
        rng = random.Random(a.seed ^ 0xA77E)
        picked = [0, rows - 1] + [rng.randrange(rows) for _ in range(62)]
    by_head = {}
    for r in picked:
        by_head.setdefault(r // a.seq_q, []).append(r % a.seq_q)
    g = a.heads // a.kv_heads
    err2 = ref2 = max_err = 0.0
    for bh, qi in sorted(by_head.items()):
        b, h = divmod(bh, a.heads)
        idx = torch.tensor(qi, device=dev)
        qq = q[b, h].index_select(0, idx).double()
        kk, vv = k[b, h // g].double(), v[b, h // g].double()
        s = (qq @ kk.T) * scale
        j = torch.arange(a.seq_k, device=dev).unsqueeze(0)
        hi = torch.tensor([visible_keys(a, i) for i in qi], device=dev).unsqueeze(1)
        lo = torch.tensor([first_key(a, i) for i in qi], device=dev).unsqueeze(1)
        s = s.masked_fill((j >= hi) | (j < lo), float("-inf"))
        ref = torch.softmax(s, dim=-1) @ vv
        got = out[b, h].index_select(0, idx).double()
        e = torch.nan_to_num(got - ref, nan=0.0, posinf=0.0, neginf=0.0)
        err2 += float((e * e).sum())
        ref2 += float((ref * ref).sum())
        max_err = max(max_err, float(e.abs().max()))
    rel = math.sqrt(err2 / ref2) if ref2 > 0 else math.sqrt(err2)
    return {"metric": "rel_l2", "value": rel, "tolerance": a.tolerance, "nan_rows": nan_rows, "rows_checked": len(picked),
            "rows": rows, "max_abs_error": max_err}


def main(argv):
    a = parse_args(argv)
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means no usable torch
        emit({"status": "unsupported",
              "reason": "python3 with torch not found: %s cannot import torch (%s: %s)" % (sys.executable, type(e).__name__, e)})
        return 0
    try:
        emit(run(a, torch))
    except Refused as e:
        emit({"status": "unsupported", "torch": torch.__version__, "backend": a.backend,
              "reason": "torch %s SDPA %s refused the shape: %s" % (torch.__version__, a.backend, e)})
    except Exception as e:  # noqa: BLE001 - reported as the row's failure, never a traceback alone
        oom = getattr(torch.cuda, "OutOfMemoryError", ())
        text = str(e).lower()
        status = "oom" if isinstance(e, oom) or "out of memory" in text or "can't allocate memory" in text else "failed"
        first = clean_warning(str(e).split("\n")[0])
        emit({"status": status, "torch": torch.__version__, "backend": a.backend, "reason": "%s: %s" % (type(e).__name__, first)})
    return 0


if __name__ == "__main__":
    # Run as `python3 -c SCRIPT ARGS`, sys.argv[0] is "-c".
    sys.exit(main(sys.argv[1:]))
