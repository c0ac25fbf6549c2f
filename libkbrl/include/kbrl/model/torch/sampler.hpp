// Sampling from a DecoderModel (part of kbrl::torch): continuous batching over a paged KV cache,
// each prompt prefilled once for its n samples, and every sample drawing its tokens from
// counter-based uniforms keyed by (seed, prompt, sample, step), so a sample does not depend on
// its batch.
// docs/model.md "Sampler": the exact semantics of logprobs, stop strings and determinism.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"

namespace kbrl::model {

struct SamplingParams {
  std::int64_t max_tokens = 256;  // >= 1: tokens generated per sample at most
  double temperature = 1.0;       // >= 0; 0 = greedy (argmax, no randomness)
  double top_p = 1.0;             // in (0, 1]; 1 = off
  std::int64_t top_k = 0;         // >= 0; 0 = off
  std::vector<std::int64_t> stop_token_ids;
  // Byte strings, matched against the concatenated bytes of the generated tokens (not the
  // prompt). Needs the Sampler's TokenBytes.
  std::vector<std::string> stop_strings;
  std::uint64_t seed = 0;
};

enum class StopReason { kStopToken, kStopString, kMaxTokens };
const char* stop_reason_name(StopReason reason);  // "stop_token", "stop_string", "max_tokens"

struct Sample {
  std::size_t prompt_index = 0;
  std::size_t sample_index = 0;  // 0 .. n-1 within its prompt
  std::vector<std::int64_t> tokens;  // ends with the stop token / the token completing a stop string
  // log p(token) under the distribution it was drawn from: log_softmax(logits / temperature)
  // restricted to the top-k, then top-p set and renormalized. Greedy: log_softmax(logits), the
  // temperature-1 distribution without filtering (the policy's own logprob).
  std::vector<float> logprobs;
  StopReason stop_reason = StopReason::kMaxTokens;
};

// Called by Sampler::generate after each token it appends, on the calling thread, in step order:
// `index` is the sample's place in the result (prompt * n + sample), `sample` holds every token
// and logprob so far, `finished` says whether the sampler ended it at this token (stop_reason is
// then final). Returning false ends the sample here (its stop_reason stays kMaxTokens): a server
// cuts a request at its own max_tokens, or drops a client that went away. Because each sample's
// draws depend on (seed, prompt key, sample, step) only, ending one changes no other.
using TokenCallback = std::function<bool(std::size_t index, const Sample& sample, bool finished)>;

// The bytes a token stands for, for stop strings (for example Tokenizer::token_bytes).
using TokenBytes = std::function<std::string(std::int64_t id)>;
TokenBytes token_bytes_of(const tokenizer::Tokenizer& tokenizer);  // keeps a reference: the tokenizer must outlive it

// The pieces of one sampling step, exposed so that tests (and training) can compute the same
// distribution from a full forward pass.
//   logits [R, vocab] (any float dtype) -> log-probabilities [R, vocab] float32 of the
//   distribution sampled from: temperature, then top-k, then top-p over the top-k-renormalized
//   distribution (keep the smallest prefix by descending probability whose mass reaches top_p;
//   at least one token), renormalized; excluded tokens are -inf. temperature 0: log_softmax.
at::Tensor sampling_logprobs(const at::Tensor& logits, const SamplingParams& params);

// The uniform in [0, 1) that sample (prompt, sample) uses at `step`: splitmix64 over the four
// numbers, the top 53 bits. Pure function of its arguments.
double sampling_uniform(std::uint64_t seed, std::uint64_t prompt, std::uint64_t sample, std::uint64_t step);

struct SamplerOptions {
  // On a CUDA device, decode by replaying CUDA graphs of the whole step (model and draw), one per
  // batch-size bucket, instead of launching each kernel from the host. Needs libtorch with CUDA
  // (src/model/torch/cuda/decode_graph.cpp); ignored elsewhere.
  bool cuda_graphs = true;
  // Continuous batching: finished rows leave and waiting requests join at every step. false:
  // fixed batches (a batch is filled, then run until its last row finishes), for comparison.
  bool continuous = true;
  std::int64_t max_batch = 256;  // rows decoded together at most
  std::int64_t block_size = 16;  // tokens per KV-cache block
  // KV-cache capacity in tokens. 0: what the requests can need at most (generate), capped on
  // CUDA at kv_cache_memory_fraction of the device memory free when sampling starts.
  std::int64_t kv_cache_tokens = 0;
  double kv_cache_memory_fraction = 0.8;
  std::int64_t max_prefill_tokens = 16384;  // padded tokens per prefill forward (one longer prompt goes alone)
  bool portable = false;  // torch ops instead of the CUDA kernels (the kernels' reference)
};

// One prompt to sample n continuations of; key keys its draws (two requests with the same key
// and prompt draw the same uniforms).
struct SampleRequest {
  std::vector<std::int64_t> prompt;
  std::int64_t n = 1;
  std::uint64_t key = 0;
};

// Sampler::stream pulls requests from this while it has room: the next one, or nullopt when
// none is waiting now. It is asked again at every step while there is room, so requests may
// join while others run; stream returns once it has none and every admitted sample finished.
using RequestSource = std::function<std::optional<SampleRequest>()>;
// Receives each sample as it finishes: index = its place in admission order (the n samples of
// the k-th request pulled follow those of the requests before it), prompt_index = k.
using SampleSink = std::function<void(std::size_t index, Sample&& sample)>;

// Continuous batching over a paged KV cache (docs/model.md, "Sampler"): requests are prefilled
// as rows free up (a prompt once for its n samples, which share its full blocks), every running
// row decodes one token per step, and a row that finishes frees its blocks at once. When blocks
// run out, the youngest row is preempted and later recomputed from its tokens; its draws do not
// change, since they depend on (seed, key, sample, step) only.
class Sampler {
 public:
  explicit Sampler(const DecoderModel& model, TokenBytes token_bytes = {}, SamplerOptions options = {});

  // prompts: token ids, each non-empty, any lengths. n >= 1 samples per prompt. Returns
  // prompts.size() * n samples, prompt-major (index = prompt * n + sample). prompt_keys: the
  // number that keys prompt i's draws (default: i); a prompt given the same key draws the same
  // uniforms in any batch. Throws core::InvalidArgument naming the field for bad parameters, an
  // empty prompt, a token id outside the vocabulary, or stop strings without TokenBytes.
  // on_token (optional; nothing is done per token without it) sees every token as it is drawn.
  std::vector<Sample> generate(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                               const SamplingParams& params, const std::vector<std::uint64_t>& prompt_keys = {},
                               const TokenCallback& on_token = {}) const;

  // The same over a queue: requests join while others run, samples come out as they finish.
  // expected_tokens: the KV cache's size when SamplerOptions::kv_cache_tokens is 0, within
  // kv_cache_memory_fraction on CUDA (0: 65,536 tokens); what the requests hold at once beyond it
  // is preempted and recomputed, and a request that cannot fit alone is refused.
  void stream(const RequestSource& next_request, const SamplingParams& params, const SampleSink& on_finished,
              const TokenCallback& on_token = {}, std::int64_t expected_tokens = 0) const;

  // What the last generate / stream did (for benchmarks and logs).
  struct Stats {
    std::int64_t steps = 0;            // decode steps
    std::int64_t decoded_tokens = 0;   // tokens drawn by decode steps (prefill draws excluded)
    std::int64_t prefills = 0;         // prefill forwards
    std::int64_t preemptions = 0;      // rows preempted for lack of blocks
    std::int64_t cache_blocks = 0;     // blocks in the paged cache
    std::int64_t peak_blocks = 0;      // most blocks in use at once
    std::int64_t graphs_captured = 0;  // CUDA graphs captured
  };
  const Stats& stats() const { return stats_; }

 private:
  void run(const RequestSource& next_request, std::int64_t needed_tokens, const SamplingParams& params,
           const SampleSink& on_finished, const TokenCallback& on_token) const;

  const DecoderModel* model_;
  TokenBytes token_bytes_;
  SamplerOptions options_;
  mutable Stats stats_;
};

}  // namespace kbrl::model
