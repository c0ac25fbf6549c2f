// The decoder against transformers' answers (make_models.py writes them beside each tiny
// checkpoint): logits of each prompt alone and of a left-padded batch, the KV-cache path
// against the full pass, fused against portable attention, greedy tokens (batched, with n
// samples per prompt sharing one prefill), and bfloat16. Shared by decoder_test.cpp (which
// asserts) and model_parity.cpp (which prints a table, also on CUDA).
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/model/safetensors.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"

namespace kbrl::test {

struct Reference {
  std::vector<at::Tensor> prompts;      // [len_i] int64
  std::vector<at::Tensor> logits_fp32;  // [len_i, vocab] float32
  std::vector<at::Tensor> greedy_fp32;  // [N] int64
  std::vector<at::Tensor> greedy_gap_fp32;  // [N] float32: top-1 minus top-2 logit per step
  std::vector<at::Tensor> logits_bf16;  // [len_i, vocab] bfloat16
  std::vector<at::Tensor> greedy_bf16;  // [N] int64
  std::int64_t greedy_tokens = 0;
  double min_gap_fp32 = 0;
};

inline Reference load_reference(const std::filesystem::path& dir) {
  const model::SafetensorsFile file(dir / "reference.safetensors");
  const auto tensors = model::load_tensors(dir / "reference.safetensors");
  Reference r;
  for (std::size_t i = 0; tensors.contains("prompt." + std::to_string(i)); ++i) {
    const std::string s = std::to_string(i);
    r.prompts.push_back(tensors.at("prompt." + s));
    r.logits_fp32.push_back(tensors.at("logits_fp32." + s));
    r.greedy_fp32.push_back(tensors.at("greedy_fp32." + s));
    r.greedy_gap_fp32.push_back(tensors.at("greedy_gap_fp32." + s));
    r.logits_bf16.push_back(tensors.at("logits_bf16." + s));
    r.greedy_bf16.push_back(tensors.at("greedy_bf16." + s));
  }
  r.greedy_tokens = std::stoll(file.metadata().at("greedy_tokens"));
  r.min_gap_fp32 = std::stod(file.metadata().at("min_gap_fp32"));
  return r;
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU, at::kDouble) - b.to(at::kCPU, at::kDouble)).abs().max().item<double>();
}

// Left padding (token 0, mask 0) to one batch: ids [B, T], mask [B, T].
inline std::pair<at::Tensor, at::Tensor> left_pad(const std::vector<at::Tensor>& seqs) {
  std::int64_t T = 0;
  for (const auto& s : seqs) T = std::max(T, s.size(0));
  const auto B = static_cast<std::int64_t>(seqs.size());
  at::Tensor ids = at::zeros({B, T}, at::kLong), mask = at::zeros({B, T}, at::kLong);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto n = seqs[b].size(0);
    ids[b].narrow(0, T - n, n).copy_(seqs[b]);
    mask[b].narrow(0, T - n, n).fill_(1);
  }
  return {ids, mask};
}

// Logits of each prompt alone, one full pass each: [len_i, vocab] on the CPU.
inline std::vector<at::Tensor> logits_alone(const model::DecoderModel& m, const std::vector<at::Tensor>& prompts) {
  std::vector<at::Tensor> out;
  for (const auto& p : prompts) out.push_back(m.forward(p.unsqueeze(0))[0].to(at::kCPU));
  return out;
}

// The same prompts as one left-padded batch, real positions only.
inline std::vector<at::Tensor> logits_padded(const model::DecoderModel& m, const std::vector<at::Tensor>& prompts) {
  const auto [ids, mask] = left_pad(prompts);
  const at::Tensor logits = m.forward(ids, mask).to(at::kCPU);  // [B, T, vocab]
  std::vector<at::Tensor> out;
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const auto n = prompts[b].size(0);
    out.push_back(logits[static_cast<std::int64_t>(b)].narrow(0, ids.size(1) - n, n));
  }
  return out;
}

// One sequence through the cache in uneven chunks (4, 1, 3, 1, 3, ...), starting from a
// cache too small for it so that it has to grow: [len, vocab].
inline at::Tensor logits_chunked(const model::DecoderModel& m, const at::Tensor& seq) {
  model::KvCache cache = m.make_cache(1, 2);
  std::vector<at::Tensor> parts;
  const std::int64_t pattern[] = {4, 1, 3};
  std::int64_t at_ = 0;
  for (int k = 0; at_ < seq.size(0); ++k) {
    const std::int64_t n = std::min(pattern[k % 3], seq.size(0) - at_);
    parts.push_back(m.forward(seq.narrow(0, at_, n).unsqueeze(0), {}, &cache)[0].to(at::kCPU));
    at_ += n;
  }
  return at::cat(parts, 0);
}

// Greedy continuation: one left-padded prefill of all prompts, `samples` rows per prompt made
// from it (KvCache::repeat_interleave), then one token per row per step, last logits only.
// Returns [prompts * samples, n] int64 on the CPU.
inline at::Tensor greedy(const model::DecoderModel& m, const std::vector<at::Tensor>& prompts, std::int64_t n,
                         std::int64_t samples = 1) {
  const auto [ids, mask] = left_pad(prompts);
  model::KvCache cache = m.make_cache(ids.size(0), ids.size(1) + n);
  at::Tensor logits = m.forward(ids, mask, &cache, /*last_only=*/true);  // [B, 1, vocab]
  if (samples > 1) {
    cache = cache.repeat_interleave(samples);
    logits = logits.repeat_interleave(samples, 0);
  }
  std::vector<at::Tensor> tokens;
  for (std::int64_t step = 0; step < n; ++step) {
    const at::Tensor next = logits.argmax(-1);  // [rows, 1]
    tokens.push_back(next.to(at::kCPU));
    if (step + 1 < n) logits = m.forward(next, {}, &cache, /*last_only=*/true);
  }
  return at::cat(tokens, 1);
}

// Greedy by definition, as make_models.py computes it: the whole sequence again at every
// step, logits for every position, no cache. [prompts, n]
inline at::Tensor greedy_full(const model::DecoderModel& m, const std::vector<at::Tensor>& prompts, std::int64_t n) {
  std::vector<at::Tensor> rows;
  for (const auto& p : prompts) {
    at::Tensor seq = p.unsqueeze(0);
    for (std::int64_t step = 0; step < n; ++step)
      seq = at::cat({seq, m.forward(seq).narrow(1, seq.size(1) - 1, 1).argmax(-1).to(at::kCPU)}, 1);
    rows.push_back(seq[0].narrow(0, p.size(0), n));
  }
  return at::stack(rows);
}

// Tokens that agree before the first difference, summed over rows (each row against the
// reference of its prompt).
inline std::int64_t agreeing_prefix(const at::Tensor& got, const std::vector<at::Tensor>& want, std::int64_t samples) {
  std::int64_t total = 0;
  for (std::int64_t r = 0; r < got.size(0); ++r) {
    const at::Tensor w = want[static_cast<std::size_t>(r / samples)];
    std::int64_t k = 0;
    while (k < w.size(0) && got[r][k].item<std::int64_t>() == w[k].item<std::int64_t>()) ++k;
    total += k;
  }
  return total;
}

struct ParityRow {
  std::string model;
  std::string check;
  double value = 0;
  double bound = 0;  // value <= bound passes; for token counts: value == bound passes
  bool pass = false;
  bool exact = false;  // a count that must equal its bound
  bool informational = false;
};

struct ParityOptions {
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  double fp32_bound = 1e-4;   // absolute, on logits
  double bf16_bound = 2e-2;   // max |ours - transformers| / max |transformers| on logits (or twice
                              // transformers' own bf16 error, where that is larger)
  double bf16_error_ratio = 1.5;  // our bf16 error vs fp32 over transformers' bf16 error vs fp32
  model::AttentionKernel attention = model::AttentionKernel::kAuto;
};

inline std::vector<ParityRow> parity_rows(const std::filesystem::path& dir, const ParityOptions& o) {
  const std::string name = dir.filename().string();
  const Reference ref = load_reference(dir);
  std::vector<ParityRow> rows;
  auto add = [&](std::string check, double value, double bound) {
    rows.push_back({name, std::move(check), value, bound, value <= bound});
  };
  auto add_count = [&](std::string check, std::int64_t value, std::int64_t want) {
    rows.push_back({name, std::move(check), double(value), double(want), value == want, true});
  };
  auto worst = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    double w = 0;
    for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, max_abs_diff(a[i], b[i]));
    return w;
  };
  const auto total_tokens = static_cast<std::int64_t>(ref.prompts.size()) * ref.greedy_tokens;

  model::LoadOptions lo;
  lo.device = o.device;
  lo.attention = o.attention;
  {
    const auto m = model::DecoderModel::load(dir, lo);
    add("fp32 logits, each prompt alone (max abs)", worst(logits_alone(m, ref.prompts), ref.logits_fp32), o.fp32_bound);
    const auto padded = logits_padded(m, ref.prompts);
    add("fp32 logits, left-padded batch (max abs)", worst(padded, ref.logits_fp32), o.fp32_bound);
    // The cache against the full pass, over a prompt followed by its greedy continuation.
    double cache_diff = 0;
    for (std::size_t i = 0; i < ref.prompts.size(); ++i) {
      const at::Tensor seq = at::cat({ref.prompts[i], ref.greedy_fp32[i]});
      cache_diff = std::max(cache_diff, max_abs_diff(logits_chunked(m, seq), m.forward(seq.unsqueeze(0))[0]));
    }
    add("fp32 KV cache in chunks vs full pass (max abs)", cache_diff, o.fp32_bound);
    const at::Tensor tokens = greedy(m, ref.prompts, ref.greedy_tokens);
    add_count("fp32 greedy tokens = transformers (batched, cache)", agreeing_prefix(tokens, ref.greedy_fp32, 1),
              total_tokens);
    // Where they part, was transformers' choice a near tie? (Then 1e-4 may flip it.)
    double gap_at_difference = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < ref.prompts.size(); ++i)
      for (std::int64_t k = 0; k < ref.greedy_tokens; ++k)
        if (tokens[static_cast<std::int64_t>(i)][k].item<std::int64_t>() != ref.greedy_fp32[i][k].item<std::int64_t>()) {
          gap_at_difference = std::min(gap_at_difference, ref.greedy_gap_fp32[i][k].item<double>());
          break;
        }
    if (std::isfinite(gap_at_difference))
      rows.push_back({name, "transformers' top-2 gap where fp32 greedy first differs (info)", gap_at_difference, 0,
                      true, false, true});
    add_count("fp32 greedy, 2 samples per prompt from one prefill",
              agreeing_prefix(greedy(m, ref.prompts, ref.greedy_tokens, 2), ref.greedy_fp32, 2), 2 * total_tokens);
    // The other attention kernel on the same device must agree with this one.
    model::LoadOptions other = lo;
    const bool fused = o.attention == model::AttentionKernel::kFused ||
                       (o.attention == model::AttentionKernel::kAuto && o.device.is_cuda());
    other.attention = fused ? model::AttentionKernel::kPortable : model::AttentionKernel::kFused;
    const auto m2 = model::DecoderModel::load(dir, other);
    add(fused ? "fp32 portable vs fused attention (max abs)" : "fp32 fused vs portable attention (max abs)",
        worst(logits_padded(m2, ref.prompts), padded), o.fp32_bound);
  }
  {
    lo.dtype = at::kBFloat16;
    const auto m = model::DecoderModel::load(dir, lo);
    const auto ours = logits_padded(m, ref.prompts);
    double scale = 0;
    for (const auto& l : ref.logits_bf16) scale = std::max(scale, l.to(at::kDouble).abs().max().item<double>());
    const double ours_err = worst(ours, ref.logits_fp32), hf_err = worst(ref.logits_bf16, ref.logits_fp32);
    // Two bf16 computations that are each within bf16's error e of the fp32 logits may differ by
    // up to about 2e: the bound is bf16_bound or twice transformers' own error, the larger.
    add("bf16 logits vs transformers bf16 (max abs / max |logit|)", worst(ours, ref.logits_bf16) / scale,
        std::max(o.bf16_bound, 2 * hf_err / scale));
    add("bf16 error vs fp32: ours / transformers'", ours_err / hf_err, o.bf16_error_ratio);
    rows.push_back({name, "transformers' own bf16 error vs fp32 (max abs / max |logit|)", hf_err / scale, 0, true,
                    false, true});
    if (!o.device.is_cuda()) {
      // On the CPU the fused kernel is what transformers runs by default (sdpa).
      model::LoadOptions fused = lo;
      fused.attention = model::AttentionKernel::kFused;
      const auto mf = model::DecoderModel::load(dir, fused);
      add("bf16 logits, fused, each prompt alone, vs transformers bf16 (max abs)",
          worst(logits_alone(mf, ref.prompts), ref.logits_bf16), o.bf16_bound * scale);
      // transformers' greedy recomputes everything at each step; so does this one.
      rows.push_back({name, "bf16 greedy, fused, full pass per step = transformers (info)",
                      double(agreeing_prefix(greedy_full(mf, ref.prompts, ref.greedy_tokens), ref.greedy_bf16, 1)),
                      double(total_tokens), true, true, true});
    }
    rows.push_back({name, "bf16 greedy tokens (cache) = transformers bf16 (info)",
                    double(agreeing_prefix(greedy(m, ref.prompts, ref.greedy_tokens), ref.greedy_bf16, 1)),
                    double(total_tokens), true, true, true});
  }
  return rows;
}

}  // namespace kbrl::test
