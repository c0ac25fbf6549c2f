#include "kbrl/model/torch/sampler.hpp"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode_graph.hpp"
#include "decode_ops.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"

namespace kbrl::model {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

void check_params(const SamplingParams& p, const TokenBytes& token_bytes) {
  auto bad = [](const std::string& field, const std::string& what) {
    throw core::InvalidArgument(core::cat("SamplingParams.", field, ": ", what));
  };
  if (p.max_tokens < 1) bad("max_tokens", core::cat(p.max_tokens, " must be at least 1"));
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    bad("temperature", core::cat(p.temperature, " must be finite and >= 0 (0 = greedy)"));
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("top_p", core::cat(p.top_p, " must be in (0, 1]"));
  if (p.top_k < 0) bad("top_k", core::cat(p.top_k, " must be >= 0 (0 = off)"));
  for (std::size_t i = 0; i < p.stop_strings.size(); ++i)
    if (p.stop_strings[i].empty()) bad(core::cat("stop_strings[", i, "]"), "must not be empty");
  if (!p.stop_strings.empty() && !token_bytes)
    bad("stop_strings", "given, but the Sampler has no TokenBytes to detokenize with");
}

// A prompt the model can take: not empty, every token inside the vocabulary. `where` names it
// in the error ("Sampler::generate: prompts[3]").
void check_prompt(const std::vector<std::int64_t>& prompt, const std::string& where, std::int64_t vocab) {
  if (prompt.empty()) throw core::InvalidArgument(where + " is empty");
  for (std::size_t k = 0; k < prompt.size(); ++k)
    if (prompt[k] < 0 || prompt[k] >= vocab)
      throw core::InvalidArgument(core::cat(where, "[", k, "] = ", prompt[k], " is outside the vocabulary [0, ", vocab, ")"));
}

}  // namespace

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kMaxTokens: return "max_tokens";
  }
  return "?";
}

TokenBytes token_bytes_of(const tokenizer::Tokenizer& tokenizer) {
  return [&tokenizer](std::int64_t id) { return std::string(tokenizer.token_bytes(static_cast<tokenizer::TokenId>(id))); };
}

double sampling_uniform(std::uint64_t seed, std::uint64_t prompt, std::uint64_t sample, std::uint64_t step) {
  // Chained so that every argument changes every bit of the result.
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ prompt);
  h = splitmix64(h ^ sample);
  h = splitmix64(h ^ step);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

at::Tensor sampling_logprobs(const at::Tensor& logits, const SamplingParams& params) {
  at::Tensor x = logits.to(at::kFloat);
  if (params.temperature == 0) return at::log_softmax(x, -1);
  x = x / params.temperature;
  const std::int64_t vocab = x.size(-1);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (params.top_k > 0 && params.top_k < vocab) {
    // Ties with the k-th logit stay in (as transformers' TopKLogitsWarper does).
    const at::Tensor kth = std::get<0>(x.topk(params.top_k, -1)).narrow(-1, params.top_k - 1, 1);
    x = x.masked_fill(x < kth, neg_inf);
  }
  at::Tensor lp = at::log_softmax(x, -1);
  if (params.top_p < 1) {
    const auto [sorted, order] = lp.sort(-1, /*descending=*/true);
    const at::Tensor p = sorted.exp();
    // Mass strictly before each token in descending order: a token stays while that mass is
    // below top_p, so the kept set is the smallest prefix reaching top_p (never empty).
    const at::Tensor before = p.cumsum(-1) - p;
    const at::Tensor drop = at::zeros_like(before, before.options().dtype(at::kBool)).scatter(-1, order, before >= params.top_p);
    lp = at::log_softmax(x.masked_fill(drop, neg_inf), -1);
  }
  return lp;
}

namespace detail {

#ifndef KBRL_CUDA_GRAPHS
bool cuda_graphs_built() { return false; }

std::unique_ptr<DecodeGraph> capture_decode_graph(const StepBody&, const at::Tensor&, c10::Device, GraphPool) {
  throw core::InvalidArgument("this build of kbrl has no CUDA graphs (libtorch without CUDA)");
}

GraphPool new_graph_pool() { return {0, 0}; }

std::int64_t device_free_bytes(c10::Device) { return -1; }
#endif

}  // namespace detail

namespace {

// logits [R, vocab], uniforms [R] float64 -> (tokens [R] int64, their logprobs [R] float32):
// the fused draw without top-k / top-p, sampling_logprobs (which sorts) with them.
std::pair<at::Tensor, at::Tensor> draw(const at::Tensor& logits, const SamplingParams& params,
                                       const at::Tensor& uniforms, bool portable) {
  if (params.temperature == 0 || (params.top_k == 0 && params.top_p == 1))
    return detail::sample_rows(logits, params.temperature, uniforms, portable);
  return detail::inverse_cdf(sampling_logprobs(logits, params), uniforms);
}

// Blocks of the paged cache: a free list and a reference count per block (a prompt's full
// blocks are held by each of its samples). Block 0 is kept back for the padding rows of a
// CUDA graph's batch.
class BlockPool {
 public:
  explicit BlockPool(std::int64_t blocks) : refs_(static_cast<std::size_t>(blocks), 0) {
    for (auto b = static_cast<std::int32_t>(blocks) - 1; b >= 1; --b) free_.push_back(b);
  }
  std::int64_t free() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t used() const { return static_cast<std::int64_t>(refs_.size()) - 1 - free(); }
  std::int32_t take() {
    const std::int32_t b = free_.back();
    free_.pop_back();
    refs_[static_cast<std::size_t>(b)] = 1;
    return b;
  }
  void share(std::int32_t b) { ++refs_[static_cast<std::size_t>(b)]; }
  void release(std::vector<std::int32_t>& blocks) {
    for (const auto b : blocks)
      if (--refs_[static_cast<std::size_t>(b)] == 0) free_.push_back(b);
    blocks.clear();
  }

 private:
  std::vector<std::int32_t> free_;
  std::vector<int> refs_;
};

// A sample in flight.
struct Row {
  std::size_t index = 0;  // place in admission order (SampleSink's index)
  std::uint64_t key = 0;
  std::shared_ptr<const std::vector<std::int64_t>> prompt;
  Sample out;
  std::string text;                  // generated bytes, for stop strings
  std::vector<std::int32_t> blocks;  // its tokens' blocks, in order
  std::int64_t cached = 0;           // tokens whose keys and values are in the cache, or will be when
                                     // the launched steps are done
  int in_flight = 0;                 // launched steps whose tokens the host has not taken yet
  std::int64_t feedback_row = -1;    // its row in the last launched step
  bool finished = false;
};

// A launched decode step: its rows, in order, and where its tokens and logprobs land.
struct StepInFlight {
  std::vector<Row*> rows;
  at::Tensor out;                  // host [2, >= rows] float64, written when `done` has passed
  std::optional<c10::Event> done;  // CUDA: recorded after the copy to `out`
};

// A request not yet (or not entirely) admitted, or a preempted row waiting to be recomputed.
struct Waiting {
  std::shared_ptr<const std::vector<std::int64_t>> prompt;
  std::uint64_t key = 0;
  std::size_t request = 0;      // prompt_index of its samples
  std::size_t first_index = 0;  // index of sample `first_sample`
  std::int64_t first_sample = 0, count = 0;
  std::unique_ptr<Row> resumed;  // set for a preempted row
  // Tokens to prefill: the prompt, or a resumed row's prompt and all but its last token.
  std::int64_t tokens() const {
    return static_cast<std::int64_t>(prompt->size()) +
           (resumed ? static_cast<std::int64_t>(resumed->out.tokens.size()) - 1 : 0);
  }
};

// Per row of a step's inputs: token, position, slot, context length, feedback row; then the block
// table. A row whose last token was drawn by the step before, still on the device, has token 0 and
// its row in that step as feedback row (else -1).
constexpr std::int64_t kInputColumns = 5;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The batch sizes graphs are captured for: every running count rounds up to one of these.
std::int64_t graph_rows(std::int64_t rows, std::int64_t max_batch) {
  std::int64_t b = 1;
  while (b < rows && b < 8) b *= 2;
  if (b < rows) b = rows <= 64 ? ceil_div(rows, 8) * 8 : rows <= 128 ? ceil_div(rows, 16) * 16 : ceil_div(rows, 32) * 32;
  return std::min(b, std::max(max_batch, rows));
}

}  // namespace

Sampler::Sampler(const DecoderModel& model, TokenBytes token_bytes, SamplerOptions options)
    : model_(&model), token_bytes_(std::move(token_bytes)), options_(options) {
  auto bad = [](const std::string& what) { throw core::InvalidArgument("SamplerOptions." + what); };
  if (options_.max_batch < 1) bad(core::cat("max_batch: ", options_.max_batch, " must be >= 1"));
  if (options_.block_size < 1) bad(core::cat("block_size: ", options_.block_size, " must be >= 1"));
  if (options_.kv_cache_tokens < 0) bad(core::cat("kv_cache_tokens: ", options_.kv_cache_tokens, " must be >= 0 (0 = auto)"));
  if (!(options_.kv_cache_memory_fraction > 0 && options_.kv_cache_memory_fraction <= 1))
    bad(core::cat("kv_cache_memory_fraction: ", options_.kv_cache_memory_fraction, " must be in (0, 1]"));
  if (options_.max_prefill_tokens < 1) bad(core::cat("max_prefill_tokens: ", options_.max_prefill_tokens, " must be >= 1"));
}

std::vector<Sample> Sampler::generate(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                      const SamplingParams& params,
                                      const std::vector<std::uint64_t>& prompt_keys,
                                      const TokenCallback& on_token) const {
  if (!prompt_keys.empty() && prompt_keys.size() != prompts.size())
    throw core::InvalidArgument(core::cat("Sampler::generate: prompt_keys has ", prompt_keys.size(),
                                            " entries for ", prompts.size(), " prompts"));
  if (n < 1) throw core::InvalidArgument(core::cat("Sampler::generate: n = ", n, " samples per prompt must be >= 1"));
  if (prompts.empty()) throw core::InvalidArgument("Sampler::generate: prompts: no prompts given");
  for (std::size_t i = 0; i < prompts.size(); ++i)
    check_prompt(prompts[i], core::cat("Sampler::generate: prompts[", i, "]"), model_->config().vocab_size);
  // The most the requests can hold at once: each prompt's blocks plus each sample's own, and
  // the block of headroom per row that admission asks for.
  const std::int64_t bs = options_.block_size;
  std::int64_t needed = 0;
  for (const auto& p : prompts) {
    const auto P = static_cast<std::int64_t>(p.size());
    needed += (P / bs + n * (ceil_div(P % bs + params.max_tokens, bs) + 1)) * bs;
  }
  std::size_t next = 0;
  std::vector<Sample> out(prompts.size() * static_cast<std::size_t>(n));
  run(
      [&]() -> std::optional<SampleRequest> {
        if (next == prompts.size()) return std::nullopt;
        const std::size_t i = next++;
        return SampleRequest{prompts[i], n, prompt_keys.empty() ? i : prompt_keys[i]};
      },
      needed, params, [&](std::size_t index, Sample&& s) { out[index] = std::move(s); }, on_token);
  return out;
}

void Sampler::stream(const RequestSource& next_request, const SamplingParams& params, const SampleSink& on_finished,
                     const TokenCallback& on_token, std::int64_t expected_tokens) const {
  if (expected_tokens < 0)
    throw core::InvalidArgument(core::cat("Sampler::stream: expected_tokens = ", expected_tokens, " must be >= 0"));
  std::size_t pulled = 0;
  const RequestSource checked = [&]() -> std::optional<SampleRequest> {
    std::optional<SampleRequest> r = next_request();
    if (r) {
      const std::string where = core::cat("Sampler::stream: request ", pulled++);
      check_prompt(r->prompt, where + ": prompt", model_->config().vocab_size);
      if (r->n < 1) throw core::InvalidArgument(core::cat(where, ": n = ", r->n, " must be >= 1"));
    }
    return r;
  };
  run(checked, expected_tokens, params, on_finished, on_token);
}

void Sampler::run(const RequestSource& next_request, std::int64_t needed_tokens, const SamplingParams& params,
                  const SampleSink& on_finished, const TokenCallback& on_token) const {
  check_params(params, token_bytes_);
  const std::int64_t vocab = model_->config().vocab_size;
  for (const auto id : params.stop_token_ids)
    if (id < 0 || id >= vocab)
      throw core::InvalidArgument(core::cat("SamplingParams.stop_token_ids: ", id, " is outside the vocabulary [0, ", vocab, ")"));
  const c10::InferenceMode inference;
  const c10::Device device = model_->device();
  const std::int64_t bs = options_.block_size;
  stats_ = Stats{};

  // The cache: what the requests can need (or the given size), within the memory allowed.
  std::int64_t tokens = options_.kv_cache_tokens;
  if (tokens == 0) {
    const std::int64_t per_token = PagedKvCache::bytes_per_token(model_->config(), model_->dtype());
    const std::int64_t free_bytes = device.is_cuda() ? detail::device_free_bytes(device) : -1;
    const std::int64_t budget =
        free_bytes < 0 ? std::int64_t{1} << 40
                       : static_cast<std::int64_t>(static_cast<double>(free_bytes) * options_.kv_cache_memory_fraction) / per_token;
    tokens = std::min(needed_tokens > 0 ? needed_tokens : (std::int64_t{1} << 16), budget);
  }
  const std::int64_t num_blocks = ceil_div(tokens, bs) + 1;  // + the padding rows' block
  PagedKvCache cache(model_->config(), num_blocks, bs, at::TensorOptions().dtype(model_->dtype()).device(device));
  BlockPool pool(num_blocks);
  stats_.cache_blocks = num_blocks;

  const bool graphs = options_.cuda_graphs && device.is_cuda() && detail::cuda_graphs_built();
  std::int64_t width = 0;  // block-table columns: the longest sequence admitted so far, in blocks
  std::map<std::int64_t, std::unique_ptr<detail::DecodeGraph>> graph_of;  // by rows
  std::int64_t graph_width = 0;  // the width graph_of's graphs were captured for
  detail::GraphPool graph_pool{0, 0};
  if (graphs) graph_pool = detail::new_graph_pool();
  // Each step's drawn tokens, kept on the device for the next step, which is launched before the
  // host has read them.
  const at::Tensor feedback = at::zeros({options_.max_batch}, at::TensorOptions().dtype(at::kLong).device(device));
  // The attention's scratch counters, for the most rows a step can have.
  const std::int64_t counters = detail::paged_attention_counters(
      options_.max_batch, model_->config().num_attention_heads, model_->config().num_key_value_heads);
  const at::Tensor attention_counters =
      device.is_cuda() && counters > 0 ? at::zeros({counters}, at::TensorOptions().dtype(at::kInt).device(device)) : at::Tensor();
  // The step every decode runs, eagerly or captured: the model over the paged cache, then the draw.
  const detail::StepBody body = [&](const at::Tensor& in, const at::Tensor& uniforms, at::Tensor& out) {
    PagedStep step;
    const at::Tensor from = in.select(1, 4).to(at::kLong);
    step.ids = at::where(from >= 0, feedback.index_select(0, from.clamp_min(0)), in.select(1, 0).to(at::kLong));
    step.positions = in.select(1, 1).to(at::kLong);
    step.slots = in.select(1, 2).to(at::kLong);
    step.context_lens = in.select(1, 3).contiguous();
    step.block_tables = in.narrow(1, kInputColumns, in.size(1) - kInputColumns).contiguous();
    step.attention_counters = attention_counters;
    const at::Tensor logits = model_->decode_paged(step, cache, options_.portable);
    const auto [next, logprobs] = draw(logits, params, uniforms, options_.portable);
    feedback.narrow(0, 0, next.size(0)).copy_(next);
    out.select(0, 0).copy_(next);
    out.select(0, 1).copy_(logprobs);
  };

  std::size_t longest_stop = 0;
  for (const auto& s : params.stop_strings) longest_stop = std::max(longest_stop, s.size());
  // Appends a drawn token; true when the row is finished.
  const auto take_token = [&](Row& row, std::int64_t token, double logprob) {
    Sample& s = row.out;
    s.tokens.push_back(token);
    s.logprobs.push_back(static_cast<float>(logprob));
    bool done = true;
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) != params.stop_token_ids.end()) {
      s.stop_reason = StopReason::kStopToken;
    } else if (longest_stop > 0 && [&] {
                 const std::size_t before = row.text.size();
                 row.text += token_bytes_(token);
                 // Only a match that ends in the new bytes can be new.
                 for (const auto& stop : params.stop_strings) {
                   const std::size_t from = before + 1 > stop.size() ? before + 1 - stop.size() : 0;
                   if (row.text.find(stop, from) != std::string::npos) return true;
                 }
                 return false;
               }()) {
      s.stop_reason = StopReason::kStopString;
    } else if (static_cast<std::int64_t>(s.tokens.size()) >= params.max_tokens) {
      s.stop_reason = StopReason::kMaxTokens;
    } else {
      done = false;
    }
    if (on_token && !on_token(row.index, s, done)) done = true;
    return done;
  };
  // The uniform of the row's next draw (its tokens in flight counted).
  const auto uniform = [&](const Row& row) {
    return params.temperature == 0 ? 0.5
                                   : sampling_uniform(params.seed, row.key, row.out.sample_index,
                                                      static_cast<std::uint64_t>(row.out.tokens.size()) +
                                                          static_cast<std::uint64_t>(row.in_flight));
  };
  // Hands a finished row's sample out and frees its blocks (the row itself is the caller's).
  const auto finish = [&](Row& row) {
    pool.release(row.blocks);
    on_finished(row.index, std::move(row.out));
  };

  std::deque<Waiting> waiting;
  std::vector<std::unique_ptr<Row>> running;  // in admission order: the youngest is preempted first
  std::size_t requests = 0, samples = 0;
  // Pulls the next request into `waiting`; false when the source has none now (it is asked
  // again at the next step: requests may join while others run).
  const auto pull = [&]() {
    std::optional<SampleRequest> r = next_request();
    if (!r) return false;
    const auto P = static_cast<std::int64_t>(r->prompt.size());
    // Alone, a row must be admitted (its prompt's blocks and one of headroom) and run out.
    if (std::max(ceil_div(P + params.max_tokens, bs), P / bs + 2) > num_blocks - 1)
      throw core::InvalidArgument(core::cat("Sampler: request ", requests, " (", P, " prompt tokens + max_tokens ",
                                              params.max_tokens, ") does not fit the KV cache of ", (num_blocks - 1) * bs,
                                              " tokens (SamplerOptions.kv_cache_tokens, kv_cache_memory_fraction)"));
    Waiting w;
    w.prompt = std::make_shared<const std::vector<std::int64_t>>(std::move(r->prompt));
    w.key = r->key;
    w.request = requests++;
    w.first_index = samples;
    w.count = r->n;
    samples += static_cast<std::size_t>(r->n);
    waiting.push_back(std::move(w));
    return true;
  };

  // Prefills the admitted items in one forward and puts their rows in `running` (new samples
  // draw their first token from the prefill's logits).
  const auto prefill = [&](std::vector<Waiting>& batch) {
    const auto B = static_cast<std::int64_t>(batch.size());
    std::int64_t T = 0;
    for (const auto& w : batch) T = std::max(T, w.tokens());
    at::Tensor ids = at::zeros({B, T}, at::kLong), mask = at::zeros({B, T}, at::kLong);
    std::vector<std::int64_t> src_rows, src_cols, dst_slots;
    std::vector<std::vector<std::unique_ptr<Row>>> rows_of(batch.size());
    for (std::int64_t b = 0; b < B; ++b) {
      Waiting& w = batch[static_cast<std::size_t>(b)];
      const std::int64_t L = w.tokens(), off = T - L;
      std::vector<std::int64_t> seq(w.prompt->begin(), w.prompt->end());
      if (w.resumed) seq.insert(seq.end(), w.resumed->out.tokens.begin(), w.resumed->out.tokens.end() - 1);
      for (std::int64_t k = 0; k < L; ++k) {
        ids[b][off + k] = seq[static_cast<std::size_t>(k)];
        mask[b][off + k] = 1;
      }
      // Blocks: the full ones shared by the item's rows, the last partial one each row's own.
      std::vector<std::unique_ptr<Row>>& rows = rows_of[static_cast<std::size_t>(b)];
      if (w.resumed) {
        rows.push_back(std::move(w.resumed));
      } else {
        for (std::int64_t s = 0; s < w.count; ++s) {
          auto row = std::make_unique<Row>();
          row->index = w.first_index + static_cast<std::size_t>(s);
          row->key = w.key;
          row->prompt = w.prompt;
          row->out.prompt_index = w.request;
          row->out.sample_index = static_cast<std::size_t>(w.first_sample + s);
          row->out.tokens.reserve(static_cast<std::size_t>(params.max_tokens));
          rows.push_back(std::move(row));
        }
      }
      const std::int64_t full = L / bs;
      for (std::int64_t k = 0; k < full; ++k) {
        const std::int32_t block = pool.take();
        for (std::size_t r = 0; r < rows.size(); ++r) {
          if (r > 0) pool.share(block);
          rows[r]->blocks.push_back(block);
        }
        for (std::int64_t t = 0; t < bs; ++t) {
          src_rows.push_back(b);
          src_cols.push_back(off + k * bs + t);
          dst_slots.push_back(block * bs + t);
        }
      }
      for (auto& row : rows) {
        if (L % bs != 0) {
          const std::int32_t block = pool.take();
          row->blocks.push_back(block);
          for (std::int64_t t = full * bs; t < L; ++t) {
            src_rows.push_back(b);
            src_cols.push_back(off + t);
            dst_slots.push_back(block * bs + t % bs);
          }
        }
        row->cached = L;
      }
    }
    KvCache dense = model_->make_cache(B, T);
    const at::Tensor logits = model_->forward(ids.to(device), mask.to(device), &dense, /*last_only=*/true).squeeze(1);
    const auto index = [&](const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong).to(device); };
    cache.copy_from(dense, index(src_rows), index(src_cols), index(dst_slots));
    ++stats_.prefills;

    // First tokens of the new samples, drawn from their prompt's logits (a resumed row's next
    // token is drawn already); the rows that do not finish on it run.
    std::vector<std::int64_t> draw_rows;  // the prompt (batch row) of each draw
    std::vector<double> u;
    std::vector<std::unique_ptr<Row>> fresh;
    for (std::int64_t b = 0; b < B; ++b)
      for (auto& row : rows_of[static_cast<std::size_t>(b)]) {
        if (!row->out.tokens.empty()) {
          running.push_back(std::move(row));
          continue;
        }
        draw_rows.push_back(b);
        u.push_back(uniform(*row));
        fresh.push_back(std::move(row));
      }
    if (fresh.empty()) return;
    const auto [next, lp] = draw(logits.index_select(0, index(draw_rows)), params, at::tensor(u, at::kDouble).to(device),
                                 options_.portable);
    const at::Tensor host = at::stack({next.to(at::kDouble), lp.to(at::kDouble)}).to(at::kCPU);
    const auto h = host.accessor<double, 2>();
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      const auto r = static_cast<std::int64_t>(i);
      if (take_token(*fresh[i], static_cast<std::int64_t>(h[0][r]), h[1][r])) {
        finish(*fresh[i]);
      } else {
        running.push_back(std::move(fresh[i]));
      }
    }
  };

  // Admits what fits (rows, blocks, prefill size) from the front of `waiting`; true if any.
  const auto admit = [&]() {
    std::vector<Waiting> batch;
    std::int64_t rows = static_cast<std::int64_t>(running.size()), free = pool.free(), longest = 0;
    while (true) {
      if (waiting.empty() && !pull()) break;
      Waiting& w = waiting.front();
      const std::int64_t L = w.tokens();
      const std::int64_t room = options_.max_batch - rows;
      if (room <= 0) break;
      const std::int64_t take = w.resumed ? 1 : std::min(w.count, room);
      // The prompt's blocks, each row's partial block, and one block of headroom per row.
      const std::int64_t blocks = L / bs + take * ((L % bs != 0 ? 1 : 0) + 1);
      if (blocks > free) break;
      if (!batch.empty() && (static_cast<std::int64_t>(batch.size()) + 1) * std::max(longest, L) > options_.max_prefill_tokens)
        break;
      if (w.resumed || take == w.count) {
        batch.push_back(std::move(w));
        waiting.pop_front();
      } else {  // the rest of the request's samples wait for room (their prompt is prefilled again)
        Waiting part;
        part.prompt = w.prompt;
        part.key = w.key;
        part.request = w.request;
        part.first_index = w.first_index;
        part.first_sample = w.first_sample;
        part.count = take;
        w.first_index += static_cast<std::size_t>(take);
        w.first_sample += take;
        w.count -= take;
        batch.push_back(std::move(part));
      }
      rows += take;
      free -= blocks - take;  // the headroom stays free
      longest = std::max(longest, L);
      width = std::max(width, ceil_div(static_cast<std::int64_t>(batch.back().prompt->size()) + params.max_tokens, bs));
    }
    if (batch.empty()) return false;
    prefill(batch);
    return true;
  };

  // Gives a row back to the queue: its blocks are freed and it is recomputed from its tokens.
  const auto preempt = [&](std::unique_ptr<Row> row) {
    pool.release(row->blocks);
    row->cached = 0;
    Waiting w;
    w.prompt = row->prompt;
    w.key = row->key;
    w.request = row->out.prompt_index;
    w.resumed = std::move(row);
    waiting.push_front(std::move(w));
    ++stats_.preemptions;
  };

  // Decoding keeps one step in flight ahead of the host: step t + 1 is launched (its rows' last
  // tokens read from `feedback` on the device) before the host takes step t's tokens, so the
  // GPU does not wait for the host between steps. A row that finishes at step t was computed
  // once more in step t + 1, whose token for it is dropped.
  const bool pinned = device.is_cuda();
  std::optional<StepInFlight> pending;  // the launched step whose tokens the host has not taken
  std::vector<std::unique_ptr<Row>> retired;  // finished rows the step in flight still computes
  const auto collect = [&]() {
    StepInFlight step = std::move(*pending);
    pending.reset();
    if (step.done) step.done->synchronize();
    const std::vector<std::unique_ptr<Row>> referenced = std::move(retired);  // their last step is this one
    retired.clear();
    const auto h = step.out.accessor<double, 2>();
    for (std::size_t r = 0; r < step.rows.size(); ++r) {
      Row& row = *step.rows[r];
      --row.in_flight;
      if (row.finished) continue;
      ++stats_.decoded_tokens;
      const auto i = static_cast<std::int64_t>(r);
      row.finished = take_token(row, static_cast<std::int64_t>(h[0][i]), h[1][i]);
    }
    std::vector<std::unique_ptr<Row>> still;
    for (auto& row : running) {
      if (!row->finished) {
        still.push_back(std::move(row));
        continue;
      }
      finish(*row);
      if (row->in_flight > 0) retired.push_back(std::move(row));  // the next step computes it once more
    }
    running = std::move(still);
  };
  // Inputs of `rows` padding rows (host, int32): token 0 at position 0 of the spare block 0,
  // attending to it alone, no feedback row.
  const auto padding_rows = [&](std::int64_t rows, const at::TensorOptions& options) {
    at::Tensor t = at::zeros({rows, kInputColumns + width}, options.dtype(at::kInt));
    t.select(1, 3).fill_(1);
    t.select(1, 4).fill_(-1);
    return t;
  };
  // A row the next step decodes: one whose tokens (in flight included) are short of max_tokens
  // (one that is not finishes when its last token is taken).
  const auto decodes = [&](const Row& row) {
    return static_cast<std::int64_t>(row.out.tokens.size()) + row.in_flight < params.max_tokens;
  };

  while (true) {
    if (options_.continuous) {
      admit();
    } else if (running.empty() && !pending) {
      while (admit()) {}  // a fixed batch: fill it, then run it out
    }
    if (graphs && graph_width != width) {  // a longer sequence came: the graphs' block tables are too narrow
      if (pending) collect();
      // Freeing every graph of a pool releases the pool: the new graphs need a new one.
      graph_of.clear();
      graph_pool = detail::new_graph_pool();
      graph_width = width;
    }
    // A block for each decoding row's new token. When none is left, the step in flight is taken
    // first (rows may finish); then the youngest rows give theirs up.
    for (std::size_t i = 0; i < running.size();) {
      Row& row = *running[i];
      if (!decodes(row) || row.cached / bs < static_cast<std::int64_t>(row.blocks.size())) {
        ++i;
        continue;
      }
      if (pool.free() == 0) {
        if (pending) {
          collect();
          i = 0;
          continue;
        }
        if (running.size() == 1)
          throw core::InvalidArgument(core::cat("Sampler: the KV cache (", (num_blocks - 1) * bs,
                                                  " tokens) cannot hold one sequence"));
        preempt(std::move(running.back()));
        running.pop_back();
        continue;
      }
      row.blocks.push_back(pool.take());
      ++i;
    }
    stats_.peak_blocks = std::max(stats_.peak_blocks, pool.used());
    std::vector<Row*> batch;
    for (auto& row : running)
      if (decodes(*row)) batch.push_back(row.get());
    if (batch.empty()) {
      if (pending) {
        collect();
      } else if (running.empty() && waiting.empty() && !pull()) {
        break;
      }
      continue;
    }

    // The step's inputs (pinned on CUDA), padded to the graph's rows.
    const auto R = static_cast<std::int64_t>(batch.size());
    const std::int64_t G = graphs ? graph_rows(R, options_.max_batch) : R;
    if (graphs && pending && graph_of.count(G) == 0) {
      // Capturing runs the step once on padding rows, whose draws would overwrite the feedback
      // the step in flight leaves for this one: take that step first.
      collect();
      continue;
    }
    const at::TensorOptions host = at::TensorOptions().pinned_memory(pinned);
    StepInFlight step;
    step.rows = batch;
    step.out = at::empty({2, G}, host.dtype(at::kDouble));
    at::Tensor inputs = padding_rows(G, host);
    at::Tensor uniforms = at::full({G}, 0.5, host.dtype(at::kDouble));
    {
      auto a = inputs.accessor<std::int32_t, 2>();
      auto u = uniforms.accessor<double, 1>();
      for (std::int64_t r = 0; r < R; ++r) {
        Row& row = *batch[static_cast<std::size_t>(r)];
        const std::int64_t pos = row.cached;
        if (row.in_flight > 0) {
          a[r][4] = static_cast<std::int32_t>(row.feedback_row);
        } else {
          a[r][0] = static_cast<std::int32_t>(row.out.tokens.back());
        }
        a[r][1] = static_cast<std::int32_t>(pos);
        a[r][2] = static_cast<std::int32_t>(row.blocks[static_cast<std::size_t>(pos / bs)] * bs + pos % bs);
        a[r][3] = static_cast<std::int32_t>(pos + 1);
        for (std::size_t k = 0; k < row.blocks.size(); ++k) a[r][kInputColumns + static_cast<std::int64_t>(k)] = row.blocks[k];
        u[r] = uniform(row);
      }
    }
    if (graphs) {
      auto& graph = graph_of[G];
      if (!graph) {
        graph = detail::capture_decode_graph(body, padding_rows(G, at::TensorOptions()), device, graph_pool);
        ++stats_.graphs_captured;
      }
      graph->launch(inputs, uniforms, step.out);
    } else if (device.is_cuda()) {
      at::Tensor out = at::empty({2, G}, at::TensorOptions().dtype(at::kDouble).device(device));
      body(inputs.to(device, /*non_blocking=*/true), uniforms.to(device, /*non_blocking=*/true), out);
      step.out.copy_(out, /*non_blocking=*/true);
    } else {
      body(inputs.to(device), uniforms.to(device), step.out);
    }
    if (device.is_cuda()) {
      step.done.emplace(device.type());
      step.done->record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    }
    for (std::int64_t r = 0; r < R; ++r) {
      Row& row = *batch[static_cast<std::size_t>(r)];
      ++row.cached;
      ++row.in_flight;
      row.feedback_row = r;
    }
    ++stats_.steps;
    if (pending) collect();
    pending = std::move(step);
  }
}

}  // namespace kbrl::model
