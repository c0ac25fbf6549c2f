#include "kbrl/rag/embedder_settings.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/rag/openai_embedder.hpp"

namespace kbrl::rag {

std::optional<EmbedderSettingsProblem> check_embedder_settings(const EmbedderSettings& s, const SettingName& name_of) {
  const auto name = [&](const std::string& field) { return name_of ? name_of(field) : field; };
  const auto problem = [](std::string field, std::string message) {
    return std::optional<EmbedderSettingsProblem>(EmbedderSettingsProblem{std::move(field), std::move(message)});
  };
  if (!s.endpoint.empty() && !s.checkpoint.empty())
    return problem("embeddings_checkpoint", fmt::format("give {} or {}, not both", name("embeddings_endpoint"),
                                                        name("embeddings_checkpoint")));
  if (!s.endpoint.empty() && s.model.empty())
    return problem("embeddings_model", fmt::format("{} needs the served model's name", name("embeddings_endpoint")));
  if (s.endpoint.empty() && s.checkpoint.empty() && !s.model.empty())
    return problem("embeddings_model", fmt::format("names the model of {} or {}, and neither is given",
                                                   name("embeddings_endpoint"), name("embeddings_checkpoint")));
  if (s.batch == 0) return problem("embeddings_batch", "must be at least 1");
  if (s.max_in_flight < 1) return problem("embeddings_max_in_flight", fmt::format("{} is below 1", s.max_in_flight));
  if (s.max_tokens < 0) return problem("embeddings_max_tokens", fmt::format("{} is below 0 (0: the model's context)", s.max_tokens));
  if (s.dtype != "auto" && s.dtype != "bf16" && s.dtype != "fp32")
    return problem("embeddings_dtype", fmt::format("'{}' is none of auto, bf16, fp32", s.dtype));
  if (s.endpoint.empty() && !s.api_key_env.empty())
    return problem("embeddings_api_key_env", fmt::format("is for {}, which is not given", name("embeddings_endpoint")));
  if (s.checkpoint.empty()) {
    const std::string needs = fmt::format("is for {}, which is not given", name("embeddings_checkpoint"));
    if (s.device != "auto") return problem("embeddings_device", needs);
    if (s.dtype != "auto") return problem("embeddings_dtype", needs);
    if (s.max_tokens != 0) return problem("embeddings_max_tokens", needs);
  }
  return std::nullopt;
}

std::shared_ptr<Embedder> make_embedder(const EmbedderSettings& s, const CheckpointEmbedderLoader& load_checkpoint,
                                        const SettingName& name_of, std::string* description) {
  const auto name = [&](const std::string& field) { return name_of ? name_of(field) : field; };
  constexpr const char* kWhere = "embedder settings";
  if (const auto problem = check_embedder_settings(s, name_of))
    throw core::ConfigError(kWhere, name(problem->field), problem->message);
  if (!s.given())
    throw core::ConfigError(kWhere, name("embeddings_endpoint"),
                            fmt::format("no embedder: give {} (with {}) or {}", name("embeddings_endpoint"),
                                        name("embeddings_model"), name("embeddings_checkpoint")));
  if (!s.endpoint.empty()) {
    OpenAiEmbedderConfig c;
    c.client.base_url = s.endpoint;
    c.client.api_key_env = s.api_key_env;
    c.client.max_in_flight = s.max_in_flight;
    c.model = s.model;
    c.batch_size = s.batch;
    std::shared_ptr<Embedder> embedder;
    try {
      embedder = std::make_shared<OpenAiEmbedder>(c);
    } catch (const core::InvalidArgument& e) {
      throw core::ConfigError(kWhere, name("embeddings_endpoint"), e.what());
    }
    if (description) *description = fmt::format("{} at {}", s.model, s.endpoint);
    return embedder;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(s.checkpoint, ec))
    throw core::ConfigError(kWhere, name("embeddings_checkpoint"),
                            fmt::format("{}: not a folder (a Hugging Face checkpoint)", s.checkpoint));
  if (!load_checkpoint)
    throw core::ConfigError(kWhere, name("embeddings_checkpoint"),
                            fmt::format("{} embeds in process, which needs libtorch, and this program was built "
                                        "without it (KBRL_WITH_TORCH=OFF): serve the model (kbrl-serve) and give {}",
                                        name("embeddings_checkpoint"), name("embeddings_endpoint")));
  std::string how;
  auto embedder = load_checkpoint(s, how);
  if (!embedder) throw core::Error(fmt::format("{}: the checkpoint loader returned no embedder", s.checkpoint));
  if (description) *description = fmt::format("{} in process ({})", s.checkpoint, how);
  return embedder;
}

}  // namespace kbrl::rag
