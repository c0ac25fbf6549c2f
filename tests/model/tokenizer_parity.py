#!/usr/bin/env python3
"""kbrl's tokenizer against Hugging Face `tokenizers`, the oracle.

Trains small byte-level BPE tokenizers with `tokenizers`, configured the way Qwen2 and Llama 3
ship theirs (plus one that exercises the other options kbrl implements), saves each
tokenizer.json, and compares what kbrl_tokenizer_tool computes against the library on more than
10,000 strings each: encode ids (with and without the BOS template, with special tokens split),
decode (with and without special tokens skipped, also of random id sequences) and streaming
decode chunk by chunk. Both forms of `merges` are checked to load to the same ids.

Invalid UTF-8 cannot reach the library (a Python str is always valid); kbrl reads such bytes as
U+FFFD per maximal invalid subsequence, so its ids must equal the library's ids of
bytes.decode("utf-8", "replace").

    tokenizer_parity.py --tool build/tests/model/kbrl_tokenizer_tool --work /tmp/tok
    tokenizer_parity.py ... --write-fixtures tests/data/tokenizer   # refresh the C++ test's files

Exit 0 when everything matches, 1 on any difference (the first ones are printed), 77 when the
`tokenizers` package is missing.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import sysconfig
import unicodedata

try:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from tokenizers.decoders import DecodeStream
except ImportError:
    print("tokenizers is not installed: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                  "<|python_tag|>"] + [f"<|reserved_special_token_{i}|>" for i in range(6)]

# Hand-written text in many scripts, for training and as seeds of test strings.
MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's 42°C; don't forget: we'll see, they've gone, I'm here, you'd know.",
    "Ça va? Él está aquí. Größe, Straße, Mädchen. Œuvre, naïve café, façade, Zürich, São Paulo, Łódź, Dvořák, Ærøskøbing.",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου κόσμε· ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Ἐν ἀρχῇ ἦν ὁ λόγος.",
    "你好，世界！我们正在训练一个语言模型来编写高效的GPU内核。矩阵乘法的性能取决于内存带宽。",
    "こんにちは世界。カーネルを最適化するために、共有メモリとワープシャッフルを使います。ｶﾀｶﾅ",
    "안녕하세요 세계! 한국어 문장은 띄어쓰기를 합니다. 커널 최적화는 어렵습니다.",
    "مرحبا بالعالم! هذه جملة باللغة العربية، مع أرقام ١٢٣ و 456.",
    "שלום עולם! זה משפט בעברית עם ניקוד: בְּרֵאשִׁית בָּרָא אֱלֹהִים.",
    "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ เคอร์เนลเร็วมาก",
    "नमस्ते दुनिया! यह हिंदी में एक वाक्य है। क्षत्रिय, ज्ञान, श्री।",
    "Xin chào thế giới! Tiếng Việt có rất nhiều dấu: ắ ằ ẳ ẵ ặ ế ề ể ễ ệ ố ồ ổ ỗ ộ.",
    "İstanbul'da ılık bir gün; IĞDIR, şişe, çiçek. Ǆ ǅ ǆ ﬁ ﬂ ﬀ ẞ ß.",
    "Emoji: 👋🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇩🇪🇯🇵 ❤️ 🧑🏿‍💻 👍🏻👍🏼👍🏽👍🏾👍🏿 🫠 1️⃣ #️⃣",
    "Mathematics: ∀x∈ℝ, ∃y: x² + y² ≤ 1; ∑ᵢ aᵢ·bᵢ ≈ ∫₀¹ f(t) dt; α β γ δ ε ∞ ≠ ≥ √2 ½ ⅓ Ⅻ ①",
    "Ge'ez: ሰላም ዓለም። Armenian: Բարեւ աշխարհ։ Georgian: გამარჯობა მსოფლიო! Tamil: வணக்கம் உலகம்!",
    "Bengali: হ্যালো বিশ্ব! Gujarati: નમસ્તે વિશ્વ! Khmer: សួស្តីពិភពលោក Myanmar: မင်္ဂလာပါ ကမ္ဘာလောက",
]

CODE_SNIPPETS = [
    '__global__ void relu_kernel(const float* __restrict__ x, float* y, int n) {\n'
    '  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = fmaxf(x[i], 0.0f);\n}\n'
    'relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n',
    '@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n'
    '    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n'
    '    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)\n',
    'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n'
    '    match v.get(3) { Some(&n) if n > 5 => println!("big {n}"), _ => {} }\n}\n',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tch := make(chan int, 8)\n\tgo func() { ch <- 42 }()\n'
    '\tfmt.Println(<-ch)\n}\n',
    'const f = async (xs) => {\n  const r = await Promise.all(xs.map((x) => fetch(`/api/${x}`)));\n'
    '  return r.filter(Boolean).length ?? 0;\n};\nexport default f;\n',
    'public class Main {\n    public static void main(String[] args) {\n        System.out.println("Hello, " + args.length);\n    }\n}\n',
    'SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.user_id = u.id WHERE o.total > 100 GROUP BY u.id;\n',
    '#!/usr/bin/env bash\nset -euo pipefail\nfor f in "$@"; do\n  [[ -f "$f" ]] && wc -l -- "$f" | awk \'{print $1}\'\ndone\n',
    '<html><body><div class="x" id=\'y\'>&amp; &lt;tag&gt; &#x27;</div><script>let a = b && c || d;</script></body></html>\n',
    '{"name": "kbrl", "version": [0, 1, 0], "nested": {"a": null, "b": true, "c": -1.5e-7}}\n',
    'template <typename T, std::size_t N>\nconstexpr auto sum(const std::array<T, N>& a) -> T {\n'
    '  return std::accumulate(a.begin(), a.end(), T{});\n}\nstatic_assert(sum<int, 3>({1, 2, 3}) == 6);\n',
    'sub fib { my $n = shift; return $n < 2 ? $n : fib($n-1) + fib($n-2); }\nprint fib(10), "\\n";\n',
    '\\begin{equation}\n  \\nabla \\cdot \\mathbf{E} = \\frac{\\rho}{\\varepsilon_0}\n\\end{equation}\n',
    'def f(x):\r\n\treturn x  # CRLF and a tab\r\n\r\n',
]

EDGE_FRAGMENTS = [
    "\u00a0", "\u00a0\u00a0", " \u00a0 ", "\u2028", "\u2029", "\u0085", "\u180e", "\u3000", "\u2000", "\u200a", "\u202f",
    "\u205f", "\u1680", "\u200b", "\u200c", "\u200d", "\ufeff", "\u2060", "\t", "\t\t", " \t ", "\v", "\f", "\r", "\n",
    "\r\n", "\r\n\r\n", "\n\n\n", " \n", "\n ", "\r\r\n", "\x00", "\x01", "\x1b[31m", "\x7f",
    "e\u0301", "\u00e9", "a\u0300\u0301", "a\u0301\u0300", "o\u0308\u0304", "\u1e69", "s\u0323\u0307", "s\u0307\u0323",
    "\u212b", "A\u030a", "\u2126", "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1100\u1161", "\u0915\u093c", "\u0958",
    "\u0627\u0653", "\u05e9\u05c1\u05b8", "\u0e01\u0e33", "\u0301", "\u0301\u0301", "\u0345", "\u0344", "\u0f73",
    "\u2260", "=\u0338", "\u00c5\u0301", "\u1e0b\u0323", "\u0071\u0307\u0323", "\ufb2c", "\u2000\u0301",
    "👋", "👋🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇩🇪🇫🇷", "❤️", "☺︎", "1️⃣", "🧑🏿‍🦰", "👁️‍🗨️", "🫶🏼",
    "中文", "漢字", "𠀀", "𪚥", "ｱｲｳ", "ﾊﾟ", "한국어", "العربية", "עברית", "ไทย", "हिन्दी", "ქართული",
    "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D", "'ſ", "'ﬅ", "'K", "'\u212a", "'İ", "'ı",
    "’s", "n't", "'", "''", "'''", "'x", "'123",
    "0", "12", "123", "1234", "12345", "3.14159", "1e-9", "0x1F", "１２３", "٣٤٥", "१२३", "½", "²", "Ⅻ", "①",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start|>user\n", "<|im_", "<|im_end|", "<|im_end|>>",
    "<<|im_end|>", "<|im_start|><|im_end|>", "<think>", "</think>", "<think>\n\n</think>", "<|begin_of_text|>",
    "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|reserved_special_token_5|>",
    "<|reserved_special_token_50|>", "<mask>", " <mask> ", "[R]", "[R]   x", "word", " word ", "swordfish",
    "word_", "_word", "wordé", "éword", "cafe\u0301", "café",
    "\U0010ffff", "\ue000", "\U000f0000", "\ufffd", "\ufffe", "\u0378", "\U0001fbff",
]


def read_files(patterns, limit_bytes):
    out, total = [], 0
    for pattern in patterns:
        for path in sorted(glob.glob(pattern, recursive=True)):
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if not text.strip():
                continue
            out.append(text)
            total += len(text)
            if total >= limit_bytes:
                return out
    return out


def corpora():
    stdlib = sysconfig.get_paths()["stdlib"]
    code = read_files([f"{REPO}/libkbrl/**/*.cpp", f"{REPO}/libkbrl/**/*.hpp", f"{REPO}/libkbrl/**/*.py",
                       f"{REPO}/apps/**/*.cpp", f"{REPO}/examples/**/*.py", f"{REPO}/**/CMakeLists.txt",
                       f"{REPO}/scripts/*.sh"], 1_500_000)
    code += read_files([f"{stdlib}/json/*.py", f"{stdlib}/asyncio/*.py", f"{stdlib}/email/*.py",
                        f"{stdlib}/*.py"], 1_500_000)
    code += read_files(["/usr/include/*.h", "/usr/include/c++/*/bits/stl_*.h"], 800_000)
    code += CODE_SNIPPETS * 20
    prose = read_files([f"{REPO}/docs/*.md", f"{REPO}/README.md", "/usr/share/common-licenses/*"], 1_000_000)
    return code, prose


def chunks(texts, rng, count, max_len):
    out = []
    while len(out) < count:
        t = rng.choice(texts)
        if not t:
            continue
        a = rng.randrange(len(t))
        out.append(t[a:a + rng.randint(1, max_len)])
    return out


def random_codepoint_string(rng):
    blocks = [(0x20, 0x7e), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff),
              (0x900, 0x97f), (0xe00, 0xe7f), (0x1100, 0x11ff), (0x1e00, 0x1eff), (0x2000, 0x206f),
              (0x2190, 0x22ff), (0x3000, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xacff), (0xfb00, 0xfb4f),
              (0xfe00, 0xfe0f), (0xff00, 0xffef), (0x1f300, 0x1f64f), (0x1f900, 0x1f9ff), (0x20000, 0x2000f)]
    chars = []
    for _ in range(rng.randint(1, 30)):
        lo, hi = rng.choice(blocks)
        cp = rng.randint(lo, hi)
        # Characters unassigned in Unicode 14 are left out: the library's regex engine and its
        # normalization tables may know a newer Unicode than PCRE2 and Python here.
        if unicodedata.category(chr(cp)) == "Cn":
            continue
        chars.append(chr(cp))
    return "".join(chars)


def test_strings(code, prose, rng):
    """At least 10,000 strings (as bytes): code, prose, scripts, edge cases, invalid UTF-8."""
    out = []
    out += [s.encode() for s in chunks(code, rng, 4000, 400)]
    out += [s.encode() for s in chunks(prose, rng, 1500, 300)]
    out += [s.encode() for s in MULTILINGUAL + CODE_SNIPPETS + EDGE_FRAGMENTS]
    for _ in range(1500):  # sentences of several scripts run together
        out.append(" ".join(rng.choice(MULTILINGUAL)[rng.randrange(20):][:rng.randint(1, 80)]
                            for _ in range(rng.randint(1, 3))).encode())
    for _ in range(2500):  # edge cases glued to words, code and each other
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.45:
                parts.append(rng.choice(EDGE_FRAGMENTS))
            elif r < 0.6:
                parts.append(rng.choice(["x", "hello", "Hello", " world", "foo_bar", "α", "é", "中", "ab12"]))
            elif r < 0.7:
                parts.append(" " * rng.randint(1, 40))
            elif r < 0.75:
                parts.append(rng.choice(["\n", "\r\n", "\t"]) * rng.randint(1, 12))
            elif r < 0.82:
                parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40))))
            else:
                parts.append(random_codepoint_string(rng))
        out.append("".join(parts).encode())
    for n in (100, 1000, 5000):
        out += [(" " * n).encode(), ("9" * n).encode(), ("a" * n).encode(), ("\n" * n).encode(),
                ("ab " * n).encode(), ("\u00a0" * n).encode(), ("🙂" * n).encode()]
    for _ in range(700):  # invalid UTF-8: random bytes, and valid text cut or spliced mid-character
        r = rng.random()
        if r < 0.4:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))))
        elif r < 0.7:
            b = rng.choice(MULTILINGUAL).encode()
            a = rng.randrange(len(b))
            out.append(b[a:a + rng.randint(1, 60)])
        else:
            b = bytearray(rng.choice(MULTILINGUAL + EDGE_FRAGMENTS[:80]).encode())
            for _ in range(rng.randint(1, 3)):
                b.insert(rng.randrange(len(b) + 1), rng.choice([0x80, 0xbf, 0xc0, 0xc1, 0xe0, 0xed, 0xf0, 0xf4,
                                                                0xf5, 0xff, 0xe2, 0xf0]))
            out.append(bytes(b))
    out += [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"a\xed\xa0\x80b", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe0\x80\xaf",
            b"\xf0\x9f\x98", b"\xf0\x9f", b"\xe4\xb8", b"\xff\xfe", b"\x80\x80\x80", b"\xf8\x88\x80\x80\x80"]
    rng.shuffle(out)
    return out


def train(kind, code, prose, vocab_size):
    texts = code[:400] + prose[:100] + MULTILINGUAL * 30 + CODE_SNIPPETS * 10
    # Edge cases often enough that merges span them: a regex or normalization difference then
    # changes ids, not only the split points between byte tokens.
    texts += [("!" + f + " x" + f + "1" + f + "." + f + "  " + f + "\n") * 150 for f in EDGE_FRAGMENTS]
    if kind == "qwen2":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts, trainer)
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIALS])
        # Qwen3 writes its think tags as added tokens that are not special.
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ["<think>", "</think>"]])
        return tok
    if kind == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(texts, trainer)
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA_SPECIALS])
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        return tok
    if kind == "options":
        # A literal split, GPT-2's own split (ByteLevel use_regex) with add_prefix_space, NFC, a vocabulary that
        # lacks some bytes (they are dropped), and added tokens with every flag.
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("::", behavior="isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
        tok.train_from_iterator(texts, trainer)
        tok.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False),
                                AddedToken("<|endoftext|>", special=True, normalized=False)])
        tok.add_tokens([AddedToken("[R]", rstrip=True, normalized=False),
                        AddedToken("word", single_word=True, normalized=True),
                        AddedToken("cafe\u0301", normalized=True),
                        AddedToken("<x y>", special=False, normalized=False)])
        return tok
    if kind == "unk":
        # Bytes missing from the vocabulary become <unk>, one per byte (fuse_unk false).
        tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>"], show_progress=False)
        tok.train_from_iterator(code[:50], trainer)
        return tok
    raise ValueError(kind)


class Tool:
    def __init__(self, path, work):
        self.path, self.work = path, work

    def run(self, mode, tokenizer_json, lines, *flags):
        src = os.path.join(self.work, f"{mode}.in")
        dst = os.path.join(self.work, f"{mode}.out")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        proc = subprocess.run([self.path, mode, tokenizer_json, src, dst, *flags], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.path} {mode} failed: {proc.stderr}")
        with open(dst) as f:
            text = f.read()
        # One output line per input line, each ended by a newline: a line lost or added is an
        # error here, not something a slice or zip() later could hide.
        out = text.split("\n")
        if not text.endswith("\n") or len(out) - 1 != len(lines):
            raise RuntimeError(f"{self.path} {mode}: {text.count(chr(10))} output lines for {len(lines)} input lines")
        return out[:-1]


def ids_line(ids):
    return " ".join(map(str, ids))


class Report:
    def __init__(self):
        self.failures = 0
        self.counts = {}

    def compare(self, what, inputs, expected, actual, show=lambda x: repr(x)[:200]):
        if not len(inputs) == len(expected) == len(actual):
            # Lines paired by position are meaningless once one is missing: all count as failed.
            self.counts[what] = (0, len(expected))
            self.failures += max(len(expected), len(actual), 1)
            print(f"FAIL {what}: {len(actual)} results from kbrl, {len(expected)} from the library, {len(inputs)} inputs")
            return
        bad = [(i, e, a) for i, (e, a) in enumerate(zip(expected, actual, strict=True)) if e != a]
        self.counts[what] = (len(expected) - len(bad), len(expected))
        if bad:
            self.failures += len(bad)
            print(f"FAIL {what}: {len(bad)} of {len(expected)} differ")
            for i, e, a in bad[:5]:
                print(f"  input {show(inputs[i])}\n    library {e[:300]}\n    kbrl    {a[:300]}")
        else:
            print(f"ok   {what}: {len(expected)}")


def check_tokenizer(kind, tok, path, strings, tool, report, rng):
    texts = [b.decode("utf-8", "replace") for b in strings]
    hexes = [b.hex() for b in strings]
    encs = tok.encode_batch(texts, add_special_tokens=False)
    expected = [ids_line(e.ids) for e in encs]
    report.compare(f"{kind} encode", strings, expected, tool.run("encode", path, hexes))

    subset = list(range(0, len(strings), 7))
    exp = [ids_line(tok.encode(texts[i], add_special_tokens=True).ids) for i in subset]
    report.compare(f"{kind} encode add_special_tokens", [strings[i] for i in subset], exp,
                   tool.run("encode", path, [hexes[i] for i in subset], "--add-special-tokens"))

    tok.encode_special_tokens = True
    exp = [ids_line(tok.encode(texts[i], add_special_tokens=False).ids) for i in subset]
    tok.encode_special_tokens = False
    report.compare(f"{kind} encode split_special_tokens", [strings[i] for i in subset], exp,
                   tool.run("encode", path, [hexes[i] for i in subset], "--split-special-tokens"))

    # Decoding: the ids of every string, plus random sequences (ids beyond the vocabulary too).
    id_lists = [e.ids for e in encs]
    limit = tok.get_vocab_size(with_added_tokens=True)
    id_lists += [[rng.randrange(limit + 5) for _ in range(rng.randint(1, 30))] for _ in range(3000)]
    lines = [ids_line(ids) for ids in id_lists]
    for skip in (False, True):
        exp = [s.encode().hex() for s in tok.decode_batch(id_lists, skip_special_tokens=skip)]
        flags = ["--skip-special-tokens"] if skip else []
        report.compare(f"{kind} decode skip_special_tokens={skip}", lines, exp, tool.run("decode", path, lines, *flags))

    roundtrip = sum(1 for t, ids in zip(texts, id_lists[:len(texts)], strict=True) if tok.decode(ids, skip_special_tokens=False) == (unicodedata.normalize("NFC", t) if tok.normalizer else t))
    print(f"     {kind} round trip decode(encode(s)) == normalized s: {roundtrip} of {len(texts)}")

    # Streaming: chunk by chunk against DecodeStream, and all chunks together against decode.
    stream_ids = id_lists[::5]
    lines = [ids_line(ids) for ids in stream_ids]
    got = tool.run("stream", path, lines)
    exp_steps, act_steps, exp_total, act_total = [], [], [], []
    for ids, out in zip(stream_ids, got, strict=True):
        steps_hex, flush_hex = out.split("|")
        chunks_ = [bytes.fromhex(h).decode() for h in steps_hex.split(",")[:-1]]
        act_total.append("".join(chunks_) + bytes.fromhex(flush_hex).decode())
        exp_total.append(tok.decode(ids, skip_special_tokens=False))
        ds = DecodeStream(skip_special_tokens=False)
        exp_steps.append([ds.step(tok, i) or "" for i in ids])
        act_steps.append(chunks_)
    report.compare(f"{kind} stream concatenation == decode", lines, exp_total, act_total)
    report.compare(f"{kind} stream steps == DecodeStream", lines, [repr(x) for x in exp_steps],
                   [repr(x) for x in act_steps])


def legacy_merges(path, dest):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    merges = data["model"]["merges"]
    assert merges and isinstance(merges[0], list), "tokenizers now writes merges as pairs"
    data["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--write-fixtures", help="also write the C++ unit test's fixtures into this folder")
    ap.add_argument("--seed", type=int, default=20240521)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rng = random.Random(args.seed)
    code, prose = corpora()
    strings = test_strings(code, prose, rng)
    print(f"{len(strings)} test strings, {sum(map(len, strings))} bytes")
    assert len(strings) >= 10_000
    tool = Tool(args.tool, args.work)
    report = Report()
    for kind, vocab in (("qwen2", 2000), ("llama3", 2000), ("options", 800), ("unk", 400)):
        tok = train(kind, code, prose, vocab)
        path = os.path.join(args.work, f"{kind}.json")
        tok.save(path, pretty=False)
        check_tokenizer(kind, tok, path, strings, tool, report, rng)
        # Both encodings of merges: the library loads the "a b" form to the same ids, and so must kbrl.
        legacy = os.path.join(args.work, f"{kind}_legacy_merges.json")
        legacy_merges(path, legacy)
        sample = strings[::10]
        exp = [ids_line(Tokenizer.from_file(legacy).encode(b.decode("utf-8", "replace"), add_special_tokens=False).ids)
               for b in sample]
        report.compare(f"{kind} legacy merges encode", sample, exp, tool.run("encode", legacy, [b.hex() for b in sample]))
        if args.write_fixtures and kind != "unk":
            write_fixture(args.write_fixtures, kind, tok, path, strings, rng)
        if kind == "qwen2":
            # The same vocabulary as transformers' own Qwen2Tokenizer lays out tokenizer.json.
            saved = save_with_transformers(tok, args.work)
            if saved:
                check_tokenizer("qwen2 (transformers layout)", Tokenizer.from_file(saved), saved, strings, tool, report, rng)
    total = sum(n for _, n in report.counts.values())
    print(f"{total - report.failures} passed, {report.failures} failed")
    return 1 if report.failures else 0


def save_with_transformers(tok, work):
    """tokenizer.json as transformers' Qwen2Tokenizer writes it, or None without transformers."""
    try:
        from transformers import Qwen2Tokenizer
    except ImportError:
        print("     transformers is not installed: its Qwen2 layout is not checked")
        return None
    model = json.loads(tok.to_str())["model"]
    t = Qwen2Tokenizer(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]], unk_token=None,
                       eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    t.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    folder = os.path.join(work, "qwen2_transformers")
    t.save_pretrained(folder)
    return os.path.join(folder, "tokenizer.json")


def write_fixture(folder, kind, tok, path, strings, rng):
    """A few hundred strings with the library's ids, for tests/model/tokenizer_test.cpp."""
    os.makedirs(folder, exist_ok=True)
    with open(path, encoding="utf-8") as f, open(os.path.join(folder, f"{kind}.json"), "w", encoding="utf-8") as g:
        g.write(f.read())
    picked = [s for s in strings if len(s) <= 120]
    sample = rng.sample(picked, 250) + [s.encode() for s in EDGE_FRAGMENTS]
    with open(os.path.join(folder, f"{kind}_expected.jsonl"), "w", encoding="utf-8") as f:
        for b in sample:
            text = b.decode("utf-8", "replace")
            ids = tok.encode(text, add_special_tokens=False).ids
            row = {"text": text} if text.encode() == b else {"hex": b.hex()}
            row["ids"] = ids
            with_template = tok.encode(text, add_special_tokens=True).ids
            if with_template != ids:
                row["ids_with_template"] = with_template
            decoded = tok.decode(ids, skip_special_tokens=False)
            if decoded != text:
                row["decoded"] = decoded
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    sys.exit(main())
