// Post-processors of tokenizer.json: TemplateProcessing, ByteLevel (ids unchanged), BertProcessing,
// RobertaProcessing and Sequence. Only single sequences are encoded, so pair templates are read but unused.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

namespace peregrine::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds special tokens around `ids` when add_special_tokens.
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

// A template: prefix ids, the sequence, suffix ids.
class TemplatePostProcessor final : public PostProcessor {
 public:
  TemplatePostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override;

 private:
  std::vector<int32_t> prefix_, suffix_;
};

// nullptr for JSON null. Throws Error(kUnsupported) for an unknown type.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config);

}  // namespace peregrine::tokenizer
