// One step: the step's integers and RoPE angles written to host-visible buffers, the command
// buffer for this step's shape recorded once and re-submitted, then the logits, the argmax or the
// sampler's top-k read back.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/vulkan/vulkan_backend.h"
#include "core/error.h"
#include "core/gpu_ops.h"
#include "core/step_rows.h"

namespace hearth::vulkan {

namespace {

// Steps of at least this many rows (prefill) run the tiled shaders: matmul_tiled.comp (its tiles'
// token rows) and attention_tiled.comp.
constexpr uint32_t kTiledRows = 32;
static_assert(kActI8Rows >= kTiledRows - 1, "every short step's rows have int8 activations");

uint32_t div_up(uint64_t a, uint64_t b) {
  return uint32_t((a + b - 1) / b);
}

// Workgroups of a dispatch of `kernel` over `rows` rows.
void groups(Kernel kernel, const PushConstants& pc, uint32_t rows, uint32_t g[3]) {
  g[0] = g[1] = g[2] = 1;
  switch (kernel) {
    case Kernel::Embed:
    case Kernel::Gather:
      g[0] = div_up(pc.cols, 64), g[1] = rows;
      break;
    case Kernel::KvStore:  // an invocation per pair of elements
      g[0] = div_up(uint64_t(pc.n) * pc.u0 / 2, 64), g[1] = rows;
      break;
    case Kernel::Rope:
      g[0] = div_up(uint64_t(pc.n) * pc.u0, 64), g[1] = rows;
      break;
    case Kernel::RmsNorm:
      g[0] = std::min<uint32_t>(rows, 65535), g[1] = div_up(rows, 65535);
      break;
    case Kernel::MatMul:
    case Kernel::MatMulDot:
      g[0] = std::min<uint32_t>(pc.n, 65535), g[1] = div_up(rows, 4);
      break;
    case Kernel::QuantAct:  // an invocation per block of 32
      g[0] = div_up(pc.cols / 32, 64), g[1] = rows;
      break;
    case Kernel::MatMulRows:
      g[0] = div_up(pc.n, 64), g[1] = div_up(rows, 4);
      break;
    case Kernel::MatMulTiled:
      g[0] = div_up(pc.n, 32), g[1] = div_up(rows, 32);
      break;
    case Kernel::Binary: {
      const uint32_t total = div_up(uint64_t(rows) * pc.cols, 64);
      g[0] = std::min<uint32_t>(total, 65535), g[1] = div_up(total, g[0]);
      break;
    }
    case Kernel::Attention:  // z: the parts (record)
    case Kernel::AttentionMerge:
      g[0] = pc.n, g[1] = rows;
      break;
    case Kernel::AttentionTiled:  // eight rows a workgroup
      g[0] = pc.n, g[1] = div_up(rows, 8);
      break;
    case Kernel::Argmax:
    case Kernel::TopK:
    case Kernel::kCount:
      g[0] = rows;
      break;
  }
}

// The shader a dispatch runs over `rows` rows, or kCount when it is not recorded for them. Long
// steps (prefill) run the tiled matmul (on f32 activations, so without QuantAct) and attention;
// short ones (decode) split attention's positions over *parts (attention.comp, then
// attention_merge.comp). Long or short by all the rows of the dispatch (`all`), not those of its
// part (`rows`: a part of the logits), so that a MatMulDot part never lacks the QuantAct of its
// rows.
Kernel kernel_for(const Dispatch& d, uint32_t all, uint32_t rows, uint32_t* parts) {
  const bool long_step = all >= kTiledRows;
  *parts = d.parts == Dispatch::Parts::Any || long_step
               ? 1u
               : uint32_t(gpu_attention_splits(int(rows), int(d.pc.n)));
  if ((d.parts == Dispatch::Parts::One && *parts > 1) ||
      (d.parts == Dispatch::Parts::Many && *parts == 1))
    return Kernel::kCount;
  if (!long_step) return d.kernel;
  if (d.kernel == Kernel::QuantAct) return Kernel::kCount;  // the tiled matmul reads f32
  if (d.kernel == Kernel::MatMul || d.kernel == Kernel::MatMulRows || d.kernel == Kernel::MatMulDot)
    return Kernel::MatMulTiled;
  if (d.kernel == Kernel::Attention) return Kernel::AttentionTiled;
  return d.kernel;
}

// The k of each output row, after the step's integers (common.glsl).
uint32_t* top_k_of(const VkCompiled& c) {
  return static_cast<uint32_t*>(c.step.mapped()) + 3 * c.max_tokens + c.max_outputs;
}

}  // namespace

void VulkanBackend::bind_kv(VkCompiled& c, const VkKVStorage& kv) const {
  if (c.kv_serial == kv.serial) return;
  // Nothing is in flight: every submission is waited for (Context::submit_and_wait).
  c.drop_recorded();
  c.kv = &kv;
  c.kv_serial = kv.serial;
  for (const Dispatch& d : c.dispatches)
    if (d.binds[kKCache].kind == Bind::KCache) write_set(c, d);
}

void VulkanBackend::fill_step(VkCompiled& c, const StepInputs& in) const {
  const size_t n_blocks = step_block_entries(in);
  if (n_blocks > c.blocks_capacity) {  // grows rarely: by doubling, then the sets are rewritten
    c.drop_recorded();
    while (c.blocks_capacity < n_blocks) c.blocks_capacity *= 2;
    c.blocks = Buffer(*ctx_, c.blocks_capacity * 4, true, "block tables");
    for (const Dispatch& d : c.dispatches)
      if (d.binds[kBlocks].kind == Bind::Blocks) write_set(c, d);
  }
  fill_step_rows(in, c.max_tokens, c.inv_freq, static_cast<uint32_t*>(c.step.mapped()),
                 static_cast<float*>(c.rope.mapped()), static_cast<uint32_t*>(c.blocks.mapped()));
}

void VulkanBackend::record(VkCompiled& c, VkCommandBuffer cmd, int n_tokens, int n_out,
                           GpuReadback what) const {
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  check(vkBeginCommandBuffer(cmd, &bi), "recording a step");
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  auto emit = [&](const Dispatch& d) {
    PushConstants pc = d.pc;
    const uint32_t all = uint32_t(d.rows == Rows::Tokens ? n_tokens : n_out) * d.row_mult;
    const uint32_t rows = all > d.row0 ? std::min(all - d.row0, d.max_rows) : 0;
    uint32_t parts = 1;
    const Kernel kernel = rows ? kernel_for(d, all, rows, &parts) : Kernel::kCount;
    if (kernel == Kernel::kCount) return;
    pc.rows = rows;
    pc.step_T = uint32_t(c.max_tokens);
    if (d.kernel == Kernel::TopK) pc.u1 = d.row0;
    if (d.kernel == Kernel::KvStore || d.kernel == Kernel::Attention) {
      pc.u1 = uint32_t(c.kv->block_size);
      pc.kvtype = float_type(c.kv->dtype);
    }
    if (kernel == Kernel::AttentionMerge) pc.u1 = parts;
    if (kernel == Kernel::MatMulDot) pc.u0 = d.row0;  // a part of the logits' rows: its int8 rows
    uint32_t g[3];
    groups(kernel, pc, rows, g);
    if (kernel == Kernel::Attention) g[2] = parts;
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, kernels_->pipeline(kernel));
    vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, kernels_->pipeline_layout(), 0, 1,
                            &d.set, 0, nullptr);
    vkCmdPushConstants(cmd, kernels_->pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                       sizeof(PushConstants), &pc);
    vkCmdDispatch(cmd, g[0], g[1], g[2]);
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &barrier, 0, nullptr, 0,
                         nullptr);
  };
  for (const Dispatch& d : c.dispatches) emit(d);
  if (what == GpuReadback::Argmax)
    for (const Dispatch& d : c.argmax_dispatches) emit(d);
  if (what == GpuReadback::TopK)
    for (const Dispatch& d : c.top_k_dispatches) emit(d);
  VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1,
                       &to_host, 0, nullptr, 0, nullptr);
  check(vkEndCommandBuffer(cmd), "recording a step");
}

VkCommandBuffer VulkanBackend::recorded(VkCompiled& c, int n_tokens, int n_out,
                                        GpuReadback what) const {
  const auto key = std::make_tuple(n_tokens, n_out, what);
  auto it = c.recorded.find(key);
  if (it != c.recorded.end()) return it->second;
  // A scheduler's steps come in many shapes (prompt chunks beside decode rows): keep the buffers
  // of at most kMaxRecorded, starting over when full (nothing is in flight between steps).
  constexpr size_t kMaxRecorded = 64;
  if (c.recorded.size() >= kMaxRecorded) c.drop_recorded();
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = ctx_->command_pool();
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cmd;
  check(vkAllocateCommandBuffers(ctx_->device(), &ai, &cmd), "allocating a command buffer");
  c.recorded[key] = cmd;
  record(c, cmd, n_tokens, n_out, what);
  return cmd;
}

// Top-k rows come back as their entries; a row the device did not serve (or whose ties overflowed
// them) is read whole.
void VulkanBackend::read_back(const VkCompiled& c, const StepInputs& in, GpuReadback what) const {
  const size_t row_floats = size_t(c.vocab);
  const auto* logits = static_cast<const float*>(c.logits.mapped());
  if (what == GpuReadback::Argmax) {
    std::memcpy(in.argmax, c.argmax.mapped(), size_t(in.n_out) * 4);
  } else if (what == GpuReadback::Logits && in.logits) {
    std::memcpy(in.logits, logits, size_t(in.n_out) * row_floats * 4);
  } else if (what == GpuReadback::TopK) {
    const uint32_t* ks = top_k_of(c);
    const auto* entries = static_cast<const uint32_t*>(c.top_k.mapped());
    for (int i = 0; i < in.n_out; ++i) {
      float* row = in.logits + size_t(i) * row_floats;
      if (ks[i] && expand_gpu_top_k(entries + size_t(i) * kGpuTopKWords, c.vocab, row)) continue;
      std::memcpy(row, logits + size_t(i) * row_floats, row_floats * 4);
    }
  }
}

void VulkanBackend::run(CompiledGraph& cg, const StepInputs& in) {
  auto& c = static_cast<VkCompiled&>(cg);
  if (in.observe_matmul) fail("calibration (quantize --calibration) runs on the CPU backend only");
  if (in.n_tokens < 1 || in.n_tokens > c.max_tokens || in.n_out > c.max_outputs || !in.kv)
    fail("Vulkan: a step of ", in.n_tokens, " tokens and ", in.n_out,
         " outputs does not fit the compiled graph (", c.max_tokens, ", ", c.max_outputs, ")");
  bind_kv(c, static_cast<const VkKVStorage&>(*in.kv));
  fill_step(c, in);
  const GpuReadback what = gpu_readback(in, top_k_of(c));
  ctx_->submit_and_wait(recorded(c, in.n_tokens, in.n_out, what), c.fence);
  read_back(c, in, what);
}

}  // namespace hearth::vulkan
