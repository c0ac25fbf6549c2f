// No fmt here: torch's include directory carries another fmt (kbrl/core/text.hpp).
#include "kbrl/train/torch/policy.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/tokenizer/chat_tokens.hpp"

namespace kbrl::train {

c10::Device resolve_device(const std::string& name) {
  if (name == "auto") return at::hasCUDA() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  try {
    return c10::Device(name);
  } catch (const c10::Error&) {
    throw core::InvalidArgument("policy: device '" + name + "' is not auto, cpu, cuda or cuda:N");
  }
}

std::string resolve_dtype(const std::string& dtype, const c10::Device& device) {
  if (dtype == "auto") return device.is_cuda() ? "bf16" : "fp32";
  if (dtype != "bf16" && dtype != "fp32")
    throw core::InvalidArgument("policy: dtype '" + dtype + "' is not auto, bf16 or fp32");
  return dtype;
}

Policy::Policy(PolicyOptions options) : options_(std::move(options)) {
  if (options_.model.empty()) throw core::InvalidArgument("policy: no checkpoint folder given");
  model::LoadOptions load;
  load.device = resolve_device(options_.device);
  dtype_ = resolve_dtype(options_.dtype, load.device);
  load.dtype = dtype_ == "bf16" ? at::kBFloat16 : at::kFloat;
  load.attention = options_.attention;
  tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(options_.model / "tokenizer.json"));
  renderer_ = tokenizer::chat_renderer_for(options_.chat_template, *tokenizer_, options_.model);
  for (const auto id : tokenizer::checkpoint_stop_ids(options_.model, *tokenizer_)) stop_ids_.push_back(id);
  for (const auto id : tokenizer::stop_sequence_ids(*renderer_, *tokenizer_))
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);
  token_bytes_ = model::token_bytes_of(*tokenizer_);  // the tokenizer lives on the heap: moves keep it
  decoder_ = std::make_shared<model::DecoderModel>(model::DecoderModel::load(options_.model, load));
}

Policy::~Policy() = default;

void Policy::attach_lora(const model::LoraConfig& config) {
  if (lora_) throw core::InvalidArgument("policy: adapters are attached already");
  lora_.emplace(model::LoraModel::attach(*decoder_, config));
}

void Policy::load_lora(const std::filesystem::path& adapter_dir) {
  if (lora_) throw core::InvalidArgument("policy: adapters are attached already");
  lora_.emplace(model::LoraModel::load(*decoder_, adapter_dir));
}

const model::LoraModel& Policy::lora() const {
  if (!lora_) throw core::InvalidArgument("policy: no adapters attached");
  return *lora_;
}

void Policy::save_lora(const std::filesystem::path& dir) const { lora().save(dir, options_.model.string()); }

void Policy::set_lora_training(bool training) {
  if (!lora_) throw core::InvalidArgument("policy: no adapters attached");
  lora_->set_training(training);
}

std::vector<tokenizer::TokenId> Policy::prompt_tokens(const std::vector<core::Message>& conversation) const {
  return tokenizer::render_chat_ids(*renderer_, *tokenizer_, conversation, /*add_generation_prompt=*/true);
}

std::string Policy::prompt_text(const std::vector<core::Message>& conversation) const {
  return renderer_->render(conversation, /*add_generation_prompt=*/true);
}

std::vector<model::Sample> Policy::generate(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                            model::SamplingParams params,
                                            const std::vector<std::uint64_t>& prompt_keys) const {
  return generate(*decoder_, prompts, n, std::move(params), prompt_keys, {});
}

std::vector<model::Sample> Policy::generate(const model::DecoderModel& decoder,
                                            const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t n,
                                            model::SamplingParams params, const std::vector<std::uint64_t>& prompt_keys,
                                            const model::SamplerOptions& sampler_options) const {
  for (const auto id : stop_ids_)
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), id) == params.stop_token_ids.end())
      params.stop_token_ids.push_back(id);
  const c10::NoGradGuard no_grad;
  return model::Sampler(decoder, token_bytes_, sampler_options).generate(prompts, n, params, prompt_keys);
}

std::shared_ptr<model::DecoderModel> Policy::adapter_snapshot() const {
  if (!lora_) throw core::InvalidArgument("Policy::adapter_snapshot: the policy has no LoRA adapters");
  // A copy of the model shares every tensor (at::Tensor copies are references); only the
  // adapters get storage of their own.
  auto copy = std::make_shared<model::DecoderModel>(*decoder_);
  const c10::NoGradGuard no_grad;
  for (auto& [name, linear] : copy->linears()) {
    if (!linear->lora) continue;
    linear->lora->a = linear->lora->a.detach().clone();
    linear->lora->b = linear->lora->b.detach().clone();
    linear->lora->training = false;
  }
  return copy;
}

core::Completion Policy::completion(const model::Sample& s) const {
  core::Completion c;
  c.tokens.assign(s.tokens.begin(), s.tokens.end());
  c.num_tokens = static_cast<int>(s.tokens.size());
  c.truncated = s.stop_reason == model::StopReason::kMaxTokens;
  std::vector<tokenizer::TokenId> text_ids(s.tokens.begin(), s.tokens.end());
  if (!c.truncated && !text_ids.empty()) text_ids.pop_back();  // the stop token itself
  c.text = tokenizer_->decode(text_ids, /*skip_special_tokens=*/true);
  return c;
}

PolicyCompleter::PolicyCompleter(const Policy& policy, model::SamplingParams params,
                                 std::shared_ptr<const model::DecoderModel> decoder, model::SamplerOptions sampler_options)
    : policy_(policy), params_(std::move(params)), decoder_(std::move(decoder)), sampler_options_(sampler_options) {}

std::vector<core::Transition> PolicyCompleter::complete(const std::vector<std::vector<core::Message>>& conversations,
                                                        std::int64_t n, std::uint64_t seed,
                                                        const std::vector<std::uint64_t>& prompt_keys) {
  std::vector<std::vector<std::int64_t>> prompts;
  std::vector<std::vector<tokenizer::TokenId>> ids;
  std::vector<std::string> texts;
  for (const auto& c : conversations) {
    ids.push_back(policy_.prompt_tokens(c));
    prompts.emplace_back(ids.back().begin(), ids.back().end());
    texts.push_back(policy_.prompt_text(c));
  }
  model::SamplingParams params = params_;
  params.seed = seed;
  const auto samples = decoder_ ? policy_.generate(*decoder_, prompts, n, params, prompt_keys, sampler_options_)
                                : policy_.generate(prompts, n, params, prompt_keys);
  std::vector<core::Transition> out(samples.size());
  for (const auto& s : samples) {
    auto& t = out[s.prompt_index * static_cast<std::size_t>(n) + s.sample_index];
    t.observation = conversations[s.prompt_index];
    t.prompt_tokens = ids[s.prompt_index];
    t.prompt_text = texts[s.prompt_index];
    t.completion = policy_.completion(s);
    t.logprobs = s.logprobs;
  }
  return out;
}

}  // namespace kbrl::train
