// `peregrine tokenize` and `peregrine detokenize`: text <-> token ids with a model folder's tokenizer.
//   tokenize --model DIR (--text T | --file F) [--no-special] [--json] [--jsonl]
//     --jsonl: F holds one JSON string per line; prints one {"ids": [...]} line per input line (batch mode).
//   detokenize --model DIR (--ids 1,2,3 | --file F) [--keep-special] [--json] [--stream]
//     --file: one JSON array of ids per line, one {"text": ...} line each (with --stream also "deltas", the
//     streaming detokenizer's pieces).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/files.h"
#include "peregrine/error.h"
#include "peregrine/tokenizer.h"

namespace peregrine::cli {
namespace {

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos == 0 || pos != item.size() || v < 0 || v > INT32_MAX)
      throw Error(ErrorCode::kInvalidArgument, "--ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// JSON output that never fails on invalid UTF-8 (decoded text is always valid, but be safe).
std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

struct TokenizeArgs {
  std::string model, text, file;
  bool no_special = false, json = false, jsonl = false;
};

void run_tokenize(const TokenizeArgs& a) {
  auto tok = Tokenizer::load(a.model);
  if (a.jsonl) {
    std::ifstream f(a.file, std::ios::binary);
    if (!f) throw Error(ErrorCode::kNotFound, "cannot read " + a.file);
    std::string line;
    size_t n = 0;
    std::vector<int32_t> ids;
    while (std::getline(f, line)) {
      ++n;
      if (line.empty()) continue;
      nlohmann::json in;
      try {
        in = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw Error(ErrorCode::kInvalidArgument, a.file + ":" + std::to_string(n) + ": not JSON: " + e.what());
      }
      std::string text = in.is_string() ? in.get<std::string>() : in.value("text", "");
      nlohmann::json out;
      try {
        ids.clear();
        tok->encode_into(text, !a.no_special, ids);
        out["ids"] = ids;
      } catch (const Error& e) {
        out["error"] = e.message();
      }
      std::cout << dump(out) << "\n";
    }
    return;
  }
  std::string text = a.file.empty() ? a.text : read_file(a.file, "--file");
  std::vector<int32_t> ids = tok->encode(text, !a.no_special);
  if (a.json) {
    std::cout << dump(nlohmann::json{{"ids", ids}}) << "\n";
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
}

struct DetokenizeArgs {
  std::string model, ids, file;
  bool keep_special = false, json = false, stream = false;
};

nlohmann::json detokenize_one(const Tokenizer& tok, const std::vector<int32_t>& ids, const DetokenizeArgs& a) {
  nlohmann::json out;
  out["text"] = tok.decode(ids, !a.keep_special);
  if (a.stream) {
    auto stream = tok.stream(!a.keep_special);
    nlohmann::json deltas = nlohmann::json::array();
    for (int32_t id : ids) deltas.push_back(stream->push(id));
    deltas.push_back(stream->flush());
    out["deltas"] = deltas;
  }
  return out;
}

void run_detokenize(const DetokenizeArgs& a) {
  auto tok = Tokenizer::load(a.model);
  if (!a.file.empty()) {
    std::ifstream f(a.file, std::ios::binary);
    if (!f) throw Error(ErrorCode::kNotFound, "cannot read " + a.file);
    std::string line;
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      auto ids = nlohmann::json::parse(line).get<std::vector<int32_t>>();
      std::cout << dump(detokenize_one(*tok, ids, a)) << "\n";
    }
    return;
  }
  std::vector<int32_t> ids = parse_id_list(a.ids);
  if (a.json || a.stream) {
    std::cout << dump(detokenize_one(*tok, ids, a)) << "\n";
    return;
  }
  std::cout << tok->decode(ids, !a.keep_special) << "\n";
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto targs = std::make_shared<TokenizeArgs>();
  CLI::App* t = app.add_subcommand("tokenize", "Turn text into token ids with a model folder's tokenizer");
  t->add_option("--model", targs->model, "Model folder (tokenizer.json, tokenizer_config.json) or GGUF file")->required();
  auto* text = t->add_option("--text", targs->text, "Text to tokenize");
  auto* file = t->add_option("--file", targs->file, "File whose content to tokenize");
  text->excludes(file);
  t->add_flag("--no-special", targs->no_special, "Do not add special tokens (BOS/EOS)");
  t->add_flag("--json", targs->json, "Print {\"ids\": [...]}");
  t->add_flag("--jsonl", targs->jsonl, "Batch: --file holds one JSON string per line; one {\"ids\"} line each");
  t->callback([targs, text, file] {
    if (text->count() == 0 && file->count() == 0) throw Error(ErrorCode::kInvalidArgument, "tokenize needs --text or --file");
    if (targs->jsonl && targs->file.empty()) throw Error(ErrorCode::kInvalidArgument, "--jsonl needs --file");
    run_tokenize(*targs);
  });

  auto dargs = std::make_shared<DetokenizeArgs>();
  CLI::App* d = app.add_subcommand("detokenize", "Turn token ids back into text");
  d->add_option("--model", dargs->model, "Model folder")->required();
  auto* ids = d->add_option("--ids", dargs->ids, "Comma-separated token ids");
  auto* dfile = d->add_option("--file", dargs->file, "Batch: one JSON array of ids per line");
  ids->excludes(dfile);
  d->add_flag("--keep-special", dargs->keep_special, "Keep special tokens in the text");
  d->add_flag("--json", dargs->json, "Print {\"text\": ...}");
  d->add_flag("--stream", dargs->stream, "Also print the streaming detokenizer's deltas");
  d->callback([dargs, ids, dfile] {
    if (ids->count() == 0 && dfile->count() == 0) throw Error(ErrorCode::kInvalidArgument, "detokenize needs --ids or --file");
    run_detokenize(*dargs);
  });
}

}  // namespace peregrine::cli
