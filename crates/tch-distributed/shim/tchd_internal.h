// Internals shared by the shim's translation units (tchd.cpp, ddp.cpp,
// sync_batch_norm.cpp); not part of the C ABI:
// the handle structs behind the opaque C types, and the exception guard.
#pragma once
#include "tchd.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <ATen/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

struct tchd_store {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::TCPStore> tcp;  // same object, typed; null for other stores
};

struct tchd_group {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  // The backend itself, unwrapped (the group's may be a ProcessGroupWrapper around it).
  c10::intrusive_ptr<c10d::Backend> backend;
  // Where sends and receives go when the collectives are checked over Gloo: a Gloo
  // backend of their own, since Gloo counts them in the sequence number the check
  // compares, and a pipeline's ranks send and receive different numbers by design.
  // Null otherwise (the group's own backend serves them).
  c10::intrusive_ptr<c10d::Backend> p2p;
  std::chrono::milliseconds timeout;
};

struct tchd_work {
  c10::intrusive_ptr<c10d::Work> work;
};

namespace tchd {

inline char* dup_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, s.data(), s.size());
    out[s.size()] = '\0';
  }
  return out;
}

inline int fail(char** err, int status, const char* message) {
  if (err != nullptr) *err = dup_string(message == nullptr ? "unknown error" : message);
  return status;
}

// Runs `body`, turning every C++ exception into a status and a message.
// Most derived exception types first: DistNetworkError and DistStoreError are DistErrors.
template <typename F>
int guarded(char** err, F&& body) {
  try {
    body();
    return TCHD_OK;
  } catch (const c10::DistNetworkError& e) {
    return fail(err, TCHD_ERR_NETWORK, e.what_without_backtrace());
  } catch (const c10::DistStoreError& e) {
    return fail(err, TCHD_ERR_STORE, e.what_without_backtrace());
  } catch (const c10::DistBackendError& e) {
    return fail(err, TCHD_ERR_BACKEND, e.what_without_backtrace());
  } catch (const c10::DistError& e) {
    return fail(err, TCHD_ERR_BACKEND, e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    return fail(err, TCHD_ERR_VALUE, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return fail(err, TCHD_ERR_OTHER, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(err, TCHD_ERR_OTHER, e.what());
  } catch (...) {
    return fail(err, TCHD_ERR_OTHER, "unknown C++ exception");
  }
}

// Throws a Rust callback's error (its status, and the malloc'ed message it set, freed
// here) as a c10::Error: the backward pass that called it fails with it.
inline void throw_callback_error(int status, char* err, const char* what) {
  if (status == TCHD_OK) return;
  std::string message = err != nullptr ? err : std::string(what) + " failed";
  std::free(err);
  TORCH_CHECK(false, message);
}

// The `void*` tensors of the C ABI point at `at::Tensor`s (tch's C_tensor).
inline at::Tensor& tensor_ref(void* p) { return *static_cast<at::Tensor*>(p); }
inline const at::Tensor& tensor_ref(const void* p) { return *static_cast<const at::Tensor*>(p); }

inline c10d::ReduceOp to_reduce_op(int op) {
  switch (op) {
    case TCHD_SUM: return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case TCHD_AVG: return c10d::ReduceOp(c10d::ReduceOp::AVG);
    case TCHD_PRODUCT: return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case TCHD_MIN: return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case TCHD_MAX: return c10d::ReduceOp(c10d::ReduceOp::MAX);
    default: TORCH_CHECK_VALUE(false, "unknown reduce op ", op);
  }
}

inline tchd_work* wrap(c10::intrusive_ptr<c10d::Work> work) {
  auto* out = new tchd_work();
  out->work = std::move(work);
  return out;
}

}  // namespace tchd
