#include "common/completion_thread.h"

namespace tdist::detail {

thread_local bool CompletionThreadScope::active_ = false;

}  // namespace tdist::detail
