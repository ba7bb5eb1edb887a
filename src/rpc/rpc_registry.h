#pragma once

// The functions registered in this process (register_function, rpc.h).

#include <optional>
#include <string>

#include "tdist/rpc.h"

namespace tdist::rpc::detail {

/// The function registered as `name`, if any.
std::optional<Function> find_function(const std::string& name);

}  // namespace tdist::rpc::detail
