// The Llama-family decoder (Llama, Mistral, Qwen2, Qwen3): one forward per engine step over a ragged batch,
// every layer through the op interface, KV in the runner's paged cache. See model.h for the contract.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "io/safetensors.h"
#include "model/gguf_weights.h"
#include "model/llama_weights.h"
#include "model/model.h"
#include "model/rope_scaling.h"

namespace peregrine::model {
namespace {

class LlamaModel final : public Model {
 public:
  LlamaModel(io::ModelConfig config, LlamaWeights weights, ops::Backend& backend, const ModelOptions& options)
      : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), options_(options) {
    if (!backend_.supports_activation(options_.activation_dtype))
      throw Error(ErrorCode::kUnsupported, "backend " + backend_.name() + " does not compute in " +
                                               std::string(dtype_name(options_.activation_dtype)));
    max_tokens_ = std::max(1, options_.max_num_tokens);
    max_logit_rows_ = std::max(1, options_.max_logits_rows);
    allocate_workspace();
    rope_ = compute_rope_tables(config_, 0);
    upload_rope(rope_);
  }

  const io::ModelConfig& config() const override { return config_; }
  ops::Backend& backend() const override { return backend_; }
  size_t weight_bytes() const override { return weights_.total_bytes; }
  size_t decode_weight_bytes() const override {
    const bool tied = weights_.lm_head.weight.data == weights_.embed_tokens.data;
    return weights_.total_bytes - (tied ? 0 : std::min(weights_.total_bytes, weights_.embed_tokens.bytes()));
  }
  int max_num_tokens() const override { return max_tokens_; }
  int max_logits_rows() const override { return max_logit_rows_; }
  DType activation_dtype() const override { return options_.activation_dtype; }
  bool graph_safe() const override { return config_.rope.type != io::RopeType::kDynamic; }
  bool calls_before_layer() const override { return true; }
  void prepare_step(int64_t num_positions) override {
    if (config_.rope.type == io::RopeType::kDynamic) upload_rope(compute_rope_tables(config_, num_positions));
  }
  void forward(const StepInputs& in, std::span<const KvLayer> kv) override;
  void compute_logits(const TensorView& rows, const TensorView& out) override;
  void use_logits_subset(int64_t rows) override;
  void set_logits_tokens(std::span<const int32_t> ids, int64_t first) override;
  int64_t logits_width() const override { return subset_rows_ > 0 ? subset_rows_ : config_.vocab_size; }
  std::unique_ptr<Model> layer_subset(std::span<const int> layers, const ModelOptions& options) const override;

 private:
  void allocate_workspace();
  void upload_rope(const RopeTables& tables);
  // The two matmul groups of a layer that follow a norm (q/k/v; gate/up, with SiLU·mul) and the two that end in
  // the residual stream (o_proj; down_proj), as the fused path runs them (ops.h MatmulFusion).
  struct FusedGroups {
    std::array<ops::MatmulParams, 3> qkv;
    ops::MatmulFusion qkv_f;
    ops::MatmulParams o;
    ops::MatmulFusion o_f;
    std::array<ops::MatmulParams, 2> gate_up;
    ops::MatmulFusion gate_up_f;
    ops::MatmulParams down;
    ops::MatmulFusion down_f;
  };
  FusedGroups fused_groups(const LayerWeights& w, int64_t t) const;
  // Whether a step of t tokens runs every layer fused (the backend has kernels for all of its groups); the same
  // answer for every layer of a step, remembered per t.
  bool fused_step(int64_t t);
  // Otherwise each layer's epilogue fusions, which give the bits of the unfused ops (ops.h MatmulFusion): the
  // residual add after o_proj and down_proj, SiLU·mul after gate/up on x the norm kernel made. Bits of
  // kEpilogue*, per layer, remembered per t (a backend may fuse them where it does not fuse the norms, as CUDA does
  // for 4- and 8-bit codes).
  enum : uint8_t { kEpilogueO = 1, kEpilogueGateUp = 2, kEpilogueDown = 4 };
  const std::vector<uint8_t>& epilogue_plan(int64_t t);
  TensorView act(const ops::DeviceBuffer& buf, int64_t rows, int64_t cols) const {
    return TensorView(buf.data(), options_.activation_dtype, {rows, cols});
  }

  io::ModelConfig config_;
  LlamaWeights weights_;
  ops::Backend& backend_;
  ModelOptions options_;
  int max_tokens_ = 0;
  int max_logit_rows_ = 0;
  int64_t last_tokens_ = 0;  // rows of the last forward (compute_logits reads them)
  RopeTables rope_;

  // Workspace (sized for max_tokens_ rows).
  ops::DeviceBuffer hidden_;    // [T, hidden] layer output / embedding
  ops::DeviceBuffer residual_;  // [T, hidden] the residual stream
  ops::DeviceBuffer normed_;    // [T, hidden]; after forward: the final normed hidden states
  ops::DeviceBuffer q_, k_, v_; // [T, nq*hd], [T, nkv*hd], [T, nkv*hd]
  ops::DeviceBuffer attn_;      // [T, nq*hd]
  ops::DeviceBuffer gate_, up_; // [T, intermediate]
  ops::DeviceBuffer selected_;  // [R_max, hidden]
  ops::DeviceBuffer inv_freq_;  // [rotary_dim / 2] f32
  std::vector<int8_t> fused_;   // per t: -1 not asked yet, 0 / 1 fused_step's answer
  std::vector<std::vector<uint8_t>> epilogues_;  // per t: empty until asked, then epilogue_plan's bits per layer
  // The compact LM head (use_logits_subset): rows of the LM head's weight gathered by token id.
  // A quantized head's compact copy is quantized alike: GGUF blocks or codes by rows, with the codes' scale and
  // zero rows, and the backend's packed copy of the compact rows where the LM head has one.
  int64_t subset_rows_ = 0;        // 0: logits over the whole vocabulary
  ops::DeviceBuffer subset_head_;  // [subset_rows_, LM head row] in the LM head's dtype (blocks / codes as stored)
  ops::DeviceBuffer subset_ids_;   // [subset_rows_] int32: the gather's indices
  ops::DeviceBuffer subset_scales_, subset_zeros_, subset_packed_;
  ops::WeightQuant subset_quant_;  // the compact head's quantization (none for a dense head)
  Linear subset_head() const;
};

void LlamaModel::allocate_workspace() {
  const size_t t = static_cast<size_t>(max_tokens_);
  const DType a = options_.activation_dtype;
  const auto& c = config_;
  auto rows = [&](size_t n, int64_t cols) { return ops::DeviceBuffer(backend_, dtype_bytes(a, n * cols)); };
  hidden_ = rows(t, c.hidden_size);
  residual_ = rows(t, c.hidden_size);
  normed_ = rows(t, c.hidden_size);
  q_ = rows(t, c.num_attention_heads * c.head_dim);
  k_ = rows(t, c.num_key_value_heads * c.head_dim);
  v_ = rows(t, c.num_key_value_heads * c.head_dim);
  attn_ = rows(t, c.num_attention_heads * c.head_dim);
  gate_ = rows(t, c.intermediate_size);
  up_ = rows(t, c.intermediate_size);
  selected_ = rows(static_cast<size_t>(max_logit_rows_), c.hidden_size);
  inv_freq_ = ops::DeviceBuffer(backend_, sizeof(float) * static_cast<size_t>(c.rotary_dim() / 2));
}

void LlamaModel::upload_rope(const RopeTables& tables) {
  backend_.copy_from_host(inv_freq_.data(), tables.inv_freq.data(), tables.inv_freq.size() * sizeof(float));
}

LlamaModel::FusedGroups LlamaModel::fused_groups(const LayerWeights& w, int64_t t) const {
  const auto& c = config_;
  const int64_t h = c.hidden_size, hd = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const TensorView residual = act(residual_, t, h);
  const TensorView q = act(q_, t, nq * hd), k = act(k_, t, nkv * hd), v = act(v_, t, nkv * hd);
  const TensorView attn = act(attn_, t, nq * hd);
  const TensorView gate = act(gate_, t, c.intermediate_size), up = act(up_, t, c.intermediate_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  FusedGroups g;
  g.qkv = {w.q_proj(residual, q), w.k_proj(residual, k), w.v_proj(residual, v)};
  g.qkv_f.norm_weight = w.input_norm;
  g.qkv_f.eps = eps;
  g.o = w.o_proj(attn, residual);
  g.o_f.residual = residual;
  g.gate_up = {w.gate_proj(residual, gate), w.up_proj(residual, up)};
  g.gate_up_f.norm_weight = w.post_norm;
  g.gate_up_f.eps = eps;
  g.gate_up_f.silu_mul = true;
  g.down = w.down_proj(gate, residual);
  g.down_f.residual = residual;
  return g;
}

bool LlamaModel::fused_step(int64_t t) {
  if (fused_.size() <= static_cast<size_t>(t)) fused_.resize(static_cast<size_t>(t) + 1, -1);
  int8_t& known = fused_[static_cast<size_t>(t)];
  if (known < 0) {
    bool all = !weights_.layers.empty();
    for (const LayerWeights& w : weights_.layers) {
      if (!all) break;
      const FusedGroups g = fused_groups(w, t);
      all = backend_.fuses_matmuls(g.qkv, g.qkv_f) && backend_.fuses_matmuls({&g.o, 1}, g.o_f) &&
            backend_.fuses_matmuls(g.gate_up, g.gate_up_f) && backend_.fuses_matmuls({&g.down, 1}, g.down_f);
    }
    known = all ? 1 : 0;
  }
  return known == 1;
}

const std::vector<uint8_t>& LlamaModel::epilogue_plan(int64_t t) {
  if (epilogues_.size() <= static_cast<size_t>(t)) epilogues_.resize(static_cast<size_t>(t) + 1);
  std::vector<uint8_t>& plan = epilogues_[static_cast<size_t>(t)];
  if (plan.empty()) {
    const auto& c = config_;
    const TensorView residual = act(residual_, t, c.hidden_size), normed = act(normed_, t, c.hidden_size);
    const TensorView gate = act(gate_, t, c.intermediate_size), up = act(up_, t, c.intermediate_size);
    const TensorView attn = act(attn_, t, c.num_attention_heads * c.head_dim);
    ops::MatmulFusion add, silu;
    add.residual = residual;
    silu.silu_mul = true;
    for (const LayerWeights& w : weights_.layers) {
      const ops::MatmulParams o = w.o_proj(attn, residual), down = w.down_proj(gate, residual);
      const std::array gate_up{w.gate_proj(normed, gate), w.up_proj(normed, up)};
      uint8_t bits = 0;
      if (backend_.fuses_matmuls({&o, 1}, add)) bits |= kEpilogueO;
      if (backend_.fuses_matmuls(gate_up, silu)) bits |= kEpilogueGateUp;
      if (backend_.fuses_matmuls({&down, 1}, add)) bits |= kEpilogueDown;
      plan.push_back(bits);
    }
  }
  return plan;
}

// Every layer on the inputs already on the device. Enqueues ops only (no host synchronisation), so it can be
// captured into a graph. Decode-sized steps on a backend with fused kernels run each layer's norms, SiLU·mul and
// residual adds inside its matmuls (fused_step); otherwise the norms run on their own, and the residual adds and
// SiLU·mul inside the matmuls where the backend fuses those alone (epilogue_plan), else on their own too.
void LlamaModel::forward(const StepInputs& in, std::span<const KvLayer> kv) {
  const auto& c = config_;
  const int64_t t = in.token_ids.dim(0);
  PEREGRINE_CHECK(t <= max_tokens_, "step larger than the model's workspace");
  PEREGRINE_CHECK(kv.size() == weights_.layers.size(), "KV layers and model layers differ");
  last_tokens_ = t;
  const int64_t h = c.hidden_size, hd = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const TensorView hidden = act(hidden_, t, h), residual = act(residual_, t, h), normed = act(normed_, t, h);
  const TensorView q = act(q_, t, nq * hd), k = act(k_, t, nkv * hd), v = act(v_, t, nkv * hd);
  const TensorView attn = act(attn_, t, nq * hd);
  const TensorView gate = act(gate_, t, c.intermediate_size), up = act(up_, t, c.intermediate_size);
  const TensorView inv_freq(inv_freq_.data(), DType::kF32, {c.rotary_dim() / 2});
  const float eps = static_cast<float>(c.rms_norm_eps);

  const bool fused = fused_step(t);
  const std::vector<uint8_t>* plan = fused ? nullptr : &epilogue_plan(t);
  // Unfused: `pending` while hidden holds a product (or the embedding) not yet added to the residual stream; the
  // next norm adds it (rms_norm with a residual), as the fused residual epilogue would have.
  bool pending = false;
  // next: the matmuls that read normed right after (ops.h RmsNormParams::next), where the call after is matmuls.
  auto norm = [&](const TensorView& weight, std::span<const ops::MatmulParams> next = {}) {
    if (pending) {
      backend_.rms_norm({hidden, residual, weight, normed, eps, next});  // residual += hidden; normed = rmsnorm(residual)
    } else {
      backend_.rms_norm({residual, {}, weight, normed, eps, next});
    }
    pending = false;
  };
  if (fused) {
    backend_.embedding({in.token_ids, weights_.embed_tokens, residual, weights_.embed_ggml});
  } else {
    backend_.embedding({in.token_ids, weights_.embed_tokens, hidden, weights_.embed_ggml});
    backend_.fill_zero(residual.data, residual.bytes());
    pending = true;
  }
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    if (in.before_layer) in.before_layer(static_cast<int>(l));
    const LayerWeights& w = weights_.layers[l];
    const FusedGroups g = fused ? fused_groups(w, t) : FusedGroups{};
    const uint8_t epi = fused ? 0 : (*plan)[l];
    if (fused) {
      backend_.matmuls_fused(g.qkv, g.qkv_f);
    } else {
      const std::array qkv{w.q_proj(normed, q), w.k_proj(normed, k), w.v_proj(normed, v)};
      norm(w.input_norm, qkv);
      backend_.matmuls(qkv);
    }
    if (c.qk_norm) {
      TensorView qh = q.reshaped({t * nq, hd}), kh = k.reshaped({t * nkv, hd});
      backend_.rms_norm({qh, {}, w.q_norm, qh, eps});
      backend_.rms_norm({kh, {}, w.k_norm, kh, eps});
    }
    const TensorView q3 = q.reshaped({t, nq, hd}), k3 = k.reshaped({t, nkv, hd}), v3 = v.reshaped({t, nkv, hd});
    backend_.rope_kv_write({q3, k3, in.positions, inv_freq, rope_.attention_scaling, static_cast<int>(c.rotary_dim())},
                           {k3, v3, in.slot_mapping, kv[l].k, kv[l].v, kv[l].k_scales, kv[l].v_scales});
    ops::AttentionParams ap;
    ap.q = q3;
    ap.k_cache = kv[l].k;
    ap.v_cache = kv[l].v;
    ap.k_scales = kv[l].k_scales;  // quantized KV (int8 / fp8): one scale per token and KV head
    ap.v_scales = kv[l].v_scales;
    ap.out = attn.reshaped({t, nq, hd});
    ap.query_start_loc = in.query_start_loc;
    ap.seq_lens = in.seq_lens;
    ap.block_tables = in.block_tables;
    ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ap.sliding_window = static_cast<int>(c.sliding_window);
    ap.max_query_len = in.max_query_len;
    ap.max_seq_len = in.max_seq_len;
    ap.tree_parents = in.tree_parents;
    ap.block_table_index = in.block_table_index;
    ap.key_tail_from = in.key_tail_from;
    ap.key_tail_offset = in.key_tail_offset;
    ap.key_tail = in.key_tail;
    backend_.attention(ap);
    if (fused) {
      backend_.matmuls_fused({&g.o, 1}, g.o_f);                 // residual += o_proj(attn)
      backend_.matmuls_fused(g.gate_up, g.gate_up_f);           // gate = silu(gate(n)) * up(n), n = norm(residual)
      backend_.matmuls_fused({&g.down, 1}, g.down_f);           // residual += down_proj(gate)
      continue;
    }
    // residual += proj(x): in the matmul's epilogue (pending is false: the norm before added hidden), or into hidden
    // for the next norm to add.
    auto add_projection = [&](const Linear& proj, const TensorView& x, bool fuse) {
      if (fuse) {
        ops::MatmulFusion add;
        add.residual = residual;
        const ops::MatmulParams p = proj(x, residual);
        backend_.matmuls_fused({&p, 1}, add);
      } else {
        backend_.matmul(proj(x, hidden));
        pending = true;
      }
    };
    add_projection(w.o_proj, attn, (epi & kEpilogueO) != 0);
    const std::array gate_up{w.gate_proj(normed, gate), w.up_proj(normed, up)};
    const bool fuse_down = (epi & kEpilogueDown) != 0;
    if (epi & kEpilogueGateUp) {
      norm(w.post_norm);
      ops::MatmulFusion silu;
      silu.silu_mul = true;
      backend_.matmuls_fused(gate_up, silu);
    } else {
      norm(w.post_norm, gate_up);
      backend_.matmuls(gate_up);
      const ops::MatmulParams down = w.down_proj(gate, hidden);  // add_projection's unfused matmul
      backend_.silu_mul({gate, up, gate, fuse_down ? std::span<const ops::MatmulParams>{} : std::span(&down, 1)});
    }
    add_projection(w.down_proj, gate, fuse_down);
  }
  norm(weights_.final_norm);
}

void LlamaModel::compute_logits(const TensorView& rows, const TensorView& out) {
  const int64_t n = rows.dim(0);
  if (n == 0) return;
  PEREGRINE_CHECK(n <= max_logit_rows_, "more logits rows than the model's workspace holds");
  const int64_t h = config_.hidden_size;
  const TensorView normed = act(normed_, last_tokens_, h);
  const TensorView sel = act(selected_, n, h);
  backend_.gather_rows({normed, rows, sel});
  if (subset_rows_ > 0) {
    backend_.matmul(subset_head()(sel, out));
    return;
  }
  backend_.matmul(weights_.lm_head(sel, out));
}

Linear LlamaModel::subset_head() const {
  const TensorView& w = weights_.lm_head.weight;
  return Linear{TensorView(subset_head_.data(), w.dtype, {subset_rows_, w.dim(1)}), {}, subset_quant_};
}

void LlamaModel::use_logits_subset(int64_t rows) {
  const Linear& lm = weights_.lm_head;
  const ops::WeightQuant& q = lm.quant;
  // A head's rows are independent rows of bytes when dense, as GGUF blocks, or as codes with their own rows of
  // scales and zeros, as long as the backend still reads them as stored: not where its packed copy replaced them
  // (CUDA's GGUF layout) or where codes were packed into another format (the CPU's int8-activation blocks). Scales
  // shared by several rows (block-wise FP8) cannot be cut by rows either.
  const bool ggml = q.ggml_blocks(), codes = q.quantized();
  const char* why = nullptr;
  if (!lm.bias.empty())
    why = "has a bias";
  else if (q.packed && !(ggml && !backend_.packed_replaces_weight()))
    why = "is kept only in the backend's packed layout";
  else if (codes && (q.block_rows != 1 || q.scales.dim(0) != lm.weight.dim(0)))
    why = "shares scales across rows";
  if (why)
    throw Error(ErrorCode::kUnsupported,
                std::string("a vocabulary subset needs an LM head cut by rows; this model's ") + why);
  if (rows < 1 || rows > config_.vocab_size)
    throw Error(ErrorCode::kInvalidArgument, "a vocabulary subset of " + std::to_string(rows) + " rows: must be in [1, " +
                                                 std::to_string(config_.vocab_size) + "]");
  const TensorView& w = lm.weight;
  subset_head_ = ops::DeviceBuffer(backend_, dtype_bytes(w.dtype, static_cast<size_t>(rows * w.dim(1))));
  subset_ids_ = ops::DeviceBuffer(backend_, sizeof(int32_t) * static_cast<size_t>(rows));
  subset_rows_ = rows;
  subset_quant_ = ops::WeightQuant{};
  if (ggml) {
    subset_quant_.ggml = q.ggml;
  } else if (codes) {
    subset_quant_ = q;  // groups, g_idx and perm (per input column) stay the head's
    auto rows_like = [&](const TensorView& t, ops::DeviceBuffer& buf) {
      buf = ops::DeviceBuffer(backend_, dtype_bytes(t.dtype, static_cast<size_t>(rows * t.dim(1))));
      return TensorView(buf.data(), t.dtype, {rows, t.dim(1)});
    };
    subset_quant_.scales = rows_like(q.scales, subset_scales_);
    if (!q.zeros.empty()) subset_quant_.zeros = rows_like(q.zeros, subset_zeros_);
  }
  subset_packed_ = ops::DeviceBuffer();
  if (q.packed) {  // the backend's packed copy of the compact rows, made group by group by set_logits_tokens
    const ops::Backend::PackedRowGroup pg = backend_.packed_row_group(subset_head().weight, subset_quant_);
    if (pg.rows <= 0)
      throw Error(ErrorCode::kUnsupported, "a vocabulary subset: the backend cannot re-pack its LM head's rows");
    subset_packed_ = ops::DeviceBuffer(backend_, static_cast<size_t>((rows + pg.rows - 1) / pg.rows) * pg.bytes);
    subset_quant_.packed = subset_packed_.data();
  }
  set_logits_tokens(std::vector<int32_t>(static_cast<size_t>(rows), 0), 0);
}

void LlamaModel::set_logits_tokens(std::span<const int32_t> ids, int64_t first) {
  PEREGRINE_CHECK(subset_rows_ > 0, "set_logits_tokens without use_logits_subset");
  const int64_t n = static_cast<int64_t>(ids.size());
  if (first < 0 || first + n > subset_rows_)
    throw Error(ErrorCode::kInvalidArgument, "compact LM head rows [" + std::to_string(first) + ", " +
                                                 std::to_string(first + n) + ") past its " + std::to_string(subset_rows_));
  for (int32_t id : ids) {
    if (id < 0 || id >= config_.vocab_size)
      throw Error(ErrorCode::kInvalidArgument, "compact LM head: token id " + std::to_string(id) + " outside the vocabulary");
  }
  if (n == 0) return;
  const Linear& lm = weights_.lm_head;
  int32_t* idx = static_cast<int32_t*>(subset_ids_.data()) + first;
  backend_.copy_from_host(idx, ids.data(), sizeof(int32_t) * ids.size());
  const TensorView index(idx, DType::kI32, {n});
  // Rows [first, first + n) of a [rows, cols] tensor in the compact buffer `base`, gathered from `src`'s rows.
  auto gather = [&](const TensorView& src, void* base) {
    char* dst = static_cast<char*>(base) + dtype_bytes(src.dtype, static_cast<size_t>(first * src.dim(1)));
    backend_.gather_rows({src, index, TensorView(dst, src.dtype, {n, src.dim(1)})});
  };
  gather(lm.weight, subset_head_.data());
  if (subset_scales_.data()) gather(lm.quant.scales, subset_scales_.data());
  if (subset_zeros_.data()) gather(lm.quant.zeros, subset_zeros_.data());
  if (subset_packed_.data()) {
    // The backend packs rows in groups: re-pack the groups these rows touch (the packed bytes of a group depend on
    // its rows alone, so a slice that starts at a group packs to the same bytes as inside the whole).
    const TensorView cw = subset_head().weight;
    const ops::Backend::PackedRowGroup pg = backend_.packed_row_group(cw, subset_quant_);
    PEREGRINE_CHECK(pg.rows > 0, "the backend packed the compact LM head but names no row group");
    const int64_t r0 = first / pg.rows * pg.rows,
                  r1 = std::min(subset_rows_, (first + n + pg.rows - 1) / pg.rows * pg.rows);
    const size_t row_bytes = dtype_bytes(cw.dtype, static_cast<size_t>(cw.dim(1)));
    const TensorView slice(static_cast<char*>(cw.data) + static_cast<size_t>(r0) * row_bytes, cw.dtype,
                           {r1 - r0, cw.dim(1)});
    const ops::DeviceBuffer part = backend_.pack_weight(slice, subset_quant_);
    const size_t at = static_cast<size_t>(r0 / pg.rows) * pg.bytes;
    PEREGRINE_CHECK(part.data() != nullptr && at + part.bytes() <= subset_packed_.bytes(),
                    "compact LM head: the backend's packed rows do not fit its packed copy");
    backend_.copy_on_device(static_cast<char*>(subset_packed_.data()) + at, part.data(), part.bytes());
  }
}

std::unique_ptr<Model> LlamaModel::layer_subset(std::span<const int> layers, const ModelOptions& options) const {
  if (layers.empty()) throw Error(ErrorCode::kInvalidArgument, "a layer subset needs at least one layer");
  LlamaWeights view;  // views into this model's weights; owns nothing
  view.embed_tokens = weights_.embed_tokens;
  view.embed_ggml = weights_.embed_ggml;
  view.final_norm = weights_.final_norm;
  view.lm_head = weights_.lm_head;
  int prev = -1;
  for (int l : layers) {
    if (l <= prev || l >= static_cast<int>(weights_.layers.size()))
      throw Error(ErrorCode::kInvalidArgument, "layer subset: layer " + std::to_string(l) + " is out of order or not in [0, " +
                                                   std::to_string(weights_.layers.size()) + ")");
    view.layers.push_back(weights_.layers[static_cast<size_t>(l)]);
    prev = l;
  }
  view.total_bytes = 0;
  io::ModelConfig c = config_;
  c.num_hidden_layers = static_cast<int64_t>(layers.size());
  return std::make_unique<LlamaModel>(std::move(c), std::move(view), backend_, options);
}

}  // namespace

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, ops::Backend& backend, const ModelOptions& options) {
  if (io::is_gguf_path(dir)) {
    auto file = std::make_shared<const io::GgufFile>(dir);
    io::ModelConfig config = io::gguf_model_config(*file);
    if (options.random_weights) return make_random_model(config, backend, options);
    if (!options.quantization.empty())
      throw Error(ErrorCode::kInvalidArgument, "--quantization " + options.quantization + ": " + dir.string() +
                                                   " is a GGUF file; its tensors carry their own types");
    LlamaWeights weights = load_llama_weights(config, std::make_unique<GgufLlamaSource>(file, config), dir, backend, options);
    return std::make_unique<LlamaModel>(std::move(config), std::move(weights), backend, options);
  }
  io::ModelConfig config = io::load_model_config(dir);
  if (options.random_weights) return make_random_model(config, backend, options);
  LlamaWeights weights = load_llama_weights(config, std::make_unique<io::WeightStore>(io::WeightStore::open(dir)), dir,
                                            backend, options);
  return std::make_unique<LlamaModel>(std::move(config), std::move(weights), backend, options);
}

std::unique_ptr<Model> make_random_model(const io::ModelConfig& config, ops::Backend& backend,
                                         const ModelOptions& options) {
  LlamaWeights weights = make_random_llama_weights(config, backend, options);
  return std::make_unique<LlamaModel>(config, std::move(weights), backend, options);
}

}  // namespace peregrine::model
