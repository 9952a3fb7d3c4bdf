#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
from the repository's own fixtures, shrunk so that each seed stays small:

  safetensors       the fixture checkpoints' headers with every tensor cut to a
                    few elements (offsets recomputed), plus one truncated file
  model_config      every config.json under tests/fixtures, tests/golden and models/demo
  tokenizer_json    the fixture tokenizer.json files, vocabularies cut to 200 tokens
  tokenizer_config  every tokenizer_config.json of the fixtures and demo models
  chat_template     the golden chat templates, each followed by NUL and messages
  gguf              a tiny llama GGUF (gpt2 tokenizer, F32/F16/Q8_0/Q4_0 tensors)
                    and one with a llama (SentencePiece) tokenizer
  generate_request  GenerateRequest protos encoded by protoc from text format
  openai_request    completion and chat bodies (first byte: 0 completion, 1 chat)

Crashing inputs found later are added by hand (crash-<what>) and kept.
Run from anywhere: python3 tests/fuzz/make_corpus.py
"""
import glob
import json
import os
import struct
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def out(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def rel(path):
    return os.path.relpath(path, ROOT).replace("/", "_").replace(".", "_")


def safetensors_seeds():
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/models/*/*.safetensors"))):
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        small, offset = {}, 0
        for name, t in header.items():
            if name == "__metadata__":
                small[name] = t
                continue
            shape = [min(d, 3) for d in t["shape"]]
            nbytes = sizes[t["dtype"]]
            for d in shape:
                nbytes *= d
            small[name] = {"dtype": t["dtype"], "shape": shape,
                           "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        text = json.dumps(small, separators=(",", ":")).encode()
        out("safetensors", rel(path), struct.pack("<Q", len(text)) + text + bytes(offset))
    # A real header with its data cut off (DATA_LOSS path).
    raw = open(os.path.join(ROOT, "tests/fixtures/models/tiny_llama3/model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    out("safetensors", "truncated_tiny_llama3", raw[:8 + n + 64])


def json_seeds():
    configs = sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/models/*/config.json")) +
                     glob.glob(os.path.join(ROOT, "tests/golden/data/configs/*/config*.json")) +
                     glob.glob(os.path.join(ROOT, "models/demo/*/config.json")))
    for path in configs:
        out("model_config", rel(path), open(path, "rb").read())
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/tokenizers/*/tokenizer.json"))):
        j = json.load(open(path))
        model = j["model"]
        if isinstance(model.get("vocab"), dict):
            keep = {k: v for k, v in model["vocab"].items() if v < 200}
            model["vocab"] = keep
            merges = []
            for m in model.get("merges") or []:
                a, b = m if isinstance(m, list) else m.split(" ", 1)
                if a in keep and b in keep and a + b in keep:
                    merges.append(m)
            model["merges"] = merges
        for t in j.get("added_tokens") or []:
            t["id"] = min(t["id"], 199)
        out("tokenizer_json", rel(path), json.dumps(j, ensure_ascii=False, separators=(",", ":")))
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/tokenizers/*/tokenizer_config.json")) +
                       glob.glob(os.path.join(ROOT, "models/demo/*/tokenizer_config.json"))):
        out("tokenizer_config", rel(path), open(path, "rb").read())
    goldens = json.load(open(os.path.join(ROOT, "tests/golden/data/chat_templates/goldens.json")))
    messages = json.dumps([{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello."},
                           {"role": "user", "content": "Bye"}])
    for name, t in sorted(goldens["templates"].items()):
        out("chat_template", name, t["source"] + "\0" + messages)
        out("tokenizer_config", "template_" + name,
            json.dumps({"bos_token": "<s>", "eos_token": {"content": "</s>"},
                        "add_bos_token": True, "chat_template": t["source"]}))


# GGUF writer (the layout of core/util/gguf.h).
def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gkv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def gguf(kvs, tensors):
    body = b"".join(kvs)
    directory, data = b"", b""
    for name, dims, gtype, raw in tensors:
        while len(data) % 32:
            data += b"\0"
        directory += gstr(name) + struct.pack("<I", len(dims))
        directory += b"".join(struct.pack("<Q", d) for d in dims)
        directory += struct.pack("<IQ", gtype, len(data))
        data += raw
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + body + directory
    while len(head) % 32:
        head += b"\0"
    return head + data


def u32(key, v):
    return gkv(key, 4, struct.pack("<I", v))


def f32(key, v):
    return gkv(key, 6, struct.pack("<f", v))


def string(key, v):
    return gkv(key, 8, gstr(v))


def arr(key, etype, items):
    enc = {8: gstr, 6: lambda x: struct.pack("<f", x), 5: lambda x: struct.pack("<i", x)}[etype]
    return gkv(key, 9, struct.pack("<IQ", etype, len(items)) + b"".join(enc(x) for x in items))


def gguf_seeds():
    hidden, heads, ffn, vocab = 32, 2, 64, 16
    tokens = ["<|endoftext|>"] + list("abcdehlorw") + ["Ġ", "he", "ll", "Ġw", "or"]
    llama = [string("general.architecture", "llama"), u32("llama.vocab_size", vocab),
             u32("llama.context_length", 128), u32("llama.embedding_length", hidden),
             u32("llama.feed_forward_length", ffn), u32("llama.block_count", 1),
             u32("llama.attention.head_count", heads), u32("llama.attention.head_count_kv", 1),
             u32("llama.rope.dimension_count", hidden // heads),
             f32("llama.rope.freq_base", 10000.0),
             f32("llama.attention.layer_norm_rms_epsilon", 1e-5)]
    gpt2 = [string("tokenizer.ggml.model", "gpt2"), string("tokenizer.ggml.pre", "smollm"),
            arr("tokenizer.ggml.tokens", 8, tokens),
            arr("tokenizer.ggml.token_type", 5, [3] + [1] * (vocab - 1)),
            arr("tokenizer.ggml.merges", 8, ["h e", "l l", "Ġ w", "o r"]),
            u32("tokenizer.ggml.bos_token_id", 0), u32("tokenizer.ggml.eos_token_id", 0),
            string("tokenizer.chat_template",
                   "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")]

    def f32t(n):
        return struct.pack("<%df" % n, *[(i % 7) / 7.0 - 0.5 for i in range(n)])

    def f16t(n):
        return struct.pack("<%de" % n, *[(i % 5) / 5.0 for i in range(n)])

    def q8_0(n):  # blocks of 32: f16 scale + 32 int8
        return b"".join(struct.pack("<e", 0.01) + bytes((i * 7) % 256 for i in range(32))
                        for _ in range(n // 32))

    def q4_0(n):  # blocks of 32: f16 scale + 16 bytes of nibbles
        return b"".join(struct.pack("<e", 0.02) + bytes(range(16)) for _ in range(n // 32))

    kv = hidden // heads
    tensors = [("token_embd.weight", [hidden, vocab], 0, f32t(hidden * vocab)),
               ("blk.0.attn_norm.weight", [hidden], 0, f32t(hidden)),
               ("blk.0.attn_q.weight", [hidden, hidden], 8, q8_0(hidden * hidden)),
               ("blk.0.attn_k.weight", [hidden, kv], 2, q4_0(hidden * kv)),
               ("blk.0.attn_v.weight", [hidden, kv], 1, f16t(hidden * kv)),
               ("blk.0.attn_output.weight", [hidden, hidden], 0, f32t(hidden * hidden)),
               ("blk.0.ffn_norm.weight", [hidden], 0, f32t(hidden)),
               ("blk.0.ffn_gate.weight", [hidden, ffn], 8, q8_0(hidden * ffn)),
               ("blk.0.ffn_up.weight", [hidden, ffn], 2, q4_0(hidden * ffn)),
               ("blk.0.ffn_down.weight", [ffn, hidden], 1, f16t(hidden * ffn)),
               ("output_norm.weight", [hidden], 0, f32t(hidden))]
    out("gguf", "tiny_llama_gpt2.gguf", gguf(llama + gpt2, tensors))
    spm_tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(4)] + \
                 ["▁", "a", "b", "▁a", "ab", "▁ab", "c", "d", "e"]
    spm = [string("tokenizer.ggml.model", "llama"), arr("tokenizer.ggml.tokens", 8, spm_tokens),
           arr("tokenizer.ggml.scores", 6, [0.0] * 3 + [0.0] * 4 + [-float(i) for i in range(9)]),
           arr("tokenizer.ggml.token_type", 5, [2, 3, 3] + [6] * 4 + [1] * 9),
           u32("tokenizer.ggml.bos_token_id", 1), u32("tokenizer.ggml.eos_token_id", 2),
           u32("tokenizer.ggml.unknown_token_id", 0)]
    out("gguf", "tiny_llama_spm.gguf", gguf(llama + spm, tensors[:2]))
    out("gguf", "metadata_only.gguf", gguf(gpt2, []))


def proto_seeds():
    texts = {
        "text": 'text: "Hello world" max_tokens: 16',
        "ids_sampling": 'token_ids { ids: [1, 2, 3] } max_tokens: 8 '
                        'sampling { temperature: 0.7 top_p: 0.9 top_k: 40 seed: 7 }',
        "stops": 'text: "a b c" stop: ["b", "\\n"] stop_token_ids: [0, 5] ignore_eos: true',
        "speculation": 'token_ids { ids: [5, 6] } speculation { drafter: "ngram" tree: "3x2" '
                       'verification: VERIFICATION_MODE_MULTIROUND } add_special_tokens: false',
    }
    proto_dir = os.path.join(ROOT, "proto")
    for name, text in texts.items():
        data = subprocess.run(["protoc", "-I", proto_dir, "--encode=treespec.v1.GenerateRequest",
                               "treespec/v1/generation.proto"], input=text.encode(),
                              capture_output=True, check=True).stdout
        out("generate_request", name, data)
    bodies = {
        "completion": (0, {"model": "m", "prompt": [1, 2, 3], "max_tokens": 8, "temperature": 0.5,
                           "stop": ["x"], "seed": 3, "stream": True,
                           "stream_options": {"include_usage": True}}),
        "completion_text": (0, {"prompt": "Hello", "top_p": 0.9, "echo": True,
                                "speculation": {"drafter": "ngram", "tree": "auto",
                                                "verification": "greedy"}}),
        "chat": (1, {"model": "m", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "max_completion_tokens": 16, "top_k": 5, "ignore_eos": True,
            "stop_token_ids": [2]}),
    }
    for name, (kind, body) in bodies.items():
        out("openai_request", name, bytes([kind]) + json.dumps(body).encode())


if __name__ == "__main__":
    safetensors_seeds()
    json_seeds()
    gguf_seeds()
    proto_seeds()
