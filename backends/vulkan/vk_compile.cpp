// A graph as dispatches: activations placed in one device buffer, the logits and the step's
// inputs in host-visible ones, one descriptor set per dispatch.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/vulkan/vulkan_backend.h"
#include "core/error.h"
#include "core/gpu_ops.h"
#include "core/step_rows.h"

namespace hearth::vulkan {

namespace {

VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) {
  return (v + a - 1) / a * a;
}

// How a shader reads the weight w (its type, and a quantized one's groups, scales and codebook).
void set_weight(Dispatch& d, int id, const Tensor& w) {
  d.binds[kW] = {Bind::Weight, id};
  if (!w.quantized()) {
    d.pc.wtype = float_type(w.dtype);
    return;
  }
  d.pc.wtype = w.dtype == DType::Q8 ? kWQ8 : w.codebook ? kWQ4Codebook : kWQ4;
  d.pc.group = uint32_t(w.group_size);
  d.pc.stype = float_type(w.scale_dtype);
  if (w.codebook)
    for (int i = 0; i < 16; ++i)
      d.pc.codebook[i / 4] |= uint32_t(uint8_t(w.codebook[i])) << (8 * (i % 4));
  d.binds[kScales] = {Bind::Scales, id};
}

Dispatch make(Kernel k, Rows rows, uint32_t cols) {
  Dispatch d;
  d.kernel = k;
  d.rows = rows;
  d.pc.cols = cols;
  return d;
}

// The dispatches of one node, in order.
// A matmul or embedding whose weight is in several parts (vk_weights.cpp) runs as one dispatch
// per part: a matmul's part computes output columns [u1, u1 + n) of u2, an embedding's looks up
// the tokens whose ids fall in its rows [u1, u1 + u2).
void push_parts(const Graph& g, const Node& n, const Dispatch& d, uint64_t range,
                std::vector<Dispatch>& out) {
  const bool matmul = n.op == Op::MatMul;
  if (!matmul && n.op != Op::Embed) return out.push_back(d);
  const GraphTensor& wt = g.tensor(matmul ? n.in[1] : n.in[0]);
  const int64_t rows = wt.weight.rows(), per = weight_rows_per_part(wt.weight, range, wt.name);
  int part = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += per, ++part) {
    Dispatch p = d;
    p.binds[kW].part = part;
    p.binds[kScales].part = part;
    const uint32_t count = uint32_t(std::min(per, rows - r0));
    p.pc.u1 = uint32_t(r0);
    if (matmul)
      p.pc.n = count, p.pc.u2 = uint32_t(rows);
    else
      p.pc.u2 = count;
    out.push_back(p);
  }
}

// The int8 activations of `input` for a MatMulDot, unless the last ones quantized are already its:
// nothing else writes them, and every activation is written by one node.
void push_quant_act(const Graph& g, int input, std::vector<Dispatch>& out) {
  for (auto it = out.rbegin(); it != out.rend(); ++it)
    if (it->kernel == Kernel::QuantAct) {
      if (it->binds[kA].id == input) return;
      break;
    }
  const GraphTensor& x = g.tensor(input);
  Dispatch q = make(Kernel::QuantAct, x.rows, uint32_t(x.cols));
  q.binds[kA] = {Bind::Act, input};
  q.binds[kOut] = {Bind::ActI8};
  out.push_back(q);
}

void node_dispatches(const Graph& g, const Node& n, uint64_t range, bool integer_dot,
                     std::vector<Dispatch>& out) {
  const GraphTensor& o = g.tensor(n.out);
  const uint32_t cols = uint32_t(o.cols);
  auto act = [](int id) { return Bind{Bind::Act, id}; };
  Dispatch d = make(Kernel::Embed, o.rows, cols);
  d.binds[kOut] = act(n.out);
  switch (n.op) {
    case Op::Embed:
      set_weight(d, n.in[0], g.tensor(n.in[0]).weight);
      d.binds[kStep] = {Bind::Step};
      break;
    case Op::RmsNorm:
    case Op::HeadRmsNorm:
      d.kernel = Kernel::RmsNorm;
      if (n.op == Op::HeadRmsNorm)
        d.row_mult = uint32_t(n.p.n_heads), d.pc.cols = uint32_t(n.p.head_dim);
      set_weight(d, n.in[1], g.tensor(n.in[1]).weight);
      d.pc.f0 = n.p.eps;
      d.binds[kA] = act(n.in[0]);
      break;
    case Op::MatMul: {
      const Tensor& w = g.tensor(n.in[1]).weight;
      // Short rows: an invocation per output column; long ones: a workgroup splits k.
      d.kernel = w.cols() < 256 ? Kernel::MatMulRows : Kernel::MatMul;
      d.pc.cols = uint32_t(w.cols());
      d.pc.n = uint32_t(w.rows());
      set_weight(d, n.in[1], w);
      d.binds[kA] = act(n.in[0]);
      // Integer dot products (matmul_dot.comp) where rows are long enough for a workgroup to
      // split them (as matmul.comp does).
      if (integer_dot && gpu_int8_dot_weight(w) && d.kernel == Kernel::MatMul) {
        push_quant_act(g, n.in[0], out);
        d.kernel = Kernel::MatMulDot;
        d.binds[kB] = {Bind::ActI8};
      }
      break;
    }
    case Op::Rope:
      d.kernel = Kernel::Rope;
      d.pc.n = uint32_t(n.p.n_heads);
      d.pc.u0 = uint32_t(n.p.head_dim / 2);
      d.binds[kA] = act(n.in[0]);
      d.binds[kRope] = {Bind::Rope};
      break;
    case Op::Attention: {
      Dispatch s = make(Kernel::KvStore, Rows::Tokens, 0);
      s.pc.n = uint32_t(n.p.n_kv_heads);
      s.pc.u0 = uint32_t(n.p.head_dim);
      s.binds[kA] = act(n.in[1]);
      s.binds[kB] = act(n.in[2]);
      s.binds[kStep] = {Bind::Step};
      s.binds[kBlocks] = {Bind::Blocks};
      s.binds[kKCache] = {Bind::KCache, n.p.layer};
      s.binds[kVCache] = {Bind::VCache, n.p.layer};
      out.push_back(s);
      d.kernel = Kernel::Attention;
      d.pc.n = uint32_t(n.p.n_heads);
      d.pc.u0 = uint32_t(n.p.head_dim);
      d.pc.u2 = uint32_t(n.p.n_kv_heads);
      d.pc.f0 = float(1.0 / std::sqrt(double(n.p.head_dim)));
      d.binds[kA] = act(n.in[0]);
      d.binds[kStep] = {Bind::Step};
      d.binds[kBlocks] = {Bind::Blocks};
      d.binds[kKCache] = {Bind::KCache, n.p.layer};
      d.binds[kVCache] = {Bind::VCache, n.p.layer};
      // Steps of few rows split the positions (decode); the parts, then their merge.
      Dispatch part = d;
      part.parts = Dispatch::Parts::Many;
      part.binds[kOut] = {Bind::Partials};
      out.push_back(part);
      Dispatch merge = make(Kernel::AttentionMerge, Rows::Tokens, 0);
      merge.parts = Dispatch::Parts::Many;
      merge.pc.n = d.pc.n;
      merge.pc.u0 = d.pc.u0;
      merge.binds[kA] = {Bind::Partials};
      merge.binds[kOut] = act(n.out);
      out.push_back(merge);
      d.parts = Dispatch::Parts::One;
      break;
    }
    case Op::SiluMul:
    case Op::Add:
      d.kernel = Kernel::Binary;
      d.pc.u0 = n.op == Op::Add ? 0u : 1u;
      d.binds[kA] = act(n.in[0]);
      d.binds[kB] = act(n.in[1]);
      break;
    case Op::GatherRows:
      d.kernel = Kernel::Gather;
      d.binds[kA] = act(n.in[0]);
      d.binds[kStep] = {Bind::Step};
      break;
    case Op::MoE:
    case Op::kCount:
      fail("Vulkan: no dispatch for ", op_name(n.op));
  }
  push_parts(g, n, d, range, out);
}

// Output rows whose logits fit one binding (all of them when they do), in whole steps that keep
// every part's offsets aligned: of the logits, of the LM head's input rows and of the argmax.
uint32_t logits_rows_per_part(const Graph& g, const VkCompiled& c, const DeviceInfo& info) {
  const uint64_t row_bytes = uint64_t(c.vocab) * 4;
  const uint64_t fit = info.max_storage_buffer_range / row_bytes;
  if (fit >= uint64_t(c.max_outputs)) return uint32_t(c.max_outputs);
  const uint64_t align = std::max<uint64_t>(info.min_storage_offset_alignment, 4);
  uint64_t step = 1;
  auto need = [&](uint64_t bytes_per_row) {
    const uint64_t k = align / std::gcd(bytes_per_row, align);
    step = step / std::gcd(step, k) * k;
  };
  need(row_bytes);
  need(4);
  for (const Node& n : g.nodes())
    if (n.out == g.output) need(uint64_t(g.tensor(n.in[0]).cols) * 4);
  if (fit < step)
    fail("Vulkan: ", step, " rows of ", c.vocab, " logits exceed ", info.name,
         "'s storage-buffer range of ", info.max_storage_buffer_range, " bytes");
  return uint32_t(fit / step * step);
}

}  // namespace

int count_dispatches(const CompiledGraph& cg, Kernel kernel) {
  const auto& c = static_cast<const VkCompiled&>(cg);
  int n = 0;
  for (const auto* list : {&c.dispatches, &c.argmax_dispatches, &c.top_k_dispatches})
    for (const Dispatch& d : *list) n += d.kernel == kernel;
  return n;
}

void VkCompiled::drop_recorded() {
  for (auto& [key, cmd] : recorded)
    vkFreeCommandBuffers(ctx->device(), ctx->command_pool(), 1, &cmd);
  recorded.clear();
}

VkCompiled::~VkCompiled() {
  drop_recorded();
  if (pool) vkDestroyDescriptorPool(ctx->device(), pool, nullptr);
  if (fence) vkDestroyFence(ctx->device(), fence, nullptr);
}

void VulkanBackend::plan_dispatches(const Graph& g, VkCompiled& c) const {
  c.output = g.output;
  c.vocab = g.tensor(g.output).cols;
  c.inv_freq = rope_frequencies(g);
  alloc_step_buffers(g, c);
  std::vector<Dispatch> planned;
  for (const Node& n : g.nodes())
    node_dispatches(g, n, ctx_->info().max_storage_buffer_range, ctx_->integer_dot(), planned);
  alloc_int8_acts(planned, c);
  split_logit_dispatches(g, planned, c);
  alloc_descriptor_sets(c);
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vkCreateFence(ctx_->device(), &fi, nullptr, &c.fence), "creating a fence");
}

// Activations, each [rows, cols] f32 at its own aligned offset; the logits apart, host-visible;
// attention's partial sums, the step's inputs and the block tables.
void VulkanBackend::alloc_step_buffers(const Graph& g, VkCompiled& c) const {
  const DeviceInfo& info = ctx_->info();
  const VkDeviceSize align = std::max<VkDeviceSize>(info.min_storage_offset_alignment, 16);
  c.act_offset.assign(g.tensors().size(), 0);
  c.act_bytes.assign(g.tensors().size(), 0);
  VkDeviceSize total = 0;
  for (size_t id = 0; id < g.tensors().size(); ++id) {
    const GraphTensor& t = g.tensors()[id];
    if (t.kind != TensorKind::Activation || int(id) == g.output) continue;
    const int rows = t.rows == Rows::Tokens ? c.max_tokens : c.max_outputs;
    c.act_offset[id] = total;
    c.act_bytes[id] = VkDeviceSize(rows) * VkDeviceSize(t.cols) * 4;
    if (c.act_bytes[id] > info.max_storage_buffer_range)
      fail("Vulkan: activation ", t.name, " of ", c.act_bytes[id], " bytes exceeds ", info.name,
           "'s storage-buffer range; use a smaller --prefill-chunk");
    total = align_up(total + c.act_bytes[id], align);
  }
  c.acts = Buffer(*ctx_, total, false, "activations");
  size_t partial_floats = 1;
  for (const Node& n : g.nodes())
    if (n.op == Op::Attention)
      partial_floats =
          std::max(partial_floats, gpu_attention_partials(c.max_tokens, n.p.n_heads, n.p.head_dim));
  if (partial_floats * 4 > info.max_storage_buffer_range)
    fail("Vulkan: attention's partial sums of ", partial_floats * 4, " bytes exceed ", info.name,
         "'s storage-buffer range; use a smaller --prefill-chunk");
  c.partials = Buffer(*ctx_, VkDeviceSize(partial_floats) * 4, false, "attention's partial sums");
  const VkDeviceSize logit_bytes = VkDeviceSize(c.max_outputs) * VkDeviceSize(c.vocab) * 4;
  c.logits = Buffer(*ctx_, logit_bytes, true, "logits");
  c.argmax = Buffer(*ctx_, VkDeviceSize(c.max_outputs) * 4, true, "argmax");
  c.top_k = Buffer(*ctx_, VkDeviceSize(c.max_outputs) * kGpuTopKWords * 4, true, "top-k entries");
  c.step =
      Buffer(*ctx_, VkDeviceSize(3 * c.max_tokens + 2 * c.max_outputs) * 4, true, "step inputs");
  c.rope = Buffer(*ctx_, VkDeviceSize(c.max_tokens) * std::max<size_t>(c.inv_freq.size(), 1) * 8,
                  true, "RoPE angles");
  c.blocks_capacity = 256;
  c.blocks = Buffer(*ctx_, c.blocks_capacity * 4, true, "block tables");
}

// The int8 activations' buffer, where a dispatch quantizes them.
void VulkanBackend::alloc_int8_acts(const std::vector<Dispatch>& planned, VkCompiled& c) const {
  const DeviceInfo& info = ctx_->info();
  uint32_t dot_cols = 0;  // the widest input QuantAct quantizes
  for (const Dispatch& d : planned)
    if (d.kernel == Kernel::QuantAct) dot_cols = std::max(dot_cols, d.pc.cols);
  if (dot_cols) {  // codes, block scales and code sums of kActI8Rows rows (shaders/common.glsl)
    const VkDeviceSize bytes = VkDeviceSize(kActI8Rows) * (dot_cols + dot_cols / 4);
    if (bytes > info.max_storage_buffer_range)
      fail("Vulkan: int8 activations of ", bytes, " bytes exceed ", info.name,
           "'s storage-buffer range (HEARTH_VULKAN_INTEGER_DOT=0 does without them)");
    c.act_i8 = Buffer(*ctx_, bytes, false, "int8 activations");
  }
}

// The graph's dispatches, argmax's and top-k's into c, each that reads or writes the logits in
// parts of rows when the logits exceed one binding's range.
void VulkanBackend::split_logit_dispatches(const Graph& g, const std::vector<Dispatch>& planned,
                                           VkCompiled& c) const {
  Dispatch am = make(Kernel::Argmax, Rows::Outputs, uint32_t(c.vocab));
  am.binds[kA] = {Bind::Act, g.output};
  am.binds[kOut] = {Bind::Argmax};
  Dispatch tk = make(Kernel::TopK, Rows::Outputs, uint32_t(c.vocab));
  tk.pc.u0 = uint32_t(c.max_outputs);
  tk.binds[kA] = {Bind::Act, g.output};
  tk.binds[kOut] = {Bind::TopK};
  tk.binds[kStep] = {Bind::Step};
  // The logits may exceed one binding's range: the dispatches that read or write them run in
  // parts of rows_per_part output rows.
  const uint32_t rows_per_part = logits_rows_per_part(g, c, ctx_->info());
  auto split = [&](const Dispatch& d, std::vector<Dispatch>& out) {
    const bool touches = d.binds[kOut].id == g.output || d.binds[kA].id == g.output;
    if (!touches || rows_per_part >= uint32_t(c.max_outputs)) return out.push_back(d);
    for (uint32_t r0 = 0; r0 < uint32_t(c.max_outputs); r0 += rows_per_part) {
      Dispatch part = d;
      part.row0 = r0;
      part.max_rows = rows_per_part;
      out.push_back(part);
    }
  };
  for (const Dispatch& d : planned) split(d, c.dispatches);
  split(am, c.argmax_dispatches);
  split(tk, c.top_k_dispatches);
}

// One descriptor set per dispatch, written once.
void VulkanBackend::alloc_descriptor_sets(VkCompiled& c) const {
  const uint32_t sets =
      uint32_t(c.dispatches.size() + c.argmax_dispatches.size() + c.top_k_dispatches.size());
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, sets * kBindings};
  VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  pi.maxSets = sets;
  pi.poolSizeCount = 1;
  pi.pPoolSizes = &size;
  check(vkCreateDescriptorPool(ctx_->device(), &pi, nullptr, &c.pool),
        "creating a descriptor pool");
  std::vector<VkDescriptorSetLayout> layouts(sets, kernels_->set_layout());
  std::vector<VkDescriptorSet> allocated(sets);
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = c.pool;
  ai.descriptorSetCount = sets;
  ai.pSetLayouts = layouts.data();
  check(vkAllocateDescriptorSets(ctx_->device(), &ai, allocated.data()),
        "allocating descriptor sets");
  size_t next = 0;
  for (auto* list : {&c.dispatches, &c.argmax_dispatches, &c.top_k_dispatches})
    for (Dispatch& d : *list) {
      d.set = allocated[next++];
      write_set(c, d);
    }
}

void VulkanBackend::write_set(const VkCompiled& c, const Dispatch& d) const {
  VkDescriptorBufferInfo infos[kBindings];
  VkWriteDescriptorSet writes[kBindings];
  for (uint32_t b = 0; b < kBindings; ++b) {
    VkDescriptorBufferInfo& bi = infos[b];
    bi = {dummy_.handle(), 0, VK_WHOLE_SIZE};
    const Bind& x = d.binds[b];
    switch (x.kind) {
      case Bind::None:
        break;
      case Bind::KCache:
      case Bind::VCache:
        if (c.kv) {
          const auto& layers = x.kind == Bind::KCache ? c.kv->k : c.kv->v;
          bi.buffer = layers.at(size_t(x.id)).handle();
        }
        break;
      case Bind::Act: {
        const GraphTensor& t = c.graph->tensor(x.id);
        const VkDeviceSize row_bytes = VkDeviceSize(t.cols) * 4;
        const VkDeviceSize rows =
            VkDeviceSize(t.rows == Rows::Tokens ? c.max_tokens : c.max_outputs);
        const VkDeviceSize n = std::min<VkDeviceSize>(d.max_rows, rows - d.row0);
        const VkBuffer buf = x.id == c.output ? c.logits.handle() : c.acts.handle();
        const VkDeviceSize base = x.id == c.output ? 0 : c.act_offset[size_t(x.id)];
        bi = {buf, base + d.row0 * row_bytes, n * row_bytes};
        break;
      }
      case Bind::Weight:
      case Bind::Scales: {
        const Tensor& t = c.graph->tensor(x.id).weight;
        const WeightRef& w =
            weight(x.kind == Bind::Weight ? t.data : t.scales, c.graph->tensor(x.id).name);
        const WeightRef::Part& p = w.parts.at(size_t(x.part));
        bi = {p.buf, p.offset, p.range};
        break;
      }
      case Bind::Step:
        bi.buffer = c.step.handle();
        break;
      case Bind::Partials:
        bi.buffer = c.partials.handle();
        break;
      case Bind::ActI8:
        bi.buffer = c.act_i8.handle();
        break;
      case Bind::Blocks:
        bi.buffer = c.blocks.handle();
        break;
      case Bind::Rope:
        bi.buffer = c.rope.handle();
        break;
      case Bind::Argmax:
        bi = {c.argmax.handle(), VkDeviceSize(d.row0) * 4, VK_WHOLE_SIZE};
        break;
      case Bind::TopK:  // whole: a part's rows start at pc.u1 (row0 * 2052 bytes is not aligned)
        bi.buffer = c.top_k.handle();
        break;
    }
    writes[b] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[b].dstSet = d.set;
    writes[b].dstBinding = b;
    writes[b].descriptorCount = 1;
    writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[b].pBufferInfo = &bi;
  }
  vkUpdateDescriptorSets(ctx_->device(), kBindings, writes, 0, nullptr);
}

}  // namespace hearth::vulkan
