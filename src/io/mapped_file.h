// MappedFile: a read-only memory map of a whole file (weights are used in place from the page cache).
#pragma once

#include <cstddef>
#include <filesystem>

namespace peregrine::io {

class MappedFile {
 public:
  // Throws Error(kNotFound / kIoError) naming the path.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Drops the whole pages inside [p, p + bytes) from the process (madvise DONTNEED): they stay readable and come
  // back from the page cache or the file when touched. No-op for a range outside the map.
  void release_pages(const void* p, size_t bytes) const;

 private:
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace peregrine::io
