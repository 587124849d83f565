// Engine: the public API over EngineCore: thread-safe submission through a command queue, one loop thread
// that applies commands and runs steps, offline generate(), shutdown, and stats snapshots.
#include "peregrine/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <span>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <variant>

#include "core/memory_bandwidth.h"
#include "core/status.h"
#include "engine/engine_core.h"

namespace peregrine {

struct Engine::Impl {
  struct AddCommand {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams params;
    OutputCallback callback;
    double arrival;
  };
  struct AbortCommand {
    std::string id;
  };
  // Work that must run on the loop thread between steps (it owns the backend's stream).
  struct TaskCommand {
    std::function<void()> fn;
  };
  using Command = std::variant<AddCommand, AbortCommand, TaskCommand>;

  std::unique_ptr<engine::EngineCore> core;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Command> commands;
  std::unordered_set<std::string> live_ids;  // submitted and not yet finished (guarded by mutex)
  bool stopping = false;
  std::atomic<int> queued{0};
  std::thread loop;

  mutable std::mutex stats_mutex;
  EngineStats stats;

  void run_loop();
  void publish_stats() {
    EngineStats s = core->stats();
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats = std::move(s);
  }
};

Engine::Engine(std::unique_ptr<engine::EngineCore> core) : impl_(std::make_unique<Impl>()) {
  impl_->core = std::move(core);
  impl_->core->set_queued_counter(&impl_->queued);
  impl_->publish_stats();
  impl_->loop = std::thread([impl = impl_.get()] { impl->run_loop(); });
}

Engine::~Engine() {
  shutdown();
  if (impl_->loop.joinable()) impl_->loop.join();
}

void Engine::Impl::run_loop() {
  bool idle_failure_logged = false;
  for (;;) {
    std::deque<Command> batch;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mutex);
      auto ready = [&] { return !commands.empty() || stopping || core->has_unfinished(); };
      // With tier work in flight and no request to run, wake now and then to finish it (see has_background_work).
      if (core->has_background_work()) {
        wake.wait_for(lock, std::chrono::milliseconds(2), ready);
      } else {
        wake.wait(lock, ready);
      }
      batch.swap(commands);
      stop = stopping;
    }
    for (Command& cmd : batch) {
      if (auto* add = std::get_if<AddCommand>(&cmd)) {
        // Wrap the callback so the id leaves live_ids when the request ends.
        OutputCallback user = std::move(add->callback);
        std::string id = add->id;
        OutputCallback wrapped = [this, user = std::move(user), id](RequestOutput&& out) {
          const bool finished = out.finished;
          // The final delta may complete a response at once: the stats must not show the request running
          // after its client got the answer, so the snapshot is published before the callback runs.
          if (finished) publish_stats();
          if (user) user(std::move(out));
          if (finished) {
            std::lock_guard<std::mutex> lock(mutex);
            live_ids.erase(id);
          }
        };
        OutputCallback on_failure = wrapped;
        try {
          core->add_request(add->id, std::move(add->prompt), add->params, std::move(wrapped), add->arrival);
        } catch (const std::exception& e) {
          queued.fetch_sub(1);
          RequestOutput out;
          out.request_id = add->id;
          out.finished = true;
          out.error = e.what();
          on_failure(std::move(out));
        }
      } else if (auto* abort = std::get_if<AbortCommand>(&cmd)) {
        core->abort_request(abort->id);
      } else {
        std::get<TaskCommand>(cmd).fn();  // catches its own errors
      }
    }
    if (stop) {
      core->abort_all("");
      publish_stats();
      return;
    }
    if (core->has_unfinished()) {
      try {
        core->step();
      } catch (const std::exception& e) {
        // An internal error fails the live requests (each gets a final delta with the message); the engine
        // keeps serving new ones.
        core->abort_all(std::string("engine error: ") + e.what());
      }
    } else if (core->has_background_work()) {
      try {
        core->poll_background();
      } catch (const std::exception& e) {
        // A failed copy or read of the tiers while idle: logged once; the loop goes on (a later step meets it again).
        if (!idle_failure_logged)
          std::fprintf(stderr, "peregrine: engine: KV tier work failed while idle: %s\n", e.what());
        idle_failure_logged = true;
      }
    }
    publish_stats();
  }
}

const ModelInfo& Engine::info() const { return impl_->core->info(); }
const SamplingParams& Engine::default_sampling_params() const { return impl_->core->default_sampling_params(); }

void Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                         const SamplingParams& params, OutputCallback on_output) {
  impl_->core->validate(prompt_token_ids, params);
  const double arrival = impl_->core->now();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->stopping) throw Error(ErrorCode::kUnavailable, "the engine is shutting down");
  if (impl_->queued.load() >= impl_->core->max_queued_requests()) {
    throw Error(ErrorCode::kUnavailable, "the waiting queue is full (" +
                                             std::to_string(impl_->core->max_queued_requests()) +
                                             " requests); retry later");
  }
  if (!impl_->live_ids.insert(request_id).second) {
    throw Error(ErrorCode::kInvalidArgument, "request id '" + request_id + "' is already in use");
  }
  impl_->queued.fetch_add(1);
  impl_->commands.push_back(
      Impl::AddCommand{request_id, std::move(prompt_token_ids), params, std::move(on_output), arrival});
  impl_->wake.notify_one();
}

void Engine::abort_request(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (!impl_->live_ids.count(request_id)) return;
  impl_->commands.push_back(Impl::AbortCommand{request_id});
  impl_->wake.notify_one();
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_one();
  if (impl_->loop.joinable() && impl_->loop.get_id() != std::this_thread::get_id()) impl_->loop.join();
}

std::vector<RequestOutput> Engine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            const SamplingParams& params) {
  return generate(prompts, std::span<const SamplingParams>(&params, 1));
}

std::vector<RequestOutput> Engine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                            std::span<const SamplingParams> params, const GenerateOptions& options) {
  if (params.size() != 1 && params.size() != prompts.size()) {
    throw Error(ErrorCode::kInvalidArgument, "generate: " + std::to_string(params.size()) + " sampling params for " +
                                                 std::to_string(prompts.size()) + " prompts (give one, or one per prompt)");
  }
  if (!options.request_ids.empty() && options.request_ids.size() != prompts.size()) {
    throw Error(ErrorCode::kInvalidArgument, "generate: " + std::to_string(options.request_ids.size()) +
                                                 " request ids for " + std::to_string(prompts.size()) + " prompts");
  }
  auto params_of = [&](size_t i) -> const SamplingParams& { return params.size() == 1 ? params[0] : params[i]; };
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<RequestOutput> results;
    size_t finished = 0;
  };
  auto shared = std::make_shared<Shared>();
  shared->results.resize(prompts.size());
  static std::atomic<uint64_t> batch_counter{0};
  const std::string prefix = "generate-" + std::to_string(batch_counter.fetch_add(1)) + "-";
  std::vector<std::string> ids(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids[i] = options.request_ids.empty() ? prefix + std::to_string(i) : options.request_ids[i];
    const int n = params_of(i).n;
    shared->results[i].outputs.resize(static_cast<size_t>(std::max(n, 0)));
    for (int k = 0; k < n; ++k) shared->results[i].outputs[static_cast<size_t>(k)].index = k;
  }
  auto submit = [&](size_t i) {
    add_request(ids[i], prompts[i], params_of(i), [shared, i](RequestOutput&& delta) {
      std::lock_guard<std::mutex> lock(shared->mutex);
      RequestOutput& acc = shared->results[i];
      if (!delta.prompt_token_ids.empty()) {
        acc.request_id = delta.request_id;
        acc.prompt_token_ids = std::move(delta.prompt_token_ids);
        acc.prompt_logprobs = std::move(delta.prompt_logprobs);
      }
      acc.num_prompt_tokens = delta.num_prompt_tokens;
      acc.num_cached_tokens = delta.num_cached_tokens;
      acc.timings = delta.timings;
      if (delta.error) acc.error = delta.error;
      for (CompletionOutput& c : delta.outputs) {
        CompletionOutput& a = acc.outputs[static_cast<size_t>(c.index)];
        a.text += c.text;
        a.token_ids.insert(a.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
        for (auto& lp : c.logprobs) a.logprobs.push_back(std::move(lp));
        a.cumulative_logprob = c.cumulative_logprob;
        a.finish_reason = c.finish_reason;
        a.stop_string = c.stop_string;
        a.stop_token_id = c.stop_token_id;
        a.num_output_tokens = c.num_output_tokens;
        a.num_draft_tokens = c.num_draft_tokens;
        a.num_accepted_tokens = c.num_accepted_tokens;
      }
      if (delta.finished) {
        acc.finished = true;
        ++shared->finished;
        shared->changed.notify_all();
      }
    });
  };
  // At most this many of the batch are live at once, so the waiting queue never overflows.
  const size_t window = static_cast<size_t>(std::max(1, impl_->core->max_queued_requests() / 2));
  size_t submitted = 0;
  // Ends the batch early: aborts what is live and waits until every submitted request has ended.
  auto abandon = [&] {
    for (size_t i = 0; i < submitted; ++i) abort_request(ids[i]);
    std::unique_lock<std::mutex> lock(shared->mutex);
    shared->changed.wait(lock, [&] { return shared->finished == submitted; });
  };
  auto next_poll = std::chrono::steady_clock::now() + options.poll_interval;
  try {
    for (;;) {
      size_t finished = 0;
      {
        std::lock_guard<std::mutex> lock(shared->mutex);
        finished = shared->finished;
      }
      while (submitted < prompts.size() && submitted - finished < window) {
        submit(submitted);
        ++submitted;
      }
      std::unique_lock<std::mutex> lock(shared->mutex);
      if (shared->finished == prompts.size()) break;
      // Wake for the poll, for the batch's end, or (while prompts wait to be submitted) for any finish since the
      // count the submissions were paced by: one that came between submitting and taking the lock counts too
      // (comparing with a fresh count would wait for a finish that may never come).
      const size_t seen = finished;
      const bool more = submitted < prompts.size();
      auto woken = [&] { return shared->finished == prompts.size() || (more && shared->finished != seen); };
      if (options.poll) {
        shared->changed.wait_until(lock, next_poll, woken);
      } else {
        shared->changed.wait(lock, woken);
      }
      const size_t done = shared->finished;
      lock.unlock();
      if (options.poll && done != prompts.size() && std::chrono::steady_clock::now() >= next_poll) {
        options.poll(done);
        next_poll = std::chrono::steady_clock::now() + options.poll_interval;
      }
    }
  } catch (...) {
    abandon();
    throw;
  }
  if (options.poll) options.poll(prompts.size());
  return std::move(shared->results);
}

std::vector<RequestOutput> Engine::generate(const std::vector<std::string>& prompts, const SamplingParams& params) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(prompts.size());
  for (const std::string& p : prompts) ids.push_back(tokenize(p, true));
  return generate(ids, params);
}

std::vector<int32_t> Engine::tokenize(std::string_view text, bool add_special_tokens) const {
  return impl_->core->codec().encode(text, add_special_tokens);
}

std::string Engine::detokenize(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const int vocab = impl_->core->info().vocab_size;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) {
      throw Error(ErrorCode::kInvalidArgument,
                  "token id " + std::to_string(id) + " is out of the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  return impl_->core->codec().decode(ids, skip_special_tokens);
}

std::string Engine::token_text(int32_t id) const { return impl_->core->codec().token_text(id); }

std::string Engine::apply_chat_template(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const {
  return impl_->core->codec().apply_chat_template(messages, options);
}

void Engine::run_on_loop(const std::function<void()>& task) {
  struct Result {
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    std::exception_ptr error;
  };
  auto result = std::make_shared<Result>();
  auto wrapped = [task, result] {
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(result->mutex);
    result->error = error;
    result->finished = true;
    result->done.notify_all();
  };
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopping) throw Error(ErrorCode::kUnavailable, "the engine is shutting down");
    impl_->commands.push_back(Impl::TaskCommand{std::move(wrapped)});
    impl_->wake.notify_one();
  }
  std::unique_lock<std::mutex> lock(result->mutex);
  result->done.wait(lock, [&] { return result->finished; });
  if (result->error) std::rethrow_exception(result->error);
}

MemoryBandwidth Engine::measure_memory_bandwidth() {
  MemoryBandwidth bw;
  run_on_loop([this, &bw] {
    ops::Backend& backend = impl_->core->runner().backend();
    if (backend.is_host()) {
      bw = measure_host_bandwidth(0);
      return;
    }
    // (read + write bytes) / s of a large on-device copy, best of five.
    const size_t bytes = size_t{2} << 30;
    ops::DeviceBuffer a(backend, bytes), b(backend, bytes);
    backend.fill_zero(a.data(), bytes);
    backend.copy_on_device(b.data(), a.data(), bytes);
    backend.synchronize();
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      backend.copy_on_device(b.data(), a.data(), bytes);
      backend.synchronize();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    bw.copy_gbs = 2.0 * static_cast<double>(bytes) / best / 1e9;
    // Pinned host memory to and from the device on the copy queue, timed as the backend times transfers.
    const size_t pinned_bytes = size_t{256} << 20;
    void* pinned = backend.allocate_pinned(pinned_bytes);
    try {
      std::memset(pinned, 0, pinned_bytes);
      for (auto dir : {ops::Backend::CopyDirection::kHostToDevice, ops::Backend::CopyDirection::kDeviceToHost}) {
        const bool up = dir == ops::Backend::CopyDirection::kHostToDevice;
        const ops::Backend::CopyRegion region{up ? a.data() : pinned, up ? pinned : a.data(), pinned_bytes};
        double fastest = 1e30;
        for (int i = 0; i < 4; ++i) {
          const auto before = backend.transfer_totals();
          backend.wait_transfer(backend.copy_async(dir, std::span<const ops::Backend::CopyRegion>(&region, 1)));
          const auto after = backend.transfer_totals();
          const int d = static_cast<int>(dir);
          if (i > 0) fastest = std::min(fastest, after.seconds[d] - before.seconds[d]);
        }
        (up ? bw.host_to_device_gbs : bw.device_to_host_gbs) = static_cast<double>(pinned_bytes) / fastest / 1e9;
      }
    } catch (...) {
      backend.deallocate_pinned(pinned);
      throw;
    }
    backend.deallocate_pinned(pinned);
  });
  return bw;
}

double Engine::measure_matmul_tflops() {
  double tflops = 0.0;
  run_on_loop([this, &tflops] {
    ops::Backend& backend = impl_->core->runner().backend();
    const DType act = impl_->core->runner().model().activation_dtype();
    const int64_t n = backend.is_host() ? 1024 : 8192;
    const size_t bytes = dtype_bytes(act, static_cast<size_t>(n * n));
    ops::DeviceBuffer x(backend, bytes), w(backend, bytes), out(backend, bytes);
    backend.fill_zero(x.data(), bytes);
    backend.fill_zero(w.data(), bytes);
    const ops::MatmulParams p(x.view(act, {n, n}), w.view(act, {n, n}), TensorView(), out.view(act, {n, n}));
    backend.matmul(p);
    backend.synchronize();
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      backend.matmul(p);
      backend.synchronize();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    tflops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best / 1e12;
  });
  return tflops;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->stats_mutex);
  return impl_->stats;
}

}  // namespace peregrine
