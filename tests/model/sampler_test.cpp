// The sampler on the committed tiny checkpoints: greedy against transformers' tokens, logprobs
// against a full forward pass, the allowed sets of top-k and top-p checked from the full
// distribution, stopping, seeds, batch independence, and the empirical distribution of many
// samples against the model's.
#include "kbrl/model/torch/sampler.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "parity.hpp"
#include "test_files.hpp"

using namespace kbrl::model;
using kbrl::tokenizer::TokenId;
using kbrl::tokenizer::Tokenizer;
namespace fs = std::filesystem;

namespace {

// KBRL_TEST_DEVICE=cuda runs the whole suite with the models on the GPU.
DecoderModel load(const fs::path& dir) {
  LoadOptions o;
  if (const char* d = std::getenv("KBRL_TEST_DEVICE"); d != nullptr && *d != '\0') o.device = c10::Device(d);
  return DecoderModel::load(dir, o);
}

std::vector<fs::path> fixtures() {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kbrl::test::model_fixtures()))
    if (fs::exists(e.path() / "reference.safetensors")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  REQUIRE(dirs.size() == 4);
  return dirs;
}

std::vector<std::int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

std::vector<std::vector<std::int64_t>> prompts_of(const kbrl::test::Reference& ref) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& p : ref.prompts) out.push_back(to_vector(p));
  return out;
}

// Logits for every generated token's position from one full pass over prompt + tokens (no
// cache): [tokens, vocab].
at::Tensor full_pass_logits(const DecoderModel& m, const std::vector<std::int64_t>& prompt, const Sample& s) {
  std::vector<std::int64_t> seq = prompt;
  seq.insert(seq.end(), s.tokens.begin(), s.tokens.end());
  const at::Tensor logits = m.forward(at::tensor(seq, at::kLong).unsqueeze(0))[0];
  return logits.narrow(0, static_cast<std::int64_t>(prompt.size()) - 1, static_cast<std::int64_t>(s.tokens.size()));
}

// Whether `token` may be drawn at all, decided from the full distribution in float64 by
// definition (rank among the logits for top-k, mass of the more likely tokens for top-p),
// independently of sampling_logprobs.
bool allowed(const at::Tensor& logits_row, std::int64_t token, const SamplingParams& p) {
  const at::Tensor x = logits_row.to(at::kDouble) / p.temperature;
  const double mine = x[token].item<double>();
  at::Tensor keep = at::ones_like(x, x.options().dtype(at::kBool));
  if (p.top_k > 0) {
    if ((x > mine).sum().item<std::int64_t>() >= p.top_k) return false;
    const double kth = std::get<0>(x.topk(p.top_k)).min().item<double>();
    keep = x >= kth;
  }
  const at::Tensor probs = at::softmax(x.masked_fill(~keep, -INFINITY), 0);
  const double q = probs[token].item<double>();
  // Mass strictly more likely than this token must be below top_p (small slack for the float32
  // computation the sampler does).
  return probs.masked_select(probs > q).sum().item<double>() < p.top_p + 1e-5;
}

SamplingParams params_with(double temperature, double top_p, std::int64_t top_k, std::int64_t max_tokens,
                           std::uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.max_tokens = max_tokens;
  p.seed = seed;
  return p;
}

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kbrl::core::InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument>";
}

}  // namespace

TEST_CASE("sampler greedy equals transformers fp32 greedy tokens") {
  for (const auto& dir : fixtures()) {
    INFO(dir.filename().string());
    const auto ref = kbrl::test::load_reference(dir);
    const auto m = load(dir);
    const auto prompts = prompts_of(ref);
    const auto samples = Sampler(m).generate(prompts, 2, params_with(0, 1, 0, ref.greedy_tokens));
    REQUIRE(samples.size() == 2 * prompts.size());
    for (const auto& s : samples) {
      CHECK(s.tokens == to_vector(ref.greedy_fp32[s.prompt_index]));
      CHECK(s.stop_reason == StopReason::kMaxTokens);
      // Greedy logprobs are under the temperature-1 distribution, unfiltered.
      const at::Tensor lp = at::log_softmax(full_pass_logits(m, prompts[s.prompt_index], s).to(at::kFloat), -1);
      for (std::size_t k = 0; k < s.tokens.size(); ++k)
        CHECK(std::abs(s.logprobs[k] - lp[static_cast<std::int64_t>(k)][s.tokens[k]].item<float>()) <= 1e-4);
    }
  }
}

TEST_CASE("sampler top_k 1 equals greedy") {
  const auto dir = kbrl::test::model_fixtures() / "llama3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  for (const double t : {0.5, 1.0, 3.0}) {
    const auto samples = Sampler(m).generate(prompts_of(ref), 3, params_with(t, 1, 1, ref.greedy_tokens));
    for (const auto& s : samples) {
      CHECK(s.tokens == to_vector(ref.greedy_fp32[s.prompt_index]));
      // The only token allowed has probability 1 after renormalization.
      for (const float lp : s.logprobs) CHECK(lp == 0.0f);
    }
  }
}

TEST_CASE("sampler logprobs equal a full forward pass and tokens stay in the allowed set") {
  const std::vector<SamplingParams> cases = {params_with(1.0, 1.0, 0, 24), params_with(0.7, 0.8, 0, 24),
                                             params_with(1.3, 1.0, 10, 24), params_with(0.9, 0.6, 20, 24),
                                             params_with(2.0, 0.3, 0, 24)};
  for (const auto& dir : fixtures()) {
    const auto ref = kbrl::test::load_reference(dir);
    const auto m = load(dir);
    const auto prompts = prompts_of(ref);
    for (std::size_t c = 0; c < cases.size(); ++c) {
      INFO(dir.filename().string() << " case " << c);
      const auto& p = cases[c];
      const auto samples = Sampler(m).generate(prompts, 4, p);
      double worst = 0;
      std::int64_t outside = 0, checked = 0;
      for (const auto& s : samples) {
        REQUIRE(s.tokens.size() == static_cast<std::size_t>(p.max_tokens));
        REQUIRE(s.logprobs.size() == s.tokens.size());
        const at::Tensor logits = full_pass_logits(m, prompts[s.prompt_index], s);
        const at::Tensor lp = sampling_logprobs(logits, p);
        for (std::size_t k = 0; k < s.tokens.size(); ++k) {
          const auto row = static_cast<std::int64_t>(k);
          worst = std::max(worst, double(std::abs(s.logprobs[k] - lp[row][s.tokens[k]].item<float>())));
          outside += allowed(logits[row], s.tokens[k], p) ? 0 : 1;
          ++checked;
        }
      }
      CHECK(worst <= 1e-4);
      CHECK(outside == 0);
      CHECK(checked == 4 * 24 * static_cast<std::int64_t>(prompts.size()));
    }
  }
}

TEST_CASE("sampler top-p and top-k exclude exactly the tokens their definitions exclude") {
  // A hand-made distribution: probabilities 0.4 0.3 0.2 0.1 (logits = their logs).
  const at::Tensor logits = at::log(at::tensor({0.1, 0.4, 0.2, 0.3}, at::kFloat)).unsqueeze(0);
  auto kept = [&](double top_p, std::int64_t top_k) {
    const at::Tensor lp = sampling_logprobs(logits, params_with(1.0, top_p, top_k, 1))[0];
    std::vector<std::int64_t> ids;
    for (std::int64_t i = 0; i < 4; ++i)
      if (std::isfinite(lp[i].item<float>())) ids.push_back(i);
    return ids;
  };
  CHECK(kept(1.0, 0) == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(kept(0.35, 0) == std::vector<std::int64_t>{1});       // 0.4 reaches 0.35
  CHECK(kept(0.5, 0) == std::vector<std::int64_t>{1, 3});     // 0.4 + 0.3
  CHECK(kept(0.75, 0) == std::vector<std::int64_t>{1, 2, 3});
  CHECK(kept(0.05, 0) == std::vector<std::int64_t>{1});       // never empty
  CHECK(kept(1.0, 2) == std::vector<std::int64_t>{1, 3});
  CHECK(kept(0.4, 3) == std::vector<std::int64_t>{1});        // renormalized over the top 3: 0.4/0.9 reaches 0.4
  CHECK(kept(0.5, 3) == std::vector<std::int64_t>{1, 3});     // 0.44 does not reach 0.5
  const at::Tensor lp = sampling_logprobs(logits, params_with(1.0, 1.0, 2, 1))[0];
  CHECK(std::abs(lp[1].item<float>() - std::log(0.4f / 0.7f)) < 1e-6);
  // Temperature 2 flattens: p is proportional to sqrt(p).
  const at::Tensor t2 = sampling_logprobs(logits, params_with(2.0, 1.0, 0, 1))[0].exp();
  const double z = std::sqrt(0.1) + std::sqrt(0.4) + std::sqrt(0.2) + std::sqrt(0.3);
  CHECK(std::abs(t2[1].item<float>() - std::sqrt(0.4) / z) < 1e-6);
}

TEST_CASE("sampler n samples from one prefill equal each prompt sampled alone") {
  for (const auto& dir : fixtures()) {
    INFO(dir.filename().string());
    const auto ref = kbrl::test::load_reference(dir);
    const auto m = load(dir);
    const auto prompts = prompts_of(ref);
    auto p = params_with(1.0, 0.95, 40, 20, 1234);
    p.stop_token_ids = {to_vector(ref.greedy_fp32[0])[3]};  // some rows stop early and leave
    const auto batch = Sampler(m).generate(prompts, 4, p);
    std::size_t distinct_total = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const auto alone = Sampler(m).generate({prompts[i]}, 4, p, {i});
      for (std::size_t s = 0; s < 4; ++s) {
        const auto& a = alone[s];
        const auto& b = batch[i * 4 + s];
        CHECK(b.prompt_index == i);
        CHECK(b.sample_index == s);
        CHECK(a.tokens == b.tokens);
        CHECK(a.stop_reason == b.stop_reason);
        REQUIRE(a.logprobs.size() == b.logprobs.size());
        for (std::size_t k = 0; k < a.logprobs.size(); ++k) CHECK(std::abs(a.logprobs[k] - b.logprobs[k]) <= 1e-4);
      }
      std::set<std::vector<std::int64_t>> distinct;
      for (std::size_t s = 0; s < 4; ++s) distinct.insert(batch[i * 4 + s].tokens);
      distinct_total += distinct.size();
    }
    // The samples of a prompt are not copies of each other (a peaked prompt may still repeat).
    CHECK(distinct_total > prompts.size());
  }
}

TEST_CASE("sampler same seed gives identical output and another seed differs") {
  const auto dir = kbrl::test::model_fixtures() / "qwen3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto prompts = prompts_of(ref);
  const auto a = Sampler(m).generate(prompts, 3, params_with(1.0, 1.0, 0, 16, 1));
  const auto b = Sampler(m).generate(prompts, 3, params_with(1.0, 1.0, 0, 16, 1));
  const auto c = Sampler(m).generate(prompts, 3, params_with(1.0, 1.0, 0, 16, 2));
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(a[i].logprobs == b[i].logprobs);
    differ += a[i].tokens != c[i].tokens ? 1 : 0;
  }
  CHECK(differ == a.size());  // 16 tokens from a 96-token vocabulary: a repeat would be a bug
  // The uniforms depend on every key.
  const double u = sampling_uniform(1, 2, 3, 4);
  CHECK(u >= 0.0);
  CHECK(u < 1.0);
  CHECK(u != sampling_uniform(0, 2, 3, 4));
  CHECK(u != sampling_uniform(1, 0, 3, 4));
  CHECK(u != sampling_uniform(1, 2, 0, 4));
  CHECK(u != sampling_uniform(1, 2, 3, 0));
}

TEST_CASE("sampler stop tokens end sequences and the others run on unchanged") {
  const auto dir = kbrl::test::model_fixtures() / "qwen2_tied";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto prompts = prompts_of(ref);
  const auto free_run = Sampler(m).generate(prompts, 4, params_with(1.0, 1.0, 0, 24, 99));
  // Stop at two tokens that occur in some of the free samples.
  auto p = params_with(1.0, 1.0, 0, 24, 99);
  p.stop_token_ids = {free_run[0].tokens[5], free_run[5].tokens[2]};
  const auto stopped = Sampler(m).generate(prompts, 4, p);
  std::size_t stopped_early = 0;
  for (std::size_t i = 0; i < stopped.size(); ++i) {
    const auto& f = free_run[i].tokens;
    const auto first = std::find_if(f.begin(), f.end(), [&](std::int64_t t) {
      return std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t) != p.stop_token_ids.end();
    });
    if (first == f.end()) {
      CHECK(stopped[i].stop_reason == StopReason::kMaxTokens);
      CHECK(stopped[i].tokens == f);
    } else {
      // The tokens up to and including the stop token: the same as without stopping, because
      // a sample's draws do not depend on which rows are still in the batch.
      CHECK(stopped[i].stop_reason == StopReason::kStopToken);
      CHECK(stopped[i].tokens == std::vector<std::int64_t>(f.begin(), first + 1));
      ++stopped_early;
    }
  }
  CHECK(stopped_early >= 2);
  CHECK(std::string(stop_reason_name(StopReason::kStopToken)) == "stop_token");
}

TEST_CASE("decode_paged equals forward with the cache") {
  // The step the sampler runs (and its CUDA graphs replay), checked on any device: prompts
  // prefilled into a dense cache, copied into scrambled blocks of a paged cache, then decoded
  // one token at a time next to forward() with the dense cache. Both paths of decode_paged
  // (the kernels where built, and the torch ops) give forward()'s logits.
  for (const auto& dir : fixtures()) {
    INFO(dir.filename().string());
    const auto ref = kbrl::test::load_reference(dir);
    const auto m = load(dir);
    const auto prompts = prompts_of(ref);
    const auto B = static_cast<std::int64_t>(prompts.size());
    std::int64_t T = 0;
    for (const auto& p : prompts) T = std::max<std::int64_t>(T, static_cast<std::int64_t>(p.size()));
    at::Tensor ids = at::zeros({B, T}, at::kLong), mask = at::zeros_like(ids);
    for (std::size_t b = 0; b < prompts.size(); ++b)
      for (std::size_t k = 0; k < prompts[b].size(); ++k) {
        const auto col = T - static_cast<std::int64_t>(prompts[b].size()) + static_cast<std::int64_t>(k);
        ids[static_cast<std::int64_t>(b)][col] = prompts[b][k];
        mask[static_cast<std::int64_t>(b)][col] = 1;
      }
    const std::int64_t steps = 6, bs = 4, width = (T + steps) / bs + 1;
    KvCache dense = m.make_cache(B, T + steps);
    at::Tensor a = m.forward(ids, mask, &dense, true).squeeze(1);
    // Row b's j-th block is block 1 + j * B + (B - 1 - b): interleaved, in reverse row order.
    const auto block_of = [&](std::int64_t b, std::int64_t j) { return 1 + j * B + (B - 1 - b); };
    for (const bool portable : {false, true}) {
      INFO("portable " << portable);
      PagedKvCache paged(m.config(), 1 + width * B, bs, at::TensorOptions().dtype(m.dtype()).device(m.device()));
      std::vector<std::int64_t> rows, cols, slots;
      for (std::int64_t b = 0; b < B; ++b) {
        const auto L = static_cast<std::int64_t>(prompts[static_cast<std::size_t>(b)].size());
        for (std::int64_t t = 0; t < L; ++t) {
          rows.push_back(b);
          cols.push_back(T - L + t);
          slots.push_back(block_of(b, t / bs) * bs + t % bs);
        }
      }
      const auto dev = [&](const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong).to(m.device()); };
      paged.copy_from(dense, dev(rows), dev(cols), dev(slots));
      at::Tensor tables = at::zeros({B, width}, at::kInt);
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t j = 0; j < width; ++j) tables[b][j] = static_cast<std::int32_t>(block_of(b, j));
      KvCache eager = m.make_cache(B, T + steps);
      at::Tensor x = m.forward(ids, mask, &eager, true).squeeze(1);
      for (std::int64_t s = 0; s < steps; ++s) {
        const at::Tensor next = x.argmax(-1);  // [B]
        std::vector<std::int64_t> pos, slot;
        for (std::int64_t b = 0; b < B; ++b) {
          const auto p = static_cast<std::int64_t>(prompts[static_cast<std::size_t>(b)].size()) + s;
          pos.push_back(p);
          slot.push_back(block_of(b, p / bs) * bs + p % bs);
        }
        PagedStep step;
        step.ids = next.to(m.device());
        step.positions = dev(pos);
        step.slots = dev(slot);
        step.context_lens = (dev(pos) + 1).to(at::kInt);
        step.block_tables = tables.to(m.device());
        const at::Tensor y = m.decode_paged(step, paged, portable);
        x = m.forward(next.unsqueeze(1), {}, &eager, true).squeeze(1);
        // fp32; on CUDA the kernels sum in another order than torch's ops (the parity bound).
        CHECK((x - y).abs().max().item<double>() < (m.device().is_cuda() ? 1e-4 : 1e-5));
      }
    }
  }
}

TEST_CASE("sampler CUDA graphs give the eager loop's samples") {
  const auto dir = kbrl::test::model_fixtures() / "qwen3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  // Reported as skipped (not passed) on the CPU: nothing is compared there.
  if (!m.device().is_cuda()) KBRL_SKIP("CUDA graphs are used on CUDA devices only: KBRL_TEST_DEVICE=cuda runs this test");
  const auto prompts = prompts_of(ref);
  SamplerOptions eager_options, graph_options;
  eager_options.cuda_graphs = false;
  graph_options.block_size = 4;      // many blocks per row
  graph_options.kv_cache_tokens = 96;  // too few for every row at once: rows are preempted and recomputed
  const Sampler eager(m, {}, eager_options), graphed(m, {}, graph_options);
  for (const double temperature : {0.0, 1.0}) {
    auto p = params_with(temperature, 0.9, 40, 30, 5);
    const auto free_run = eager.generate(prompts, 3, p);
    // Rows that stop early leave the batch: the graphed loop runs smaller batch buckets.
    p.stop_token_ids = {free_run[0].tokens[4], free_run[4].tokens[9]};
    for (const auto& params : {params_with(temperature, 0.9, 40, 30, 5), p}) {
      const auto x = eager.generate(prompts, 3, params);
      const auto y = graphed.generate(prompts, 3, params);
      REQUIRE(x.size() == y.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        INFO("sample " << i << " temperature " << temperature);
        CHECK(x[i].tokens == y[i].tokens);
        CHECK(x[i].stop_reason == y[i].stop_reason);
        REQUIRE(x[i].logprobs.size() == y[i].logprobs.size());
        for (std::size_t k = 0; k < x[i].logprobs.size(); ++k) CHECK(std::abs(x[i].logprobs[k] - y[i].logprobs[k]) < 1e-4);
      }
    }
  }
}

TEST_CASE("sampler scheduling does not change the samples") {
  // The same requests through every scheduling path: continuous batching with room for all,
  // two rows at a time (requests split and join as rows finish), a cache too small for every row
  // at once (rows preempted and recomputed), fixed batches, and a stream of requests with their
  // own n. Draws depend on (seed, key, sample, step) only, so the samples are the same; logprobs
  // agree to float rounding.
  const auto dir = kbrl::test::model_fixtures() / "llama3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto prompts = prompts_of(ref);
  auto p = params_with(1.0, 1.0, 0, 20);
  const auto base = Sampler(m).generate(prompts, 3, p);
  // Stop tokens that end some samples early, so that rows finish at different steps.
  p.stop_token_ids = {base[0].tokens[3], base[4].tokens[8]};
  SamplerOptions all, two_rows, small_cache, fixed;
  all.block_size = two_rows.block_size = small_cache.block_size = fixed.block_size = 4;
  two_rows.max_batch = 2;
  small_cache.kv_cache_tokens = 48;  // 12 blocks: 9 rows need more than that
  fixed.continuous = false;
  fixed.max_batch = 4;
  const Sampler reference(m, {}, all);
  const auto expected = reference.generate(prompts, 3, p);
  CHECK(reference.stats().preemptions == 0);
  std::int64_t stopped = 0;
  for (const auto& s : expected) stopped += s.stop_reason == StopReason::kStopToken ? 1 : 0;
  CHECK(stopped >= 2);
  const auto same = [&](const std::vector<Sample>& got) {
    REQUIRE(got.size() == expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("sample " << i);
      CHECK(got[i].prompt_index == expected[i].prompt_index);
      CHECK(got[i].sample_index == expected[i].sample_index);
      CHECK(got[i].tokens == expected[i].tokens);
      CHECK(got[i].stop_reason == expected[i].stop_reason);
      REQUIRE(got[i].logprobs.size() == expected[i].logprobs.size());
      for (std::size_t k = 0; k < got[i].logprobs.size(); ++k)
        CHECK(std::abs(got[i].logprobs[k] - expected[i].logprobs[k]) < 1e-4);
    }
  };
  {
    INFO("two rows at a time");
    const Sampler sampler(m, {}, two_rows);
    same(sampler.generate(prompts, 3, p));
    CHECK(sampler.stats().prefills >= 5);
  }
  {
    INFO("a cache too small for all rows");
    const Sampler sampler(m, {}, small_cache);
    same(sampler.generate(prompts, 3, p));
    CHECK(sampler.stats().preemptions > 0);
    CHECK(sampler.stats().peak_blocks <= 12);
  }
  {
    INFO("fixed batches");
    same(Sampler(m, {}, fixed).generate(prompts, 3, p));
  }
  {
    INFO("a stream: prompt 1 with 2 samples, then prompt 0 and 2 with 3, keyed as in generate");
    const std::vector<SampleRequest> requests = {{prompts[1], 2, 1}, {prompts[0], 3, 0}, {prompts[2], 3, 2}};
    std::size_t next = 0;
    std::vector<std::pair<std::size_t, Sample>> got;
    const Sampler sampler(m, {}, two_rows);
    sampler.stream([&]() -> std::optional<SampleRequest> {
          if (next == requests.size()) return std::nullopt;
          return requests[next++];
        },
        p, [&](std::size_t index, Sample&& s) { got.emplace_back(index, std::move(s)); });
    REQUIRE(got.size() == 8);
    std::sort(got.begin(), got.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("stream sample " << i);
      CHECK(got[i].first == i);
      const std::size_t request = i < 2 ? 0 : i < 5 ? 1 : 2;
      const std::size_t prompt = request == 0 ? 1 : request == 1 ? 0 : 2;
      CHECK(got[i].second.prompt_index == request);
      const std::size_t sample = i < 2 ? i : i < 5 ? i - 2 : i - 5;
      CHECK(got[i].second.sample_index == sample);
      CHECK(got[i].second.tokens == expected[prompt * 3 + sample].tokens);
    }
  }
}

TEST_CASE("sampler stream takes requests that arrive while others run") {
  // The source has nothing after the first request until that one has drawn 4 tokens; the
  // second request then joins the running one, and stream returns only after both finished.
  // Each sample is what it is alone under the same key.
  const auto dir = kbrl::test::model_fixtures() / "llama3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto prompts = prompts_of(ref);
  const auto p = params_with(1.0, 1.0, 0, 12);
  const Sampler sampler(m);
  const auto first_alone = sampler.generate({prompts[0]}, 2, p, {7});
  const auto second_alone = sampler.generate({prompts[1]}, 1, p, {8});
  int calls = 0, pulled = 0;
  std::size_t first_tokens = 0;
  bool first_running_when_second_joined = false;
  std::vector<std::pair<std::size_t, Sample>> got;
  sampler.stream(
      [&]() -> std::optional<SampleRequest> {
        ++calls;
        if (pulled == 0) {
          ++pulled;
          return SampleRequest{prompts[0], 2, 7};
        }
        if (pulled == 1 && first_tokens >= 4) {
          ++pulled;
          first_running_when_second_joined = got.empty();
          return SampleRequest{prompts[1], 1, 8};
        }
        return std::nullopt;
      },
      p, [&](std::size_t index, Sample&& s) { got.emplace_back(index, std::move(s)); },
      [&](std::size_t index, const Sample&, bool) {
        if (index < 2) ++first_tokens;
        return true;
      });
  CHECK(pulled == 2);
  CHECK(calls > 3);  // asked again at later steps, after it had none
  CHECK(first_running_when_second_joined);
  REQUIRE(got.size() == 3);
  std::sort(got.begin(), got.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  CHECK(got[0].second.tokens == first_alone[0].tokens);
  CHECK(got[1].second.tokens == first_alone[1].tokens);
  CHECK(got[2].second.tokens == second_alone[0].tokens);
  CHECK(got[2].second.prompt_index == 1);
}

TEST_CASE("sampler shares a prompt's blocks among its samples") {
  const auto dir = kbrl::test::model_fixtures() / "qwen2_tied";
  const auto m = load(dir);
  std::vector<std::int64_t> prompt;
  for (std::int64_t i = 0; i < 40; ++i) prompt.push_back((i * 7) % m.config().vocab_size);
  SamplerOptions o;
  o.block_size = 8;
  const Sampler sampler(m, {}, o);
  const auto out = sampler.generate({prompt}, 4, params_with(1.0, 1.0, 0, 3));
  REQUIRE(out.size() == 4);
  // 5 full prompt blocks held once, plus one block per sample for its 3 tokens: 9, not 4 x 6.
  CHECK(sampler.stats().peak_blocks == 5 + 4);
  CHECK(sampler.stats().prefills == 1);
}

TEST_CASE("sampler stop strings end sequences on the token that completes them") {
  const auto dir = kbrl::test::model_fixtures() / "qwen3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto prompts = prompts_of(ref);
  // Each token reads "<id>", so a stop string can span tokens and end inside one.
  const TokenBytes bytes = [](std::int64_t id) { return "<" + std::to_string(id) + ">"; };
  const auto g = to_vector(ref.greedy_fp32[1]);
  auto p = params_with(0, 1, 0, 32);
  // Ends inside the bytes of greedy token 6 of prompt 1: "<g5><g6" without the closing '>'.
  p.stop_strings = {"<" + std::to_string(g[5]) + "><" + std::to_string(g[6]), "never-appears"};
  const auto samples = Sampler(m, bytes).generate(prompts, 1, p);
  const auto& s = samples[1];
  CHECK(s.stop_reason == StopReason::kStopString);
  // g[5], g[6] may have occurred earlier as a pair: the first occurrence ends the sequence.
  std::size_t end = 6;
  for (std::size_t k = 1; k < 6; ++k)
    if (g[k - 1] == g[5] && g[k] == g[6]) {
      end = k;
      break;
    }
  CHECK(s.tokens == std::vector<std::int64_t>(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(end) + 1));
  // The others stop on their own first occurrence, or run to max_tokens; the prompt's bytes never count.
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto want = to_vector(ref.greedy_fp32[i]);
    std::string text;
    std::size_t k = 0;
    for (; k < want.size(); ++k) {
      text += bytes(want[k]);
      if (text.find(p.stop_strings[0]) != std::string::npos) break;
    }
    CHECK(samples[i].stop_reason == (k < want.size() ? StopReason::kStopString : StopReason::kMaxTokens));
    CHECK(samples[i].tokens.size() == std::min(k + 1, want.size()));
  }
  // A stop token wins over a stop string completed by the same token.
  p.stop_token_ids = {g[end]};
  CHECK(Sampler(m, bytes).generate({prompts[1]}, 1, p)[0].stop_reason == StopReason::kStopToken);
}

TEST_CASE("sampler respects max_tokens") {
  const auto dir = kbrl::test::model_fixtures() / "llama_sharded";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  for (const std::int64_t max_tokens : {1, 5}) {
    const auto samples = Sampler(m).generate(prompts_of(ref), 2, params_with(1.0, 1.0, 0, max_tokens));
    for (const auto& s : samples) {
      CHECK(s.tokens.size() == static_cast<std::size_t>(max_tokens));
      CHECK(s.logprobs.size() == static_cast<std::size_t>(max_tokens));
      CHECK(s.stop_reason == StopReason::kMaxTokens);
    }
  }
}

TEST_CASE("sampler draws at temperature 1 follow the model distribution") {
  const auto dir = kbrl::test::model_fixtures() / "qwen3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto prompt = to_vector(ref.prompts[0]);
  // Two steps: the second step's distribution depends on the first token, so count the first
  // step only, where every sample shares one distribution.
  const std::int64_t N = 20000;
  const auto samples = Sampler(m).generate({prompt}, N, params_with(1.0, 1.0, 0, 1, 2026));
  const at::Tensor probs = at::softmax(m.forward(at::tensor(prompt, at::kLong).unsqueeze(0))[0][-1].to(at::kDouble), 0);
  const std::int64_t V = probs.size(0);
  std::vector<double> counts(static_cast<std::size_t>(V), 0);
  for (const auto& s : samples) counts[static_cast<std::size_t>(s.tokens[0])] += 1;
  // Pearson's statistic over tokens expected at least 5 times; the rest pooled into one bin.
  auto chi_square = [&](const at::Tensor& q, std::int64_t& bins) {
    double stat = 0, pooled_count = 0, pooled_expected = 0;
    bins = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      const double e = q[v].item<double>() * double(N), o = counts[static_cast<std::size_t>(v)];
      if (e >= 5) {
        stat += (o - e) * (o - e) / e;
        ++bins;
      } else {
        pooled_count += o;
        pooled_expected += e;
      }
    }
    if (pooled_expected > 0) {
      stat += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
      ++bins;
    }
    return stat;
  };
  std::int64_t bins = 0;
  const double stat = chi_square(probs, bins);
  const double df = double(bins - 1);
  INFO("chi-square " << stat << " on " << df << " degrees of freedom");
  WARN("chi-square " << stat << " on " << df << " degrees of freedom");
  REQUIRE(df >= 20);
  // Mean df, standard deviation sqrt(2 df): 5 standard deviations is far in the tail for the
  // right distribution, and a fixed seed makes the outcome fixed.
  CHECK(stat < df + 5 * std::sqrt(2 * df));
  // The same test rejects a slightly wrong distribution (temperature 1.15).
  std::int64_t bins_wrong = 0;
  const at::Tensor wrong =
      at::softmax(m.forward(at::tensor(prompt, at::kLong).unsqueeze(0))[0][-1].to(at::kDouble) / 1.15, 0);
  const double stat_wrong = chi_square(wrong, bins_wrong);
  WARN("chi-square against temperature 1.15: " << stat_wrong << " on " << bins_wrong - 1);
  CHECK(stat_wrong > double(bins_wrong - 1) + 5 * std::sqrt(2.0 * double(bins_wrong - 1)));
}

TEST_CASE("sampler rejects bad parameters with the field named") {
  const auto dir = kbrl::test::model_fixtures() / "qwen2_tied";
  const auto m = load(dir);
  const Sampler sampler(m);
  const std::vector<std::vector<std::int64_t>> prompts = {{1, 2, 3}};
  auto error_for = [&](const SamplingParams& p) { return invalid_argument_of([&] { sampler.generate(prompts, 1, p); }); };
  using kbrl::test::contains;
  CHECK(contains(error_for(params_with(1.0, 0.0, 0, 4)), "SamplingParams.top_p: 0 must be in (0, 1]"));
  CHECK(contains(error_for(params_with(1.0, 1.5, 0, 4)), "SamplingParams.top_p: 1.5 must be in (0, 1]"));
  CHECK(contains(error_for(params_with(1.0, NAN, 0, 4)), "SamplingParams.top_p"));
  CHECK(contains(error_for(params_with(-0.5, 1.0, 0, 4)), "SamplingParams.temperature: -0.5"));
  CHECK(contains(error_for(params_with(INFINITY, 1.0, 0, 4)), "SamplingParams.temperature"));
  CHECK(contains(error_for(params_with(1.0, 1.0, -1, 4)), "SamplingParams.top_k: -1"));
  CHECK(contains(error_for(params_with(1.0, 1.0, 0, 0)), "SamplingParams.max_tokens: 0"));
  auto p = params_with(1.0, 1.0, 0, 4);
  p.stop_strings = {"x"};
  CHECK(contains(error_for(p), "SamplingParams.stop_strings: given, but the Sampler has no TokenBytes"));
  p.stop_strings = {""};
  CHECK(contains(invalid_argument_of([&] { Sampler(m, [](std::int64_t) { return std::string("a"); }).generate(prompts, 1, p); }),
                 "SamplingParams.stop_strings[0]: must not be empty"));
  p = params_with(1.0, 1.0, 0, 4);
  p.stop_token_ids = {1000};
  CHECK(contains(error_for(p), "SamplingParams.stop_token_ids: 1000 is outside the vocabulary"));
  const auto ok = params_with(1.0, 1.0, 0, 4);
  CHECK(contains(invalid_argument_of([&] { sampler.generate({{1, 2}, {}}, 1, ok); }), "prompts[1] is empty"));
  CHECK(contains(invalid_argument_of([&] { sampler.generate({}, 1, ok); }), "no prompts"));
  CHECK(contains(invalid_argument_of([&] { sampler.generate({{1, 96}}, 1, ok); }), "prompts[0][1] = 96 is outside"));
  CHECK(contains(invalid_argument_of([&] { sampler.generate(prompts, 0, ok); }), "n = 0"));
  CHECK(contains(invalid_argument_of([&] { sampler.generate(prompts, 1, ok, {1, 2}); }), "prompt_keys has 2 entries"));
  // A stream checks each request as it pulls it, and names it by its place in the stream.
  const auto stream_error = [&](std::vector<SampleRequest> requests) {
    std::size_t next = 0;
    return invalid_argument_of([&] {
      sampler.stream([&]() -> std::optional<SampleRequest> {
            if (next == requests.size()) return std::nullopt;
            return requests[next++];
          },
          ok, [](std::size_t, Sample&&) {});
    });
  };
  CHECK(contains(stream_error({{{1, 2}, 1, 0}, {{}, 1, 1}}), "Sampler::stream: request 1: prompt is empty"));
  CHECK(contains(stream_error({{{1, 96}, 1, 0}}), "Sampler::stream: request 0: prompt[1] = 96 is outside"));
  CHECK(contains(stream_error({{{1, 2}, 0, 0}}), "Sampler::stream: request 0: n = 0"));
}

TEST_CASE("sampler stop strings through a real tokenizer's bytes") {
  const auto tokenizer = Tokenizer::from_file(fs::path(KBRL_SOURCE_DIR) / "tests/data/tokenizer/qwen2.json");
  const auto dir = kbrl::test::model_fixtures() / "qwen3_gqa";
  const auto ref = kbrl::test::load_reference(dir);
  const auto m = load(dir);
  const auto g = to_vector(ref.greedy_fp32[0]);
  auto text_of = [&](std::size_t count) {
    std::vector<TokenId> ids(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(count));
    return tokenizer.decode(ids);
  };
  // The text of greedy tokens 8 and 9: the sequence ends at its first occurrence.
  const std::string stop = text_of(10).substr(text_of(8).size());
  REQUIRE(!stop.empty());
  std::size_t end = 0;
  while (text_of(end + 1).find(stop) == std::string::npos) ++end;
  REQUIRE(end <= 9);
  auto p = params_with(0, 1, 0, 32);
  p.stop_strings = {stop};
  const auto s = Sampler(m, token_bytes_of(tokenizer)).generate({to_vector(ref.prompts[0])}, 1, p)[0];
  INFO("stop string '" << stop << "', first complete after token " << end);
  CHECK(s.stop_reason == StopReason::kStopString);
  CHECK(s.tokens == std::vector<std::int64_t>(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(end) + 1));
}
