"""Synthetic tokenizer.json variants that exercise every component specula implements,
built from the real vocabularies (so the oracle and specula both load them):
normalizers, pre-tokenizers, split behaviours, added-token flags, models (BPE options,
WordPiece, WordLevel), post-processors and decoders. Each variant is a dict ready for
json.dump; the differential test compares specula with the oracle on each.
"""
import copy
import json
import os

BERT_WORDS = ("the of and to in is was for on that with as by at from it his an were are which "
              "this be has or had not also but first one their its new after who they have her "
              "she two been other when there all during into school time may years more most "
              "only over city some world would where later up such used many can state about "
              "national out known university united then made").split()


def _load(deps, name):
    with open(os.path.join(deps, "tokenizers", name, "tokenizer.json"), encoding="utf-8") as f:
        return json.load(f)


def _added(tok_id, content, **flags):
    d = {"id": tok_id, "content": content, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True}
    d.update(flags)
    return d


def wordpiece_tokenizer():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = "abcdefghijklmnopqrstuvwxyz0123456789.,!?;:'\"()-éàüñ中文日本"
    vocab += list(chars) + ["##" + c for c in chars]
    vocab += BERT_WORDS + ["##" + w[1:] for w in BERT_WORDS if len(w) > 2]
    vocab += ["##ing", "##ed", "##s", "##ly", "##er", "##est", "un", "##able", "hello", "world"]
    seen, v = set(), {}
    for w in vocab:
        if w not in seen:
            seen.add(w)
            v[w] = len(v)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [_added(i, t) for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": v},
    }


def wordlevel_tokenizer():
    words = ["<unk>", "<s>", "</s>"] + BERT_WORDS + [w.capitalize() for w in BERT_WORDS] + \
        list(".,!?;:") + ["hello", "world", "Hello", "World"]
    v = {}
    for w in words:
        v.setdefault(w, len(v))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [_added(0, "<unk>"), _added(1, "<s>"), _added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Strip",
                       "strip_left": True, "strip_right": True}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                          {"type": "Punctuation", "behavior": "Isolated"}]},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1],
                           "trim_offsets": True, "add_prefix_space": False},
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": v, "unk_token": "<unk>"},
    }


def variants(deps):
    out = {}
    mistral = _load(deps, "llama2")
    qwen = _load(deps, "qwen3")
    gpt = _load(deps, "gpt4o")

    # SentencePiece as newer transformers writes it: Metaspace pre-tokenizer and decoder
    for scheme in ("always", "first", "never"):
        t = copy.deepcopy(mistral)
        t["normalizer"] = None
        t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme,
                              "split": scheme != "never"}
        t["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": True},
            {"type": "ByteFallback"}, {"type": "Fuse"}]}
        out[f"metaspace_{scheme}"] = t

    # BPE without byte fallback: unknown characters become <unk> (fused or not)
    for fuse in (True, False):
        t = copy.deepcopy(mistral)
        t["model"]["byte_fallback"] = False
        t["model"]["fuse_unk"] = fuse
        t["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 1}]}
        out[f"unk_fuse_{fuse}"] = t

    # normalizers
    for name, norm in {
        "lowercase_nfkd": {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "Lowercase"}]},
        "nfd_strip_accents": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"},
                              {"type": "NFC"}]},
        "nfkc_strip_prepend": {"type": "Sequence", "normalizers": [{"type": "NFKC"},
                              {"type": "Strip", "strip_left": True, "strip_right": False},
                              {"type": "Prepend", "prepend": "!"}]},
        "replace_regex": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
            {"type": "Replace", "pattern": {"String": "a"}, "content": "AA"}]},
        "bert_normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                            "strip_accents": True, "lowercase": False},
    }.items():
        t = copy.deepcopy(qwen)
        t["normalizer"] = norm
        out[f"norm_{name}"] = t

    # pre-tokenizers in front of ByteLevel, on the Qwen vocabulary
    for name, pre in {
        "digits_individual": [{"type": "Digits", "individual_digits": True}],
        "digits_grouped": [{"type": "Digits", "individual_digits": False}],
        "punct_isolated": [{"type": "Punctuation", "behavior": "Isolated"}],
        "punct_merged_prev": [{"type": "Punctuation", "behavior": "MergedWithPrevious"}],
        "punct_merged_next": [{"type": "Punctuation", "behavior": "MergedWithNext"}],
        "punct_contiguous": [{"type": "Punctuation", "behavior": "Contiguous"}],
        "whitespace": [{"type": "Whitespace"}],
        "whitespace_split": [{"type": "WhitespaceSplit"}],
        "char_delimiter": [{"type": "CharDelimiterSplit", "delimiter": "e"}],
        "split_removed_invert": [{"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Removed",
                                  "invert": True}],
        "split_string_merged_next": [{"type": "Split", "pattern": {"String": " "},
                                      "behavior": "MergedWithNext", "invert": False}],
        "split_regex_contiguous": [{"type": "Split", "pattern": {"Regex": "[aeiou]"},
                                    "behavior": "Contiguous", "invert": False}],
    }.items():
        t = copy.deepcopy(qwen)
        t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": pre + [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
        out[f"pre_{name}"] = t

    # the ByteLevel normalizer (byte-level characters written by the normalizer)
    t = copy.deepcopy(gpt)
    t["normalizer"] = {"type": "ByteLevel"}
    t["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "\\S+|\\s+"}, "behavior": "Isolated",
                          "invert": False}
    out["norm_byte_level"] = t

    # GPT-2 style ByteLevel with its own regex and a prefix space
    t = copy.deepcopy(gpt)
    t["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                          "use_regex": True}
    out["byte_level_regex_prefix"] = t

    # added tokens with every flag, normalized ones matched after normalization
    t = copy.deepcopy(qwen)
    t["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}
    base = 151643
    t["added_tokens"] = [
        _added(base, "<|endoftext|>"),
        _added(base + 1, "<|im_start|>", lstrip=True),
        _added(base + 2, "<|im_end|>", rstrip=True),
        _added(base + 3, "hello", special=False, normalized=True, single_word=True),
        _added(base + 4, "WORLD", special=False, normalized=True),
        _added(base + 5, "<mask>", lstrip=True, rstrip=True, single_word=True, special=False),
        _added(base + 6, "ab", special=False),
        _added(base + 7, "abc", special=False),
    ]
    t["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [base + 1], "tokens": ["<|im_start|>"]},
                                              "<|im_end|>": {"id": "<|im_end|>", "ids": [base + 2], "tokens": ["<|im_end|>"]}}}
    out["added_flags"] = t

    # continuing subword prefix / end-of-word suffix on BPE (a small fresh vocabulary)
    v = {c: i for i, c in enumerate(sorted(set("abcdefghijklmnopqrstuvwxyz .,!?")))}
    for c in list(v):
        v.setdefault("##" + c, len(v))
        v.setdefault(c + "</w>", len(v))
        v.setdefault("##" + c + "</w>", len(v))
    merges = []
    for a, b in (("t", "##h"), ("th", "##e</w>"), ("a", "##n"), ("an", "##d</w>"), ("i", "##n"),
                 ("in", "##g</w>"), ("e", "##r")):
        merged = a + b[2:]
        v.setdefault(merged, len(v))
        merges.append(f"{a} {b}")
    v.setdefault("<unk>", len(v))
    out["bpe_prefix_suffix"] = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": {"type": "BPEDecoder", "suffix": "</w>"},
        "model": {"type": "BPE", "vocab": v, "merges": merges, "unk_token": "<unk>", "fuse_unk": True,
                  "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>", "byte_fallback": False,
                  "dropout": None},
    }
    out["wordpiece"] = wordpiece_tokenizer()
    out["wordlevel"] = wordlevel_tokenizer()
    return out
