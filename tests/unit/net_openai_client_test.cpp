// The OpenAI-compatible client against a local stub server (a real net::HttpServer on 127.0.0.1)
// that answers as an OpenAI server does, or fails on purpose: 429 with Retry-After, 500, a
// dropped connection, an answer slower than the attempt timeout, a 400 with an OpenAI error
// object. Every request completes or fails with a clear error, and none is sent more often than
// the retry policy allows (the stub counts what it received).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "catch.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/net/http_server.hpp"
#include "kbrl/net/openai_client.hpp"
#include "kbrl/rag/openai_embedder.hpp"

using namespace kbrl;
using namespace kbrl::net;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace json = boost::json;

namespace {

// An OpenAI server stand-in. `script` decides each request's fate by its arrival number (0-based,
// counted per path); what arrived is kept for the checks.
struct Stub {
  using Script = std::function<std::optional<HttpResponse>(int n, const HttpRequest&)>;
  Script script;
  std::mutex mu;
  std::vector<HttpRequest> received;
  std::map<std::string, int> count;
  std::atomic<int> in_flight{0}, max_in_flight{0};
  double delay_s = 0;  // every answer waits this long (in flight while it waits)
  std::unique_ptr<HttpServer> server;

  explicit Stub(Script s = {}) : script(std::move(s)) {
    HttpServerConfig c;
    c.host = "127.0.0.1";
    c.port = 0;
    c.threads = 8;
    server = std::make_unique<HttpServer>(c, [this](const HttpRequest& r) -> HandlerResult { return handle(r); });
  }
  ~Stub() { server->stop(); }

  std::string base() const { return "http://127.0.0.1:" + std::to_string(server->port()) + "/v1"; }

  int received_on(const std::string& path) {
    std::lock_guard lock(mu);
    return count[path];
  }

  HttpResponse handle(const HttpRequest& r) {
    int n;
    {
      std::lock_guard lock(mu);
      received.push_back(r);
      n = count[std::string(r.path())]++;
    }
    const int now = ++in_flight;
    int seen = max_in_flight.load();
    while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
    }
    if (delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
    --in_flight;
    if (script)
      if (auto scripted = script(n, r)) return *scripted;
    return answer(r);
  }

  // The answer an OpenAI server gives: one choice per n, with log-probabilities when asked.
  static HttpResponse answer(const HttpRequest& r) {
    if (r.path() == "/v1/models")
      return HttpResponse::json(200, R"({"object":"list","data":[{"id":"tiny","object":"model"},{"id":"tiny-lora","object":"model"}]})");
    if (r.path() == "/v1/embeddings") return embeddings(r);
    const auto body = core::parse_json(r.body).as_object();
    const bool chat = r.path() == "/v1/chat/completions";
    const int n = static_cast<int>(body.at("n").to_number<int>());
    const bool logprobs = body.contains("logprobs");
    json::array choices;
    for (int i = 0; i < n; ++i) {
      const std::string text = "answer " + std::to_string(i);
      json::object c{{"index", n - 1 - i}, {"finish_reason", i == 0 ? "stop" : "length"}};  // out of order on purpose
      if (chat) c["message"] = json::object{{"role", "assistant"}, {"content", text}};
      else c["text"] = text;
      if (logprobs) {
        if (chat)
          c["logprobs"] = json::object{{"content", json::array{json::object{{"token", "answer"}, {"logprob", -0.25}},
                                                               json::object{{"token", " " + std::to_string(i)}, {"logprob", -1.5}}}}};
        else
          c["logprobs"] = json::object{{"tokens", json::array{"answer", " " + std::to_string(i)}},
                                       {"token_logprobs", json::array{-0.25, -1.5}}};
      }
      choices.push_back(std::move(c));
    }
    json::object o{{"id", "cmpl-1"}, {"model", body.at("model")}, {"choices", std::move(choices)},
                   {"usage", json::object{{"prompt_tokens", 7}, {"completion_tokens", 2 * n}, {"total_tokens", 7 + 2 * n}}}};
    return HttpResponse::json(200, json::serialize(o));
  }

  // Embeddings that tell which input they came from: [length, first byte, 2], in reverse index
  // order (clients must use "index"); usage counts characters as tokens.
  static HttpResponse embeddings(const HttpRequest& r) {
    const auto body = core::parse_json(r.body).as_object();
    const auto& input = body.at("input").as_array();
    json::array data;
    std::int64_t chars = 0;
    for (std::size_t i = input.size(); i-- > 0;) {
      const std::string text(input[i].as_string());
      chars += static_cast<std::int64_t>(text.size());
      data.push_back(json::object{{"object", "embedding"},
                                  {"index", i},
                                  {"embedding", json::array{static_cast<double>(text.size()),
                                                            text.empty() ? 0.0 : static_cast<double>(text[0]), 2.0}}});
    }
    json::object o{{"object", "list"}, {"data", std::move(data)}, {"model", body.at("model")},
                   {"usage", json::object{{"prompt_tokens", chars}, {"total_tokens", chars}}}};
    return HttpResponse::json(200, json::serialize(o));
  }
};

HttpResponse status(int code, const std::string& body = "{\"error\":{\"message\":\"busy\",\"type\":\"server_error\"}}") {
  return HttpResponse::json(code, body);
}

OpenAiClientConfig config_for(const std::string& base) {
  OpenAiClientConfig c;
  c.base_url = base;
  c.max_retries = 3;
  c.backoff_initial_s = 0.01;
  c.backoff_max_s = 0.05;
  c.attempt_timeout_s = 5;
  c.jitter_seed = 7;
  return c;
}

SamplingRequest chat_request(int n = 1) {
  SamplingRequest r;
  r.model = "tiny";
  r.messages = {{"system", "You write kernels."}, {"user", "Write a ReLU."}};
  r.n = n;
  r.temperature = 0.7;
  r.top_p = 0.9;
  r.max_tokens = 64;
  r.stop = {"</KERNEL>"};
  r.seed = 11;
  return r;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST_CASE("openai client: chat and completions with n samples, log-probabilities and usage") {
  Stub stub;
  ::setenv("KBRL_TEST_OPENAI_KEY", "sk-test-123", 1);
  auto c = config_for(stub.base());
  c.api_key_env = "KBRL_TEST_OPENAI_KEY";
  OpenAiClient client(c);
  auto request = chat_request(3);
  request.logprobs = true;
  const auto chat = client.chat(request);
  REQUIRE(chat.choices.size() == 3);
  CHECK(chat.choices[0].text == "answer 2");  // in index order: the stub sent index n - 1 - i
  CHECK(chat.choices[2].text == "answer 0");
  CHECK(chat.choices[2].finish_reason == "stop");
  CHECK(chat.choices[0].tokens == std::vector<std::string>{"answer", " 2"});
  CHECK(chat.choices[0].logprobs == std::vector<double>{-0.25, -1.5});
  CHECK(chat.usage.prompt_tokens == 7);
  CHECK(chat.usage.completion_tokens == 6);
  CHECK(chat.attempts == 1);
  CHECK(chat.model == "tiny");
  {
    const auto& sent = stub.received.at(0);
    CHECK(sent.path() == "/v1/chat/completions");
    CHECK(sent.header("Authorization") == "Bearer sk-test-123");
    const auto body = core::parse_json(sent.body).as_object();
    CHECK(body.at("model").as_string() == "tiny");
    CHECK(body.at("messages").as_array().size() == 2);
    CHECK(body.at("messages").as_array()[1].at("content").as_string() == "Write a ReLU.");
    CHECK(body.at("n").to_number<int>() == 3);
    CHECK(body.at("temperature").to_number<double>() == 0.7);
    CHECK(body.at("top_p").to_number<double>() == 0.9);
    CHECK(body.at("max_tokens").to_number<int>() == 64);
    CHECK(body.at("stop").as_array()[0].as_string() == "</KERNEL>");
    CHECK(body.at("seed").to_number<int>() == 11);
    CHECK(body.at("logprobs").as_bool());
  }
  SamplingRequest plain;
  plain.model = "tiny";
  plain.prompt = "def relu(x):";
  plain.n = 2;
  plain.logprobs = true;
  const auto completion = client.complete(plain);
  REQUIRE(completion.choices.size() == 2);
  CHECK(completion.choices[1].text == "answer 0");
  CHECK(completion.choices[1].logprobs == std::vector<double>{-0.25, -1.5});
  CHECK(stub.received.at(1).path() == "/v1/completions");
  CHECK(core::parse_json(stub.received.at(1).body).at("prompt").as_string() == "def relu(x):");
  CHECK(client.models() == std::vector<std::string>{"tiny", "tiny-lora"});
  const auto s = client.stats();
  CHECK(s.requests == 3);
  CHECK(s.attempts == 3);
  CHECK(s.retries == 0);
  CHECK(s.usage.total_tokens == (7 + 6) + (7 + 4));
  ::unsetenv("KBRL_TEST_OPENAI_KEY");
}

TEST_CASE("openai client: prompts as token ids, tokens back as ids, top_k, and the LoRA endpoints") {
  Stub stub([](int, const HttpRequest& r) -> std::optional<HttpResponse> {
    if (r.path() == "/v1/load_lora_adapter" || r.path() == "/v1/unload_lora_adapter") {
      const auto body = core::parse_json(r.body).as_object();
      if (body.at("lora_name").as_string() == "missing")
        return HttpResponse::json(404, R"({"error":{"message":"no adapter named missing","type":"NotFoundError"}})");
      return HttpResponse::text(200, "Success");  // vLLM answers in plain text
    }
    if (r.path() != "/v1/completions") return std::nullopt;
    json::object c{{"index", 0}, {"text", "ab"}, {"finish_reason", "stop"},
                   {"logprobs", json::object{{"tokens", json::array{"token_id:17", "token_id:2"}},
                                             {"token_logprobs", json::array{-0.5, -0.125}}}}};
    json::object o{{"id", "cmpl-2"}, {"model", "tiny"}, {"choices", json::array{c}}};
    return HttpResponse::json(200, json::serialize(o));
  });
  OpenAiClient client(config_for(stub.base()));
  SamplingRequest r;
  r.model = "tiny";
  r.prompt_tokens = {101, 7, 9};
  r.top_k = 20;
  r.logprobs = true;
  r.tokens_as_ids = true;
  const auto answer = client.complete(r);
  REQUIRE(answer.choices.size() == 1);
  CHECK(answer.choices[0].token_ids == std::vector<std::int64_t>{17, 2});
  CHECK(answer.choices[0].logprobs == std::vector<double>{-0.5, -0.125});
  const auto body = core::parse_json(stub.received.at(0).body).as_object();
  REQUIRE(body.at("prompt").is_array());
  CHECK(body.at("prompt").as_array().size() == 3);
  CHECK(body.at("prompt").as_array()[0].to_number<int>() == 101);
  CHECK(body.at("top_k").to_number<int>() == 20);
  CHECK(body.at("return_tokens_as_token_ids").as_bool());
  // Token strings that are not all ids give no ids (the stub of the first test sends words).
  Stub words;
  OpenAiClient plain(config_for(words.base()));
  SamplingRequest w;
  w.model = "tiny";
  w.prompt = "x";
  w.logprobs = true;
  CHECK(plain.complete(w).choices.at(0).token_ids.empty());

  client.load_lora_adapter("run-v1", "/runs/a/served_adapters/v1");
  const auto load = core::parse_json(stub.received.at(1).body).as_object();
  CHECK(stub.received.at(1).path() == "/v1/load_lora_adapter");
  CHECK(load.at("lora_name").as_string() == "run-v1");
  CHECK(load.at("lora_path").as_string() == "/runs/a/served_adapters/v1");
  client.unload_lora_adapter("run-v1");
  CHECK(stub.received_on("/v1/unload_lora_adapter") == 1);
  try {
    client.unload_lora_adapter("missing");
    FAIL("no error");
  } catch (const kbrl::net::OpenAiError& e) {
    CHECK(e.status == 404);
    CHECK(std::string(e.what()).find("no adapter named missing") != std::string::npos);
  }
}

TEST_CASE("openai client: 429 and 500 are retried, Retry-After honoured, the retries bounded") {
  SECTION("429 with Retry-After, then an answer") {
    Stub stub([](int n, const HttpRequest&) -> std::optional<HttpResponse> {
      if (n > 0) return std::nullopt;
      auto r = status(429, R"({"error":{"message":"rate limited","type":"rate_limit_error"}})");
      r.headers.emplace_back("Retry-After", "1");
      return r;
    });
    OpenAiClient client(config_for(stub.base()));
    const auto start = Clock::now();
    const auto r = client.chat(chat_request());
    CHECK(seconds_since(start) >= 0.95);  // the server's second, not the 10 ms back-off
    CHECK(r.attempts == 2);
    CHECK(stub.received_on("/v1/chat/completions") == 2);
    CHECK(client.stats().retries == 1);
  }
  SECTION("500 twice, then an answer") {
    Stub stub([](int n, const HttpRequest&) -> std::optional<HttpResponse> {
      return n < 2 ? std::optional<HttpResponse>(status(500)) : std::nullopt;
    });
    OpenAiClient client(config_for(stub.base()));
    CHECK(client.chat(chat_request()).attempts == 3);
    CHECK(stub.received_on("/v1/chat/completions") == 3);
  }
  SECTION("503 every time: sent 1 + max_retries times, then a clear error") {
    Stub stub([](int, const HttpRequest&) -> std::optional<HttpResponse> { return status(503); });
    OpenAiClient client(config_for(stub.base()));
    try {
      client.chat(chat_request());
      FAIL("no error");
    } catch (const OpenAiError& e) {
      CHECK(e.status == 503);
      CHECK(e.attempts == 4);
      CHECK(std::string(e.what()).find("HTTP 503: busy (sent 4 times, max_retries 3)") != std::string::npos);
    }
    CHECK(stub.received_on("/v1/chat/completions") == 4);
    CHECK(client.stats().failed == 1);
  }
  SECTION("a Retry-After beyond max_retry_after_s fails instead of waiting") {
    Stub stub([](int, const HttpRequest&) -> std::optional<HttpResponse> {
      auto r = status(429);
      r.headers.emplace_back("Retry-After", "3600");
      return r;
    });
    auto c = config_for(stub.base());
    c.max_retry_after_s = 5;
    OpenAiClient client(c);
    const auto start = Clock::now();
    CHECK_THROWS_WITH(client.chat(chat_request()), Catch::Matchers::ContainsSubstring("retry after 3600 s"));
    CHECK(seconds_since(start) < 3);
    CHECK(stub.received_on("/v1/chat/completions") == 1);
  }
}

TEST_CASE("openai client: a 4xx other than 429 fails at once with the server's message") {
  Stub stub([](int, const HttpRequest&) -> std::optional<HttpResponse> {
    return status(400, R"({"error":{"message":"max_tokens is too large: 999999","type":"invalid_request_error"}})");
  });
  OpenAiClient client(config_for(stub.base()));
  try {
    client.chat(chat_request());
    FAIL("no error");
  } catch (const OpenAiError& e) {
    CHECK(e.status == 400);
    CHECK(e.type == "invalid_request_error");
    CHECK(e.attempts == 1);
    CHECK(std::string(e.what()).find("max_tokens is too large: 999999") != std::string::npos);
  }
  CHECK(stub.received_on("/v1/chat/completions") == 1);
}

TEST_CASE("openai client: a slow answer times the attempt out and is retried") {
  std::atomic<bool> always_slow{false};
  Stub stub([&](int n, const HttpRequest&) -> std::optional<HttpResponse> {
    if (always_slow) std::this_thread::sleep_for(1000ms);
    else if (n == 0) std::this_thread::sleep_for(1500ms);  // past the attempt timeout
    return std::nullopt;
  });
  auto c = config_for(stub.base());
  c.attempt_timeout_s = 0.5;
  OpenAiClient client(c);
  const auto r = client.chat(chat_request());
  CHECK(r.attempts == 2);
  CHECK(stub.received_on("/v1/chat/completions") == 2);
  always_slow = true;
  c.max_retries = 0;
  OpenAiClient impatient(c);
  CHECK_THROWS_WITH(impatient.chat(chat_request()), Catch::Matchers::ContainsSubstring("no answer within 0.5 s"));
  CHECK(stub.received_on("/v1/chat/completions") == 3);
}

TEST_CASE("openai client: dropped connections are retried, a server that never answers is an error") {
  // A listener that accepts and closes `drops` connections, then hands the rest to a real stub.
  Stub stub;
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 16) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const int port = ntohs(addr.sin_port);
  std::atomic<int> dropped{0};
  std::thread dropper([&] {
    for (int i = 0; i < 2; ++i) {
      const int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) return;
      char buf[4096];
      (void)::recv(fd, buf, sizeof buf, 0);  // the request arrives, no answer does
      ::close(fd);
      ++dropped;
    }
  });
  auto c = config_for("http://127.0.0.1:" + std::to_string(port) + "/v1");
  c.max_retries = 1;
  OpenAiClient client(c);
  try {
    client.chat(chat_request());
    FAIL("no error");
  } catch (const OpenAiError& e) {
    CHECK(e.status == 0);
    CHECK(e.attempts == 2);
    CHECK(std::string(e.what()).find("sent 2 times") != std::string::npos);
  }
  dropper.join();
  ::close(listener);
  CHECK(dropped == 2);
  // Nothing listening at all: refused, retried, then the error.
  auto refused = config_for("http://127.0.0.1:" + std::to_string(port) + "/v1");
  refused.max_retries = 2;
  OpenAiClient nobody(refused);
  try {
    nobody.models();
    FAIL("no error");
  } catch (const OpenAiError& e) {
    CHECK(e.attempts == 3);
  }
}

TEST_CASE("openai client: at most max_in_flight requests are on the wire at once") {
  Stub stub;
  stub.delay_s = 0.1;
  auto c = config_for(stub.base());
  c.max_in_flight = 2;
  OpenAiClient client(c);
  std::vector<std::future<SamplingResponse>> calls;
  for (int i = 0; i < 8; ++i) calls.push_back(std::async(std::launch::async, [&] { return client.chat(chat_request()); }));
  for (auto& f : calls) CHECK(f.get().choices.size() == 1);
  CHECK(stub.max_in_flight == 2);
  CHECK(stub.received_on("/v1/chat/completions") == 8);
}

TEST_CASE("openai client: settings and the API key are checked when it is made, and the key is in no message") {
  ::unsetenv("KBRL_TEST_OPENAI_MISSING");
  auto c = config_for("http://127.0.0.1:9/v1");
  c.api_key_env = "KBRL_TEST_OPENAI_MISSING";
  CHECK_THROWS_WITH(OpenAiClient(c), Catch::Matchers::ContainsSubstring("KBRL_TEST_OPENAI_MISSING is not set"));
  c.api_key_env.clear();
  c.max_in_flight = 0;
  CHECK_THROWS_AS(OpenAiClient(c), core::InvalidArgument);
  CHECK_THROWS_AS(OpenAiClient(config_for("ftp://x/v1")), core::InvalidArgument);
  // A failure's message names the URL and the server's answer, never the key.
  Stub stub([](int, const HttpRequest&) -> std::optional<HttpResponse> { return status(401, R"({"error":{"message":"bad key"}})"); });
  ::setenv("KBRL_TEST_OPENAI_KEY2", "sk-secret-value", 1);
  auto keyed = config_for(stub.base());
  keyed.api_key_env = "KBRL_TEST_OPENAI_KEY2";
  OpenAiClient client(keyed);
  try {
    client.chat(chat_request());
    FAIL("no error");
  } catch (const OpenAiError& e) {
    CHECK(e.status == 401);
    CHECK(std::string(e.what()).find("bad key") != std::string::npos);
    CHECK(std::string(e.what()).find("sk-secret-value") == std::string::npos);
  }
  ::unsetenv("KBRL_TEST_OPENAI_KEY2");
  // A malformed 200 is an error, not a crash.
  Stub broken([](int, const HttpRequest&) -> std::optional<HttpResponse> { return HttpResponse::json(200, R"({"choices": 3})"); });
  OpenAiClient b(config_for(broken.base()));
  CHECK_THROWS_WITH(b.chat(chat_request()), Catch::Matchers::ContainsSubstring("not an OpenAI-style response"));
}

TEST_CASE("Retry-After: seconds or an HTTP date") {
  CHECK(retry_after_seconds("3", 0) == 3.0);
  CHECK(retry_after_seconds(" 1.5 ", 0) == 1.5);
  CHECK_FALSE(retry_after_seconds("", 0).has_value());
  CHECK_FALSE(retry_after_seconds("soon", 0).has_value());
  // Wed, 21 Oct 2026 07:28:00 GMT is 1792567680 in Unix time.
  CHECK(retry_after_seconds("Wed, 21 Oct 2026 07:28:00 GMT", 1792567670.0) == 10.0);
  CHECK(retry_after_seconds("Wed, 21 Oct 2026 07:28:00 GMT", 1792567690.0) == 0.0);
  CHECK_FALSE(retry_after_seconds("Wed, 21 Oct 2026 07:28:00 CET", 0).has_value());
}

// The inputs the stub's embedding of row `row` came from: [length, first byte, 2].
static std::vector<float> stub_row(const std::string& text) {
  return {static_cast<float>(text.size()), text.empty() ? 0.0f : static_cast<float>(text[0]), 2.0f};
}

TEST_CASE("openai client: embeddings in batches, in parallel, rows back in input order") {
  Stub stub;
  stub.delay_s = 0.05;
  auto c = config_for(stub.base());
  c.max_in_flight = 3;
  OpenAiClient client(c);
  std::vector<std::string> inputs;
  for (int i = 0; i < 150; ++i) inputs.push_back(std::string(static_cast<std::size_t>(1 + i % 40), static_cast<char>('a' + i % 26)));
  const EmbeddingsResponse r = client.embeddings("embedder", inputs, 16);
  CHECK(r.dimension == 3);
  CHECK(r.model == "embedder");
  CHECK(r.requests == 10);
  CHECK(r.attempts == 10);
  REQUIRE(r.vectors.size() == 150 * 3);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i);
    CHECK(std::vector<float>(r.vectors.begin() + static_cast<std::ptrdiff_t>(3 * i),
                             r.vectors.begin() + static_cast<std::ptrdiff_t>(3 * i + 3)) == stub_row(inputs[i]));
  }
  std::int64_t chars = 0;
  for (const auto& s : inputs) chars += static_cast<std::int64_t>(s.size());
  CHECK(r.usage.prompt_tokens == chars);
  CHECK(client.stats().usage.prompt_tokens == chars);
  CHECK(stub.received_on("/v1/embeddings") == 10);
  CHECK(stub.max_in_flight >= 2);  // the batches went out side by side ...
  CHECK(stub.max_in_flight <= 3);  // ... at most max_in_flight of them
  std::size_t largest = 0;
  for (const auto& sent : stub.received) {
    const auto body = core::parse_json(sent.body).as_object();
    CHECK(body.at("model").as_string() == "embedder");
    CHECK(body.at("encoding_format").as_string() == "float");
    largest = std::max(largest, body.at("input").as_array().size());
  }
  CHECK(largest == 16);
  // No inputs, no request.
  CHECK(client.embeddings("embedder", {}).vectors.empty());
  CHECK(stub.received_on("/v1/embeddings") == 10);
  CHECK_THROWS_AS(client.embeddings("", inputs), core::InvalidArgument);
  CHECK_THROWS_AS(client.embeddings("embedder", inputs, 0), core::InvalidArgument);
}

TEST_CASE("openai client: embeddings retried on 5xx, refused on 4xx, checked for shape") {
  SECTION("a 500 is retried") {
    Stub stub([](int n, const HttpRequest&) -> std::optional<HttpResponse> {
      return n == 0 ? std::optional<HttpResponse>(status(500)) : std::nullopt;
    });
    OpenAiClient client(config_for(stub.base()));
    const auto r = client.embeddings("embedder", {"x", "yy"});
    CHECK(r.attempts == 2);
    CHECK(r.vectors == std::vector<float>{1, 'x', 2, 2, 'y', 2});
  }
  SECTION("a 400 fails at once, and no batch is sent after it") {
    Stub stub([](int, const HttpRequest&) -> std::optional<HttpResponse> {
      return status(400, R"({"error":{"message":"input is too long","type":"invalid_request_error"}})");
    });
    auto c = config_for(stub.base());
    c.max_in_flight = 1;
    OpenAiClient client(c);
    try {
      client.embeddings("embedder", std::vector<std::string>(10, "text"), 2);
      FAIL("no error");
    } catch (const OpenAiError& e) {
      CHECK(e.status == 400);
      CHECK(std::string(e.what()).find("input is too long") != std::string::npos);
    }
    CHECK(stub.received_on("/v1/embeddings") == 1);
  }
  SECTION("answers of the wrong shape are errors") {
    const auto bad = [](const std::string& body) {
      Stub stub([body](int, const HttpRequest&) -> std::optional<HttpResponse> { return HttpResponse::json(200, body); });
      OpenAiClient client(config_for(stub.base()));
      try {
        client.embeddings("embedder", {"a", "b"});
      } catch (const OpenAiError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK_THAT(bad(R"({"data":[{"index":0,"embedding":[1,2]}]})"), Catch::Matchers::ContainsSubstring("1 embeddings for 2 inputs"));
    CHECK_THAT(bad(R"({"data":[{"index":0,"embedding":[1,2]},{"index":0,"embedding":[1,2]}]})"),
               Catch::Matchers::ContainsSubstring("two embeddings for input 0"));
    CHECK_THAT(bad(R"({"data":[{"index":0,"embedding":[1,2]},{"index":1,"embedding":[1,2,3]}]})"),
               Catch::Matchers::ContainsSubstring("embeddings of 2 and 3 dimensions"));
    CHECK_THAT(bad(R"({"data":[{"index":0,"embedding":"AAAA"},{"index":1,"embedding":"AAAA"}]})"),
               Catch::Matchers::ContainsSubstring("not an array of numbers"));
    CHECK_THAT(bad(R"({"data":[{"index":5,"embedding":[1]},{"index":1,"embedding":[1]}]})"),
               Catch::Matchers::ContainsSubstring("not an input's index"));
  }
  SECTION("batches of different sizes are an error") {
    Stub stub([](int n, const HttpRequest& r) -> std::optional<HttpResponse> {
      if (n == 0) return std::nullopt;
      const auto count = core::parse_json(r.body).at("input").as_array().size();
      json::array data;
      for (std::size_t i = 0; i < count; ++i) data.push_back(json::object{{"index", i}, {"embedding", json::array{1.0, 2.0}}});
      return HttpResponse::json(200, json::serialize(json::object{{"data", std::move(data)}}));
    });
    auto c = config_for(stub.base());
    c.max_in_flight = 1;
    OpenAiClient client(c);
    CHECK_THROWS_WITH(client.embeddings("embedder", {"a", "b", "c"}, 2),
                      Catch::Matchers::ContainsSubstring("3 dimensions in one answer and 2 in another"));
  }
}

TEST_CASE("openai embedder: normalized rows, the dimension asked of the server once") {
  Stub stub;
  rag::OpenAiEmbedderConfig c;
  c.client = config_for(stub.base());
  c.model = "embedder";
  c.batch_size = 2;
  rag::OpenAiEmbedder embedder(c);
  CHECK(embedder.identity() == rag::EmbedderIdentity{"embedder", 3});
  CHECK(stub.received_on("/v1/embeddings") == 1);  // a one-word probe
  CHECK(embedder.identity().dimension == 3);
  CHECK(stub.received_on("/v1/embeddings") == 1);
  const auto v = embedder.embed({"ab", "c", "xyz"});
  REQUIRE(v.size() == 9);
  CHECK(stub.received_on("/v1/embeddings") == 3);
  for (std::size_t r = 0; r < 3; ++r) {
    double norm = 0;
    for (std::size_t d = 0; d < 3; ++d) norm += static_cast<double>(v[3 * r + d]) * v[3 * r + d];
    CHECK(norm == Catch::Approx(1.0).epsilon(1e-6));
  }
  const auto raw = stub_row("ab");  // [2, 'a', 2] scaled to unit length
  const double n = std::sqrt(4.0 + 97.0 * 97.0 + 4.0);
  CHECK(v[0] == Catch::Approx(raw[0] / n).epsilon(1e-6));
  CHECK(v[1] == Catch::Approx(raw[1] / n).epsilon(1e-6));
  rag::OpenAiEmbedderConfig empty = c;
  empty.model.clear();
  CHECK_THROWS_AS(rag::OpenAiEmbedder(empty), core::InvalidArgument);
}
