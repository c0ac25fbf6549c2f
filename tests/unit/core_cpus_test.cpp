#include <sched.h>

#include <kbrl/core/cpus.hpp>
#include "catch.hpp"

using kbrl::core::available_cpus;
using kbrl::core::cpu_quota_cpus;

TEST_CASE("cgroup CPU quotas read as whole CPUs, rounded up") {
  CHECK(cpu_quota_cpus("200000 100000\n") == 2u);
  CHECK(cpu_quota_cpus("150000 100000") == 2u);  // 1.5 CPUs: two may run
  CHECK(cpu_quota_cpus("50000 100000") == 1u);
  CHECK_FALSE(cpu_quota_cpus("max 100000\n").has_value());  // no quota
  CHECK_FALSE(cpu_quota_cpus("").has_value());              // no such file
  CHECK_FALSE(cpu_quota_cpus("abc def").has_value());
  CHECK(cpu_quota_cpus("400000\n", "100000\n") == 4u);  // cgroup v1
  CHECK_FALSE(cpu_quota_cpus("-1\n", "100000\n").has_value());
  CHECK_FALSE(cpu_quota_cpus("100000", "0").has_value());
}

TEST_CASE("available CPUs follow the thread's affinity mask, not the machine's count") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  const unsigned before = available_cpus();
  CHECK(before >= 1u);
  CHECK(before <= static_cast<unsigned>(CPU_COUNT(&all)));
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);  // as `taskset -c <first>` would
  const unsigned pinned = available_cpus();
  REQUIRE(sched_setaffinity(0, sizeof all, &all) == 0);
  CHECK(pinned == 1u);
  CHECK(available_cpus() == before);
}
