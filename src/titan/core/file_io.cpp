#include "titan/core/file_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "titan/core/crc32c.h"
#include "titan/core/error.h"

namespace titan {

namespace fs = std::filesystem;

OutFile::OutFile(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, "cannot create ", path_.string(), ": ", std::strerror(errno),
              "; check that the folder is writable");
}

OutFile::~OutFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutFile::write(const void* data, size_t n) {
  crc_ = crc32c_extend(crc_, data, n);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    TITAN_CHECK(w > 0, "writing ", path_.string(), " failed after ", bytes_,
                " bytes: ", std::strerror(errno), "; is the disk full?");
    p += w;
    n -= static_cast<size_t>(w);
    bytes_ += static_cast<uint64_t>(w);
  }
}

void OutFile::sync() {
  TITAN_CHECK(::fsync(fd_) == 0, "fsync of ", path_.string(), " failed: ", std::strerror(errno));
}

void OutFile::close() {
  int fd = fd_;
  fd_ = -1;
  TITAN_CHECK(::close(fd) == 0, "closing ", path_.string(), " failed: ", std::strerror(errno));
}

bool is_plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

void sync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "cannot open folder ", dir.string(), ": ", std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  TITAN_CHECK(rc == 0, "fsync of folder ", dir.string(), " failed: ", std::strerror(err));
}

void rename_directory(const fs::path& from, const fs::path& to) {
  int rc = ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
  if (rc != 0 && errno == EEXIST) {
    rc = ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE);
  } else if (rc != 0 && errno == EINVAL && !fs::exists(to)) {
    rc = ::rename(from.c_str(), to.c_str());  // a file system without renameat2's flags
  }
  TITAN_CHECK(rc == 0, "cannot rename ", from.string(), " to ", to.string(), ": ",
              std::strerror(errno), "; what was at ", to.string(), " is untouched");
}

MappedFile::MappedFile(fs::path path) : path_(std::move(path)) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "cannot open ", path_.string(), ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    TITAN_CHECK(false, "cannot stat ", path_.string(), ": ", std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  // mmap refuses a length of 0; an empty file is an empty view.
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);  // the mapping keeps the file open
    TITAN_CHECK(map != MAP_FAILED, "cannot map ", path_.string(), ": ", std::strerror(err));
    data_ = static_cast<const char*>(map);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<char*>(data_), size_);
}

}  // namespace titan
