// Continuous batching on one model's runner. Requests wait in an admission queue; each step mixes
// one decode row of every running sequence with chunks of pending prompts (chunked prefill) up to
// a token budget, so a long prompt never holds the others' decode back by more than one chunk.
// Admission is first come, first served. A new sequence starts from the longest prefix the KV pool
// has cached (full blocks only; its last prompt token is always computed, for its logits), and its
// full blocks are published as they fill. When a running sequence needs a block and none is left,
// the most recently admitted sequence is preempted: its blocks are let go (the published ones stay
// cached) and it is recomputed later from its tokens, resuming with the same sampler state, so it
// produces the tokens it would have (bit for bit where the backend's arithmetic does not depend on
// the step's size: the CPU's bf16 GEMM, the default for BF16 weights on CPUs with fast bf16 dots,
// rounds the activations of steps of 64 rows or more to bf16, as llama.cpp does). Any sequence can
// be cancelled at any step.
//
// A finished sequence keeps its blocks, parked, until its result is taken without parking it or
// the blocks are needed (parked sequences are let go least recently used first, before any running
// one is preempted). A request may resume a parked sequence: it keeps every computed position its
// prompt starts with, including a partly filled last block, which whole-block prefix sharing
// cannot reuse (a chat's next turn).
//
// Single-threaded: Engine (core/engine.h) shares one scheduler between threads.
#pragma once
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/runner.h"
#include "core/sampler.h"

namespace hearth {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  bool ignore_eos = false;        // keep going past stop ids (benchmarks, golden tests)
};

struct GenerationMetrics {
  int prompt_tokens = 0;   // tokens in the prompt
  int prefill_tokens = 0;  // of those, how many had to be computed (the rest came from the cache)
  int new_tokens = 0;
  int preemptions = 0;      // times the sequence was preempted and recomputed
  double queue_ms = 0;      // request start to its first step
  double prefill_ms = 0;    // request start to the prompt's last chunk
  double ttft_ms = 0;       // request start to first token sampled
  double decode_ms = 0;     // first token to last
  double ms_per_token = 0;  // decode_ms / (new_tokens - 1): time per output token
  double tokens_per_s = 0;  // decode speed
  double prefill_tokens_per_s = 0;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids, including the stop id when one ended it
  std::string finish_reason;    // "stop", "length", "cancelled" or "error"
  std::string error;            // with "error": what went wrong
  GenerationMetrics metrics;
};

struct SchedulerOptions {
  int max_batch_tokens = 0;  // rows per step; 0: the runner's prefill chunk
  int max_seqs = 0;          // running sequences; 0: the runner's max_seqs
};

class Scheduler {
 public:
  using Id = int64_t;
  struct Event {
    Id id = 0;
    int32_t token = -1;     // a sampled token, or -1
    bool finished = false;  // the sequence ended (after its last token's event)
  };

  explicit Scheduler(Runner& runner, const SchedulerOptions& opt = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Throws hearth::Error for an empty prompt, bad ids or sampling values, or a
  // request that could never fit the model's context or the KV pool.
  // resume: a parked sequence whose blocks the request takes over (0, or one no longer parked:
  // none).
  Id submit(const std::vector<int32_t>& prompt, const GenerateOptions& opt, Id resume = 0);
  // Ends a sequence at the next step with `reason` ("cancelled", or "stop" when its consumer
  // asked to stop); unknown or finished ids are ignored.
  void cancel(Id id, const char* reason = "cancelled");
  // Runs one step and appends what happened to `events`. Returns false when there was nothing to
  // run. A failing step ends its sequences with finish reason "error".
  bool step(std::vector<Event>& events);
  // A finished sequence's result. Without `park` the sequence is forgotten; with it, its blocks
  // stay for a later submit(..., resume = id) until forget(id) or until they are needed. Throws for
  // an unknown or unfinished id.
  GenerationResult take(Id id, bool park = false);
  void forget(Id id);  // lets a parked sequence go; unknown ids are ignored

  int parked() const { return int(parked_.size()); }
  // Sequences it holds: waiting, running, finished and not yet taken, or parked.
  int held() const { return int(seqs_.size()); }
  int waiting() const { return int(waiting_.size()); }
  int running() const { return int(running_.size()); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  Runner& runner() { return runner_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Seq;
  struct Entry {  // one sequence's rows in the step being built
    Seq* seq;
    int n;
  };

  void admit(int& budget, std::vector<Entry>& batch);
  bool reserve(Seq& s, int n, bool may_preempt);
  void preempt(Seq& victim);
  void release_blocks(Seq& s);
  void adopt(Seq& s, Seq& from);
  void unpark(Seq& s);
  void finish(Seq& s, const std::string& reason, std::vector<Event>& events);
  void run_batch(std::vector<Event>& events);
  void after_rows(Seq& s, int n);
  void sample_next(Seq& s, float* logits, int32_t argmax, std::vector<Event>& events);

  Runner& runner_;
  KVPool& pool_;
  int max_batch_tokens_, max_seqs_;
  Id next_id_ = 1;
  std::map<Id, std::unique_ptr<Seq>> seqs_;
  std::deque<Seq*> waiting_;   // FCFS; preempted sequences go back to the front
  std::vector<Seq*> running_;  // in admission order
  std::deque<Seq*> parked_;    // finished, holding blocks; least recently used first
  // Step buffers, kept between steps.
  std::vector<int32_t> tokens_, out_rows_, argmax_, top_k_;
  std::vector<SeqRows> rows_;
  std::vector<Entry> batch_;
  std::vector<Seq*> outs_;  // the batch's sequences that sample, in out_rows_ order
  // Not zeroed, so that a row's pages are touched only when a step writes that row: a single
  // stream keeps one of max_seqs rows (~0.6 MB each) resident.
  std::unique_ptr<float[]> logits_;
};

}  // namespace hearth
