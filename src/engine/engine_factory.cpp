// Engine::create: loads the model and tokenizer, sizes the KV cache from the memory the device has left after
// the weights and a warm-up forward, resolves the limits (max_model_len, token budget) and starts the engine.
#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <optional>
#include <span>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/status.h"
#include "engine/device_setup.h"
#include "engine/engine_core.h"
#include "engine/model_runner.h"
#include "engine/spec/draft_vocab.h"
#include "engine/spec/model_proposer.h"
#include "engine/tokenizer_codec.h"
#include "io/gguf.h"
#include "io/gguf_config.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "peregrine/engine.h"

namespace peregrine {

namespace {

// The drafter's reduced vocabulary (speculative_config draft_vocab_size / speculative_token_map) with its compact LM
// head made on `drafter` (before a runner is built on it: the runner sizes its logits by it); nullopt for the whole
// vocabulary. The method's default size falls back to the whole vocabulary where the LM head cannot be cut by rows
// (Model::use_logits_subset: a head kept only in the backend's own packed layout); a size or map the config gives is
// then an error naming its key.
std::optional<engine::DraftVocab> make_draft_vocab(const SpeculativeConfig& spec, model::Model& drafter,
                                                   std::span<const int32_t> eos) {
  const int vocab = static_cast<int>(drafter.config().vocab_size);
  std::optional<engine::DraftVocab> v;
  if (!spec.speculative_token_map.empty()) {
    v = engine::DraftVocab::fixed(engine::read_token_map(spec.speculative_token_map, vocab), vocab, eos);
  } else if (const int rows = spec.drafter_vocab_rows(); rows > 0 && rows < vocab) {
    v.emplace(rows, vocab, eos);
  }
  if (!v || v->rows() >= vocab) return std::nullopt;  // nothing to leave out
  const bool asked = spec.draft_vocab_size > 0 || !spec.speculative_token_map.empty();
  try {
    drafter.use_logits_subset(v->rows());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kUnsupported) throw;
    if (!asked) return std::nullopt;  // the default: the whole vocabulary where the head cannot be cut
    const std::string key = spec.speculative_token_map.empty() ? "draft_vocab_size" : "speculative_token_map";
    throw Error(ErrorCode::kUnsupported, "speculative_config." + key + ": " + e.message(), "speculative_config");
  }
  return v;
}

// What the disk tier's files are kept under: the model (its folder and weight files' sizes and times, or the random
// weights' shape and seed), the compute device and dtype, and the KV layout. Another model never sees them.
uint64_t kv_identity(const EngineConfig& config, const engine::KvCacheConfig& kv, uint64_t random_seed) {
  namespace fs = std::filesystem;
  std::vector<std::string> parts = {"peregrine-kv-1", config.device, config.dtype, std::string(dtype_name(kv.dtype)),
                                    std::to_string(kv.num_layers), std::to_string(kv.num_kv_heads),
                                    std::to_string(kv.head_dim), std::to_string(kv.block_size),
                                    std::to_string(kv.scales_per_token_head)};
  std::error_code ec;
  if (config.random_weights) {
    parts.emplace_back("random");
    parts.push_back(config.config_file);
    parts.push_back(std::to_string(random_seed));
  }
  if (!config.model.empty() && io::is_gguf_path(config.model)) {
    const fs::path file = fs::weakly_canonical(config.model, ec);
    parts.push_back(file.string());
    parts.push_back(std::to_string(fs::file_size(file, ec)));
    parts.push_back(std::to_string(fs::last_write_time(file, ec).time_since_epoch().count()));
  } else if (!config.model.empty()) {
    const fs::path dir = fs::weakly_canonical(config.model, ec);
    parts.push_back(dir.string());
    std::vector<std::string> files;
    for (const auto& f : fs::directory_iterator(dir, ec)) {
      const std::string name = f.path().filename().string();
      if (f.path().extension() != ".safetensors" && name != "config.json") continue;
      std::string entry = name;
      entry.append(":").append(std::to_string(fs::file_size(f.path(), ec)));
      entry.append(":").append(std::to_string(fs::last_write_time(f.path(), ec).time_since_epoch().count()));
      files.push_back(std::move(entry));
    }
    std::sort(files.begin(), files.end());
    parts.insert(parts.end(), files.begin(), files.end());
  }
  std::string id;
  for (const std::string& p : parts) id.append(p).push_back('|');
  return XXH3_64bits(id.data(), id.size());
}

}  // namespace
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// Host backends: the KV cache takes at most this much (and a quarter of the free RAM) unless told otherwise;
// zeroing more would slow startup for little gain on a CPU.
constexpr size_t kHostKvCap = size_t{1} << 30;

// Sampling defaults from generation_config.json, as vLLM's --generation-config auto does.
SamplingParams defaults_from(const EngineConfig& config) {
  SamplingParams p;
  p.max_tokens = std::nullopt;  // each endpoint has its own default unless max_new_tokens is given
  if (config.generation_config == "vllm") return p;
  const std::filesystem::path dir = config.generation_config == "auto" ? config.model : config.generation_config;
  if (config.generation_config != "auto" && !std::filesystem::exists(dir / "generation_config.json")) {
    throw Error(ErrorCode::kNotFound, "--generation-config: no generation_config.json in " + dir.string());
  }
  const io::GenerationConfig g = io::load_generation_config(dir);
  if (g.temperature) p.temperature = static_cast<float>(*g.temperature);
  if (g.top_p) p.top_p = static_cast<float>(*g.top_p);
  if (g.top_k) p.top_k = static_cast<int>(*g.top_k);
  if (g.repetition_penalty) p.repetition_penalty = static_cast<float>(*g.repetition_penalty);
  if (g.max_new_tokens) p.max_tokens = static_cast<int>(*g.max_new_tokens);
  return p;
}

std::string dtype_label(DType t) { return std::string(dtype_name(t)); }

// skip_tokenizer_init: token ids in and out, no text.
class NoTokenizerCodec final : public engine::TextCodec {
 public:
  class Silent final : public engine::IncrementalDetokenizer {
   public:
    std::string push(int32_t) override { return {}; }
  };
  std::vector<int32_t> encode(std::string_view, bool) const override {
    throw Error(ErrorCode::kInvalidArgument, "this engine has no tokenizer (skip_tokenizer_init): give token ids");
  }
  std::string decode(std::span<const int32_t>, bool) const override { return {}; }
  std::string token_text(int32_t) const override { return {}; }
  std::unique_ptr<engine::IncrementalDetokenizer> make_detokenizer(std::span<const int32_t>, bool, bool) const override {
    return std::make_unique<Silent>();
  }
  bool has_tokenizer() const override { return false; }
  bool has_chat_template() const override { return false; }
  std::string apply_chat_template(const nlohmann::ordered_json&, const ChatTemplateOptions&) const override {
    throw Error(ErrorCode::kInvalidArgument, "this engine has no tokenizer (skip_tokenizer_init): no chat template");
  }
};

}  // namespace

std::unique_ptr<Engine> Engine::create(const EngineConfig& config) {
  config.validate();
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path model_dir = config.model;
  const bool config_only = config.random_weights && !config.config_file.empty() && config.model.empty();
  const bool gguf = !config_only && io::is_gguf_path(model_dir);
  if (!config_only && !gguf && !std::filesystem::is_directory(model_dir)) {
    throw Error(ErrorCode::kNotFound, (model_dir.extension() == ".gguf" ? "model file " : "model folder ") +
                                          model_dir.string() + " does not exist");
  }
  io::ModelConfig model_config = config.random_weights && !config.config_file.empty()
                                     ? io::parse_model_config(io::read_text_file(config.config_file), config.config_file)
                                     : io::load_model_config_any(model_dir);
  engine::DeviceChoice choice = engine::resolve_device(config.device, config.dtype, model_config.torch_dtype);
  engine::apply_kv_cache_dtype(choice, config.kv_cache_dtype);
  auto backend = engine::create_backend(choice, config.num_threads);
  const bool on_gpu = choice.kind == ops::DeviceKind::kCuda;

  // Limits that shape the model's workspaces.
  int max_model_len = static_cast<int>(model_config.max_position_embeddings);
  if (config.max_model_len > 0) {
    if (config.max_model_len > max_model_len) {
      throw Error(ErrorCode::kInvalidArgument,
                  "--max-model-len " + std::to_string(config.max_model_len) + " exceeds the model's " +
                      "max_position_embeddings (" + std::to_string(max_model_len) + ") in config.json");
    }
    max_model_len = config.max_model_len;
  }
  const int budget = config.max_num_batched_tokens > 0 ? config.max_num_batched_tokens : (on_gpu ? 8192 : 2048);

  const bool no_tokenizer = config.skip_tokenizer_init || (config_only && config.tokenizer.empty());
  std::shared_ptr<engine::TextCodec> codec;
  std::vector<int32_t> tokenizer_eos;
  if (no_tokenizer) {
    codec = std::make_shared<NoTokenizerCodec>();
  } else {
    auto tc = std::make_shared<engine::TokenizerCodec>(
        config.tokenizer.empty() ? model_dir : std::filesystem::path(config.tokenizer), model_dir, config.chat_template);
    tokenizer_eos = tc->tokenizer().eos_ids();
    codec = std::move(tc);
  }
  const SamplingParams defaults = config_only ? SamplingParams{} : defaults_from(config);

  model::ModelOptions options;
  options.activation_dtype = choice.activation_dtype;
  options.max_num_tokens = budget;
  options.max_logits_rows = std::max(1, std::min(config.max_num_seqs, budget));
  options.random_weights = config.random_weights;
  options.random_seed = config.seed;
  options.quantization = config.quantization;
  options.on_load_progress = config.on_load_progress;
  auto model = config.random_weights ? model::make_random_model(model_config, *backend, options)
                                     : model::load_model(model_dir, *backend, options);
  engine::RunnerOptions runner_options;
  runner_options.max_num_seqs = config.max_num_seqs;
  runner_options.max_num_batched_tokens = budget;
  runner_options.max_model_len = max_model_len;
  runner_options.block_size = config.block_size;
  runner_options.kv_dtype = choice.kv_dtype;
  runner_options.use_graphs = !config.enforce_eager;
  if (config.speculative.enabled()) {
    // Verify rows' logits on demand where the backend allows it (host backends); PEREGRINE_LAZY_VERIFY=0 computes
    // every row with the step (comparisons).
    const char* lazy = std::getenv("PEREGRINE_LAZY_VERIFY");
    runner_options.lazy_logits = !(lazy && std::string(lazy) == "0");
    runner_options.verify_rows = 2;
    while (runner_options.verify_rows < 1 + config.speculative.max_verify_tokens() && runner_options.verify_rows < 16)
      runner_options.verify_rows *= 2;
  }
  auto runner = std::make_unique<engine::ModelRunner>(std::move(backend), std::move(model), runner_options);

  // EOS ids of the config and the tokenizer: sampling stops at each, a drafter's reduced vocabulary keeps them.
  std::vector<int32_t> eos_ids = model_config.eos_token_ids;
  for (int32_t id : tokenizer_eos) {
    if (std::find(eos_ids.begin(), eos_ids.end(), id) == eos_ids.end()) eos_ids.push_back(id);
  }

  // Speculative decoding with a model: the draft model loads now, so the KV sizing below leaves room for its cache.
  using Method = SpeculativeConfig::Method;
  const SpeculativeConfig& spec = config.speculative;
  std::unique_ptr<engine::ModelRunner> draft_runner;
  std::optional<engine::DraftVocab> draft_vocab;
  if (spec.method == Method::kDraftModel) {
    const io::ModelConfig draft_config = io::load_model_config_any(spec.model);
    if (draft_config.vocab_size != model_config.vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  "speculative_config.model: " + spec.model + " has a vocabulary of " +
                      std::to_string(draft_config.vocab_size) + " tokens, the model " +
                      std::to_string(model_config.vocab_size) + "; a draft model must share the tokenizer",
                  "speculative_config");
    }
    model::ModelOptions draft_options = options;
    draft_options.random_weights = false;
    draft_options.on_load_progress = nullptr;
    draft_options.quantization.clear();  // the draft declares its own
    auto draft = model::load_model(spec.model, runner->backend(), draft_options);
    draft_vocab = make_draft_vocab(spec, *draft, eos_ids);
    engine::RunnerOptions dro = runner_options;
    dro.verify_rows = 0;  // the drafter only decodes
    dro.max_model_len = std::min<int>(max_model_len, static_cast<int>(draft_config.max_position_embeddings));
    draft_runner = std::make_unique<engine::ModelRunner>(nullptr, std::move(draft), dro);
  }
  if (spec.method == Method::kLookahead && spec.num_branches > 1 && !runner->backend().supports_tree_attention() &&
      !runner->backend().supports_key_tails()) {
    throw Error(ErrorCode::kUnsupported, "speculative_config.num_branches: token trees need tree attention, which the " +
                                             runner->backend().name() + " backend does not have yet (use num_branches 1)",
                "speculative_config");
  }
  std::vector<int> self_layers;
  if (spec.method == Method::kSelf) {
    const int layers = static_cast<int>(model_config.num_hidden_layers);
    if (spec.draft_num_layers > 0) {
      if (spec.draft_num_layers >= layers) {
        throw Error(ErrorCode::kInvalidArgument, "speculative_config.draft_num_layers: " +
                                                     std::to_string(spec.draft_num_layers) + " is not fewer than the model's " +
                                                     std::to_string(layers) + " layers", "speculative_config");
      }
      for (int l = 0; l < spec.draft_num_layers; ++l) self_layers.push_back(l);
    } else {
      self_layers = spec.draft_layers;
      if (self_layers.back() >= layers || static_cast<int>(self_layers.size()) >= layers) {
        throw Error(ErrorCode::kInvalidArgument, "speculative_config.draft_layers: the model has " + std::to_string(layers) +
                                                     " layers (indices 0.." + std::to_string(layers - 1) +
                                                     "); draft with fewer", "speculative_config");
      }
    }
    // The draft layers read and write the target's KV of those layers: only a prefix of the stack computes
    // exactly the KV the target would.
    for (size_t i = 0; i < self_layers.size(); ++i) {
      if (self_layers[i] != static_cast<int>(i)) {
        throw Error(ErrorCode::kUnsupported, "speculative_config.draft_layers: only the first layers (0, 1, 2, ...) can "
                                             "draft, since they share the model's KV", "speculative_config");
      }
    }
  }

  // Warm up with a one-block cache (first-use allocations happen now), then size the real one from what is left.
  runner->profile_run();
  ops::Backend& device = runner->backend();
  const size_t block_bytes = runner->kv_bytes_per_block() + (draft_runner ? draft_runner->kv_bytes_per_block() : 0);
  size_t num_blocks = 0;
  if (config.num_kv_blocks_override > 0) {
    num_blocks = static_cast<size_t>(config.num_kv_blocks_override);
  } else {
    size_t kv_bytes = config.kv_cache_memory_bytes;
    if (kv_bytes == 0) {
      const size_t free = device.free_memory();
      kv_bytes = static_cast<size_t>(static_cast<double>(free) * config.gpu_memory_utilization);
      if (!device.is_host() || on_gpu) {
        kv_bytes = kv_bytes > 512 * kMiB ? kv_bytes - 512 * kMiB : kv_bytes / 2;  // room for activations
      } else {
        kv_bytes = std::min({kv_bytes, free / 4, kHostKvCap});
      }
      // Never more than every sequence at full length could use.
      const size_t useful = (static_cast<size_t>(max_model_len) / config.block_size + 1) *
                            static_cast<size_t>(config.max_num_seqs) * block_bytes;
      kv_bytes = std::min(kv_bytes, useful);
    }
    num_blocks = kv_bytes / block_bytes;
  }
  const int64_t capacity = static_cast<int64_t>(num_blocks) * config.block_size;
  if (capacity < max_model_len) {
    if (config.max_model_len > 0 || capacity < config.block_size * 4) {
      throw Error(ErrorCode::kResourceExhausted,
                  "the KV cache holds only " + std::to_string(capacity) + " tokens (" + std::to_string(num_blocks) +
                      " blocks), fewer than max_model_len " + std::to_string(max_model_len) +
                      "; raise --gpu-memory-utilization or lower --max-model-len");
    }
    max_model_len = static_cast<int>(capacity);
  }
  runner->allocate_kv_cache(static_cast<int>(num_blocks));
  if (draft_runner) draft_runner->allocate_kv_cache(static_cast<int>(num_blocks));
  // On a GPU, run every decode bucket once now (graph capture) so first requests pay nothing; on the CPU there
  // is nothing to capture and a full-budget prefill would only slow startup.
  if (!device.is_host()) {
    runner->warm_up();
    if (draft_runner) draft_runner->warm_up();
  }

  engine::EngineCoreConfig core_config;
  core_config.max_model_len = max_model_len;
  core_config.max_num_seqs = config.max_num_seqs;
  core_config.max_num_batched_tokens = budget;
  core_config.block_size = config.block_size;
  core_config.num_blocks = static_cast<int>(num_blocks);
  core_config.enable_prefix_caching = config.enable_prefix_caching;
  if (config.kv_offloading_size > 0 && config.enable_prefix_caching) {
    const double bytes = config.kv_offloading_size * 1024.0 * 1024.0 * 1024.0;
    core_config.host_kv_blocks = static_cast<int>(std::min(bytes / static_cast<double>(runner->kv_bytes_per_block()), 1e9));
    if (!config.kv_cache_dir.empty()) {
      core_config.kv_cache_dir = config.kv_cache_dir;
      core_config.kv_cache_disk_bytes = static_cast<uint64_t>(config.kv_cache_disk_gb * 1e9);
      core_config.kv_identity = kv_identity(config, runner->kv_cache().config(), options.random_seed);
    }
  }
  core_config.seed = config.seed;
  core_config.max_queued_requests = config.max_queued_requests;
  core_config.speculative = config.speculative;
  // PEREGRINE_SAMPLING=host keeps every row's sampling on the host, =backend sends what it can to the backend's
  // sampling op even on host backends (comparisons, tests and debugging; see docs).
  if (const char* where = std::getenv("PEREGRINE_SAMPLING"); where && std::string(where) == "host")
    core_config.device_sampling = -1;
  else if (where && std::string(where) == "backend")
    core_config.device_sampling = 1;
  core_config.eos_token_ids = eos_ids;

  ModelInfo info;
  info.model_path = config_only ? config.config_file : model_dir.string();
  info.architecture = model_config.architecture_name;
  info.backend = device.name();
  info.dtype = dtype_label(choice.activation_dtype);
  info.vocab_size = static_cast<int>(model_config.vocab_size);
  info.max_model_len = max_model_len;
  info.block_size = config.block_size;
  info.num_kv_blocks = static_cast<int>(num_blocks);
  info.kv_capacity_tokens = capacity;
  info.weight_bytes = runner->model().weight_bytes();
  info.decode_weight_bytes = runner->model().decode_weight_bytes();
  info.kv_cache_bytes = num_blocks * block_bytes;
  info.eos_token_ids = core_config.eos_token_ids;
  info.has_chat_template = codec->has_chat_template();
  info.has_tokenizer = !no_tokenizer;
  info.num_layers = static_cast<int>(model_config.num_hidden_layers);
  info.hidden_size = static_cast<int>(model_config.hidden_size);
  info.intermediate_size = static_cast<int>(model_config.intermediate_size);
  info.num_attention_heads = static_cast<int>(model_config.num_attention_heads);
  info.num_key_value_heads = static_cast<int>(model_config.num_key_value_heads);
  info.head_dim = static_cast<int>(model_config.head_dim);
  info.kv_bytes_per_token = block_bytes / static_cast<size_t>(config.block_size);
  info.tie_word_embeddings = model_config.tie_word_embeddings;
  info.max_num_batched_tokens = core_config.max_num_batched_tokens;
  info.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto core = std::make_unique<engine::EngineCore>(std::move(runner), std::move(codec), core_config, std::move(info));
  core->set_default_sampling_params(defaults);
  if (config.speculative.enabled()) {
    using Method = SpeculativeConfig::Method;
    if (spec.method == Method::kDraftModel) {
      auto proposer = std::make_unique<engine::ModelProposer>(std::move(draft_runner), static_cast<int>(num_blocks),
                                                              config.block_size, core_config.eos_token_ids);
      if (draft_vocab) proposer->set_draft_vocab(std::move(*draft_vocab));
      proposer->set_context(spec.drafter_context());
      core->set_proposer(std::move(proposer));
    } else if (spec.method == Method::kSelf) {
      engine::ModelRunner& target = core->runner();
      model::ModelOptions sub_options = options;
      sub_options.random_weights = false;
      engine::RunnerOptions sro = runner_options;
      sro.verify_rows = 0;
      auto self_model = target.model().layer_subset(self_layers, sub_options);
      // A compact copy of the LM head's rows: the target's own head stays whole.
      std::optional<engine::DraftVocab> self_vocab = make_draft_vocab(spec, *self_model, eos_ids);
      auto self_runner = std::make_unique<engine::ModelRunner>(nullptr, std::move(self_model), sro);
      self_runner->use_kv_cache(engine::KvCache::view_of(target.kv_cache(), self_layers));
      if (!target.backend().is_host()) self_runner->warm_up();
      auto proposer = std::make_unique<engine::ModelProposer>(std::move(self_runner), core->kv_manager(),
                                                              core_config.eos_token_ids);
      if (self_vocab) proposer->set_draft_vocab(std::move(*self_vocab));
      core->set_proposer(std::move(proposer));
    } else {
      const engine::TextCodec& text = core->codec();
      core->set_proposer(engine::make_text_proposer(
          config.speculative, [&text](const std::string& s) { return text.encode(s, false); }));
    }
  }
  return std::make_unique<Engine>(std::move(core));
}

}  // namespace peregrine
