// An HTTP/1.1 server (keep-alive, optional TLS) that calls one Handler per request on a small
// pool of io threads. Limits (body and header size, read and idle timeouts) are enforced by the
// server itself, before the handler sees anything. A handler either returns a complete response
// or a StreamingResponse whose chunks other threads write later (NDJSON / SSE streams).
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <variant>

#include "kbrl/net/http.hpp"

namespace kbrl::net {

// The body of a streamed (chunked) response, written from any thread after the handler returned.
// Calls are thread-safe and ordered (the order in which write() calls return). Dropping the last
// reference without finish() aborts the response: the connection is closed, so the client sees
// an incomplete body rather than a complete one.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Queues one chunk (empty chunks are ignored); false once the client is known to be gone, the
  // stream finished or the server stopped. Never blocks on the network.
  virtual bool write(std::string chunk) = 0;
  virtual void finish() = 0;  // ends the body; the connection may then serve the next request
};

struct StreamingResponse {
  int status = 200;
  Headers headers;  // sent at once (with Transfer-Encoding: chunked), then the chunks
  std::function<void(std::shared_ptr<ResponseStream>)> start;  // called once, on a server thread
};

using HandlerResult = std::variant<HttpResponse, StreamingResponse>;
// Called on an io thread: be quick (hand long work to other threads and stream the answer).
// An exception becomes a 500 {"error": "..."}; the server keeps serving.
using Handler = std::function<HandlerResult(const HttpRequest&)>;

struct HttpServerConfig {
  std::string host = "0.0.0.0";
  int port = 8470;  // 0: an ephemeral port (see HttpServer::port())
  int threads = 2;  // io threads
  std::size_t max_body_bytes = 64ull << 20;    // larger: 413, answered by the server itself
  std::size_t max_header_bytes = 16ull << 10;  // request line + header fields; larger: 431
  std::filesystem::path tls_cert, tls_key;     // both set: HTTPS only (PEM files)
  double read_timeout_s = 60;   // from a request's first byte to its last, and each write
  double idle_timeout_s = 120;  // a kept-alive connection waiting for its next request
};

class HttpServer {
 public:
  // Binds and listens, then serves on config.threads io threads. Throws core::Error naming
  // host:port (address in use, bad host) or the TLS file; core::InvalidArgument for bad config.
  HttpServer(HttpServerConfig config, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;  // the bound port
  // The listener is closed (new connections are refused); open connections are still served,
  // kept-alive ones included. Safe to call more than once, from any thread.
  void stop_accepting();
  // Every connection closed, io threads joined; streams' write() returns false from now on, and
  // they may outlive the server. Not from a handler or stream callback (it joins their threads).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kbrl::net
