// config.json / generation_config.json parsing for the supported architectures.
#include "io/hf_config.h"

#include <fstream>
#include <regex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/status.h"

namespace peregrine::io {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class Fields {
 public:
  Fields(const json& j, std::string file, std::string prefix = "") : j_(j), file_(std::move(file)), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(ErrorCode::kFormatError, file_ + ": field '" + prefix_ + field + "' " + what);
  }
  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  int64_t int_required(const char* k) const {
    if (!has(k)) fail(k, "is missing");
    return int_value(k);
  }
  int64_t int_or(const char* k, int64_t def) const { return has(k) ? int_value(k) : def; }
  double num_or(const char* k, double def) const {
    if (!has(k)) return def;
    if (!j_[k].is_number()) fail(k, "must be a number");
    return j_[k].get<double>();
  }
  std::optional<double> num_opt(const char* k) const {
    if (!has(k)) return std::nullopt;
    return num_or(k, 0);
  }
  bool bool_or(const char* k, bool def) const {
    if (!has(k)) return def;
    if (!j_[k].is_boolean()) fail(k, "must be true or false");
    return j_[k].get<bool>();
  }
  std::string str_or(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    if (!j_[k].is_string()) fail(k, "must be a string");
    return j_[k].get<std::string>();
  }
  // An id or a list of ids.
  std::vector<int32_t> ids(const char* k) const {
    std::vector<int32_t> out;
    if (!has(k)) return out;
    auto add = [&](const json& v) {
      if (!v.is_number_integer()) fail(k, "must be an integer or a list of integers");
      out.push_back(v.get<int32_t>());
    };
    if (j_[k].is_array()) {
      for (auto& v : j_[k]) add(v);
    } else {
      add(j_[k]);
    }
    return out;
  }

 private:
  int64_t int_value(const char* k) const {
    const json& v = j_[k];
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      return static_cast<int64_t>(v.get<double>());
    fail(k, "must be an integer");
  }
  const json& j_;
  std::string file_;
  std::string prefix_;
};

RopeConfig parse_rope(const json& root, const std::string& file) {
  RopeConfig rope;
  Fields top(root, file);
  // transformers-5: rope_parameters holds theta and scaling; classic: rope_theta + rope_scaling.
  const json* params = nullptr;
  std::string prefix;
  if (root.contains("rope_parameters") && root["rope_parameters"].is_object()) {
    params = &root["rope_parameters"];
    prefix = "rope_parameters.";
  } else if (root.contains("rope_scaling") && root["rope_scaling"].is_object()) {
    params = &root["rope_scaling"];
    prefix = "rope_scaling.";
  } else if (root.contains("rope_scaling") && !root["rope_scaling"].is_null()) {
    top.fail("rope_scaling", "must be an object or null");
  }
  rope.theta = top.num_or("rope_theta", 10000.0);
  rope.partial_rotary_factor = top.num_or("partial_rotary_factor", 1.0);
  if (!params) return rope;
  Fields f(*params, file, prefix);
  rope.theta = f.num_or("rope_theta", rope.theta);
  rope.partial_rotary_factor = f.num_or("partial_rotary_factor", rope.partial_rotary_factor);
  std::string type = f.str_or("rope_type", f.str_or("type", "default"));
  if (type == "default") rope.type = RopeType::kDefault;
  else if (type == "linear") rope.type = RopeType::kLinear;
  else if (type == "dynamic") rope.type = RopeType::kDynamic;
  else if (type == "llama3") rope.type = RopeType::kLlama3;
  else if (type == "yarn") rope.type = RopeType::kYarn;
  else throw Error(ErrorCode::kUnsupported, file + ": field '" + prefix + "rope_type' is '" + type +
                                               "'; supported: default, linear, dynamic, llama3, yarn");
  if (rope.type != RopeType::kDefault) {
    if (!f.has("factor")) f.fail("factor", "is missing (required for rope_type " + type + ")");
    rope.factor = f.num_or("factor", 1.0);
    if (rope.factor <= 0) f.fail("factor", "must be positive");
  }
  rope.low_freq_factor = f.num_or("low_freq_factor", 1.0);
  rope.high_freq_factor = f.num_or("high_freq_factor", 4.0);
  rope.original_max_position_embeddings = f.int_or("original_max_position_embeddings", 0);
  if (rope.type == RopeType::kLlama3) {
    if (!f.has("original_max_position_embeddings")) f.fail("original_max_position_embeddings", "is missing (llama3)");
    if (rope.high_freq_factor <= rope.low_freq_factor) f.fail("high_freq_factor", "must exceed low_freq_factor");
  }
  rope.attention_factor = f.num_opt("attention_factor");
  rope.beta_fast = f.num_or("beta_fast", 32.0);
  rope.beta_slow = f.num_or("beta_slow", 1.0);
  rope.mscale = f.num_opt("mscale");
  rope.mscale_all_dim = f.num_opt("mscale_all_dim");
  rope.truncate = f.bool_or("truncate", true);
  return rope;
}

}  // namespace

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ErrorCode code = fs::exists(path) ? ErrorCode::kIoError : ErrorCode::kNotFound;
    throw Error(code, path.string() + ": " + (code == ErrorCode::kNotFound ? "not found" : "cannot be read"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ModelConfig parse_model_config(const std::string& text, const std::string& file) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kFormatError, file + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(ErrorCode::kFormatError, file + ": top level is not a JSON object");
  Fields f(root, file);
  ModelConfig c;
  c.model_type = f.str_or("model_type", "");
  if (root.contains("architectures") && root["architectures"].is_array() && !root["architectures"].empty() &&
      root["architectures"][0].is_string())
    c.architecture_name = root["architectures"][0].get<std::string>();
  const std::string& a = c.architecture_name;
  if (a == "LlamaForCausalLM" || (a.empty() && c.model_type == "llama")) c.architecture = Architecture::kLlama;
  else if (a == "MistralForCausalLM" || (a.empty() && c.model_type == "mistral")) c.architecture = Architecture::kMistral;
  else if (a == "Qwen2ForCausalLM" || (a.empty() && c.model_type == "qwen2")) c.architecture = Architecture::kQwen2;
  else if (a == "Qwen3ForCausalLM" || (a.empty() && c.model_type == "qwen3")) c.architecture = Architecture::kQwen3;
  else
    throw Error(ErrorCode::kUnsupported,
                file + ": field 'architectures' is '" + (a.empty() ? c.model_type : a) +
                    "'; supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM");
  if (c.architecture_name.empty()) c.architecture_name = c.model_type;

  c.hidden_size = f.int_required("hidden_size");
  c.intermediate_size = f.int_required("intermediate_size");
  c.num_hidden_layers = f.int_required("num_hidden_layers");
  c.num_attention_heads = f.int_required("num_attention_heads");
  c.num_key_value_heads = f.int_or("num_key_value_heads", c.num_attention_heads);
  c.vocab_size = f.int_required("vocab_size");
  if (c.hidden_size <= 0) f.fail("hidden_size", "must be positive");
  if (c.intermediate_size <= 0) f.fail("intermediate_size", "must be positive");
  if (c.num_hidden_layers <= 0) f.fail("num_hidden_layers", "must be positive");
  if (c.num_attention_heads <= 0) f.fail("num_attention_heads", "must be positive");
  if (c.vocab_size <= 0) f.fail("vocab_size", "must be positive");
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    f.fail("num_key_value_heads", "must divide num_attention_heads");
  if (f.has("head_dim")) {
    c.head_dim = f.int_required("head_dim");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) f.fail("hidden_size", "is not a multiple of num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) f.fail("head_dim", "must be a positive even number");
  c.max_position_embeddings = f.int_or("max_position_embeddings", 2048);
  c.rms_norm_eps = f.num_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.bool_or("tie_word_embeddings", false);
  bool attention_bias = f.bool_or("attention_bias", false);
  c.mlp_bias = f.bool_or("mlp_bias", false);
  switch (c.architecture) {
    case Architecture::kLlama:
      c.attention_bias = attention_bias;
      c.o_proj_bias = attention_bias;
      break;
    case Architecture::kMistral: break;
    case Architecture::kQwen2: c.attention_bias = true; break;
    case Architecture::kQwen3:
      c.attention_bias = attention_bias;
      c.o_proj_bias = attention_bias;
      c.qk_norm = true;
      break;
  }
  if (c.architecture == Architecture::kMistral) {
    c.sliding_window = f.int_or("sliding_window", 0);
  } else if (c.architecture == Architecture::kQwen2 || c.architecture == Architecture::kQwen3) {
    if (f.bool_or("use_sliding_window", false))
      throw Error(ErrorCode::kUnsupported, file + ": field 'use_sliding_window' true is not supported for " + a);
  }
  std::string dtype_name = f.str_or("dtype", f.str_or("torch_dtype", "bfloat16"));
  auto dt = parse_dtype(dtype_name);
  if (!dt || !(*dt == DType::kF32 || *dt == DType::kBF16 || *dt == DType::kF16))
    throw Error(ErrorCode::kUnsupported, file + ": field 'dtype' is '" + dtype_name + "'; supported: float32, bfloat16, float16");
  c.torch_dtype = *dt;
  c.rope = parse_rope(root, file);
  if (c.rotary_dim() <= 0 || c.rotary_dim() % 2 != 0 || c.rotary_dim() > c.head_dim)
    f.fail("partial_rotary_factor", "gives a rotary dimension that is not even and within head_dim");
  auto bos = f.ids("bos_token_id");
  if (!bos.empty()) c.bos_token_id = bos[0];
  c.eos_token_ids = f.ids("eos_token_id");
  auto pad = f.ids("pad_token_id");
  if (!pad.empty()) c.pad_token_id = pad[0];
  if (root.contains("quantization_config")) {
    const json& q = root["quantization_config"];
    if (!q.is_object() || !q.contains("quant_method") || !q["quant_method"].is_string())
      throw Error(ErrorCode::kFormatError, file + ": field 'quantization_config.quant_method' must be a string");
    c.quant = parse_quant_config(q.dump(), file, "quantization_config.");
    c.quant_method = c.quant.method;
  }
  return c;
}

QuantConfig parse_quant_config(const std::string& text, const std::string& file, const std::string& prefix) {
  const json q = json::parse(text);
  Fields f(q, file, prefix);
  QuantConfig c;
  c.file = file;
  c.method = f.str_or("quant_method", "");
  auto field = [&](const std::string& name) { return file + ": field '" + prefix + name + "'"; };
  auto refuse = [&](const std::string& name, const std::string& value, const std::string& why) {
    if (c.unsupported.empty()) c.unsupported = field(name) + " is " + value + ": " + why;
  };
  auto names = [&](const json& j, const std::string& name) {
    std::vector<std::string> out;
    if (j.is_null()) return out;
    if (!j.is_array()) throw Error(ErrorCode::kFormatError, field(name) + " must be a list of strings");
    for (const json& v : j) {
      if (!v.is_string()) throw Error(ErrorCode::kFormatError, field(name) + " must be a list of strings");
      out.push_back(v.get<std::string>());
    }
    return out;
  };
  if (c.method == "gptq" || c.method == "gptq_marlin") {
    c.method = "gptq";
    c.bits = static_cast<int>(f.int_or("bits", 4));
    c.group_size = f.int_or("group_size", 128);
    c.desc_act = f.bool_or("desc_act", false);
    c.sym = f.bool_or("sym", true);
    c.lm_head = f.bool_or("lm_head", false);
    const std::string fmt = f.str_or("checkpoint_format", "gptq");
    if (fmt == "gptq_v2") c.gptq_v1_zeros = false;
    else if (fmt != "gptq") refuse("checkpoint_format", "'" + fmt + "'", "supported: gptq, gptq_v2");
    if (c.bits != 4 && c.bits != 8) refuse("bits", std::to_string(c.bits), "supported: 4, 8");
    if (c.lm_head) refuse("lm_head", "true", "a quantized lm_head is not supported");
  } else if (c.method == "awq" || c.method == "awq_marlin") {
    c.method = "awq";
    c.bits = static_cast<int>(f.int_or("bits", f.int_or("w_bit", 4)));
    c.group_size = f.int_or("group_size", f.int_or("q_group_size", 128));
    c.sym = !f.bool_or("zero_point", true);
    const std::string version = f.str_or("version", "gemm");
    if (version != "gemm" && version != "GEMM") refuse("version", "'" + version + "'", "supported: gemm");
    if (c.bits != 4) refuse("bits", std::to_string(c.bits), "supported: 4");
    if (c.sym) refuse("zero_point", "false", "AWQ checkpoints without zero points are not supported");
    if (q.contains("modules_to_not_convert")) c.ignore = names(q["modules_to_not_convert"], "modules_to_not_convert");
  } else if (c.method == "compressed-tensors") {
    const std::string fmt = f.str_or("format", "");
    if (q.contains("ignore")) c.ignore = names(q["ignore"], "ignore");
    if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
      throw Error(ErrorCode::kFormatError, field("config_groups") + " must be a non-empty object");
    if (q["config_groups"].size() != 1)
      refuse("config_groups", std::to_string(q["config_groups"].size()) + " groups", "one scheme per model is supported");
    const auto& [gname, g] = *q["config_groups"].items().begin();
    const std::string gp = "config_groups." + gname + ".";
    if (!g.is_object()) throw Error(ErrorCode::kFormatError, field(gp) + " must be an object");
    if (g.contains("targets")) c.targets = names(g["targets"], gp + "targets");
    const std::string gfmt = g.contains("format") && g["format"].is_string() ? g["format"].get<std::string>() : fmt;
    if (!g.contains("weights") || !g["weights"].is_object())
      throw Error(ErrorCode::kFormatError, field(gp + "weights") + " must be an object");
    Fields w(g["weights"], file, prefix + gp + "weights.");
    c.bits = static_cast<int>(w.int_or("num_bits", 0));
    const std::string type = w.str_or("type", "int");
    const std::string strategy = w.str_or("strategy", "tensor");
    c.sym = w.bool_or("symmetric", true);
    c.group_size = strategy == "group" ? w.int_or("group_size", 0) : -1;
    const std::string actorder = w.str_or("actorder", "");
    c.desc_act = actorder == "group" || actorder == "weight";
    const bool act_quant = g.contains("input_activations") && !g["input_activations"].is_null();
    c.strategy = strategy;
    c.weight_type = type;
    c.format = gfmt;
    // input_activations: 8-bit, dynamic, symmetric, per token (or per group for float); what W8A8 and W4A8 share.
    auto parse_acts = [&] {
      Fields a(g["input_activations"], file, prefix + gp + "input_activations.");
      const std::string at = a.str_or("type", "int"), as = a.str_or("strategy", "tensor");
      const int64_t ab = a.int_or("num_bits", 0);
      if (at != type) refuse(gp + "input_activations.type", "'" + at + "'", "must match the weights' type '" + type + "'");
      else if (ab != 8) refuse(gp + "input_activations.num_bits", std::to_string(ab), "supported: 8");
      else if (!a.bool_or("dynamic", false))
        refuse(gp + "input_activations.dynamic", "false", "static activation scales are not supported (dynamic per-token ones are)");
      else if (!a.bool_or("symmetric", true))
        refuse(gp + "input_activations.symmetric", "false", "asymmetric activations are not supported");
      else if (as != "token" && !(as == "group" && type == "float"))
        refuse(gp + "input_activations.strategy", "'" + as + "'", type == "float" ? "supported: token, group" : "supported: token");
      c.act_bits = 8;
      c.act_type = at;
      if (as == "group") {
        c.act_group = a.int_or("group_size", 0);
        if (c.act_group <= 0) refuse(gp + "input_activations.group_size", std::to_string(c.act_group), "must be positive");
      }
    };
    // int4 weights in int-quantized (one int8 per value) or, with 8-bit activations, pack-quantized form: W4A8
    // (QServe-style; compressed-tensors' W4A8 preset) needs symmetric int, group or channel, no act-order; int4 in
    // int-quantized form without activations is weight-only (W4A16).
    auto check_int4 = [&] {
      const std::string with = act_quant ? "with 8-bit activations" : "in int-quantized form";
      if (type != "int") refuse(gp + "weights.type", "'" + type + "'", "4-bit weights " + with + " must be int");
      else if (!c.sym) refuse(gp + "weights.symmetric", "false", "4-bit weights " + with + " must be symmetric (no zero points)");
      else if (strategy != "group" && strategy != "channel")
        refuse(gp + "weights.strategy", "'" + strategy + "'", "supported with 4-bit weights: group, channel");
      else if (strategy == "group" && c.group_size <= 0)
        refuse(gp + "weights.group_size", std::to_string(c.group_size), "a group strategy needs a positive group_size");
      else if (c.desc_act) refuse(gp + "weights.actorder", "'" + actorder + "'", "act-order is not supported " + with);
      else if (act_quant) parse_acts();
    };
    if (c.bits == 4 && (gfmt == "int-quantized" || (gfmt == "pack-quantized" && act_quant))) {
      check_int4();
    } else if (gfmt == "int-quantized" || gfmt == "float-quantized") {
      // 8-bit codes stored as such (naive_quantized): int8 or float8_e4m3fn `weight` with `weight_scale`.
      const std::string want_type = gfmt == "int-quantized" ? "int" : "float";
      if (w.has("block_structure") && g["weights"]["block_structure"].is_array() &&
          g["weights"]["block_structure"].size() == 2) {
        c.block_n = g["weights"]["block_structure"][0].get<int64_t>();
        c.block_k = g["weights"]["block_structure"][1].get<int64_t>();
      }
      if (type != want_type) {
        refuse(gp + "weights.type", "'" + type + "'", "format " + gfmt + " holds " + want_type + " weights");
      } else if (c.bits != 8) {
        refuse(gp + "weights.num_bits", std::to_string(c.bits), "supported with " + gfmt + ": 4 (int), 8");
      } else if (!c.sym) {
        refuse(gp + "weights.symmetric", "false", "asymmetric 8-bit weights are not supported");
      } else if (strategy != "channel" && strategy != "tensor" && !(strategy == "block" && type == "float")) {
        refuse(gp + "weights.strategy", "'" + strategy + "'",
               type == "float" ? "supported: channel, tensor, block" : "supported: channel, tensor");
      } else if (strategy == "block" && (c.block_n <= 0 || c.block_k <= 0)) {
        refuse(gp + "weights.block_structure", "missing", "a block strategy needs [rows, columns]");
      } else if (act_quant) {
        parse_acts();
      }
      c.group_size = -1;
    } else if (gfmt != "pack-quantized") {
      refuse(gp + "format", "'" + gfmt + "'", "supported: pack-quantized, int-quantized, float-quantized");
    } else if (act_quant) {
      refuse(gp + "input_activations", "set", "quantized activations with pack-quantized weights need num_bits 4 (W4A8)");
    } else if (type != "int") {
      refuse(gp + "weights.type", "'" + type + "'", "supported: int");
    } else if (c.bits != 4 && c.bits != 8) {
      refuse(gp + "weights.num_bits", std::to_string(c.bits), "supported: 4, 8");
    } else if (strategy != "group" && strategy != "channel") {
      refuse(gp + "weights.strategy", "'" + strategy + "'", "supported: group, channel");
    } else if (strategy == "group" && c.group_size <= 0) {
      refuse(gp + "weights.group_size", std::to_string(c.group_size), "a group strategy needs a positive group_size");
    } else if (actorder == "weight") {
      refuse(gp + "weights.actorder", "'weight'", "supported: null, group");
    }
  } else if (c.method == "fp8") {
    // vLLM's Fp8Config: float8_e4m3fn `weight` with a per-tensor `weight_scale`, or 128x128 blocks of
    // `weight_scale_inv` (DeepSeek-V3 / Qwen3-FP8); activations dynamic per token (per token and block column group).
    c.bits = 8;
    c.weight_type = "float";
    c.act_bits = 8;
    c.act_type = "float";
    c.group_size = -1;
    c.strategy = "tensor";
    const std::string fmt = f.str_or("fmt", "e4m3");
    const std::string scheme = f.str_or("activation_scheme", "dynamic");
    if (q.contains("ignored_layers")) c.ignore = names(q["ignored_layers"], "ignored_layers");
    if (q.contains("modules_to_not_convert")) {
      auto more = names(q["modules_to_not_convert"], "modules_to_not_convert");
      c.ignore.insert(c.ignore.end(), more.begin(), more.end());
    }
    if (fmt != "e4m3") refuse("fmt", "'" + fmt + "'", "supported: e4m3");
    else if (scheme != "dynamic")
      refuse("activation_scheme", "'" + scheme + "'", "static activation scales are not supported (dynamic ones are)");
    if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
      const json& b = q["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
          b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
        throw Error(ErrorCode::kFormatError, field("weight_block_size") + " must be a list of two positive integers");
      c.strategy = "block";
      c.block_n = b[0].get<int64_t>();
      c.block_k = b[1].get<int64_t>();
      c.act_group = c.block_k;
    }
  } else if (!c.method.empty()) {
    refuse("quant_method", "'" + c.method + "'", "supported: gptq, awq, compressed-tensors, fp8");
  }
  if (c.unsupported.empty() && c.group_size != -1 && c.group_size <= 0)
    refuse("group_size", std::to_string(c.group_size), "must be positive or -1");
  return c;
}

namespace {
// compressed-tensors matching: "re:" patterns match from the start of the name (Python's re.match), others are
// exact names or, for targets, the class name "Linear".
bool matches(const std::string& pattern, const std::string& module) {
  if (pattern.rfind("re:", 0) == 0) {
    std::regex re(pattern.substr(3));
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  }
  return pattern == module || (module.size() > pattern.size() && module.compare(module.size() - pattern.size(), pattern.size(), pattern) == 0 &&
                               module[module.size() - pattern.size() - 1] == '.');
}
}  // namespace

bool QuantConfig::applies_to(const std::string& module) const {
  if (method.empty()) return false;
  const bool is_head = module == "lm_head";
  for (const std::string& p : ignore) {
    // AWQ's modules_to_not_convert are substrings of module names (as vLLM reads them).
    if (method == "awq" ? module.find(p) != std::string::npos : matches(p, module)) return false;
  }
  if (method == "compressed-tensors") {
    for (const std::string& t : targets)
      if ((t == "Linear" && !is_head) || matches(t, module)) return true;
    return targets.empty() && !is_head;
  }
  return !is_head || lm_head;
}

ModelConfig load_model_config(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw Error(ErrorCode::kNotFound, dir.string() + ": model folder not found");
  const fs::path path = dir / "config.json";
  ModelConfig c = parse_model_config(read_text_file(path), path.string());
  GenerationConfig g = load_generation_config(dir);
  for (int32_t id : g.eos_token_ids)
    if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(id);
  if (!c.bos_token_id && g.bos_token_id) c.bos_token_id = g.bos_token_id;
  // Older GPTQ checkpoints keep their quantization settings in quantize_config.json only.
  if (c.quant_method.empty() && fs::exists(dir / "quantize_config.json")) {
    const fs::path qpath = dir / "quantize_config.json";
    json q;
    try {
      q = json::parse(read_text_file(qpath));
    } catch (const json::exception& e) {
      throw Error(ErrorCode::kFormatError, qpath.string() + ": not valid JSON: " + e.what());
    }
    if (!q.is_object()) throw Error(ErrorCode::kFormatError, qpath.string() + ": must hold a JSON object");
    if (!q.contains("quant_method")) q["quant_method"] = "gptq";
    c.quant = parse_quant_config(q.dump(), qpath.string(), "");
    c.quant_method = c.quant.method;
  }
  return c;
}

GenerationConfig parse_generation_config(const std::string& text, const std::string& file) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::kFormatError, file + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(ErrorCode::kFormatError, file + ": top level is not a JSON object");
  Fields f(root, file);
  GenerationConfig g;
  g.eos_token_ids = f.ids("eos_token_id");
  auto bos = f.ids("bos_token_id");
  if (!bos.empty()) g.bos_token_id = bos[0];
  g.temperature = f.num_opt("temperature");
  g.top_p = f.num_opt("top_p");
  if (f.has("top_k")) g.top_k = f.int_or("top_k", 0);
  g.repetition_penalty = f.num_opt("repetition_penalty");
  if (f.has("max_new_tokens")) g.max_new_tokens = f.int_or("max_new_tokens", 0);
  return g;
}

GenerationConfig load_generation_config(const fs::path& dir) {
  const fs::path path = dir / "generation_config.json";
  if (!fs::exists(path)) return {};
  return parse_generation_config(read_text_file(path), path.string());
}

}  // namespace peregrine::io
