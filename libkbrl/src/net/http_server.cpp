// The HTTP/1.1 server (kbrl/net/http_server.hpp) on Boost.Beast and Boost.Asio.
//
// Each connection is a Session whose handlers all run on one strand, so its state needs no lock.
// Outgoing data is a queue of ready-made byte strings (a rendered response, a rendered header,
// framed chunks) written one after another; a ResponseStream posts chunks onto the session's
// strand from any thread. Sessions are owned by the server's registry while open (a streaming
// response may wait minutes for its next chunk with no I/O pending), and a ResponseStream only
// holds a weak reference plus the server-wide gate that stop() closes, so a stream that outlives
// the server never touches a destroyed io_context.
#include "kbrl/net/http_server.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

namespace kbrl::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

std::string_view reason_phrase(int status) {
  const auto r = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return r == "<unknown-status>" ? std::string_view() : std::string_view(r.data(), r.size());
}

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// Header names are tokens and values hold no CR, LF or NUL: anything else would let a handler
// (or a value it copied from a request) inject header lines.
bool valid_field(const std::string& name, const std::string& value) {
  if (name.empty()) return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == ':' || c == '(' || c == ')' || c == ',' || c == ';' || c == '"' || c == '/' ||
        c == '[' || c == ']' || c == '?' || c == '=' || c == '{' || c == '}' || c == '\\' || c == '<' || c == '>' ||
        c == '@') {
      return false;
    }
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

// Bytes of a message (or only its header, with `header_only`) as Beast's serializer writes them.
template <class Body>
std::string render(http::response<Body>& res, bool header_only) {
  http::response_serializer<Body> sr{res};
  sr.split(header_only);
  std::string out;
  beast::error_code ec;
  do {
    sr.next(ec, [&](beast::error_code& ec2, const auto& buffers) {
      ec2 = {};
      for (const auto b : beast::buffers_range_ref(buffers)) out.append(static_cast<const char*>(b.data()), b.size());
      sr.consume(beast::buffer_bytes(buffers));
    });
  } while (!ec && !(header_only ? sr.is_header_done() : sr.is_done()));
  if (ec) throw core::Error("cannot serialize an HTTP response: " + ec.message());
  return out;
}

// Closed by stop(): from then on no ResponseStream posts onto the server's io_context.
struct Gate {
  std::shared_mutex mu;
  bool open = true;
};

// The part of a Session that a ResponseStream and the server's registry see (the session itself
// is a template over plain and TLS streams).
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual void start() = 0;
  virtual void post_chunk(std::string chunk) = 0;
  virtual void post_finish() = 0;
  virtual void post_abort() = 0;
  virtual void close_now() = 0;  // only once the io threads are joined
  bool gone() const { return gone_.load(); }

 protected:
  std::atomic<bool> gone_{false};
};

class ResponseStreamImpl final : public ResponseStream {
 public:
  ResponseStreamImpl(std::shared_ptr<Gate> gate, std::weak_ptr<SessionBase> session)
      : gate_(std::move(gate)), session_(std::move(session)) {}
  ~ResponseStreamImpl() override {
    // Dropped without finish(): abort, so the client cannot take a truncated body for a whole one.
    std::lock_guard lock(mu_);
    if (!done_) post(&SessionBase::post_abort);
  }
  bool write(std::string chunk) override {
    std::lock_guard lock(mu_);
    if (done_) return false;
    if (chunk.empty()) return alive();
    return post([&](SessionBase& s) { s.post_chunk(std::move(chunk)); });
  }
  void finish() override {
    std::lock_guard lock(mu_);
    if (done_) return;
    done_ = true;
    post(&SessionBase::post_finish);
  }

 private:
  bool alive() {
    std::shared_lock gate_lock(gate_->mu);
    auto s = gate_->open ? session_.lock() : nullptr;
    return s && !s->gone();
  }
  // Under the stream's lock (so writes from several threads keep the order in which they return)
  // and the gate's (so stop() cannot close the io_context under us).
  template <class F>
  bool post(F&& f) {
    std::shared_lock gate_lock(gate_->mu);
    if (!gate_->open) return false;
    auto s = session_.lock();
    if (!s || s->gone()) return false;
    std::invoke(std::forward<F>(f), *s);
    return true;
  }

  std::mutex mu_;
  bool done_ = false;
  std::shared_ptr<Gate> gate_;
  std::weak_ptr<SessionBase> session_;
};

// The server's state; HttpServer::Impl is this under the public header's name (the sessions below
// cannot name a private nested type).
struct ServerState {
  HttpServerConfig config;
  Handler handler;
  std::optional<ssl::context> tls;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work{ioc.get_executor()};
  asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(ioc)};
  tcp::acceptor acceptor{accept_strand};
  asio::steady_timer accept_retry{accept_strand};
  int bound_port = 0;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::mutex sessions_mu;
  std::unordered_map<SessionBase*, std::shared_ptr<SessionBase>> sessions;
  std::vector<std::thread> threads;
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool close_requested = false;  // stop_accepting() posted the listener's close
  bool listener_closed = false;
  bool stopped = false;

  void listen();
  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void forget(SessionBase* s) {
    std::lock_guard lock(sessions_mu);
    sessions.erase(s);
  }
  bool on_io_thread() const;
};

thread_local const ServerState* tl_server = nullptr;

template <class Stream>
class Session final : public SessionBase {
 public:
  template <class... Args>
  Session(ServerState& server, std::string remote, Args&&... args)
      : server_(server), remote_(std::move(remote)), stream_(std::forward<Args>(args)...) {}

  void start() override {
    asio::dispatch(stream_.get_executor(), [self = self()] {
      if constexpr (kTls) {
        self->expire(self->server_.config.read_timeout_s);
        self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) return self->close();
          self->wait_request();
        });
      } else {
        self->wait_request();
      }
    });
  }

  void post_chunk(std::string chunk) override {
    asio::post(stream_.get_executor(), [self = self(), chunk = std::move(chunk)]() mutable {
      if (self->state_ != State::streaming || self->stream_finished_ || self->closed_) return;
      if (self->chunked_) {
        char size[32];
        std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
        chunk.insert(0, size);
        chunk += "\r\n";
      }
      self->queue(std::move(chunk));
    });
  }

  void post_finish() override {
    asio::post(stream_.get_executor(), [self = self()] {
      if (self->state_ != State::streaming || self->stream_finished_ || self->closed_) return;
      self->stream_finished_ = true;
      if (self->chunked_) {
        self->queue("0\r\n\r\n");
      } else if (!self->writing_) {
        self->on_drained();
      }
    });
  }

  void post_abort() override {
    asio::post(stream_.get_executor(), [self = self()] {
      if (self->state_ == State::streaming && !self->stream_finished_) self->close();
    });
  }

  void close_now() override {
    gone_ = true;
    closed_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().close(ignored);
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  enum class State { reading, responding, streaming, closing };

  std::shared_ptr<Session> self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  void expire(double s) { beast::get_lowest_layer(stream_).expires_after(seconds(s)); }

  // Waits for the first byte of the next request under the idle timeout; the read timeout starts
  // with that byte.
  void wait_request() {
    state_ = State::reading;
    if (closed_) return;
    if (buffer_.size() > 0) return read_header();
    expire(server_.config.idle_timeout_s);
    stream_.async_read_some(buffer_.prepare(8192), [self = self()](beast::error_code ec, std::size_t n) {
      self->buffer_.commit(n);
      if (ec) return self->close();
      self->read_header();
    });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(server_.config.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(static_cast<std::uint64_t>(server_.config.max_body_bytes));
    expire(server_.config.read_timeout_s);
    http::async_read_header(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, std::size_t) {
      if (ec) return self->on_read_error(ec);
      self->on_header();
    });
  }

  void on_header() {
    const auto length = parser_->content_length();
    if (length && *length > server_.config.max_body_bytes) {
      return send_error(413, "the request body of " + std::to_string(*length) + " bytes is over the limit of " +
                                 std::to_string(server_.config.max_body_bytes) + " bytes");
    }
    if (parser_->is_done()) return on_request();
    const auto expect = parser_->get()[http::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      return asio::async_write(stream_, asio::buffer(*cont), [self = self(), cont](beast::error_code ec, std::size_t) {
        if (ec) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_, [self = self()](beast::error_code ec, std::size_t) {
      if (ec) return self->on_read_error(ec);
      self->on_request();
    });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::header_limit) {
      return send_error(431, "the request header fields are over the limit of " +
                                 std::to_string(server_.config.max_header_bytes) + " bytes");
    }
    if (ec == http::error::body_limit) {
      return send_error(413, "the request body is over the limit of " + std::to_string(server_.config.max_body_bytes) +
                                 " bytes");
    }
    // A peer that went away (mid-message or between messages) or timed out gets no answer; what
    // Beast's parser rejected is malformed HTTP.
    if (ec.category() == beast::http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return send_error(400, "malformed HTTP request: " + ec.message());
    }
    close();
  }

  void on_request() {
    auto req = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    for (const auto& field : req) request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    request.body = std::move(req.body());
    request.remote_address = remote_;
    keep_alive_ = req.keep_alive();
    version_ = req.version();
    head_ = req.method() == http::verb::head;

    std::optional<HandlerResult> result;
    try {
      result.emplace(server_.handler(request));
    } catch (const std::exception& e) {
      result.emplace(HttpResponse::error(500, std::string("internal error: ") + e.what()));
    } catch (...) {
      result.emplace(HttpResponse::error(500, "internal error: unknown exception"));
    }
    if (auto* response = std::get_if<HttpResponse>(&*result)) return send_response(std::move(*response));
    start_stream(std::get<StreamingResponse>(std::move(*result)));
  }

  template <class Body>
  bool set_fields(http::response<Body>& res, int status, const Headers& headers) {
    if (status < 100 || status > 999) return false;
    res.result(static_cast<unsigned>(status));
    for (const auto& [name, value] : headers) {
      if (!valid_field(name, value)) return false;
      res.insert(name, value);
    }
    return true;
  }

  void send_response(HttpResponse r) {
    http::response<http::string_body> res{http::status::ok, version_};
    if (!set_fields(res, r.status, r.headers)) {
      r = HttpResponse::error(500, "internal error: the handler's response has an invalid status or header field");
      res = http::response<http::string_body>{http::status::ok, version_};
      set_fields(res, r.status, r.headers);
    }
    res.keep_alive(keep_alive_);
    if (head_) {
      res.content_length(r.body.size());
    } else {
      res.body() = std::move(r.body);
      res.prepare_payload();
    }
    state_ = State::responding;
    queue(render(res, false));
  }

  // Answers a request the server itself refused, then closes: after a broken or refused message
  // the rest of the byte stream cannot be trusted to start a new request.
  void send_error(int status, const std::string& message) {
    auto r = HttpResponse::error(status, message);
    http::response<http::string_body> res{http::status::ok, 11};
    set_fields(res, r.status, r.headers);
    res.keep_alive(false);
    res.body() = std::move(r.body);
    res.prepare_payload();
    parser_.reset();
    keep_alive_ = false;
    state_ = State::responding;
    queue(render(res, false));
  }

  void start_stream(StreamingResponse sr) {
    http::response<http::empty_body> res{http::status::ok, version_};
    if (!set_fields(res, sr.status, sr.headers)) {
      return send_response(
          HttpResponse::error(500, "internal error: the handler's response has an invalid status or header field"));
    }
    // HTTP/1.0 has no chunked encoding: the body then ends when the connection closes.
    chunked_ = version_ >= 11;
    if (chunked_) {
      res.chunked(true);
    } else {
      keep_alive_ = false;
    }
    res.keep_alive(keep_alive_);
    state_ = State::streaming;
    stream_finished_ = false;
    queue(render(res, true));
    auto stream = std::make_shared<ResponseStreamImpl>(server_.gate, weak_from_this());
    if (!sr.start) return stream->finish();
    try {
      sr.start(std::move(stream));
    } catch (...) {
      // The status line is out: the only honest signal left is an incomplete body.
      close();
    }
  }

  void queue(std::string bytes) {
    if (closed_) return;
    out_.push_back(std::move(bytes));
    write_next();
  }

  void write_next() {
    if (writing_ || out_.empty() || closed_) return;
    writing_ = true;
    expire(server_.config.read_timeout_s);
    asio::async_write(stream_, asio::buffer(out_.front()), [self = self()](beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->close();
      self->out_.pop_front();
      if (!self->out_.empty()) return self->write_next();
      self->on_drained();
    });
  }

  // Everything queued is written.
  void on_drained() {
    if (closed_) return;
    if (state_ == State::streaming && !stream_finished_) {
      // Waiting for the next chunk, which may take minutes: no timeout while nothing is pending.
      beast::get_lowest_layer(stream_).expires_never();
      return;
    }
    if (keep_alive_) return wait_request();
    graceful_close();
  }

  // Closes without losing the response just written: a socket closed with unread request bytes
  // sends a reset that can destroy the response in the client's buffers (an early 413, say), so
  // the plain side stops sending and drains what the client still sends, for a little while.
  void graceful_close() {
    state_ = State::closing;
    expire(2.0);
    if constexpr (kTls) {
      stream_.async_shutdown([self = self()](beast::error_code) { self->close(); });
    } else {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      drain();
    }
  }

  void drain() {
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(65536), [self = self()](beast::error_code ec, std::size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    gone_ = true;
    out_.clear();
    beast::error_code ignored;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(stream_).close();
    server_.forget(this);
  }

  ServerState& server_;
  std::string remote_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;
  State state_ = State::reading;
  bool writing_ = false;
  bool closed_ = false;
  bool keep_alive_ = true;
  bool head_ = false;
  bool chunked_ = true;
  bool stream_finished_ = false;
  unsigned version_ = 11;
};

}  // namespace

struct HttpServer::Impl : ServerState {};

bool ServerState::on_io_thread() const { return tl_server == this; }

void ServerState::listen() {
  const std::string where = config.host + ":" + std::to_string(config.port);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto endpoints = resolver.resolve(config.host, std::to_string(config.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) throw core::Error("cannot listen on " + where + ": " + (ec ? ec.message() : "no address"));
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw core::Error("cannot listen on " + where + ": " + ec.message());
  bound_port = acceptor.local_endpoint().port();
}

void ServerState::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void ServerState::on_accept(beast::error_code ec, tcp::socket socket) {
  if (!acceptor.is_open() || ec == asio::error::operation_aborted) return;
  if (ec) {
    // Out of file descriptors and the like: try again shortly instead of spinning.
    accept_retry.expires_after(std::chrono::milliseconds(50));
    accept_retry.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec && acceptor.is_open()) accept();
    });
    return;
  }
  beast::error_code addr_ec;
  const auto remote = socket.remote_endpoint(addr_ec);
  std::string address = addr_ec ? std::string() : remote.address().to_string();
  socket.set_option(tcp::no_delay(true), addr_ec);
  std::shared_ptr<SessionBase> session;
  if (tls) {
    session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(*this, std::move(address),
                                                                              std::move(socket), *tls);
  } else {
    session = std::make_shared<Session<beast::tcp_stream>>(*this, std::move(address), std::move(socket));
  }
  {
    std::lock_guard lock(sessions_mu);
    sessions.emplace(session.get(), session);
  }
  session->start();
  accept();
}

HttpServer::HttpServer(HttpServerConfig config, Handler handler) : impl_(std::make_unique<Impl>()) {
  if (!handler) throw core::InvalidArgument("HttpServer: the handler is empty");
  if (config.threads < 1) throw core::InvalidArgument("HttpServer: threads must be at least 1");
  if (config.port < 0 || config.port > 65535) throw core::InvalidArgument("HttpServer: port must be 0 to 65535");
  if (config.max_body_bytes == 0 || config.max_header_bytes == 0) {
    throw core::InvalidArgument("HttpServer: max_body_bytes and max_header_bytes must be positive");
  }
  if (!(config.read_timeout_s > 0) || !(config.idle_timeout_s > 0)) {
    throw core::InvalidArgument("HttpServer: read_timeout_s and idle_timeout_s must be positive");
  }
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    throw core::InvalidArgument("HttpServer: tls_cert and tls_key must be given together");
  }
  if (!config.tls_cert.empty()) {
    auto& ctx = impl_->tls.emplace(ssl::context::tls_server);
    ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                    ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    beast::error_code ec;
    ctx.use_certificate_chain_file(config.tls_cert.string(), ec);
    if (ec) throw core::Error("cannot load the TLS certificate " + config.tls_cert.string() + ": " + ec.message());
    ctx.use_private_key_file(config.tls_key.string(), ssl::context::pem, ec);
    if (ec) throw core::Error("cannot load the TLS key " + config.tls_key.string() + ": " + ec.message());
  }
  impl_->config = std::move(config);
  impl_->handler = std::move(handler);
  impl_->listen();
  impl_->accept();
  for (int i = 0; i < impl_->config.threads; ++i) {
    impl_->threads.emplace_back([impl = impl_.get()] {
      tl_server = impl;
      impl->ioc.run();
    });
  }
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::stop_accepting() {
  auto* impl = impl_.get();
  std::unique_lock lock(impl->stop_mu);
  if (impl->stopped) return;
  if (!impl->close_requested) {
    impl->close_requested = true;
    asio::post(impl->accept_strand, [impl] {
      beast::error_code ignored;
      impl->accept_retry.cancel();
      impl->acceptor.close(ignored);
      {
        std::lock_guard closed_lock(impl->stop_mu);
        impl->listener_closed = true;
      }
      impl->stop_cv.notify_all();
    });
  }
  // From a handler the listener closes as soon as the accept strand runs: waiting here could
  // deadlock a single io thread.
  if (impl->on_io_thread()) return;
  impl->stop_cv.wait(lock, [impl] { return impl->listener_closed; });
}

void HttpServer::stop() {
  if (impl_->on_io_thread()) throw core::Error("HttpServer::stop() called from a handler: it joins the io threads");
  stop_accepting();
  std::unique_lock lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  {
    std::unique_lock gate_lock(impl_->gate->mu);
    impl_->gate->open = false;
  }
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // No io thread runs now: the sessions can be closed from here.
  std::unordered_map<SessionBase*, std::shared_ptr<SessionBase>> sessions;
  {
    std::lock_guard sessions_lock(impl_->sessions_mu);
    sessions.swap(impl_->sessions);
  }
  for (auto& [ptr, session] : sessions) session->close_now();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

}  // namespace kbrl::net
