#include "kbrl/eval/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fmt/format.h>

#include "kbrl/core/error.hpp"

extern char** environ;

namespace kbrl::eval {
namespace {

std::vector<std::string> build_environment(const Subprocess::Options& o) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& name : o.env_unset) env.erase(name);
  for (const auto& [k, v] : o.env_set) env[k] = v;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Subprocess::Subprocess(const Options& options) {
  if (options.argv.empty()) throw core::InvalidArgument("Subprocess: empty argv");
  int in_pipe[2];
  int out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0)
    throw core::Error(fmt::format("cannot create pipes: {}", std::strerror(errno)));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  if (!options.stderr_path.empty())
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, options.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (!options.working_dir.empty())
    posix_spawn_file_actions_addchdir_np(&actions, options.working_dir.c_str());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
  // Only stdin, stdout and stderr go to the child: descriptors that the host program opened
  // without close-on-exec (a trainer's sockets, its log files) never reach a worker, nor the
  // candidates it runs.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);  // its own process group: kill() reaches its children too
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<std::string> argv = options.argv;
  std::vector<std::string> envp = build_environment(options);
  auto c_argv = c_strings(argv);
  auto c_envp = c_strings(envp);
  const int rc = ::posix_spawnp(&pid_, c_argv[0], &actions, &attr, c_argv.data(), c_envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    pid_ = -1;
    throw core::Error(fmt::format("cannot start '{}': {}", options.argv[0], std::strerror(rc)));
  }
  stdin_fd_ = in_pipe[1];
  stdout_fd_ = out_pipe[0];
}

Subprocess::~Subprocess() {
  kill();
  close_fd(stdin_fd_);
  close_fd(stdout_fd_);
}

bool Subprocess::write_line(const std::string& line) {
  if (stdin_fd_ < 0) return false;
  std::string data = line;
  data.push_back('\n');
  std::size_t done = 0;
  while (done < data.size()) {
    // MSG_NOSIGNAL does not apply to pipes; SIGPIPE is ignored process-wide by the evaluator.
    const ssize_t n = ::write(stdin_fd_, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::optional<std::string> Subprocess::read_line(std::chrono::steady_clock::time_point deadline) {
  timed_out_ = false;
  while (true) {
    const auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || stdout_fd_ < 0) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out_ = true;
      return std::nullopt;
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) {
      eof_ = true;
      return std::nullopt;
    }
    if (ready <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(stdout_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      eof_ = true;
      continue;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void Subprocess::kill() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  reap(true);
}

bool Subprocess::running() {
  if (pid_ <= 0 || reaped_) return false;
  reap(false);
  return !reaped_;
}

void Subprocess::reap(bool block) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    reaped_ = true;
    if (r == pid_) {
      exit_description_ = WIFSIGNALED(status) ? fmt::format("signal {}", WTERMSIG(status))
                                              : fmt::format("exit {}", WEXITSTATUS(status));
    } else {
      exit_description_ = "ended";
    }
  }
}

}  // namespace kbrl::eval
