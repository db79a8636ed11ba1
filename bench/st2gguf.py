# Writes a GGUF of a hearth stand-in (or any one-file Qwen3 or Qwen3-MoE BF16 safetensors checkpoint)
# for llama.cpp: BF16 matrices as they are, norms and routers as F32 (as llama.cpp's converter keeps
# them), each layer's experts stacked into one 3-D tensor per projection, the vocabulary and merges
# from tokenizer.json.
# A hearth INT4/INT8 checkpoint (group 32, F16 scales: quant/FORMAT.md) becomes Q4_0/Q8_0 with the
# same weights exactly: both store per 32 weights an f16 scale and codes whose product is the
# weight (Q4: nibble - 8), so only the order of the codes changes. llama.cpp then multiplies the
# very weights hearth does (llama-quantize would round the 16-bit ones its own way).
# Needs numpy and llama.cpp's gguf-py (GGUF_PY=/path/to/llama.cpp/gguf-py); no torch.
# Usage: GGUF_PY=... python3 bench/st2gguf.py MODEL_DIR OUT.gguf
# Quantize a 16-bit one with llama.cpp's tool: llama-quantize OUT.gguf OUT-Q4_0.gguf Q4_0
import json, os, struct, sys
import numpy as np
sys.path.insert(0, os.environ.get("GGUF_PY", "gguf-py"))
import gguf

src, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{src}/config.json"))
f = open(f"{src}/model.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
hdr = json.loads(f.read(n))
base = 8 + n
mm = np.memmap(f"{src}/model.safetensors", dtype=np.uint8, mode="r")

def raw(name):
    h = hdr[name]
    a, b = h["data_offsets"]
    assert h["dtype"] == "BF16", f"{name}: {h['dtype']}"
    return np.frombuffer(mm[base + a: base + b], dtype=np.uint16).reshape(h["shape"])

# hearth's code order within a 128-element chunk (quant/FORMAT.md, whole chunks): slot p of half h
# holds element 32b + 16h + 4q + e, p = 16q + 4b + e.
_p = np.arange(64)
ELEM = [32 * ((_p % 16) // 4) + 16 * h + 4 * (_p // 16) + _p % 4 for h in (0, 1)]

def codes_in_order(code_bytes, bits, rows, cols):
    """Signed codes [rows, cols] in element order from hearth's chunked slots."""
    assert cols % 128 == 0, "whole 128-element chunks only"
    c = code_bytes.reshape(rows, cols // 128, -1)
    halves = ([(c & 15).astype(np.int8) - 8, (c >> 4).astype(np.int8) - 8] if bits == 4 else
              [c[..., :64].view(np.int8), c[..., 64:].view(np.int8)])
    out = np.empty((rows, cols // 128, 128), dtype=np.int8)
    for h in (0, 1):
        out[..., ELEM[h]] = halves[h]
    return out.reshape(rows, cols)

def quantized(name):
    """A hearth Q4/Q8 weight as Q4_0/Q8_0 blocks [rows, cols / 32 * block bytes], or None."""
    h = hdr[name]
    if h["dtype"] not in ("U8", "I8"):
        return None
    sc = hdr[name + "_scale"]
    assert sc["dtype"] == "F16" and schemes[name]["group_size"] == 32, \
        f"{name}: only group 32 with F16 scales maps onto Q4_0/Q8_0"
    bits = 4 if h["dtype"] == "U8" else 8
    rows = h["shape"][0]
    cols = h["shape"][1] * (2 if bits == 4 else 1)
    a, b = h["data_offsets"]
    q = codes_in_order(np.frombuffer(mm[base + a: base + b], dtype=np.uint8), bits, rows, cols)
    a, b = sc["data_offsets"]
    d = np.frombuffer(mm[base + a: base + b], dtype=np.uint8).reshape(rows, cols // 32, 2)
    q = q.reshape(rows, cols // 32, 32)
    if bits == 4:  # qs[j]: element j in the low nibble, j + 16 in the high one, each q + 8
        u = (q + 8).astype(np.uint8)
        qs = u[..., :16] | (u[..., 16:] << 4)
        t = gguf.GGMLQuantizationType.Q4_0
    else:
        qs = q.view(np.uint8)
        t = gguf.GGMLQuantizationType.Q8_0
    return np.concatenate([d, qs], axis=2).reshape(rows, -1), t

schemes = json.loads(hdr.get("__metadata__", {}).get("hearth.quant", "{}"))

moe = cfg.get("model_type") == "qwen3_moe"
w = gguf.GGUFWriter(out, "qwen3moe" if moe else "qwen3")
L = cfg["num_hidden_layers"]
w.add_name("hearth standin")
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(cfg["hidden_size"])
w.add_block_count(L)
w.add_feed_forward_length(cfg["intermediate_size"])
w.add_head_count(cfg["num_attention_heads"])
w.add_head_count_kv(cfg["num_key_value_heads"])
w.add_key_length(cfg["head_dim"])
w.add_value_length(cfg["head_dim"])
w.add_rope_freq_base(cfg["rope_theta"])
w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if cfg.get("quantization_config", {}).get("bits") == 4
                else gguf.LlamaFileType.MOSTLY_Q8_0 if cfg.get("quantization_config")
                else gguf.LlamaFileType.MOSTLY_BF16)
if moe:
    w.add_expert_count(cfg["num_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])

tok = json.load(open(f"{src}/tokenizer.json"))
vocab = tok["model"]["vocab"]
V = cfg["vocab_size"]
tokens = [f"[PAD{i}]" for i in range(V)]
types = [gguf.TokenType.UNUSED] * V
for t, i in vocab.items():
    tokens[i] = t
    types[i] = gguf.TokenType.NORMAL
for a in tok["added_tokens"]:
    tokens[a["id"]] = a["content"]
    types[a["id"]] = gguf.TokenType.CONTROL if a.get("special") else gguf.TokenType.USER_DEFINED
merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("qwen2")
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges(merges)
w.add_bos_token_id(cfg["bos_token_id"])
w.add_eos_token_id(cfg["eos_token_id"])
w.add_pad_token_id(cfg["bos_token_id"])
w.add_add_bos_token(False)

def matrix(hname):
    """(data, GGML type) of a weight: hearth's quantized codes as Q4_0/Q8_0, else BF16."""
    return quantized(hname) or (raw(hname), gguf.GGMLQuantizationType.BF16)

def mat(gname, hname):
    data, t = matrix(hname)
    w.add_tensor(gname, data, raw_dtype=t)

def f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)

def norm(gname, hname):
    w.add_tensor(gname, f32(raw(hname)))

def sparse(i):
    return (moe and cfg["num_experts"] > 0 and i not in cfg.get("mlp_only_layers", []) and
            (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)

def experts(i, p):
    w.add_tensor(f"blk.{i}.ffn_gate_inp.weight", f32(raw(p + "mlp.gate.weight")))
    for g, h in [("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"),
                 ("ffn_down_exps", "down_proj")]:
        parts = [matrix(f"{p}mlp.experts.{e}.{h}.weight") for e in range(cfg["num_experts"])]
        w.add_tensor(f"blk.{i}.{g}.weight", np.stack([d for d, _ in parts]), raw_dtype=parts[0][1])

mat("token_embd.weight", "model.embed_tokens.weight")
norm("output_norm.weight", "model.norm.weight")
if not cfg.get("tie_word_embeddings") and "lm_head.weight" in hdr:
    mat("output.weight", "lm_head.weight")
for i in range(L):
    p = f"model.layers.{i}."
    norm(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight")
    norm(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight")
    norm(f"blk.{i}.attn_q_norm.weight", p + "self_attn.q_norm.weight")
    norm(f"blk.{i}.attn_k_norm.weight", p + "self_attn.k_norm.weight")
    for g, h in [("attn_q", "self_attn.q_proj"), ("attn_k", "self_attn.k_proj"),
                 ("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj")]:
        mat(f"blk.{i}.{g}.weight", p + h + ".weight")
    if sparse(i):
        experts(i, p)
        continue
    for g, h in [("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"), ("ffn_down", "mlp.down_proj")]:
        mat(f"blk.{i}.{g}.weight", p + h + ".weight")
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out)
