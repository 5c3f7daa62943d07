"""Trains specula's bundled default model and its draft (run on the device machine).

usage: python3 scripts/reference/train_default_model.py OUT_DIR [--minutes M]

The corpus is the Python standard library of the interpreter running this script: every
module's source, plus chat exchanges built from it ("What does `json.dumps` do?" answered
with the function's docstring summary) rendered with the model's own ChatML template. A
byte-level BPE tokenizer (Hugging Face tokenizers, vocab 4096) is trained on it, then two
LlamaForCausalLM models on the same tokens:

  OUT_DIR/default        hidden 256, 6 layers, 8 heads / 4 KV heads, MLP 704, tied: 5.4M params
  OUT_DIR/default-draft  hidden 128, 2 layers, 4 heads / 2 KV heads, MLP 352, tied: 0.7M params

Both are saved in bf16 with save_pretrained, next to tokenizer.json and a
tokenizer_config.json holding the chat template, so specula runs them like any hub
checkpoint. OUT_DIR/default-reference holds transformers' fp32 logits and greedy
continuations of the saved default model for specula's parity test.
"""
import argparse
import ast
import json
import math
import os
import random
import shutil
import sys
import sysconfig
import time

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import record  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


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


def chat_pairs(path, module):
    """(question, answer) from the docstring summaries of a module's public functions."""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    pairs = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc:
                summary = " ".join(doc.strip().split("\n\n")[0].split())
                if 10 < len(summary) < 300:
                    kind = "class" if isinstance(node, ast.ClassDef) else "function"
                    pairs.append((f"What does the {kind} `{module}.{node.name}` do?", summary))
    return pairs


def render_chat(q, a):
    return f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n"


def build_corpus():
    root, files = stdlib_files()
    code, chats = [], []
    for p in files:
        try:
            text = open(p, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        code.append(text)
        module = os.path.relpath(p, root)[:-3].replace(os.sep, ".").replace(".__init__", "")
        chats += [render_chat(q, a) for q, a in chat_pairs(p, module)]
    return code, chats


def train_tokenizer(texts, vocab):
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
            "unk_token": None, "add_bos_token": False, "model_max_length": 1024,
            "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
            "added_tokens_decoder": {str(i): {"content": s, "lstrip": False, "normalized": False,
                                              "rstrip": False, "single_word": False, "special": True}
                                     for i, s in enumerate(SPECIALS)}}


def make_model(vocab, hidden, layers, heads, kv, inter, seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=1024,
                      rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=2, pad_token_id=0)
    return LlamaForCausalLM(cfg)


def batches(ids, seq, batch, gen):
    n = ids.numel() - seq - 1
    while True:
        starts = torch.randint(0, n, (batch,), generator=gen)
        x = torch.stack([ids[s:s + seq + 1] for s in starts.tolist()])
        yield x[:, :-1], x[:, 1:]


def train(models_, ids, minutes, device):
    """Trains every model in models_ on the same batches for `minutes` wall-clock minutes."""
    seq, batch = 256, 64
    gen = torch.Generator().manual_seed(1)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1) for m in models_]
    total = None
    t0, step = time.time(), 0
    budget = minutes * 60
    for x, y in batches(ids, seq, batch, gen):
        frac = (time.time() - t0) / budget
        if frac >= 1:
            break
        lr = 3e-3 * min(1.0, (step + 1) / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        x, y = x.to(device), y.to(device)
        losses = []
        for m, o in zip(models_, opts):
            for g in o.param_groups:
                g["lr"] = lr
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                logits = m(input_ids=x).logits
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
            o.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step()
            losses.append(loss.item())
        if step % 200 == 0:
            print(f"step {step} t {time.time() - t0:.0f}s lr {lr:.2e} loss " +
                  " ".join(f"{l:.3f}" for l in losses), flush=True)
        step += 1
        total = losses
    print(f"trained {step} steps, final loss {total}", flush=True)


def save(model, tok, path):
    if os.path.exists(path):
        shutil.rmtree(path)
    model.to(torch.bfloat16).save_pretrained(path)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--minutes", type=float, default=4.0)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    code, chats = build_corpus()
    random.Random(0).shuffle(chats)
    print(f"corpus: {len(code)} files, {sum(map(len, code)) / 1e6:.1f} MB of code; {len(chats)} chat "
          f"exchanges", flush=True)
    tok = train_tokenizer(code + chats, 4096)
    docs = code + ["".join(chats[i:i + 8]) for i in range(0, len(chats), 8)] * 3
    random.Random(1).shuffle(docs)
    eot = tok.token_to_id("<|endoftext|>")
    ids = []
    for d in docs:
        ids += tok.encode(d).ids + [eot]
    ids = torch.tensor(ids, dtype=torch.long)
    print(f"{ids.numel() / 1e6:.1f}M training tokens", flush=True)
    target = make_model(4096, 256, 6, 8, 4, 704, seed=10).to(device)
    draft = make_model(4096, 128, 2, 4, 2, 352, seed=11).to(device)
    print(f"params: target {sum(p.numel() for p in target.parameters()) / 1e6:.2f}M, "
          f"draft {sum(p.numel() for p in draft.parameters()) / 1e6:.2f}M", flush=True)
    train([target, draft], ids, args.minutes, device)
    target.eval().cpu()
    draft.eval().cpu()
    save(target, tok, os.path.join(args.out, "default"))
    save(draft, tok, os.path.join(args.out, "default-draft"))
    # parity reference: transformers reading the saved checkpoint back in fp32
    ref = LlamaForCausalLM.from_pretrained(os.path.join(args.out, "default"), dtype=torch.float32,
                                           attn_implementation="eager").eval()
    refdir = os.path.join(args.out, "default-reference")
    os.makedirs(refdir, exist_ok=True)
    prompts = [tok.encode(t).ids for t in ("def fibonacci(n):\n", "import os\n\n\nclass ",
                                           render_chat("What does the function `json.dumps` do?", "")[:-len("<|im_end|>\n")],
                                           "x")]
    meta = record(ref, refdir, prompts, extra={"family": "LlamaForCausalLM", "model": "default"})
    with torch.no_grad():
        for p in ("def fibonacci(n):\n", "<|im_start|>user\nWhat does the function `os.path.join` do?<|im_end|>\n"
                  "<|im_start|>assistant\n"):
            out = ref.generate(torch.tensor([tok.encode(p).ids]), max_new_tokens=48, do_sample=False,
                               pad_token_id=0)
            print(repr(p), "->", repr(tok.decode(out[0, len(tok.encode(p).ids):].tolist())), flush=True)
    print("greedy", meta["greedy"][0][:8], flush=True)


if __name__ == "__main__":
    main()
