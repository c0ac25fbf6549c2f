// HTTP/1.1 value types shared by the server and the client (kbrl::net): URLs, requests,
// responses and the transport error. No Boost here: Beast and Asio stay inside src/net/*.cpp,
// the only translation units that pay for them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kbrl/core/error.hpp"

namespace kbrl::net {

// http://host:port/path?query or https://...; IPv6 hosts in brackets ("http://[::1]:8470/").
struct Url {
  std::string scheme = "http";  // "http" | "https"
  std::string host;             // without brackets for IPv6
  int port = 0;                 // parse() fills in 80 / 443 when the text has none
  std::string target = "/";     // path and query, always starting with '/'
  // Throws core::InvalidArgument naming the text (unknown scheme, no host, bad port).
  static Url parse(std::string_view text);
  std::string origin() const;       // scheme://host:port (IPv6 host in brackets)
  std::string host_header() const;  // what the Host header carries: host[:port] (default ports left out)
  std::string str() const { return origin() + target; }
};

// Header fields in the order they were sent; names compare case-insensitively.
using Headers = std::vector<std::pair<std::string, std::string>>;

// The first value of a header field, case-insensitive name; "" when absent.
std::string_view find_header(const Headers& headers, std::string_view name);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query as sent ("/v1/evaluations?x=1")
  Headers headers;
  std::string body;
  std::string remote_address;  // the peer's IP address (server side)
  std::string_view header(std::string_view name) const { return find_header(headers, name); }
  std::string_view path() const;  // target without the query
};

struct HttpResponse {
  int status = 200;
  Headers headers;
  std::string body;
  std::string_view header(std::string_view name) const { return find_header(headers, name); }
  static HttpResponse json(int status, std::string body);  // Content-Type: application/json
  static HttpResponse text(int status, std::string body, std::string content_type = "text/plain; charset=utf-8");
  // {"error": message} with Content-Type application/json: the error shape of kbrl's services.
  static HttpResponse error(int status, std::string_view message);
};

// Transport failures: refused, reset, timeout, TLS, malformed response, a response over the size
// limit. An HTTP status (4xx, 5xx) is not an error: it is a response.
struct HttpError : core::Error {
  using core::Error::Error;
  HttpError(const std::string& what, bool timed_out) : core::Error(what), timeout(timed_out) {}
  bool timeout = false;  // the connect or total timeout ran out
};

// The standard reason phrase of a status code ("Not Found"); "" for unknown codes.
std::string_view reason_phrase(int status);

}  // namespace kbrl::net
