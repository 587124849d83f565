// A GGUF file's Llama-family tensors under the Hugging Face names load_llama_weights reads (token_embd ->
// model.embed_tokens, blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...), with the q/k row permutation
// llama.cpp's converter applies for its interleaved RoPE undone (whole rows are moved, so block-quantized rows
// are copied as they are). Everything else is a view into the file's map.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/weight_source.h"

namespace peregrine::model {

class GgufLlamaSource final : public io::WeightSource {
 public:
  GgufLlamaSource(std::shared_ptr<const io::GgufFile> file, const io::ModelConfig& config);
  bool contains(const std::string& name) const override;
  const io::TensorInfo& get(const std::string& name) const override;
  // Shape errors name the GGUF tensor and the metadata keys the expected shape comes from.
  TensorView view(const std::string& name, std::initializer_list<int64_t> expected_shape) const override;
  size_t total_bytes() const override { return file_->total_bytes(); }
  std::vector<std::string> names() const override;
  // The file's pages only (the unpermuted q/k copies are this source's own buffers).
  void release_pages(const void* data, size_t bytes) const override { gguf_->release_pages(data, bytes); }
  // The GGUF name of an HF name ("" when it has none).
  static std::string gguf_name(const std::string& hf_name);

 private:
  std::shared_ptr<const io::GgufFile> gguf_;
  std::unique_ptr<io::GgufWeightSource> file_;
  std::map<std::string, io::TensorInfo> permuted_;  // q/k tensors with rows restored (data in buffers_)
  std::vector<std::vector<std::byte>> buffers_;
};

// Moves the rows of a q or k projection (or its bias) from llama.cpp's interleaved-RoPE order back to the HF
// order: within each head of head_dim rows, GGUF row 2j + h holds HF row h * head_dim / 2 + j.
void unpermute_qk_rows(const std::byte* src, std::byte* dst, int64_t rows, size_t row_bytes, int64_t num_heads);

}  // namespace peregrine::model
