// GGUF -> Hugging Face tensor names for the Llama family (see gguf_weights.h).
#include "model/gguf_weights.h"

#include <cstring>

#include "core/status.h"
#include "io/gguf_config.h"

namespace peregrine::model {

void unpermute_qk_rows(const std::byte* src, std::byte* dst, int64_t rows, size_t row_bytes, int64_t num_heads) {
  const int64_t hd = rows / num_heads, half = hd / 2;
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t j = 0; j < half; ++j)
      for (int64_t s = 0; s < 2; ++s) {
        const int64_t from = h * hd + 2 * j + s, to = h * hd + s * half + j;
        std::memcpy(dst + static_cast<size_t>(to) * row_bytes, src + static_cast<size_t>(from) * row_bytes, row_bytes);
      }
}

std::string GgufLlamaSource::gguf_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::string kLayers = "model.layers.";
  if (hf.rfind(kLayers, 0) != 0) return "";
  const size_t dot = hf.find('.', kLayers.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf.substr(kLayers.size(), dot - kLayers.size());
  const std::string rest = hf.substr(dot + 1);
  static const std::pair<const char*, const char*> kMap[] = {
      {"input_layernorm", "attn_norm"},      {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},        {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},        {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},   {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},         {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
  };
  for (const auto& [from, to] : kMap) {
    const std::string f = from;
    if (rest.rfind(f + ".", 0) == 0) return "blk." + layer + "." + to + rest.substr(f.size());
  }
  return "";
}

GgufLlamaSource::GgufLlamaSource(std::shared_ptr<const io::GgufFile> file, const io::ModelConfig& c)
    : gguf_(file), file_(std::make_unique<io::GgufWeightSource>(file)) {
  if (!io::gguf_qk_permuted(c)) return;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    for (const char* which : {"attn_q", "attn_k"}) {
      const int64_t heads = std::string(which) == "attn_q" ? c.num_attention_heads : c.num_key_value_heads;
      for (const char* suffix : {".weight", ".bias"}) {
        const std::string name = "blk." + std::to_string(i) + "." + which + suffix;
        if (!file_->contains(name)) continue;
        io::TensorInfo info = file_->get(name);
        const int64_t rows = info.shape[0];
        if (info.shape.size() > 2 || rows != heads * c.head_dim) continue;  // the shape check reports it
        const size_t row_bytes = info.bytes / static_cast<size_t>(rows);
        std::vector<std::byte> buf(info.bytes);
        unpermute_qk_rows(info.data, buf.data(), rows, row_bytes, heads);
        gguf_->release_pages(info.data, info.bytes);  // only the copy is read from here on
        info.data = buf.data();
        buffers_.push_back(std::move(buf));
        permuted_.emplace(name, std::move(info));
      }
    }
  }
}

bool GgufLlamaSource::contains(const std::string& name) const {
  const std::string g = gguf_name(name);
  return !g.empty() && file_->contains(g);
}

const io::TensorInfo& GgufLlamaSource::get(const std::string& name) const {
  const std::string g = gguf_name(name);
  if (g.empty()) gguf_->fail(ErrorCode::kNotFound, "no GGUF tensor corresponds to '" + name + "'");
  if (auto it = permuted_.find(g); it != permuted_.end()) return it->second;
  return file_->get(g);
}

TensorView GgufLlamaSource::view(const std::string& name, std::initializer_list<int64_t> expected) const {
  const io::TensorInfo& info = get(name);
  std::vector<int64_t> want(expected);
  std::vector<int64_t> have = info.shape;
  if (info.ggml != GgmlType::kNone && !want.empty()) {
    // Compare in values, not bytes.
    const GgmlBlockInfo b = *ggml_block_info(info.ggml);
    have.back() = have.back() / b.type_size * b.block_size;
  }
  if (have != want) {
    auto ne = [](std::vector<int64_t> s) {  // GGUF order: innermost first
      std::string r = "[";
      for (size_t i = s.size(); i-- > 0;) r += std::to_string(s[i]) + (i ? ", " : "");
      return r + "]";
    };
    gguf_->fail(ErrorCode::kFormatError, "tensor '" + info.name + "' has ne " + ne(have) + ", expected " + ne(want) +
                                             " from the metadata (" + gguf_->string("general.architecture") + ".*)");
  }
  TensorView v;
  v.data = const_cast<std::byte*>(info.data);
  v.dtype = info.dtype;
  for (int64_t d : info.shape) v.shape[static_cast<size_t>(v.ndim++)] = d;
  return v;
}

std::vector<std::string> GgufLlamaSource::names() const { return file_->names(); }

}  // namespace peregrine::model
