// GenerationJob: one /v1/completions or /v1/chat/completions request in flight. It submits one engine request
// per prompt, receives their deltas on the engine thread, and either streams them as SSE chunks (OpenAI chunk
// objects, usage chunk, [DONE]) or accumulates them into the final response. A client that disconnects aborts
// every engine request of the job.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "peregrine/engine.h"
#include "server/http_server.h"
#include "server/request_parsing.h"
#include "server/tool_calls.h"

namespace peregrine::server {

struct JobPrompt {
  std::vector<int32_t> token_ids;
  std::string echo_text;  // the prompt as text (completions with echo)
};

struct JobOptions {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  std::string model;  // served model name
  int64_t created = 0;
  ParsedSampling sampling;
  // Chat with tools and --enable-auto-tool-choice: the parser that turns the output's calls into tool_calls.
  std::optional<ToolParserKind> tool_parser;
  // tool_choice "required" (the output is a constrained list of calls) or a named function (the output is its
  // arguments, constrained by its schema).
  enum class ForcedTools { kNone, kRequired, kNamed };
  ForcedTools forced_tools = ForcedTools::kNone;
  std::string named_tool;
};

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(Engine& engine, std::shared_ptr<ResponseChannel> channel, JobOptions options,
                std::vector<JobPrompt> prompts);
  // Submits every prompt (throws on the first invalid one, after aborting those already submitted).
  void start();

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<PositionLogprobs> logprobs;
    FinishReason finish_reason = FinishReason::kNone;
    std::optional<std::string> stop_string;
    std::optional<int32_t> stop_token_id;
    int num_tokens = 0;
    bool echoed = false;
    size_t text_offset = 0;  // completions logprobs: characters before the next token
    std::optional<ToolCallStream> tool_stream;  // streamed chat with a tool parser
    bool called_tools = false;                  // the output was tool calls: finish_reason "tool_calls"
    std::optional<RequiredToolCallStream> required_stream;  // streamed tool_choice "required"
    std::vector<std::string> call_ids;                      // streamed forced calls: their ids, by index
  };
  struct PromptState {
    std::string engine_id;
    int num_prompt_tokens = 0;
    std::vector<PositionLogprobs> prompt_logprobs;
    bool finished = false;
  };

  void on_output(size_t prompt_index, RequestOutput&& out);
  void begin_stream();  // headers (and chat role chunks), sent with the first output
  void finish();
  void abort_all();
  Json chunk_base() const;
  Json choice_logprobs(Choice& choice, const std::vector<PositionLogprobs>& lps, bool with_prompt,
                       const std::vector<PositionLogprobs>* prompt_lps);
  Json usage() const;
  // Streamed forced tool calls: the delta of one output delta (null when there is nothing to send).
  Json forced_tools_delta(Choice& choice, const std::string& text);
  std::string dump(const Json& j) const;

  Engine& engine_;
  std::shared_ptr<ResponseChannel> channel_;
  JobOptions options_;
  std::vector<JobPrompt> prompts_;
  std::vector<PromptState> states_;
  std::vector<Choice> choices_;  // prompt_index * n + completion index
  size_t remaining_ = 0;
  std::optional<std::string> error_;
  std::string chunk_prefix_;  // '{"id":…,"model":…,"choices":[{"index":' of every stream chunk
  // Guards the response against a submission failing after another prompt already produced output.
  std::mutex mutex_;
  bool stream_started_ = false;
  bool failed_ = false;
};

}  // namespace peregrine::server
