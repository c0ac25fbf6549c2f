// ServedModel on libtorch: a train::Policy for the base model, and per adapter a DecoderModel
// copy that shares every base tensor and carries its own LoRA tensors (as Policy::adapter_snapshot
// does), so base and adapters are served side by side from one copy of the weights.
// No fmt here: torch's include directories carry another fmt (kbrl/core/text.hpp).
#include "served_model.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/model/torch/embedder.hpp"
#include "kbrl/model/torch/lora.hpp"
#include "kbrl/model/torch/sampler.hpp"
#include "kbrl/train/torch/policy.hpp"

namespace kbrl::serve {

namespace {

struct Adapter {
  std::shared_ptr<model::DecoderModel> decoder;  // base tensors shared, LoRA tensors its own
  std::optional<model::LoraModel> lora;          // refers to *decoder
};

class TorchServedModel final : public ServedModel {
 public:
  explicit TorchServedModel(const ServedModelOptions& o) : policy_(policy_options(o)), cuda_graphs_(o.cuda_graphs) {
    token_bytes_ = model::token_bytes_of(policy_.tokenizer());
  }

  const tokenizer::Tokenizer& tokenizer() const override { return policy_.tokenizer(); }

  std::vector<std::int64_t> chat_prompt(const std::vector<core::Message>& messages) const override {
    const auto ids = policy_.prompt_tokens(messages);
    return {ids.begin(), ids.end()};
  }

  std::int64_t context_length() const override { return policy_.decoder()->config().max_position_embeddings; }

  std::string describe() const override { return core::cat(policy_.device().str(), ", ", policy_.dtype_name()); }

  void load_adapter(const std::string& name, const std::filesystem::path& dir) override {
    {
      std::lock_guard lock(mu_);
      if (adapters_.count(name) != 0) throw core::InvalidArgument(core::cat("the adapter '", name, "' is loaded already"));
    }
    // Loaded outside the lock (it reads files and copies tensors to the device): requests go on.
    auto adapter = std::make_shared<Adapter>();
    adapter->decoder = std::make_shared<model::DecoderModel>(*policy_.decoder());
    {
      const c10::NoGradGuard no_grad;
      adapter->lora.emplace(model::LoraModel::load(*adapter->decoder, dir));
    }
    std::lock_guard lock(mu_);
    if (!adapters_.emplace(name, adapter).second)
      throw core::InvalidArgument(core::cat("the adapter '", name, "' is loaded already"));
    order_.push_back(name);
  }

  bool unload_adapter(const std::string& name) override {
    std::lock_guard lock(mu_);
    if (adapters_.erase(name) == 0) return false;
    order_.erase(std::find(order_.begin(), order_.end(), name));
    return true;
  }

  bool has_adapter(const std::string& name) const override {
    std::lock_guard lock(mu_);
    return adapters_.count(name) != 0;
  }

  std::vector<std::string> adapters() const override {
    std::lock_guard lock(mu_);
    return order_;
  }

  std::vector<float> embed(const std::string& adapter_name, const std::vector<std::vector<std::int64_t>>& ids) override {
    const std::shared_ptr<Adapter> adapter = find_adapter(adapter_name);
    const model::DecoderModel& decoder = adapter ? *adapter->decoder : *policy_.decoder();
    ++embeds_waiting_;
    auto exclusive = device_lock();
    --embeds_waiting_;
    const at::Tensor pooled = model::mean_pooled_embeddings(decoder, ids).contiguous();  // [N, hidden] fp32
    const float* p = pooled.data_ptr<float>();
    return std::vector<float>(p, p + pooled.numel());
  }

  std::size_t embedding_dimension() const override {
    return static_cast<std::size_t>(policy_.decoder()->config().hidden_size);
  }

  void stream(const std::string& adapter_name, const DrawParams& params, std::int64_t max_rows,
              std::int64_t expected_tokens, const StreamSource& next, const TokenSink& sink) override {
    const std::shared_ptr<Adapter> adapter = find_adapter(adapter_name);
    model::SamplingParams sp;
    sp.max_tokens = params.max_tokens;
    sp.temperature = params.temperature;
    sp.top_p = params.top_p;
    sp.top_k = params.top_k;
    sp.seed = 0;  // the requests' seeds are in their prompt keys
    sp.stop_token_ids = policy_.stop_token_ids();
    model::SamplerOptions so;
    so.cuda_graphs = cuda_graphs_;
    so.max_batch = max_rows;
    const model::DecoderModel& decoder = adapter ? *adapter->decoder : *policy_.decoder();
    const auto exclusive = device_lock();
    const c10::NoGradGuard no_grad;
    model::Sampler(decoder, token_bytes_, so)
        .stream(
            [&]() -> std::optional<model::SampleRequest> {
              std::optional<StreamRequest> r = next();
              if (!r) return std::nullopt;
              return model::SampleRequest{std::move(r->prompt), r->n, r->key};
            },
            sp, [](std::size_t, model::Sample&&) {},
            [&](std::size_t index, const model::Sample& s, bool finished) {
              return sink(index, s.tokens.back(), s.logprobs.back(), finished,
                          finished && s.stop_reason == model::StopReason::kStopToken);
            },
            expected_tokens);
  }

  bool device_wanted() const override { return policy_.device().is_cuda() && embeds_waiting_.load() > 0; }

 private:
  // On a GPU, embeddings wait for the sampling batch in progress and the other way round: the
  // sampler captures CUDA graphs, and a capture fails when another thread allocates or
  // synchronizes on the device meanwhile. On the CPU both run side by side.
  std::unique_lock<std::mutex> device_lock() {
    return policy_.device().is_cuda() ? std::unique_lock<std::mutex>(device_mu_) : std::unique_lock<std::mutex>();
  }

  // Held for the call: an unload meanwhile frees it afterwards. Null for the base model ("").
  std::shared_ptr<Adapter> find_adapter(const std::string& name) const {
    if (name.empty()) return nullptr;
    std::lock_guard lock(mu_);
    const auto it = adapters_.find(name);
    if (it == adapters_.end()) throw core::InvalidArgument(core::cat("no adapter named '", name, "'"));
    return it->second;
  }

  static train::PolicyOptions policy_options(const ServedModelOptions& o) {
    train::PolicyOptions po;
    po.model = o.model;
    po.device = o.device;
    po.dtype = o.dtype;
    po.chat_template = o.chat_template;
    return po;
  }

  train::Policy policy_;
  bool cuda_graphs_;
  model::TokenBytes token_bytes_;
  mutable std::mutex mu_;
  std::mutex device_mu_;
  std::atomic<int> embeds_waiting_{0};  // embedding requests waiting for device_mu_ (GPU only)
  std::map<std::string, std::shared_ptr<Adapter>> adapters_;
  std::vector<std::string> order_;
};

}  // namespace

std::unique_ptr<ServedModel> load_served_model(const ServedModelOptions& options) {
  return std::make_unique<TorchServedModel>(options);
}

}  // namespace kbrl::serve
