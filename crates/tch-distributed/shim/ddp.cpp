// DistributedDataParallel's engine: libtorch's own c10d::Reducer (bucketed gradient
// all-reduce overlapping the backward pass) and broadcast_coalesced. The Rust side
// (src/ddp.rs) drives it in the order PyTorch's DDP module does.
#include "tchd_internal.h"

#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

using namespace tchd;

namespace {

double unix_micros() {
  return std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The Reducer's own all-reduce, timed. Without a hook the Reducer multiplies each
// gradient by 1 / world size as it copies it into the bucket, then sums the bucket
// over the ranks (c10d's _AllReduceBySumCommHook); with a hook it copies the gradients
// unscaled, so this hook scales the bucket with the same multiplication (the same
// float32 products, bit for bit) before the same sum. (PyTorch's built-in
// AllReduceCommHook divides instead, which can differ in the last bit when the world
// size is not a power of two.)
class TimedAllReduceHook : public c10d::CommHookInterface {
 public:
  TimedAllReduceHook(c10::intrusive_ptr<c10d::ProcessGroup> pg, tchd_bucket_timing_fn report)
      : pg_(std::move(pg)), report_(report) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    const double start = unix_micros();
    at::Tensor& buffer = bucket.getBufferRef();
    buffer.mul_(1.0 / static_cast<double>(pg_->getSize()));
    std::vector<at::Tensor> tensors = {buffer};
    auto fut = pg_->allreduce(tensors)->getFuture();
    const size_t index = bucket.getIndex();
    const size_t params = bucket.getParameters().size();
    const int64_t bytes = buffer.numel() * static_cast<int64_t>(buffer.element_size());
    const tchd_bucket_timing_fn report = report_;
    // The Reducer waits for the returned future, so the bucket's end is recorded before
    // backward() can return.
    return fut->then(
        [=](c10::ivalue::Future& done) {
          if (!done.hasError()) report(index, params, bytes, start, unix_micros());
          return done.value();
        },
        fut->elementType());
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return c10d::detail::parseCppCommHookResult(result);
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  tchd_bucket_timing_fn report_;
};

}  // namespace

struct tchd_reducer {
  std::unique_ptr<c10d::Reducer> reducer;
  // The parameters it was made with, in that order: what bucket contents are told by.
  std::vector<at::Tensor> params;
};

extern "C" {

int tchd_grad_enabled(void) { return at::GradMode::is_enabled() ? 1 : 0; }

int tchd_broadcast_coalesced(tchd_group* group, void* const* tensors, size_t n, int64_t buffer_bytes,
                             int root, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ts;
    ts.reserve(n);
    for (size_t i = 0; i < n; ++i) ts.push_back(tensor_ref(tensors[i]));
    // The copy into flat buffers and back must not be recorded by autograd.
    at::NoGradGuard no_grad;
    c10d::broadcast_coalesced(group->pg, ts, static_cast<size_t>(buffer_bytes), root);
  });
}

int tchd_reducer_new(tchd_group* group, void* const* params, const char* const* names, size_t n,
                     int64_t bucket_cap_bytes, int64_t first_bucket_cap_bytes, int find_unused_parameters,
                     int gradient_as_bucket_view, tchd_reducer** out, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ps;
    std::unordered_map<size_t, std::string> param_names;
    for (size_t i = 0; i < n; ++i) {
      ps.push_back(tensor_ref(params[i]));
      TORCH_CHECK_VALUE(ps.back().requires_grad(), "parameter ", names[i], " does not require grad");
      param_names[i] = names[i];
    }
    std::vector<bool> expect_sparse(n, false);
    // As PyTorch's DDP: a small first bucket so communication starts early in the
    // backward pass, then buckets up to the cap; the list is reversed because
    // gradients become ready roughly in reverse order of the parameters.
    auto [bucket_indices, per_bucket_limits] = c10d::compute_bucket_assignment_by_size(
        ps, {static_cast<size_t>(first_bucket_cap_bytes), static_cast<size_t>(bucket_cap_bytes)},
        expect_sparse);
    std::reverse(bucket_indices.begin(), bucket_indices.end());
    std::vector<int64_t> limits(per_bucket_limits.rbegin(), per_bucket_limits.rend());
    auto r = std::make_unique<c10d::Reducer>(
        ps, std::move(bucket_indices), group->pg, expect_sparse, bucket_cap_bytes,
        find_unused_parameters != 0, gradient_as_bucket_view != 0, std::move(param_names),
        first_bucket_cap_bytes, /*skip_all_reduce_unused_params=*/false,
        /*use_python_reducer=*/false, std::move(limits));
    *out = new tchd_reducer{std::move(r), std::move(ps)};
  });
}

void tchd_reducer_free(tchd_reducer* reducer) {
  // ~Reducer may throw (noexcept(false)); nothing can be reported from a destructor
  // path, so swallow rather than abort the process.
  try {
    delete reducer;
  } catch (...) {
  }
}

int tchd_reducer_prepare_for_forward(tchd_reducer* reducer, char** err) {
  return guarded(err, [&] { reducer->reducer->prepare_for_forward(); });
}

int tchd_reducer_rebuild_buckets(tchd_reducer* reducer, int* rebuilt, char** err) {
  return guarded(err, [&] {
    // After the first iteration the Reducer re-buckets by the order gradients really
    // became ready (a broadcast from rank 0: every rank does it in the same forward).
    *rebuilt = reducer->reducer->rebuild_buckets() ? 1 : 0;
  });
}

int tchd_reducer_time_buckets(tchd_reducer* reducer, tchd_group* group, tchd_bucket_timing_fn report,
                              char** err) {
  return guarded(err, [&] {
    TORCH_CHECK_VALUE(report != nullptr, "no function to report the buckets' timing to");
    reducer->reducer->register_comm_hook(std::make_unique<TimedAllReduceHook>(group->pg, report));
  });
}

int tchd_verify_params(tchd_group* group, void* const* params, size_t n, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ps;
    ps.reserve(n);
    for (size_t i = 0; i < n; ++i) ps.push_back(tensor_ref(params[i]));
    try {
      // PyTorch DDP's own check: an all-gather of the parameter counts, then rank 0's
      // sizes and strides broadcast for each rank to compare with its own.
      c10d::verify_params_across_processes(group->pg, ps, std::nullopt);
    } catch (const c10::DistError&) {
      throw;
    } catch (const c10::Error& e) {
      // A mismatch, not a failure of the network: the caller's mistake.
      TORCH_CHECK_VALUE(false, e.what_without_backtrace());
    }
  });
}

int tchd_reducer_prepare_for_backward(tchd_reducer* reducer, void* const* outputs, size_t n, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> outs;
    for (size_t i = 0; i < n; ++i) outs.push_back(tensor_ref(outputs[i]));
    reducer->reducer->prepare_for_backward(outs);
  });
}

int tchd_reducer_bucket_sizes(tchd_reducer* reducer, int64_t* counts, size_t capacity, size_t* n_buckets,
                              char** err) {
  return guarded(err, [&] {
    auto buckets = reducer->reducer->get_grad_buckets(/*return_zero_tensors=*/true);
    *n_buckets = buckets.size();
    for (size_t i = 0; i < buckets.size() && i < capacity; ++i) {
      counts[i] = static_cast<int64_t>(buckets[i].getParameters().size());
    }
  });
}

int tchd_reducer_bucket_params(tchd_reducer* reducer, int64_t* indices, size_t capacity, size_t* n,
                               char** err) {
  return guarded(err, [&] {
    // A bucket's parameters are the very tensors the Reducer was given: match them by
    // identity.
    std::unordered_map<const c10::TensorImpl*, int64_t> index_of;
    for (size_t i = 0; i < reducer->params.size(); ++i) {
      index_of[reducer->params[i].unsafeGetTensorImpl()] = static_cast<int64_t>(i);
    }
    size_t written = 0;
    for (const auto& bucket : reducer->reducer->get_grad_buckets(/*return_zero_tensors=*/true)) {
      for (const auto& p : bucket.getParameters()) {
        auto found = index_of.find(p.unsafeGetTensorImpl());
        TORCH_CHECK(found != index_of.end(), "a DDP bucket holds a tensor that is not one of its parameters");
        if (written < capacity) indices[written] = found->second;
        ++written;
      }
    }
    *n = written;
  });
}

}  // extern "C"
