#include "kbrl/eval/remote_evaluator.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "kbrl/core/error.hpp"
#include "kbrl/core/file.hpp"
#include "kbrl/core/json.hpp"
#include "kbrl/net/http.hpp"
#include "kbrl/net/http_client.hpp"

namespace kbrl::eval {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, s)));
}

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

bool is_url_entry(std::string_view e) {
  return e.starts_with("http://") || e.starts_with("https://") || e.starts_with("dns://");
}

// dns://name:port -> (name, port); throws InvalidArgument naming the entry.
std::pair<std::string, int> parse_dns(std::string_view entry) {
  const std::string_view rest = entry.substr(6);
  const auto colon = rest.rfind(':');
  int port = 0;
  if (colon != std::string_view::npos) {
    try {
      port = std::stoi(std::string(rest.substr(colon + 1)));
    } catch (const std::exception&) {
      port = 0;
    }
  }
  if (colon == std::string_view::npos || colon == 0 || port <= 0 || port > 65535)
    throw core::InvalidArgument(fmt::format("endpoint '{}': expected dns://NAME:PORT", entry));
  return {std::string(rest.substr(0, colon)), port};
}

// Checks an entry's form without resolving anything.
void validate_entry(const std::string& entry) {
  if (entry.starts_with("dns://")) {
    parse_dns(entry);
    return;
  }
  if (!entry.starts_with("http://") && !entry.starts_with("https://"))
    throw core::InvalidArgument(fmt::format("endpoint '{}': expected http://HOST:PORT, https://HOST:PORT or dns://NAME:PORT", entry));
  net::Url::parse(entry);
}

std::vector<std::string> read_endpoints_file(const fs::path& path) {
  std::vector<std::string> out;
  std::istringstream in(core::read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

RemoteEvaluatorConfig remote_evaluator_config(std::string_view endpoints) {
  RemoteEvaluatorConfig c;
  const std::string spec = trim(endpoints);
  if (spec.empty()) throw core::InvalidArgument("endpoints: empty (expected URL[,URL...], dns://NAME:PORT or a file)");
  if (!is_url_entry(spec)) {
    // A file, which may not exist yet: a Slurm fleet writes it as its servers come up.
    if (spec.find("://") != std::string::npos || spec.find(',') != std::string::npos)
      throw core::InvalidArgument(fmt::format(
          "endpoints '{}': expected http://HOST:PORT, https://HOST:PORT, dns://NAME:PORT (comma-separated) or a file",
          spec));
    c.endpoints_file = spec;
    return c;
  }
  std::size_t start = 0;
  while (start <= spec.size()) {
    auto comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string entry = trim(std::string_view(spec).substr(start, comma - start));
    if (!entry.empty()) {
      validate_entry(entry);
      c.endpoints.push_back(entry);
    }
    start = comma + 1;
  }
  return c;
}

// ---- state shared with the threads ------------------------------------------------------------

namespace {

struct Pending {
  std::uint64_t seq = 0;
  std::string caller_id;
  std::string wire_id;
  std::string problem_id;
  json::value request;  // as sent, with the wire id
  double timeout_s = 0;
  std::promise<core::EvalResult> promise;
  Clock::time_point not_before{};
  Clock::time_point unassigned_since{};
  int attempts = 0;
  std::string server;  // origin while a server has it
  std::string last_error;
};
using PendingPtr = std::shared_ptr<Pending>;

struct Server {
  net::Url url;
  bool present = true;   // in the latest endpoint list
  bool reachable = false;  // its capacity was read since its last failure
  int concurrency = 0;
  bool draining = false;
  int in_flight = 0;       // our requests on it
  std::size_t batch_limit = 0;  // learned from 429/413; 0: none
  Clock::time_point not_before{};
  int failures = 0;
  Clock::time_point next_probe{};
  std::string last_error;  // why it was last unreachable (for a request that gives up)
};

}  // namespace

struct RemoteEvaluator::State {
  RemoteEvaluatorConfig config;
  std::string token;
  net::HttpClient client;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::uint64_t, PendingPtr> pending;  // by submission number, oldest first
  std::set<std::string> wire_ids;               // of pending requests
  std::map<std::string, Server> servers;        // by origin
  std::uint64_t next_seq = 0;
  bool stopping = false;
  Stats stats;
  std::mt19937_64 rng{std::random_device{}()};
  std::string endpoint_error;  // last failure to read the endpoints, reported once

  State(RemoteEvaluatorConfig c, net::HttpClientConfig hc) : config(std::move(c)), client(hc) {}

  net::Headers headers() const {
    net::Headers h{{"Content-Type", "application/json"}, {"Accept", "application/x-ndjson, application/json"}};
    if (!token.empty()) h.emplace_back("Authorization", "Bearer " + token);
    return h;
  }

  // Exponential back-off with full jitter: spreads retries of many clients over time.
  Clock::duration backoff_locked(int attempt) {
    const double cap = std::min(config.backoff_max_s, config.backoff_initial_s * std::pow(2.0, std::min(attempt, 20)));
    std::uniform_real_distribution<double> d(0.5 * cap, cap);
    return seconds(d(rng));
  }

  // Hands the result to its caller unless it was delivered already. Called without `mu`.
  void deliver(const PendingPtr& p, core::EvalResult result, const std::string& origin) {
    {
      std::lock_guard lock(mu);
      auto it = pending.find(p->seq);
      if (it == pending.end() || it->second != p) return;  // delivered already: exactly once
      pending.erase(it);
      wire_ids.erase(p->wire_id);
      ++stats.delivered;
      if (!origin.empty()) ++stats.results_by_server[origin];
      cv.notify_all();
    }
    result.request_id = p->caller_id;
    if (result.problem_id.empty()) result.problem_id = p->problem_id;
    p->promise.set_value(std::move(result));
  }

  core::EvalResult internal_result(const Pending& p, std::string message) const {
    core::EvalResult r;
    r.request_id = p.caller_id;
    r.problem_id = p.problem_id;
    r.error_category = core::ErrorCategory::internal;
    r.error_message = std::move(message);
    return r;
  }

  // ---- endpoints and capacities --------------------------------------------------------------

  std::vector<net::Url> resolve_endpoints() {
    std::vector<std::string> entries = config.endpoints;
    if (!config.endpoints_file.empty()) {
      try {
        const auto more = read_endpoints_file(config.endpoints_file);
        entries.insert(entries.end(), more.begin(), more.end());
      } catch (const std::exception& e) {
        throw core::Error(fmt::format("endpoints file {}: {}", config.endpoints_file.string(), e.what()));
      }
    }
    std::vector<net::Url> urls;
    for (const auto& entry : entries) {
      if (entry.starts_with("dns://")) {
        const auto [name, port] = parse_dns(entry);
        for (const auto& address : net::resolve_all(name)) {
          net::Url u;
          u.scheme = "http";
          u.host = address;  // an IPv6 address without brackets: Url adds them
          u.port = port;
          urls.push_back(u);
        }
      } else {
        urls.push_back(net::Url::parse(entry));
      }
    }
    return urls;
  }

  void refresh_endpoints() {
    std::vector<net::Url> urls;
    try {
      urls = resolve_endpoints();
    } catch (const std::exception& e) {
      // Keep the servers we know: a file being rewritten or a DNS hiccup is no reason to stop.
      std::lock_guard lock(mu);
      if (endpoint_error != e.what()) std::cerr << "RemoteEvaluator: " << e.what() << "\n";
      endpoint_error = e.what();
      return;
    }
    std::lock_guard lock(mu);
    endpoint_error.clear();
    std::set<std::string> now;
    for (const auto& u : urls) {
      net::Url base = u;
      base.target = "/";
      const std::string origin = base.origin();
      now.insert(origin);
      auto [it, fresh] = servers.try_emplace(origin);
      if (fresh) it->second.url = base;
      it->second.present = true;
    }
    for (auto it = servers.begin(); it != servers.end();) {
      if (now.count(it->first) == 0) {
        it->second.present = false;
        if (it->second.in_flight == 0) {
          it = servers.erase(it);
          continue;
        }
      }
      ++it;
    }
    cv.notify_all();
  }

  // Asks each present server that is due for its capacity (new ones at once).
  void probe_capacities() {
    std::vector<std::pair<std::string, net::Url>> due;
    {
      std::lock_guard lock(mu);
      const auto now = Clock::now();
      for (auto& [origin, s] : servers)
        if (s.present && now >= s.next_probe && now >= s.not_before) due.emplace_back(origin, s.url);
    }
    for (const auto& [origin, base] : due) {
      net::Url u = base;
      u.target = "/v1/capacity";
      bool ok = false;
      int concurrency = 0;
      bool draining = false;
      std::string why;
      try {
        const auto r = client.request(u, "GET", headers(), {}, std::max(1.0, config.connect_timeout_s));
        if (r.status == 200) {
          const auto v = core::parse_json(r.body).as_object();
          concurrency = static_cast<int>(v.at("concurrency").to_number<std::int64_t>());
          draining = v.at("draining").as_bool();
          ok = concurrency > 0;
          if (!ok) why = "it advertises no concurrency";
        } else {
          why = fmt::format("GET /v1/capacity: HTTP {}: {}", r.status, error_text(r));
        }
      } catch (const std::exception& e) {
        why = e.what();
      }
      std::lock_guard lock(mu);
      auto it = servers.find(origin);
      if (it == servers.end()) continue;
      Server& s = it->second;
      s.next_probe = Clock::now() + seconds(config.refresh_s);
      if (ok) {
        s.reachable = true;
        s.batch_limit = 0;  // what a 429 or 413 taught holds until the server is asked again
        s.concurrency = concurrency;
        s.draining = draining;
        s.failures = 0;
      } else {
        s.reachable = false;
        s.last_error = why;
        ++s.failures;
        s.not_before = Clock::now() + backoff_locked(s.failures);
      }
      cv.notify_all();
    }
  }

  // ---- one batch on one server ----------------------------------------------------------------

  // Puts requests back in the pool (they were on `origin`), after `delay` each.
  // `accepted`: the server had taken them (its stream began), so the give-up clock starts again;
  // refused or unreachable, they keep the time they have been waiting for a server.
  void requeue_locked(const std::vector<PendingPtr>& batch, const std::string& origin, bool penalize,
                      const std::string& why, bool accepted = false) {
    const auto now = Clock::now();
    for (const auto& p : batch) {
      if (pending.count(p->seq) == 0 || p->server != origin) continue;
      p->server.clear();
      p->last_error = why;
      if (accepted) p->unassigned_since = now;
      if (penalize) {
        ++p->attempts;
        p->not_before = now + backoff_locked(p->attempts);
        ++stats.redispatched;
      }
    }
    cv.notify_all();
  }

  void release_server_locked(const std::string& origin, std::size_t n) {
    auto it = servers.find(origin);
    if (it == servers.end()) return;
    it->second.in_flight = std::max(0, it->second.in_flight - static_cast<int>(n));
  }

  void server_failed_locked(const std::string& origin, const std::string& why) {
    ++stats.server_failures;
    auto it = servers.find(origin);
    if (it == servers.end()) return;
    Server& s = it->second;
    ++s.failures;
    s.reachable = false;  // asked for its capacity again before it gets more work
    s.not_before = Clock::now() + backoff_locked(s.failures);
    (void)why;
  }

  static int retry_after(const net::HttpResponse& r) {
    try {
      const int s = std::stoi(std::string(r.header("Retry-After")));
      return std::clamp(s, 0, 300);
    } catch (const std::exception&) {
      return 1;
    }
  }

  static std::string error_text(const net::HttpResponse& r) {
    try {
      const auto v = core::parse_json(r.body);
      if (v.is_object() && v.as_object().contains("error") && v.as_object().at("error").is_string())
        return std::string(v.as_object().at("error").as_string());
    } catch (const std::exception&) {
    }
    return r.body.substr(0, 300);
  }

  void run_batch(const std::string& origin, net::Url url, std::vector<PendingPtr> batch) {
    url.target = "/v1/evaluations";
    json::array requests;
    double timeout = 60;
    std::map<std::string, PendingPtr> by_wire;
    for (const auto& p : batch) {
      requests.push_back(p->request);
      timeout += p->timeout_s;
      by_wire[p->wire_id] = p;
    }
    if (config.request_timeout_s > 0) timeout = config.request_timeout_s;
    std::string body = json::serialize(json::object{{"requests", std::move(requests)}, {"stream", true}});

    std::string buffer;
    std::string raw;  // the body's start: an error answer's message (request_streaming streams every body)
    std::size_t answered = 0;
    const auto on_line = [&](std::string_view line) {
      if (trim(line).empty()) return;
      core::EvalResult result;
      try {
        result = core::from_json<core::EvalResult>(line);
      } catch (const std::exception&) {
        return;  // not a result: its request stays unanswered and goes elsewhere
      }
      auto it = by_wire.find(result.request_id);
      if (it == by_wire.end()) return;
      PendingPtr p = it->second;
      by_wire.erase(it);
      ++answered;
      {
        std::lock_guard lock(mu);
        release_server_locked(origin, 1);
        p->server.clear();
      }
      deliver(p, std::move(result), origin);
    };
    const auto on_data = [&](std::string_view chunk) {
      if (raw.size() < 65536) raw.append(chunk.substr(0, 65536 - raw.size()));
      buffer.append(chunk);
      std::size_t start = 0;
      for (auto nl = buffer.find('\n', start); nl != std::string::npos; nl = buffer.find('\n', start)) {
        on_line(std::string_view(buffer).substr(start, nl - start));
        start = nl + 1;
      }
      buffer.erase(0, start);
      std::lock_guard lock(mu);
      return !stopping;
    };

    std::optional<net::HttpResponse> response;
    std::string failure;
    try {
      response = client.request_streaming(url, "POST", headers(), std::move(body), on_data, timeout);
      if (!buffer.empty()) on_line(buffer);  // a last line without its newline
    } catch (const net::HttpError& e) {
      failure = e.timeout ? fmt::format("{} timed out", origin) : fmt::format("{}: {}", origin, e.what());
    } catch (const std::exception& e) {
      failure = fmt::format("{}: {}", origin, e.what());
    }

    std::vector<PendingPtr> left;
    for (auto& [id, p] : by_wire) left.push_back(p);
    std::unique_lock lock(mu);
    release_server_locked(origin, left.size());
    if (left.empty()) {
      cv.notify_all();
      return;
    }
    if (!response) {
      server_failed_locked(origin, failure);
      requeue_locked(left, origin, true, failure, !raw.empty());
      return;
    }
    const int status = response->status;
    if (status != 200) response->body = raw;
    Server* s = servers.count(origin) ? &servers.at(origin) : nullptr;
    if (status == 200) {  // the stream ended before every result: the server went away mid-batch
      server_failed_locked(origin, "stream cut short");
      requeue_locked(left, origin, true, fmt::format("{}: the result stream ended early", origin), true);
      return;
    }
    if (status == 429) {
      ++stats.queue_full;
      if (s) {
        s->not_before = Clock::now() + std::chrono::seconds(retry_after(*response));
        try {  // a batch larger than the room it reports would never fit: send smaller ones
          const auto v = core::parse_json(response->body).as_object();
          const auto room = v.at("max_queue").to_number<std::int64_t>() + v.at("concurrency").to_number<std::int64_t>() -
                            v.at("queue_depth").to_number<std::int64_t>() - v.at("in_flight").to_number<std::int64_t>();
          if (room >= 1 && static_cast<std::size_t>(room) < left.size()) s->batch_limit = static_cast<std::size_t>(room);
        } catch (const std::exception&) {
        }
      }
      requeue_locked(left, origin, false, fmt::format("{}: queue full", origin));
      return;
    }
    if (status == 503) {
      ++stats.draining;
      if (s) {
        s->draining = true;
        s->not_before = Clock::now() + std::chrono::seconds(std::max(1, retry_after(*response)));
        s->next_probe = s->not_before;
      }
      requeue_locked(left, origin, false, fmt::format("{}: draining", origin));
      return;
    }
    if (status >= 500 || status == 408) {
      server_failed_locked(origin, fmt::format("HTTP {}", status));
      requeue_locked(left, origin, true, fmt::format("{}: HTTP {}: {}", origin, status, error_text(*response)));
      return;
    }
    if (status == 413 && left.size() > 1) {
      if (s) s->batch_limit = std::max<std::size_t>(1, left.size() / 2);
      requeue_locked(left, origin, false, fmt::format("{}: batch too large", origin));
      return;
    }
    // 400, 401, 404, 409, 413 of one request: the server refused the request itself, and another
    // server would too. The caller learns why from an `internal` result.
    const std::string message = fmt::format("kbrl-evald {} refused the request: HTTP {}: {}", origin, status,
                                            error_text(*response));
    lock.unlock();
    for (auto& p : left) deliver(p, internal_result(*p, message), "");
  }

  // ---- the dispatcher -------------------------------------------------------------------------

  // One pass: gives up on stale requests, sends batches to servers with room. Returns when to look again.
  Clock::time_point dispatch_locked(std::vector<PendingPtr>& give_up,
                                    std::vector<std::tuple<std::string, net::Url, std::vector<PendingPtr>>>& batches) {
    const auto now = Clock::now();
    auto wake = now + std::chrono::milliseconds(500);
    while (true) {
      // The least loaded server with room, by our share of its advertised concurrency.
      Server* best = nullptr;
      std::string best_origin;
      for (auto& [origin, s] : servers) {
        if (!s.present || !s.reachable || s.draining || s.concurrency <= 0 || s.in_flight >= s.concurrency) continue;
        if (now < s.not_before) {
          wake = std::min(wake, s.not_before);
          continue;
        }
        if (best == nullptr || static_cast<double>(s.in_flight) / s.concurrency <
                                   static_cast<double>(best->in_flight) / best->concurrency) {
          best = &s;
          best_origin = origin;
        }
      }
      if (best == nullptr) break;
      std::size_t room = static_cast<std::size_t>(best->concurrency - best->in_flight);
      room = std::min(room, static_cast<std::size_t>(std::max(1, config.max_batch)));
      if (best->batch_limit > 0) room = std::min(room, best->batch_limit);
      std::vector<PendingPtr> batch;
      for (auto& [seq, p] : pending) {
        if (batch.size() >= room) break;
        if (!p->server.empty()) continue;
        if (now < p->not_before) {
          wake = std::min(wake, p->not_before);
          continue;
        }
        p->server = best_origin;
        batch.push_back(p);
      }
      if (batch.empty()) break;
      best->in_flight += static_cast<int>(batch.size());
      ++stats.batches;
      batches.emplace_back(best_origin, best->url, std::move(batch));
    }
    // Waiting for room on a healthy server is not waiting for an answer: while one is usable
    // (reachable, not draining, not backing off), the give-up clock of the requests still here
    // stands still. It runs while every server is down, refusing (429, 503) or failing them.
    const bool usable = std::any_of(servers.begin(), servers.end(), [&](const auto& kv) {
      const Server& s = kv.second;
      return s.present && s.reachable && !s.draining && s.concurrency > 0 && now >= s.not_before;
    });
    for (auto& [seq, p] : pending) {
      if (!p->server.empty()) continue;
      if (usable && now >= p->not_before) p->unassigned_since = now;
      if (now - p->unassigned_since >= seconds(config.give_up_after_s)) give_up.push_back(p);
      else wake = std::min(wake, p->unassigned_since + seconds(config.give_up_after_s));
    }
    for (const auto& p : give_up) p->server = "<given up>";  // not dispatched again; the caller delivers it
    return wake;
  }
};

// ---- the evaluator ------------------------------------------------------------------------------
// Threads: the dispatcher and the refresher, joined by the destructor, and one detached thread per
// batch in flight, each holding the state alive until its HTTP call ends (a call blocked on a dead
// server must not hold up the destructor; its late results find nobody waiting and are dropped).

RemoteEvaluator::RemoteEvaluator(RemoteEvaluatorConfig config) {
  for (const auto& e : config.endpoints) validate_entry(e);
  if (config.endpoints.empty() && config.endpoints_file.empty())
    throw core::InvalidArgument("RemoteEvaluator: no endpoints (give URLs, dns://NAME:PORT or an endpoints file)");
  std::string token = config.token;
  if (token.empty() && !config.token_file.empty()) {
    try {
      const std::string text = core::read_file(config.token_file);
      token = trim(text.substr(0, text.find('\n')));
    } catch (const std::exception& e) {
      throw core::InvalidArgument(fmt::format("RemoteEvaluator: token file: {}", e.what()));
    }
  }
  if (token.empty() && !config.token_env.empty())
    if (const char* v = std::getenv(config.token_env.c_str())) token = trim(v);
  if (token.empty() && !config.token_env.empty())
    if (const char* file = std::getenv((config.token_env + "_FILE").c_str()); file != nullptr && *file != '\0') {
      try {
        const std::string text = core::read_file(file);
        token = trim(text.substr(0, text.find('\n')));
      } catch (const std::exception& e) {
        throw core::InvalidArgument(fmt::format("RemoteEvaluator: ${}_FILE: {}", config.token_env, e.what()));
      }
    }
  net::HttpClientConfig hc;
  hc.connect_timeout_s = config.connect_timeout_s;
  hc.ca_file = config.ca_file;
  hc.verify_tls = config.verify_tls;
  state_ = std::make_shared<State>(std::move(config), hc);
  state_->token = std::move(token);

  auto s = state_;
  refresher_ = std::thread([s] {
    auto next_endpoints = Clock::now();
    while (true) {
      if (Clock::now() >= next_endpoints) {
        s->refresh_endpoints();
        next_endpoints = Clock::now() + seconds(s->config.refresh_s);
      }
      s->probe_capacities();
      std::unique_lock lock(s->mu);
      // Waking often is cheap: a failed server is asked again as soon as its back-off ends.
      s->cv.wait_for(lock, std::min(seconds(s->config.refresh_s), seconds(0.25)), [&] { return s->stopping; });
      if (s->stopping) return;
    }
  });
  dispatcher_ = std::thread([s] {
    std::unique_lock lock(s->mu);
    while (!s->stopping) {
      std::vector<PendingPtr> give_up;
      std::vector<std::tuple<std::string, net::Url, std::vector<PendingPtr>>> batches;
      const auto wake = s->dispatch_locked(give_up, batches);
      if (!give_up.empty() || !batches.empty()) {
        lock.unlock();
        for (auto& [origin, url, batch] : batches)
          std::thread([s, origin = origin, url = url, batch = std::move(batch)]() mutable {
            s->run_batch(origin, url, std::move(batch));
          }).detach();
        for (auto& p : give_up) {
          {
            std::lock_guard l(s->mu);
            ++s->stats.gave_up;
          }
          std::string why = p->last_error;
          {
            std::lock_guard l(s->mu);
            for (const auto& [origin, server] : s->servers)
              if (!server.reachable && !server.last_error.empty())
                why += (why.empty() ? "" : "; ") + origin + ": " + server.last_error;
            if (s->servers.empty()) why += (why.empty() ? "" : "; ") + std::string("no endpoints");
          }
          s->deliver(p, s->internal_result(*p, fmt::format("no kbrl-evald server took this request for {:.0f} s{}",
                                                            s->config.give_up_after_s, why.empty() ? "" : " (" + why + ")")),
                     "");
        }
        lock.lock();
        continue;
      }
      s->cv.wait_until(lock, wake);
    }
  });
}

RemoteEvaluator::~RemoteEvaluator() {
  std::vector<PendingPtr> left;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    for (auto& [seq, p] : state_->pending) left.push_back(p);
    state_->cv.notify_all();
  }
  for (auto& p : left) state_->deliver(p, state_->internal_result(*p, "the RemoteEvaluator was destroyed before this request was answered"), "");
  if (dispatcher_.joinable()) dispatcher_.join();
  if (refresher_.joinable()) refresher_.join();
}

std::future<core::EvalResult> RemoteEvaluator::submit(core::EvalRequest request) {
  auto p = std::make_shared<Pending>();
  auto future = p->promise.get_future();
  p->caller_id = request.request_id;
  p->problem_id = request.problem.id;
  p->timeout_s = request.options.compile_timeout_s + request.options.run_timeout_s;
  State& s = *state_;
  std::lock_guard lock(s.mu);
  const std::uint64_t seq = s.next_seq++;
  ++s.stats.submitted;
  p->seq = seq;
  // The caller's id is the idempotency key the server journals; a generated one for a request
  // without an id, or whose id is already pending here (the server would take it for the same
  // request), so that a re-dispatch after a timeout is never evaluated twice.
  std::string wire = request.request_id;
  if (wire.empty() || s.wire_ids.count(wire) != 0) {
    std::uniform_int_distribution<std::uint64_t> d;
    wire = fmt::format("{}{}rq-{:016x}-{}", request.request_id, request.request_id.empty() ? "" : "#", d(s.rng), seq);
  }
  p->wire_id = wire;
  s.wire_ids.insert(wire);
  request.request_id = wire;
  p->request = json::value_from(request);
  p->unassigned_since = Clock::now();
  if (s.stopping) {
    s.wire_ids.erase(wire);
    p->promise.set_value(s.internal_result(*p, "the RemoteEvaluator is shutting down"));
    return future;
  }
  s.pending.emplace(seq, p);
  s.cv.notify_all();
  return future;
}

RemoteEvaluator::Stats RemoteEvaluator::stats() const {
  std::lock_guard lock(state_->mu);
  Stats s = state_->stats;
  s.connections_opened = state_->client.connections_opened();
  return s;
}

std::map<std::string, int> RemoteEvaluator::servers() const {
  std::lock_guard lock(state_->mu);
  std::map<std::string, int> out;
  for (const auto& [origin, s] : state_->servers)
    if (s.present) out[origin] = s.reachable ? s.concurrency : 0;
  return out;
}

}  // namespace kbrl::eval
