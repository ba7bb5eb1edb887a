#pragma once

// Reading configuration from environment variables. Every variable tdist
// reads is listed in docs/environment.md. Bad values are errors that name the
// variable and what was expected, never silently ignored.

#include <cstdint>
#include <optional>
#include <string>

namespace tdist {

/// The variable's value, or nullopt if it is unset or empty.
std::optional<std::string> env_string(const char* name);

/// The variable parsed as a base-10 integer in [min, max]; nullopt if unset or
/// empty. Raises DistInvalidArgument naming the variable on anything else.
std::optional<int64_t> env_int(const char* name, int64_t min = INT64_MIN, int64_t max = INT64_MAX);

/// Parses `text` as a base-10 integer in [min, max]; `what` names the source
/// in the error ("environment variable RANK", "query parameter rank").
int64_t parse_int(const std::string& text, const std::string& what, int64_t min = INT64_MIN,
                  int64_t max = INT64_MAX);

/// The variable as a boolean: 1/0, true/false, yes/no, on/off (any case).
std::optional<bool> env_bool(const char* name);

}  // namespace tdist
