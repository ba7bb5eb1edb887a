#include "common/env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "tdist/errors.h"

namespace tdist {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): tdist never calls setenv
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  // Allow surrounding blanks, which shells and launchers sometimes leave.
  while (begin < end && std::isspace(static_cast<unsigned char>(*begin))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(end[-1]))) --end;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || ptr != end || begin == end) {
    throw DistInvalidArgument(what + " must be an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw DistInvalidArgument(what + " must be between " + std::to_string(min) + " and " +
                              std::to_string(max) + ", got " + std::to_string(value));
  }
  return value;
}

std::optional<int64_t> env_int(const char* name, int64_t min, int64_t max) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  return parse_int(*text, std::string("environment variable ") + name, min, max);
}

std::optional<bool> env_bool(const char* name) {
  auto text = env_string(name);
  if (!text) return std::nullopt;
  std::string lower = *text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  throw DistInvalidArgument(std::string("environment variable ") + name +
                            " must be a boolean (1/0, true/false, yes/no, on/off), got '" + *text + "'");
}

}  // namespace tdist
