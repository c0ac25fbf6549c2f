#include "kbrl/train/torch/distributed.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "kbrl/core/text.hpp"
#include "distributed_impl.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/train/run_log.hpp"

namespace kbrl::train {

using core::cat;

namespace {

std::optional<std::string> env_var(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < lo || v > hi)
    throw core::ConfigError(cat("environment variable ", name), "",
                            cat("'", text, "' is not an integer in [", lo, ", ", hi, "]"));
  return static_cast<int>(v);
}

// The first of the names that is set, with the name it came from.
std::optional<std::pair<const char*, std::string>> first_set(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env_var(n)) return std::make_pair(n, *v);
  return std::nullopt;
}

// CPU collectives over the TCPStore itself: each rank publishes its bytes under a key of the
// operation's sequence number, then every rank reads all of them and combines in rank order, so
// the result is bit-identical on every rank. The last reader deletes the keys.
class StoreProcessGroup final : public ProcessGroup {
 public:
  StoreProcessGroup(int rank, int world_size, c10::intrusive_ptr<c10d::Store> store)
      : ProcessGroup(rank, world_size), store_(std::move(store)) {}

  ~StoreProcessGroup() override { detail::leave(*store_, rank(), world_size()); }
  StoreProcessGroup(const StoreProcessGroup&) = delete;
  StoreProcessGroup& operator=(const StoreProcessGroup&) = delete;

  std::string backend() const override { return "store"; }

  void all_reduce_sum(std::vector<at::Tensor>& tensors) override {
    if (tensors.empty()) return;
    const at::Tensor flat = flatten(tensors);
    const auto parts = exchange(bytes_of(flat));
    at::Tensor total = at::zeros_like(flat);
    for (const auto& p : parts) total.add_(from_bytes(p, flat));
    unflatten(total, tensors);
  }

  void broadcast(std::vector<at::Tensor>& tensors, int root) override {
    if (tensors.empty()) return;
    const at::Tensor flat = flatten(tensors);
    const auto parts = exchange(rank() == root ? bytes_of(flat) : std::vector<std::uint8_t>{});
    unflatten(from_bytes(parts.at(static_cast<std::size_t>(root)), flat), tensors);
  }

  void barrier() override { exchange({}); }

 private:
  static at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> parts;
    parts.reserve(tensors.size());
    for (const auto& t : tensors) parts.push_back(t.detach().to(at::kCPU, at::kDouble).reshape({-1}));
    return at::cat(parts);
  }
  static void unflatten(const at::Tensor& flat, std::vector<at::Tensor>& tensors) { detail::unflatten_into(flat, tensors); }
  static std::vector<std::uint8_t> bytes_of(const at::Tensor& flat) {
    const auto* p = static_cast<const std::uint8_t*>(flat.contiguous().data_ptr());
    return {p, p + flat.numel() * static_cast<std::int64_t>(sizeof(double))};
  }
  static at::Tensor from_bytes(const std::vector<std::uint8_t>& bytes, const at::Tensor& like) {
    if (bytes.size() != static_cast<std::size_t>(like.numel()) * sizeof(double))
      throw core::Error(cat("data parallel: a rank sent ", bytes.size(), " bytes, expected ",
                            like.numel() * static_cast<std::int64_t>(sizeof(double)),
                            " (do all ranks train the same parameters?)"));
    at::Tensor t = at::empty_like(like);
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    return t;
  }

  std::vector<std::vector<std::uint8_t>> exchange(const std::vector<std::uint8_t>& mine) {
    const std::string prefix = cat("kbrl/op/", seq_++, "/");
    store_->set(cat(prefix, rank()), mine);
    std::vector<std::string> keys;
    for (int r = 0; r < world_size(); ++r) keys.push_back(cat(prefix, r));
    store_->wait(keys);
    auto parts = store_->multiGet(keys);
    if (store_->add(prefix + "read", 1) == world_size()) {
      for (const auto& k : keys) store_->deleteKey(k);
      store_->deleteKey(prefix + "read");
    }
    return parts;
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::int64_t seq_ = 0;
};

}  // namespace

namespace detail {
void leave(c10d::Store& store, int rank, int world_size) {
  try {
    const std::int64_t left = store.add("kbrl/left", 1);
    if (rank != 0 || left >= world_size) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (store.add("kbrl/left", 0) < world_size && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } catch (...) {  // NOLINT: a peer that is gone already has nothing left to ask of the store
  }
}

void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& tensors) {
  std::int64_t offset = 0;
  const c10::NoGradGuard no_grad;
  for (auto& t : tensors) {
    const std::int64_t n = t.numel();
    t.copy_(flat.narrow(0, offset, n).view(t.sizes()));
    offset += n;
  }
}
}  // namespace detail

#ifndef KBRL_NCCL
namespace detail {
std::shared_ptr<ProcessGroup> make_nccl_group(const LaunchEnv&, const c10::intrusive_ptr<c10d::Store>&,
                                              std::chrono::milliseconds) {
  throw core::Error("data parallel on CUDA needs NCCL, and this build of kbrl has none (libtorch without CUDA, "
                    "or nccl.h not found when it was configured)");
}
}  // namespace detail
#endif

LaunchEnv launch_env_from_environment() {
  LaunchEnv env;
  const auto world = first_set({"WORLD_SIZE", "SLURM_NTASKS"});
  if (!world) return env;
  env.world_size = env_int(world->first, world->second, 1, 1 << 20);
  const auto rank = first_set({"RANK", "SLURM_PROCID"});
  if (!rank && env.world_size > 1)
    throw core::ConfigError("environment variable RANK", "", cat("not set, but ", world->first, " is ", env.world_size));
  if (rank) env.rank = env_int(rank->first, rank->second, 0, env.world_size - 1);
  if (const auto local = first_set({"LOCAL_RANK", "SLURM_LOCALID"}))
    env.local_rank = env_int(local->first, local->second, 0, 1 << 16);
  env.local_world_size = env.world_size;
  if (const auto local = first_set({"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"})) {
    env.local_world_size = env_int(local->first, local->second, 1, env.world_size);
  } else if (const auto tasks = env_var("SLURM_TASKS_PER_NODE")) {
    // "4(x2),3": the first node's count is this host's unless the job is uneven.
    const std::string first = tasks->substr(0, tasks->find_first_of("(,"));
    env.local_world_size = env_int("SLURM_TASKS_PER_NODE", first, 1, env.world_size);
  }
  if (env.local_rank >= env.local_world_size)
    throw core::ConfigError("environment variable LOCAL_RANK", "",
                            cat(env.local_rank, " is not below the ranks on this host, ", env.local_world_size));
  if (const auto addr = env_var("MASTER_ADDR")) {
    env.master_addr = *addr;
  } else if (env.world_size > 1) {
    throw core::ConfigError("environment variable MASTER_ADDR", "",
                            cat("not set, but ", world->first, " is ", env.world_size,
                                " (the host of rank 0; torchrun sets it, under Slurm export it)"));
  }
  if (const auto port = env_var("MASTER_PORT")) env.master_port = env_int("MASTER_PORT", *port, 1, 65535);
  return env;
}

std::shared_ptr<ProcessGroup> ProcessGroup::join(const LaunchEnv& env, bool cuda, std::chrono::milliseconds timeout) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size)
    throw core::InvalidArgument(cat("ProcessGroup::join: rank ", env.rank, " outside a world of ", env.world_size));
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(env.master_port);
  opts.isServer = env.rank == 0;
  opts.numWorkers = static_cast<std::size_t>(env.world_size);
  opts.waitWorkers = true;
  opts.timeout = timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  } catch (const c10::Error& e) {
    throw core::Error(cat("data parallel: rank ", env.rank, " could not reach the store at ", env.master_addr, ":",
                          env.master_port, ": ", e.what_without_backtrace()));
  }
  if (cuda) return detail::make_nccl_group(env, store, timeout);
  return std::make_shared<StoreProcessGroup>(env.rank, env.world_size, store);
}

std::map<std::string, double> ProcessGroup::sum(const std::map<std::string, double>& values) {
  std::vector<double> v;
  v.reserve(values.size() + 1);
  for (const auto& kv : values) v.push_back(kv.second);
  v.push_back(static_cast<double>(values.size()));  // a rank with other keys shows as a count mismatch
  std::vector<at::Tensor> t{at::tensor(v, at::kDouble)};
  all_reduce_sum(t);
  const at::Tensor out = t[0].to(at::kCPU).contiguous();
  const double* p = out.data_ptr<double>();
  if (p[values.size()] != static_cast<double>(values.size()) * world_size())
    throw core::Error("data parallel: ranks summed different sets of values");
  std::map<std::string, double> result;
  std::size_t i = 0;
  for (const auto& kv : values) result[kv.first] = p[i++];
  return result;
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& mine) {
  const auto world = static_cast<std::size_t>(world_size());
  const auto me = static_cast<std::size_t>(rank());
  std::vector<at::Tensor> lengths{at::zeros({world_size()}, at::kDouble)};
  lengths[0][rank()] = static_cast<double>(mine.size());
  all_reduce_sum(lengths);
  const at::Tensor l = lengths[0].to(at::kCPU).contiguous();
  std::vector<std::size_t> size(world), offset(world + 1, 0);
  for (std::size_t r = 0; r < world; ++r) {
    size[r] = static_cast<std::size_t>(l.data_ptr<double>()[r]);
    offset[r + 1] = offset[r] + size[r];
  }
  std::vector<std::string> out(world);
  if (offset[world] == 0) return out;
  std::vector<at::Tensor> buffer{at::zeros({static_cast<std::int64_t>(offset[world])}, at::kByte)};
  if (!mine.empty()) std::memcpy(buffer[0].data_ptr<std::uint8_t>() + offset[me], mine.data(), mine.size());
  all_reduce_sum(buffer);  // the others' spans are zero: the sum is every rank's bytes exactly
  const at::Tensor b = buffer[0].to(at::kCPU).contiguous();
  const auto* p = reinterpret_cast<const char*>(b.data_ptr<std::uint8_t>());
  for (std::size_t r = 0; r < world; ++r) out[r].assign(p + offset[r], size[r]);
  return out;
}

std::int64_t resume_step(const std::filesystem::path& run_dir, const std::shared_ptr<ProcessGroup>& group) {
  const bool reader = group == nullptr || group->rank() == 0;
  const int world = group != nullptr ? group->world_size() : 1;
  std::int64_t next = 0;
  int started_on = reader ? world : 0;
  if (reader && std::filesystem::is_directory(run_dir))
    if (const auto last = read_last_checkpoint(run_dir)) {
      next = last->step + 1;
      started_on = last->world_size;
    }
  if (group != nullptr) {
    const auto found = group->sum({{"next", static_cast<double>(next)}, {"world", static_cast<double>(started_on)}});
    next = static_cast<std::int64_t>(found.at("next"));
    started_on = static_cast<int>(found.at("world"));
  }
  if (next > 0 && started_on != world)
    throw core::ConfigError((run_dir / "checkpoints.jsonl").string(), "world_size",
                            cat("the run was trained on ", started_on, " rank(s) and resumes only on as many, this "
                                "launch has ", world, " (launch ", started_on, " processes, e.g. torchrun "
                                "--nproc-per-node ", started_on, ", or start a new log_path)"));
  return next;
}

}  // namespace kbrl::train
