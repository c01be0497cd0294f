// Autocast with bfloat16 for one device type. tch exposes only the CUDA autocast
// switch, whose lower precision is float16 by default; the lab's --amp bf16 needs
// the dtype too, and CPU autocast as well.
#include "tchd_internal.h"

#include <ATen/autocast_mode.h>

extern "C" {

// Enters a bf16 autocast region on CPU (cuda = 0) or CUDA (cuda = 1). Returns whether
// autocast was enabled before (to hand to tchd_autocast_exit), or -1 with *err set.
int tchd_autocast_enter(int cuda, char** err) {
  int previous = 0;
  int rc = tchd::guarded(err, [&] {
    const c10::DeviceType type = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    previous = at::autocast::is_autocast_enabled(type) ? 1 : 0;
    at::autocast::set_autocast_dtype(type, at::kBFloat16);
    at::autocast::set_autocast_enabled(type, true);
    at::autocast::increment_nesting();
  });
  return rc == 0 ? previous : -1;
}

// Leaves the region: the cast cache is dropped when the outermost region ends.
void tchd_autocast_exit(int cuda, int previous) {
  try {
    const c10::DeviceType type = cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type, previous != 0);
  } catch (...) {
    // Nothing to report: these calls only flip thread-local flags.
  }
}

}  // extern "C"
