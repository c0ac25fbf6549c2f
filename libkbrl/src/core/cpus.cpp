#include "kbrl/core/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace kbrl::core {
namespace {

std::optional<long long> parse_integer(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\t')) text.remove_suffix(1);
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<unsigned> quota_over_period(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;  // -1: no quota (v1)
  return static_cast<unsigned>(std::max(1LL, (quota + period - 1) / period));
}

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

// The process's cgroup path under the v2 hierarchy ("0::/kubepods/..."), or empty.
std::string cgroup_v2_path() {
  std::istringstream lines(slurp("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

std::optional<unsigned> cgroup_quota() {
  // cgroup v2: the quota of the process's own group and of each group above it (the tightest
  // applies); inside a container the namespace root is the container's group.
  std::string group = cgroup_v2_path();
  std::optional<unsigned> tightest;
  for (bool more = !group.empty(); more;) {
    const std::string file = "/sys/fs/cgroup" + (group == "/" ? std::string() : group) + "/cpu.max";
    if (auto cpus = cpu_quota_cpus(slurp(file.c_str())); cpus && (!tightest || *cpus < *tightest)) tightest = cpus;
    const auto slash = group.rfind('/');
    more = slash != std::string::npos && group != "/";
    group = slash == 0 || slash == std::string::npos ? "/" : group.substr(0, slash);
  }
  if (tightest) return tightest;
  return cpu_quota_cpus(slurp("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), slurp("/sys/fs/cgroup/cpu/cpu.cfs_period_us"));
}

}  // namespace

std::optional<unsigned> cpu_quota_cpus(std::string_view cpu_max) {
  const auto space = cpu_max.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto quota = parse_integer(cpu_max.substr(0, space));  // "max": no quota
  const auto period = parse_integer(cpu_max.substr(space + 1));
  if (!quota || !period) return std::nullopt;
  return quota_over_period(*quota, *period);
}

std::optional<unsigned> cpu_quota_cpus(std::string_view cfs_quota_us, std::string_view cfs_period_us) {
  const auto quota = parse_integer(cfs_quota_us);
  const auto period = parse_integer(cfs_period_us);
  if (!quota || !period) return std::nullopt;
  return quota_over_period(*quota, *period);
}

unsigned available_cpus() {
  unsigned n = std::max(1U, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<unsigned>(std::max(1, CPU_COUNT(&set)));
  if (const auto quota = cgroup_quota()) n = std::min(n, *quota);
  return std::max(1U, n);
}

}  // namespace kbrl::core
