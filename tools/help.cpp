#include "tools/help.h"

#include <string>

#include "core/backend.h"

namespace hearth::cli {

namespace {

// Shared blocks, pasted into the pages of the commands that take them.
#define ENGINE_OPTIONS                                                                            \
  "engine options:\n"                                                                             \
  "  --threads N        compute threads (default: the physical cores; at most 4x the CPUs)\n"     \
  "  --backend NAME     cpu (default), vulkan or cuda (hearth devices lists them)\n"              \
  "  --device N         the GPU backend's device (default 0)\n"                                   \
  "  --isa NAME         avx512, avx2, neon or scalar: force a lower ISA than the CPU's best\n"    \
  "  --kv TYPE          KV cache type: f16 (default), f32 (exact), bf16 or int8\n"                \
  "  --prefill-chunk N  prompt tokens per prefill step (default 256)\n"                           \
  "  --gemm NAME        prefill matmuls: auto (default), dnnl, dnnl-bf16, openblas, native\n"     \
  "  --mmap             read the weights in place from the mapped checkpoint: less memory\n"      \
  "                     (shared between processes), slower decode; the default keeps copies\n"    \
  "                     in huge pages in the kernels' layouts (--hugepages, kept for scripts)\n"  \
  "  --weight-cache DIR keep those copies in a file in DIR too, which later loads map from the\n" \
  "                     page cache (default: ~/.cache/hearth for checkpoints of 256 MiB or "      \
  "more)\n"                                                                                       \
  "  --no-weight-cache  make the copies at every load; write no file\n"                           \
  "  --kv-budget MiB    KV cache memory (default: the context once)\n"

#define SAMPLING_OPTIONS                                                                       \
  "sampling (default: the model's generation_config.json; Qwen3: temperature 0.6, top-k 20,\n" \
  "top-p 0.95):\n"                                                                             \
  "  --temperature T    0 is greedy; must be >= 0\n"                                           \
  "  --top-k K          keep the K most likely tokens (0: off)\n"                              \
  "  --top-p P          nucleus sampling, in (0, 1] (1: off)\n"                                \
  "  --min-p P          drop tokens under P times the top one, in [0, 1] (0: off)\n"           \
  "  --repetition-penalty R   > 0 (1: off)\n"                                                  \
  "  --presence-penalty P, --frequency-penalty F   >= 0 (0: off)\n"                            \
  "  --greedy           always the most likely token (not with --temperature)\n"               \
  "  --seed N           fix the random seed (default: a fresh one, printed with --json)\n"     \
  "  --ignore-eos       go on past the model's end token\n"

const char* kRunPage =
    "usage: hearth run --model DIR [PROMPT] [options]\n"
    "\n"
    "Answers one prompt through the model's chat template, streaming the answer to stdout and the\n"
    "speed to stderr. The prompt is PROMPT, --prompt TEXT, --prompt-file FILE, or stdin when it "
    "is\n"
    "piped (or --prompt -). Ctrl-C stops the answer (exit status 130).\n"
    "\n"
    "options:\n"
    "  --model DIR          a Hugging Face Qwen3 checkpoint folder (required)\n"
    "  --prompt TEXT        the user's message ('-': read it from stdin)\n"
    "  --prompt-file FILE   read the user's message from FILE\n"
    "  --system TEXT        a system prompt; --system-file FILE reads it from FILE\n"
    "  --thinking, --no-thinking   let Qwen3 think before answering (default: on)\n"
    "  --hide-thinking      do not print the thinking\n"
    "  --max-new-tokens N   the answer's length limit (default: 4096 with thinking, since Qwen3\n"
    "                       thinks for hundreds to thousands of tokens before it answers, and\n"
    "                       1024 without); always clipped to what the context leaves\n"
    "  --ctx N              context length in tokens (default: the model's maximum)\n"
    "  --stop STRING        end the answer before STRING (repeatable)\n"
    "  --json               one JSON record on stdout: text, reasoning (the thinking), tokens,\n"
    "                       finish_reason, metrics and the run's manifest (seed included)\n"
    "\n" SAMPLING_OPTIONS "\n" ENGINE_OPTIONS
    "\n"
    "example:\n"
    "  hearth run --model ~/models/Qwen3-0.6B \"Why is the sky blue?\"\n"
    "  echo \"Summarise: ...\" | hearth run --model ~/models/Qwen3-0.6B --no-thinking\n";

const char* kChatPage =
    "usage: hearth chat --model DIR [options]\n"
    "\n"
    "An interactive conversation. Each turn computes only its new tokens (the cache keeps the\n"
    "earlier ones). When the conversation outgrows the context, the oldest turns are dropped\n"
    "(the system prompt stays) with a notice. Ctrl-C stops an answer; Ctrl-D or /exit leaves.\n"
    "\n"
    "in the chat:\n"
    "  /help               these commands\n"
    "  /reset              start a new conversation (keeps the system prompt)\n"
    "  /thinking on|off    switch Qwen3's thinking\n"
    "  /save FILE          write the conversation as a JSON array of messages\n"
    "  /load FILE          continue a conversation saved with /save\n"
    "  /exit               leave\n"
    "\n"
    "options:\n"
    "  --model DIR          a Hugging Face Qwen3 checkpoint folder (required)\n"
    "  --system TEXT        a system prompt; --system-file FILE reads it from FILE\n"
    "  --thinking, --no-thinking   let Qwen3 think before answering (default: on)\n"
    "  --hide-thinking      do not print the thinking\n"
    "  --max-new-tokens N   one answer's length limit (default: 4096 with thinking, 1024\n"
    "                       without); clipped to what the context leaves\n"
    "  --ctx N              context length in tokens (default: the model's maximum)\n"
    "  --stop STRING        end an answer before STRING (repeatable)\n"
    "\n"
    "On a terminal the prompt is coloured (NO_COLOR turns colour off) and lines can be edited,\n"
    "with history kept in ~/.hearth_history.\n"
    "\n" SAMPLING_OPTIONS "\n" ENGINE_OPTIONS
    "\n"
    "example:\n"
    "  hearth chat --model ~/models/Qwen3-0.6B --system \"You are terse.\" --no-thinking\n";

const char* kServePage =
    "usage: hearth serve --model DIR [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (streamed\n"
    "or whole), GET /v1/models, /health, /metrics (Prometheus), POST /apply-template, and a chat\n"
    "page at /. Many requests share each step (continuous batching) and the KV cache's common\n"
    "prefixes. SIGTERM or Ctrl-C stops it gracefully. README \"hearth serve\" has the details.\n"
    "\n"
    "options:\n"
    "  --model DIR             a Hugging Face Qwen3 checkpoint folder (required)\n"
    "  --host ADDR             listen address (default 127.0.0.1)\n"
    "  --port N                listen port (default 8080; 0: any free port)\n"
    "  --parallel N            requests decoded at once (default 8)\n"
    "  --max-queue N           requests waiting beyond those; then 503 (default 64)\n"
    "  --max-batch-tokens N    token rows per step (default: the prefill chunk)\n"
    "  --api-key KEY           require \"Authorization: Bearer KEY\"\n"
    "  --max-body-mb N         request body limit (default 8)\n"
    "  --max-prompt-tokens N   prompt limit (default: the context)\n"
    "  --max-tokens N          cap on a request's max_tokens (default: the context)\n"
    "  --ctx N                 context of a request in tokens (default: the model's maximum)\n"
    "  --model-name NAME       the model's id in the API (default: the folder's name)\n"
    "  --timeout S             read/write timeout of a connection, seconds (default 30)\n"
    "  --shutdown-grace S      seconds running requests get at shutdown (default 10)\n"
    "  --max-new-tokens N and the sampling options set the defaults of requests that omit them.\n"
    "\n" SAMPLING_OPTIONS "\n" ENGINE_OPTIONS
    "\n"
    "example:\n"
    "  hearth serve --model ~/models/Qwen3-0.6B --port 8080\n"
    "  curl localhost:8080/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\","
    "\"content\":\"Hi\"}]}'\n";

const char* kQuantizePage =
    "usage: hearth quantize --model IN --out OUT [options]\n"
    "\n"
    "Writes an INT8 or INT4 copy of a checkpoint (format: quant/FORMAT.md), which every command\n"
    "loads like the original. Calibration text makes INT4 more accurate (GPTQ-style); hearth eval\n"
    "measures what quantization cost.\n"
    "\n"
    "options:\n"
    "  --model IN             the checkpoint to quantize (required)\n"
    "  --out OUT              the folder to write (required; refused if it exists, unless "
    "--force)\n"
    "  --bits 4|8             weight bits (default 4)\n"
    "  --group 32|64|128      weights per scale (default 32)\n"
    "  --head int8|int4|bf16  the LM head's type (default int8)\n"
    "  --scale-dtype f16|bf16 the scales' type (default f16)\n"
    "  --calibration FILE     text to calibrate on; --calibration-ids FILE: token ids instead\n"
    "  --calibration-ctx N    tokens per calibration window\n"
    "  --rtn                  plain round-to-nearest, no calibration\n"
    "  --codebook             4-bit levels from a 16-entry codebook fitted to the model\n"
    "  --force                replace OUT\n"
    "  --threads N            threads\n"
    "  --json                 a JSON report on stdout\n"
    "\n"
    "example:\n"
    "  hearth quantize --model ~/models/Qwen3-0.6B --out ~/models/Qwen3-0.6B-int4 --bits 4\n";

const char* kEvalPage =
    "usage: hearth eval --model M --reference REF (--text FILE | --ids-file FILE) [options]\n"
    "\n"
    "Compares model M with REF (e.g. a quantized copy with its original) on the same text:\n"
    "perplexity of both, KL(REF || M) mean and p99, top-1 agreement, bits per weight.\n"
    "\n"
    "options:\n"
    "  --model M           the model under test (required)\n"
    "  --reference REF     the reference model (required)\n"
    "  --text FILE         a text file to score; --ids-file FILE: token ids instead\n"
    "  --ctx N             tokens per window (default 512)\n"
    "  --json              a JSON report on stdout\n"
    "  --threads N, --isa NAME, --gemm NAME   as for every model command\n"
    "  --kv TYPE           M's KV cache type (default and REF: f32), so M = REF measures a cache\n"
    "                      type\n"
    "\n"
    "example:\n"
    "  hearth eval --model q4 --reference bf16 --text wiki.txt\n";

const char* kBenchPage =
    "usage: hearth bench --model DIR [options]\n"
    "\n"
    "Prefill and decode speed beside the machine's own limits (memory read bandwidth,\n"
    "FMA and dot-product peaks), measured in the same run with the same threads; with\n"
    "--parallel, each N's decode beside the ceiling those limits set. The JSON fields are\n"
    "listed at the top of tools/cmd_bench.cpp (--parallel: tools/bench_parallel.cpp).\n"
    "\n"
    "options:\n"
    "  --model DIR          the checkpoint (required)\n"
    "  --threads N          threads (default: the physical cores)\n"
    "  --prompt N           prompt tokens (default 512; 128 with --parallel)\n"
    "  --gen N              generated tokens (default 128)\n"
    "  --reps N             rounds, reported as medians (default 2; 1 with --parallel)\n"
    "  --parallel N1,N2,..  batched decode of N sequences at once, for each N\n"
    "  --prefill-chunk N    prompt tokens per step (default 512)\n"
    "  --depth N1,N2,..     positions in the context before prefill and decode, for each N\n"
    "                       (default 0; as llama-bench -d)\n"
    "  --plot FILE.svg      draw decode tokens/s against the bandwidth ceiling per depth\n"
    "  --isa, --kv, --kv-block, --gemm, --mmap, --weight-cache, --no-weight-cache\n"
    "                       as for every model command\n"
    "  --greedy, --temperature, --top-k, ...   decode's sampling (default: the checkpoint's,\n"
    "                       as hearth run samples; seed 1234 unless --seed)\n"
    "  --backend NAME, --device N          cpu (default), vulkan or cuda, and its device\n"
    "  --json               one JSON record on stdout\n"
    "\n"
    "example:\n"
    "  hearth bench --model ~/models/Qwen3-0.6B --threads 1 --json\n";

const char* kStandinPage =
    "usage: hearth standin --out DIR [options]\n"
    "\n"
    "Writes a random-weight Qwen3 checkpoint at a real model's shape, in exact Hugging Face\n"
    "layout, for tests and benchmarks when no trained weights are at hand. Its config.json marks\n"
    "it (a \"hearth_standin\" object), and every command that loads it says so.\n"
    "\n"
    "options:\n"
    "  --out DIR            the folder to write (required)\n"
    "  --preset NAME        0.6b (default), 1.7b, 4b, 8b, 30b-a3b (Qwen3-MoE), tiny, moe-tiny\n"
    "  --dtype TYPE         bf16 (default), f16 or f32\n"
    "  --seed N             random seed (default 1)\n"
    "  --heavy-tailed       heavy-tailed weights, as trained ones are (for quantization tests)\n"
    "  --outliers N         outlier input channels per matrix (default 4 with --heavy-tailed)\n"
    "  --key-outliers N     outlier channels in the keys\n"
    "  --shards N           safetensors files to split the weights over (default 1)\n"
    "  --tokenizer DIR      where tokenizer.json and tokenizer_config.json come from\n"
    "  --hidden, --intermediate, --layers, --heads, --kv-heads, --head-dim, --vocab N,\n"
    "  --untied, --rope-theta X, --experts, --experts-per-tok, --moe-intermediate N\n"
    "                       override the preset's shape (--layers 6: a 30b-a3b slice that fits\n"
    "                       in memory)\n"
    "  --bits 4|8           write it quantized as it is generated, never at 16 bits (the whole\n"
    "                       30b-a3b: 17.5 GB at 4 bits against 61 GB); with --group, --head,\n"
    "                       --scale-dtype, --rtn, --force as for hearth quantize\n"
    "\n"
    "example:\n"
    "  hearth standin --out /tmp/qwen3-0.6b-random --preset 0.6b\n"
    "  hearth standin --out /tmp/qwen3-30b-a3b-int4 --preset 30b-a3b --bits 4 --rtn\n";

const char* kGeneratePage =
    "usage: hearth generate --model DIR --ids 1,2,3 [options]\n"
    "\n"
    "Token ids in, token ids out: no template, no text. Greedy unless sampling options are\n"
    "given, so its output is reproducible without flags.\n"
    "\n"
    "options:\n"
    "  --model DIR          the checkpoint (required)\n"
    "  --ids LIST           the prompt's token ids, comma-separated (required)\n"
    "  --max-new-tokens N   default 128\n"
    "  --json               tokens, finish_reason, metrics and manifest as JSON\n"
    "\n" SAMPLING_OPTIONS "\n" ENGINE_OPTIONS
    "\n"
    "example:\n"
    "  hearth generate --model DIR --ids 9707,11,1879 --max-new-tokens 8 --json\n";

const char* kLogitsPage =
    "usage: hearth logits --model DIR --ids 1,2,3 --out FILE [--chunks 20,13]\n"
    "\n"
    "Writes float32 logits for every prompt position, raw little-endian [T, vocab], for checks\n"
    "against other implementations. --chunks splits the prompt into prefill steps of those sizes.\n"
    "The KV cache is f32 here unless --kv says otherwise.\n"
    "\n" ENGINE_OPTIONS
    "\n"
    "example:\n"
    "  hearth logits --model DIR --ids 9707,11,1879 --out /tmp/logits.f32\n";

const char* kTokenizePage =
    "usage: hearth tokenize --model DIR (--text TEXT | --jsonl FILE)\n"
    "\n"
    "Token ids of text, with the model's own tokenizer. --jsonl reads lines {\"text\": ...} ('-':\n"
    "stdin) and writes one JSON array of ids per line.\n"
    "\n"
    "example:\n"
    "  hearth tokenize --model DIR --text \"Hello, world\"\n";

const char* kDetokenizePage =
    "usage: hearth detokenize --model DIR --jsonl FILE\n"
    "\n"
    "Text of token ids: reads lines {\"ids\": [...], \"skip_special_tokens\": bool} ('-': stdin)\n"
    "and writes one JSON string per line.\n"
    "\n"
    "example:\n"
    "  echo '{\"ids\": [9707, 11, 1879]}' | hearth detokenize --model DIR --jsonl -\n";

const char* kDevicesPage =
    "usage: hearth devices\n"
    "\n"
    "The backends this build has and the devices each can run on: for the CPU its best ISA and\n"
    "cores; for Vulkan each device's name, type, driver, memory and the limits that bound the\n"
    "model sizes it takes (largest storage buffer, shared memory); for CUDA each GPU's name,\n"
    "compute capability, SMs and memory. Choose one with\n"
    "--backend NAME --device N.\n"
    "\n"
    "example:\n"
    "  hearth devices\n";

const char* kTemplatePage =
    "usage: hearth template --model DIR --jsonl FILE\n"
    "\n"
    "Renders chat messages with the model's chat template, as transformers'\n"
    "apply_chat_template does: reads lines {\"messages\", \"add_generation_prompt\",\n"
    "\"enable_thinking\"?, \"tools\"?} ('-': stdin) and writes {\"text\", \"ids\"} per line.\n"
    "\n"
    "example:\n"
    "  echo '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
    "\"add_generation_prompt\": true}' \\\n"
    "    | hearth template --model DIR --jsonl -\n";

const char* kBenchTokenizerPage =
    "usage: hearth bench-tokenizer --model DIR --text FILE [--repeats N] [--json]\n"
    "\n"
    "Encoding speed of the model's tokenizer on FILE, in MB/s (best of --repeats, default 5).\n"
    "\n"
    "example:\n"
    "  hearth bench-tokenizer --model DIR --text wiki.txt\n";

}  // namespace

const std::vector<CommandHelp>& command_help() {
  static const std::vector<CommandHelp> kCommands = {
      {"run", "answer one prompt, streaming the answer", kRunPage},
      {"chat", "an interactive conversation", kChatPage},
      {"serve", "an OpenAI-compatible HTTP server with a chat page", kServePage},
      {"quantize", "write an INT8/INT4 copy of a checkpoint", kQuantizePage},
      {"eval", "what quantization cost: perplexity, KL divergence, top-1 agreement", kEvalPage},
      {"bench", "prefill and decode speed beside the machine's limits", kBenchPage},
      {"standin", "write a random-weight checkpoint at a real model's shape", kStandinPage},
      {"generate", "token ids in, token ids out", kGeneratePage},
      {"logits", "raw logits of a prompt, for checks", kLogitsPage},
      {"tokenize", "text to token ids", kTokenizePage},
      {"detokenize", "token ids to text", kDetokenizePage},
      {"template", "render chat messages with the model's template", kTemplatePage},
      {"bench-tokenizer", "tokenizer encoding speed", kBenchTokenizerPage},
      {"devices", "the backends and devices this build can run on", kDevicesPage},
  };
  return kCommands;
}

const CommandHelp* find_command_help(const std::string& name) {
  for (const auto& c : command_help())
    if (name == c.name) return &c;
  return nullptr;
}

std::string overview_help() {
  std::string s =
      "hearth: Qwen3 language models on your CPU\n"
      "\n"
      "usage: hearth COMMAND [options]      hearth COMMAND --help for its options\n"
      "\n"
      "commands:\n";
  for (const auto& c : command_help()) {
    std::string name = c.name;
    name.resize(17, ' ');
    s += "  " + name + c.summary + "\n";
  }
  s += "\n"
       "  hearth --version   version, build and the ISAs and backends it has\n"
       "\n"
       "example:\n"
       "  hearth run --model ~/models/Qwen3-0.6B \"Why is the sky blue?\"\n";
  return s;
}

std::string version_text() {
  std::string compiled =
#if defined(__x86_64__) || defined(_M_X64)
      "avx512 avx2 scalar";
#elif defined(__aarch64__)
      "neon scalar";
#else
      "scalar";
#endif
  std::string backends;
  for (const auto& b : backend_names()) backends += (backends.empty() ? "" : " ") + b;
  // What the default backend makes of this machine (a one-thread instance: cheap to create).
  BackendOptions one;
  one.threads = 1;
  std::string here;
  try {
    here = create_backend("", one)->describe();
  } catch (const std::exception& e) {
    here = std::string("none usable: ") + e.what();
  }
  return std::string("hearth ") + HEARTH_VERSION + "\n" + "build: " + HEARTH_BUILD_TYPE +
         "\nISAs compiled: " + compiled + "\nbackends: " + backends + "\nthis machine: " + here +
         "\n";
}

}  // namespace hearth::cli
