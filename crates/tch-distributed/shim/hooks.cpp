// Gradient hooks whose bodies are Rust's (src/grad_hooks.rs): PyTorch's
// `Tensor.register_hook` and `Tensor.register_post_accumulate_grad_hook`, each removable
// through a handle (PyTorch's RemovableHandle). FSDP's pre-backward hook is a
// register_hook that stays.
//
// A hook's state lives in a slot shared by the hook and its handle: removing empties
// the slot (the hook becomes a no-op and Rust's context is dropped), so a handle never
// needs the tensor, and removing while backward runs on another thread is safe (a call
// holds its own reference to the context until it returns).
#include "tchd_internal.h"

#include <memory>
#include <mutex>
#include <vector>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

using namespace tchd;

namespace tchd {

struct HookSlot {
  std::mutex mutex;
  std::shared_ptr<void> ctx;  // null once removed

  std::shared_ptr<void> live() {
    std::lock_guard<std::mutex> lock(mutex);
    return ctx;
  }

  void remove() {
    std::shared_ptr<void> gone;
    {
      std::lock_guard<std::mutex> lock(mutex);
      gone = std::move(ctx);
    }
    // `gone` drops Rust's context here, outside the lock.
  }
};

}  // namespace tchd

struct tchd_hook_handle {
  std::shared_ptr<HookSlot> slot;
};

namespace {

// libtorch keeps one post-accumulate-grad hook object per tensor (Python's is a dict of
// hooks): ours holds every hook registered through the shim, in registration order.
struct RustPostAccumulateGradHooks : public torch::autograd::PostAccumulateGradHook {
  struct Entry {
    tchd_post_accumulate_grad_hook_fn callback;
    std::shared_ptr<HookSlot> slot;
  };
  std::vector<Entry> entries;

  void operator()(const torch::autograd::Variable& param) override {
    // A copy: a hook may register another hook on this parameter while it runs.
    auto now = entries;
    for (auto& entry : now) {
      auto ctx = entry.slot->live();
      if (!ctx) continue;
      char* message = nullptr;
      int status = entry.callback(ctx.get(), new at::Tensor(param), &message);
      throw_callback_error(status, message, "post-accumulate-grad hook");
    }
  }
};

std::shared_ptr<HookSlot> new_slot(std::shared_ptr<void> ctx) {
  auto slot = std::make_shared<HookSlot>();
  slot->ctx = std::move(ctx);
  return slot;
}

}  // namespace

extern "C" {

int tchd_register_grad_hook(void* tensor, tchd_grad_hook_fn callback, tchd_ctx_drop_fn drop, void* ctx,
                            tchd_hook_handle** handle, char** err) {
  // The context is Rust's from here on, dropped with the hook (or now, on failure).
  std::shared_ptr<void> owned(ctx, drop);
  return guarded(err, [&] {
    auto& t = tensor_ref(tensor);
    TORCH_CHECK_VALUE(t.requires_grad(),
                      "register_hook: the tensor does not require grad, so no gradient will reach a hook "
                      "(a parameter of a VarStore requires grad; a tensor made with set_requires_grad(true) too)");
    auto slot = new_slot(owned);
    t.register_hook([callback, slot](const at::Tensor& grad) -> at::Tensor {
      auto ctx = slot->live();
      if (!ctx) return at::Tensor();  // removed: the gradient flows on unchanged
      void* replacement = nullptr;
      char* message = nullptr;
      // Two statements: in one call the order of the arguments' evaluation is
      // unspecified, and GCC read `message` (still null) before the callback set it.
      int status = callback(ctx.get(), new at::Tensor(grad), &replacement, &message);
      at::Tensor out;
      if (replacement != nullptr) {
        auto* r = static_cast<at::Tensor*>(replacement);
        out = std::move(*r);
        delete r;
      }
      throw_callback_error(status, message, "gradient hook");
      return out;  // undefined: unchanged
    });
    if (handle != nullptr) *handle = new tchd_hook_handle{slot};
  });
}

int tchd_register_post_accumulate_grad_hook(void* param, tchd_post_accumulate_grad_hook_fn callback,
                                            tchd_ctx_drop_fn drop, void* ctx, tchd_hook_handle** handle,
                                            char** err) {
  std::shared_ptr<void> owned(ctx, drop);
  return guarded(err, [&] {
    auto& p = tensor_ref(param);
    TORCH_CHECK_VALUE(p.requires_grad(),
                      "register_post_accumulate_grad_hook: the tensor does not require grad, so it never gets "
                      "a .grad to accumulate");
    TORCH_CHECK_VALUE(p.is_leaf(),
                      "register_post_accumulate_grad_hook: the tensor is the result of an operation, not a leaf: "
                      "only leaves (parameters) accumulate a .grad; use register_hook for other tensors");
    auto& installed = torch::autograd::impl::post_acc_grad_hooks(p);
    auto* ours = dynamic_cast<RustPostAccumulateGradHooks*>(installed.get());
    TORCH_CHECK(installed == nullptr || ours != nullptr,
                "register_post_accumulate_grad_hook: the tensor has post-accumulate-grad hooks from "
                "elsewhere (Python's?), which libtorch would replace");
    if (ours == nullptr) {
      auto fresh = std::make_unique<RustPostAccumulateGradHooks>();
      ours = fresh.get();
      torch::autograd::impl::set_post_acc_grad_hooks(p, std::move(fresh));
    }
    // Removed hooks go for good when the next one comes.
    std::erase_if(ours->entries, [](const auto& e) { return e.slot->live() == nullptr; });
    auto slot = new_slot(owned);
    ours->entries.push_back({callback, slot});
    if (handle != nullptr) *handle = new tchd_hook_handle{slot};
  });
}

void tchd_hook_remove(tchd_hook_handle* handle) {
  if (handle == nullptr) return;
  handle->slot->remove();
  delete handle;
}

}  // extern "C"
