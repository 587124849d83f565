// Post-processor implementations.
#include "tokenizer/post_processors.h"

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace peregrine::tokenizer {

void TemplatePostProcessor::process(std::vector<int32_t>& ids, bool add_special_tokens) const {
  if (!add_special_tokens) return;
  if (!prefix_.empty()) ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

namespace {

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& s : steps_)
      if (s) s->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

class IdentityPostProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
};

std::unique_ptr<PostProcessor> make_template(const nlohmann::json& config) {
  const auto& single = json_array(config, "single", "TemplateProcessing");
  const nlohmann::json specials = config.value("special_tokens", nlohmann::json::object());
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const auto& item : single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken"))
      throw Error(ErrorCode::kFormatError, "tokenizer.json: TemplateProcessing item is neither Sequence nor SpecialToken");
    std::string name = json_string(item["SpecialToken"], "id", "TemplateProcessing SpecialToken");
    auto it = specials.find(name);
    if (it == specials.end())
      throw Error(ErrorCode::kFormatError, "tokenizer.json: TemplateProcessing uses unknown special token '" + name + "'");
    for (const auto& id : json_array(*it, "ids", "TemplateProcessing special token"))
      (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
  }
  return std::make_unique<TemplatePostProcessor>(std::move(prefix), std::move(suffix));
}

int32_t special_pair_id(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer())
    throw Error(ErrorCode::kFormatError, std::string("tokenizer.json: post_processor needs '") + key + "' = [token, id]");
  return (*it)[1].get<int32_t>();
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config) {
  if (config.is_null()) return nullptr;
  std::string type = json_string(config, "type", "post_processor");
  if (type == "TemplateProcessing") return make_template(config);
  if (type == "ByteLevel") return std::make_unique<IdentityPostProcessor>();
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return std::make_unique<TemplatePostProcessor>(std::vector<int32_t>{special_pair_id(config, "cls")},
                                                   std::vector<int32_t>{special_pair_id(config, "sep")});
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& c : json_array(config, "processors", "post_processor Sequence")) steps.push_back(make_post_processor(c));
    return std::make_unique<SequencePostProcessor>(std::move(steps));
  }
  throw Error(ErrorCode::kUnsupported, "tokenizer.json: unsupported post_processor type '" + type + "'");
}

}  // namespace peregrine::tokenizer
