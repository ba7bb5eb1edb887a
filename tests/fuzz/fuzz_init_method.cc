// Fuzzes the init_method URL parser (tdist::parse_init_method,
// src/rendezvous/rendezvous.cc) with arbitrary strings. Asserts: it either
// raises DistInvalidArgument (nothing else) or returns a URL that a
// rendezvous can use (scheme env, tcp or file; a tcp host and a port in
// 1..65535; an absolute file path; rank >= 0 and world_size >= 1 when
// given); and that URL, written back out canonically, parses to the same
// parts.

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tdist/errors.h"
#include "tdist/rendezvous.h"

#define FUZZ_CHECK(cond)  \
  do {                    \
    if (!(cond)) abort(); \
  } while (0)

namespace {

// Percent-encodes all but unreserved characters and '/', so that the path
// comes back byte for byte.
std::string escape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string write_url(const tdist::InitMethodUrl& url) {
  std::string out = url.scheme + "://";
  if (url.scheme == "tcp") {
    // A host with a colon came from brackets, which it cannot contain.
    out += url.host.find(':') == std::string::npos ? url.host : "[" + url.host + "]";
    out += ":" + std::to_string(url.port);
  } else if (url.scheme == "file") {
    out += escape(url.path);
  }
  std::string query;
  if (url.rank >= 0) query += "&rank=" + std::to_string(url.rank);
  if (url.world_size >= 0) query += "&world_size=" + std::to_string(url.world_size);
  if (!query.empty()) out += "?" + query.substr(1);
  return out;
}

bool same(const tdist::InitMethodUrl& a, const tdist::InitMethodUrl& b) {
  return a.scheme == b.scheme && a.host == b.host && a.port == b.port && a.path == b.path &&
         a.rank == b.rank && a.world_size == b.world_size;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tdist::InitMethodUrl url;
  try {
    url = tdist::parse_init_method(text);
  } catch (const tdist::DistInvalidArgument&) {
    return 0;  // any other exception escapes: libFuzzer reports it as a crash
  }
  FUZZ_CHECK(url.scheme == "env" || url.scheme == "tcp" || url.scheme == "file");
  if (url.scheme == "tcp") FUZZ_CHECK(!url.host.empty() && url.port >= 1 && url.port <= 65535);
  if (url.scheme == "file") FUZZ_CHECK(!url.path.empty() && url.path.front() == '/');
  FUZZ_CHECK(url.rank >= -1 && (url.world_size == -1 || url.world_size >= 1));
  const std::string canonical = write_url(url);
  tdist::InitMethodUrl again;
  try {
    again = tdist::parse_init_method(canonical);
  } catch (const tdist::DistInvalidArgument& e) {
    std::fprintf(stderr, "'%s' parsed, but its canonical form '%s' does not: %s\n", text.c_str(),
                 canonical.c_str(), e.what());
    abort();
  }
  FUZZ_CHECK(same(url, again));
  return 0;
}
