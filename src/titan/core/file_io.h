#pragma once
// The POSIX file operations that std::fstream does not offer: what a crash-safe save needs (fsync
// of files and directories, a rename that swaps two directories) and read-only memory maps.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace titan {

// A file being written (created or truncated), its CRC-32C and size kept as bytes go out.
// Errors name the file and the system's reason.
class OutFile {
 public:
  explicit OutFile(std::filesystem::path path);
  ~OutFile();
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(const void* data, size_t n);
  // fsync: the bytes written so far are on disk once this returns.
  void sync();
  // Closes the file, reporting a failure the kernel only reveals then (NFS, quotas).
  void close();
  uint64_t bytes() const { return bytes_; }
  uint32_t crc32c() const { return crc_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
};

// Whether `name` names a file directly inside a folder. A file name read from a checkpoint's
// metadata must: anything else ("../x", "/etc/passwd", "a/b") would read or overwrite files
// elsewhere.
bool is_plain_file_name(const std::string& name);

// fsync of a directory: makes the creation, removal and renaming of its entries durable.
void sync_directory(const std::filesystem::path& dir);

// Moves directory `from` to `to`. When `to` exists, the two are swapped in one atomic step
// (renameat2 RENAME_EXCHANGE), so that `to` is whole, old or new, at every instant; `from` then
// holds the old one.
void rename_directory(const std::filesystem::path& from, const std::filesystem::path& to);

// A whole file mapped read-only: large files (checkpoints, token shards) are paged in as they are
// read, and pages of a file several processes map are shared. Errors name the file.
class MappedFile {
 public:
  explicit MappedFile(std::filesystem::path path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string_view bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }

 private:
  std::filesystem::path path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace titan
