// The net module end to end: a real HttpServer on 127.0.0.1 (port 0) and the real HttpClient,
// plus raw sockets where a test needs bytes no well-behaved client sends (malformed requests, a
// body announced but never sent, a server that closes a kept-alive connection).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "kbrl/net/http.hpp"
#include "kbrl/net/http_client.hpp"
#include "kbrl/net/http_server.hpp"

namespace fs = std::filesystem;
using namespace kbrl::net;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

HttpServerConfig loopback() {
  HttpServerConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  c.threads = 2;
  return c;
}

Url at(int port, const std::string& path, const std::string& scheme = "http") {
  return Url::parse(scheme + "://127.0.0.1:" + std::to_string(port) + path);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Handler of most tests: echoes method, path and body, or misbehaves on request.
HandlerResult echo(const HttpRequest& req) {
  if (req.path() == "/throw") throw std::runtime_error("the handler failed on purpose");
  if (req.path() == "/big") return HttpResponse::text(200, std::string(5000, 'x'));
  return HttpResponse::json(200, "{\"method\":\"" + req.method + "\",\"path\":\"" + std::string(req.path()) +
                                     "\",\"body\":\"" + req.body + "\",\"remote\":\"" + req.remote_address + "\"}");
}

// Raw TCP, for bytes the client never sends.
int connect_raw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const auto n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

// Everything the peer sends until it closes the connection or `limit` passes.
std::string read_until_closed(int fd, std::chrono::milliseconds limit) {
  std::string out;
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<long long>(left, 1))) <= 0) continue;
    char buf[4096];
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out + "<still open>";
}

std::string raw_exchange(int port, const std::string& bytes, std::chrono::milliseconds limit = 3000ms) {
  const int fd = connect_raw(port);
  send_all(fd, bytes);
  auto out = read_until_closed(fd, limit);
  ::close(fd);
  return out;
}

// A hand-written HTTP/1.1 peer: one script per accepted connection, in order; counts every
// connection it accepts, scripted or not.
class ScriptedServer {
 public:
  using Script = std::function<void(int fd)>;
  explicit ScriptedServer(std::vector<Script> scripts) : scripts_(std::move(scripts)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

  // Reads one request (header and Content-Length body); false when the peer closed first.
  static bool read_request(int fd) {
    std::string data;
    char buf[4096];
    while (true) {
      const auto end = data.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::size_t length = 0;
        const auto cl = data.find("Content-Length: ");
        if (cl != std::string::npos && cl < end) length = std::stoul(data.substr(cl + 16));
        if (data.size() >= end + 4 + length) return true;
      }
      const auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return false;
      data.append(buf, static_cast<std::size_t>(n));
    }
  }

 private:
  void serve() {
    std::size_t next = 0;
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      ++accepted_;
      if (next < scripts_.size()) scripts_[next++](fd);
      ::close(fd);
    }
  }

  std::vector<Script> scripts_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What a streaming client has received so far, for the test thread to wait on.
struct Received {
  std::mutex mu;
  std::condition_variable cv;
  std::string data;
  int pieces = 0;
  bool done = false;
  bool on_data(std::string_view piece) {
    std::lock_guard lock(mu);
    data.append(piece);
    ++pieces;
    cv.notify_all();
    return true;
  }
  bool wait_for(const std::string& text, std::chrono::milliseconds limit) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return data.find(text) != std::string::npos; });
  }
};

bool have_openssl_cli() { return std::system("openssl version > /dev/null 2>&1") == 0; }

// A self-signed certificate (EC P-256, quick to make) for `san` ("IP:127.0.0.1", "DNS:localhost").
void make_cert(const fs::path& dir, const std::string& san) {
  fs::create_directories(dir);
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=kbrl-test"
                          " -addext subjectAltName=" + san + " -keyout " + (dir / "key.pem").string() + " -out " +
                          (dir / "cert.pem").string() + " > " + (dir / "openssl.log").string() + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

fs::path scratch(const std::string& name) {
  const auto dir = fs::path(KBRL_TEST_TMP) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("Url::parse reads scheme, host, port and target, and names bad text", "[net]") {
  const auto u = Url::parse("HTTPS://example.org/v1/x?y=1#frag");
  CHECK(u.scheme == "https");
  CHECK(u.host == "example.org");
  CHECK(u.port == 443);
  CHECK(u.target == "/v1/x?y=1");
  CHECK(u.origin() == "https://example.org:443");
  CHECK(u.host_header() == "example.org");
  const auto v6 = Url::parse("http://[::1]:8470");
  CHECK(v6.host == "::1");
  CHECK(v6.port == 8470);
  CHECK(v6.target == "/");
  CHECK(v6.origin() == "http://[::1]:8470");
  CHECK(Url::parse("http://h:81?q").target == "/?q");
  for (const char* bad : {"ftp://h/", "h:80", "http://:80/", "http://h:0/", "http://h:99999/", "http://h:x/", "http://u@h/"}) {
    INFO(bad);
    try {
      Url::parse(bad);
      FAIL("no exception");
    } catch (const kbrl::core::InvalidArgument& e) {
      CHECK(std::string(e.what()).find(bad) != std::string::npos);
    }
  }
}

TEST_CASE("a JSON request makes the round trip and the connection is kept alive", "[net]") {
  HttpServer server(loopback(), echo);
  HttpClient client;
  for (int i = 0; i < 5; ++i) {
    const auto r = client.request(at(server.port(), "/v1/echo?i=" + std::to_string(i)), "POST",
                                  {{"Content-Type", "application/json"}}, "hello" + std::to_string(i));
    CHECK(r.status == 200);
    CHECK(r.header("content-type") == "application/json");
    CHECK(r.body == "{\"method\":\"POST\",\"path\":\"/v1/echo\",\"body\":\"hello" + std::to_string(i) +
                        "\",\"remote\":\"127.0.0.1\"}");
  }
  const auto g = client.request(at(server.port(), "/get"), "GET");
  CHECK(g.body.find("\"method\":\"GET\"") != std::string::npos);
  CHECK(client.connections_opened() == 1);
}

TEST_CASE("parallel requests from many threads all get their own answers", "[net]") {
  auto config = loopback();
  config.threads = 4;
  HttpServer server(config, echo);
  HttpClient client;
  constexpr int kThreads = 8, kEach = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string body = "t" + std::to_string(t) + "i" + std::to_string(i);
        const auto r = client.request(at(server.port(), "/p"), "POST", {}, body);
        if (r.status == 200 && r.body.find("\"body\":\"" + body + "\"") != std::string::npos) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == kThreads * kEach);
  CHECK(client.connections_opened() >= 1);
  CHECK(client.connections_opened() <= kThreads);
}

TEST_CASE("a streamed response reaches the client chunk by chunk, in order, before it ends", "[net]") {
  std::promise<std::shared_ptr<ResponseStream>> handed;
  auto handed_future = handed.get_future();
  std::mutex threads_mu;
  std::vector<std::thread> stream_threads;  // joined at the end: they never block
  HttpServer server(loopback(), [&](const HttpRequest& req) -> HandlerResult {
    if (req.path() == "/dropped") {
      return StreamingResponse{200, {}, [](std::shared_ptr<ResponseStream> s) { s->write("partial\n"); }};
    }
    if (req.path() == "/threads") {
      // Four threads writing at once: every line arrives, each thread's lines in its order.
      return StreamingResponse{200, {}, [&](std::shared_ptr<ResponseStream> s) {
                                 std::lock_guard lock(threads_mu);
                                 stream_threads.emplace_back([s] {
                                   std::vector<std::thread> writers;
                                   for (int w = 0; w < 4; ++w) {
                                     writers.emplace_back([s, w] {
                                       for (int i = 0; i < 50; ++i) s->write(std::to_string(w) + ":" + std::to_string(i) + "\n");
                                     });
                                   }
                                   for (auto& t : writers) t.join();
                                   s->finish();
                                 });
                               }};
    }
    return StreamingResponse{200, {{"Content-Type", "application/x-ndjson"}},
                             [&](std::shared_ptr<ResponseStream> s) { handed.set_value(std::move(s)); }};
  });
  HttpClient client;
  Received got;
  HttpResponse head;
  std::thread reader([&] {
    head = client.request_streaming(at(server.port(), "/stream"), "POST", {}, "{}",
                                    [&](std::string_view p) { return got.on_data(p); }, 10);
    std::lock_guard lock(got.mu);
    got.done = true;
  });
  REQUIRE(handed_future.wait_for(5s) == std::future_status::ready);
  auto stream = handed_future.get();
  REQUIRE(stream->write("{\"n\":1}\n"));
  // The client holds line 1 while the server has not written line 2 yet.
  REQUIRE(got.wait_for("{\"n\":1}\n", 5000ms));
  {
    std::lock_guard lock(got.mu);
    CHECK_FALSE(got.done);
    CHECK(got.data == "{\"n\":1}\n");
  }
  REQUIRE(stream->write("{\"n\":2}\n"));
  REQUIRE(got.wait_for("{\"n\":2}\n", 5000ms));
  stream->finish();
  CHECK_FALSE(stream->write("late\n"));
  reader.join();
  CHECK(head.status == 200);
  CHECK(head.header("Content-Type") == "application/x-ndjson");
  CHECK(head.header("Transfer-Encoding") == "chunked");
  CHECK(head.body.empty());
  CHECK(got.data == "{\"n\":1}\n{\"n\":2}\n");
  CHECK(got.pieces >= 2);

  // The finished stream left the connection reusable; request() reads a whole chunked body.
  const auto r = client.request(at(server.port(), "/threads"), "GET");
  CHECK(client.connections_opened() == 1);
  std::vector<int> next(4, 0);
  std::size_t lines = 0, pos = 0;
  bool in_order = true;
  while (pos < r.body.size()) {
    const auto nl = r.body.find('\n', pos);
    REQUIRE(nl != std::string::npos);
    const auto line = r.body.substr(pos, nl - pos);
    const int w = line[0] - '0';
    if (line != std::to_string(w) + ":" + std::to_string(next[static_cast<std::size_t>(w)]++)) in_order = false;
    ++lines;
    pos = nl + 1;
  }
  CHECK(lines == 200);
  CHECK(in_order);

  // A stream dropped without finish() is an incomplete body, never a complete one, and the client
  // learns it at once (not from its timeout).
  const auto t0 = Clock::now();
  try {
    client.request(at(server.port(), "/dropped"), "GET", {}, {}, 5);
    FAIL("a dropped stream read as a complete response");
  } catch (const HttpError& e) {
    CHECK_FALSE(e.timeout);
  }
  CHECK(seconds_since(t0) < 2);

  // on_data returning false stops reading: the call returns with the status.
  std::string first;
  const auto stopped = client.request_streaming(at(server.port(), "/threads"), "GET", {}, {}, [&](std::string_view p) {
    first = std::string(p);
    return false;
  });
  CHECK(stopped.status == 200);
  CHECK_FALSE(first.empty());
  std::lock_guard lock(threads_mu);
  for (auto& t : stream_threads) t.join();
}

TEST_CASE("the server answers 413, 431 and 400 itself, before the handler", "[net]") {
  auto config = loopback();
  config.max_body_bytes = 1024;
  config.max_header_bytes = 2048;
  config.read_timeout_s = 10;
  std::atomic<int> handled{0};
  HttpServer server(config, [&](const HttpRequest& r) {
    ++handled;
    return echo(r);
  });
  HttpClient client;

  const auto big = client.request(at(server.port(), "/x"), "POST", {}, std::string(4096, 'b'));
  CHECK(big.status == 413);
  CHECK(big.header("Content-Type") == "application/json");
  CHECK(big.body.find("{\"error\":") == 0);
  CHECK(big.body.find("1024") != std::string::npos);

  // The announced length alone is refused: the server does not wait for a body it will not read.
  const auto t0 = Clock::now();
  const auto announced = raw_exchange(server.port(), "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100000000\r\n\r\n");
  CHECK(announced.rfind("HTTP/1.1 413", 0) == 0);
  CHECK(seconds_since(t0) < 5);

  // A chunked body has no length up front: the limit stops it while reading.
  const auto chunked = raw_exchange(server.port(), "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" +
                                                       std::string(2048, 'c') + "\r\n0\r\n\r\n");
  CHECK(chunked.rfind("HTTP/1.1 413", 0) == 0);

  const auto headers = client.request(at(server.port(), "/x"), "GET", {{"X-Big", std::string(4000, 'h')}});
  CHECK(headers.status == 431);
  CHECK(headers.body.find("{\"error\":") == 0);

  const auto malformed = raw_exchange(server.port(), "GET / HTTP/1.1\r\nHost: h\r\nthis is no header\r\n\r\n");
  CHECK(malformed.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(malformed.find("{\"error\":\"malformed HTTP request") != std::string::npos);
  const auto garbage = raw_exchange(server.port(), "\x01\x02 nonsense\r\n\r\n");
  CHECK(garbage.rfind("HTTP/1.1 400", 0) == 0);

  CHECK(handled == 0);
  // Within the limits the same server serves as usual.
  CHECK(client.request(at(server.port(), "/x"), "POST", {}, std::string(1024, 'o')).status == 200);
  CHECK(handled == 1);
}

TEST_CASE("a handler exception is a 500 with its message, and the server keeps serving", "[net]") {
  HttpServer server(loopback(), echo);
  HttpClient client;
  const auto r = client.request(at(server.port(), "/throw"), "GET");
  CHECK(r.status == 500);
  CHECK(r.body == "{\"error\":\"internal error: the handler failed on purpose\"}");
  CHECK(client.request(at(server.port(), "/ok"), "GET").status == 200);
  CHECK(client.connections_opened() == 1);
}

TEST_CASE("client timeouts, refused connections and oversized responses are HttpErrors", "[net]") {
  std::vector<std::shared_ptr<ResponseStream>> held;
  std::mutex held_mu;
  HttpServer server(loopback(), [&](const HttpRequest& r) -> HandlerResult {
    if (r.path() != "/hang") return echo(r);
    return StreamingResponse{200, {}, [&](std::shared_ptr<ResponseStream> s) {
                               std::lock_guard lock(held_mu);
                               held.push_back(std::move(s));  // never written: the client waits
                             }};
  });
  HttpClientConfig cc;
  cc.max_response_bytes = 1000;
  HttpClient client(cc);

  const auto t0 = Clock::now();
  try {
    client.request(at(server.port(), "/hang"), "GET", {}, {}, 0.3);
    FAIL("no timeout");
  } catch (const HttpError& e) {
    CHECK(e.timeout);
  }
  CHECK(seconds_since(t0) < 3);
  try {
    client.request_streaming(at(server.port(), "/hang"), "GET", {}, {}, [](std::string_view) { return true; }, 0.3);
    FAIL("no timeout");
  } catch (const HttpError& e) {
    CHECK(e.timeout);
  }

  try {
    client.request(at(server.port(), "/big"), "GET");
    FAIL("no error");
  } catch (const HttpError& e) {
    CHECK_FALSE(e.timeout);
    CHECK(std::string(e.what()).find("max_response_bytes") != std::string::npos);
  }

  int closed_port = 0;
  {
    HttpServer gone(loopback(), echo);
    closed_port = gone.port();
  }
  try {
    client.request(at(closed_port, "/"), "GET", {}, {}, 2);
    FAIL("no error");
  } catch (const HttpError& e) {
    CHECK_FALSE(e.timeout);
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(closed_port)) != std::string::npos);
  }
}

TEST_CASE("only a reused connection closed before any response byte is retried, once", "[net]") {
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
  const std::string retried = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nretried";
  HttpClient client;
  SECTION("the keep-alive race: retried on a new connection") {
    ScriptedServer peer({[&](int fd) {
                           REQUIRE(ScriptedServer::read_request(fd));
                           send_all(fd, ok);
                           ScriptedServer::read_request(fd);  // then close without a byte
                         },
                         [&](int fd) {
                           REQUIRE(ScriptedServer::read_request(fd));
                           send_all(fd, retried);
                         }});
    CHECK(client.request(at(peer.port(), "/1"), "POST", {}, "a").body == "ok");
    CHECK(client.request(at(peer.port(), "/2"), "POST", {}, "b").body == "retried");
    CHECK(client.connections_opened() == 2);
    CHECK(peer.accepted() == 2);
  }
  SECTION("a new connection closed before the response: no retry") {
    ScriptedServer peer({[&](int fd) { ScriptedServer::read_request(fd); }});
    CHECK_THROWS_AS(client.request(at(peer.port(), "/"), "POST", {}, "a"), HttpError);
    std::this_thread::sleep_for(100ms);
    CHECK(peer.accepted() == 1);
  }
  SECTION("the retry closed too: an error, not a second retry") {
    ScriptedServer peer({[&](int fd) {
                           REQUIRE(ScriptedServer::read_request(fd));
                           send_all(fd, ok);
                           ScriptedServer::read_request(fd);
                         },
                         [&](int fd) { ScriptedServer::read_request(fd); }});
    CHECK(client.request(at(peer.port(), "/1"), "GET").body == "ok");
    CHECK_THROWS_AS(client.request(at(peer.port(), "/2"), "GET"), HttpError);
    std::this_thread::sleep_for(100ms);
    CHECK(peer.accepted() == 2);
  }
  SECTION("a reused connection closed after part of the response: no retry") {
    ScriptedServer peer({[&](int fd) {
      REQUIRE(ScriptedServer::read_request(fd));
      send_all(fd, ok);
      ScriptedServer::read_request(fd);
      send_all(fd, "HTTP/1.1 200 OK\r\nContent-Le");
    }});
    CHECK(client.request(at(peer.port(), "/1"), "GET").body == "ok");
    CHECK_THROWS_AS(client.request(at(peer.port(), "/2"), "GET"), HttpError);
    std::this_thread::sleep_for(100ms);
    CHECK(peer.accepted() == 1);
  }
}

TEST_CASE("the server closes connections that stay idle or send too slowly", "[net]") {
  auto config = loopback();
  config.idle_timeout_s = 0.3;
  config.read_timeout_s = 0.3;
  HttpServer server(config, echo);
  // Idle: a kept-alive connection is closed after idle_timeout_s; the client notices and opens
  // a new one.
  HttpClient client;
  CHECK(client.request(at(server.port(), "/a"), "GET").status == 200);
  std::this_thread::sleep_for(700ms);
  CHECK(client.request(at(server.port(), "/b"), "GET").status == 200);
  CHECK(client.connections_opened() == 2);
  // Slow: half a request header, then nothing; closed after read_timeout_s.
  const auto t0 = Clock::now();
  const auto got = raw_exchange(server.port(), "GET / HTTP/1.1\r\nHost:", 3000ms);
  CHECK(got.find("<still open>") == std::string::npos);
  CHECK(seconds_since(t0) < 2);
}

TEST_CASE("stop_accepting() refuses new connections and keeps serving open ones", "[net]") {
  std::promise<std::shared_ptr<ResponseStream>> handed;
  auto handed_future = handed.get_future();
  HttpServer server(loopback(), [&](const HttpRequest& req) -> HandlerResult {
    if (req.path() != "/stream") return echo(req);
    return StreamingResponse{200, {}, [&](std::shared_ptr<ResponseStream> s) { handed.set_value(std::move(s)); }};
  });
  HttpClient kept, streaming;
  CHECK(kept.request(at(server.port(), "/before"), "GET").status == 200);
  Received got;
  std::thread reader([&] {
    streaming.request_streaming(at(server.port(), "/stream"), "GET", {}, {}, [&](std::string_view p) { return got.on_data(p); }, 10);
  });
  REQUIRE(handed_future.wait_for(5s) == std::future_status::ready);
  auto stream = handed_future.get();
  server.stop_accepting();
  server.stop_accepting();  // again: nothing more happens
  HttpClient fresh;
  CHECK_THROWS_AS(fresh.request(at(server.port(), "/after"), "GET", {}, {}, 2), HttpError);
  // The kept-alive connection and the open stream are still served.
  CHECK(kept.request(at(server.port(), "/after"), "GET").status == 200);
  CHECK(kept.connections_opened() == 1);
  CHECK(stream->write("still here\n"));
  stream->finish();
  reader.join();
  CHECK(got.data == "still here\n");
}

TEST_CASE("stop() while a stream is being written from another thread", "[net]") {
  auto server = std::make_unique<HttpServer>(loopback(), echo);
  std::promise<std::shared_ptr<ResponseStream>> handed;
  auto handed_future = handed.get_future();
  server = nullptr;  // stop() with nothing open
  server = std::make_unique<HttpServer>(loopback(), [&](const HttpRequest&) -> HandlerResult {
    return StreamingResponse{200, {}, [&](std::shared_ptr<ResponseStream> s) { handed.set_value(std::move(s)); }};
  });
  const int port = server->port();
  HttpClient client;
  Received got;
  std::atomic<bool> client_failed{false}, client_timed_out{false};
  std::thread reader([&] {
    try {
      client.request_streaming(at(port, "/"), "GET", {}, {}, [&](std::string_view p) { return got.on_data(p); }, 10);
    } catch (const HttpError& e) {
      client_failed = true;
      client_timed_out = e.timeout;
    }
  });
  REQUIRE(handed_future.wait_for(5s) == std::future_status::ready);
  auto stream = handed_future.get();
  std::atomic<int> written{0};
  std::atomic<bool> writer_saw_false{false};
  std::thread writer([&, stream] {
    while (stream->write("tick\n")) {
      ++written;
      std::this_thread::sleep_for(2ms);
    }
    writer_saw_false = true;
  });
  REQUIRE(got.wait_for("tick\n", 5000ms));
  const auto t0 = Clock::now();
  server->stop();
  CHECK(seconds_since(t0) < 2);
  writer.join();
  reader.join();
  CHECK(writer_saw_false);
  CHECK(client_failed);  // the body never ended: an error, not a short success
  CHECK_FALSE(client_timed_out);  // the connection was closed, not left open
  CHECK(seconds_since(t0) < 5);
  server.reset();
  // The stream outlives the server: writes are refused, nothing touches freed memory.
  CHECK_FALSE(stream->write("after\n"));
  stream->finish();
  stream.reset();
}

TEST_CASE("HTTPS: a round trip with a trusted self-signed certificate, and verification failures", "[net]") {
  if (!have_openssl_cli()) KBRL_SKIP("the openssl command is not installed: no certificate to test with");
  const auto dir = scratch("net_tls");
  make_cert(dir / "ip", "IP:127.0.0.1");
  make_cert(dir / "dns", "DNS:localhost");
  auto config = loopback();
  config.tls_cert = dir / "ip" / "cert.pem";
  config.tls_key = dir / "ip" / "key.pem";
  HttpServer server(config, echo);

  HttpClientConfig trusted;
  trusted.ca_file = dir / "ip" / "cert.pem";
  HttpClient client(trusted);
  for (int i = 0; i < 3; ++i) {
    const auto r = client.request(at(server.port(), "/tls", "https"), "POST", {}, "secret");
    CHECK(r.status == 200);
    CHECK(r.body.find("\"body\":\"secret\"") != std::string::npos);
  }
  CHECK(client.connections_opened() == 1);

  // Plain HTTP to the TLS port is no request the server can read.
  HttpClient plain;
  CHECK_THROWS_AS(plain.request(at(server.port(), "/"), "GET", {}, {}, 3), HttpError);

  // Not trusted (system roots only): the handshake fails.
  HttpClient untrusted;
  try {
    untrusted.request(at(server.port(), "/", "https"), "GET", {}, {}, 3);
    FAIL("an untrusted certificate was accepted");
  } catch (const HttpError& e) {
    CHECK_FALSE(e.timeout);
    CHECK(std::string(e.what()).find("TLS") != std::string::npos);
  }
  // Trusted, but issued for another name: rejected too.
  HttpClientConfig other_name;
  other_name.ca_file = dir / "dns" / "cert.pem";
  auto config2 = loopback();
  config2.tls_cert = dir / "dns" / "cert.pem";
  config2.tls_key = dir / "dns" / "key.pem";
  HttpServer localhost_server(config2, echo);
  HttpClient wrong_name(other_name);
  CHECK_THROWS_AS(wrong_name.request(at(localhost_server.port(), "/", "https"), "GET", {}, {}, 3), HttpError);
  // Verification off: any certificate.
  HttpClientConfig off;
  off.verify_tls = false;
  HttpClient unverified(off);
  CHECK(unverified.request(at(localhost_server.port(), "/", "https"), "GET", {}, {}, 3).status == 200);
}

TEST_CASE("bad server configurations are refused with a message naming the field", "[net]") {
  auto c = loopback();
  c.threads = 0;
  CHECK_THROWS_AS(HttpServer(c, echo), kbrl::core::InvalidArgument);
  c = loopback();
  c.tls_cert = "/nonexistent/cert.pem";
  CHECK_THROWS_AS(HttpServer(c, echo), kbrl::core::InvalidArgument);  // no key
  c.tls_key = "/nonexistent/key.pem";
  try {
    HttpServer s(c, echo);
    FAIL("no error");
  } catch (const kbrl::core::Error& e) {
    CHECK(std::string(e.what()).find("/nonexistent/cert.pem") != std::string::npos);
  }
  HttpServer first(loopback(), echo);
  c = loopback();
  c.port = first.port();
  try {
    HttpServer second(c, echo);
    FAIL("two servers on one port");
  } catch (const kbrl::core::Error& e) {
    CHECK(std::string(e.what()).find("127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
  }
}

TEST_CASE("resolve_all lists every address of a name", "[net]") {
  CHECK(resolve_all("127.0.0.1") == std::vector<std::string>{"127.0.0.1"});
  const auto local = resolve_all("localhost");
  REQUIRE_FALSE(local.empty());
  bool loopback_seen = false;
  for (const auto& a : local) loopback_seen = loopback_seen || a == "127.0.0.1" || a == "::1";
  CHECK(loopback_seen);
}
