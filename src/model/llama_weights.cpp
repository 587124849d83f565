// Weight loading for the Llama family: name mapping, shape checks, placement on the backend.
#include "model/llama_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "core/status.h"
#include "io/safetensors.h"
#include "model/quant_weights.h"

namespace peregrine::model {
namespace {

// The dtype a weight takes on this backend: host backends compute with f32/bf16/f16 weights in place;
// device backends get the activation dtype (converted once at load).
DType placed_dtype(const ops::Backend& backend, DType stored, DType activation) {
  if (backend.is_host()) return stored;
  return activation;
}

class Placer {
 public:
  Placer(ops::Backend& backend, LlamaWeights& weights, const ModelOptions& options, size_t total)
      : backend_(backend), weights_(weights), options_(options), total_(total) {}

  TensorView place(const TensorView& host) {
    DType target = placed_dtype(backend_, host.dtype, options_.activation_dtype);
    TensorView out;
    if (backend_.is_host() && target == host.dtype) {
      out = host;
    } else {
      out = host;
      out.dtype = target;
      ops::DeviceBuffer buf(backend_, out.bytes());
      out.data = buf.data();
      if (target == host.dtype) {
        backend_.copy_from_host(out.data, host.data, host.bytes());
      } else {
        // Convert in slices to bound the host memory used.
        const size_t count = static_cast<size_t>(host.numel());
        const size_t chunk = size_t{1} << 22;
        std::vector<float> f32(std::min(count, chunk));
        std::vector<std::byte> conv(dtype_bytes(target, f32.size()));
        for (size_t i = 0; i < count; i += chunk) {
          size_t n = std::min(chunk, count - i);
          convert_to_f32(host.dtype, static_cast<const std::byte*>(host.data) + dtype_bytes(host.dtype, i), f32.data(), n);
          convert_from_f32(target, f32.data(), conv.data(), n);
          backend_.copy_from_host(static_cast<std::byte*>(out.data) + dtype_bytes(target, i), conv.data(),
                                  dtype_bytes(target, n));
        }
      }
      weights_.buffers.push_back(std::move(buf));
    }
    weights_.total_bytes += out.bytes();
    done_ += host.bytes();
    if (options_.on_load_progress) options_.on_load_progress(done_, total_);
    return out;
  }

  // Bytes as they are (ggml blocks): in place on host backends, one copy on devices.
  TensorView place_raw(const TensorView& host) {
    TensorView out = host;
    if (!backend_.is_host()) {
      ops::DeviceBuffer buf(backend_, std::max<size_t>(1, out.bytes()));
      out.data = buf.data();
      backend_.copy_from_host(out.data, host.data, host.bytes());
      weights_.buffers.push_back(std::move(buf));
    }
    weights_.total_bytes += out.bytes();
    done_ += host.bytes();
    if (options_.on_load_progress) options_.on_load_progress(done_, total_);
    return out;
  }

  // A copy owned by the weights (host data that does not outlive loading: repacked quantized tensors).
  TensorView place_owned(const TensorView& host) {
    TensorView out = host;
    ops::DeviceBuffer buf(backend_, std::max<size_t>(1, out.bytes()));
    out.data = buf.data();
    backend_.copy_from_host(out.data, host.data, host.bytes());
    weights_.buffers.push_back(std::move(buf));
    weights_.total_bytes += out.bytes();
    return out;
  }

  // A quantized projection in ops::WeightQuant's layout.
  void place_quantized(const HostQuantLinear& q, Linear& l) {
    l.weight = place_owned(TensorView(q.codes.data(), q.codes_dtype, {q.n, q.k}));
    const int64_t scale_rows = (q.n + q.block_rows - 1) / q.block_rows;
    l.quant.scales = place_owned(TensorView(q.scales.data(), DType::kF32, {scale_rows, q.groups}));
    if (!q.zeros.empty()) l.quant.zeros = place_owned(TensorView(q.zeros.data(), DType::kF32, {q.n, q.groups}));
    if (!q.perm.empty()) l.quant.perm = place_owned(TensorView(q.perm.data(), DType::kI32, {q.k}));
    if (!q.g_idx.empty()) l.quant.g_idx = place_owned(TensorView(q.g_idx.data(), DType::kI32, {q.k}));
    l.quant.group_size = q.group_size;
    l.quant.block_rows = q.block_rows;
    l.quant.act = q.act == HostActQuant::kInt8  ? ops::ActQuant::kInt8
                  : q.act == HostActQuant::kFp8 ? ops::ActQuant::kFp8
                                                : ops::ActQuant::kNone;
    l.quant.act_group = q.act_group;
  }

 private:
  ops::Backend& backend_;
  LlamaWeights& weights_;
  const ModelOptions& options_;
  size_t total_;
  size_t done_ = 0;
};

// Fills every tensor of the architecture through get(name, shape) (a float tensor placed on the backend).
// Projections go through linear(prefix, N, K, has_bias): quantized(prefix, N, K, linear) fills a quantized
// projection's weight and returns true, or returns false for a dense one. embedding(name, vocab, hidden, &ggml)
// gives the embedding table (and its ggml block type, or kNone).
template <typename GetFn, typename QuantFn, typename EmbedFn>
void fill_layers(const io::ModelConfig& c, LlamaWeights& w, GetFn&& get, QuantFn&& quantized, EmbedFn&& embedding) {
  const int64_t h = c.hidden_size, hd = c.head_dim, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t f = c.intermediate_size;
  auto linear = [&](const std::string& prefix, int64_t n, int64_t k, bool bias) {
    Linear l;
    if (!quantized(prefix, n, k, l)) l.weight = get(prefix + ".weight", {n, k});
    if (bias) l.bias = get(prefix + ".bias", {n});
    return l;
  };
  w.embed_tokens = embedding("model.embed_tokens.weight", c.vocab_size, h, &w.embed_ggml);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.input_norm = get(p + "input_layernorm.weight", {h});
    l.q_proj = linear(p + "self_attn.q_proj", nq * hd, h, c.attention_bias);
    l.k_proj = linear(p + "self_attn.k_proj", nkv * hd, h, c.attention_bias);
    l.v_proj = linear(p + "self_attn.v_proj", nkv * hd, h, c.attention_bias);
    l.o_proj = linear(p + "self_attn.o_proj", h, nq * hd, c.o_proj_bias);
    if (c.qk_norm) {
      l.q_norm = get(p + "self_attn.q_norm.weight", {hd});
      l.k_norm = get(p + "self_attn.k_norm.weight", {hd});
    }
    l.post_norm = get(p + "post_attention_layernorm.weight", {h});
    l.gate_proj = linear(p + "mlp.gate_proj", f, h, c.mlp_bias);
    l.up_proj = linear(p + "mlp.up_proj", f, h, c.mlp_bias);
    l.down_proj = linear(p + "mlp.down_proj", h, f, c.mlp_bias);
    w.layers.push_back(l);
  }
  w.final_norm = get("model.norm.weight", {h});
  if (c.tie_word_embeddings) {
    w.lm_head.weight = w.embed_tokens;
    w.lm_head.quant.ggml = w.embed_ggml;  // a matmul over the embedding's blocks
  } else {
    w.lm_head = linear("lm_head", c.vocab_size, h, false);
  }
}

}  // namespace

std::string normalize_quantization(const std::string& name) {
  if (name == "gptq_marlin" || name == "gptq_marlin_24") return "gptq";
  if (name == "awq_marlin") return "awq";
  if (name == "compressed_tensors") return "compressed-tensors";
  return name;
}

void check_quantization_option(const io::ModelConfig& c, const std::filesystem::path& where, const std::string& option) {
  if (option.empty()) return;
  const std::string want = normalize_quantization(option);
  const std::string file = c.quant.file.empty() ? (where / "config.json").string() : c.quant.file;
  // fp8 / w8a8-int8 on a dense checkpoint: quantized at load (per channel, as vLLM's --quantization fp8).
  if (c.quant_method.empty() && load_time_scheme(want) != HostActQuant::kNone) return;
  if (c.quant_method.empty())
    throw Error(ErrorCode::kInvalidArgument, "--quantization " + option + ": " + (where / "config.json").string() +
                                                 " has no quantization_config (a dense checkpoint)");
  if (want != c.quant_method)
    throw Error(ErrorCode::kInvalidArgument, "--quantization " + option + " does not match " + file +
                                                 ": field 'quantization_config.quant_method' is '" + c.quant_method + "'");
}

// GGUF blocks in the backend's own layout where it has one (the CPU's 16-row interleave): the projections and
// the LM head (a tied head packs the embedding's blocks; the gather keeps reading the file's). `release` drops a
// packed tensor's file pages.
// W4A16 / W8A16 codes too, where the backend computes them in another layout (the CPU's GGUF blocks with int8
// activations, backend/cpu/quant_lowp.h): the backend then reads only its copy, so the codes' own buffer is freed
// (the view keeps its shape; its data points at the packed copy, which nothing reads as codes).
// The buffer of w's that a view's data starts (w.buffers.end() when none).
static std::vector<ops::DeviceBuffer>::iterator owner_of(LlamaWeights& w, const TensorView& t) {
  return std::find_if(w.buffers.begin(), w.buffers.end(), [&](const ops::DeviceBuffer& b) { return b.data() == t.data; });
}

template <typename ReleaseFn>
void pack_linears(LlamaWeights& w, ops::Backend& backend, ReleaseFn&& release) {
  // Puts buf in the place of l's own weight buffer (when the weights own one; with same_size, only of the same size).
  auto replace_own = [&](Linear& l, ops::DeviceBuffer& buf, bool same_size) {
    auto own = owner_of(w, l.weight);
    if (own == w.buffers.end() || (same_size && own->bytes() != buf.bytes())) return false;
    w.total_bytes = w.total_bytes - std::min(own->bytes(), w.total_bytes) + buf.bytes();
    l.weight.data = buf.data();
    *own = std::move(buf);
    return true;
  };
  auto pack = [&](Linear& l) {
    const bool ggml = l.quant.ggml_blocks();
    if (!ggml && !l.quant.quantized()) return;
    ops::DeviceBuffer buf = backend.pack_weight(l.weight, l.quant);
    if (!buf.data()) return;
    l.quant.packed = buf.data();
    if (ggml) release(l.weight.data, l.weight.bytes());
    // Quantized codes are never read again once packed. GGUF blocks are freed where the backend reads only the
    // packed copy (CUDA), so memory stays the file's size; a tied head keeps them for the embedding gather.
    const bool replaces = !ggml || (backend.packed_replaces_weight() && l.weight.data != w.embed_tokens.data);
    if (replaces && replace_own(l, buf, ggml)) return;
    if (!ggml) w.total_bytes += buf.bytes();
    w.buffers.push_back(std::move(buf));
  };
  // The LM head (the largest tensor) first: the file's pages come in as a tensor is packed and go once it is, so
  // the peak is the packed copies so far plus one tensor's pages; packed last, the head's pages (the embedding's,
  // when tied) came on top of every other packed copy.
  pack(w.lm_head);
  for (LayerWeights& l : w.layers)
    for (Linear* p : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) pack(*p);
}

// A layer's dense q/k/v weights one after another in one buffer where the backend wants them so
// (Backend::adjacent_weights_wanted: it runs matmuls over adjacent weights as one GEMM at large M): each layer's
// three uploaded copies are moved into one buffer and freed, the views pointing into it; layers whose q/k/v are
// quantized, biased or not each in a buffer of their own are left as they are.
static void stack_qkv(LlamaWeights& w, ops::Backend& backend) {
  if (backend.is_host() || !backend.adjacent_weights_wanted()) return;
  for (LayerWeights& l : w.layers) {
    Linear* ps[] = {&l.q_proj, &l.k_proj, &l.v_proj};
    std::vector<ops::DeviceBuffer>::iterator owners[3];
    size_t total = 0;
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
      const Linear& p = *ps[i];
      ok = !p.quant.quantized() && !p.quant.ggml_blocks() && p.quant.act == ops::ActQuant::kNone &&
           p.quant.packed == nullptr && p.bias.empty() && p.weight.ndim == 2 &&
           p.weight.dtype == l.q_proj.weight.dtype && p.weight.dim(1) == l.q_proj.weight.dim(1);
      owners[i] = owner_of(w, p.weight);
      ok = ok && owners[i] != w.buffers.end() && owners[i]->bytes() == p.weight.bytes();
      total += p.weight.bytes();
    }
    if (!ok) continue;
    ops::DeviceBuffer stacked(backend, total);
    size_t offset = 0;
    for (Linear* p : ps) {
      backend.copy_on_device(static_cast<std::byte*>(stacked.data()) + offset, p->weight.data, p->weight.bytes());
      offset += p->weight.bytes();
    }
    backend.synchronize();  // the copies are done before their sources go
    offset = 0;
    for (int i = 0; i < 3; ++i) {
      *owners[i] = ops::DeviceBuffer{};  // freed; the empty owner stays in the list
      ps[i]->weight.data = static_cast<std::byte*>(stacked.data()) + offset;
      offset += ps[i]->weight.bytes();
    }
    w.buffers.push_back(std::move(stacked));
  }
}

LlamaWeights load_llama_weights(const io::ModelConfig& c, std::unique_ptr<io::WeightSource> source,
                                const std::filesystem::path& where, ops::Backend& backend, const ModelOptions& options) {
  check_quantization_option(c, where, options.quantization);
  if (!c.quant.unsupported.empty()) throw Error(ErrorCode::kUnsupported, c.quant.unsupported);
  const HostActQuant load_scheme =
      c.quant_method.empty() ? load_time_scheme(normalize_quantization(options.quantization)) : HostActQuant::kNone;
  LlamaWeights w;
  w.source = std::move(source);
  Placer placer(backend, w, options, w.source->total_bytes());
  const io::WeightSource& src = *w.source;
  // A tensor of ggml blocks (GGUF), checked against the shape [n, k] in values: its u8 [n, row bytes] view.
  auto ggml_blocks = [&](const std::string& name, int64_t n, int64_t k) -> std::optional<TensorView> {
    if (!src.contains(name)) return std::nullopt;
    const io::TensorInfo& t = src.get(name);
    if (t.ggml == GgmlType::kNone) return std::nullopt;
    TensorView v = src.view(name, {n, k});  // compares values, names the tensor
    if (!ggml_is_supported_block_type(t.ggml))
      throw Error(ErrorCode::kUnsupported, t.file->string() + ": tensor '" + t.name + "' has type " +
                                               ggml_type_name(t.ggml) +
                                               "; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K");
    return placer.place_raw(v);
  };
  auto get_float = [&](const std::string& name, std::initializer_list<int64_t> shape) {
    TensorView v = src.view(name, shape);
    if (!(v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16)) {
      const io::TensorInfo& t = src.get(name);
      throw Error(ErrorCode::kUnsupported, t.file->string() + ": tensor '" + t.name + "' has " +
                                               (t.ggml != GgmlType::kNone ? "type " + ggml_type_name(t.ggml)
                                                                          : "dtype " + std::string(dtype_name(v.dtype))) +
                                               "; supported here: F32, BF16, F16");
    }
    return placer.place(v);
  };
  fill_layers(c, w, get_float, [&](const std::string& prefix, int64_t n, int64_t k, Linear& l) {
    if (auto blocks = ggml_blocks(prefix + ".weight", n, k)) {
      l.weight = *blocks;
      l.quant.ggml = src.get(prefix + ".weight").ggml;
      return true;
    }
    if (load_scheme != HostActQuant::kNone) {
      if (prefix == "lm_head") return false;  // vLLM leaves the LM head dense
      const std::string name = prefix + ".weight";
      TensorView v = src.view(name, {n, k});
      if (!(v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16))
        throw Error(ErrorCode::kUnsupported, src.get(name).file->string() + ": tensor '" + name + "' has dtype " +
                                                 std::string(dtype_name(v.dtype)) + "; --quantization " +
                                                 options.quantization + " quantizes F32, BF16 or F16 weights");
      placer.place_quantized(quantize_dense_8bit(v, load_scheme), l);
      return true;
    }
    if (!c.quant.applies_to(prefix)) return false;
    placer.place_quantized(read_quantized_linear(c.quant, src, prefix, n, k), l);
    return true;
  }, [&](const std::string& name, int64_t vocab, int64_t h, GgmlType* ggml) {
    if (auto blocks = ggml_blocks(name, vocab, h)) {
      *ggml = src.get(name).ggml;
      return *blocks;
    }
    return get_float(name, {vocab, h});
  });
  if (!c.tie_word_embeddings && !c.quant.applies_to("lm_head") && !src.contains("lm_head.weight"))
    throw Error(ErrorCode::kNotFound, (where / "config.json").string() +
                                          ": tie_word_embeddings is false but tensor 'lm_head.weight' is missing");
  pack_linears(w, backend, [&](const void* p, size_t n) { src.release_pages(p, n); });
  stack_qkv(w, backend);
  return w;
}

LlamaWeights make_random_llama_weights(const io::ModelConfig& c, ops::Backend& backend, const ModelOptions& options) {
  LlamaWeights w;
  const DType dtype = backend.is_host() ? c.torch_dtype : options.activation_dtype;
  // One pattern of uniform [-1, 1) values, scaled per tensor and tiled with a rotating offset: fast to build for
  // billions of weights, and still without structure a kernel could exploit.
  constexpr size_t kPattern = size_t{1} << 20;
  std::vector<float> unit(kPattern);
  uint64_t state = options.random_seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  for (float& u : unit) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    u = static_cast<float>(static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
  }
  std::vector<float> scaled(kPattern);
  std::vector<std::byte> pattern(dtype_bytes(dtype, kPattern) * 2);  // twice, so any offset has kPattern values after it
  size_t tensor_index = 0;
  int qbits = 0;
  int64_t qgroup = 0;
  const bool fp8_blocks = options.quantization == kRandomFp8Blocks;
  const HostActQuant scheme8 = fp8_blocks ? HostActQuant::kFp8 : load_time_scheme(options.quantization);
  const bool w4a8 = options.quantization == "w4a8";  // int4 g128 codes, activations int8 per token
  if (w4a8) {
    qbits = 4;
    qgroup = 128;
  } else if (!options.quantization.empty() && scheme8 == HostActQuant::kNone &&
             !random_scheme(options.quantization, &qbits, &qgroup)) {
    throw Error(ErrorCode::kInvalidArgument, "--quantization '" + options.quantization +
                                                 "' with random weights: expected w4a16, w8a16, w4a8, w8a8-int8, fp8, fp8-block128, gptq, awq or "
                                                 "compressed-tensors");
  }
  if (scheme8 != HostActQuant::kNone) qbits = 8;
  Placer placer(backend, w, options, 0);
  auto quantized = [&](const std::string&, int64_t n, int64_t k, Linear& l) {
    if (qbits == 0) return false;
    if (scheme8 != HostActQuant::kNone) {
      placer.place_quantized(random_quantized_8bit(n, k, scheme8, options.random_seed + tensor_index++,
                                                   fp8_blocks && k % 128 == 0),
                             l);
      return true;
    }
    HostQuantLinear q = random_quantized(n, k, qbits, qgroup, options.random_seed + tensor_index++);
    if (w4a8) q.act = HostActQuant::kInt8;
    placer.place_quantized(q, l);
    return true;
  };
  auto get = [&](const std::string& name, std::initializer_list<int64_t> shape) {
    TensorView v(static_cast<void*>(nullptr), dtype, shape);
    ops::DeviceBuffer buf(backend, v.bytes());
    v.data = buf.data();
    const bool is_norm = v.ndim == 1 && name.find("norm") != std::string::npos;
    const double scale = v.ndim == 2 ? 1.7320508 / std::sqrt(static_cast<double>(v.dim(1))) : 0.02;
    for (size_t j = 0; j < kPattern; ++j)
      scaled[j] = static_cast<float>(is_norm ? 1.0 + 0.1 * unit[j] : unit[j] * scale);
    convert_from_f32(dtype, scaled.data(), pattern.data(), kPattern);
    std::memcpy(pattern.data() + dtype_bytes(dtype, kPattern), pattern.data(), dtype_bytes(dtype, kPattern));
    const size_t count = static_cast<size_t>(v.numel());
    size_t offset = (tensor_index++ * 7919) % kPattern;
    for (size_t i = 0; i < count; i += kPattern) {
      const size_t n = std::min(kPattern, count - i);
      backend.copy_from_host(static_cast<std::byte*>(v.data) + dtype_bytes(dtype, i),
                             pattern.data() + dtype_bytes(dtype, offset), dtype_bytes(dtype, n));
      offset = (offset + 104729) % kPattern;
    }
    w.total_bytes += v.bytes();
    w.buffers.push_back(std::move(buf));
    return v;
  };
  fill_layers(c, w, get, quantized,
              [&](const std::string& name, int64_t vocab, int64_t h, GgmlType*) { return get(name, {vocab, h}); });
  // Every matrix in the named scheme, as the GGUF peers quantize theirs: a tied LM head gets its own codes.
  if (qbits != 0 && c.tie_word_embeddings) quantized("lm_head", c.vocab_size, c.hidden_size, w.lm_head);
  pack_linears(w, backend, [](const void*, size_t) {});
  stack_qkv(w, backend);
  return w;
}

}  // namespace peregrine::model
