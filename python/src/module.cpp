// peregrine._core: the extension under the `peregrine` Python package. It binds the public API's types
// (EngineConfig, SamplingParams, RequestOutput and its parts) and an Engine handle whose blocking calls release
// the GIL: generate() (offline batch: progress and Ctrl-C checked on the calling thread every poll interval, the
// batch aborted when either raises), add_request() into an OutputStream (streaming), tokenization and chat
// templates. The vLLM-shaped classes users see (LLM, SamplingParams, RequestOutput, ...) are Python, in
// python/peregrine/.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "convert.h"
#include "peregrine/engine.h"
#include "peregrine/error.h"
#include "streams.h"

namespace peregrine::python {
namespace {

// Thrown from the poll callback to end Engine::generate after a Python exception was stored.
struct Interrupted {};

class PyEngine {
 public:
  explicit PyEngine(const EngineConfig& config) {
    py::gil_scoped_release release;
    engine_ = Engine::create(config);
  }

  Engine& engine() { return *engine_; }

  py::dict info() const {
    const ModelInfo& i = engine_->info();
    py::dict d;
    d["model_path"] = i.model_path;
    d["architecture"] = i.architecture;
    d["backend"] = i.backend;
    d["dtype"] = i.dtype;
    d["vocab_size"] = i.vocab_size;
    d["max_model_len"] = i.max_model_len;
    d["block_size"] = i.block_size;
    d["num_kv_blocks"] = i.num_kv_blocks;
    d["kv_capacity_tokens"] = i.kv_capacity_tokens;
    d["weight_bytes"] = i.weight_bytes;
    d["kv_cache_bytes"] = i.kv_cache_bytes;
    d["eos_token_ids"] = i.eos_token_ids;
    d["has_chat_template"] = i.has_chat_template;
    d["has_tokenizer"] = i.has_tokenizer;
    d["load_seconds"] = i.load_seconds;
    return d;
  }

  py::dict stats() const {
    const EngineStats s = engine_->stats();
    py::dict d;
    d["num_running"] = s.num_running;
    d["num_waiting"] = s.num_waiting;
    d["num_kv_blocks"] = s.num_kv_blocks;
    d["num_free_kv_blocks"] = s.num_free_kv_blocks;
    d["num_used_kv_blocks"] = s.num_used_kv_blocks;
    d["prompt_tokens"] = s.prompt_tokens;
    d["generation_tokens"] = s.generation_tokens;
    d["prefix_cache_queries"] = s.prefix_cache_queries;
    d["prefix_cache_hits"] = s.prefix_cache_hits;
    d["num_preemptions"] = s.num_preemptions;
    d["requests_finished_abort"] = s.requests_finished_abort;
    d["num_steps"] = s.num_steps;
    return d;
  }

  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<SamplingParams>& params, std::vector<std::string> request_ids,
                                      const py::object& progress, double poll_interval_s) {
    std::optional<py::error_already_set> pending;
    GenerateOptions options;
    options.request_ids = std::move(request_ids);
    options.poll_interval = std::chrono::milliseconds(static_cast<int64_t>(poll_interval_s * 1e3));
    // Runs on this thread with the GIL retaken: signal handlers (Ctrl-C) and the progress bar.
    options.poll = [&](size_t num_finished) {
      py::gil_scoped_acquire gil;
      try {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (!progress.is_none()) progress(num_finished);
      } catch (py::error_already_set& e) {
        pending.emplace(std::move(e));
        throw Interrupted{};
      }
    };
    std::vector<RequestOutput> results;
    {
      py::gil_scoped_release release;
      try {
        results = engine_->generate(prompts, params, options);
      } catch (const Interrupted&) {
        // The batch was aborted and has ended; the stored exception is raised below, with the GIL.
      }
    }
    if (pending) throw std::move(*pending);
    return results;
  }

  void add_request(const std::string& request_id, std::vector<int32_t> prompt, const SamplingParams& params,
                   std::shared_ptr<OutputStream> stream) {
    py::gil_scoped_release release;
    engine_->add_request(request_id, std::move(prompt), params,
                         [stream = std::move(stream)](RequestOutput&& delta) { stream->push(std::move(delta)); });
  }

  void abort_request(const std::string& request_id) { engine_->abort_request(request_id); }

  void shutdown() {
    py::gil_scoped_release release;
    engine_->shutdown();
  }

  std::vector<std::vector<int32_t>> tokenize_batch(const std::vector<std::string>& texts, bool add_special_tokens) {
    py::gil_scoped_release release;
    std::vector<std::vector<int32_t>> out;
    out.reserve(texts.size());
    for (const std::string& t : texts) out.push_back(engine_->tokenize(t, add_special_tokens));
    return out;
  }

  std::string apply_chat_template(const py::handle& messages, bool add_generation_prompt, bool continue_final_message,
                                  const py::handle& tools, const py::handle& chat_template_kwargs,
                                  const std::optional<std::string>& chat_template) {
    const nlohmann::ordered_json m = to_json(messages, "messages");
    const nlohmann::ordered_json t = to_json(tools, "tools");
    const nlohmann::ordered_json k = to_json(chat_template_kwargs, "chat_template_kwargs");
    ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    options.continue_final_message = continue_final_message;
    options.tools = t.is_null() ? nullptr : &t;
    options.chat_template_kwargs = k.is_null() ? nullptr : &k;
    if (chat_template) options.chat_template = *chat_template;
    py::gil_scoped_release release;
    return engine_->apply_chat_template(m, options);
  }

 private:
  std::unique_ptr<Engine> engine_;  // joined by ~Engine; the loop thread never takes the GIL
};

py::object optional_text(const std::optional<std::string>& s) {
  if (!s) return py::none();
  return text(*s);
}

py::object finish_reason(const CompletionOutput& c) {
  if (c.finish_reason == FinishReason::kNone) return py::none();
  return py::str(finish_reason_name(c.finish_reason));
}

py::object stop_reason(const CompletionOutput& c) {
  if (c.stop_string) return text(*c.stop_string);
  if (c.stop_token_id) return py::int_(*c.stop_token_id);
  return py::none();
}

// Everything of a request but its logprobs in one call (building outputs for 1,000 prompts costs less than reading
// each field through its property): (request_id, finished, num_cached_tokens, (arrival, first_scheduled,
// first_token, finished), error, [(index, text, token_ids, cumulative_logprob, finish_reason, stop_reason), ...]).
py::tuple request_fields(const RequestOutput& r) {
  py::list outputs(r.outputs.size());
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    const CompletionOutput& c = r.outputs[i];
    outputs[i] = py::make_tuple(c.index, text(c.text), py::cast(c.token_ids), c.cumulative_logprob, finish_reason(c),
                                stop_reason(c));
  }
  return py::make_tuple(r.request_id, r.finished, r.num_cached_tokens,
                        py::make_tuple(r.timings.arrival, r.timings.first_scheduled, r.timings.first_token,
                                       r.timings.finished),
                        optional_text(r.error), std::move(outputs));
}

void bind_config(py::module_& m) {
  py::class_<EngineConfig>(m, "EngineConfig", "peregrine::EngineConfig (include/peregrine/engine_config.h)")
      .def(py::init<>())
      .def_readwrite("model", &EngineConfig::model)
      .def_readwrite("tokenizer", &EngineConfig::tokenizer)
      .def_readwrite("skip_tokenizer_init", &EngineConfig::skip_tokenizer_init)
      .def_readwrite("device", &EngineConfig::device)
      .def_readwrite("dtype", &EngineConfig::dtype)
      .def_readwrite("max_model_len", &EngineConfig::max_model_len)
      .def_readwrite("max_num_seqs", &EngineConfig::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &EngineConfig::max_num_batched_tokens)
      .def_readwrite("block_size", &EngineConfig::block_size)
      .def_readwrite("enable_prefix_caching", &EngineConfig::enable_prefix_caching)
      .def_readwrite("gpu_memory_utilization", &EngineConfig::gpu_memory_utilization)
      .def_readwrite("kv_cache_memory_bytes", &EngineConfig::kv_cache_memory_bytes)
      .def_readwrite("num_kv_blocks_override", &EngineConfig::num_kv_blocks_override)
      .def_readwrite("seed", &EngineConfig::seed)
      .def_readwrite("chat_template", &EngineConfig::chat_template)
      .def_readwrite("generation_config", &EngineConfig::generation_config)
      .def_readwrite("quantization", &EngineConfig::quantization)
      .def_readwrite("kv_cache_dtype", &EngineConfig::kv_cache_dtype)
      .def_readwrite("max_queued_requests", &EngineConfig::max_queued_requests)
      .def_readwrite("num_threads", &EngineConfig::num_threads)
      .def_readwrite("tensor_parallel_size", &EngineConfig::tensor_parallel_size)
      .def_readwrite("enforce_eager", &EngineConfig::enforce_eager)
      .def_readwrite("kv_offloading_size", &EngineConfig::kv_offloading_size)
      .def_readwrite("kv_cache_dir", &EngineConfig::kv_cache_dir)
      .def_readwrite("kv_cache_disk_gb", &EngineConfig::kv_cache_disk_gb)
      // vLLM's speculative_config as JSON text (SpeculativeConfig::parse checks every key).
      .def("set_speculative_config",
           [](EngineConfig& c, const std::string& json) { c.speculative = SpeculativeConfig::parse(json); })
      .def("validate", &EngineConfig::validate);
}

void bind_sampling(py::module_& m) {
  py::class_<SamplingParams>(m, "NativeSamplingParams", "peregrine::SamplingParams (include/peregrine/sampling_params.h)")
      .def(py::init<>())
      .def_readwrite("n", &SamplingParams::n)
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("min_p", &SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("presence_penalty", &SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_readwrite("logit_bias", &SamplingParams::logit_bias)
      .def_readwrite("seed", &SamplingParams::seed)
      .def_readwrite("stop", &SamplingParams::stop)
      .def_readwrite("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_readwrite("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def_readwrite("ignore_eos", &SamplingParams::ignore_eos)
      .def_readwrite("min_tokens", &SamplingParams::min_tokens)
      .def_readwrite("max_tokens", &SamplingParams::max_tokens)
      .def_readwrite("logprobs", &SamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &SamplingParams::prompt_logprobs)
      .def_readwrite("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_readwrite("spaces_between_special_tokens", &SamplingParams::spaces_between_special_tokens)
      .def(
          "set_structured_outputs",
          [](SamplingParams& p, std::optional<std::string> json, std::optional<std::string> regex,
             std::optional<std::vector<std::string>> choice, std::optional<std::string> grammar, bool json_object) {
            StructuredOutputsParams so;
            so.json = std::move(json);
            so.regex = std::move(regex);
            so.choice = std::move(choice);
            so.grammar = std::move(grammar);
            so.json_object = json_object;
            p.structured_outputs = std::move(so);
          },
          py::arg("json"), py::arg("regex"), py::arg("choice"), py::arg("grammar"), py::arg("json_object"),
          "A structured-outputs constraint (StructuredOutputsParams)")
      .def("validate", &SamplingParams::validate, py::arg("vocab_size"),
           "The engine's checks (raises InvalidArgumentError naming the field)")
      .def_readonly_static("MAX_LOGPROBS", &SamplingParams::kMaxLogprobs)
      .def_readonly_static("MAX_N", &SamplingParams::kMaxN);
}

void bind_outputs(py::module_& m) {
  py::class_<TokenLogprob>(m, "NativeTokenLogprob")
      .def_readonly("token_id", &TokenLogprob::token_id)
      .def_readonly("logprob", &TokenLogprob::logprob)
      .def_readonly("rank", &TokenLogprob::rank)
      .def_property_readonly("text", [](const TokenLogprob& t) { return text(t.text); });
  py::class_<PositionLogprobs>(m, "NativePositionLogprobs")
      .def_readonly("chosen", &PositionLogprobs::chosen)
      .def_readonly("top", &PositionLogprobs::top);
  py::class_<CompletionOutput>(m, "NativeCompletionOutput")
      .def_readonly("index", &CompletionOutput::index)
      .def_property_readonly("text", [](const CompletionOutput& c) { return text(c.text); })
      .def_readonly("token_ids", &CompletionOutput::token_ids)
      .def_readonly("cumulative_logprob", &CompletionOutput::cumulative_logprob)
      .def_readonly("logprobs", &CompletionOutput::logprobs)
      .def_property_readonly("finish_reason", &finish_reason)
      .def_property_readonly("stop_reason", &stop_reason)
      .def_readonly("num_output_tokens", &CompletionOutput::num_output_tokens);
  py::class_<RequestOutput>(m, "NativeRequestOutput")
      .def_readonly("request_id", &RequestOutput::request_id)
      .def_readonly("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_readonly("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_readonly("outputs", &RequestOutput::outputs)
      .def_readonly("finished", &RequestOutput::finished)
      .def_readonly("num_prompt_tokens", &RequestOutput::num_prompt_tokens)
      .def_readonly("num_cached_tokens", &RequestOutput::num_cached_tokens)
      .def_property_readonly("timings",
                             [](const RequestOutput& r) {
                               return py::make_tuple(r.timings.arrival, r.timings.first_scheduled,
                                                     r.timings.first_token, r.timings.finished);
                             })
      .def_property_readonly("error", [](const RequestOutput& r) { return optional_text(r.error); })
      .def("fields", &request_fields);
}

void bind_engine(py::module_& m) {
  py::class_<OutputStream, std::shared_ptr<OutputStream>>(m, "OutputStream",
                                                          "Deltas of streamed requests, left by the engine loop")
      .def(py::init<>())
      .def("fileno", &OutputStream::fileno)
      .def("drain", &OutputStream::drain)
      .def("wait", &OutputStream::wait, py::arg("timeout"), py::call_guard<py::gil_scoped_release>());

  py::class_<PyEngine>(m, "Engine", "peregrine::Engine: one engine loop thread over a loaded model")
      .def(py::init<const EngineConfig&>(), py::arg("config"))
      .def_property_readonly("info", &PyEngine::info)
      .def("stats", &PyEngine::stats)
      .def("default_sampling_params",
           [](PyEngine& self) { return self.engine().default_sampling_params(); })
      .def("generate", &PyEngine::generate, py::arg("prompts"), py::arg("params"), py::arg("request_ids"),
           py::arg("progress") = py::none(), py::arg("poll_interval") = 0.05)
      .def("add_request", &PyEngine::add_request, py::arg("request_id"), py::arg("prompt_token_ids"),
           py::arg("params"), py::arg("stream"))
      .def("abort_request", &PyEngine::abort_request, py::arg("request_id"))
      .def("shutdown", &PyEngine::shutdown)
      .def("tokenize",
           [](PyEngine& self, const std::string& t, bool add_special_tokens) {
             py::gil_scoped_release release;
             return self.engine().tokenize(t, add_special_tokens);
           },
           py::arg("text"), py::arg("add_special_tokens") = true)
      .def("tokenize_batch", &PyEngine::tokenize_batch, py::arg("texts"), py::arg("add_special_tokens") = true)
      .def("detokenize",
           [](PyEngine& self, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             std::string s;
             {
               py::gil_scoped_release release;
               s = self.engine().detokenize(ids, skip_special_tokens);
             }
             return text(s);
           },
           py::arg("token_ids"), py::arg("skip_special_tokens") = true)
      .def("token_text", [](PyEngine& self, int32_t id) { return text(self.engine().token_text(id)); },
           py::arg("token_id"))
      .def("apply_chat_template", &PyEngine::apply_chat_template, py::arg("messages"),
           py::arg("add_generation_prompt") = true, py::arg("continue_final_message") = false,
           py::arg("tools") = py::none(), py::arg("chat_template_kwargs") = py::none(),
           py::arg("chat_template") = py::none());
}

}  // namespace
}  // namespace peregrine::python

PYBIND11_MODULE(_core, m) {
  using namespace peregrine::python;
  m.doc() = "Peregrine's engine, bound for the peregrine package (use `peregrine.LLM`, not this module)";
  m.attr("__version__") = PEREGRINE_VERSION;
  register_errors(m);
  bind_config(m);
  bind_sampling(m);
  bind_outputs(m);
  bind_engine(m);
}
