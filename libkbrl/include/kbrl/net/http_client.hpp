// A blocking, thread-safe HTTP/1.1 client with a keep-alive connection pool per origin (so a
// request to a known server costs a round trip, not a handshake), connect and total timeouts,
// HTTPS with certificate verification, and streamed reading of chunked responses.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/net/http.hpp"

namespace kbrl::net {

struct HttpClientConfig {
  double connect_timeout_s = 5;  // resolving, connecting and the TLS handshake
  std::filesystem::path ca_file;  // PEM roots to trust; empty: the system's
  bool verify_tls = true;         // false: any certificate (tests, private networks)
  std::size_t max_response_bytes = 256ull << 20;  // a larger body is an HttpError
  int max_idle_per_origin = 64;                   // keep-alive connections kept for reuse
};

// Each call takes a kept-alive connection to the origin (or opens one) and returns it afterwards;
// calls on different threads run in parallel. A request that finds its reused connection closed
// by the server before any response byte (the keep-alive race) is sent once more on a new
// connection; nothing else is retried.
class HttpClient {
 public:
  explicit HttpClient(HttpClientConfig config = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // timeout_s bounds the whole call (connect included); 0: no limit. Throws HttpError (with
  // timeout = true when a timeout ran out); an HTTP error status is a response, not an error.
  HttpResponse request(const Url& url, std::string_view method, Headers headers = {}, std::string body = {},
                       double timeout_s = 0);
  // Same, but the body is handed to on_data as it arrives (chunked NDJSON / SSE), in pieces that
  // follow neither chunk nor line boundaries; on_data returns false to stop reading (the
  // connection is then closed). The returned response has status and headers; its body is empty.
  HttpResponse request_streaming(const Url& url, std::string_view method, Headers headers, std::string body,
                                 const std::function<bool(std::string_view)>& on_data, double timeout_s = 0);

  std::size_t connections_opened() const;  // for tests: keep-alive reuse is observable

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Every address a name resolves to (A and AAAA), as IP strings, without duplicates; throws
// HttpError naming the host.
std::vector<std::string> resolve_all(const std::string& host);

}  // namespace kbrl::net
