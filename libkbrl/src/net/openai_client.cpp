#include "kbrl/net/openai_client.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <iomanip>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "kbrl/core/json.hpp"
#include "kbrl/net/http_client.hpp"

namespace kbrl::net {

namespace json = boost::json;

namespace {

bool retryable_status(int status) { return status == 429 || status >= 500; }

// The server's error message and type from an OpenAI-style body ({"error": {"message", "type"}},
// or kbrl's {"error": "..."}), else the start of the body.
std::pair<std::string, std::string> error_of(const HttpResponse& r) {
  try {
    const json::value v = core::parse_json(r.body);
    if (const auto* o = v.if_object()) {
      if (const auto* e = o->if_contains("error")) {
        if (e->is_string()) return {std::string(e->as_string()), ""};
        if (const auto* eo = e->if_object()) {
          std::string message, type;
          if (const auto* m = eo->if_contains("message"); m != nullptr && m->is_string()) message = m->as_string();
          if (const auto* t = eo->if_contains("type"); t != nullptr && t->is_string()) type = t->as_string();
          if (!message.empty()) return {message, type};
        }
      }
    }
  } catch (const std::exception&) {
    // not JSON: the body's start below
  }
  std::string text = r.body.substr(0, 300);
  std::replace(text.begin(), text.end(), '\n', ' ');
  return {text.empty() ? std::string(reason_phrase(r.status)) : text, ""};
}

json::object request_body(const SamplingRequest& r, bool chat) {
  json::object o{{"model", r.model}, {"n", r.n}, {"temperature", r.temperature}, {"top_p", r.top_p},
                 {"max_tokens", r.max_tokens}};
  if (r.top_k > 0) o["top_k"] = r.top_k;
  if (r.tokens_as_ids) o["return_tokens_as_token_ids"] = true;
  if (chat) {
    json::array messages;
    for (const auto& m : r.messages) messages.push_back(json::object{{"role", m.role}, {"content", m.content}});
    o["messages"] = std::move(messages);
    if (r.logprobs) o["logprobs"] = true;
  } else {
    if (r.prompt_tokens.empty()) {
      o["prompt"] = r.prompt;
    } else {
      json::array ids;
      for (const auto id : r.prompt_tokens) ids.emplace_back(id);
      o["prompt"] = std::move(ids);
    }
    if (r.logprobs) o["logprobs"] = 0;  // the sampled token's own log-probability, no alternatives
  }
  if (!r.stop.empty()) {
    json::array stop;
    for (const auto& s : r.stop) stop.emplace_back(s);
    o["stop"] = std::move(stop);
  }
  if (r.seed) o["seed"] = *r.seed;
  return o;
}

// "token_id:123" strings (vLLM's return_tokens_as_token_ids) as ids; empty unless all are.
std::vector<std::int64_t> token_ids_of(const std::vector<std::string>& tokens) {
  constexpr std::string_view prefix = "token_id:";
  std::vector<std::int64_t> ids;
  for (const auto& t : tokens) {
    std::int64_t id = -1;
    const char* begin = t.data() + prefix.size();
    const char* end = t.data() + t.size();
    if (t.size() <= prefix.size() || t.compare(0, prefix.size(), prefix) != 0 ||
        std::from_chars(begin, end, id).ptr != end || id < 0)
      return {};
    ids.push_back(id);
  }
  return ids;
}

[[noreturn]] void malformed(const std::string& what) {
  throw core::Error("the server's answer is not an OpenAI-style response: " + what);
}

const json::value& field(const json::object& o, std::string_view key, std::string_view where) {
  const auto* v = o.if_contains(key);
  if (v == nullptr) malformed(fmt::format("{}.{} is missing", where, key));
  return *v;
}

// An answer's body, which must be a JSON object.
json::value parse_object(const std::string& body) {
  json::value v;
  try {
    v = core::parse_json(body);
  } catch (const std::exception& e) {
    malformed(e.what());
  }
  if (!v.is_object()) malformed("not a JSON object");
  return v;
}

SamplingResponse parse_response(const std::string& body, bool chat) {
  const json::value v = parse_object(body);
  const auto& o = v.as_object();
  SamplingResponse out;
  if (const auto* id = o.if_contains("id"); id != nullptr && id->is_string()) out.id = id->as_string();
  if (const auto* m = o.if_contains("model"); m != nullptr && m->is_string()) out.model = m->as_string();
  const auto& choices = field(o, "choices", "response");
  if (!choices.is_array()) malformed("choices is not an array");
  std::vector<std::pair<std::int64_t, SampledChoice>> indexed;
  for (const auto& c : choices.as_array()) {
    if (!c.is_object()) malformed("a choice is not an object");
    const auto& co = c.as_object();
    SampledChoice s;
    std::int64_t index = static_cast<std::int64_t>(indexed.size());
    if (const auto* i = co.if_contains("index"); i != nullptr && i->is_int64()) index = i->as_int64();
    if (chat) {
      const auto& message = field(co, "message", "choice");
      if (!message.is_object()) malformed("choice.message is not an object");
      const auto* content = message.as_object().if_contains("content");
      if (content != nullptr && content->is_string()) s.text = content->as_string();
    } else {
      const auto& text = field(co, "text", "choice");
      if (!text.is_string()) malformed("choice.text is not a string");
      s.text = text.as_string();
    }
    if (const auto* f = co.if_contains("finish_reason"); f != nullptr && f->is_string()) s.finish_reason = f->as_string();
    if (const auto* lp = co.if_contains("logprobs"); lp != nullptr && lp->is_object()) {
      const auto& l = lp->as_object();
      if (chat) {  // {"content": [{"token", "logprob"}, ...]}
        if (const auto* content = l.if_contains("content"); content != nullptr && content->is_array())
          for (const auto& t : content->as_array()) {
            if (!t.is_object()) malformed("logprobs.content holds a non-object");
            const auto& to = t.as_object();
            const auto& token = field(to, "token", "logprobs.content[]");
            const auto& logprob = field(to, "logprob", "logprobs.content[]");
            if (!token.is_string() || !logprob.is_number()) malformed("logprobs.content[] has the wrong types");
            s.tokens.emplace_back(token.as_string());
            s.logprobs.push_back(logprob.to_number<double>());
          }
      } else {  // {"tokens": [...], "token_logprobs": [...]}
        const auto* tokens = l.if_contains("tokens");
        const auto* logprobs = l.if_contains("token_logprobs");
        if (tokens != nullptr && logprobs != nullptr && tokens->is_array() && logprobs->is_array()) {
          if (tokens->as_array().size() != logprobs->as_array().size())
            malformed("logprobs.tokens and logprobs.token_logprobs differ in length");
          for (std::size_t i = 0; i < tokens->as_array().size(); ++i) {
            const auto& t = tokens->as_array()[i];
            const auto& p = logprobs->as_array()[i];
            if (!t.is_string()) malformed("logprobs.tokens holds a non-string");
            s.tokens.emplace_back(t.as_string());
            // The first token of an echoed prompt has none (null); a sampled token always has one.
            s.logprobs.push_back(p.is_number() ? p.to_number<double>() : std::nan(""));
          }
        }
      }
    }
    s.token_ids = token_ids_of(s.tokens);
    indexed.emplace_back(index, std::move(s));
  }
  std::stable_sort(indexed.begin(), indexed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [i, s] : indexed) out.choices.push_back(std::move(s));
  if (const auto* u = o.if_contains("usage"); u != nullptr && u->is_object()) {
    auto count = [&](std::string_view key) -> std::int64_t {
      const auto* x = u->as_object().if_contains(key);
      return x != nullptr && x->is_number() ? static_cast<std::int64_t>(x->to_number<double>()) : 0;
    };
    out.usage = {count("prompt_tokens"), count("completion_tokens"), count("total_tokens")};
  }
  return out;
}

// One /embeddings answer for `expected` inputs: the rows in the answer's index order.
std::vector<std::vector<float>> parse_embeddings(const std::string& body, std::size_t expected, TokenUsage& usage,
                                                 std::string& model) {
  const json::value v = parse_object(body);
  const auto& o = v.as_object();
  if (const auto* m = o.if_contains("model"); m != nullptr && m->is_string()) model = m->as_string();
  const auto& data = field(o, "data", "response");
  if (!data.is_array()) malformed("data is not an array");
  if (data.as_array().size() != expected)
    malformed(fmt::format("{} embeddings for {} inputs", data.as_array().size(), expected));
  std::vector<std::vector<float>> rows(expected);
  std::vector<bool> seen(expected, false);
  std::size_t position = 0;
  for (const auto& d : data.as_array()) {
    if (!d.is_object()) malformed("a data item is not an object");
    const auto& item = d.as_object();
    std::size_t index = position++;
    if (const auto* i = item.if_contains("index"); i != nullptr && !i->is_null()) {
      if (!i->is_int64() || i->as_int64() < 0 || static_cast<std::size_t>(i->as_int64()) >= expected)
        malformed(fmt::format("data[].index {} is not an input's index", json::serialize(*i)));
      index = static_cast<std::size_t>(i->as_int64());
    }
    if (seen[index]) malformed(fmt::format("two embeddings for input {}", index));
    seen[index] = true;
    const auto& embedding = field(item, "embedding", "data[]");
    if (!embedding.is_array())
      malformed("data[].embedding is not an array of numbers (this client asks for encoding_format \"float\")");
    auto& row = rows[index];
    row.reserve(embedding.as_array().size());
    for (const auto& x : embedding.as_array()) {
      if (!x.is_number()) malformed("data[].embedding holds a non-number");
      row.push_back(static_cast<float>(x.to_number<double>()));
    }
    if (row.empty()) malformed("an empty embedding");
  }
  // Every index was seen once, so every row is filled.
  for (const auto& row : rows)
    if (row.size() != rows[0].size())
      malformed(fmt::format("embeddings of {} and {} dimensions in one answer", rows[0].size(), row.size()));
  if (const auto* u = o.if_contains("usage"); u != nullptr && u->is_object()) {
    auto count = [&](std::string_view key) -> std::int64_t {
      const auto* x = u->as_object().if_contains(key);
      return x != nullptr && x->is_number() ? static_cast<std::int64_t>(x->to_number<double>()) : 0;
    };
    usage.prompt_tokens += count("prompt_tokens");
    usage.total_tokens += count("total_tokens");
  }
  return rows;
}

}  // namespace

std::optional<double> retry_after_seconds(std::string_view value, double now) {
  std::string text(value);
  text.erase(0, text.find_first_not_of(" \t"));
  text.erase(text.find_last_not_of(" \t") + 1);
  if (text.empty()) return std::nullopt;
  if (std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; })) {
    try {
      const double s = std::stod(text);
      return std::isfinite(s) && s >= 0 ? std::optional<double>(s) : std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  std::tm tm{};
  std::istringstream in(text);
  in.imbue(std::locale::classic());
  in >> std::get_time(&tm, "%a, %d %b %Y %H:%M:%S");
  if (in.fail()) return std::nullopt;
  std::string zone;
  in >> zone;
  if (zone != "GMT" && zone != "UTC") return std::nullopt;
  const double at = static_cast<double>(timegm(&tm));
  return std::max(0.0, at - now);
}

struct OpenAiClient::Impl {
  OpenAiClientConfig config;
  Url base;
  std::string api_key;
  HttpClient http;
  std::mutex mu;
  std::condition_variable room;
  int in_flight = 0;
  std::mt19937_64 jitter;
  Stats stats;

  Impl(OpenAiClientConfig c, Url b, std::string key)
      : config(std::move(c)), base(std::move(b)), api_key(std::move(key)), http(http_config(config)) {
    jitter.seed(config.jitter_seed != 0 ? config.jitter_seed : std::random_device{}());
  }

  static HttpClientConfig http_config(const OpenAiClientConfig& c) {
    HttpClientConfig h;
    h.connect_timeout_s = c.connect_timeout_s;
    return h;
  }

  Url endpoint(std::string_view path) const {
    Url u = base;
    std::string root = u.target;
    while (!root.empty() && root.back() == '/') root.pop_back();
    u.target = root + "/" + std::string(path);
    return u;
  }

  // A slot among max_in_flight, held while the request is on the wire (not while it waits to retry).
  struct Slot {
    Impl& impl;
    explicit Slot(Impl& i) : impl(i) {
      std::unique_lock lock(impl.mu);
      impl.room.wait(lock, [&] { return impl.in_flight < impl.config.max_in_flight; });
      ++impl.in_flight;
      ++impl.stats.attempts;
    }
    ~Slot() {
      {
        std::lock_guard lock(impl.mu);
        --impl.in_flight;
      }
      impl.room.notify_one();
    }
  };

  double backoff(int retry) {
    const double delay = std::min(config.backoff_max_s, config.backoff_initial_s * std::pow(2.0, retry));
    std::lock_guard lock(mu);
    return std::uniform_real_distribution<double>(delay / 2, delay)(jitter);
  }

  void fail(const std::string& what, int status, std::string type, int attempts) {
    {
      std::lock_guard lock(mu);
      ++stats.failed;
    }
    throw OpenAiError(what, status, std::move(type), attempts);
  }

  // Sends until an answer, a failure that is not retried, or the retries run out.
  HttpResponse send(std::string_view method, std::string_view path, const std::string& body, int& attempts) {
    Headers headers{{"Accept", "application/json"}};
    if (!body.empty()) headers.emplace_back("Content-Type", "application/json");
    if (!api_key.empty()) headers.emplace_back("Authorization", "Bearer " + api_key);
    const Url url = endpoint(path);
    {
      std::lock_guard lock(mu);
      ++stats.requests;
    }
    for (int attempt = 0;; ++attempt) {
      attempts = attempt + 1;
      std::string why;
      int status = 0;
      std::optional<double> asked;
      try {
        HttpResponse r;
        {
          Slot slot(*this);
          r = http.request(url, method, headers, body, config.attempt_timeout_s);
        }
        if (r.status >= 200 && r.status < 300) return r;
        status = r.status;
        auto [message, type] = error_of(r);
        why = fmt::format("HTTP {}: {}", r.status, message);
        if (!retryable_status(r.status))
          fail(fmt::format("{} {}: {}", method, url.str(), why), r.status, std::move(type), attempts);
        asked = retry_after_seconds(r.header("Retry-After"),
                                    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
      } catch (const HttpError& e) {
        why = e.timeout ? fmt::format("no answer within {} s ({})", config.attempt_timeout_s, e.what()) : e.what();
      }
      if (attempt >= config.max_retries)
        fail(fmt::format("{} {}: {} (sent {} times, max_retries {})", method, url.str(), why, attempts,
                         config.max_retries),
             status, "", attempts);
      if (asked && *asked > config.max_retry_after_s)
        fail(fmt::format("{} {}: {}; the server asks to retry after {} s, more than max_retry_after_s ({})", method,
                         url.str(), why, *asked, config.max_retry_after_s),
             status, "", attempts);
      const double wait = asked ? *asked : backoff(attempt);
      {
        std::lock_guard lock(mu);
        ++stats.retries;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }

  SamplingResponse sample(const SamplingRequest& r, bool chat) {
    if (r.model.empty()) throw core::InvalidArgument("SamplingRequest: model is empty");
    if (r.n < 1) throw core::InvalidArgument(fmt::format("SamplingRequest: n must be at least 1 (got {})", r.n));
    if (chat && r.messages.empty()) throw core::InvalidArgument("SamplingRequest: a chat completion needs messages");
    int attempts = 0;
    const HttpResponse answer =
        send("POST", chat ? "chat/completions" : "completions", json::serialize(request_body(r, chat)), attempts);
    SamplingResponse out;
    try {
      out = parse_response(answer.body, chat);
    } catch (const core::Error& e) {
      fail(e.what(), answer.status, "", attempts);
    }
    out.attempts = attempts;
    std::lock_guard lock(mu);
    stats.usage.prompt_tokens += out.usage.prompt_tokens;
    stats.usage.completion_tokens += out.usage.completion_tokens;
    stats.usage.total_tokens += out.usage.total_tokens;
    return out;
  }
};

OpenAiClient::OpenAiClient(OpenAiClientConfig config) {
  if (config.max_in_flight < 1) throw core::InvalidArgument("OpenAiClientConfig: max_in_flight must be at least 1");
  if (config.max_retries < 0) throw core::InvalidArgument("OpenAiClientConfig: max_retries must be at least 0");
  if (!(config.backoff_initial_s >= 0 && config.backoff_max_s >= config.backoff_initial_s))
    throw core::InvalidArgument("OpenAiClientConfig: need 0 <= backoff_initial_s <= backoff_max_s");
  Url base = Url::parse(config.base_url);
  std::string key;
  if (!config.api_key_env.empty()) {
    const char* value = std::getenv(config.api_key_env.c_str());
    if (value == nullptr || *value == '\0')
      throw core::InvalidArgument(fmt::format("the API key's environment variable {} is not set", config.api_key_env));
    key = value;
  }
  impl_ = std::make_unique<Impl>(std::move(config), std::move(base), std::move(key));
}

OpenAiClient::~OpenAiClient() = default;

SamplingResponse OpenAiClient::chat(const SamplingRequest& request) { return impl_->sample(request, true); }

SamplingResponse OpenAiClient::complete(const SamplingRequest& request) { return impl_->sample(request, false); }

EmbeddingsResponse OpenAiClient::embeddings(const std::string& model, const std::vector<std::string>& inputs,
                                            std::size_t batch_size) {
  if (model.empty()) throw core::InvalidArgument("embeddings: the model is empty");
  if (batch_size == 0) throw core::InvalidArgument("embeddings: batch_size must be at least 1");
  EmbeddingsResponse out;
  if (inputs.empty()) return out;
  const std::size_t batches = (inputs.size() + batch_size - 1) / batch_size;
  struct Batch {
    std::vector<std::vector<float>> rows;
    TokenUsage usage;
    std::string model;
    int attempts = 0;
  };
  std::vector<Batch> done(batches);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  std::exception_ptr error;
  const Url url = impl_->endpoint("embeddings");
  // Each worker takes the next batch until none is left or one has failed; the in-flight limit
  // is the client's own (Slot), shared with whatever else this client is sending.
  auto work = [&] {
    while (!stop) {
      const std::size_t b = next++;
      if (b >= batches) return;
      try {
        const std::size_t begin = b * batch_size;
        const std::size_t end = std::min(inputs.size(), begin + batch_size);
        json::array input;
        for (std::size_t i = begin; i < end; ++i) input.emplace_back(inputs[i]);
        const std::string body = json::serialize(
            json::object{{"model", model}, {"input", std::move(input)}, {"encoding_format", "float"}});
        Batch& batch = done[b];
        const HttpResponse r = impl_->send("POST", "embeddings", body, batch.attempts);
        try {
          batch.rows = parse_embeddings(r.body, end - begin, batch.usage, batch.model);
        } catch (const core::Error& e) {
          impl_->fail(fmt::format("POST {}: {}", url.str(), e.what()), r.status, "", batch.attempts);
        }
      } catch (...) {
        std::lock_guard lock(error_mu);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(batches, static_cast<std::size_t>(impl_->config.max_in_flight));
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (std::size_t t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);

  out.dimension = done[0].rows[0].size();
  out.model = done[0].model;
  out.requests = static_cast<int>(batches);
  out.vectors.reserve(inputs.size() * out.dimension);
  for (const Batch& batch : done) {
    out.attempts += batch.attempts;
    out.usage.prompt_tokens += batch.usage.prompt_tokens;
    out.usage.total_tokens += batch.usage.total_tokens;
    for (const auto& row : batch.rows) {
      if (row.size() != out.dimension)
        impl_->fail(fmt::format("POST {}: the server's embeddings have {} dimensions in one answer and {} in another",
                                url.str(), out.dimension, row.size()),
                    200, "", out.attempts);
      out.vectors.insert(out.vectors.end(), row.begin(), row.end());
    }
  }
  std::lock_guard lock(impl_->mu);
  impl_->stats.usage.prompt_tokens += out.usage.prompt_tokens;
  impl_->stats.usage.total_tokens += out.usage.total_tokens;
  return out;
}

std::vector<std::string> OpenAiClient::models() {
  int attempts = 0;
  const HttpResponse r = impl_->send("GET", "models", "", attempts);
  std::vector<std::string> ids;
  try {
    const json::value v = core::parse_json(r.body);
    for (const auto& m : v.at("data").as_array()) ids.emplace_back(m.at("id").as_string());
  } catch (const std::exception& e) {
    impl_->fail(fmt::format("GET {}: not an OpenAI-style model list ({})", impl_->endpoint("models").str(), e.what()),
                r.status, "", attempts);
  }
  return ids;
}

void OpenAiClient::load_lora_adapter(const std::string& name, const std::string& path) {
  int attempts = 0;
  impl_->send("POST", "load_lora_adapter", json::serialize(json::object{{"lora_name", name}, {"lora_path", path}}),
              attempts);
}

void OpenAiClient::unload_lora_adapter(const std::string& name) {
  int attempts = 0;
  impl_->send("POST", "unload_lora_adapter", json::serialize(json::object{{"lora_name", name}}), attempts);
}

OpenAiClient::Stats OpenAiClient::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

}  // namespace kbrl::net
