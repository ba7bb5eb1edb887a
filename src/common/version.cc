#include "tdist/version.h"

namespace tdist {

const char* version() {
  return TDIST_VERSION_STRING;
}

}  // namespace tdist
