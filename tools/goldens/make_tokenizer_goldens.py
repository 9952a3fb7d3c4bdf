#!/usr/bin/env python3
"""Builds the tokenizer fixtures and goldens used by tests/unit/tokenizer_test.cc.

Fixtures (tests/fixtures/tokenizers/<name>/, committed, each < 200 KB):
  llama2_style/    tokenizer.json converted by transformers' LlamaTokenizerFast from
                   ../shared/models/stories260K/tok512.model in the original Llama-2
                   layout: normalizer Prepend("▁") + Replace(" ", "▁"), byte_fallback,
                   decoder Replace/ByteFallback/Fuse/Strip.
  metaspace_style/ the same vocabulary converted with legacy=False (Mistral-v0.3 layout):
                   Metaspace pre-tokenizer with prepend_scheme "first".
  gpt2_style/      byte-level BPE (ByteLevel pre-tokenizer with the GPT-2 regex), vocab
                   1000, trained with `tokenizers` on ../shared/models/corpus/sotu.txt plus
                   the unicode/code text below; "<mask>" is an lstrip special token.
  llama3_style/    byte-level BPE with Split(Llama-3 regex) + ByteLevel(use_regex=False),
                   ignore_merges, Llama-3 special tokens, a non-special added token,
                   TemplateProcessing with <|begin_of_text|>, clean_up_tokenization_spaces.
  misc_style/      the less common components: NFKC/Lowercase/Strip/Replace normalizers,
                   Digits and string Splits with every behaviour, a splitting Metaspace,
                   unk fusing, single_word/rstrip/normalized added tokens, the Metaspace
                   decoder and RobertaProcessing.
  qwen2_style/     NFC, Split(Qwen2 regex) + ByteLevel, and no decoder at all.
The SentencePiece models themselves (tok512.model, tok105.model) are not copied: the
C++ test reads them from ../shared/models and skips without them.

Goldens (tests/fixtures/tokenizers/goldens.json): for every tokenizer and every text,
the ids without and with special tokens, the tokens, and the decoded text; plus
"decode_cases": seeded random id sequences (byte tokens, specials, invalid UTF-8) and
their reference decoding. References: the `sentencepiece` library for sp_tok512 /
sp_tok105, transformers' AutoTokenizer loaded from the fixture directory for the rest.

Run from the repository root:
  .venv/bin/python tools/goldens/make_tokenizer_goldens.py
"""

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import sys

FORMAT_VERSION = 1
COMMAND = ".venv/bin/python tools/goldens/make_tokenizer_goldens.py"

LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")

LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]

# Extra training text so that the byte-level vocabularies see code and non-ASCII.
EXTRA_TRAINING_TEXT = """\
def tokenize(text: str) -> list[int]:
    # Split on whitespace, then look every piece up.
    return [vocab.get(w, UNK) for w in text.split()]

for (int i = 0; i < n; ++i) {
  if (ids[i] == kEos) break;
  out += pieces[ids[i]];
}
const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;
Le café est délicieux, n'est-ce pas ? Ça coûte 3,50 € à Paris.
Über den Wolken muss die Freiheit wohl grenzenlos sein. Straße, Grüße.
El niño comió piña en la mañana. ¿Dónde está la biblioteca?
東京は日本の首都です。今日はいい天気ですね。
北京是中国的首都。我们明天见。
서울은 한국의 수도입니다. 안녕하세요!
Москва — столица России. Привет, мир!
Ελληνικά: Καλημέρα κόσμε.
مرحبا بالعالم. اللغة العربية جميلة.
שלום עולם, מה שלומך?
नमस्ते दुनिया, आप कैसे हैं?
สวัสดีชาวโลก
Emoji: 😀 😃 😄 🎉 🍕 👍🏽 👨‍👩‍👧‍👦 🇺🇸 ❤️ ✨
Math: ∀x ∈ ℝ, x² ≥ 0; ∑ᵢ aᵢ = π ≈ 3.14159; √2 → ∞.
"""

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "",
    " leading space",
    "trailing space ",
    "  multiple   spaces   here  ",
    "   ",
    "\n",
    "tabs\tand\nnewlines\r\nmixed\n\n\nend",
    "line1\n  \n\tline2   \n",
    "don't I'M we'll they'RE you've she'd it's 's 'S ' s",
    "Numbers: 1234567890 3.14159 -42 1,000,000 abc123def4567 x1 2x",
    "def foo(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n\tprint(foo(3))\n",
    "int main() { std::vector<int> v{1,2,3}; for (auto& x : v) x *= 2; return 0; }",
    "日本語のテキストと中文字符，还有한국어.",
    "Café naïve résumé façade Ærøskøbing Ångström",
    "مرحبا بالعالم שלום עולם",
    "I love 🍕 and 🎉! 😀😃",
    "Family: 👨\u200d👩\u200d👧\u200d👦, flags: 🇺🇸🇯🇵, skin: 👍🏽, heart: ❤️",
    "€100 and £50 ¥1000",
    "a</s>b <s> c<unk>d",
    "<|begin_of_text|>Hi<|eot_id|> <|start_header_id|>user<|end_header_id|>\n\nyo",
    "x <|endoftext|> y<mask>z  <mask> w <think>t</think>",
    "Mixed\u00a0nbsp\u2003em-space\u3000ideographic",
    "ALL CAPS SHOUTING AND lowercase",
    "Wait... what?!?! (yes) [no] {maybe} <html> &amp; @user #tag",
    "https://example.com/path?query=1&b=2#frag",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "∀x ∈ ℝ: x² ≥ 0 → √x",
    "Hello , world ! It 's a test . Do n't , ok ?",
    "e\u0301 vs \u00e9, Zalgo: Z\u0351\u0362a\u0337",
    "नमस्ते दुनिया สวัสดีชาวโลก",
    "ctrl\x01\x7fchars\x00nul",
    " ",
    "it'\u017f a test, IT'S, 'Ll 'lL 'D \u2019s",
    "end.\n\nNext line!\r\n\r\n  indented\n\t\ttabs  \n \n  x\n\n",
    "<s>hello <s> world</s>",
    "<mask>start\t\n <mask>",
    "Hello World and HELLO   WORLD, hello world! a--b|c#d~~e~f%g%%h",
    "x <sw> y<sw>z <sw>_ <rs>   w <rs>",
    "\u216b \ufb01 \u2460 ``quoted'' \uff21\uff22",
    "123456789012 1234 12 \u0661\u0662\u0663\u0664 \u00bd\u2153 \u2162",
    "a\U0001F600b \U0001F600abc abc\U0001F600 __init__ x_y",
    "line\u2028sep\u2029para\u0085nel\u000bvt\u000cff",
]


def fuzz_texts(n, seed):
    """Seeded random strings from a pool of character classes the pre-tokenizers
    treat differently."""
    pool = (list("abcXYZ019 '.,!?-_()\n\t\r") + [" ", "  ", "'s", "'T", "\u00e9", "e\u0301", "\u00df",
            "\u65e5\u672c", "\ud55c", "\u0645", "\u05e9", "\u0e2a", "\U0001F600", "\U0001F468\u200d\U0001F469",
            "\u00a0", "\u3000", "\u2003", "\u0661", "\u00bd", "\u20ac", "<s>", "</s>", "<|eot_id|>",
            "<mask>", "<think>", "\u2581", "\u0120"])
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(n)]


NUM_HANDWRITTEN = len(TEXTS)
TEXTS += fuzz_texts(30, seed=7)


def fixture_dir(root, name):
    return os.path.join(root, "tests", "fixtures", "tokenizers", name)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def write_goldens(path, obj):
    """Like write_json, but keeps lists of ids and tokens on one line."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\n\s*([^\[\]{}]*?)\n\s*\]",
                  lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def fix_llama_config(out_dir, extra):
    """Drops tokenizer.model and the keys that would make transformers re-convert it."""
    os.remove(os.path.join(out_dir, "tokenizer.model"))
    path = os.path.join(out_dir, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg.pop("add_prefix_space", None)
    cfg.pop("model_max_length", None)
    cfg.update(extra)
    write_json(path, cfg)


def build_llama2_style(root, tok512):
    from transformers import LlamaTokenizerFast

    out = fixture_dir(root, "llama2_style")
    shutil.rmtree(out, ignore_errors=True)
    tok = LlamaTokenizerFast(vocab_file=tok512, legacy=True, add_prefix_space=True)
    tok.save_pretrained(out)
    fix_llama_config(out, {"legacy": True})
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": 1, "eos_token_id": 2})
    return out


def build_metaspace_style(root, tok512):
    from transformers import LlamaTokenizerFast

    out = fixture_dir(root, "metaspace_style")
    shutil.rmtree(out, ignore_errors=True)
    tok = LlamaTokenizerFast(vocab_file=tok512, legacy=False, add_prefix_space=True)
    tok.save_pretrained(out)
    fix_llama_config(out, {"legacy": False})
    return out


def training_iterator(corpus, extra=True):
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            yield line
    for _ in range(20 if extra else 0):
        for line in EXTRA_TRAINING_TEXT.splitlines(keepends=True):
            yield line


def build_gpt2_style(root, corpus):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    out = fixture_dir(root, "gpt2_style")
    shutil.rmtree(out, ignore_errors=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_iterator(corpus), trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        mask_token="<mask>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(out)
    return out


def build_llama3_style(root, corpus):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    out = fixture_dir(root, "llama3_style")
    shutil.rmtree(out, ignore_errors=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_iterator(corpus), trainer)
    tok.add_special_tokens([AddedToken(s, normalized=False) for s in LLAMA3_SPECIALS])
    tok.add_tokens([AddedToken("<think>", normalized=False, special=False),
                    AddedToken("</think>", normalized=False, special=False)])
    bot = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A",
            pair="<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1",
            special_tokens=[("<|begin_of_text|>", bot)],
        ),
    ])
    # Llama-3's tokenizer.json sets ignore_merges; the trainer cannot, so edit the JSON.
    spec = json.loads(tok.to_str())
    spec["model"]["ignore_merges"] = True
    tok = Tokenizer.from_str(json.dumps(spec))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        clean_up_tokenization_spaces=True,
    )
    fast.save_pretrained(out)
    eot = tok.token_to_id("<|eot_id|>")
    eos = tok.token_to_id("<|end_of_text|>")
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": bot, "eos_token_id": [eos, eot]})
    write_json(os.path.join(out, "config.json"),
               {"model_type": "llama", "bos_token_id": bot, "eos_token_id": eos})
    return out


def build_misc_style(root, corpus):
    """Exercises the less common components against the reference: NFKC,
    Lowercase, Strip and Replace normalizers; Digits, string Splits with every
    behaviour and a splitting Metaspace; unk fusing; single_word, rstrip and
    normalized added tokens; the Metaspace decoder; RobertaProcessing."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors, trainers
    from tokenizers import pre_tokenizers as pt
    from transformers import PreTrainedTokenizerFast

    out = fixture_dir(root, "misc_style")
    shutil.rmtree(out, ignore_errors=True)
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(left=True, right=True),
        normalizers.Replace("``", '"'),
    ])
    tok.pre_tokenizer = pt.Sequence([
        pt.Digits(individual_digits=True),
        pt.Split("--", behavior="removed"),
        pt.Split("|", behavior="merged_with_previous"),
        pt.Split("#", behavior="merged_with_next"),
        pt.Split("~", behavior="contiguous"),
        pt.Split("%", behavior="isolated", invert=True),
        pt.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
    ])
    # ASCII-only training text, so that other characters become [UNK]. (limit_alphabet
    # would do it too, but breaks frequency ties differently from run to run.)
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                  show_progress=False)
    tok.train_from_iterator(training_iterator(corpus, extra=False), trainer)
    tok.add_tokens([
        AddedToken("<sw>", single_word=True, normalized=False),
        AddedToken("<rs>", rstrip=True, normalized=False),
        AddedToken("hello world", normalized=True),
    ])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    tok.post_processor = processors.RobertaProcessing(
        sep=("[SEP]", tok.token_to_id("[SEP]")), cls=("[CLS]", tok.token_to_id("[CLS]")))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", clean_up_tokenization_spaces=False)
    fast.save_pretrained(out)
    return out


def build_qwen2_style(root, corpus):
    """NFC, the Qwen2 split regex (single digits), ByteLevel, and no decoder
    (tokens are joined with spaces)."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = fixture_dir(root, "qwen2_style")
    shutil.rmtree(out, ignore_errors=True)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_iterator(corpus), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(out)
    return out


def random_decode_cases(vocab_size, byte_ids, special_ids, seed):
    """Seeded id sequences that stress decoding: byte runs, specials, random ids."""
    rng = random.Random(seed)
    cases = []
    for i in range(40):
        n = rng.randint(1, 12)
        ids = []
        for _ in range(n):
            r = rng.random()
            if byte_ids and r < 0.45:
                ids.append(rng.choice(byte_ids))
            elif special_ids and r < 0.55:
                ids.append(rng.choice(special_ids))
            else:
                ids.append(rng.randrange(vocab_size))
        cases.append(ids)
    return cases


def byte_token_ids(vocab):
    out = []
    for piece, i in vocab.items():
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(i)
    return sorted(out)


def goldens_sentencepiece(name, model_path, seed):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    entries = []
    for k, text in enumerate(TEXTS):
        ids = sp.encode(text)
        with_special = ([sp.bos_id()] if sp.bos_id() >= 0 else []) + ids
        decoded = sp.decode(with_special)
        assert decoded == sp.decode(ids)
        entries.append({
            "text": text,
            "ids": ids,
            "ids_with_special": with_special,
            "decoded": decoded,
        })
        if k < NUM_HANDWRITTEN:
            entries[-1]["tokens"] = [sp.id_to_piece(i) for i in ids]
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    specials = [i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
    cases = random_decode_cases(sp.get_piece_size(), byte_token_ids(vocab), specials, seed)
    cases += handmade_byte_cases(vocab, first_special=sp.bos_id())
    decode_cases = [{"ids": ids, "decoded": sp.decode(ids)} for ids in cases]
    return {
        "kind": "sentencepiece",
        "model": os.path.relpath(model_path, os.path.dirname(model_path) + "/../.."),
        "bos_id": sp.bos_id(),
        "eos_ids": [sp.eos_id()] if sp.eos_id() >= 0 else [],
        "vocab_size": sp.get_piece_size(),
        "cases": entries,
        "decode_cases": decode_cases,
    }


def handmade_byte_cases(vocab, first_special):
    """Incomplete / invalid byte-fallback runs next to text and specials."""
    def b(x):
        return vocab.get("<0x%02X>" % x)

    cases = []
    if b(0xE2) is None:
        return cases
    word = vocab.get("▁the", vocab.get("▁a"))
    plain = vocab.get("a", vocab.get("e"))
    seqs = [
        [b(0xE2), b(0x82), b(0xAC)],                    # complete "€"
        [b(0xE2), b(0x82)],                             # truncated at the end
        [b(0xE2), b(0x82), plain],                      # truncated before text
        [b(0x41), b(0xE2), plain],                      # valid byte then truncated
        [b(0xE2), b(0x82), b(0xAC), b(0xE2), plain],    # valid char then truncated
        [b(0x80), b(0xBF), b(0xFF)],                    # stray continuation / never-valid
        [b(0xED), b(0xA0), b(0x80)],                    # surrogate
        [b(0xC0), b(0x80)],                             # overlong
        [b(0xF0), b(0x9F), b(0x98), b(0x80), word],     # emoji then a word
        [b(0x20), word, b(0x20)],                       # leading byte space
        [first_special, b(0x20), plain],
        [word, word, first_special, word],
    ]
    for s in seqs:
        if all(x is not None and x >= 0 for x in s):
            cases.append(s)
    return cases


def goldens_hf(name, model_dir, seed):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    entries = []
    for k, text in enumerate(TEXTS):
        ids = tok.encode(text, add_special_tokens=False)
        with_special = tok.encode(text, add_special_tokens=True)
        decoded = tok.decode(with_special, skip_special_tokens=True)
        entry = {
            "text": text,
            "ids": ids,
            "ids_with_special": with_special,
            "decoded": decoded,
        }
        if k < NUM_HANDWRITTEN:
            entry["tokens"] = tok.convert_ids_to_tokens(ids)
        decoded_plain = tok.decode(ids, skip_special_tokens=True)
        if decoded_plain != decoded:
            entry["decoded_without_special"] = decoded_plain
        entries.append(entry)
    vocab = tok.get_vocab()
    special_ids = sorted(set(tok.all_special_ids) |
                         {i for i, t in tok.added_tokens_decoder.items() if t.special})
    cases = random_decode_cases(len(tok), byte_token_ids(vocab), special_ids, seed)
    bos = tok.bos_token_id if tok.bos_token_id is not None else special_ids[0]
    cases += handmade_byte_cases(vocab, first_special=bos)
    # Byte-level vocabularies: invalid UTF-8 from single-byte tokens.
    byte_level = [vocab[c] for c in ("â", "Ĥ", "Ģ", "¬", "ð", "Ł") if c in vocab]
    if len(byte_level) == 6:
        e2, h_, g_, ac, f0, l_ = byte_level
        cases += [[e2, g_, ac], [e2, g_], [e2, g_, vocab["a"]], [f0, l_, vocab["a"], e2]]
    decode_cases = [{"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)}
                    for ids in cases]
    return {
        "kind": "hf",
        "dir": os.path.basename(model_dir),
        "bos_id": tok.bos_token_id if tok.bos_token_id is not None else -1,
        "vocab_size": len(tok),
        "special_ids": special_ids,
        "cases": entries,
        "decode_cases": decode_cases,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--shared", default=None, help="../shared/models (default: next to the repo)")
    args = ap.parse_args()
    root = args.root
    shared = args.shared or os.path.abspath(os.path.join(root, "..", "shared", "models"))
    tok512 = os.path.join(shared, "stories260K", "tok512.model")
    tok105 = os.path.join(shared, "babyllama-tok105", "tok105.model")
    corpus = os.path.join(shared, "corpus", "sotu.txt")
    for p in (tok512, tok105, corpus):
        if not os.path.exists(p):
            sys.exit(f"missing {p}")
    if importlib.util.find_spec("google.protobuf") is None:  # transformers' SP converter
        sys.exit("needs protobuf: apt-get install python3-protobuf (Debian 12: 3.21.12)")

    dirs = {
        "llama2_style": build_llama2_style(root, tok512),
        "metaspace_style": build_metaspace_style(root, tok512),
        "gpt2_style": build_gpt2_style(root, corpus),
        "llama3_style": build_llama3_style(root, corpus),
        "misc_style": build_misc_style(root, corpus),
        "qwen2_style": build_qwen2_style(root, corpus),
    }
    import sentencepiece
    import tokenizers
    import transformers

    goldens = {
        "format_version": FORMAT_VERSION,
        "command": COMMAND,
        "versions": {
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "sentencepiece": sentencepiece.__version__,
        },
        "tokenizers": {
            "sp_tok512": goldens_sentencepiece("sp_tok512", tok512, seed=512),
            "sp_tok105": goldens_sentencepiece("sp_tok105", tok105, seed=105),
        },
    }
    goldens["tokenizers"]["sp_tok512"]["model"] = "stories260K/tok512.model"
    goldens["tokenizers"]["sp_tok105"]["model"] = "babyllama-tok105/tok105.model"
    for seed, (name, d) in enumerate(sorted(dirs.items())):
        goldens["tokenizers"][name] = goldens_hf(name, d, seed=1000 + seed)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        assert size < 200 * 1024, f"{name} is {size} bytes"
    write_goldens(os.path.join(root, "tests", "fixtures", "tokenizers", "goldens.json"), goldens)
    print("wrote goldens for", ", ".join(goldens["tokenizers"]))


if __name__ == "__main__":
    main()
