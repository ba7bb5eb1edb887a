#pragma once

// The version of the tdist library this program runs with.

namespace tdist {

/// "MAJOR.MINOR.PATCH", the CMake project's version.
const char* version();

}  // namespace tdist
