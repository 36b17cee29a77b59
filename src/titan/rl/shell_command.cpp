#include "titan/rl/shell_command.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "titan/core/error.h"

extern char** environ;

namespace titan::rl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kErrTailBytes = 8192;
constexpr size_t kChunk = 65536;

class Fd {
 public:
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// [read end, write end], both closed on exec: the child gets only the ends dup2'ed onto 0, 1, 2.
void make_pipe(Fd& read_end, Fd& write_end) {
  int fds[2];
  TITAN_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "reward program: cannot create a pipe (", std::strerror(errno),
              "); the process is out of file descriptors");
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
}

void set_nonblocking(const Fd& fd) {
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
}

// Writing to a pipe whose reader has gone raises SIGPIPE, which kills a process by default: this
// thread holds it back while it writes (the write fails with EPIPE instead), and discards the one
// its writes raised, so that titan's own signal handling is as it was.
class SigpipeHeld {
 public:
  SigpipeHeld() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    was_pending_ = pending();
  }
  ~SigpipeHeld() {
    if (!was_pending_ && pending()) {
      const timespec now{};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeHeld(const SigpipeHeld&) = delete;
  SigpipeHeld& operator=(const SigpipeHeld&) = delete;

 private:
  bool pending() const {
    sigset_t set;
    sigpending(&set);
    return sigismember(&set, SIGPIPE) == 1;
  }
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

// The started shell: reaped on every path, its process group killed first unless it exited.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) kill_and_reap();
  }
  // Kills the whole group (a pipeline's processes and anything they started) and waits for the
  // shell itself; the others are reparented, so nothing of ours is left a zombie.
  int kill_and_reap() {
    ::kill(-pid_, SIGKILL);
    return reap(0);
  }
  // The status once it has exited; nullopt while it runs (with WNOHANG).
  std::optional<int> try_reap() {
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (r == 0) return std::nullopt;
    pid_ = -1;
    // SIGCHLD set to SIG_IGN reaps children unasked: their exit status is lost.
    TITAN_CHECK(r > 0, "reward program: cannot learn how it exited (waitpid: ", std::strerror(errno),
                "); the process ignores SIGCHLD, which reward programs need");
    return status;
  }

 private:
  int reap(int flags) {
    int status = 0;
    while (::waitpid(pid_, &status, flags) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }
  pid_t pid_;
};

pid_t spawn_shell(const std::string& command, const Fd& in, const Fd& out, const Fd& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A group of its own, so that a timeout kills what the shell started too. Signals as a fresh
  // process has them: titan may block or ignore SIGPIPE, which `head` and friends rely on.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, defaults;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);

  std::string sh = "sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  TITAN_CHECK(rc == 0, "reward program: cannot start /bin/sh -c \"", command, "\" (", std::strerror(rc), ")");
  return pid;
}

// Appends one read of `fd` to `into` (one only: a command that writes without end must not keep
// the caller from its deadline); closes `fd` at its end.
void read_some(Fd& fd, std::string& into) {
  char buf[kChunk];
  ssize_t n;
  while ((n = ::read(fd.get(), buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  if (n > 0) into.append(buf, static_cast<size_t>(n));
  if (n == 0 || (n < 0 && errno != EAGAIN)) fd.reset();  // its end, or an error no retry mends
}

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, std::numeric_limits<int>::max()));
}

}  // namespace

ShellRun run_shell(const std::string& command, std::string_view input, const ShellLimits& limits) {
  Fd in_read, in_write, out_read, out_write, err_read, err_write;
  make_pipe(in_read, in_write);
  make_pipe(out_read, out_write);
  make_pipe(err_read, err_write);
  // Capped at a year: a larger duration would overflow the clock's nanoseconds.
  const double timeout = std::min(limits.timeout_seconds, 365 * 86400.0);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
  Child child(spawn_shell(command, in_read, out_write, err_write));
  in_read.reset();
  out_write.reset();
  err_write.reset();
  for (const Fd* fd : {&in_write, &out_read, &err_read}) set_nonblocking(*fd);

  ShellRun run;
  std::string err;
  size_t written = 0;
  {
    SigpipeHeld held;
    if (input.empty()) in_write.reset();
    while ((out_read.open() || err_read.open()) && !run.timed_out && !run.output_overflow) {
      std::vector<pollfd> fds;
      if (in_write.open()) fds.push_back({in_write.get(), POLLOUT, 0});
      if (out_read.open()) fds.push_back({out_read.get(), POLLIN, 0});
      if (err_read.open()) fds.push_back({err_read.get(), POLLIN, 0});
      const int ready = ::poll(fds.data(), fds.size(), milliseconds_until(deadline));
      TITAN_CHECK(ready >= 0 || errno == EINTR, "reward program: poll failed (", std::strerror(errno), ")");
      if (in_write.open()) {
        const ssize_t n =
            ::write(in_write.get(), input.data() + written, std::min(kChunk, input.size() - written));
        if (n > 0) written += static_cast<size_t>(n);
        // EPIPE: it closed its stdin (or exited) without reading it all, which is its business;
        // its output says whether it scored every line.
        if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) in_write.reset();
      }
      if (out_read.open()) read_some(out_read, run.out);
      if (err_read.open()) read_some(err_read, err);
      if (err.size() > 2 * kErrTailBytes) err.erase(0, err.size() - kErrTailBytes);
      run.output_overflow = run.out.size() > limits.max_output_bytes;
      run.timed_out = Clock::now() >= deadline;
    }
  }
  in_write.reset();
  // Its stdout and stderr are at their end, but the shell may not have exited yet: wait for it up
  // to the deadline.
  std::optional<int> status;
  while (!run.timed_out && !run.output_overflow && !(status = child.try_reap())) {
    if (Clock::now() >= deadline) {
      run.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!status) status = child.kill_and_reap();
  if (!run.timed_out && !run.output_overflow) {
    if (WIFEXITED(*status)) run.exit_status = WEXITSTATUS(*status);
    if (WIFSIGNALED(*status)) run.signal = WTERMSIG(*status);
  }
  if (run.output_overflow) run.out.resize(limits.max_output_bytes);
  run.err_tail = err.size() > kErrTailBytes ? err.substr(err.size() - kErrTailBytes) : err;
  return run;
}

std::string last_lines(std::string_view text, int lines) {
  std::vector<std::string_view> all;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    all.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  while (!all.empty() && all.back().find_first_not_of(" \t\r") == std::string_view::npos) all.pop_back();
  std::string shown;
  for (size_t i = all.size() - std::min(all.size(), static_cast<size_t>(lines)); i < all.size(); ++i)
    shown += "    " + std::string(all[i]) + "\n";
  return shown;
}

}  // namespace titan::rl
