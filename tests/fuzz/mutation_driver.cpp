// A seeded mutation driver for the fuzz targets, linked where libFuzzer is not (g++ builds, the
// dev/ci/asan presets): it replays the seed inputs and kept regressions, then feeds
// deterministic mutations of them (bit and byte flips, inserts, deletes, chunk copies, splices
// across seeds, dictionary tokens) to LLVMFuzzerTestOneInput for a bounded time. It has no
// coverage feedback, so it is the CI smoke run; the long runs use libFuzzer (scripts/fuzz.sh).
// A failing input (an escaping exception, a signal, a sanitizer report, a hang past the
// per-input limit) is written to a file, with the command that replays it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "fuzz_support.hpp"

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

// Sanitizers call this before they exit on a report; weak so that plain builds link without it.
extern "C" void __sanitizer_set_death_callback(void (*callback)()) __attribute__((weak));

namespace {

constexpr const char* kUsage = R"(usage: %s [options] [SEED_PATH...]
Replays every seed file (directories are read recursively), then runs seeded mutations of them.
  --seconds N       mutate for N seconds (default 10; 0: replay only)
  --runs N          stop after N mutated inputs (default: no limit)
  --seed N          seed of the mutations (default 1): the same seed gives the same inputs
  --dict FILE       tokens to insert (libFuzzer / AFL dictionary format)
  --timeout-ms N    an input running longer is a hang (default 5000)
  --max-len N       longest mutated input in bytes (default 65536)
  --artifact-dir D  where the failing input is written (default: the current directory)
A failing input is written to D/<program>-failure and the run exits 1; replay it with
  <program> --seconds 0 D/<program>-failure
)";

// ---- what the signal handlers and the watchdog read: the input being run ----
std::atomic<const std::uint8_t*> g_input{nullptr};
std::atomic<std::size_t> g_input_size{0};
std::atomic<std::int64_t> g_input_started_ns{0};  // 0: no input running
char g_artifact_path[4096] = {};
char g_program[256] = {};

void write_str(const char* s) { (void)!::write(2, s, std::strlen(s)); }

// Async-signal-safe: open/write/close only.
void save_current_input(const char* why) {
  const std::uint8_t* data = g_input.load();
  const std::size_t size = g_input_size.load();
  write_str("\n== kbrl fuzz: ");
  write_str(why);
  write_str("\n");
  if (data == nullptr) {
    write_str("== no input was running\n");
    return;
  }
  const int fd = ::open(g_artifact_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    write_str("== could not write the failing input\n");
    return;
  }
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  write_str("== failing input written to ");
  write_str(g_artifact_path);
  write_str("\n== replay: ");
  write_str(g_program);
  write_str(" --seconds 0 ");
  write_str(g_artifact_path);
  write_str("\n");
}

void on_deadly_signal(int sig) {
  save_current_input(sig == SIGABRT ? "abort" : "deadly signal");
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void on_sanitizer_death() { save_current_input("sanitizer report"); }

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// A hang cannot be interrupted from inside the parser: the watchdog saves the input and ends
// the process.
void watchdog(std::int64_t limit_ms) {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::int64_t started = g_input_started_ns.load();
    if (started != 0 && now_ns() - started > limit_ms * 1'000'000) {
      save_current_input("timeout: the input ran past --timeout-ms");
      ::_exit(2);
    }
  }
}

// Runs one input; an escaping exception is a finding (the targets catch kbrl::core::Error).
void run_one(const Bytes& input) {
  // libFuzzer hands the target its own copy; so does this, so that a target reading past the end
  // of the input is an ASan report rather than a read of the vector's spare capacity.
  const std::unique_ptr<std::uint8_t[]> copy(new std::uint8_t[std::max<std::size_t>(input.size(), 1)]);
  std::copy(input.begin(), input.end(), copy.get());
  g_input.store(copy.get());
  g_input_size.store(input.size());
  g_input_started_ns.store(now_ns());
  try {
    LLVMFuzzerTestOneInput(copy.get(), input.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uncaught exception: %s\n", e.what());
    save_current_input("uncaught exception (not a kbrl::core::Error)");
    std::exit(1);
  } catch (...) {
    save_current_input("uncaught exception of an unknown type");
    std::exit(1);
  }
  g_input_started_ns.store(0);
  g_input.store(nullptr);
}

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// libFuzzer / AFL dictionary lines: name="value" or "value", with \\, \" and \xNN escapes.
std::vector<Bytes> read_dictionary(const fs::path& p) {
  std::vector<Bytes> tokens;
  std::ifstream in(p);
  if (!in) {
    std::fprintf(stderr, "cannot read dictionary %s\n", p.c_str());
    std::exit(2);
  }
  std::string line;
  while (std::getline(in, line)) {
    const auto open = line.find('"');
    const auto close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    Bytes token;
    for (std::size_t i = open + 1; i < close; ++i) {
      if (line[i] != '\\' || i + 1 >= close) {
        token.push_back(static_cast<std::uint8_t>(line[i]));
      } else if (line[i + 1] == 'x' && i + 3 < close) {
        token.push_back(static_cast<std::uint8_t>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
        i += 3;
      } else {
        token.push_back(static_cast<std::uint8_t>(line[++i]));
      }
    }
    if (!token.empty()) tokens.push_back(std::move(token));
  }
  return tokens;
}

class Mutator {
 public:
  Mutator(std::uint64_t seed, const std::vector<Bytes>& seeds, const std::vector<Bytes>& dict, std::size_t max_len)
      : rng_(seed), seeds_(seeds), dict_(dict), max_len_(max_len) {}

  // One to eight stacked mutations of a seed, or of the previous mutant (a short random walk
  // away from the seeds, where the deeper malformations are).
  Bytes next() {
    if (last_.empty() || below(4) == 0) last_ = seeds_[below(seeds_.size())];
    Bytes b = last_;
    const std::size_t n = 1 + below(8);
    for (std::size_t i = 0; i < n; ++i) mutate_once(b);
    if (b.size() > max_len_) b.resize(max_len_);
    last_ = b;
    return b;
  }

 private:
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }

  Bytes random_token() {
    static const char* const kNumbers[] = {"0", "-1", "1", "255", "256", "65535", "2147483647", "2147483648",
                                           "-2147483649", "4294967296", "9223372036854775807",
                                           "9223372036854775808", "18446744073709551615",
                                           "18446744073709551616", "1e308", "1e309", "-0.0", "1.5", "NaN", ".inf"};
    if (!dict_.empty() && below(3) != 0) return dict_[below(dict_.size())];
    const char* s = kNumbers[below(std::size(kNumbers))];
    return Bytes(s, s + std::strlen(s));
  }

  void mutate_once(Bytes& b) {
    static const std::uint8_t kBytes[] = {0, 0xff, 0x7f, 0x80, 0xc0, 0xe0, 0xf0, '\n', '\r', '\t', ' ', '"',
                                          '\\', '{', '}', '[', ']', ':', ',', '<', '>', '`', '#', '\'', '-'};
    switch (below(b.empty() ? 2 : 10)) {
      case 0: {  // insert a token
        const Bytes t = random_token();
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(below(b.size() + 1)), t.begin(), t.end());
        break;
      }
      case 1: {  // insert random bytes
        const std::size_t at = below(b.size() + 1), n = 1 + below(8);
        for (std::size_t i = 0; i < n; ++i)
          b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), below(2) ? kBytes[below(std::size(kBytes))]
                                                                          : static_cast<std::uint8_t>(rng_()));
        break;
      }
      case 2:  // flip a bit
        b[below(b.size())] ^= static_cast<std::uint8_t>(1u << below(8));
        break;
      case 3:  // set a byte
        b[below(b.size())] = below(2) ? kBytes[below(std::size(kBytes))] : static_cast<std::uint8_t>(rng_());
        break;
      case 4: {  // delete a range
        const std::size_t at = below(b.size()), n = 1 + below(std::min<std::size_t>(b.size() - at, 64));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 5: {  // duplicate a chunk somewhere else
        const std::size_t at = below(b.size()), n = 1 + below(std::min<std::size_t>(b.size() - at, 256));
        const Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(below(b.size() + 1)), chunk.begin(), chunk.end());
        break;
      }
      case 6: {  // splice: this input's prefix, another seed's suffix
        const Bytes& other = seeds_[below(seeds_.size())];
        const std::size_t cut = below(b.size() + 1), from = below(other.size() + 1);
        b.resize(cut);
        b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      case 7: {  // replace a range with a token
        const Bytes t = random_token();
        const std::size_t at = below(b.size()), n = below(std::min<std::size_t>(b.size() - at, 16) + 1);
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t.begin(), t.end());
        break;
      }
      case 8: {  // truncate
        b.resize(below(b.size() + 1));
        break;
      }
      default: {  // swap two bytes
        std::swap(b[below(b.size())], b[below(b.size())]);
        break;
      }
    }
  }

  std::mt19937_64 rng_;
  const std::vector<Bytes>& seeds_;
  const std::vector<Bytes>& dict_;
  std::size_t max_len_;
  Bytes last_;
};

void collect(const fs::path& p, std::vector<fs::path>& out) {
  if (fs::is_directory(p)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(p))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());  // a deterministic seed order for a given --seed
    out.insert(out.end(), files.begin(), files.end());
  } else if (fs::is_regular_file(p)) {
    out.push_back(p);
  } else {
    std::fprintf(stderr, "no such seed file or directory: %s\n", p.c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  std::uint64_t runs = UINT64_MAX, seed = 1;
  std::int64_t timeout_ms = 5000;
  std::size_t max_len = 65536;
  fs::path dict_path, artifact_dir = ".";
  std::vector<fs::path> seed_files;
  const std::string program = fs::path(argv[0]).filename().string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::printf(kUsage, program.c_str());
      return 0;
    } else if (a == "--seconds") {
      seconds = std::stod(value());
    } else if (a == "--runs") {
      runs = std::stoull(value());
    } else if (a == "--seed") {
      seed = std::stoull(value());
    } else if (a == "--dict") {
      dict_path = value();
    } else if (a == "--timeout-ms") {
      timeout_ms = std::stoll(value());
    } else if (a == "--max-len") {
      max_len = std::stoull(value());
    } else if (a == "--artifact-dir") {
      artifact_dir = value();
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::fprintf(stderr, kUsage, program.c_str());
      return 2;
    } else {
      collect(a, seed_files);
    }
  }

  fs::create_directories(artifact_dir);
  std::snprintf(g_artifact_path, sizeof g_artifact_path, "%s/%s-failure", artifact_dir.c_str(), program.c_str());
  std::snprintf(g_program, sizeof g_program, "%s", argv[0]);
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, on_deadly_signal);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(on_sanitizer_death);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines before any failure report
  std::thread(watchdog, timeout_ms).detach();

  std::vector<Bytes> seeds;
  for (const auto& f : seed_files) {
    seeds.push_back(read_bytes(f));
    run_one(seeds.back());
  }
  const std::vector<Bytes> dict = dict_path.empty() ? std::vector<Bytes>{} : read_dictionary(dict_path);
  std::printf("%s: %zu seed inputs replayed, %zu dictionary tokens\n", program.c_str(), seeds.size(), dict.size());
  if (seeds.empty()) seeds.push_back({});

  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Mutator mutator(seed, seeds, dict, max_len);
  std::uint64_t done = 0;
  while (done < runs && seconds > 0 && Clock::now() < deadline) {
    run_one(mutator.next());
    ++done;
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%s: %llu mutated inputs in %.1f s (%.0f/s, seed %llu), no failure\n", program.c_str(),
              static_cast<unsigned long long>(done), took, took > 0 ? static_cast<double>(done) / took : 0.0,
              static_cast<unsigned long long>(seed));
  return 0;
}
