// The checkpoint as an AnswerSource (run_sampler.hpp): a train::Policy, as in kbrl-train (the same
// chat template, stop tokens and decoding). A translation unit of its own that links libtorch, so
// the rest of kbrl-eval builds without it; no fmt here (torch's include directories carry another).
#include <iostream>

#include "kbrl/core/error.hpp"
#include "kbrl/train/torch/policy.hpp"
#include "run_sampler.hpp"

namespace kbrl::apps {

namespace {

class PolicySource : public AnswerSource {
 public:
  PolicySource(ModelSamplingOptions o, SamplingSettings s) : o_(std::move(o)), sampling_(s) {
    if (o_.dtype != "auto" && o_.dtype != "bf16" && o_.dtype != "fp32")
      throw core::InvalidArgument("--model-dtype must be auto, bf16 or fp32");
  }

  Answers answer(const std::vector<AnswerRow>& rows, int per_row, std::uint64_t seed) override {
    train::Policy& p = loaded();
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& r : rows) {
      const auto ids = p.prompt_tokens(r.messages);
      prompts.emplace_back(ids.begin(), ids.end());
    }
    model::SamplingParams sp;  // the policy adds its stop tokens
    sp.max_tokens = sampling_.max_tokens;
    sp.temperature = sampling_.temperature;
    sp.top_p = sampling_.top_p;
    sp.top_k = sampling_.top_k;
    sp.seed = seed;
    Answers out;
    for (const auto& s : p.generate(prompts, per_row, sp))
      out.answers.push_back({s.prompt_index, static_cast<int>(s.sample_index), p.completion(s).text,
                             static_cast<std::int64_t>(s.tokens.size()), std::string(model::stop_reason_name(s.stop_reason))});
    return out;
  }

 private:
  // Loaded at the first answer: a resumed run with nothing left to sample does not load it.
  train::Policy& loaded() {
    if (policy_) return *policy_;
    train::PolicyOptions po;
    po.model = o_.model;
    po.device = o_.device;
    po.dtype = o_.dtype;
    po.chat_template = o_.chat_template;
    const c10::Device device = train::resolve_device(o_.device);
    std::cerr << "loading " << o_.model.string() << (o_.adapter.empty() ? "" : " + " + o_.adapter.string()) << " on "
              << device.str() << " (" << train::resolve_dtype(o_.dtype, device) << ")\n";
    policy_ = std::make_unique<train::Policy>(po);
    if (!o_.adapter.empty()) policy_->load_lora(o_.adapter);
    return *policy_;
  }

  ModelSamplingOptions o_;
  SamplingSettings sampling_;
  std::unique_ptr<train::Policy> policy_;
};

}  // namespace

std::unique_ptr<AnswerSource> make_model_source(const ModelSamplingOptions& options, const SamplingSettings& sampling) {
  return std::make_unique<PolicySource>(options, sampling);
}

}  // namespace kbrl::apps
