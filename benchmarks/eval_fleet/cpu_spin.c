/* Work rate of CPUs running at the same time: one process per CPU named on the command line,
 * each pinned to its CPU, all starting together, each running independent floating-point
 * multiply-add chains (enough of them to fill a core's arithmetic units, so that two hardware
 * threads of one core slow each other down) for the given seconds. Prints one line per CPU:
 * "<cpu> <millions of iterations per second> <checksum>".
 * (The third column, a checksum of the results, keeps the arithmetic from being optimized away.)
 *   cpu_spin SECONDS CPU [CPU ...]
 * Used by cpu_halves.sh to find which CPUs share a core when the machine does not say. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cpu_spin SECONDS CPU [CPU ...]\n");
    return 2;
  }
  double seconds = atof(argv[1]);
  int n = argc - 2, go[2], results[2];
  if (pipe(go) != 0 || pipe(results) != 0) return 1;
  for (int k = 0; k < n; ++k) {
    if (fork() != 0) continue;
    int cpu = atoi(argv[k + 2]);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(3);
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) < 0) _exit(4); /* everyone starts when the parent closes the pipe */
    volatile double seed = 1.0000001;
    double a[12];
    for (int i = 0; i < 12; ++i) a[i] = seed + i;
    long iterations = 0;
    double start = now(), end = start;
    while (end - start < seconds) {
      for (int r = 0; r < 4096; ++r)
        for (int i = 0; i < 12; ++i) a[i] = a[i] * seed + 1e-9;
      iterations += 4096;
      end = now();
    }
    double sum = 0;
    for (int i = 0; i < 12; ++i) sum += a[i];
    char line[64];
    int len = snprintf(line, sizeof line, "%d %.3f %d\n", cpu, iterations / (end - start) / 1e6, sum > 0);
    if (write(results[1], line, len) != len) _exit(5);
    _exit(0);
  }
  close(go[0]);
  close(go[1]);
  close(results[1]);
  for (int k = 0; k < n; ++k) wait(NULL);
  char buffer[4096];
  ssize_t got;
  while ((got = read(results[0], buffer, sizeof buffer)) > 0) fwrite(buffer, 1, got, stdout);
  return 0;
}
