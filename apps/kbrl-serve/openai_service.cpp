#include "openai_service.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"

namespace kbrl::serve {

namespace json = boost::json;

namespace {

// An answer refused before any sampling: OpenAI's error object with its HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int http_status, const std::string& message, std::string param_name = "", std::string error_code = "")
      : std::runtime_error(message), status(http_status), param(std::move(param_name)), code(std::move(error_code)) {}
  int status;
  std::string param;
  std::string code;
};

json::object error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  json::object e;
  e["message"] = message;
  e["type"] = status >= 500 ? "server_error" : "invalid_request_error";
  e["param"] = param.empty() ? json::value(nullptr) : json::value(param);
  e["code"] = code.empty() ? json::value(nullptr) : json::value(code);
  return json::object{{"error", std::move(e)}};
}

net::HttpResponse error_response(const ApiError& e) {
  return net::HttpResponse::json(e.status, json::serialize(error_json(e.status, e.what(), e.param, e.code)));
}

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

// Typed fields of a request body. An absent key and a null are the same (clients send nulls for
// "not given"); a wrong type is a 400 naming the field. Unknown keys are ignored.
class Fields {
 public:
  explicit Fields(const json::object& o) : o_(o) {}

  const json::value* get(std::string_view key) const {
    const auto* v = o_.if_contains(key);
    return v != nullptr && !v->is_null() ? v : nullptr;
  }
  std::optional<bool> boolean(std::string_view key) const {
    const auto* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_bool()) bad(std::string(key), fmt::format("'{}' must be a boolean", key));
    return v->as_bool();
  }
  std::optional<double> number(std::string_view key) const {
    const auto* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) bad(std::string(key), fmt::format("'{}' must be a number", key));
    const double x = v->to_number<double>();
    if (!std::isfinite(x)) bad(std::string(key), fmt::format("'{}' must be finite", key));
    return x;
  }
  std::optional<std::int64_t> integer(std::string_view key) const {
    const auto* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_int64()) return v->as_int64();
    if (v->is_uint64()) return static_cast<std::int64_t>(v->as_uint64());  // a seed past 2^63: its bits
    if (v->is_double()) {
      const double x = v->as_double();
      if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) return static_cast<std::int64_t>(x);
    }
    bad(std::string(key), fmt::format("'{}' must be an integer", key));
  }
  std::optional<std::string> string(std::string_view key) const {
    const auto* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) bad(std::string(key), fmt::format("'{}' must be a string", key));
    return std::string(v->as_string());
  }

 private:
  const json::object& o_;
};

json::object parse_body(const net::HttpRequest& r) {
  json::value v;
  try {
    v = core::parse_json(r.body);
  } catch (const std::exception& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!v.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return std::move(v.as_object());
}

std::string content_text(const json::value& content, const std::string& where) {
  if (content.is_string()) return std::string(content.as_string());
  if (content.is_null()) return "";
  if (!content.is_array()) bad(where, fmt::format("'{}' must be a string or an array of text parts", where));
  // Text parts joined by newlines, as vLLM joins them.
  std::string text;
  std::size_t i = 0;
  for (const auto& part : content.as_array()) {
    const std::string here = fmt::format("{}[{}]", where, i++);
    if (!part.is_object()) bad(here, fmt::format("'{}' must be an object", here));
    const Fields f(part.as_object());
    const auto type = f.string("type");
    if (type.value_or("text") != "text")
      bad(here + ".type", fmt::format("'{}.type' is '{}': this server reads text parts only", here, *type));
    const auto t = f.string("text");
    if (!t) bad(here + ".text", fmt::format("'{}.text' is missing", here));
    if (!text.empty()) text += "\n";
    text += *t;
  }
  return text;
}

std::vector<core::Message> read_messages(const json::object& body) {
  const auto* v = Fields(body).get("messages");
  if (v == nullptr) bad("messages", "'messages' is required");
  if (!v->is_array()) bad("messages", "'messages' must be an array");
  if (v->as_array().empty()) bad("messages", "'messages' must not be empty");
  std::vector<core::Message> out;
  std::size_t i = 0;
  for (const auto& m : v->as_array()) {
    const std::string where = fmt::format("messages[{}]", i++);
    if (!m.is_object()) bad(where, fmt::format("'{}' must be an object", where));
    const Fields f(m.as_object());
    std::string role;
    try {
      role = f.string("role").value_or("");
    } catch (const ApiError&) {
      bad(where + ".role", fmt::format("'{}.role' must be a string", where));
    }
    if (role.empty()) bad(where + ".role", fmt::format("'{}.role' is required", where));
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(where + ".role", fmt::format("'{}.role' is '{}': not system, developer, user, assistant or tool", where, role));
    const auto* content = m.as_object().if_contains("content");
    out.push_back({role, content == nullptr ? std::string() : content_text(*content, where + ".content")});
  }
  return out;
}

std::vector<std::string> read_stop(const json::object& body) {
  const auto* v = Fields(body).get("stop");
  if (v == nullptr) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.emplace_back(v->as_string());
  } else if (v->is_array()) {
    for (const auto& s : v->as_array()) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or an array of strings");
      out.emplace_back(s.as_string());
    }
  } else {
    bad("stop", "'stop' must be a string or an array of strings");
  }
  out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());  // an empty stop string stops nothing
  return out;
}

// Completions' prompt (and embeddings' input, `key`): a string, a list of strings, a list of token
// ids or a list of such lists.
std::vector<std::vector<std::int64_t>> read_prompts(const json::object& body, const tokenizer::Tokenizer& tok,
                                                    const std::string& key = "prompt") {
  const auto* v = Fields(body).get(key);
  if (v == nullptr) bad(key, fmt::format("'{}' is required", key));
  const auto limit = static_cast<std::int64_t>(tok.id_limit());
  auto encode = [&](std::string_view text) {
    const auto ids = tok.encode(text, {.add_special_tokens = true});
    return std::vector<std::int64_t>(ids.begin(), ids.end());
  };
  auto ids_of = [&](const json::array& a, const std::string& where) {
    std::vector<std::int64_t> ids;
    for (const auto& x : a) {
      if (!x.is_int64() || x.as_int64() < 0 || x.as_int64() >= limit)
        bad(key, fmt::format("'{}' holds {}: token ids are integers in [0, {})", where, json::serialize(x), limit));
      ids.push_back(x.as_int64());
    }
    return ids;
  };
  std::vector<std::vector<std::int64_t>> out;
  if (v->is_string()) {
    out.push_back(encode(v->as_string()));
  } else if (v->is_array() && !v->as_array().empty() && !v->as_array().front().is_string() &&
             !v->as_array().front().is_array()) {
    out.push_back(ids_of(v->as_array(), key));
  } else if (v->is_array()) {
    std::size_t i = 0;
    for (const auto& p : v->as_array()) {
      const std::string where = fmt::format("{}[{}]", key, i++);
      if (p.is_string()) {
        out.push_back(encode(p.as_string()));
      } else if (p.is_array()) {
        out.push_back(ids_of(p.as_array(), where));
      } else {
        bad(key, fmt::format("'{}' must be a string, an array of strings, an array of token ids or an array of those", key));
      }
    }
  } else {
    bad(key, fmt::format("'{}' must be a string, an array of strings, an array of token ids or an array of those", key));
  }
  if (out.empty()) bad(key, fmt::format("'{}' must not be empty", key));
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) bad(key, out.size() == 1 ? fmt::format("'{}' is empty", key) : fmt::format("'{}[{}]' is empty", key, i));
  return out;
}

// Standard base64 with padding (RFC 4648): what OpenAI's encoding_format "base64" carries, the
// embedding's little-endian float32 bytes. Written here because Boost has it only in a detail
// namespace that may change, and OpenSSL's sits behind the net module.
std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto v = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                   static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                   static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 2]));
    for (const int shift : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> shift) & 63]);
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

// What one request asked for besides the sampling, and what its rows produced so far.
struct RequestState {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  bool token_ids = false;  // vLLM's return_tokens_as_token_ids
  std::string route, id, model;
  std::int64_t created = 0;
  std::int64_t prompt_tokens = 0;
  struct Choice {
    std::string text;
    std::vector<std::int64_t> tokens;
    std::vector<float> logprobs;
    std::string finish_reason;
  };
  std::vector<Choice> choices;
  std::shared_ptr<net::ResponseStream> out;
  std::atomic<bool> gone{false};
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

std::string token_string(const tokenizer::Tokenizer& tok, std::int64_t id, bool as_ids) {
  if (as_ids) return fmt::format("token_id:{}", id);
  return tokenizer::utf8_lossy(tok.token_bytes(static_cast<tokenizer::TokenId>(id)));
}

json::value chat_logprobs(const tokenizer::Tokenizer& tok, const std::vector<std::int64_t>& tokens,
                          const std::vector<float>& logprobs, bool as_ids) {
  json::array content;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto b = tok.token_bytes(static_cast<tokenizer::TokenId>(tokens[i]));
    json::array bytes;
    for (const char c : b) bytes.emplace_back(static_cast<int>(static_cast<unsigned char>(c)));
    content.emplace_back(json::object{{"token", token_string(tok, tokens[i], as_ids)},
                                      {"logprob", finite_logprob(logprobs[i])},
                                      {"bytes", std::move(bytes)},
                                      {"top_logprobs", json::array()}});
  }
  return json::object{{"content", std::move(content)}};
}

json::value completion_logprobs(const tokenizer::Tokenizer& tok, const std::vector<std::int64_t>& tokens,
                                const std::vector<float>& logprobs, bool as_ids) {
  json::array ts, lps;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    ts.emplace_back(token_string(tok, tokens[i], as_ids));
    lps.emplace_back(finite_logprob(logprobs[i]));
  }
  return json::object{{"tokens", std::move(ts)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", nullptr}};
}

json::object usage_of(const RequestState& s) {
  std::int64_t completion = 0;
  for (const auto& c : s.choices) completion += static_cast<std::int64_t>(c.tokens.size());
  return json::object{{"prompt_tokens", s.prompt_tokens},
                      {"completion_tokens", completion},
                      {"total_tokens", s.prompt_tokens + completion}};
}

std::string sse(const json::value& v) { return "data: " + json::serialize(v) + "\n\n"; }

json::object chunk_head(const RequestState& s) {
  json::object o{{"id", s.id},
                 {"object", s.chat ? "chat.completion.chunk" : "text_completion"},
                 {"created", s.created},
                 {"model", s.model}};
  return o;
}

// No early exit on the first differing byte: the time taken does not tell how much of a key was right.
bool same_key(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

OpenAiService::OpenAiService(ServedModel& model, Batcher& batcher, OpenAiServiceConfig config,
                             std::function<void(const std::string&)> log)
    : model_(model), batcher_(batcher), config_(std::move(config)), log_(std::move(log)), rng_(std::random_device{}()) {
  created_ = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string OpenAiService::next_id(const char* prefix) {
  std::uint64_t r;
  {
    std::lock_guard lock(rng_mu_);
    r = rng_();
  }
  return fmt::format("{}-{:016x}{:x}", prefix, r, ++counter_);
}

net::HandlerResult OpenAiService::handle(const net::HttpRequest& r) {
  const std::string path(r.path());
  const std::string route = fmt::format("{} {}", r.method, path);
  auto refuse = [&](const ApiError& e) {
    if (log_) log_(fmt::format("{} {}: {}", route, e.status, e.what()));
    return net::HandlerResult(error_response(e));
  };
  try {
    if (path == "/health") {
      if (r.method != "GET" && r.method != "HEAD") throw ApiError(405, "use GET");
      return net::HttpResponse::text(200, "ok\n");
    }
    if (!config_.api_key.empty()) {
      const std::string_view auth = r.header("Authorization");
      const std::string_view prefix = "Bearer ";
      const bool ok = auth.size() > prefix.size() && auth.substr(0, prefix.size()) == prefix &&
                      same_key(auth.substr(prefix.size()), config_.api_key);
      if (!ok) throw ApiError(401, "Incorrect or missing API key (Authorization: Bearer <key>).", "", "invalid_api_key");
    }
    auto route_is = [&](std::string_view p, std::string_view method) {
      if (path != p) return false;
      if (r.method != method) throw ApiError(405, fmt::format("{} takes {} requests", p, method));
      return true;
    };
    if (path.rfind("/v1/models/", 0) == 0 && r.method == "GET") return models(r, path.substr(11));
    if (route_is("/v1/models", "GET")) return models(r, "");
    if (route_is("/v1/chat/completions", "POST")) return sample(r, true);
    if (route_is("/v1/completions", "POST")) return sample(r, false);
    if (route_is("/v1/embeddings", "POST")) return embeddings(r);
    if (route_is("/v1/load_lora_adapter", "POST")) return load_adapter(r);
    if (route_is("/v1/unload_lora_adapter", "POST")) return unload_adapter(r);
    throw ApiError(404, fmt::format("no route {} {}", r.method, path), "", "not_found");
  } catch (const ApiError& e) {
    return refuse(e);
  } catch (const std::exception& e) {
    return refuse(ApiError(500, fmt::format("internal error: {}", e.what())));
  }
}

net::HandlerResult OpenAiService::models(const net::HttpRequest&, const std::string& one) {
  json::array data;
  auto entry = [&](const std::string& id, const std::string& parent) {
    json::object o{{"id", id}, {"object", "model"}, {"created", created_}, {"owned_by", "kbrl"}};
    o["root"] = parent.empty() ? id : parent;
    o["parent"] = parent.empty() ? json::value(nullptr) : json::value(parent);
    if (config_.max_model_len > 0) o["max_model_len"] = config_.max_model_len;
    return o;
  };
  data.push_back(entry(config_.served_model_name, ""));
  for (const auto& name : model_.adapters()) data.push_back(entry(name, config_.served_model_name));
  if (!one.empty()) {
    for (const auto& m : data)
      if (m.as_object().at("id").as_string() == one) return net::HttpResponse::json(200, json::serialize(m));
    throw ApiError(404, fmt::format("The model '{}' does not exist.", one), "model", "model_not_found");
  }
  return net::HttpResponse::json(200, json::serialize(json::object{{"object", "list"}, {"data", std::move(data)}}));
}

net::HandlerResult OpenAiService::sample(const net::HttpRequest& r, bool chat) {
  const json::object body = parse_body(r);
  const Fields f(body);
  auto state = std::make_shared<RequestState>();
  state->chat = chat;
  state->route = fmt::format("{} {}", r.method, r.path());
  SamplingJob job;

  // The model: the base, or an adapter by name.
  state->model = f.string("model").value_or(config_.served_model_name);
  if (state->model != config_.served_model_name) {
    if (!model_.has_adapter(state->model))
      throw ApiError(404, fmt::format("The model '{}' does not exist.", state->model), "model", "model_not_found");
    job.adapter = state->model;
  }

  // Unsupported options are refused rather than silently ignored: an answer that ignored them
  // would look right and be wrong.
  for (const char* key : {"frequency_penalty", "presence_penalty"})
    if (f.number(key).value_or(0) != 0) bad(key, fmt::format("'{}' is not supported by this server (only 0)", key));
  if (const auto* lb = f.get("logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object");
    if (!lb->as_object().empty()) bad("logit_bias", "'logit_bias' is not supported by this server");
  }
  if (const auto* tools = f.get("tools"); tools != nullptr && !(tools->is_array() && tools->as_array().empty()))
    bad("tools", "'tools' is not supported by this server");
  if (const auto* rf = f.get("response_format")) {
    if (!rf->is_object()) bad("response_format", "'response_format' must be an object");
    if (Fields(rf->as_object()).string("type").value_or("text") != "text")
      bad("response_format", "'response_format' other than {\"type\": \"text\"} is not supported by this server");
  }

  job.n = f.integer("n").value_or(1);
  if (job.n < 1) bad("n", fmt::format("'n' is {}: it must be at least 1", job.n));
  if (job.n > config_.max_n) bad("n", fmt::format("'n' is {}: this server allows at most {}", job.n, config_.max_n));
  if (const auto best_of = f.integer("best_of"); best_of && *best_of != job.n)
    bad("best_of", "'best_of' other than n is not supported by this server");
  job.temperature = f.number("temperature").value_or(1.0);
  if (job.temperature < 0) bad("temperature", fmt::format("'temperature' is {}: it must be at least 0", job.temperature));
  job.top_p = f.number("top_p").value_or(1.0);
  if (!(job.top_p > 0 && job.top_p <= 1)) bad("top_p", fmt::format("'top_p' is {}: it must be in (0, 1]", job.top_p));
  job.top_k = f.integer("top_k").value_or(0);
  if (job.top_k < -1) bad("top_k", fmt::format("'top_k' is {}: it must be -1 or 0 (off) or positive", job.top_k));
  if (job.top_k == -1) job.top_k = 0;  // vLLM's "off"
  if (job.temperature == 0) {
    // Greedy: top_p and top_k change nothing, so greedy requests share one group.
    job.top_p = 1;
    job.top_k = 0;
  }
  job.stop = read_stop(body);
  if (const auto seed = f.integer("seed")) {
    job.seed = static_cast<std::uint64_t>(*seed);
  } else {
    std::lock_guard lock(rng_mu_);
    job.seed = rng_();
  }
  state->stream = f.boolean("stream").value_or(false);
  if (const auto* so = f.get("stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    try {
      state->include_usage = Fields(so->as_object()).boolean("include_usage").value_or(false);
    } catch (const ApiError&) {
      bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
    }
  }
  state->token_ids = f.boolean("return_tokens_as_token_ids").value_or(false);

  std::optional<std::int64_t> max_tokens;
  std::string max_tokens_field = "max_tokens";
  if (chat) {
    max_tokens = f.integer("max_completion_tokens");
    if (max_tokens) {
      max_tokens_field = "max_completion_tokens";
    } else {
      max_tokens = f.integer("max_tokens");
    }
    state->logprobs = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs").value_or(0);
    if (top < 0 || top > 20) bad("top_logprobs", "'top_logprobs' must be in [0, 20]");
    if (top > 0) {
      if (!state->logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      bad("top_logprobs", "this server returns the sampled tokens' log-probabilities only: 'top_logprobs' must be 0");
    }
    job.prompts.push_back(model_.chat_prompt(read_messages(body)));
  } else {
    max_tokens = f.integer("max_tokens");
    if (!max_tokens) max_tokens = 16;  // OpenAI's and vLLM's default for completions
    if (const auto lp = f.integer("logprobs")) {
      if (*lp < 0 || *lp > 5) bad("logprobs", "'logprobs' must be in [0, 5]");
      if (*lp > 0)
        bad("logprobs", "this server returns the sampled tokens' log-probabilities only: 'logprobs' must be 0");
      state->logprobs = true;
    }
    if (f.boolean("echo").value_or(false)) bad("echo", "'echo' is not supported by this server");
    if (f.get("suffix") != nullptr) bad("suffix", "'suffix' is not supported by this server");
    job.prompts = read_prompts(body, model_.tokenizer());
  }
  if (max_tokens && *max_tokens < 1)
    bad(max_tokens_field, fmt::format("'{}' is {}: it must be at least 1", max_tokens_field, *max_tokens));

  // The context: every prompt plus its completion must fit the model's positions.
  std::int64_t longest = 0;
  for (const auto& p : job.prompts) {
    longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
    state->prompt_tokens += static_cast<std::int64_t>(p.size());
  }
  const std::int64_t ctx = config_.max_model_len;
  if (!max_tokens) max_tokens = ctx > 0 ? std::min(ctx - longest, config_.default_max_tokens) : config_.default_max_tokens;
  if (ctx > 0 && (longest + *max_tokens > ctx || longest >= ctx)) {
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                               "the {}, {} for the completion). Please reduce the length of the {} or completion.",
                               ctx, longest + std::max<std::int64_t>(*max_tokens, 0), longest,
                               chat ? "messages" : "prompt", std::max<std::int64_t>(*max_tokens, 0),
                               chat ? "messages" : "prompt"),
                   chat ? "messages" : "prompt", "context_length_exceeded");
  }
  job.max_tokens = *max_tokens;

  state->id = next_id(chat ? "chatcmpl" : "cmpl");
  state->created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  state->choices.resize(job.prompts.size() * static_cast<std::size_t>(job.n));

  net::StreamingResponse response;
  response.status = 200;
  if (state->stream) {
    response.headers = {{"Content-Type", "text/event-stream; charset=utf-8"}, {"Cache-Control", "no-cache"}};
  } else {
    // The whole answer as one JSON body, sent once the last row finished (chunked: the io thread
    // is not held while the request waits for its batch).
    response.headers = {{"Content-Type", "application/json"}};
  }
  const std::size_t n_rows = state->choices.size();
  const std::int64_t n = job.n;
  const std::int64_t requested_max = job.max_tokens;
  response.start = [this, state, pending = std::move(job), n_rows, n, requested_max](
                       std::shared_ptr<net::ResponseStream> out) mutable {
    state->out = std::move(out);
    const tokenizer::Tokenizer* tok = &model_.tokenizer();
    auto write = [state](std::string text) {
      if (!state->out->write(std::move(text))) state->gone = true;
    };
    if (state->stream && state->chat) {
      // The role first, once per choice, as OpenAI's streams start.
      for (std::size_t i = 0; i < n_rows; ++i) {
        json::object c = chunk_head(*state);
        c["choices"] = json::array{json::object{{"index", i},
                                                {"delta", json::object{{"role", "assistant"}, {"content", ""}}},
                                                {"logprobs", nullptr},
                                                {"finish_reason", nullptr}}};
        if (state->include_usage) c["usage"] = nullptr;
        write(sse(c));
      }
    }
    JobCallbacks cb;
    cb.alive = [state] { return !state->gone.load(); };
    cb.update = [state, tok, write](const RowUpdate& u) {
      auto& choice = state->choices[u.row];
      choice.text += u.text;
      choice.tokens.insert(choice.tokens.end(), u.tokens.begin(), u.tokens.end());
      choice.logprobs.insert(choice.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
      if (u.finish_reason != nullptr) choice.finish_reason = u.finish_reason;
      if (!state->stream) return;
      auto one = [&](json::object choice_json) {
        json::object c = chunk_head(*state);
        c["choices"] = json::array{std::move(choice_json)};
        if (state->include_usage) c["usage"] = nullptr;
        write(sse(c));
      };
      if (!u.text.empty() || (state->logprobs && !u.tokens.empty())) {
        json::object ch{{"index", u.row}};
        if (state->chat) {
          ch["delta"] = json::object{{"content", u.text}};
        } else {
          ch["text"] = u.text;
        }
        ch["logprobs"] = !state->logprobs ? json::value(nullptr)
                         : state->chat   ? chat_logprobs(*tok, u.tokens, u.logprobs, state->token_ids)
                                         : completion_logprobs(*tok, u.tokens, u.logprobs, state->token_ids);
        ch["finish_reason"] = nullptr;
        one(std::move(ch));
      }
      if (u.finish_reason != nullptr) {
        json::object ch{{"index", u.row}};
        if (state->chat) {
          ch["delta"] = json::object();
        } else {
          ch["text"] = "";
        }
        ch["logprobs"] = nullptr;
        ch["finish_reason"] = u.finish_reason;
        one(std::move(ch));
      }
    };
    cb.done = [this, state, tok, write, n, requested_max](const std::string* error) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - state->start).count();
      const json::object usage = usage_of(*state);
      if (error != nullptr) {
        if (log_)
          log_(fmt::format("{} model={} n={}: failed after {:.3f} s: {}", state->route, state->model, n, seconds, *error));
        if (state->stream) {
          // Headers are out: the error goes in the stream, as vLLM sends it; then the stream ends.
          write(sse(error_json(500, *error, "", "")));
          write("data: [DONE]\n\n");
          state->out->finish();
        }
        // A whole-body answer cannot change its 200 any more: dropping the stream unfinished
        // closes the connection, so the client sees a failed request, not a wrong answer.
        state->out.reset();
        return;
      }
      if (state->stream) {
        if (state->include_usage) {
          json::object c = chunk_head(*state);
          c["choices"] = json::array();
          c["usage"] = usage;
          write(sse(c));
        }
        write("data: [DONE]\n\n");
      } else {
        json::array choices;
        for (std::size_t i = 0; i < state->choices.size(); ++i) {
          const auto& c = state->choices[i];
          json::object o{{"index", i}};
          if (state->chat) {
            o["message"] = json::object{{"role", "assistant"}, {"content", c.text}};
          } else {
            o["text"] = c.text;
          }
          o["logprobs"] = !state->logprobs ? json::value(nullptr)
                          : state->chat   ? chat_logprobs(*tok, c.tokens, c.logprobs, state->token_ids)
                                          : completion_logprobs(*tok, c.tokens, c.logprobs, state->token_ids);
          o["finish_reason"] = c.finish_reason;
          choices.push_back(std::move(o));
        }
        json::object o{{"id", state->id},
                       {"object", state->chat ? "chat.completion" : "text_completion"},
                       {"created", state->created},
                       {"model", state->model},
                       {"choices", std::move(choices)},
                       {"usage", usage}};
        write(json::serialize(o));
      }
      state->out->finish();
      state->out.reset();
      if (log_) {
        std::string reasons;
        for (const auto& c : state->choices) reasons += (reasons.empty() ? "" : ",") + c.finish_reason;
        log_(fmt::format("{} 200 model={} n={} max_tokens={} prompt_tokens={} completion_tokens={} finish={}{} {:.3f} s",
                         state->route, state->model, n, requested_max, usage.at("prompt_tokens").as_int64(),
                         usage.at("completion_tokens").as_int64(), reasons, state->stream ? " stream" : "", seconds));
      }
    };
    batcher_.submit(std::move(pending), std::move(cb));
  };
  return response;
}

// Answered on the io thread (no batching: one forward per group of similar lengths, which is what
// index builds send), from the same pooling as the in-process embedder (model/torch/embedder.hpp).
net::HandlerResult OpenAiService::embeddings(const net::HttpRequest& r) {
  const auto start = std::chrono::steady_clock::now();
  const json::object body = parse_body(r);
  const Fields f(body);
  const std::string model = f.string("model").value_or(config_.served_model_name);
  std::string adapter;
  if (model != config_.served_model_name) {
    if (!model_.has_adapter(model))
      throw ApiError(404, fmt::format("The model '{}' does not exist.", model), "model", "model_not_found");
    adapter = model;
  }
  const std::string format = f.string("encoding_format").value_or("float");
  if (format != "float" && format != "base64")
    bad("encoding_format", fmt::format("'encoding_format' is '{}': it must be \"float\" or \"base64\"", format));
  const std::size_t dimension = model_.embedding_dimension();
  if (const auto dims = f.integer("dimensions"); dims && *dims != static_cast<std::int64_t>(dimension))
    bad("dimensions", fmt::format("'dimensions' is {}: this model's embeddings have {} and cannot be shortened", *dims,
                                  dimension));
  const auto inputs = read_prompts(body, model_.tokenizer(), "input");
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<std::int64_t>(inputs[i].size());
    tokens += n;
    if (config_.max_model_len > 0 && n > config_.max_model_len)
      bad("input", fmt::format("This model's maximum context length is {} tokens. However, input {} has {} tokens.",
                               config_.max_model_len, i, n));
  }
  const std::vector<float> vectors = model_.embed(adapter, inputs);
  json::array data;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const float* row = vectors.data() + i * dimension;
    json::object o{{"object", "embedding"}, {"index", i}};
    if (format == "base64") {
      // Little-endian float32, as OpenAI sends it (and as numpy.frombuffer(..., "float32") reads it).
      std::string bytes(dimension * sizeof(float), '\0');
      std::memcpy(bytes.data(), row, bytes.size());
      o["embedding"] = base64(bytes);
    } else {
      json::array values;
      values.reserve(dimension);
      for (std::size_t d = 0; d < dimension; ++d) values.emplace_back(static_cast<double>(row[d]));
      o["embedding"] = std::move(values);
    }
    data.push_back(std::move(o));
  }
  json::object out{{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model},
                   {"usage", json::object{{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  if (log_)
    log_(fmt::format("POST /v1/embeddings 200 model={} inputs={} prompt_tokens={} {:.3f} s", model, inputs.size(), tokens,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
  return net::HttpResponse::json(200, json::serialize(out));
}

net::HandlerResult OpenAiService::load_adapter(const net::HttpRequest& r) {
  const json::object body = parse_body(r);
  const Fields f(body);
  const auto name = f.string("lora_name");
  const auto path = f.string("lora_path");
  if (!name || name->empty()) bad("lora_name", "'lora_name' is required");
  if (!path || path->empty()) bad("lora_path", "'lora_path' is required");
  if (*name == config_.served_model_name || model_.has_adapter(*name))
    throw ApiError(400, fmt::format("The lora adapter '{}' has already been loaded.", *name), "lora_name");
  std::error_code ec;
  if (!std::filesystem::is_directory(*path, ec))
    throw ApiError(400, fmt::format("'lora_path' {} is not a folder", *path), "lora_path");
  const auto start = std::chrono::steady_clock::now();
  try {
    model_.load_adapter(*name, *path);
  } catch (const core::Error& e) {
    throw ApiError(400, fmt::format("cannot load the adapter '{}' from {}: {}", *name, *path, e.what()), "lora_path");
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (log_) log_(fmt::format("loaded adapter '{}' from {} in {:.3f} s", *name, *path, seconds));
  // vLLM's answer, word for word: clients that check it keep working.
  return net::HttpResponse::text(200, fmt::format("Success: LoRA adapter '{}' added successfully.", *name));
}

net::HandlerResult OpenAiService::unload_adapter(const net::HttpRequest& r) {
  const json::object body = parse_body(r);
  const auto name = Fields(body).string("lora_name");
  if (!name || name->empty()) bad("lora_name", "'lora_name' is required");
  if (!model_.unload_adapter(*name))
    throw ApiError(404, fmt::format("The lora adapter '{}' cannot be found.", *name), "lora_name", "model_not_found");
  if (log_) log_(fmt::format("unloaded adapter '{}'", *name));
  return net::HttpResponse::text(200, fmt::format("Success: LoRA adapter '{}' removed successfully.", *name));
}

}  // namespace kbrl::serve
