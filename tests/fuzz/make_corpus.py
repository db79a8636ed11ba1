#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the golden fixtures,
the real Qwen3 tokenizer and small checkpoints `hearth standin` + `hearth quantize` make, each cut
down so the whole corpus stays well under 1 MB. Usage:
  python3 tests/fuzz/make_corpus.py [--shared ../shared] [--hearth build/hearth]
Rerunning replaces the corpus folders (not tests/fuzz/crashes/)."""
import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, data, name=None):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = name or hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def compact(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] -> file bytes (header padded to 8)."""
    header, off, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_header(path):
    raw = read(path)
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n])


def jinja_cases():
    """(template, context) pairs from tests/test_jinja.cpp's one-line cases."""
    src = read(os.path.join(ROOT, "tests", "test_jinja.cpp"), "r")
    lit = r'"(?:[^"\\\n]|\\.)*"'
    out = []
    for m in re.finditer(r"^\s*\{(" + lit + r"),\s*(" + lit + r"),", src, re.M):
        try:
            out.append((ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))))
        except (ValueError, SyntaxError):
            pass
    for m in re.finditer(r"render(?:_error)?\((" + lit + r")(?:,\s*(" + lit + r"))?\)", src):
        try:
            out.append((ast.literal_eval(m.group(1)),
                        ast.literal_eval(m.group(2)) if m.group(2) else "{}"))
        except (ValueError, SyntaxError):
            pass
    return out


def trimmed_tokenizer(tj, keep, merges_as_strings=False, renumber_added=False):
    """tokenizer.json with the ids below KEEP and the merges among them."""
    t = json.loads(json.dumps(tj))
    m = t["model"]
    m["vocab"] = {k: v for k, v in m["vocab"].items() if v < keep}
    merges = []
    for a, b in m["merges"]:
        if a in m["vocab"] and b in m["vocab"] and a + b in m["vocab"]:
            merges.append(f"{a} {b}" if merges_as_strings else [a, b])
    m["merges"] = merges
    if renumber_added:
        for i, a in enumerate(t["added_tokens"]):
            a["id"] = keep + i
    return compact(t)


def weight_cache(identity, copies):
    """A weight cache file (core/weight_cache.h): copies [(file, layout, offset, bytes)] at 4 KiB
    steps, their index and footer, with the reader's checksums."""
    mul, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1

    def checksum(b):
        a = [(0x243F6A8885A308D3 + j) & mask for j in range(8)]
        i = 0
        while i + 64 <= len(b):
            for j in range(8):
                a[j] = ((a[j] ^ int.from_bytes(b[i + 8 * j:i + 8 * j + 8], "little")) * mul) & mask
            i += 64
        h = len(b)
        for c in b[i:]:
            h = ((h ^ c) * mul) & mask
        for j in range(8):
            h = (((h ^ a[j]) * mul) & mask) ^ (h >> 29)
        return h

    data, entries = b"", b""
    for f, layout, offset, n in copies:
        body = bytes((7 * k + layout) & 255 for k in range(n))
        entries += struct.pack("<IIQQQQ", f, layout, offset, n, len(data), checksum(body))
        data += body + b"\0" * (-len(body) % 4096)
    ident = identity.encode()
    index = ident + b"\0" * (-len(ident) % 8) + entries
    size = len(data) + len(index) + 48
    footer = b"hearthWC" + struct.pack("<IIQQQQ", 1, len(copies), len(data), len(ident), size,
                                       checksum(index))
    return data + index + footer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--hearth", default=os.path.join(ROOT, "build", "hearth"))
    args = ap.parse_args()
    fx = os.path.join(args.shared, "fixtures")
    models = os.path.join(fx, "models")
    tokdir = os.path.join(args.shared, "qwen3-tokenizer")
    for t in os.listdir(CORPUS) if os.path.isdir(CORPUS) else []:
        shutil.rmtree(os.path.join(CORPUS, t))

    tok_cfg = json.loads(read(os.path.join(tokdir, "tokenizer_config.json")))
    chat_template = tok_cfg["chat_template"]
    chats = [json.loads(l) for l in read(os.path.join(fx, "tokenizer", "chat.jsonl"), "r").rstrip("\n").split("\n")]
    # A spread of chat cases: each kind once, the tool ones first.
    picked, kinds = [], set()
    for c in sorted(chats, key=lambda c: "tools" not in c):
        if c.get("kind") not in kinds:
            kinds.add(c.get("kind"))
            picked.append(c)
    picked = picked[:8]

    # config + generation_config
    for name in sorted(os.listdir(models)):
        cfg = read(os.path.join(models, name, "config.json"))
        gen = read(os.path.join(models, name, "generation_config.json"))
        put("config", cfg + b"\0" + gen, name)
    put("config", b'{"hidden_size":8}\0{"eos_token_id":[1,2],"top_k":-1}', "partial")

    # tokenizer.json loading: cut-down vocabularies that still load
    tj = json.loads(read(os.path.join(tokdir, "tokenizer.json")))
    small_cfg = compact({k: v for k, v in tok_cfg.items() if k != "added_tokens_decoder"})
    text = "Hello, world! It's 2024 <|im_start|>user\n héllo 世界<think>\n</think>"
    # The added tokens are renumbered after the kept ids: at their real ids (151643 on) every input
    # builds id-indexed tables of 151 k entries, 1-5 ms under the sanitizers, which held the target
    # to 150-400 runs/s. Real ids are fuzz_tokenizer_encode's and _decode's (the whole tokenizer).
    def cut(keep, **kw):
        return trimmed_tokenizer(tj, keep, renumber_added=True, **kw)
    put("tokenizer_load", cut(300) + "\0" + small_cfg + "\0" + text, "vocab300-config")
    put("tokenizer_load", cut(300, merges_as_strings=True) + "\0\0" + text, "vocab300-string-merges")
    put("tokenizer_load", cut(300) + "\0\0" + text, "vocab300-no-config")
    put("tokenizer_load", cut(256) + "\0\0" + "abc  def\r\n\t123", "bytes-only")
    eos_obj = compact({"eos_token": {"content": "<|im_end|>"}, "bos_token": None,
                       "chat_template": [{"name": "default", "template": "{{ messages }}"}]})
    put("tokenizer_load", cut(280) + "\0" + eos_obj + "\0x", "template-list")

    # encode: the fixture texts, one of each of the 30 largest categories
    cases = [json.loads(l) for l in
             read(os.path.join(fx, "tokenizer", "tokenize.jsonl"), "r").rstrip("\n").split("\n")]
    count = {}
    for c in cases:
        count[c["category"]] = count.get(c["category"], 0) + 1
    wanted = set(sorted(count, key=lambda k: (-count[k], k))[:30])
    seen = set()
    for c in cases:
        if c["category"] not in wanted or c["category"] in seen or len(c["text"].encode()) > 2000:
            continue
        seen.add(c["category"])
        put("tokenizer_encode", c["text"], "tok-" + c["category"][:40])
    put("tokenizer_encode", chats[0]["text"], "chat-prompt")
    put("tokenizer_encode", b"\xff\xfe caf\xc3\xa9 \xe2\x82 \xf0\x9f\x98\x80\x00x", "invalid-utf8")

    # decode: ids as little-endian int32 after a flags byte
    seen = set()
    for l in read(os.path.join(fx, "tokenizer", "decode.jsonl"), "r").rstrip("\n").split("\n"):
        c = json.loads(l)
        if len(c["ids"]) > 200:
            continue
        seen.add(c["name"])
        put("tokenizer_decode", bytes([int(c["skip_special_tokens"])]) +
            struct.pack(f"<{len(c['ids'])}i", *c["ids"]), "dec-" + c["name"][:40])
        if len(seen) >= 16:
            break
    put("tokenizer_decode", b"\0" + struct.pack("<6i", -1, 151669, 151935, 2**31 - 1, 151643, 0),
        "out-of-range")

    # jinja: the real chat template with chat contexts, and the unit tests' snippets
    for c in picked:
        ctx = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
        if c.get("enable_thinking") is not None:
            ctx["enable_thinking"] = c["enable_thinking"]
        if "tools" in c:
            ctx["tools"] = c["tools"]
        put("jinja", chat_template + "\0" + compact(ctx), "qwen3-" + c["name"][:40])
    snippets, seen = [], set()
    for tmpl, ctx in jinja_cases():
        if tmpl not in seen:
            seen.add(tmpl)
            snippets.append((tmpl, ctx))
    for tmpl, ctx in snippets[:: max(1, len(snippets) // 32)][:32]:  # an even spread of 32
        put("jinja", tmpl + "\0" + ctx)

    # --jsonl lines: tokenize, detokenize and template requests
    lines = [compact({"text": c["text"]}) for c in chats[:2]]
    lines += [compact({"ids": [9707, 151645, 2**32 + 1], "skip_special_tokens": True}),
              compact({"ids": [151644, 872, 198], "skip_special_tokens": False})]
    for c in picked[:4]:
        lines.append(compact({k: c[k] for k in ("messages", "add_generation_prompt", "enable_thinking",
                                                "tools") if k in c}))
    put("jsonl", "\n".join(lines) + "\n", "mixed")
    for i, l in enumerate(lines):
        put("jsonl", l + "\n", f"line{i}")
    put("jsonl", '\n  \r\n{"text": "a"}\r\n{"ids": []', "blank-and-unterminated")

    # serve request bodies
    for c in picked[:5]:
        body = {"model": "hearth", "messages": c["messages"], "max_tokens": 16}
        if "tools" in c:
            body["tools"] = c["tools"]
            body["tool_choice"] = "auto"
        put("serve_request", compact(body), "chat-" + c["name"][:40])
    put("serve_request", compact({"prompt": "Once upon a time", "temperature": 0.7, "top_p": 0.9,
                                  "top_k": 20, "seed": 3, "stop": ["\n\n", "END"], "stream": True,
                                  "stream_options": {"include_usage": True}}), "completion")
    put("serve_request", compact({"messages": [{"role": "developer", "content": [
        {"type": "text", "text": "sys"}]}, {"role": "user", "content": "hi", "name": "u"}],
        "chat_template_kwargs": {"enable_thinking": False, "x": 1}, "max_completion_tokens": 4,
        "n": 1, "logprobs": False, "response_format": {"type": "text"}, "presence_penalty": 0.5}),
        "chat-fields")
    put("serve_request", compact({"prompt": ["one"], "max_tokens": 1 << 30, "echo": False}), "completion-list")

    # quantization_config \0 hearth.quant \0 hearth.codebook
    cb = list(range(-120, 120, 15))[:16]
    put("quant_config", compact({"quant_method": "hearth", "format_version": 1, "bits": 4,
                                 "group_size": 32, "scale_dtype": "F16", "overrides": {
                                     "lm_head.weight": {"bits": 8}, "model.norm.weight": {"bits": 16}},
                                 "calibration": "awq+clip", "bits_per_weight": 5.2}) + "\0" +
        compact({"a.weight": {"bits": 4, "group_size": 64, "scale_dtype": "BF16"},
                 "b.weight": {"bits": 8, "group_size": 128, "scale_dtype": "F16"}}) + "\0" +
        compact(cb), "full")
    put("quant_config", compact({"quant_method": "hearth", "format_version": 1, "bits": 4,
                                 "codebook": cb}) + "\0{}\0[]", "codebook")

    # safetensors files and checkpoint folders
    def f32(n):
        return struct.pack(f"<{n}f", *[i * 0.25 for i in range(n)])

    put("safetensors", safetensors([("a.weight", "F32", [2, 3], f32(6)), ("b", "BF16", [4], b"\x80\x3f" * 4),
                                    ("e", "F16", [0, 5], b""), ("i", "I8", [3], b"\x01\x02\x03"),
                                    ("u", "U8", [1, 1, 1, 1, 1], b"\xff"), ("n", "I32", [], b"\0\0\0\0")],
                                   {"format": "pt", "hearth.format_version": "1"}), "mixed")
    for name in sorted(os.listdir(models)):
        for f in sorted(os.listdir(os.path.join(models, name))):
            if f.endswith(".safetensors"):
                # The fixture's real header with each tensor shrunk to its first row or so: the
                # names and dtypes of a real checkpoint, in a small file.
                h = st_header(os.path.join(models, name, f))
                tensors = []
                for tname, e in h.items():
                    if tname == "__metadata__":
                        continue
                    size = {"F32": 4, "BF16": 2, "F16": 2}[e["dtype"]]
                    shape = [min(d, 4) for d in e["shape"]]
                    n = 1
                    for d in shape:
                        n *= d
                    tensors.append((tname, e["dtype"], shape, bytes(n * size)))
                put("safetensors", safetensors(tensors[:12], h.get("__metadata__")), f"{name}-{f}"[:60])
                break
    put("safetensors", struct.pack("<Q", 2) + b"{}", "empty-header")

    idx = {"metadata": {"total_size": 168},
           "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                          "b.weight": "model-00001-of-00002.safetensors",
                          "c.weight": "model-00002-of-00002.safetensors"}}
    put("weight_cache", weight_cache("fuzz", [(0, k, 4096 * k, 100 + k) for k in range(4)]), "valid")
    put("weight_cache", weight_cache("fuzz", [(0, 1, 4096, 101), (0, 9, 0, 5000)]), "other-copies")
    put("weight_cache", weight_cache("other", [(0, 0, 0, 100)]), "other-identity")
    put("checkpoint_index", json.dumps(idx, indent=2), "valid")
    idx2 = json.loads(json.dumps(idx))
    idx2["weight_map"]["b.weight"] = "model-00002-of-00002.safetensors"
    put("checkpoint_index", compact(idx2), "wrong-shard")
    idx3 = {"weight_map": {"a.weight": "subdir", "x": "fifo", "y": "../model-00001-of-00002.safetensors"}}
    put("checkpoint_index", compact(idx3), "odd-names")
    put("checkpoint_index", read(os.path.join(models, "tiny-untied-sharded-f32", "model.safetensors.index.json")),
        "fixture-tiny-untied")

    # quantized and float checkpoints: config.json \0 model.safetensors
    hearth = args.hearth
    if os.path.exists(hearth):
        with tempfile.TemporaryDirectory() as tmp:
            st = os.path.join(tmp, "st")
            subprocess.run([hearth, "standin", "--out", st, "--preset", "tiny", "--vocab", "32",
                            "--hidden", "32", "--intermediate", "32", "--layers", "1", "--heads", "1",
                            "--kv-heads", "1", "--head-dim", "32", "--tokenizer", tokdir],
                           check=True, capture_output=True)
            variants = {"float": st}
            for v, opts in {"int4": ["--bits", "4"], "int8-bf16": ["--bits", "8", "--scale-dtype", "bf16"],
                            "int4-codebook": ["--bits", "4", "--codebook", "--head", "int4"],
                            "int4-head-bf16": ["--bits", "4", "--head", "bf16", "--group", "32"]}.items():
                out = os.path.join(tmp, v)
                subprocess.run([hearth, "quantize", "--model", st, "--out", out, "--rtn", *opts],
                               check=True, capture_output=True)
                variants[v] = out
            for v, d in variants.items():
                cfg = compact(json.loads(read(os.path.join(d, "config.json"))))
                put("quant_load", cfg.encode() + b"\0" + read(os.path.join(d, "model.safetensors")), v)
                if v != "float":
                    put("quant_config", compact(json.loads(cfg)["quantization_config"]) + "\0" +
                        st_header(os.path.join(d, "model.safetensors"))["__metadata__"]["hearth.quant"] +
                        "\0" + st_header(os.path.join(d, "model.safetensors"))["__metadata__"].get(
                            "hearth.codebook", "[]"), v)
    else:
        print(f"{hearth} not found: quant_load gets no checkpoint seeds")

    total = 0
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        total += size
        print(f"{t}: {len(files)} files, {size} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
