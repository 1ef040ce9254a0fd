#!/usr/bin/env python3
"""Write a varied UTF-8 text for the tokenizer check (check-tokenizer.sh --text):
prose, source code, numbers, many scripts and marks, emoji, whitespace runs,
chat markup and special-token look-alikes, deterministic for a seed.

    python3 scripts/llamacpp/tokenizer-corpus.py OUT.txt [--bytes 1000000] [--seed 0] [--prose FILE]

--prose: a text to take prose paragraphs from (default: the TinyStories
sample in ../shared/data when present, else generated words only).
"""
import argparse
import pathlib
import random

WORDS = ("the a robot time little said went apple morning tree river quickly because although however "
         "naïve café résumé coöperate façade jalapeño Übermaß straße garçon fiancée").split()
SCRIPTS = [
    "Ελληνικά γράμματα και αριθμοί", "Русский текст, ёлка и щука", "日本語のテキストとカタカナ、ひらがな。",
    "中文文本，包括标点符号。", "한국어 텍스트입니다", "العربية نص مع أرقام ١٢٣٤٥", "हिन्दी पाठ और मात्राएँ",
    "עברית עם ניקוד: שָׁלוֹם", "ภาษาไทยไม่มีช่องว่าง", "Tiếng Việt có dấu: Người ạ", "ქართული ენა", "Հայերեն",
    "e\u0301te\u0301 (NFD accents)", "Z\u0351\u0352a\u0353l\u0354g\u0355o", "Ⅻ ⅻ ½ ¾ ² ³ ⁴ ① ② ⑳", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙",
    "emoji 🙂👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ ✈︎", "ﬁ ﬂ ﬀ ligatures", "Ωmega ΩMEGA µ µ K K Å Å",
]
SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t ", "\u00a0", "\u3000", "\u2003", "\u2009", "\u200b", "\u2028", "\r\n", "\n\n", "\r", " \n ", "\n\n\n  ", "\f", "\v"]
MARKUP = [
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{q}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "{q}<|endoftext|>", "<|end_of_text|>{q}", "<|im_start|> {q}<|im_end|>", "<|im_start|><|im_start|>{q}", "<|fake|>{q}<|im_end",
    "[PAD151650]{q}[PAD151700] [PAD999]", "<|reserved_special_token_5|>{q}", "<s>{q}</s>", "<｜begin▁of▁sentence｜>{q}",
]
CONTRACTIONS = ["I'm", "I'M", "you're", "YOU'RE", "we've", "We'Ve", "it's", "IT'S", "they'll", "THEY'LL", "he'd", "don't",
                 "DON'T", "can't", "won’t", "it’s", "'s", "''", "'tis", "rock'n'roll", "O'Neil", "students' books"]


def numbers(r):
    out = []
    for _ in range(12):
        k = r.randrange(9)
        if k == 0:
            out.append(str(r.randrange(10 ** r.randrange(1, 16))))
        elif k == 1:
            out.append(f"{r.uniform(-1e6, 1e6):.{r.randrange(0, 7)}f}")
        elif k == 2:
            out.append(f"{r.randrange(1900, 2100)}-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d}")
        elif k == 3:
            out.append(f"0x{r.getrandbits(32):08X}")
        elif k == 4:
            out.append(f"+1 ({r.randrange(100, 999)}) {r.randrange(100, 999)}-{r.randrange(1000, 9999)}")
        elif k == 5:
            out.append(f"{r.randrange(1, 99999):,}")
        elif k == 6:
            out.append(f"{r.random():.3e}")
        elif k == 7:
            out.append("v" + ".".join(str(r.randrange(20)) for _ in range(3)))
        else:
            out.append("".join(r.choice("0123456789") for _ in range(r.randrange(1, 40))))
    return " ".join(out)


def code(r):
    name = r.choice(["parse_value", "fooBar", "HTTPServer2", "__init__", "x1", "déjà_vu"])
    n = r.randrange(1, 1000)
    snippets = [
        f"fn {name}(x: &[u8]) -> Result<u32, String> {{\n    let mut n = 0u32;\n    for b in x {{ n = n.wrapping_mul(31) + *b as u32; }}\n    Ok(n % {n})\n}}\n",
        f"def {name}(self, *args, **kw):\n\tif not args:\n\t\treturn None  # nothing\n\treturn [a ** 2 for a in args if a != {n}]\n",
        f"#include <stdio.h>\nint main(void) {{\n  printf(\"%d\\n\", {n} >> 2);\n  return 0;\n}}\n",
        f"{{\"id\": {n}, \"name\": \"{name}\", \"tags\": [\"a\", \"b\"], \"ok\": true, \"x\": null}}\n",
        f"SELECT * FROM t WHERE id >= {n} AND name LIKE '%{name}%';\n",
        f"    if (a && !b || c != d) {{ x += y; }} else {{ x -= {n}; }}\n",
        f"https://example.com/path/{name}?q={n}&lang=en#section-{n % 7}\n",
        f"- [ ] item **bold** _it_ `code` ~~gone~~ > quote\n## Heading {n}\n",
        f"$ cargo run -- --threads {n % 16} 2>&1 | tee log.txt\n",
    ]
    return r.choice(snippets)


def chunk(r, prose):
    k = r.randrange(8)
    if k == 0 and prose:
        return r.choice(prose) + "\n"
    if k == 1:
        return numbers(r) + "\n"
    if k == 2:
        return code(r)
    if k == 3:
        return r.choice(SCRIPTS) + r.choice(SPACES) + r.choice(SCRIPTS) + "\n"
    if k == 4:
        return "".join(r.choice(WORDS) + r.choice(SPACES) for _ in range(r.randrange(3, 20))) + "\n"
    if k == 5:
        q = " ".join(r.choice(CONTRACTIONS + WORDS) for _ in range(r.randrange(2, 10)))
        return r.choice(MARKUP).format(q=q) + "\n"
    if k == 6:
        return " ".join(r.choice(CONTRACTIONS) for _ in range(8)) + "." + r.choice(SPACES) + "\n"
    return r.choice(SPACES) * r.randrange(1, 5) + r.choice(WORDS) + r.choice("!?.,;:…—–-_/\\|()[]{}<>\"'`~@#$%^&*+=") * r.randrange(1, 4) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--bytes", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    default_prose = pathlib.Path(__file__).resolve().parents[3] / "shared/data/tinystories-1m.txt"
    ap.add_argument("--prose", default=str(default_prose))
    a = ap.parse_args()
    r = random.Random(a.seed)
    p = pathlib.Path(a.prose)
    prose = [x.strip() for x in p.read_text(encoding="utf-8").split("\n\n") if x.strip()] if p.is_file() else []
    parts, size = [], 0
    while size < a.bytes:
        c = chunk(r, prose)
        parts.append(c)
        size += len(c.encode())
    pathlib.Path(a.out).write_text("".join(parts), encoding="utf-8", newline="")
    print(f"wrote {a.out}: {size} bytes, {len(parts)} chunks, prose from {p if prose else 'nowhere'}")


if __name__ == "__main__":
    main()
