#include "rdzv_options.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace tdist::launcher {
namespace {

// A whole number, the whole text; nullopt otherwise.
std::optional<long long> whole_number(const std::string& text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(text);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::chrono::milliseconds conf_seconds(const std::string& key, const std::string& value) {
  try {
    size_t used = 0;
    const double seconds = std::stod(value, &used);
    if (used == value.size() && std::isfinite(seconds) && seconds >= 0 && seconds <= 86400 * 365) {
      return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
    }
  } catch (const std::exception&) {
  }
  throw std::invalid_argument("--rdzv-conf " + key + " must be a number of seconds, got '" + value + "'");
}

bool conf_bool(const std::string& key, const std::string& value) {
  // The spellings torch's RendezvousParameters.get_as_bool accepts.
  for (const char* yes : {"1", "true", "True", "TRUE", "t", "T", "yes", "y"}) {
    if (value == yes) return true;
  }
  for (const char* no : {"0", "false", "False", "FALSE", "f", "F", "no", "n"}) {
    if (value == no) return false;
  }
  throw std::invalid_argument("--rdzv-conf " + key + " must be true or false, got '" + value + "'");
}

}  // namespace

NodeRange parse_nnodes(const std::string& text) {
  const std::vector<std::string> parts = split(text, ':');
  const std::string expected = "--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got '" + text + "'";
  if (parts.size() > 2) throw std::invalid_argument(expected);
  std::optional<long long> min = whole_number(parts[0]);
  std::optional<long long> max = parts.size() == 2 ? whole_number(parts[1]) : min;
  if (!min || !max || *min < 1 || *max > (1 << 20)) throw std::invalid_argument(expected);
  if (*min > *max) {
    throw std::invalid_argument("--nnodes " + text + ": MIN (" + std::to_string(*min) +
                                ") is larger than MAX (" + std::to_string(*max) + ")");
  }
  return {static_cast<int>(*min), static_cast<int>(*max)};
}

RdzvBackend parse_rdzv_backend(const std::string& text) {
  if (text == "static") return RdzvBackend::kStatic;
  if (text == "c10d") return RdzvBackend::kC10d;
  throw std::invalid_argument("--rdzv-backend must be 'static' or 'c10d', got '" + text +
                              "' (etcd is not supported)");
}

Endpoint parse_endpoint(const std::string& raw) {
  const std::string text = trim(raw);
  Endpoint endpoint;
  std::string port;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) throw std::invalid_argument("--rdzv-endpoint '" + raw + "' lacks a ']'");
    endpoint.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') {
        throw std::invalid_argument("--rdzv-endpoint '" + raw + "': expected ':PORT' after ']'");
      }
      port = text.substr(close + 2);
      has_port = true;
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    endpoint.host = text;  // a bare IPv6 literal: no port (write [addr]:port for one)
  } else {
    const size_t colon = text.find(':');
    endpoint.host = text.substr(0, colon);
    if (colon != std::string::npos) {
      port = text.substr(colon + 1);
      has_port = true;
    }
  }
  if (endpoint.host.empty()) {
    throw std::invalid_argument("--rdzv-endpoint must be HOST[:PORT], got '" + raw + "' (no host)");
  }
  if (has_port) {
    std::optional<long long> number = whole_number(port);
    if (!number || *number < 1 || *number > 65535) {
      throw std::invalid_argument("--rdzv-endpoint '" + raw +
                                  "': the port must be a number from 1 to 65535, got '" + port + "'");
    }
    endpoint.port = static_cast<int>(*number);
  }
  return endpoint;
}

RdzvConf parse_rdzv_conf(const std::string& text) {
  RdzvConf conf;
  if (trim(text).empty()) return conf;
  for (const std::string& item : split(text, ',')) {
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      throw std::invalid_argument("--rdzv-conf takes KEY=VALUE pairs separated by commas, got '" + item +
                                  "'");
    }
    const std::string key = trim(item.substr(0, equals));
    const std::string value = trim(item.substr(equals + 1));
    if (key == "join_timeout" || key == "timeout") {
      conf.join_timeout = conf_seconds(key, value);
    } else if (key == "last_call_timeout") {
      conf.last_call_timeout = conf_seconds(key, value);
    } else if (key == "read_timeout") {
      conf.read_timeout = conf_seconds(key, value);
    } else if (key == "is_host") {
      conf.is_host = conf_bool(key, value);
    } else if (key == "close_timeout" || key == "keep_alive_interval" || key == "keep_alive_max_attempt" ||
               key == "heartbeat" || key == "store_type") {
      conf.ignored += (conf.ignored.empty() ? "" : ", ") + key;
    } else {
      throw std::invalid_argument(
          "--rdzv-conf: unknown key '" + key +
          "' (known: join_timeout, last_call_timeout, read_timeout, is_host, timeout; accepted and ignored: "
          "close_timeout, keep_alive_interval, keep_alive_max_attempt, heartbeat, store_type)");
    }
  }
  return conf;
}

}  // namespace tdist::launcher
