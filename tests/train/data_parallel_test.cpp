// Data parallelism on the CPU (the store backend) with real processes: two ranks, each with half
// of the global batch, take the same steps as one process with all of it; the launch variables
// are read as torchrun and Slurm set them. The same worker runs on NCCL on the GPU machine
// (tests/gpu/data_parallel.sh).
#include "kbrl/train/torch/distributed.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "test_files.hpp"

namespace {

// A port bound by `fd` (not listening): nobody else can take it while fd is open.
int bound_port(int fd) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  return ntohs(addr.sin_port);
}

// A port nobody listens on right now (rank 0's store binds it next).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int port = bound_port(fd);
  ::close(fd);
  return port;
}

// Starts the worker as `rank` of `world` (world 1: no launch variables at all) and returns its pid.
pid_t launch(int rank, int world, int port, const std::filesystem::path& out) {
  const std::string exe = KBRL_DP_WORKER;
  const std::string model = (kbrl::test::model_fixtures() / "qwen2_tied").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (world > 1) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    }
    ::execl(exe.c_str(), exe.c_str(), model.c_str(), out.c_str(), "cpu", "4", "8", "12", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

boost::json::object read_result(const std::filesystem::path& file) {
  return boost::json::parse(kbrl::test::read_bytes(file)).as_object();
}

std::vector<double> numbers(const boost::json::object& o, const char* key) {
  std::vector<double> out;
  for (const auto& v : o.at(key).as_array()) out.push_back(v.to_number<double>());
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct EnvGuard {
  std::vector<std::string> names;
  ~EnvGuard() {
    for (const auto& n : names) ::unsetenv(n.c_str());
  }
  void set(const std::string& n, const std::string& v) {
    ::setenv(n.c_str(), v.c_str(), 1);
    names.push_back(n);
  }
};

}  // namespace

TEST_CASE("two ranks take the steps of one process with the whole batch") {
  const auto root = kbrl::test::scratch("data_parallel");
  REQUIRE(wait_for(launch(0, 1, 0, root / "one")) == 0);
  const int port = free_port();
  const pid_t r0 = launch(0, 2, port, root / "two");
  const pid_t r1 = launch(1, 2, port, root / "two");
  REQUIRE(wait_for(r0) == 0);
  REQUIRE(wait_for(r1) == 0);

  const auto one = read_result(root / "one" / "rank0.json");
  const auto a = read_result(root / "two" / "rank0.json");
  const auto b = read_result(root / "two" / "rank1.json");
  CHECK(a.at("backend").as_string() == "store");
  CHECK(a.at("datums").as_int64() == 4);
  CHECK(b.at("datums").as_int64() == 4);
  const auto loss1 = numbers(one, "loss"), loss2 = numbers(a, "loss");
  REQUIRE(loss1.size() == 4);
  REQUIRE(loss2.size() == 4);
  for (std::size_t s = 0; s < loss1.size(); ++s) {
    CHECK(loss2[s] == Catch::Approx(loss1[s]).epsilon(1e-5).margin(1e-7));
    CHECK(numbers(a, "grad_norm")[s] == Catch::Approx(numbers(one, "grad_norm")[s]).epsilon(1e-5));
  }
  // Training changed something, and both ranks hold the same parameters as the single process.
  CHECK(loss1.front() != loss1.back());
  CHECK(a.at("param_abs_sum").as_double() == b.at("param_abs_sum").as_double());
  CHECK(a.at("param_abs_sum").as_double() == Catch::Approx(one.at("param_abs_sum").as_double()).epsilon(1e-6));
  CHECK(numbers(a, "loss") == numbers(b, "loss"));
  CHECK(std::filesystem::exists(root / "two" / "state" / "state.json"));
  CHECK_FALSE(std::filesystem::exists(root / "two" / "state.tmp"));
}

TEST_CASE("a rank whose peer never comes gives up with an error naming the store") {
  const auto root = kbrl::test::scratch("data_parallel_alone");
  EnvGuard env;
  env.set("WORLD_SIZE", "2");
  env.set("RANK", "1");
  env.set("MASTER_ADDR", "127.0.0.1");
  // Held (bound, not listening) for the whole test: connections are refused, and no other test
  // that picks a free port meanwhile can get this one and answer.
  const int held = ::socket(AF_INET, SOCK_STREAM, 0);
  env.set("MASTER_PORT", std::to_string(bound_port(held)));
  const auto launch_env = kbrl::train::launch_env_from_environment();
  try {
    kbrl::train::ProcessGroup::join(launch_env, false, std::chrono::milliseconds(1500));
    FAIL("join returned without a peer");
  } catch (const kbrl::core::Error& e) {
    CHECK(contains(e.what(), "could not reach the store at 127.0.0.1"));
  }
  ::close(held);
}

TEST_CASE("launch variables are read as torchrun and slurm set them") {
  {
    const auto env = kbrl::train::launch_env_from_environment();
    CHECK(env.world_size == 1);
    CHECK_FALSE(env.distributed());
  }
  {
    EnvGuard g;
    g.set("WORLD_SIZE", "4");
    g.set("RANK", "3");
    g.set("LOCAL_RANK", "1");
    g.set("MASTER_ADDR", "node7");
    g.set("MASTER_PORT", "29501");
    const auto env = kbrl::train::launch_env_from_environment();
    CHECK(env.rank == 3);
    CHECK(env.world_size == 4);
    CHECK(env.local_rank == 1);
    CHECK(env.local_world_size == 4);  // no LOCAL_WORLD_SIZE: one host
    CHECK(env.master_addr == "node7");
    CHECK(env.master_port == 29501);
  }
  {
    EnvGuard g;
    g.set("SLURM_NTASKS", "2");
    g.set("SLURM_PROCID", "1");
    g.set("SLURM_LOCALID", "1");
    g.set("MASTER_ADDR", "node1");
    const auto env = kbrl::train::launch_env_from_environment();
    CHECK(env.rank == 1);
    CHECK(env.world_size == 2);
    CHECK(env.master_port == 29500);
  }
  {
    EnvGuard g;
    g.set("WORLD_SIZE", "4");
    g.set("RANK", "2");
    g.set("LOCAL_RANK", "0");
    g.set("LOCAL_WORLD_SIZE", "2");
    g.set("MASTER_ADDR", "node1");
    CHECK(kbrl::train::launch_env_from_environment().local_world_size == 2);
  }
  {
    EnvGuard g;
    g.set("SLURM_NTASKS", "6");
    g.set("SLURM_PROCID", "4");
    g.set("SLURM_LOCALID", "0");
    g.set("SLURM_TASKS_PER_NODE", "3(x2)");
    g.set("MASTER_ADDR", "node1");
    CHECK(kbrl::train::launch_env_from_environment().local_world_size == 3);
  }
  auto error_of = [](const std::vector<std::pair<std::string, std::string>>& vars) {
    EnvGuard g;
    for (const auto& [n, v] : vars) g.set(n, v);
    try {
      kbrl::train::launch_env_from_environment();
    } catch (const kbrl::core::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(contains(error_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "h"}}), "RANK"));
  CHECK(contains(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}}), "MASTER_ADDR"));
  CHECK(contains(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                 "MASTER_PORT"));
  CHECK(contains(error_of({{"WORLD_SIZE", "two"}}), "WORLD_SIZE"));
  CHECK(contains(error_of({{"WORLD_SIZE", "4"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"LOCAL_RANK", "2"},
                           {"LOCAL_WORLD_SIZE", "2"}}),
                 "LOCAL_RANK"));
}
