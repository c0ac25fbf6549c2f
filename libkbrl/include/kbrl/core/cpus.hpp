// How many CPUs this process may use: what sizes the evaluator's compile lanes, its builds'
// parallelism and its CPU-time limits, and the loop's share per rank. std::thread's
// hardware_concurrency counts the machine's CPUs, not a process pinned with taskset / a cpuset
// nor a container's CPU quota (a Kubernetes `cpu` limit), which would size a 16-CPU pod on a
// 128-core node for 128.
#pragma once

#include <optional>
#include <string_view>

namespace kbrl::core {

// The CPUs in this process's affinity mask (sched_getaffinity), capped by the CPU quota of its
// cgroup (v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us) rounded up; at least 1. Read
// afresh on each call (a system call and a few small files), for the calling thread's mask.
unsigned available_cpus();

// A cgroup quota file's CPUs, rounded up: cgroup v2 `cpu.max` ("200000 100000" -> 2, "max ...":
// none) or v1 quota and period read separately. nullopt: no quota or unreadable text.
std::optional<unsigned> cpu_quota_cpus(std::string_view cpu_max);
std::optional<unsigned> cpu_quota_cpus(std::string_view cfs_quota_us, std::string_view cfs_period_us);

}  // namespace kbrl::core
