// The public chat-template API (include/peregrine/tokenizer.h) over chat_template.h.
#include <filesystem>

#include "peregrine/tokenizer.h"
#include "tokenizer/chat_template.h"

namespace peregrine {

std::string render_chat_template(const std::string& model_dir, const std::string& chat_template,
                                 const nlohmann::ordered_json& messages, const ChatRenderParams& params) {
  ChatRenderOptions options;
  options.tools = params.tools;
  options.add_generation_prompt = params.add_generation_prompt;
  options.extra_kwargs = params.kwargs;
  options.template_name = params.template_name;
  const ChatTemplate loaded = load_chat_template(std::filesystem::path(model_dir), chat_template);
  return render_chat(loaded, messages, options);
}

}  // namespace peregrine
