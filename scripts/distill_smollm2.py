"""A speculative-decoding draft for SmolLM2-135M-Instruct, distilled here from it on the CPU.

Called by `scripts/train-models --smollm2-draft` with the same pinned corpus (Django prose and code,
JSON) and the same held-out split as our own family; needs data/models/smollm2-135m-instruct-q4_1.gguf
(`scripts/get-models`). Writes:
  data/models/smollm2-draft-16m.gguf     the draft, GGUF (F16 weights, F32 norms), SmolLM2's tokenizer
                                         and metadata copied from the target's file
  data/models/train-log/smollm2-draft-16m.csv, smollm2-draft-16m.json   per-step losses, the run's facts
  tests/data/models/smollm2-draft-16m.golden.json   transformers' reading of the written GGUF (its own loader):
                                         logits and a greedy continuation ctest checks our engine against

The draft (16M parameters, of which 12.6M are its 49,152 x 256 embedding, tied with the output) is a
Llama of 4 layers, hidden 256, 4 query / 2 KV heads of 64, FFN 768. Its cost per token is dominated
by the output projection, so the hidden size is what makes it cheap (a quarter of the target's
vocabulary product); its embedding starts as the target's projected on the target embedding's 256
principal directions, so the 45K tokens the corpus rarely shows start where the target put them.

Loss: KL(target || draft) on the corpus' windows, the target's distribution taken over its 64 most
likely tokens at each position (renormalised; the target read in bf16) — the draft learns the
target's distribution where it has its mass, which is what greedy and sampled acceptance reward. Held-out agreement: the target's greedy continuation of each held-out
prompt, and the fraction of those positions where the draft's argmax is the target's (the greedy
acceptance a K=1 draft would see; `infer-bench run experiments/real.yaml --only smollm2-specdec`
measures the real α̂).
"""

import hashlib
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

NAME = "smollm2-draft-16m"
TARGET_GGUF = "smollm2-135m-instruct-q4_1.gguf"
DRAFT = dict(hidden=256, layers=4, heads=4, kv_heads=2, ffn=768)
SEQ = 512
BATCH = 8
STEPS = 700
TOP_K = 64
LR = 2e-3
WARMUP = 30
SEED = 4321
EOT = 0  # <|endoftext|>: SmolLM2's document separator


def lr_at(step, steps, peak):
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    p = (step - WARMUP) / max(1, steps - WARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def load_target(models_dir):
    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file=TARGET_GGUF)
    target = AutoModelForCausalLM.from_pretrained(models_dir, gguf_file=TARGET_GGUF, dtype=torch.float32).eval()
    return tok, target


def stream_of(tok, texts):
    ids = []
    for enc in tok.backend_tokenizer.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(EOT)
    return torch.tensor(ids, dtype=torch.int32)


def rope_theta_of(cfg):
    """RoPE's base: transformers 5 keeps it in rope_parameters, earlier versions as rope_theta."""
    rp = getattr(cfg, "rope_parameters", None)
    return rp["rope_theta"] if rp else cfg.rope_theta


def draft_config(target_cfg):
    return LlamaConfig(vocab_size=target_cfg.vocab_size, hidden_size=DRAFT["hidden"], intermediate_size=DRAFT["ffn"],
                       num_hidden_layers=DRAFT["layers"], num_attention_heads=DRAFT["heads"],
                       num_key_value_heads=DRAFT["kv_heads"], head_dim=DRAFT["hidden"] // DRAFT["heads"],
                       max_position_embeddings=target_cfg.max_position_embeddings, rms_norm_eps=1e-5,
                       rope_theta=rope_theta_of(target_cfg),
                       tie_word_embeddings=True, bos_token_id=target_cfg.bos_token_id,
                       eos_token_id=target_cfg.eos_token_id, pad_token_id=target_cfg.pad_token_id)


@torch.no_grad()
def projected_embedding(target, width):
    """The target's embedding on its `width` leading principal directions, rescaled to the draft's
    initial row norm (what a freshly initialised embedding would have)."""
    e = target.get_input_embeddings().weight.float()
    centred = e - e.mean(0, keepdim=True)
    _, _, v = torch.linalg.svd(centred, full_matrices=False)
    proj = e @ v[:width].T
    return proj * (0.02 * math.sqrt(width) / proj.norm(dim=1).mean())


def batch_of(stream, gen):
    starts = torch.randint(0, len(stream) - SEQ, (BATCH,), generator=gen)
    return torch.stack([stream[s:s + SEQ] for s in starts.tolist()]).long()


def teacher_top(teacher_logits, k=TOP_K):
    """The target's k most likely next tokens per position and its distribution over them (its softmax
    renormalised to those k): the part of the target a draft can hope to match, and all the loss reads."""
    top_logits, top_ids = teacher_logits.reshape(-1, teacher_logits.shape[-1]).topk(k, dim=-1)
    return F.softmax(top_logits.float(), dim=-1), top_ids


class TopKCrossEntropy(torch.autograd.Function):
    """Mean over positions of -sum_k p_k log softmax(logits)[id_k]: the draft's cross-entropy against the
    target's top-k distribution. Written out because autograd's version of it (float copy, logsumexp,
    gather) made four float32 tensors of positions x 49,152 and their gradients a step — 70% of a step
    on the CPU; here the bf16 logits are read in row chunks, twice (forward and backward)."""

    @staticmethod
    def forward(ctx, logits, top_p, top_ids, chunk=512):
        n = logits.shape[0]
        lse = torch.empty(n, dtype=torch.float32)
        for i in range(0, n, chunk):
            lse[i:i + chunk] = torch.logsumexp(logits[i:i + chunk].float(), dim=-1)
        picked = logits.gather(-1, top_ids).float() - lse[:, None]
        ctx.save_for_backward(logits, top_p, top_ids, lse)
        ctx.chunk = chunk
        return -(top_p * picked).sum(-1).mean()

    @staticmethod
    def backward(ctx, grad_out):
        logits, top_p, top_ids, lse = ctx.saved_tensors
        n, chunk = logits.shape[0], ctx.chunk
        grad = torch.empty_like(logits)
        scale = grad_out.float() / n
        for i in range(0, n, chunk):
            g = torch.exp(logits[i:i + chunk].float() - lse[i:i + chunk, None])
            g.scatter_add_(-1, top_ids[i:i + chunk], -top_p[i:i + chunk])
            grad[i:i + chunk] = (g * scale).to(logits.dtype)
        return grad, None, None, None


def distill_loss(student_logits, top_p, top_ids, with_agreement):
    """The loss (the draft's cross-entropy against the target's top-k distribution: its KL to it up to
    the target's constant entropy), that KL, and (when asked: an argmax pass) the fraction of
    positions where the draft's argmax is the target's."""
    s = student_logits.reshape(-1, student_logits.shape[-1])
    ce = TopKCrossEntropy.apply(s, top_p, top_ids)
    with torch.no_grad():
        entropy = -(top_p * top_p.clamp_min(1e-30).log()).sum(-1).mean()
        agree = float((s.argmax(-1) == top_ids[:, 0]).float().mean()) if with_agreement else None
    return ce, float(ce.detach() - entropy), agree


def train(target, stream, steps, log, log_path):
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    draft = LlamaForCausalLM(draft_config(target.config))
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(projected_embedding(target, DRAFT["hidden"]))
    params = sum(p.numel() for p in draft.parameters())
    decay = [p for p in draft.parameters() if p.dim() >= 2]
    no_decay = [p for p in draft.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    teacher = target.to(torch.bfloat16)
    log(f"[{NAME}] {params / 1e6:.2f}M parameters, {steps} steps x {BATCH} x {SEQ} tokens, distilled from "
        f"SmolLM2-135M-Instruct (bf16 teacher, bf16 autocast student)")
    logf = log_path.open("w")
    logf.write("step,tokens,lr,kl,agree\n")
    t0, curve = time.time(), []
    for step in range(steps):
        lr = lr_at(step, steps, LR)
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch_of(stream, gen)
        with torch.no_grad():
            top_p, top_ids = teacher_top(teacher(input_ids=x).logits)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            s_logits = draft(input_ids=x).logits
        loss, kl, agree = distill_loss(s_logits, top_p, top_ids, (step + 1) % 10 == 0 or step + 1 == steps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        curve.append((step + 1, kl, agree))
        logf.write(f"{step + 1},{(step + 1) * BATCH * SEQ},{lr:.6g},{kl:.5f},{'' if agree is None else f'{agree:.4f}'}\n")
        logf.flush()
        if (step + 1) % 10 == 0 or step + 1 == steps:
            dt = time.time() - t0
            w = curve[-10:]
            log(f"[{NAME}] step {step + 1}/{steps}  kl {sum(c[1] for c in w) / len(w):.3f}  "
                f"agree {100 * agree:.1f}%  {(step + 1) * BATCH * SEQ / dt:.0f} tok/s  "
                f"elapsed {dt / 60:.1f} min  eta {(steps - step - 1) * dt / (step + 1) / 60:.1f} min")
    logf.close()
    target.to(torch.float32)
    return draft.float().eval(), params, time.time() - t0, curve


@torch.no_grad()
def heldout_agreement(target, draft, tok, prompts, new_tokens):
    """The target's greedy continuation of each prompt (float32), and per position whether the draft's
    argmax on the same tokens is the target's: the greedy acceptance of a one-token draft."""
    per_domain = {}
    for dom, texts in prompts.items():
        agree, n = 0, 0
        for text in texts:
            ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                  do_sample=False, eos_token_id=None, pad_token_id=tok.pad_token_id)
            full = out[:, :-1]
            pred = draft(input_ids=full).logits[0, ids.shape[1] - 1:].argmax(-1)
            agree += int((pred == out[0, ids.shape[1]:]).sum())
            n += out.shape[1] - ids.shape[1]
        per_domain[dom] = round(agree / n, 4)
    return per_domain


def permute_rope(w, n_head):
    """HF's rotate-half layout of q/k rows to GGML's interleaved pairs (what llama.cpp's converter
    writes and every GGUF reader, ours and transformers', undoes)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(draft, target_path, out_path):
    import gguf

    reader = gguf.GGUFReader(str(target_path))
    cfg = draft.config
    w = gguf.GGUFWriter(str(out_path), "llama")
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture", "general.file_type",
            "general.quantization_version", "general.name", "general.size_label", "general.finetune",
            "general.basename"}
    for key, field in reader.fields.items():
        if key in skip or key.startswith("llama."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, field.contents())
        else:
            w.add_key_value(key, field.contents(), vtype)
    w.add_name(f"{NAME} (a draft distilled from SmolLM2-135M-Instruct by infer-bench)")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(rope_theta_of(cfg)))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)

    def f16(t):
        return t.detach().float().numpy().astype(np.float16)

    def f32(t):
        return t.detach().float().numpy().astype(np.float32)

    m = draft.model
    w.add_tensor("token_embd.weight", f16(m.embed_tokens.weight))
    w.add_tensor("output_norm.weight", f32(m.norm.weight))
    for i, layer in enumerate(m.layers):
        a, p = layer.self_attn, f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", f32(layer.input_layernorm.weight))
        w.add_tensor(p + "attn_q.weight", f16(permute_rope(a.q_proj.weight, cfg.num_attention_heads)))
        w.add_tensor(p + "attn_k.weight", f16(permute_rope(a.k_proj.weight, cfg.num_key_value_heads)))
        w.add_tensor(p + "attn_v.weight", f16(a.v_proj.weight))
        w.add_tensor(p + "attn_output.weight", f16(a.o_proj.weight))
        w.add_tensor(p + "ffn_norm.weight", f32(layer.post_attention_layernorm.weight))
        w.add_tensor(p + "ffn_gate.weight", f16(layer.mlp.gate_proj.weight))
        w.add_tensor(p + "ffn_up.weight", f16(layer.mlp.up_proj.weight))
        w.add_tensor(p + "ffn_down.weight", f16(layer.mlp.down_proj.weight))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@torch.no_grad()
def golden_of_gguf(models_dir, gguf_name, prompt, new_tokens=24):
    """transformers' own reading of the written GGUF (its loader undoes the q/k permutation and takes
    the tokenizer from the file): what our engine is checked against."""
    tok = AutoTokenizer.from_pretrained(models_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(models_dir, gguf_file=gguf_name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    logits = model(input_ids=x).logits[0].float()
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens, do_sample=False,
                         eos_token_id=None, pad_token_id=tok.pad_token_id)
    cont = out[0, len(ids):].tolist()
    return model, {"model": f"data/models/{gguf_name}", "prompt": prompt, "prompt_ids": ids, "greedy_ids": cont,
                   "greedy_text": tok.decode(cont), "last_logits_top": torch.topk(logits[-1], 8).indices.tolist(),
                   "last_logits": [round(float(v), 5) for v in logits[-1].tolist()],
                   "made_by": f"transformers {transformers.__version__} (gguf_file=), torch {torch.__version__}, "
                              "float32 eager"}


def run(train_docs, models_dir, out_dir, golden_dir, log, steps=STEPS, eval_new_tokens=64):
    """The whole recipe: the target and held-out prompts read from models_dir, the draft and its log
    written under out_dir (models_dir itself but for a smoke run); returns the facts written."""
    t_start = time.time()
    target_path = Path(models_dir) / TARGET_GGUF
    if not target_path.exists():
        raise SystemExit(f"train-models: {target_path} is missing: run scripts/get-models first")
    digest = hashlib.sha256(target_path.read_bytes()).hexdigest()
    random.seed(SEED)
    tok, target = load_target(str(models_dir))
    docs = list(train_docs)
    random.Random(SEED).shuffle(docs)
    stream = stream_of(tok, [d[3] for d in docs])
    log(f"[{NAME}] training stream: {len(stream)} SmolLM2 tokens from {len(docs)} documents")
    log_dir = Path(out_dir) / "train-log"
    log_dir.mkdir(parents=True, exist_ok=True)
    draft, params, secs, curve = train(target, stream, steps, log, log_dir / f"{NAME}.csv")

    heldout = Path(models_dir) / "heldout"
    prompts = {dom: [json.loads(ln)["prompt"] for ln in (heldout / f"{dom}.jsonl").read_text().splitlines()]
               for dom in ("code", "prose")}
    agreement = heldout_agreement(target, draft, tok, prompts, eval_new_tokens)
    log(f"[{NAME}] held-out greedy agreement with the target (float32 draft): {agreement}")

    out_path = Path(out_dir) / f"{NAME}.gguf"
    write_gguf(draft, target_path, out_path)
    gold_model, gold = golden_of_gguf(str(out_dir), out_path.name, prompts["code"][0][:400])
    # The GGUF round trip: transformers' reading of the file against the trained module (f16 weights).
    x = torch.tensor([gold["prompt_ids"]])
    ref = draft(input_ids=x).logits[0, -1]
    got = gold_model(input_ids=x).logits[0, -1]
    roundtrip = float(((got - ref).norm() / ref.norm()).detach())
    log(f"[{NAME}] GGUF round trip: last logits rel. L2 {roundtrip:.2e} (F16 weights)")
    if roundtrip > 1e-2:
        raise SystemExit(f"train-models: {out_path}: transformers reads different weights (rel. {roundtrip:.2e})")
    Path(golden_dir).mkdir(parents=True, exist_ok=True)
    (Path(golden_dir) / f"{NAME}.golden.json").write_text(json.dumps(gold, indent=1) + "\n")
    last = curve[-20:]
    facts = dict(name=NAME, file=out_path.name, bytes=out_path.stat().st_size,
                 sha256=hashlib.sha256(out_path.read_bytes()).hexdigest(), params=params, **DRAFT,
                 steps=steps, batch=BATCH, seq=SEQ, lr=LR, seed=SEED, train_seconds=round(secs),
                 wall_minutes=round((time.time() - t_start) / 60, 1), training_stream_tokens=len(stream),
                 final_kl=round(sum(c[1] for c in last) / len(last), 4),
                 final_train_agreement=round(sum(c[2] for c in last if c[2] is not None)
                                             / max(1, sum(c[2] is not None for c in last)), 4),
                 heldout_greedy_agreement=agreement, heldout_new_tokens=eval_new_tokens,
                 gguf_roundtrip_rel=roundtrip, target=dict(file=TARGET_GGUF, sha256=digest),
                 versions=dict(torch=torch.__version__, transformers=transformers.__version__))
    (log_dir / f"{NAME}.json").write_text(json.dumps(facts, indent=1) + "\n")
    return facts
