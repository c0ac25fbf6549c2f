// The blocking HTTP/1.1 client (kbrl/net/http_client.hpp) on Boost.Beast and Boost.Asio.
//
// Each pooled connection owns a small io_context that the calling thread runs while it uses the
// connection: asynchronous operations give every step a deadline (Beast's tcp_stream expiry)
// without a background thread, and a connection is only ever used by one caller at a time.
#include "kbrl/net/http_client.hpp"

#include <poll.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <mutex>
#include <openssl/ssl.h>
#include <optional>
#include <unordered_map>

namespace kbrl::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::uint32_t kMaxResponseHeaderBytes = 256u << 10;

Clock::time_point deadline_after(double s) {
  if (!(s > 0)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Raised by exchange() when a connection closed before the first response byte: on a reused
// connection that is the keep-alive race, the one failure retried.
struct ClosedBeforeResponse {
  std::string message;
};

bool closed_by_peer(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_aborted ||
         ec == ssl::error::stream_truncated;
}

struct Connection {
  asio::io_context ioc{1};
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  template <class F>
  decltype(auto) visit(F&& f) {
    if (tls) return f(*tls);
    return f(*plain);
  }
  // Starts one asynchronous operation and runs this connection's io_context until it completes
  // (its expiry timer is part of the operation).
  template <class Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }
  void expire_at(Clock::time_point deadline) {
    if (deadline == Clock::time_point::max()) {
      tcp().expires_never();
    } else {
      tcp().expires_at(deadline);
    }
  }
  // A kept-alive plain connection that the server has closed (or that holds unexpected bytes)
  // reads as ready; one that is fine has nothing to read. (TLS connections may hold session
  // tickets, so they rely on the retry instead.)
  bool looks_closed() {
    if (tls) return false;
    pollfd p{};
    p.fd = plain->socket().native_handle();
    p.events = POLLIN;
    return ::poll(&p, 1, 0) != 0;
  }
};

}  // namespace

struct HttpClient::Impl {
  HttpClientConfig config;
  std::optional<ssl::context> tls;
  std::mutex tls_mu;
  std::mutex pool_mu;
  std::unordered_map<std::string, std::vector<std::unique_ptr<Connection>>> idle;
  std::atomic<std::size_t> opened{0};

  ssl::context& tls_context();
  std::unique_ptr<Connection> take(const std::string& origin);
  void give_back(const std::string& origin, std::unique_ptr<Connection> c);
  std::unique_ptr<Connection> open(const Url& url, Clock::time_point deadline, const std::string& what);
  HttpResponse call(const Url& url, std::string_view method, Headers headers, std::string body, double timeout_s,
                    const std::function<bool(std::string_view)>* on_data);
  HttpResponse exchange(Connection& c, http::request<http::string_body>& req, Clock::time_point deadline,
                        const std::function<bool(std::string_view)>* on_data, const std::string& what,
                        bool& reusable);
};

ssl::context& HttpClient::Impl::tls_context() {
  std::lock_guard lock(tls_mu);
  if (tls) return *tls;
  auto& ctx = tls.emplace(ssl::context::tls_client);
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  beast::error_code ec;
  if (config.verify_tls) {
    if (!config.ca_file.empty()) {
      ctx.load_verify_file(config.ca_file.string(), ec);
      if (ec) {
        tls.reset();
        throw HttpError("cannot load the CA file " + config.ca_file.string() + ": " + ec.message());
      }
    } else {
      ctx.set_default_verify_paths(ec);
    }
    ctx.set_verify_mode(ssl::verify_peer);
  } else {
    ctx.set_verify_mode(ssl::verify_none);
  }
  return ctx;
}

std::unique_ptr<Connection> HttpClient::Impl::take(const std::string& origin) {
  std::lock_guard lock(pool_mu);
  auto it = idle.find(origin);
  while (it != idle.end() && !it->second.empty()) {
    auto c = std::move(it->second.back());
    it->second.pop_back();
    if (!c->looks_closed()) return c;
  }
  return nullptr;
}

void HttpClient::Impl::give_back(const std::string& origin, std::unique_ptr<Connection> c) {
  std::lock_guard lock(pool_mu);
  auto& list = idle[origin];
  if (static_cast<int>(list.size()) < config.max_idle_per_origin) list.push_back(std::move(c));
}

std::unique_ptr<Connection> HttpClient::Impl::open(const Url& url, Clock::time_point deadline,
                                                   const std::string& what) {
  const auto connect_deadline = std::min(deadline, deadline_after(config.connect_timeout_s));
  auto c = std::make_unique<Connection>();
  // Resolve (getaddrinfo has no timeout of its own: a timer cancels the wait).
  tcp::resolver resolver(c->ioc);
  tcp::resolver::results_type endpoints;
  beast::error_code ec;
  bool timed_out = false;
  asio::steady_timer timer(c->ioc);
  if (connect_deadline != Clock::time_point::max()) {
    timer.expires_at(connect_deadline);
    timer.async_wait([&](beast::error_code wait_ec) {
      if (!wait_ec) {
        timed_out = true;
        resolver.cancel();
      }
    });
  }
  resolver.async_resolve(url.host, std::to_string(url.port), tcp::resolver::numeric_service,
                         [&](beast::error_code resolve_ec, tcp::resolver::results_type results) {
                           ec = resolve_ec;
                           endpoints = std::move(results);
                           timer.cancel();
                         });
  c->ioc.run();
  if (timed_out) throw HttpError(what + ": timed out resolving " + url.host, true);
  if (ec) throw HttpError(what + ": cannot resolve " + url.host + ": " + ec.message());

  c->plain.emplace(c->ioc);
  c->expire_at(connect_deadline);
  ec = c->run([&](auto handler) { c->plain->async_connect(endpoints, std::move(handler)); });
  if (ec == beast::error::timeout) throw HttpError(what + ": timed out connecting to " + url.origin(), true);
  if (ec) throw HttpError(what + ": cannot connect to " + url.origin() + ": " + ec.message());
  beast::error_code ignored;
  c->plain->socket().set_option(tcp::no_delay(true), ignored);
  ++opened;

  if (url.scheme == "https") {
    c->tls.emplace(std::move(*c->plain), tls_context());
    c->plain.reset();
    beast::error_code addr_ec;
    asio::ip::make_address(url.host, addr_ec);
    if (addr_ec && !SSL_set_tlsext_host_name(c->tls->native_handle(), url.host.c_str())) {
      throw HttpError(what + ": cannot set the TLS server name " + url.host);
    }
    if (config.verify_tls) c->tls->set_verify_callback(ssl::host_name_verification(url.host));
    c->expire_at(connect_deadline);
    ec = c->run([&](auto handler) { c->tls->async_handshake(ssl::stream_base::client, std::move(handler)); });
    if (ec == beast::error::timeout) throw HttpError(what + ": timed out in the TLS handshake with " + url.origin(), true);
    if (ec) throw HttpError(what + ": TLS handshake with " + url.origin() + " failed: " + ec.message());
  }
  return c;
}

HttpResponse HttpClient::Impl::exchange(Connection& c, http::request<http::string_body>& req,
                                        Clock::time_point deadline,
                                        const std::function<bool(std::string_view)>* on_data, const std::string& what,
                                        bool& reusable) {
  reusable = false;
  c.expire_at(deadline);
  c.buffer.consume(c.buffer.size());
  const beast::error_code write_ec =
      c.run([&](auto handler) { c.visit([&](auto& s) { http::async_write(s, req, std::move(handler)); }); });
  if (write_ec == beast::error::timeout) throw HttpError(what + ": timed out sending the request", true);
  // Even when the write failed the server may have answered first (a 413 before the whole body
  // was sent), so read what there is.
  auto fail = [&](beast::error_code ec, bool got_some) -> HttpError {
    if (ec == beast::error::timeout) return HttpError(what + ": timed out waiting for the response", true);
    if (!got_some && (closed_by_peer(ec) || write_ec)) {
      throw ClosedBeforeResponse{what + ": the connection closed before a response" +
                                 (write_ec ? " (" + write_ec.message() + ")" : std::string())};
    }
    if (ec == http::error::body_limit) {
      return HttpError(what + ": the response body is over max_response_bytes (" +
                       std::to_string(config.max_response_bytes) + ")");
    }
    return HttpError(what + ": reading the response failed: " + ec.message());
  };
  const bool head = req.method() == http::verb::head;
  HttpResponse out;
  if (!on_data) {
    http::response_parser<http::string_body> p;
    p.header_limit(kMaxResponseHeaderBytes);
    p.body_limit(static_cast<std::uint64_t>(config.max_response_bytes));
    if (head) p.skip(true);
    auto ec = c.run([&](auto handler) { c.visit([&](auto& s) { http::async_read(s, c.buffer, p, std::move(handler)); }); });
    if (ec) throw fail(ec, p.got_some());
    auto res = p.release();
    out.status = static_cast<int>(res.result_int());
    for (const auto& f : res) out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    out.body = std::move(res.body());
    reusable = !write_ec && res.keep_alive();
    return out;
  }
  http::response_parser<http::buffer_body> p;
  p.header_limit(kMaxResponseHeaderBytes);
  p.body_limit(static_cast<std::uint64_t>(config.max_response_bytes));
  if (head) p.skip(true);
  auto ec = c.run([&](auto handler) { c.visit([&](auto& s) { http::async_read_header(s, c.buffer, p, std::move(handler)); }); });
  if (ec) throw fail(ec, p.got_some());
  out.status = static_cast<int>(p.get().result_int());
  for (const auto& f : p.get()) out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  char buf[16384];
  while (!p.is_done()) {
    p.get().body().data = buf;
    p.get().body().size = sizeof buf;
    // read_some returns as soon as some body bytes were parsed, so each chunk is handed over when
    // it arrives rather than when the buffer is full.
    ec = c.run([&](auto handler) { c.visit([&](auto& s) { http::async_read_some(s, c.buffer, p, std::move(handler)); }); });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) throw fail(ec, true);
    const std::size_t n = sizeof buf - p.get().body().size;
    if (n > 0 && !(*on_data)(std::string_view(buf, n))) return out;  // stopped: not reusable
  }
  reusable = !write_ec && p.get().keep_alive();
  return out;
}

HttpResponse HttpClient::Impl::call(const Url& url, std::string_view method, Headers headers, std::string body,
                                    double timeout_s, const std::function<bool(std::string_view)>* on_data) {
  const std::string what = std::string(method) + " " + url.str();
  if (url.scheme != "http" && url.scheme != "https") throw core::InvalidArgument(what + ": the scheme must be http or https");
  if (method.empty()) throw core::InvalidArgument("HttpClient: empty method");
  const auto deadline = deadline_after(timeout_s);

  http::request<http::string_body> req;
  const auto verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) {
    req.method_string(method);
  } else {
    req.method(verb);
  }
  req.target(url.target);
  req.version(11);
  bool has_host = false;
  for (auto& [name, value] : headers) {
    for (char ch : name + value) {
      if (ch == '\r' || ch == '\n' || ch == '\0') {
        throw core::InvalidArgument(what + ": the header field '" + name + "' holds a line break or NUL");
      }
    }
    if (beast::iequals(name, "host")) has_host = true;
    req.insert(name, value);
  }
  if (!has_host) req.set(http::field::host, url.host_header());
  if (req.find(http::field::user_agent) == req.end()) req.set(http::field::user_agent, "kbrl");
  req.body() = std::move(body);
  req.prepare_payload();

  const std::string origin = url.origin();
  for (int attempt = 0;; ++attempt) {
    auto c = attempt == 0 ? take(origin) : nullptr;
    const bool reused = c != nullptr;
    if (!c) c = open(url, deadline, what);
    try {
      bool reusable = false;
      auto res = exchange(*c, req, deadline, on_data, what, reusable);
      if (reusable) give_back(origin, std::move(c));
      return res;
    } catch (const ClosedBeforeResponse& closed) {
      if (reused && attempt == 0) continue;  // the keep-alive race: once, on a new connection
      throw HttpError(closed.message);
    }
  }
}

HttpClient::HttpClient(HttpClientConfig config) : impl_(std::make_unique<Impl>()) {
  if (!(config.connect_timeout_s > 0)) throw core::InvalidArgument("HttpClient: connect_timeout_s must be positive");
  if (config.max_idle_per_origin < 0) throw core::InvalidArgument("HttpClient: max_idle_per_origin must be >= 0");
  impl_->config = std::move(config);
}

HttpClient::~HttpClient() = default;

HttpResponse HttpClient::request(const Url& url, std::string_view method, Headers headers, std::string body,
                                 double timeout_s) {
  return impl_->call(url, method, std::move(headers), std::move(body), timeout_s, nullptr);
}

HttpResponse HttpClient::request_streaming(const Url& url, std::string_view method, Headers headers, std::string body,
                                           const std::function<bool(std::string_view)>& on_data, double timeout_s) {
  if (!on_data) throw core::InvalidArgument("HttpClient::request_streaming: on_data is empty");
  return impl_->call(url, method, std::move(headers), std::move(body), timeout_s, &on_data);
}

std::size_t HttpClient::connections_opened() const { return impl_->opened.load(); }

std::vector<std::string> resolve_all(const std::string& host) {
  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto results = resolver.resolve(host, "0", tcp::resolver::numeric_service, ec);
  if (ec) throw HttpError("cannot resolve " + host + ": " + ec.message());
  std::vector<std::string> out;
  for (const auto& entry : results) {
    auto address = entry.endpoint().address().to_string();
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(std::move(address));
  }
  if (out.empty()) throw HttpError("cannot resolve " + host + ": no address");
  return out;
}

}  // namespace kbrl::net
