#include "kbrl/model/torch/sampler.hpp"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "decode_graph.hpp"
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

std::pair<at::Tensor, at::Tensor> draw_tokens(const at::Tensor& logits, const SamplingParams& params,
                                              const at::Tensor& uniforms) {
  const at::Tensor lp = sampling_logprobs(logits, params);  // [R, vocab] float32
  at::Tensor next;
  if (params.temperature == 0) {
    next = logits.argmax(-1);
  } else {
    // Inverse CDF in vocabulary order, in float64: the first token whose cumulative mass
    // exceeds u * total. Tokens after the last allowed one have cdf == total and are never
    // counted, so an excluded token cannot be drawn even when u * total rounds up.
    const at::Tensor cdf = lp.exp().to(at::kDouble).cumsum(-1);
    const at::Tensor total = cdf.narrow(-1, cdf.size(-1) - 1, 1);
    const at::Tensor target = uniforms.unsqueeze(1) * total;
    next = ((cdf <= target) & (cdf < total)).sum(-1);
  }
  return {next, lp.gather(-1, next.unsqueeze(1)).squeeze(1)};
}

#ifndef KBRL_CUDA_GRAPHS
bool cuda_graphs_built() { return false; }

std::unique_ptr<DecodeGraph> capture_decode_graph(const DecoderModel&, KvCache&, const std::vector<std::int64_t>&,
                                                  const SamplingParams&, std::int64_t) {
  throw core::InvalidArgument("this build of kbrl has no CUDA graphs (libtorch without CUDA)");
}
#endif

}  // namespace detail

Sampler::Sampler(const DecoderModel& model, TokenBytes token_bytes, SamplerOptions options)
    : model_(&model), token_bytes_(std::move(token_bytes)), options_(options) {}

std::vector<Sample> Sampler::generate(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                      const SamplingParams& params,
                                      const std::vector<std::uint64_t>& prompt_keys,
                                      const TokenCallback& on_token) const {
  check_params(params, token_bytes_);
  if (!prompt_keys.empty() && prompt_keys.size() != prompts.size())
    throw core::InvalidArgument(core::cat("Sampler::generate: prompt_keys has ", prompt_keys.size(),
                                            " entries for ", prompts.size(), " prompts"));
  if (n < 1) throw core::InvalidArgument(core::cat("Sampler::generate: n = ", n, " samples per prompt must be >= 1"));
  if (prompts.empty()) throw core::InvalidArgument("Sampler::generate: prompts: no prompts given");
  const std::int64_t vocab = model_->config().vocab_size;
  std::int64_t T = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw core::InvalidArgument(core::cat("Sampler::generate: prompts[", i, "] is empty"));
    for (std::size_t k = 0; k < prompts[i].size(); ++k)
      if (prompts[i][k] < 0 || prompts[i][k] >= vocab)
        throw core::InvalidArgument(core::cat("Sampler::generate: prompts[", i, "][", k, "] = ", prompts[i][k],
                                                " is outside the vocabulary [0, ", vocab, ")"));
    T = std::max<std::int64_t>(T, static_cast<std::int64_t>(prompts[i].size()));
  }
  for (const auto id : params.stop_token_ids)
    if (id < 0 || id >= vocab)
      throw core::InvalidArgument(core::cat("SamplingParams.stop_token_ids: ", id, " is outside the vocabulary [0, ", vocab, ")"));

  const c10::InferenceMode inference;
  const auto B = static_cast<std::int64_t>(prompts.size());
  // Left padding, built on the CPU and moved once.
  at::Tensor ids = at::zeros({B, T}, at::kLong), mask = at::zeros({B, T}, at::kLong);
  {
    auto id_a = ids.accessor<std::int64_t, 2>();
    auto mask_a = mask.accessor<std::int64_t, 2>();
    for (std::int64_t b = 0; b < B; ++b) {
      const auto& p = prompts[static_cast<std::size_t>(b)];
      const auto off = T - static_cast<std::int64_t>(p.size());
      for (std::size_t k = 0; k < p.size(); ++k) {
        id_a[b][off + static_cast<std::int64_t>(k)] = p[k];
        mask_a[b][off + static_cast<std::int64_t>(k)] = 1;
      }
    }
  }
  const c10::Device device = model_->device();
  KvCache cache = model_->make_cache(B, T + params.max_tokens);
  at::Tensor logits = model_->forward(ids.to(device), mask.to(device), &cache, /*last_only=*/true).squeeze(1);
  if (n > 1) {
    cache = cache.repeat_interleave(n);
    logits = logits.repeat_interleave(n, 0);
  }

  std::vector<Sample> out(static_cast<std::size_t>(B * n));
  std::vector<std::string> text(out.size());  // generated bytes, for stop strings
  std::vector<std::size_t> rows(out.size());  // batch row -> sample
  for (std::size_t s = 0; s < out.size(); ++s) {
    out[s].prompt_index = s / static_cast<std::size_t>(n);
    out[s].sample_index = s % static_cast<std::size_t>(n);
    out[s].tokens.reserve(static_cast<std::size_t>(params.max_tokens));
    rows[s] = s;
  }
  std::size_t longest_stop = 0;
  for (const auto& s : params.stop_strings) longest_stop = std::max(longest_stop, s.size());

  // Decoding runs as CUDA-graph replays where it can: a graph per batch size and attention
  // span (span grows in steps of options_.graph_span_step columns). Finished rows stay in the
  // graph's batch (their draws are ignored) until at most half of them still run; then the
  // cache drops them and a smaller graph is captured. Elsewhere each step runs eagerly and
  // finished rows leave the batch at once.
  const bool graphs = options_.cuda_graphs && device.is_cuda() && detail::cuda_graphs_built() && params.max_tokens > 2;
  std::unique_ptr<detail::DecodeGraph> graph;
  constexpr std::size_t kFinished = static_cast<std::size_t>(-1);
  std::vector<std::int64_t> last(rows.size(), 0);  // batch row -> its last token
  for (std::int64_t step = 0;; ++step) {
    std::vector<double> u(rows.size(), 0.5);
    if (params.temperature != 0)
      for (std::size_t r = 0; r < rows.size(); ++r)
        if (rows[r] != kFinished)
          u[r] = sampling_uniform(params.seed,
                                  prompt_keys.empty() ? out[rows[r]].prompt_index : prompt_keys[out[rows[r]].prompt_index],
                                  out[rows[r]].sample_index, static_cast<std::uint64_t>(step));
    at::Tensor host;  // [2, rows] float64: tokens and their logprobs; the one host sync of a step
    at::Tensor next_ids;  // eager: the drawn tokens [rows, 1], kept on the device for the next forward
    if (graph) {
      host = graph->step(u);
    } else {
      const auto [next, chosen_lp] = detail::draw_tokens(logits, params, at::tensor(u, at::kDouble).to(device));
      host = at::stack({next.to(at::kDouble), chosen_lp.to(at::kDouble)}).to(at::kCPU);
      next_ids = next.unsqueeze(1);
    }
    const auto h = host.accessor<double, 2>();

    std::vector<std::int64_t> keep;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] == kFinished) continue;
      Sample& s = out[rows[r]];
      const auto token = static_cast<std::int64_t>(h[0][static_cast<std::int64_t>(r)]);
      last[r] = token;
      s.tokens.push_back(token);
      s.logprobs.push_back(static_cast<float>(h[1][static_cast<std::int64_t>(r)]));
      bool done = true;
      if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) != params.stop_token_ids.end()) {
        s.stop_reason = StopReason::kStopToken;
      } else if (longest_stop > 0 && [&] {
                   std::string& t = text[rows[r]];
                   const std::size_t before = t.size();
                   t += token_bytes_(token);
                   // Only a match that ends in the new bytes can be new.
                   for (const auto& stop : params.stop_strings) {
                     const std::size_t from = before + 1 > stop.size() ? before + 1 - stop.size() : 0;
                     if (t.find(stop, from) != std::string::npos) return true;
                   }
                   return false;
                 }()) {
        s.stop_reason = StopReason::kStopString;
      } else if (static_cast<std::int64_t>(s.tokens.size()) >= params.max_tokens) {
        s.stop_reason = StopReason::kMaxTokens;
      } else {
        done = false;
      }
      if (on_token && !on_token(rows[r], s, done)) done = true;
      if (done) {
        rows[r] = kFinished;
      } else {
        keep.push_back(static_cast<std::int64_t>(r));
      }
    }
    if (keep.empty()) break;
    const bool compact = graphs ? keep.size() * 2 <= rows.size() : keep.size() < rows.size();
    if (compact) {
      const at::Tensor index = at::tensor(keep, at::kLong).to(device);
      graph.reset();  // it refers to the cache about to be replaced
      cache = cache.select_rows(index);
      if (next_ids.defined()) next_ids = next_ids.index_select(0, index);
      std::vector<std::size_t> still;
      std::vector<std::int64_t> still_last;
      for (const auto r : keep) {
        still.push_back(rows[static_cast<std::size_t>(r)]);
        still_last.push_back(last[static_cast<std::size_t>(r)]);
      }
      rows = std::move(still);
      last = std::move(still_last);
    }
    if (graphs) {
      if (!graph || cache.length() >= graph->span()) {
        graph.reset();
        const std::int64_t span =
            std::min(cache.capacity(), (cache.length() / options_.graph_span_step + 1) * options_.graph_span_step);
        graph = detail::capture_decode_graph(*model_, cache, last, params, span);
      }
    } else {
      logits = model_->forward(next_ids, {}, &cache, /*last_only=*/true).squeeze(1);
    }
  }
  return out;
}

}  // namespace kbrl::model
