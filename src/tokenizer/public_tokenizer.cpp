// The public tokenizer API (include/peregrine/tokenizer.h) over the tokenizer room.
#include "peregrine/tokenizer.h"

#include "tokenizer/tokenizer.h"

namespace peregrine {
namespace {

class StreamImpl final : public Tokenizer::Stream {
 public:
  StreamImpl(const tokenizer::Tokenizer& tok, bool skip_special) : stream_(tok, skip_special) {}
  std::string push(int32_t id) override { return stream_.push(id); }
  std::string flush() override { return stream_.flush(); }

 private:
  tokenizer::StreamingDetokenizer stream_;
};

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<tokenizer::Tokenizer> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(tokenizer::Tokenizer::load(model_dir)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  impl_->encode_into(text, add_special_tokens, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

std::unique_ptr<Tokenizer::Stream> Tokenizer::stream(bool skip_special_tokens) const {
  return std::make_unique<StreamImpl>(*impl_, skip_special_tokens);
}

}  // namespace peregrine
