#include "common/completion_thread.h"

namespace tdist::detail {

thread_local const void* CompletionThreadScope::current_ = nullptr;

}  // namespace tdist::detail
