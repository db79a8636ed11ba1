// The Vulkan backend: each graph node becomes one or two compute dispatches (shaders/), recorded
// into a command buffer per step shape (tokens, output rows, what it reads back) and re-submitted
// while the shape repeats; what changes per step (tokens, positions, block tables, RoPE angles)
// goes through small host-visible buffers. Weights are uploaded once per backend (one per model)
// into device-local slabs; the paged KV cache lives on the device, f32, one K and one V buffer per
// layer.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backends/vulkan/vk_buffer.h"
#include "backends/vulkan/vk_context.h"
#include "backends/vulkan/vk_kernels.h"
#include "core/backend.h"
#include "core/gpu_readback.h"

namespace hearth::vulkan {

// Where a weight (its codes, or a quantized one's scales) lives on the device: in parts of
// rows_per_part rows, each within one binding's range (one part unless the weight is larger).
struct WeightRef {
  struct Part {
    VkBuffer buf = VK_NULL_HANDLE;
    VkDeviceSize offset = 0, range = 0;
  };
  int64_t rows_per_part = 0;
  std::vector<Part> parts;
};

// Block b of layer l: K in k[l] and V in v[l] at [b][kv head][block_size][head_dim], f32, f16 or
// bf16.
struct VkKVStorage : KVStorage {
  std::vector<Buffer> k, v;
  uint64_t serial = 0;  // tells compiled graphs which storage their descriptor sets name
};

// Rows per part of weight t when one binding spans at most `range` bytes: all of them when they
// fit, else a multiple of 128 (vk_weights.cpp). Throws when not even 128 rows fit.
int64_t weight_rows_per_part(const Tensor& t, uint64_t range, const std::string& name);

// What one binding of a dispatch's descriptor set names.
struct Bind {
  enum Kind : uint8_t {
    None,
    Act,
    Weight,
    Scales,
    Step,
    Blocks,
    Rope,
    KCache,
    VCache,
    Argmax,
    TopK,
    Partials,
    ActI8  // int8 activations (QuantAct's output, MatMulDot's input)
  };
  Kind kind = None;
  int id = -1;   // Act, Weight, Scales: graph tensor id; KCache, VCache: layer
  int part = 0;  // Weight, Scales: which part of a weight split across bindings
};

struct Dispatch {
  Kernel kernel;
  Rows rows = Rows::Tokens;  // pc.rows is the step's tokens or output rows ...
  uint32_t row_mult = 1;     // ... times this (a per-head norm: heads)
  // A part of a dispatch split by rows, because its tensors exceed what one binding may span
  // (the logits of a long all-logits step): rows [row0, row0 + max_rows) only; its Act and Argmax
  // bindings start at row0.
  uint32_t row0 = 0, max_rows = 0xffffffffu;
  // Attention dispatches recorded only when the step's rows split positions over parts (Many:
  // the parts and their merge) or do not (One: the whole in one pass).
  enum class Parts : uint8_t { Any, One, Many } parts = Parts::Any;
  PushConstants pc;  // rows, step_T and the KV block size are filled when recorded
  Bind binds[kBindings];
  VkDescriptorSet set = VK_NULL_HANDLE;
};

struct VkCompiled : CompiledGraph {
  explicit VkCompiled(Context& c) : ctx(&c) {}
  ~VkCompiled() override;
  Context* ctx;
  const Graph* graph = nullptr;  // must outlive this (as the runner's graph does)
  int output = -1;
  int64_t vocab = 0;
  Buffer acts;      // every activation but the logits, at act_offset[id]
  Buffer partials;  // split attention's partial softmaxes (attention.comp)
  Buffer act_i8;    // QuantAct's int8 activations, where the graph has a MatMulDot
  std::vector<VkDeviceSize> act_offset, act_bytes;
  Buffer logits, argmax, top_k, step, rope, blocks;  // host-visible
  size_t blocks_capacity = 0;                        // entries
  std::vector<Dispatch> dispatches;
  // Recorded after the others when the step reads back the argmax, or the top-k entries.
  std::vector<Dispatch> argmax_dispatches, top_k_dispatches;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  std::map<std::tuple<int, int, GpuReadback>, VkCommandBuffer> recorded;  // by step shape
  const VkKVStorage* kv = nullptr;  // the storage the sets name (by serial: kv_serial)
  uint64_t kv_serial = 0;
  std::vector<double> inv_freq;  // RoPE: theta^(-2i / head_dim)
  void drop_recorded();
};

// The dispatches a compiled graph records for `kernel` (argmax included), for tests of the split
// into parts.
int count_dispatches(const CompiledGraph& cg, Kernel kernel);

class VulkanBackend : public Backend {
 public:
  explicit VulkanBackend(const BackendOptions& opt);
  ~VulkanBackend() override;
  std::string name() const override { return "vulkan"; }
  std::string describe() const override;
  bool supports_op(const Graph& g, const Node& n) const override;
  std::unique_ptr<CompiledGraph> compile(const Graph& g, int max_tokens, int max_outputs) override;
  DType kv_dtype() const override { return kv_dtype_; }
  // The device-local heap less the graph's weights, one layer within a binding's range.
  KVRoom kv_room(const Graph& g) const override;
  std::unique_ptr<KVStorage> alloc_kv(const KVSpec& spec, int n_blocks, int block_size) override;
  void copy_kv_block(KVStorage& kv, int from, int to) override;
  void run(CompiledGraph& cg, const StepInputs& in) override;

  Context& context() { return *ctx_; }
  // Whether Q8/Q4 decode matmuls run on integer dot products (VulkanOptions::integer_dot).
  bool integer_dot() const { return ctx_->integer_dot(); }
  // Errors and warnings of the validation layer so far (BackendOptions::vulkan.validation).
  int validation_reports() const { return ctx_->validation_reports(); }
  std::string first_validation_report() const { return ctx_->first_validation_report(); }

 private:
  void place_weights(const Graph& g);  // vk_weights.cpp
  // The device copy of the host bytes at `data` (a weight's codes or scales); `name` for errors.
  const WeightRef& weight(const void* data, const std::string& name) const;  // vk_weights.cpp
  // vk_compile.cpp: plan_dispatches and its parts, in order.
  void plan_dispatches(const Graph& g, VkCompiled& c) const;
  void alloc_step_buffers(const Graph& g, VkCompiled& c) const;
  void alloc_int8_acts(const std::vector<Dispatch>& planned, VkCompiled& c) const;
  void split_logit_dispatches(const Graph& g, const std::vector<Dispatch>& planned,
                              VkCompiled& c) const;
  void alloc_descriptor_sets(VkCompiled& c) const;
  void write_set(const VkCompiled& c, const Dispatch& d) const;  // vk_compile.cpp
  void bind_kv(VkCompiled& c, const VkKVStorage& kv) const;      // vk_step.cpp
  void fill_step(VkCompiled& c, const StepInputs& in) const;     // vk_step.cpp
  VkCommandBuffer recorded(VkCompiled& c, int n_tokens, int n_out, GpuReadback what) const;
  void record(VkCompiled& c, VkCommandBuffer cmd, int n_tokens, int n_out, GpuReadback what) const;
  void read_back(const VkCompiled& c, const StepInputs& in, GpuReadback what) const;

  DType kv_dtype_;
  bool subgroups_ = false;  // the matmul reduces with subgroup arithmetic
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Kernels> kernels_;
  Buffer dummy_;
  struct Slab {
    Buffer buf;
    VkDeviceSize used = 0;
  };
  std::vector<Slab> slabs_;
  // Weights are placed once, keyed by their host address: a backend serves one model's graphs.
  std::map<const void*, WeightRef> weights_;
  uint64_t next_kv_serial_ = 1;
};

}  // namespace hearth::vulkan
