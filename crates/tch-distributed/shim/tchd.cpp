// C ABI over libtorch's c10d: TCPStore, ProcessGroup with Gloo (and NCCL when built
// with CUDA headers) backends, and the collectives the lab uses. See tchd.h.
#include "tchd_internal.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupWrapper.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef TCHD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

using namespace tchd;

// A Gloo device as the group's options ask: an interface, a host name, or c10d's default.
static std::shared_ptr<::gloo::transport::Device> gloo_device(const char* hostname, const char* interface) {
  if (interface != nullptr) return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  if (hostname != nullptr) return c10d::ProcessGroupGloo::createDeviceForHostname(hostname);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// PyTorch's _create_process_group_wrapper: a helper Gloo backend on its own keys
// ("pg_wrapper:<group name>/", as Python names them), over which c10d's ProcessGroupWrapper runs a monitored
// barrier and compares the ranks' fingerprints (op, sequence number, dtypes, shapes)
// before handing each collective to `backend`.
static c10::intrusive_ptr<c10d::Backend> checked(const c10::intrusive_ptr<c10d::Backend>& backend,
                                                 const c10::intrusive_ptr<c10d::Store>& store,
                                                 const std::string& group_name, int rank, int size,
                                                 std::chrono::milliseconds timeout, const char* hostname,
                                                 const char* interface) {
  auto helper_store = c10::make_intrusive<c10d::PrefixStore>("pg_wrapper:" + group_name, store);
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  opts->devices.push_back(gloo_device(hostname, interface));
  auto helper = c10::make_intrusive<c10d::ProcessGroupGloo>(helper_store, rank, size, opts);
  return c10::make_intrusive<c10d::ProcessGroupWrapper>(backend, helper);
}

#ifdef TCHD_WITH_NCCL
// The NCCL backend of a group (for splitting new groups from it).
static c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl_backend(tchd_group* group) {
  auto nccl = c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupNCCL>(group->backend);
  TORCH_CHECK_VALUE(nccl, "the group to split from has no NCCL backend");
  return nccl;
}
#endif


extern "C" {

void tchd_free_string(char* s) { std::free(s); }
void tchd_free_bytes(uint8_t* p) { std::free(p); }

int tchd_has_nccl(void) {
#ifdef TCHD_WITH_NCCL
  return 1;
#else
  return 0;
#endif
}

int tchd_store_tcp(const char* host, uint16_t port, int is_server, int64_t num_workers,
                   int wait_workers, int64_t timeout_ms, int listen_fd, tchd_store** out,
                   char** err) {
  return guarded(err, [&] {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    // A server socket the caller bound to one address (not every interface).
    if (is_server != 0 && listen_fd >= 0) opts.masterListenFd = listen_fd;
    opts.isServer = is_server != 0;
    if (num_workers >= 0) opts.numWorkers = static_cast<std::size_t>(num_workers);
    opts.waitWorkers = wait_workers != 0;
    opts.timeout = std::chrono::milliseconds(timeout_ms);
    auto tcp = c10::make_intrusive<c10d::TCPStore>(std::string(host), opts);
    auto* s = new tchd_store();
    s->tcp = tcp;
    s->store = tcp;
    *out = s;
  });
}

void tchd_store_free(tchd_store* store) { delete store; }

int tchd_store_set(tchd_store* store, const char* key, const uint8_t* value, size_t len,
                   char** err) {
  return guarded(err, [&] {
    store->store->set(std::string(key), std::vector<uint8_t>(value, value + len));
  });
}

int tchd_store_get(tchd_store* store, const char* key, uint8_t** value, size_t* len,
                   char** err) {
  return guarded(err, [&] {
    auto bytes = store->store->get(std::string(key));
    auto* buf = static_cast<uint8_t*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
    if (buf == nullptr) throw std::bad_alloc();
    if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());
    *value = buf;
    *len = bytes.size();
  });
}

int tchd_store_add(tchd_store* store, const char* key, int64_t delta, int64_t* out,
                   char** err) {
  return guarded(err, [&] { *out = store->store->add(std::string(key), delta); });
}

int tchd_store_compare_set(tchd_store* store, const char* key, const uint8_t* expected, size_t expected_len,
                           const uint8_t* desired, size_t desired_len, uint8_t** value, size_t* len,
                           char** err) {
  return guarded(err, [&] {
    auto bytes = store->store->compareSet(std::string(key), std::vector<uint8_t>(expected, expected + expected_len),
                                          std::vector<uint8_t>(desired, desired + desired_len));
    auto* buf = static_cast<uint8_t*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
    if (buf == nullptr) throw std::bad_alloc();
    if (!bytes.empty()) std::memcpy(buf, bytes.data(), bytes.size());
    *value = buf;
    *len = bytes.size();
  });
}

int tchd_store_port(tchd_store* store, uint16_t* out, char** err) {
  return guarded(err, [&] {
    TORCH_CHECK_VALUE(store->tcp, "not a TCP store");
    *out = store->tcp->getPort();
  });
}

int tchd_group_new(tchd_store* store, const char* prefix, const char* group_name,
                   const uint64_t* global_ranks, size_t n_global_ranks, int backend, int rank, int size,
                   const char* gloo_hostname, const char* gloo_interface, int64_t timeout_ms,
                   int bound_cuda_device, tchd_group* split_from, int split_color, int check_collectives,
                   tchd_group** out, char** err) {
  return guarded(err, [&] {
    TORCH_CHECK_VALUE(size >= 1, "world size must be at least 1, got ", size);
    TORCH_CHECK_VALUE(rank >= 0 && rank < size, "rank ", rank, " is outside 0..", size);
    auto timeout = std::chrono::milliseconds(timeout_ms);
    // PyTorch's layout (_new_process_group_helper): the group's store is prefixed with
    // "<group name>/", its backend's with "<device>/" on top, so a Python rank and this
    // one meet on the same keys.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), store->store);
    auto pg = c10::make_intrusive<c10d::ProcessGroup>(prefixed, rank, size);
    std::vector<uint64_t> ranks(global_ranks, global_ranks + n_global_ranks);
    // init_process_group(device_id=...): the group, and through setBackend each backend,
    // knows its rank's GPU, so NCCL need not guess it from the global rank.
    std::optional<at::Device> bound;
    if (bound_cuda_device >= 0) {
      bound = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(bound_cuda_device));
      pg->setBoundDeviceId(bound);
    }
    c10::intrusive_ptr<c10d::Backend> made;
    c10::intrusive_ptr<c10d::Backend> p2p;
    if (backend == TCHD_GLOO) {
      auto backend_store = c10::make_intrusive<c10d::PrefixStore>("cpu/", prefixed);
      auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
      opts->devices.push_back(gloo_device(gloo_hostname, gloo_interface));
      opts->group_name = group_name;
      opts->global_ranks_in_group = ranks;
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(backend_store, rank, size, opts);
      // Rank 0 publishes the group's starting sequence number, the others wait for it.
      gloo->setSequenceNumberForGroup();
      c10::intrusive_ptr<c10d::Backend> serving = gloo;
      if (check_collectives != 0) {
        serving = checked(gloo, backend_store, group_name, rank, size, timeout, gloo_hostname, gloo_interface);
        auto p2p_store = c10::make_intrusive<c10d::PrefixStore>("tchd_p2p:" + std::string(group_name), backend_store);
        auto p2p_opts = c10d::ProcessGroupGloo::Options::create(timeout);
        p2p_opts->devices.push_back(gloo_device(gloo_hostname, gloo_interface));
        p2p = c10::make_intrusive<c10d::ProcessGroupGloo>(p2p_store, rank, size, p2p_opts);
      }
      // As PyTorch does for backend="gloo": the same backend serves CPU and CUDA tensors.
      pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
      pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, serving);
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, serving);
      made = gloo;
    } else if (backend == TCHD_NCCL) {
#ifdef TCHD_WITH_NCCL
      auto backend_store = c10::make_intrusive<c10d::PrefixStore>("cuda/", prefixed);
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->is_high_priority_stream = false;
      opts->timeout = timeout;
      opts->group_name = group_name;
      opts->global_ranks_in_group = ranks;
      // As Python's new_group under a default group bound to a GPU: the communicator is
      // split from the default group's (ncclCommSplit, one call on every parent rank).
      if (split_from != nullptr) {
        auto parent = nccl_backend(split_from);
        if (parent->supportsSplitting()) {
          opts->split_from = parent;
          opts->split_color = split_color;
        }
      }
      auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(backend_store, rank, size, opts);
      nccl->setSequenceNumberForGroup();
      c10::intrusive_ptr<c10d::Backend> serving = nccl;
      if (check_collectives != 0) {
        serving = checked(nccl, backend_store, group_name, rank, size, timeout, gloo_hostname, gloo_interface);
      }
      pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, serving);
      made = nccl;
#else
      TORCH_CHECK_VALUE(false, "this build of tch-distributed has no NCCL (no CUDA headers at build time)");
#endif
    } else {
      TORCH_CHECK_VALUE(false, "unknown backend ", backend);
    }
    pg->setGroupName(group_name);
    pg->setGroupDesc(ranks.empty() ? "default_pg" : "undefined");
    // As init_process_group(device_id=...): a bound group connects its communicator now.
    if (bound.has_value() && made->supportsSplitting()) {
      made->eagerConnectSingleDevice(*bound);
    }
    auto* g = new tchd_group();
    g->pg = pg;
    g->backend = made;
    g->p2p = p2p;
    g->timeout = timeout;
    *out = g;
  });
}

int tchd_group_nocolor_split(tchd_group* parent, int cuda_device, char** err) {
  return guarded(err, [&] {
#ifdef TCHD_WITH_NCCL
    auto nccl = nccl_backend(parent);
    if (nccl->supportsSplitting()) {
      nccl->performNocolorSplit(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)));
    }
#else
    (void)parent;
    (void)cuda_device;
    TORCH_CHECK_VALUE(false, "this build of tch-distributed has no NCCL (no CUDA headers at build time)");
#endif
  });
}

void tchd_group_free(tchd_group* group) { delete group; }

int tchd_group_bound_device(tchd_group* group) {
  auto bound = group->pg->getBoundDeviceId();
  return bound.has_value() ? static_cast<int>(bound->index()) : -1;
}

int tchd_group_shutdown(tchd_group* group, char** err) {
  return guarded(err, [&] { group->pg->shutdown(); });
}

int tchd_all_reduce(tchd_group* group, void* const* tensors, size_t n, int op, tchd_work** out,
                    char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ts;
    for (size_t i = 0; i < n; ++i) ts.push_back(tensor_ref(tensors[i]));
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_reduce_op(op);
    *out = wrap(group->pg->allreduce(ts, opts));
  });
}

int tchd_reduce(tchd_group* group, void* tensor, int root, int op, tchd_work** out, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ts{tensor_ref(tensor)};
    c10d::ReduceOptions opts;
    opts.reduceOp = to_reduce_op(op);
    opts.rootRank = root;
    *out = wrap(group->pg->reduce(ts, opts));
  });
}

int tchd_broadcast(tchd_group* group, void* tensor, int root, tchd_work** out, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ts{tensor_ref(tensor)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    *out = wrap(group->pg->broadcast(ts, opts));
  });
}

int tchd_all_gather(tchd_group* group, void* const* outputs, size_t n, void* input,
                    tchd_work** out, char** err) {
  return guarded(err, [&] {
    std::vector<std::vector<at::Tensor>> outs(1);
    for (size_t i = 0; i < n; ++i) outs[0].push_back(tensor_ref(outputs[i]));
    std::vector<at::Tensor> ins{tensor_ref(input)};
    *out = wrap(group->pg->allgather(outs, ins));
  });
}

int tchd_all_gather_into_tensor(tchd_group* group, void* output, void* input, tchd_work** out, char** err) {
  return guarded(err, [&] {
    // torch.distributed.all_gather_into_tensor is c10d's _allgather_base.
    *out = wrap(group->pg->_allgather_base(tensor_ref(output), tensor_ref(input)));
  });
}

int tchd_reduce_scatter_tensor(tchd_group* group, void* output, void* input, int op, tchd_work** out,
                               char** err) {
  return guarded(err, [&] {
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = to_reduce_op(op);
    // torch.distributed.reduce_scatter_tensor is c10d's _reduce_scatter_base.
    *out = wrap(group->pg->_reduce_scatter_base(tensor_ref(output), tensor_ref(input), opts));
  });
}

int tchd_send(tchd_group* group, void* tensor, int dst, int tag, tchd_work** out, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ts{tensor_ref(tensor)};
    *out = wrap(group->p2p ? group->p2p->send(ts, dst, tag) : group->pg->send(ts, dst, tag));
  });
}

int tchd_recv(tchd_group* group, void* tensor, int src, int tag, tchd_work** out, char** err) {
  return guarded(err, [&] {
    std::vector<at::Tensor> ts{tensor_ref(tensor)};
    if (group->p2p) {
      *out = wrap(src < 0 ? group->p2p->recvAnysource(ts, tag) : group->p2p->recv(ts, src, tag));
    } else {
      *out = wrap(src < 0 ? group->pg->recvAnysource(ts, tag) : group->pg->recv(ts, src, tag));
    }
  });
}

int tchd_work_source_rank(tchd_work* work, int* rank, char** err) {
  return guarded(err, [&] { *rank = work->work->sourceRank(); });
}

int tchd_barrier(tchd_group* group, tchd_work** out, char** err) {
  return guarded(err, [&] { *out = wrap(group->pg->barrier()); });
}

int tchd_work_wait(tchd_work* work, int64_t timeout_ms, char** err) {
  return guarded(err, [&] {
    auto timeout = timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms) : std::chrono::milliseconds(0);  // 0: no extra timeout
    work->work->wait(timeout);
  });
}

int tchd_work_is_completed(tchd_work* work) {
  try {
    return work->work->isCompleted() ? 1 : 0;
  } catch (...) {
    return 1;
  }
}

void tchd_work_free(tchd_work* work) { delete work; }

}  // extern "C"
