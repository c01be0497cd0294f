// FSDP2's unshard and reshard for tch (src/fsdp/ holds the logic and issues the
// collectives; these are the autograd and storage pieces Rust cannot reach).
//
// How a block's full parameters are freed after forward and brought back for backward
// without recomputing the forward, as PyTorch's FSDP2 does:
// - the module's parameter tensors stay the tensors autograd saves in forward; after
//   forward their storage is emptied (data pointer null, 0 bytes: the memory goes back
//   to the allocator), and before the block's backward it is allocated again and
//   all-gathered into. Writes go through `variable_data()`, which shares the storage but
//   not the version counter, so autograd's saved-tensor check still passes;
// - each training forward makes every full parameter the output of one node of this
//   file (FsdpReduceScatterBackward) whose inputs are the rank's shards. Autograd sums
//   every use's gradient of a full parameter before it calls the node, so the node runs
//   once per forward, after the block's whole backward: it hands the full gradients to
//   Rust (reduce-scatter, divide by the world size) and returns the shards' gradients,
//   which autograd accumulates into the shards' `.grad` as into any leaf. The full
//   gradients are never kept in a `.grad`.
#include "tchd_internal.h"

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/variable.h>

using namespace tchd;

namespace {

using torch::autograd::variable_list;

// A node whose backward is Rust's: FSDP's reduce-scatter of the full parameters'
// gradients into the shards', and tensor parallelism's region operators (the gradient
// all-reduced, or passed on as it is). Its name is the one autograd graphs show.
struct RustBackward : public torch::autograd::Node {
  std::string node_name;
  tchd_fsdp_backward_fn callback;
  std::shared_ptr<void> ctx;
  size_t n_shards;

  RustBackward(std::string node_name, tchd_fsdp_backward_fn callback, std::shared_ptr<void> ctx,
               size_t n_shards)
      : node_name(std::move(node_name)), callback(callback), ctx(std::move(ctx)), n_shards(n_shards) {}

  std::string name() const override { return node_name; }

  variable_list apply(variable_list&& grads) override {
    // Owned copies for Rust (tch frees them); NULL where a parameter got no gradient.
    std::vector<void*> in(grads.size(), nullptr);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) in[i] = new at::Tensor(grads[i]);
    }
    std::vector<void*> out(n_shards, nullptr);
    char* err = nullptr;
    int status = callback(ctx.get(), in.data(), in.size(), out.data(), &err);
    variable_list result(n_shards);
    for (size_t i = 0; i < n_shards; ++i) {
      if (out[i] != nullptr) {
        auto* t = static_cast<at::Tensor*>(out[i]);
        result[i] = std::move(*t);
        delete t;
      }
    }
    throw_callback_error(status, err, "FSDP callback");
    return result;
  }
};

}  // namespace

extern "C" {

int tchd_storage_nbytes(const void* tensor, int64_t* out, char** err) {
  return guarded(err, [&] {
    const auto& t = tensor_ref(tensor);
    *out = t.has_storage() ? static_cast<int64_t>(t.storage().nbytes()) : 0;
  });
}

int tchd_storage_free(void* tensor, char** err) {
  return guarded(err, [&] {
    auto& t = tensor_ref(tensor);
    auto* storage = t.storage().unsafeGetStorageImpl();
    // What `untyped_storage().resize_(0)` does, on any device: the allocator takes the
    // memory back; the tensor keeps its sizes and strides.
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
    storage->set_nbytes(0);
  });
}

int tchd_storage_alloc(void* tensor, char** err) {
  return guarded(err, [&] {
    auto& t = tensor_ref(tensor);
    auto* storage = t.storage().unsafeGetStorageImpl();
    size_t needed = at::detail::computeStorageNbytes(t.sizes(), t.strides(), t.dtype().itemsize(),
                                                     t.storage_offset());
    if (storage->nbytes() >= needed && storage->data() != nullptr) return;
    TORCH_CHECK(storage->allocator() != nullptr, "the parameter's storage has no allocator to allocate with");
    storage->set_data_ptr_noswap(storage->allocator()->allocate(needed));
    storage->set_nbytes(needed);
  });
}

int tchd_copy_unversioned(void* dst, const void* src, char** err) {
  return guarded(err, [&] {
    at::NoGradGuard no_grad;
    // Shares dst's storage but not its version counter: autograd's saved copy of dst
    // stays valid (FSDP2 uses _unsafe_preserve_version_counter for the same).
    auto data = tensor_ref(dst).variable_data();
    data.copy_(tensor_ref(src));
  });
}

int tchd_fsdp_attach(void* const* params, size_t n_params, void* const* shards, size_t n_shards,
                     tchd_fsdp_backward_fn callback, tchd_ctx_drop_fn drop, void* ctx, char** err) {
  return tchd_attach_backward(params, n_params, shards, n_shards, "FsdpReduceScatterBackward", callback,
                              drop, ctx, err);
}

int tchd_attach_backward(void* const* params, size_t n_params, void* const* shards, size_t n_shards,
                         const char* name, tchd_fsdp_backward_fn callback, tchd_ctx_drop_fn drop, void* ctx,
                         char** err) {
  // The context is Rust's from here on, dropped with the node (or now, on failure).
  std::shared_ptr<void> owned(ctx, drop);
  return guarded(err, [&] {
    std::vector<at::Tensor> shard_list;
    for (size_t i = 0; i < n_shards; ++i) {
      const auto& s = tensor_ref(shards[i]);
      TORCH_CHECK_VALUE(s.requires_grad(), name, ": input ", i, " does not require grad");
      shard_list.push_back(s);
    }
    auto node = std::shared_ptr<RustBackward>(new RustBackward(name, callback, owned, n_shards),
                                              torch::autograd::deleteNode);
    node->set_next_edges(torch::autograd::collect_next_edges(shard_list));
    for (size_t i = 0; i < n_params; ++i) {
      auto& p = tensor_ref(params[i]);
      uint32_t input_nr = node->add_input_metadata(p);
      // A leaf's own flag goes: from now on the parameter requires grad through the
      // node, as an interior tensor (autograd allows this flag change on leaves only).
      auto* meta = torch::autograd::impl::get_autograd_meta(p);
      if (meta != nullptr) meta->set_requires_grad(false, p.unsafeGetTensorImpl());
      torch::autograd::impl::set_gradient_edge(p, torch::autograd::Edge(node, input_nr));
    }
  });
}

}  // extern "C"
