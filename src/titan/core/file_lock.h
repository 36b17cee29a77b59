#pragma once
// An exclusive lock on a folder, held for a process's lifetime: flock on a lock file inside it.
// The kernel drops the lock when its holder exits in any way (kill -9 included), so a lock file
// left by a dead process never blocks; the file itself stays and only says who held it last.
#include <filesystem>
#include <optional>
#include <string>

namespace titan {

class FolderLock {
 public:
  // Takes the lock of the existing `folder` through `folder`/`file_name`, and writes this
  // process's pid and host into it. nullopt when another process holds it; `holder` then gets
  // what that one wrote ("pid 123 on host x"). Throws, naming the file, when the lock file cannot
  // be opened or written.
  static std::optional<FolderLock> try_lock(const std::filesystem::path& folder, const std::string& file_name,
                                            std::string* holder = nullptr);
  ~FolderLock();
  FolderLock(FolderLock&& other) noexcept;
  FolderLock& operator=(FolderLock&& other) noexcept;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  FolderLock(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_ = -1;
};

// "pid <pid> on host <hostname>", as FolderLock writes it.
std::string this_process();

// Creates `folder` when missing, and throws, naming it (as `what`) and the system's reason,
// unless this process can create a file in it (checked by creating and removing one): a folder
// that a run writes into late is checked before the run.
void check_writable(const std::filesystem::path& folder, const std::string& what);

}  // namespace titan
