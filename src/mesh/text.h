#pragma once

// Text of the mesh layer's messages and plans.

#include <sstream>
#include <string>
#include <vector>

namespace tdist::mesh::text {

/// "[a, b, c]".
template <typename T>
std::string join(const std::vector<T>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

}  // namespace tdist::mesh::text
