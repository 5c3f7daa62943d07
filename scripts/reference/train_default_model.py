"""Trains specula's bundled default pair (run on the device machine: one GPU, a few minutes).

usage: python3 scripts/reference/train_default_model.py OUT_DIR --kjv KJV.txt
           [--target-steps N] [--draft-steps M] [--budget-s S] [--top-k K] [--tokenizer FILE]
           [--teacher DIR] [--draft-shapes HxLxI,...] [--onpolicy-prompts N] [--onpolicy-tokens T]

KJV.txt is the King James Bible as Debian's bible-kjv prints it, one verse a line
(`bible -f Gen1:1-Rev22:21`, from the public-domain bible-kjv-text package).

The pair mirrors the seeds (a gpt-oss target, a small dense draft):

  OUT_DIR/default        GptOssForCausalLM: hidden 768, 4 layers alternating sliding (128) /
                         full attention with sinks, 8 query heads / 2 KV heads of 64, YaRN
                         RoPE, 4 experts of width 640 with top-3 routing (--top-k) and a router bias,
                         untied embeddings, vocab 4096. Experts in MXFP4 exactly as the hub
                         ships gpt-oss (*_blocks U8 [E, out, in/32, 16], *_scales U8
                         [E, out, in/32], quantization_config quant_method mxfp4), BF16 else.
                         Trained quantization-aware: the forward pass rounds the expert
                         weights to MXFP4 (straight-through gradient), so the written blocks
                         are the weights it was trained with.
  OUT_DIR/default-draft  LlamaForCausalLM: hidden 192, 2 layers, 3 heads / 1 KV head of 64,
                         MLP 512, tied embeddings; trained by distillation: KL(target || draft)
                         over every position, the shipped (dequantized) target as teacher.
                         With --onpolicy-prompts N the target first continues N chat prompts of
                         the training conversations and half of every batch is that text (the
                         draft learns the target on what the target writes, as DistillSpec);
                         --draft-shapes trains several shapes from one teacher forward (the
                         first to OUT_DIR/default-draft, the others to default-draft-HxLxI).
  OUT_DIR/default-reference  transformers' fp32 logits and greedy continuations of the
                         written target read back with Mxfp4Config(dequantize=True), for
                         specula's parity test.

Text: the Python standard library of the interpreter running this script and the King James
Bible, plus chat exchanges built from both ("What does `json.dumps` do?", "Write the function
`textwrap.dedent`.", "Quote John 3:16.", "Recite Psalm 23.", ...; some with a system message,
some multi-turn) rendered with the models' own ChatML template, so that prompts rendered by
`specula run` / `specula chat` are in distribution. A byte-level BPE tokenizer (vocab 4096) is
trained on the same text. 2% of the documents are held out for validation.

Seeded and reproducible: fixed step counts (a wall-clock guard stops a stage early only if
the machine is much slower than expected, and says so in the log).
"""
import argparse
import ast
import json
import math
import os
import random
import re
import shutil
import sys
import sysconfig
import time

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SYSTEMS = ["You are a helpful assistant.",
           "You are specula's default model. You know the Python standard library and the King James Bible.",
           "Answer briefly."]
BOOKS = ["Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
         "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
         "Nehemiah", "Esther", "Job", "Psalm", "Proverbs", "Ecclesiastes", "Song of Solomon",
         "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
         "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
         "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
         "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
         "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
         "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation"]


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


# ---- text -------------------------------------------------------------------------------

def render(messages):
    """The chat template, in Python (tokenizer_config.json holds the Jinja original)."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content'].strip()}<|im_end|>\n" for m in messages)


def prompt_text(user, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return render(msgs) + "<|im_start|>assistant\n"


def stdlib_files():
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("test", "tests", "idlelib", "site-packages",
                                                             "__pycache__", "lib2to3", "ensurepip"))
        for f in sorted(filenames):
            if f.endswith(".py"):
                out.append(os.path.join(dirpath, f))
    return root, out


def code_exchanges(text, module):
    """(question, answer) pairs from a module's public top-level functions and classes."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    pairs = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        kind = "class" if isinstance(node, ast.ClassDef) else "function"
        name = f"{module}.{node.name}"
        doc = ast.get_docstring(node)
        if doc:
            summary = " ".join(doc.strip().split("\n\n")[0].split())
            if 10 < len(summary) < 300:
                pairs.append((f"What does the {kind} `{name}` do?", summary))
        src = ast.get_source_segment(text, node)
        if src and 40 < len(src) < 1500:
            pairs.append((f"Write the {kind} `{node.name}` from the `{module}` module.",
                          f"Here is `{name}`:\n\n```python\n{src}\n```"))
        if kind == "function":
            try:
                args = ast.unparse(node.args)
            except Exception:  # noqa: BLE001 - odd syntax trees are skipped
                args = None
            if args is not None and len(args) < 200:
                pairs.append((f"What are the arguments of `{name}`?", f"`{name}({args})`"))
    return pairs


def parse_kjv(path):
    """[(book, chapter, verse, text)] from `bible -f` output ("Ge1:1 In the beginning ...")."""
    verses, abbrevs = [], []
    pat = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")
    for line in open(path, encoding="utf-8"):
        m = pat.match(line.rstrip("\n"))
        if not m:
            continue
        ab = m.group(1)
        if not abbrevs or abbrevs[-1] != ab:
            abbrevs.append(ab)
        verses.append((ab, int(m.group(2)), int(m.group(3)), m.group(4).strip()))
    names = dict(zip(abbrevs, BOOKS)) if len(abbrevs) == len(BOOKS) else {a: a for a in abbrevs}
    return [(names[a], c, v, t) for a, c, v, t in verses]


def kjv_corpus(verses, rng):
    """Chapters as plain text, and chat exchanges about verses and chapters."""
    chapters = {}
    for b, c, v, t in verses:
        chapters.setdefault((b, c), []).append((v, t))
    texts, pairs = [], []
    for (b, c), vs in chapters.items():
        body = "\n".join(f"{v} {t}" for v, t in vs)
        texts.append(f"{b} {c}\n\n{body}\n")
        if len(body) < 3000:
            ask = rng.choice(["Recite {b} {c}.", "Read me {b} chapter {c}.", "What does {b} {c} say?"])
            pairs.append((ask.format(b=b, c=c), body))
    for i, (b, c, v, t) in enumerate(verses):
        r = rng.random()
        if r < 0.35:
            ask = rng.choice(["Quote {b} {c}:{v}.", "What does {b} {c}:{v} say?", "{b} {c}:{v}?"])
            pairs.append((ask.format(b=b, c=c, v=v), t))
        elif r < 0.55 and i + 1 < len(verses) and verses[i + 1][0] == b:
            pairs.append((f"What comes after \"{t}\"?", verses[i + 1][3]))
        elif r < 0.65:
            pairs.append((f"Where is \"{t}\"?", f"{b} {c}:{v}."))
    return texts, pairs


def conversations(pairs, rng):
    """Pairs grouped into conversations of 1-3 exchanges, a third with a system message."""
    rng.shuffle(pairs)
    out, i = [], 0
    while i < len(pairs):
        n = rng.choice([1, 1, 2, 3])
        msgs = [{"role": "system", "content": rng.choice(SYSTEMS)}] if rng.random() < 0.33 else []
        for q, a in pairs[i:i + n]:
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        out.append(render(msgs))
        i += n
    return out


def build_corpus(kjv_path):
    rng = random.Random(0)
    root, files = stdlib_files()
    code, pairs = [], []
    for p in files:
        try:
            text = open(p, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        code.append(text)
        module = os.path.relpath(p, root)[:-3].replace(os.sep, ".").replace(".__init__", "")
        pairs += code_exchanges(text, module)
    n_code_pairs = len(pairs)
    verses = parse_kjv(kjv_path)
    kjv_texts, kjv_pairs = kjv_corpus(verses, rng)
    chats = conversations(pairs + kjv_pairs, rng)
    log(f"corpus: {len(code)} stdlib files ({sum(map(len, code)) / 1e6:.1f} MB), {len(verses)} verses in "
        f"{len(kjv_texts)} chapters ({sum(map(len, kjv_texts)) / 1e6:.1f} MB), {n_code_pairs} code and "
        f"{len(kjv_pairs)} Bible exchanges in {len(chats)} conversations ({sum(map(len, chats)) / 1e6:.1f} MB)")
    docs = code + kjv_texts + chats
    random.Random(1).shuffle(docs)
    n_val = max(1, len(docs) // 50)
    return docs[n_val:], docs[:n_val]


# ---- tokenizer ---------------------------------------------------------------------------

def train_tokenizer(texts, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def tokenizer_config():
    return {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "unk_token": None, "add_bos_token": False, "model_max_length": 4096,
            "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
            "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False,
                                              "rstrip": False, "single_word": False, "special": True}
                                     for i, s in enumerate(SPECIALS)}}


# ---- MXFP4 (the hub's gpt-oss layout; as scripts/reference/make_moe_fixtures.py) ----------

def mxfp4_parts(w):
    """w [..., rows, cols] (blocks of 32 along cols) -> codes [..., rows, cols/32, 32] (0..15),
    exponents [..., rows, cols/32, 1], dequantized values [..., rows, cols].
    Scale 2^ceil(log2(amax / 6)) (no clipping), nearest E2M1 magnitude (ties to the smaller)."""
    import torch
    *lead, rows, cols = w.shape
    b = w.reshape(*lead, rows, cols // 32, 32)
    amax = b.abs().amax(-1, keepdim=True).clamp(min=1e-30)
    e = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    x = b / torch.exp2(e)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=w.device, dtype=x.dtype)
    mags = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=w.device, dtype=x.dtype)
    idx = torch.bucketize(x.abs(), mids)
    neg = x < 0
    deq = torch.where(neg, -mags[idx], mags[idx]) * torch.exp2(e)
    codes = idx | (neg.to(idx.dtype) << 3)
    return codes, e, deq.reshape(w.shape)


def quant_mxfp4(w):
    """w [..., rows, cols] -> blocks [..., rows, cols/32, 16] U8, scales [..., rows, cols/32] U8."""
    import torch
    codes, e, _ = mxfp4_parts(w)
    codes = codes.to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)  # low nibble = even element
    return blocks.contiguous(), (e.squeeze(-1) + 127).to(torch.uint8).contiguous()


def make_fake_mxfp4():
    import torch

    class FakeMXFP4(torch.nn.Module):
        """Expert weights [E, in, out] (transformers' layout) rounded to MXFP4 along `in`, as
        they are written; straight-through gradient."""

        def forward(self, w):
            q = mxfp4_parts(w.float().transpose(1, 2))[2].transpose(1, 2).to(w.dtype)
            return w + (q - w).detach()
    return FakeMXFP4


# ---- models ------------------------------------------------------------------------------

def target_config(top_k=3):
    """Top-3 of 4 experts: a verify pass over k + 1 tokens touches the union of the experts
    its tokens are routed to (with top-2 of 4, 1.9x the experts of a decode step for four
    tokens; with top-3, 1.33x), which is what a verify costs on a CPU beyond a decode step."""
    from transformers import GptOssConfig
    L = 4
    return GptOssConfig(
        vocab_size=4096, hidden_size=768, intermediate_size=640, num_hidden_layers=L,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, num_local_experts=4,
        num_experts_per_tok=top_k, sliding_window=128,
        layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)],
        max_position_embeddings=4096, rms_norm_eps=1e-5, attention_bias=True,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=2, pad_token_id=0,
        router_aux_loss_coef=0.02, output_router_logits=True)


def parse_shape(text):
    """A draft shape "HIDDENxLAYERSxMLP" (heads of 64: HIDDEN / 64 query heads, one KV head)."""
    h, n, i = (int(v) for v in text.split("x"))
    if h % 64 or n < 1 or i < 1:
        raise SystemExit(f"--draft-shapes: '{text}' is not HIDDENxLAYERSxMLP with HIDDEN a multiple of 64")
    return h, n, i


def draft_config(shape=(192, 2, 512)):
    from transformers import LlamaConfig
    h, n, i = shape
    return LlamaConfig(vocab_size=4096, hidden_size=h, intermediate_size=i, num_hidden_layers=n,
                       num_attention_heads=h // 64, num_key_value_heads=1, head_dim=64,
                       max_position_embeddings=4096, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                       tie_word_embeddings=True, bos_token_id=None, eos_token_id=2, pad_token_id=0)


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def batches(ids, seq, batch, gen):
    import torch
    n = ids.numel() - seq - 1
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        x = torch.stack([ids[s:s + seq + 1] for s in starts.tolist()])
        yield x[:, :-1], x[:, 1:]


def lr_at(step, steps, peak, warm=100):
    return peak * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / steps))))


AUTOCAST = True
# draft tokens per round the draft's generation_config.json suggests: on the 2-core CPU,
# with the top-3 target, k = 4 beat 3 and 5 (specula bench, three alternating rounds:
# speedup 1.66-1.69 vs 1.21-1.68 vs 1.19-1.45): a verify pass over k + 1 tokens costs
# about 1.7 target steps and the fourth draft token is still accepted 30% of the time
DRAFT_TOKENS = 4
EAGER_EXPERTS = False


def eager_experts(model):
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    else:
        model.config._experts_implementation = "eager"


def probe_target(model, ids, seq):
    """One forward/backward on a small batch; on failure (an experts kernel that autocast does
    not cover, say) fall back to transformers' eager experts, then to fp32 without autocast."""
    import torch
    import traceback
    from torch.nn.utils import parametrize
    global AUTOCAST, EAGER_EXPERTS
    x = ids[:4 * seq].reshape(4, seq).cuda()
    for attempt in range(3):
        try:
            with parametrize.cached(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=AUTOCAST):
                out = model(input_ids=x)
                out.logits.float().mean().backward()
            model.zero_grad(set_to_none=True)
            log(f"probe ok (autocast {AUTOCAST}, experts {getattr(model.config, '_experts_implementation', '?')})")
            return
        except Exception:  # noqa: BLE001
            log("probe failed:\n" + traceback.format_exc(limit=6))
            model.zero_grad(set_to_none=True)
            if attempt == 0:
                eager_experts(model)
                EAGER_EXPERTS = True
            else:
                AUTOCAST = False
    raise SystemExit("target forward fails")


def train_target(model, ids, steps, budget_s, seq, batch):
    import torch
    from torch.nn.utils import parametrize
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    t0 = time.time()
    step = 0
    for step, (x, y) in enumerate(batches(ids, seq, batch, gen)):
        if step >= steps:
            break
        if time.time() - t0 > budget_s:
            log(f"target: STOPPED EARLY at step {step} of {steps} (wall-clock guard {budget_s:.0f}s)")
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, 2e-3)
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with parametrize.cached(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=AUTOCAST):
            out = model(input_ids=x)
            ce = torch.nn.functional.cross_entropy(out.logits.float().reshape(-1, out.logits.shape[-1]),
                                                   y.reshape(-1))
            aux = getattr(out, "aux_loss", None)
            loss = ce + (model.config.router_aux_loss_coef * aux if aux is not None else 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            log(f"target step {step} lr {opt.param_groups[0]['lr']:.2e} ce {ce.item():.3f} "
                f"aux {aux.item() if aux is not None else float('nan'):.3f}")
    log(f"target: {step} steps in {time.time() - t0:.0f}s")


def mixed_batches(ids, gen_ids, seq, batch, gen):
    """Batches of the corpus alone, or with half their rows from the on-policy stream."""
    import torch
    if gen_ids is None or gen_ids.numel() <= seq + 1:
        yield from batches(ids, seq, batch, gen)
        return
    a, b = batches(ids, seq, batch - batch // 2, gen), batches(gen_ids, seq, batch // 2, gen)
    while True:
        xa, ya = next(a)
        xb, yb = next(b)
        yield torch.cat([xa, xb]), torch.cat([ya, yb])


def train_draft(drafts, teacher, ids, steps, budget_s, seq, batch, gen_ids=None):
    """Distils every draft in `drafts` from one teacher forward per batch: KL(target || draft)
    at every position, on the corpus mixed half and half with the target's own continuations
    (gen_ids) when there are any."""
    import torch
    gen = torch.Generator().manual_seed(2)
    opts = [torch.optim.AdamW(d.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1) for d in drafts]
    for d in drafts:
        d.train()
    t0 = time.time()
    step = 0
    for step, (x, _) in enumerate(mixed_batches(ids, gen_ids, seq, batch, gen)):
        if step >= steps:
            break
        if time.time() - t0 > budget_s:
            log(f"draft: STOPPED EARLY at step {step} of {steps} (wall-clock guard {budget_s:.0f}s)")
            break
        x = x.cuda(non_blocking=True)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            logp_t = torch.log_softmax(teacher(input_ids=x).logits.float(), -1)
        kls = []
        for draft, opt in zip(drafts, opts):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, steps, 3e-3)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logq = torch.log_softmax(draft(input_ids=x).logits.float(), -1)
            # KL(target || draft), mean over positions
            kl = (logp_t.exp() * (logp_t - logq)).sum(-1).mean()
            opt.zero_grad(set_to_none=True)
            kl.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            opt.step()
            kls.append(kl.item() if step % 100 == 0 else 0.0)
        if step % 100 == 0:
            log(f"draft step {step} lr {opts[0].param_groups[0]['lr']:.2e} kl " + " ".join(f"{k:.3f}" for k in kls))
    log(f"draft: {step} steps in {time.time() - t0:.0f}s")


def chat_prompts(docs, n, rng, exclude):
    """Up to n prompts cut from the training conversations at the start of an assistant turn
    (the generation prompt included), none containing a string of `exclude`."""
    tag = "<|im_start|>assistant\n"
    out = []
    for d in docs:
        ends = [m.end() for m in re.finditer(re.escape(tag), d)] if d.startswith("<|im_start|>") else []
        if ends:
            p = d[:rng.choice(ends)]
            if not any(e in p for e in exclude):
                out.append(p)
    rng.shuffle(out)
    return out[:n]


def teacher_continuations(teacher, tok, prompts, new_tokens, batch, budget_s):
    """On-policy text for the draft (as DistillSpec): the target's own continuations of chat
    prompts, alternate batches greedy and at temperature 0.7, new_tokens each with the end of
    turn suppressed (so they run on, as `specula bench` decodes past it). Left-padded batches
    of prompts of similar length. Returns the token stream prompt + continuation +
    <|endoftext|> ..., or None if generation fails (the draft then learns from the corpus)."""
    import torch
    enc = [tok.encode(p).ids[-192:] for p in prompts]
    order = sorted(range(len(enc)), key=lambda i: len(enc[i]))
    stream, t0, n_new = [], time.time(), 0
    try:
        for bi, b0 in enumerate(range(0, len(order), batch)):
            if time.time() - t0 > budget_s:
                log(f"on-policy: STOPPED EARLY after {b0} of {len(order)} prompts (guard {budget_s:.0f}s)")
                break
            idx = order[b0:b0 + batch]
            L = max(len(enc[i]) for i in idx)
            x = torch.zeros(len(idx), L, dtype=torch.long)
            m = torch.zeros_like(x)
            for r, i in enumerate(idx):
                x[r, L - len(enc[i]):] = torch.tensor(enc[i])
                m[r, L - len(enc[i]):] = 1
            torch.manual_seed(100 + bi)
            kw = dict(do_sample=True, temperature=0.7, top_p=1.0) if bi % 2 else dict(do_sample=False)
            with torch.no_grad():
                g = teacher.generate(x.cuda(), attention_mask=m.cuda(), max_new_tokens=new_tokens,
                                     min_new_tokens=new_tokens, pad_token_id=0, **kw)
            for r, i in enumerate(idx):
                cont = g[r, L:].tolist()
                stream += enc[i] + cont + [0]
                n_new += len(cont)
            if bi == 0:
                log("on-policy sample:", repr(tok.decode(enc[idx[0]] + g[0, L:].tolist())[-400:]))
    except Exception:  # noqa: BLE001
        import traceback
        log("on-policy generation failed, the draft learns from the corpus alone:\n" +
            traceback.format_exc(limit=6))
        return None
    log(f"on-policy: {n_new / 1e6:.2f}M new tokens from {len(stream) and n_new // new_tokens} prompts "
        f"in {time.time() - t0:.0f}s")
    return torch.tensor(stream, dtype=torch.long)


def evaluate(target, draft, val_ids, seq, n_batches=16, batch=16):
    """Validation cross-entropy of both, KL(target || draft), and how often their argmax agree."""
    import torch
    gen = torch.Generator().manual_seed(3)
    it = batches(val_ids, seq, batch, gen)
    tot = {"target_ce": 0.0, "draft_ce": 0.0, "kl": 0.0, "agree": 0.0}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=AUTOCAST):
        for _ in range(n_batches):
            x, y = next(it)
            x, y = x.cuda(), y.cuda()
            lt = torch.log_softmax(target(input_ids=x).logits.float(), -1)
            tot["target_ce"] += torch.nn.functional.nll_loss(lt.reshape(-1, lt.shape[-1]), y.reshape(-1)).item()
            if draft is not None:
                ld = torch.log_softmax(draft(input_ids=x).logits.float(), -1)
                tot["draft_ce"] += torch.nn.functional.nll_loss(ld.reshape(-1, ld.shape[-1]), y.reshape(-1)).item()
                tot["kl"] += (lt.exp() * (lt - ld)).sum(-1).mean().item()
                tot["agree"] += (lt.argmax(-1) == ld.argmax(-1)).float().mean().item()
    return {k: v / n_batches for k, v in tot.items()}


def save_tokenizer(tok, path):
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=1)


def generation_config(path, draft_tokens=None):
    """Sampling defaults; a draft also says how many tokens it drafts per round
    (num_assistant_tokens, as transformers' assisted generation reads it)."""
    cfg = {"eos_token_id": 2, "pad_token_id": 0, "do_sample": True, "temperature": 0.7, "top_p": 0.95}
    if draft_tokens:
        cfg["num_assistant_tokens"] = draft_tokens
    cfg["transformers_version"] = __import__("transformers").__version__
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def export_target(model, tok, path):
    """save_pretrained (fp32, hub names), then experts -> MXFP4 blocks/scales, the rest BF16."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file
    tmp = path + ".tmp"
    for d in (tmp, path):
        if os.path.exists(d):
            shutil.rmtree(d)
    model.config.output_router_logits = False
    model.float().save_pretrained(tmp)
    packed = {}
    for f in sorted(os.listdir(tmp)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(tmp, f), "pt") as st:
                for k in st.keys():
                    t = st.get_tensor(k)
                    if k.endswith("experts.gate_up_proj") or k.endswith("experts.down_proj"):
                        blocks, scales = quant_mxfp4(t.float().transpose(1, 2).contiguous())  # [E, out, in]
                        packed[k + "_blocks"] = blocks
                        packed[k + "_scales"] = scales
                    else:
                        packed[k] = t.to(torch.bfloat16).contiguous()
    os.makedirs(path)
    save_file(packed, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(tmp, "config.json")) as f:
        cfg = json.load(f)
    cfg["dtype"] = "bfloat16"
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    generation_config(path)
    save_tokenizer(tok, path)
    shutil.rmtree(tmp)


def load_target(path, device="cpu"):
    import torch
    from transformers import GptOssForCausalLM, Mxfp4Config
    m = GptOssForCausalLM.from_pretrained(path, quantization_config=Mxfp4Config(dequantize=True),
                                          dtype=torch.float32, attn_implementation="eager")
    return m.float().eval().to(device)


def greedy_loop_check(model, vocab, n=64, tail=32):
    """specula check's degenerate-loop test: 8 spread ids, 64 greedy tokens ignoring EOS."""
    import torch
    ids = [(i * 7919 + 13) % vocab for i in range(8)]
    out = []
    with torch.no_grad():
        for _ in range(n):
            t = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(t)
    for p in range(1, 17):
        if all(out[i] == out[i - p] for i in range(n - tail + p, n)):
            return f"WARN: the last {tail} greedy tokens repeat a {p}-token cycle"
    return "pass: no short cycle"


def target_stage(args, tok, ids, val_ids, seq, batch, out):
    """Trains the target (quantization-aware), writes OUT/default, checks the written file
    against the trained weights; returns the written model read back (the teacher)."""
    import torch
    from torch.nn.utils import parametrize
    from transformers import GptOssForCausalLM
    torch.manual_seed(10)
    try:  # sinks need eager attention (transformers' sdpa has no sinks)
        target = GptOssForCausalLM._from_config(target_config(args.top_k), attn_implementation="eager")
    except TypeError:
        target = GptOssForCausalLM(target_config(args.top_k))
    log("target attention:", target.config._attn_implementation, f"params {n_params(target) / 1e6:.2f}M")
    FakeMXFP4 = make_fake_mxfp4()
    for name, mod in target.named_modules():
        for pname in ("gate_up_proj", "down_proj"):
            p = getattr(mod, pname, None)
            if isinstance(p, torch.nn.Parameter) and p.dim() == 3:
                parametrize.register_parametrization(mod, pname, FakeMXFP4())
    target.cuda()
    probe_target(target, ids, seq)
    stage_budget = args.budget_s * 0.62
    train_target(target, ids, args.target_steps, stage_budget, seq, batch)
    target.eval()
    with parametrize.cached():
        ev = evaluate(target, None, val_ids, seq)
    log(f"target (QAT forward) validation ce {ev['target_ce']:.4f}")
    for name, mod in target.named_modules():
        if parametrize.is_parametrized(mod):
            for pname in list(mod.parametrizations.keys()):
                parametrize.remove_parametrizations(mod, pname, leave_parametrized=False)
    target.cpu()
    export_target(target, tok, os.path.join(out, "default"))
    log("target written:", sorted(os.listdir(os.path.join(out, "default"))))

    # the written checkpoint read back by transformers, vs the trained model
    ref = load_target(os.path.join(out, "default"))
    with torch.no_grad():
        for name, mod in target.named_modules():
            for pname in ("gate_up_proj", "down_proj"):
                p = getattr(mod, pname, None)
                if isinstance(p, torch.nn.Parameter) and p.dim() == 3:
                    p.copy_(mxfp4_parts(p.float().transpose(1, 2))[2].transpose(1, 2))
        for p in target.parameters():
            p.copy_(p.to(torch.bfloat16).float())
        x = val_ids[:200].unsqueeze(0)
        a = target.float().eval()(input_ids=x).logits
        b = ref(input_ids=x).logits
        log(f"export check: max |logits(trained, rounded) - logits(read back)| = {(a - b).abs().max().item():.3e} "
            f"(logit scale {a.abs().max().item():.1f})")
    del target
    teacher = ref.to(torch.bfloat16).cuda().eval()
    if EAGER_EXPERTS:
        eager_experts(teacher)
    ev_t = evaluate(teacher, None, val_ids, seq)
    log(f"shipped target validation ce {ev_t['target_ce']:.4f}")

    return teacher


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--kjv", required=True)
    ap.add_argument("--target-steps", type=int, default=1200)
    ap.add_argument("--draft-steps", type=int, default=1500)
    ap.add_argument("--budget-s", type=float, default=240.0, help="wall-clock guard for both stages")
    ap.add_argument("--top-k", type=int, default=3, help="experts per token of the target's 4")
    ap.add_argument("--tokenizer", help="an existing tokenizer.json to use instead of training one")
    ap.add_argument("--teacher", help="an existing target directory: train only its draft")
    ap.add_argument("--draft-shapes", default="192x2x512",
                    help="drafts to distil together, HIDDENxLAYERSxMLP,...: the first is written to "
                         "OUT/default-draft, the others to OUT/default-draft-HIDDENxLAYERSxMLP")
    ap.add_argument("--onpolicy-prompts", type=int, default=0,
                    help="chat prompts the target continues to give the drafts on-policy text (0: none)")
    ap.add_argument("--onpolicy-tokens", type=int, default=160, help="tokens the target adds to each")
    ap.add_argument("--corpus-only", action="store_true", help="build the corpus and stop (no torch)")
    args = ap.parse_args()
    t_start = time.time()
    train_docs, val_docs = build_corpus(args.kjv)
    if args.corpus_only:
        for d in train_docs[:3]:
            print(repr(d[:300]))
        return
    import torch
    from torch.nn.utils import parametrize
    from transformers import GptOssForCausalLM, LlamaForCausalLM
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import record
    log("torch", torch.__version__, "transformers", __import__("transformers").__version__,
        torch.cuda.get_device_name(0))
    torch.backends.cuda.matmul.allow_tf32 = True
    if args.teacher or args.tokenizer:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(args.tokenizer or os.path.join(args.teacher, "tokenizer.json"))
    else:
        tok = train_tokenizer(train_docs, 4096)
    eot = tok.token_to_id("<|endoftext|>")
    assert [tok.token_to_id(s) for s in SPECIALS] == [0, 1, 2]

    def encode(docs):
        out = []
        for e in tok.encode_batch(docs):
            out += e.ids + [eot]
        return torch.tensor(out, dtype=torch.long)
    ids, val_ids = encode(train_docs), encode(val_docs)
    log(f"tokenizer {'loaded' if args.teacher or args.tokenizer else 'trained'}; {ids.numel() / 1e6:.2f}M training tokens, {val_ids.numel() / 1e6:.2f}M validation")
    seq, batch = 512, 64

    out = args.out
    os.makedirs(out, exist_ok=True)
    if args.teacher:  # redistill the draft of an existing target
        teacher = load_target(args.teacher).to(torch.bfloat16).cuda().eval()
        ev_t = evaluate(teacher, None, val_ids, seq)
        log(f"teacher {args.teacher} validation ce {ev_t['target_ce']:.4f}")
    else:
        teacher = target_stage(args, tok, ids, val_ids, seq, batch, out)
    teacher.generation_config.do_sample = False

    gen_ids = gen_val = None
    if args.onpolicy_prompts:
        # the prompts `specula bench` measures are left out of the on-policy prompts
        bench = ["Write the function `dedent` from the `textwrap` module.", "Recite Psalm 23.",
                 "What does the function `json.dumps` do?"]
        prompts = chat_prompts(train_docs, args.onpolicy_prompts, random.Random(4), bench)
        gen_all = teacher_continuations(teacher, tok, prompts, args.onpolicy_tokens, 256, 90.0)
        if gen_all is not None:
            cut = gen_all.numel() * 19 // 20  # the last 5% held out
            gen_ids, gen_val = gen_all[:cut], gen_all[cut:]
    shapes = [parse_shape(t) for t in args.draft_shapes.split(",")]
    drafts = []
    for shape in shapes:
        torch.manual_seed(11)
        drafts.append(LlamaForCausalLM(draft_config(shape)).cuda())
        log(f"draft {shape} params {n_params(drafts[-1]) / 1e6:.2f}M")
    remaining = args.budget_s - (time.time() - t_start)
    guard = remaining - 25 - 15 * len(shapes) if args.teacher else min(remaining - 45, args.budget_s * 0.4)
    train_draft(drafts, teacher, ids, args.draft_steps, max(30.0, guard), seq, batch, gen_ids)
    results = []
    for shape, d in zip(shapes, drafts):
        d.eval()
        ev = evaluate(teacher, d, val_ids, seq)
        name = "default-draft" if not results else "default-draft-" + "x".join(map(str, shape))
        msg = (f"validation {name} {shape}: target ce {ev['target_ce']:.4f}, draft ce {ev['draft_ce']:.4f}, "
               f"KL(target||draft) {ev['kl']:.4f}, argmax agreement {ev['agree']:.4f}")
        if gen_val is not None and gen_val.numel() > 257:
            evg = evaluate(teacher, d, gen_val, 256, n_batches=4, batch=16)
            ev["onpolicy_kl"], ev["onpolicy_agree"] = evg["kl"], evg["agree"]
            msg += f"; on held-out on-policy text KL {evg['kl']:.4f}, argmax agreement {evg['agree']:.4f}"
        log(msg)
        dpath = os.path.join(out, name)
        if os.path.exists(dpath):
            shutil.rmtree(dpath)
        d.cpu().to(torch.bfloat16).save_pretrained(dpath)
        generation_config(dpath, DRAFT_TOKENS)
        save_tokenizer(tok, dpath)
        d.cuda().float()
        results.append(dict(ev, name=name, params=n_params(d)))
    draft, ev = drafts[0], results[0]

    # samples: the shipped target and the draft, greedy and at temperature 0.7
    prompts = [prompt_text("Write the function `dedent` from the `textwrap` module."),
               prompt_text("Recite Psalm 23."),
               prompt_text("What does the function `json.dumps` do?"),
               prompt_text("Quote John 3:16.", SYSTEMS[0]),
               "def read_config(path):\n"]
    with torch.no_grad():
        for p in prompts:
            x = torch.tensor([tok.encode(p).ids]).cuda()
            for name, m in (("target", teacher), ("draft", draft)):
                for temp in (0.0, 0.7):
                    torch.manual_seed(5)
                    kw = dict(do_sample=True, temperature=temp, top_p=1.0) if temp else dict(do_sample=False)
                    g = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=96, pad_token_id=0,
                                   eos_token_id=2, **kw)
                    log(f"SAMPLE {name} T={temp} {p!r} -> {tok.decode(g[0, x.shape[1]:].tolist())!r}")

    summary = {"target_val_ce": ev["target_ce"], "draft_val_ce": ev["draft_ce"], "kl": ev["kl"],
               "argmax_agreement": ev["agree"], "draft_params": n_params(draft), "drafts": results,
               "train_tokens": ids.numel(), "val_tokens": val_ids.numel(),
               "onpolicy_tokens": 0 if gen_ids is None else gen_ids.numel(), "seconds": time.time() - t_start}
    if args.teacher:
        log("summary", json.dumps(summary))
        return
    # parity reference for specula's test_parity (CPU, fp32)
    ref = load_target(os.path.join(out, "default"))
    log("degenerate-loop emulation:", greedy_loop_check(ref, 4096))
    refdir = os.path.join(out, "default-reference")
    os.makedirs(refdir, exist_ok=True)
    rprompts = [tok.encode(t).ids for t in ("def fibonacci(n):\n", "import os\n\n\nclass ",
                                            prompt_text("What does the function `json.dumps` do?"), "x")]
    meta = record(ref, refdir, rprompts, extra={"family": "GptOssForCausalLM", "model": "default",
                                                "quantization": "mxfp4",
                                                "reference": "transformers Mxfp4Config(dequantize=True)"})
    log("reference greedy", meta["greedy"][0][:8])
    summary = {"target_val_ce": ev["target_ce"], "draft_val_ce": ev["draft_ce"], "kl": ev["kl"],
               "argmax_agreement": ev["agree"], "target_params": n_params(ref), "draft_params": n_params(draft),
               "train_tokens": ids.numel(), "val_tokens": val_ids.numel(), "seconds": time.time() - t_start}
    with open(os.path.join(out, "train_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    log("summary", json.dumps(summary))


if __name__ == "__main__":
    main()
