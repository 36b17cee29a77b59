#include "titan/core/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "titan/core/error.h"

namespace titan {

namespace fs = std::filesystem;

std::string this_process() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  std::string out = "pid ";
  out += std::to_string(::getpid());
  out += " on host ";
  out += host;
  return out;
}

void check_writable(const fs::path& folder, const std::string& what) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  TITAN_CHECK(!ec, what, " ", folder.string(), " cannot be created: ", ec.message(),
              "; choose a folder this user can write (job.dump_folder)");
  // Unique per process: ranks of one job may probe one shared folder at once.
  fs::path probe = folder / ".titan-write-probe-";
  probe += std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = errno;
  TITAN_CHECK(fd >= 0, what, " ", folder.string(),
              " is not writable (creating a file in it failed: ", std::strerror(err),
              "); fix its permissions or choose another folder (job.dump_folder)");
  ::close(fd);
  ::unlink(probe.c_str());
}

std::optional<FolderLock> FolderLock::try_lock(const fs::path& folder, const std::string& file_name,
                                               std::string* holder) {
  fs::path path = folder / file_name;
  // Not truncated on open: the holder's line must stay readable to the process refused.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  const int err = errno;
  TITAN_CHECK(fd >= 0, "cannot open the lock file ", path.string(), ": ", std::strerror(err), "; check that ",
              folder.string(), " is writable");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_err = errno;
    if (holder) {
      char buf[256] = {};
      const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
      *holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "an unknown process";
      while (!holder->empty() && (holder->back() == '\n' || holder->back() == ' ')) holder->pop_back();
    }
    ::close(fd);
    TITAN_CHECK(
        lock_err == EWOULDBLOCK, "cannot lock ", path.string(), ": ", std::strerror(lock_err),
        "; a file system without flock (some network mounts) cannot guard the folder, choose a local one");
    return std::nullopt;
  }
  const std::string me = this_process() + "\n";
  const bool written =
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
  const int write_err = errno;
  if (!written) ::close(fd);
  TITAN_CHECK(written, "cannot write the lock file ", path.string(), ": ", std::strerror(write_err),
              "; check that ", folder.string(), " is writable and has space");
  return FolderLock(std::move(path), fd);
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);
}

FolderLock::FolderLock(FolderLock&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace titan
