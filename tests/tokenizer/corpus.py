"""The tokenizer test corpus: hand-written edge cases plus a seeded random corpus.

Used by diff_tokenizers.py. Strings cover multilingual text, code, whitespace runs,
emoji and ZWJ sequences, combining marks, controls, every family's special tokens inside
text, and random mixtures of all of these (fixed seed, so runs are reproducible).
"""
import random

SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|reserved_special_token_5|>", "<s>", "</s>", "<unk>", "<bos>", "<eos>", "<start_of_turn>",
    "<end_of_turn>", "<pad>", "<unused12>", "<start_of_image>", "</div>", "<｜begin▁of▁sentence｜>",
    "<｜User｜>", "<｜Assistant｜>", "<｜tool▁sep｜>", "<|start|>", "<|message|>", "<|channel|>",
    "<|end|>", "<|return|>", "<|call|>", "<|constrain|>", "<|startoftext|>", "<|endofprompt|>",
]

HAND = [
    "", " ", "  ", "\t", "\n", "\r\n", " \n \n", "\n\n\n\n", "a", "A", "hello", " hello",
    "hello ", "  hello  world  ", "Hello, World!", "HELLO WORLD", "I'm here; you're there; "
    "they've gone; she'll see; he'd know; it's ok.", "I'M YOU'RE THEY'VE SHE'LL HE'D IT'S",
    "don't  DON'T  Don’t  don‘t", "ſ ſt K Å", "1 12 123 1234 12345 123456 1234567890",
    "3.14159 2,718 1e-9 0x1F 0b1010 1_000_000", "٠١٢٣٤٥ ١٢٣ ۱۲۳ १२३ ๑๒๓ 一二三 ⅠⅡⅢ ½ ¼ ²³",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(3))\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * c; }\n",
    "function add(a, b) {\n\treturn a + b;\n}\n", "SELECT * FROM t WHERE x >= 10 AND y <> 'z';",
    "<div class=\"x\">text</div>\n<br/>&nbsp;&amp;", "https://example.com/a/b?c=d&e=f#g user@mail.org",
    "    indented\n        more\n\t\ttabs\n", "trailing spaces   \nand tabs\t\t\n",
    "Ünïcödé àéîõü ÀÉÎÕÜ ñ Ñ ç Ç ß ẞ", "e\u0301 (e + combining acute) vs \u00e9",
    "A\u030a \u212b \u00c5 Å", "\u1100\u1161\u11a8 \uac01 한국어 텍스트", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？",
    "ﬁ ﬂ ﬃ ㎏ ㍻ ① ⑴ ⒜", "中文测试，这是一个句子。", "日本語のテキストです。カタカナとひらがな。",
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "ជំរាបសួរ", "ሰላም ለዓለም", "Բարև աշխարհ", "გამარჯობა", "Xin chào thế giới, Cửa Việt",
    "😀😃😄😁 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️ ✔️ ⭐", "👩🏽‍💻 coding 🧑‍🚀 space",
    "\u200b\u200c\u200d\u2060\ufeff zero width", "\u00a0nbsp\u00a0\u3000ideographic\u3000",
    "\u2028line sep\u2029para sep\u0085nel", "\u180e mongolian vowel separator",
    "\u0000\u0001\u0002\u001f\u007f controls", "tab\tinside\vvertical\fform",
    "\ue000 private \U000f0000 planes", "𝕳𝖊𝖑𝖑𝖔 𝐁𝐨𝐥𝐝 𝟏𝟐𝟑", "𠀀𠀁𠀂 ext-B", "💩" * 10,
    "a" * 300, " " * 300, "." * 50 + " " + "!" * 50, "ab" * 200, "\n" * 40, "\t" * 33,
    "▁ ▁▁ word▁with▁metaspace ▁", "Ġ Ċ ĉ byte-level chars", "<0x41> <0xE2> literal byte tokens",
    "[INST] question [/INST] answer", "<<SYS>>\nsystem\n<</SYS>>", "### Instruction:\n### Response:",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<s>[INST] hi [/INST]</s>", "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>", "<|start|>user<|message|>hi<|end|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
    "x<|im_end|>y", " <|im_end|> ", "<|im_end|><|im_end|>", "<|im_end", "im_end|>", "<<|im_end|>>",
    "</div></div>", "<div>", "text</div>more", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
]


def random_strings(seed, n):
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " " * 8,
        "\n\t\r", ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`", "àéîõüñçßÀÉ", "中文日本語한국어",
        "Привет", "مرحبا", "नमस्ते", "😀👍🏽❤️🇫🇷", "\u0301\u0308\u200d\u00a0\u3000", "▁Ġ",
    ]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.08:
                parts.append(rng.choice(SPECIALS))
            elif r < 0.15:
                parts.append(rng.choice(HAND[:60]))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 10))))
        out.append("".join(parts))
    return out


def corpus(seed=1234, n_random=600):
    return HAND + SPECIALS + random_strings(seed, n_random)
