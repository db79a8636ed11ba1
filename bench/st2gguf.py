# Writes a GGUF of a hearth stand-in (or any one-file Qwen3 or Qwen3-MoE BF16 safetensors checkpoint)
# for llama.cpp: BF16 matrices as they are, norms and routers as F32 (as llama.cpp's converter keeps
# them), each layer's experts stacked into one 3-D tensor per projection, the vocabulary and merges
# from tokenizer.json.
# Needs numpy and llama.cpp's gguf-py (GGUF_PY=/path/to/llama.cpp/gguf-py); no torch.
# Usage: GGUF_PY=... python3 bench/st2gguf.py MODEL_DIR OUT.gguf
# Quantize with llama.cpp's tool: llama-quantize OUT.gguf OUT-Q4_0.gguf Q4_0
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
    assert h["dtype"] == "BF16"
    return np.frombuffer(mm[base + a: base + b], dtype=np.uint16).reshape(h["shape"])

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
w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
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

def mat(gname, hname):
    w.add_tensor(gname, raw(hname), raw_dtype=gguf.GGMLQuantizationType.BF16)

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
        stacked = np.stack([raw(f"{p}mlp.experts.{e}.{h}.weight") for e in range(cfg["num_experts"])])
        w.add_tensor(f"blk.{i}.{g}.weight", stacked, raw_dtype=gguf.GGMLQuantizationType.BF16)

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
