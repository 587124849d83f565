// Reading the files a subcommand is pointed at (prompts, messages, datasets), with errors naming the flag and path.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "peregrine/error.h"

namespace peregrine::cli {

// The whole file; throws Error(kNotFound / kIoError) "FLAG: cannot read PATH" (FLAG may be empty).
inline std::string read_file(const std::string& path, const std::string& flag = {}) {
  std::ifstream in(path, std::ios::binary);
  const std::string who = flag.empty() ? std::string() : flag + ": ";
  if (!in) {
    const bool exists = std::filesystem::exists(path);
    throw Error(exists ? ErrorCode::kIoError : ErrorCode::kNotFound,
                who + path + (exists ? ": cannot be read" : ": not found"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace peregrine::cli
