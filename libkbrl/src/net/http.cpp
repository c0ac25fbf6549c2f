// URL parsing and the Beast-free helpers of the HTTP value types (kbrl/net/http.hpp).
#include "kbrl/net/http.hpp"

#include <boost/json.hpp>
#include <cctype>
#include <charconv>

namespace kbrl::net {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

[[noreturn]] void bad_url(std::string_view text, const std::string& why) {
  throw core::InvalidArgument("invalid URL '" + std::string(text) + "': " + why);
}

}  // namespace

Url Url::parse(std::string_view text) {
  Url url;
  const auto sep = text.find("://");
  if (sep == std::string_view::npos) bad_url(text, "expected scheme://host[:port][/path]");
  url.scheme.clear();
  for (char c : text.substr(0, sep)) url.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (url.scheme != "http" && url.scheme != "https") bad_url(text, "the scheme must be http or https");
  std::string_view rest = text.substr(sep + 3);
  const auto fragment = rest.find('#');
  if (fragment != std::string_view::npos) rest = rest.substr(0, fragment);
  const auto path_start = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_start);
  if (path_start == std::string_view::npos) {
    url.target = "/";
  } else {
    url.target = std::string(rest.substr(path_start));
    if (url.target.front() == '?') url.target.insert(url.target.begin(), '/');
  }
  for (char c : url.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) bad_url(text, "the path has a space or control character");
  }
  if (authority.find('@') != std::string_view::npos) bad_url(text, "user information (user@host) is not supported");
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) bad_url(text, "unterminated IPv6 address");
    url.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad_url(text, "expected ':port' after the IPv6 address");
      port_text = after.substr(1);
      if (port_text.empty()) bad_url(text, "empty port");
    }
  } else {
    const auto colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      port_text = authority.substr(colon + 1);
      authority = authority.substr(0, colon);
      if (port_text.empty()) bad_url(text, "empty port");
    }
    url.host = std::string(authority);
  }
  if (url.host.empty()) bad_url(text, "no host");
  for (char c : url.host) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '/' || c == '[' || c == ']') bad_url(text, "invalid character in the host");
  }
  if (!port_text.empty()) {
    int port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
      bad_url(text, "the port must be a number from 1 to 65535");
    }
    url.port = port;
  } else {
    url.port = url.scheme == "https" ? 443 : 80;
  }
  return url;
}

std::string Url::origin() const {
  const bool v6 = host.find(':') != std::string::npos;
  return scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Url::host_header() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string h = v6 ? "[" + host + "]" : host;
  const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  if (!default_port) h += ":" + std::to_string(port);
  return h;
}

std::string_view find_header(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return {};
}

std::string_view HttpRequest::path() const {
  std::string_view t = target;
  return t.substr(0, t.find('?'));
}

HttpResponse HttpResponse::json(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = std::move(body);
  return r;
}

HttpResponse HttpResponse::text(int status, std::string body, std::string content_type) {
  HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", std::move(content_type));
  r.body = std::move(body);
  return r;
}

HttpResponse HttpResponse::error(int status, std::string_view message) {
  boost::json::object o;
  o["error"] = message;
  return json(status, boost::json::serialize(o));
}

}  // namespace kbrl::net
