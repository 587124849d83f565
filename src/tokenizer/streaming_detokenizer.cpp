// Streaming detokenizer: ids in one at a time, text deltas out; the deltas never split a UTF-8 sequence and
// concatenate to exactly Tokenizer::decode of the same ids (same skip/spaces/clean-up options).
//
// For the decoder chains real models use (see PiecewiseDecoder) every token maps to bytes on its own; the stream
// then runs the whole-string rules incrementally: lossy UTF-8, Strip's leading/trailing characters, and the
// clean-up of tokenization spaces, holding back only what a later token could still change. Other chains fall
// back to re-decoding a small window of recent ids (vLLM's prefix/read offsets).
#include <algorithm>

#include "tokenizer/decoders.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace peregrine::tokenizer {

struct StreamingDetokenizer::State {
  const Tokenizer* tok = nullptr;
  bool skip_special = true;
  bool spaces_between = false;
  bool cleanup = false;
  const PiecewiseDecoder* pd = nullptr;

  // Piecewise run state (a run = the text between special tokens when spaces_between, else everything).
  bool run_first_token = true;
  int lead_strip_left = 0;
  Utf8LossyDecoder utf8;
  std::string trail_hold;
  int trail_count = 0;
  bool run_has_output = false;
  bool any_sub_text = false;

  // Clean-up stage: text not yet emitted because a later token could still change it.
  std::string clean_buf;

  // Window fallback.
  std::vector<int32_t> ids;
  size_t prefix_offset = 0, read_offset = 0;

  std::string out;  // output of the current call

  void start_run() {
    run_first_token = true;
    lead_strip_left = pd ? pd->strip_start : 0;
    trail_hold.clear();
    trail_count = 0;
    run_has_output = false;
  }

  void stage(std::string_view text) {
    if (text.empty()) return;
    if (!cleanup) {
      out.append(text);
      return;
    }
    clean_buf.append(text);
    // Largest cut at a character boundary with no space among the 3 bytes before it: no clean-up rule can span it.
    size_t i = clean_buf.size();
    auto ok = [&](size_t cut) {
      if (cut < clean_buf.size() && (static_cast<unsigned char>(clean_buf[cut]) & 0xC0) == 0x80) return false;
      for (size_t k = cut >= 3 ? cut - 3 : 0; k < cut; ++k)
        if (clean_buf[k] == ' ') return false;
      return true;
    };
    while (i > 0 && !ok(i)) --i;
    if (i == 0) return;
    out.append(clean_up_tokenization(std::string_view(clean_buf).substr(0, i)));
    clean_buf.erase(0, i);
  }

  void emit_run_text(std::string_view text) {
    if (text.empty()) return;
    if (spaces_between && !run_has_output) {
      if (any_sub_text) stage(" ");
      any_sub_text = true;
    }
    run_has_output = true;
    stage(text);
  }

  // Characters (valid UTF-8) after lossy decoding: apply Strip's leading/trailing rules.
  void process_chars(std::string_view chars) {
    if (chars.empty()) return;
    if (lead_strip_left == 0 && (pd == nullptr || pd->strip_stop == 0) && trail_hold.empty()) {
      emit_run_text(chars);
      return;
    }
    std::string text;
    for (size_t i = 0; i < chars.size();) {
      size_t start = i;
      uint32_t cp = next_code_point(chars, i);
      std::string_view ch = chars.substr(start, i - start);
      if (lead_strip_left > 0) {
        if (cp == pd->strip_char) {
          --lead_strip_left;
          continue;
        }
        lead_strip_left = 0;
      }
      if (pd->strip_stop > 0) {
        if (cp == pd->strip_char) {
          trail_hold.append(ch);
          if (++trail_count > pd->strip_stop) {
            size_t len = utf8_len(static_cast<unsigned char>(trail_hold[0]));
            text.append(trail_hold, 0, len);
            trail_hold.erase(0, len);
            --trail_count;
          }
          continue;
        }
        text.append(trail_hold);
        trail_hold.clear();
        trail_count = 0;
      }
      text.append(ch);
    }
    emit_run_text(text);
  }

  void finish_run() {
    std::string tail;
    utf8.finish(tail);
    process_chars(tail);
    trail_hold.clear();  // stripped at the end of the string
    trail_count = 0;
    start_run();
  }

  void push_piecewise(int32_t id) {
    std::string_view text = tok->token_text(id);
    if (text.empty()) return;
    bool added = tok->is_added(id);
    if (spaces_between && tok->is_special(id)) {
      finish_run();
      if (any_sub_text) stage(" ");
      any_sub_text = true;
      stage(text);
      return;
    }
    std::string piece = pd->piece(text, added, run_first_token);
    run_first_token = false;
    std::string chars;
    utf8.feed(piece, chars);
    process_chars(chars);
  }

  void push_window(int32_t id) {
    ids.push_back(id);
    std::span<const int32_t> all(ids);
    std::string prefix_text = tok->decode_raw(all.subspan(prefix_offset, read_offset - prefix_offset), false, spaces_between);
    std::string new_text = tok->decode_raw(all.subspan(prefix_offset), false, spaces_between);
    if (new_text.size() > prefix_text.size() && !(new_text.size() >= 3 && new_text.compare(new_text.size() - 3, 3, "\xEF\xBF\xBD") == 0)) {
      stage(std::string_view(new_text).substr(prefix_text.size()));
      prefix_offset = read_offset;
      read_offset = ids.size();
    }
  }

  void push(int32_t id) {
    if (skip_special && tok->is_special(id)) return;
    if (tok->token_text(id).empty()) return;
    if (pd) push_piecewise(id);
    else push_window(id);
  }

  void flush() {
    if (pd) {
      finish_run();
    } else {
      std::span<const int32_t> all(ids);
      std::string prefix_text = tok->decode_raw(all.subspan(prefix_offset, read_offset - prefix_offset), false, spaces_between);
      std::string new_text = tok->decode_raw(all.subspan(prefix_offset), false, spaces_between);
      if (new_text.size() > prefix_text.size()) stage(std::string_view(new_text).substr(prefix_text.size()));
      prefix_offset = read_offset = ids.size();
    }
    if (!clean_buf.empty()) {
      out.append(clean_up_tokenization(clean_buf));
      clean_buf.clear();
    }
  }
};

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, bool skip_special_tokens,
                                           std::span<const int32_t> prompt_ids)
    : StreamingDetokenizer(tok, DecodeOptions{skip_special_tokens, std::nullopt, std::nullopt}, prompt_ids) {}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tok, const DecodeOptions& options,
                                           std::span<const int32_t> prompt_ids)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.tok = &tok;
  s.skip_special = options.skip_special_tokens;
  s.spaces_between = options.spaces_between_special_tokens.value_or(tok.spaces_between_special_tokens());
  s.cleanup = options.clean_up_tokenization_spaces.value_or(tok.clean_up_tokenization_spaces());
  s.pd = tok.piecewise_decoder();
  s.start_run();
  if (!prompt_ids.empty()) {
    if (s.pd) {
      for (int32_t id : prompt_ids) s.push(id);
      s.clean_buf.clear();  // prompt text counts as already emitted
    } else {
      for (int32_t id : prompt_ids)
        if (!(s.skip_special && tok.is_special(id)) && !tok.token_text(id).empty()) s.ids.push_back(id);
      s.read_offset = s.ids.size();
      s.prefix_offset = s.ids.size() > 5 ? s.ids.size() - 5 : 0;
    }
    s.out.clear();
  }
}

StreamingDetokenizer::~StreamingDetokenizer() = default;
StreamingDetokenizer::StreamingDetokenizer(StreamingDetokenizer&&) noexcept = default;

std::string StreamingDetokenizer::push(int32_t id) {
  state_->out.clear();
  state_->push(id);
  return std::move(state_->out);
}

std::string StreamingDetokenizer::flush() {
  state_->out.clear();
  state_->flush();
  return std::move(state_->out);
}

}  // namespace peregrine::tokenizer
