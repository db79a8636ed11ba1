// hearth: the command-line front end. Every failure ends as one `error:` line and a non-zero exit.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "tools/commands.h"

namespace {

const char* kUsage = R"(hearth — Qwen3 inference on the CPU

usage: hearth COMMAND [options]

commands:
  run       --model DIR --prompt TEXT [--system TEXT] [--thinking|--no-thinking]
            [--hide-thinking] [sampling] [--max-new-tokens N] [--json]
            answer one prompt through the chat template, streaming to stdout
  chat      --model DIR [--system TEXT] [--no-thinking] [--hide-thinking]
            interactive chat; /reset /thinking on|off /exit; Ctrl-C stops an answer
  serve     --model DIR [--host 127.0.0.1] [--port 8080] [--parallel 8] [--api-key KEY]
            [--max-batch-tokens N] [--kv-budget MiB] [--max-queue 64] [--max-body-mb 8]
            [--max-prompt-tokens N] [--max-tokens N] [--model-name NAME] [--timeout 30]
            [--shutdown-grace 10] [sampling defaults]
            an OpenAI-compatible server (/v1/chat/completions, /v1/completions, /v1/models,
            /health, /metrics, /apply-template) with a chat page at /; README "hearth serve"
  tokenize  --model DIR (--jsonl IN | --text TEXT)   lines {"text"} -> [ids]
  detokenize --model DIR --jsonl IN    lines {"ids", "skip_special_tokens"} -> "text"
  template  --model DIR --jsonl IN     lines {"messages", "add_generation_prompt",
            "enable_thinking"?, "tools"?} -> {"text", "ids"}
  bench-tokenizer --model DIR --text FILE [--repeats N] [--json]   encode MB/s
  generate  --model DIR --ids 1,2,3 [--max-new-tokens N] [sampling] [--ignore-eos] [--json]
            token ids in, token ids out (greedy unless sampling options are given)
  logits    --model DIR --ids 1,2,3 --out FILE [--chunks 20,13]
            float32 logits for every position, raw little-endian [T, vocab]
  standin   --out DIR [--preset 0.6b|1.7b|4b|8b|tiny] [--dtype bf16|f16|f32] [--seed N]
            [--heavy-tailed] [--outliers N] [--key-outliers N] [--shards N]
            write a random-weight Qwen3 checkpoint for tests and benchmarks
  quantize  --model IN --out OUT [--bits 4|8] [--group 32|64|128] [--head int8|int4|bf16]
            [--scale-dtype f16|bf16] [--calibration TEXTFILE | --calibration-ids FILE]
            [--rtn] [--codebook] [--force] [--json]
            write an INT8/INT4 checkpoint (quant/FORMAT.md); --codebook: 4-bit levels from a
            16-entry codebook fitted to the model instead of the uniform grid (same size)
  bench     --model DIR [--threads N] [--prompt 512] [--gen 128] [--reps 2] [--gemm G] [--hugepages] [--json]
            prefill and greedy-decode tokens/s beside the machine's memory read bandwidth and
            FMA (and int8 dot) peaks measured in the same run; JSON fields: prefill_tokens_per_s,
            prefill_gflops, peak_gflops, prefill_peak_fraction, peak_int8_gops,
            prefill_int8_peak_fraction, decode_tokens_per_s, decode_bytes_per_token
            (= decode_weight_bytes + decode_kv_bytes_per_token; head_screen_saving_bytes: the
            LM head bytes a screened greedy step did not read), mem_bw_gbs, decode_bw_fraction,
            prefill_cpu_share, decode_cpu_share (below 1: a busy machine), peak_rss_mb,
            weights_hugepage_mb; all in tools/cmd_bench.cpp
            --parallel 1,2,4,8,16: batched decode, N sequences of --prompt 128 + --gen 128 at once
            per N (as llama-batched-bench): aggregate and per-stream decode and prefill tokens/s
  eval      --model M --reference REF (--text FILE | --ids-file FILE) [--ctx 512] [--json]
            perplexity of both, KL(REF||M) mean and p99, top-1 agreement, bits per weight;
            --kv applies to M only (REF keeps an f32 cache), so M = REF measures a cache type

engine options (all model commands):
  --threads N  --backend cpu  --isa avx512|avx2|neon|scalar  --kv f32|f16|bf16|int8
  --prefill-chunk N  --gemm auto|dnnl|dnnl-bf16|openblas|native (prefill matmuls; auto gives
               INT8/INT4 weights the kernels' int8 GEMM on AVX-512, BF16 weights oneDNN's bf16
               GEMM where bf16 dot products are fast (Zen 4/5, AMX); a named one gets them)
  --hugepages  keep private huge-page copies of the matmul weights, in the layouts the
               kernels read fastest, and the KV cache in huge pages (faster decode; a
               private copy of the weights); the LM head also gets a smaller copy
               that greedy decoding reads instead (a BF16 head a Q8 one, a Q8 head its
               codes' high 5 bits), computing exactly only the rows it cannot rule out
               (the same tokens; 0.53x or 0.63x of the head's bytes)
sampling: --temperature T --top-k K --top-p P --min-p M --seed S --repetition-penalty R
          --presence-penalty P --frequency-penalty F --greedy
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    using namespace hearth::cli;
    if (cmd == "generate") return cmd_generate(argc - 2, argv + 2);
    if (cmd == "logits") return cmd_logits(argc - 2, argv + 2);
    if (cmd == "standin") return cmd_standin(argc - 2, argv + 2);
    if (cmd == "run") return cmd_run(argc - 2, argv + 2);
    if (cmd == "chat") return cmd_chat(argc - 2, argv + 2);
    if (cmd == "serve") return cmd_serve(argc - 2, argv + 2);
    if (cmd == "tokenize") return cmd_tokenize(argc - 2, argv + 2);
    if (cmd == "detokenize") return cmd_detokenize(argc - 2, argv + 2);
    if (cmd == "template") return cmd_template(argc - 2, argv + 2);
    if (cmd == "bench-tokenizer") return cmd_bench_tokenizer(argc - 2, argv + 2);
    if (cmd == "bench") return cmd_bench(argc - 2, argv + 2);
    if (cmd == "quantize") return cmd_quantize(argc - 2, argv + 2);
    if (cmd == "eval") return cmd_eval(argc - 2, argv + 2);
    std::fprintf(stderr, "error: unknown command '%s' (try: hearth help)\n", cmd.c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
