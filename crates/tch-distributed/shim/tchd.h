// C ABI over libtorch's c10d, for the Rust crate `tch-distributed`.
//
// Every fallible function returns a status (TCHD_OK or an error kind) and, on error,
// stores a malloc'ed message in *err that the caller frees with tchd_free_string.
// No C++ exception ever crosses this boundary.
//
// Tensors are passed as `void*` pointing at an `at::Tensor` (what tch's C_tensor is).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tchd_status {
  TCHD_OK = 0,
  TCHD_ERR_OTHER = 1,    // any other exception
  TCHD_ERR_NETWORK = 2,  // c10::DistNetworkError (sockets, connect, bind)
  TCHD_ERR_STORE = 3,    // c10::DistStoreError (store wait/get, often a timeout)
  TCHD_ERR_BACKEND = 4,  // c10::DistBackendError (Gloo/NCCL failure or timeout)
  TCHD_ERR_VALUE = 5,    // c10::ValueError / invalid argument
};

enum tchd_backend { TCHD_GLOO = 1, TCHD_NCCL = 2 };

// Same numbering as c10d::ReduceOp::RedOpType.
enum tchd_reduce_op {
  TCHD_SUM = 0,
  TCHD_AVG = 1,
  TCHD_PRODUCT = 2,
  TCHD_MIN = 3,
  TCHD_MAX = 4,
};

typedef struct tchd_store tchd_store;
typedef struct tchd_group tchd_group;
typedef struct tchd_work tchd_work;

void tchd_free_string(char* s);
void tchd_free_bytes(uint8_t* p);

// 1 when ProcessGroupNCCL was compiled in.
int tchd_has_nccl(void);

// --- store ------------------------------------------------------------------------
// num_workers < 0: unknown (no waiting for workers).
int tchd_store_tcp(const char* host, uint16_t port, int is_server, int64_t num_workers,
                   int wait_workers, int64_t timeout_ms, int listen_fd, tchd_store** out,
                   char** err);
void tchd_store_free(tchd_store* store);
int tchd_store_set(tchd_store* store, const char* key, const uint8_t* value, size_t len,
                   char** err);
// *value is malloc'ed; free with tchd_free_bytes.
int tchd_store_get(tchd_store* store, const char* key, uint8_t** value, size_t* len,
                   char** err);
int tchd_store_add(tchd_store* store, const char* key, int64_t delta, int64_t* out,
                   char** err);
// The port the server actually listens on (useful when asked for port 0).
// Sets key to desired if its value is expected (an absent key counts as the empty
// value); returns the value the key holds afterwards, malloc'ed (tchd_free_bytes).
int tchd_store_compare_set(tchd_store* store, const char* key, const uint8_t* expected, size_t expected_len,
                           const uint8_t* desired, size_t desired_len, uint8_t** value, size_t* len,
                           char** err);
int tchd_store_port(tchd_store* store, uint16_t* out, char** err);

// --- process group -------------------------------------------------------------------
// prefix: the group's key prefix in the store (PyTorch's "default_pg/<name>/" for the
// default group); the backend adds "cpu/" (Gloo) or "cuda/" (NCCL) on top.
// group_name: c10d's group name ("0" for the default group, then "1", "2", ...).
// global_ranks: the group's members as global ranks; empty for the default group.
// gloo_hostname / gloo_interface (either may be NULL): where Gloo binds its sockets;
// both NULL means c10d's default device (this host's name, else loopback).
// bound_cuda_device: the CUDA device index this rank uses (init_process_group's
// device_id), or -1 for none.
int tchd_group_new(tchd_store* store, const char* prefix, const char* group_name,
                   const uint64_t* global_ranks, size_t n_global_ranks, int backend, int rank, int size,
                   const char* gloo_hostname, const char* gloo_interface, int64_t timeout_ms,
                   int bound_cuda_device, tchd_group* split_from, int split_color, int check_collectives,
                   tchd_group** out, char** err);
// check_collectives != 0: the backend is wrapped in c10d's ProcessGroupWrapper (PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL) over a helper Gloo backend: before each collective the
// ranks compare what they are about to run, and a mismatch is an exception on every rank
// instead of mismatched messages that Gloo's own threads abort the process on.
// split_from (or NULL) / split_color: an NCCL group made by splitting split_from's
// communicator with this color (PyTorch's new_group under a bound default group).
// A rank of split_from that is not in the new group takes part in the split here:
int tchd_group_nocolor_split(tchd_group* parent, int cuda_device, char** err);
void tchd_group_free(tchd_group* group);
// The CUDA device index the group is bound to, or -1.
int tchd_group_bound_device(tchd_group* group);
// Aborts NCCL communicators / shuts the backend down (destroy_process_group).
int tchd_group_shutdown(tchd_group* group, char** err);

// --- collectives (asynchronous: each returns a work handle to wait on) -----------------
int tchd_all_reduce(tchd_group* group, void* const* tensors, size_t n, int op, tchd_work** out,
                    char** err);
int tchd_reduce(tchd_group* group, void* tensor, int root, int op, tchd_work** out, char** err);
int tchd_broadcast(tchd_group* group, void* tensor, int root, tchd_work** out, char** err);
int tchd_all_gather(tchd_group* group, void* const* outputs, size_t n, void* input,
                    tchd_work** out, char** err);
int tchd_barrier(tchd_group* group, tchd_work** out, char** err);
// output: world size times input's elements, rank r's input at [r * n, (r + 1) * n).
int tchd_all_gather_into_tensor(tchd_group* group, void* output, void* input, tchd_work** out, char** err);
// input: world size times output's elements; rank r gets chunk r reduced over ranks.
int tchd_reduce_scatter_tensor(tchd_group* group, void* output, void* input, int op, tchd_work** out,
                               char** err);
// Point-to-point. src < 0: receive from any source (tchd_work_source_rank says which).
int tchd_send(tchd_group* group, void* tensor, int dst, int tag, tchd_work** out, char** err);
int tchd_recv(tchd_group* group, void* tensor, int src, int tag, tchd_work** out, char** err);


// timeout_ms <= 0: the group's own timeout.
int tchd_work_wait(tchd_work* work, int64_t timeout_ms, char** err);
int tchd_work_is_completed(tchd_work* work);
void tchd_work_free(tchd_work* work);
// The rank a completed receive-from-any-source got its tensor from.
int tchd_work_source_rank(tchd_work* work, int* rank, char** err);

// --- bf16 autocast (amp.cpp) -----------------------------------------------------------
// Enters a bf16 autocast region on CPU (cuda = 0) or CUDA (cuda = 1); returns whether
// autocast was on before, or -1 with *err set.
int tchd_autocast_enter(int cuda, char** err);
// Leaves it, restoring `previous`.
void tchd_autocast_exit(int cuda, int previous);

// --- DistributedDataParallel pieces (ddp.cpp) ------------------------------------------
typedef struct tchd_reducer tchd_reducer;

// 1 when autograd is recording (not inside no_grad).
int tchd_grad_enabled(void);

// Broadcasts `tensors` from `root` in flattened chunks of at most buffer_bytes
// (c10d::broadcast_coalesced): how DDP makes every replica start from rank 0's state.
int tchd_broadcast_coalesced(tchd_group* group, void* const* tensors, size_t n, int64_t buffer_bytes,
                             int root, char** err);

// c10d::Reducer over `params` (which must require grad), with buckets computed as
// PyTorch's DDP does. names: one C string per parameter (for error messages).
int tchd_reducer_new(tchd_group* group, void* const* params, const char* const* names, size_t n,
                     int64_t bucket_cap_bytes, int64_t first_bucket_cap_bytes, int find_unused_parameters,
                     int gradient_as_bucket_view, tchd_reducer** out, char** err);
void tchd_reducer_free(tchd_reducer* reducer);
// Before a forward pass that will be followed by a synchronised backward.
int tchd_reducer_prepare_for_forward(tchd_reducer* reducer, char** err);
// Before every forward pass with grad enabled: once, after the first synchronised
// backward, re-buckets by the order gradients became ready (a broadcast from rank 0).
// *rebuilt: 1 when this call regrouped the buckets.
int tchd_reducer_rebuild_buckets(tchd_reducer* reducer, int* rebuilt, char** err);
// PyTorch DDP's model check (c10d::verify_params_across_processes): a mismatch is
// TCHD_ERR_VALUE on the ranks whose parameters differ from rank 0's.
int tchd_verify_params(tchd_group* group, void* const* params, size_t n, char** err);
// After that forward pass: arms the gradient hooks. outputs are searched for unused
// parameters when find_unused_parameters is set (pass n = 0 otherwise).
int tchd_reducer_prepare_for_backward(tchd_reducer* reducer, void* const* outputs, size_t n, char** err);
// Number of buckets and, per bucket, the number of parameters (for tests and logs).
int tchd_reducer_bucket_sizes(tchd_reducer* reducer, int64_t* counts, size_t capacity, size_t* n_buckets,
                              char** err);
// The parameters of every bucket, bucket after bucket in reduction order, as indices
// into the reducer's `params`; n: how many were written (all of them, given capacity n).
int tchd_reducer_bucket_params(tchd_reducer* reducer, int64_t* indices, size_t capacity, size_t* n,
                               char** err);

// Called once per gradient bucket when its all-reduce has completed: the bucket's index
// (in reduction order), how many parameters and bytes it holds, and when its all-reduce
// started and completed, in microseconds since the Unix epoch. Runs on the backend's
// thread; it must not block.
typedef void (*tchd_bucket_timing_fn)(size_t index, size_t params, int64_t bytes, double start_us,
                                      double end_us);
// Installs a communication hook that does what the Reducer does without one (each
// gradient times 1 / world size, then a sum all-reduce of the bucket), and reports each
// bucket's all-reduce to `report`. Call it before the first backward pass.
int tchd_reducer_time_buckets(tchd_reducer* reducer, tchd_group* group, tchd_bucket_timing_fn report,
                              char** err);

// --- SyncBatchNorm -------------------------------------------------------------------
// Batch norm over (N, C, H, W) whose training statistics cover the whole group's batch
// (see sync_batch_norm.cpp for the math). weight, bias (NULL when not affine),
// running_mean and running_var (updated in place when training) have C elements.
// Eval mode (training == 0), a NULL group or a group of one rank run plain batch norm
// without communicating. On success *out is a new `at::Tensor*` (free it with tch's
// at_free, i.e. wrap it with tch::Tensor::from_ptr); its backward all-reduces too.
int tchd_sync_batch_norm(tchd_group* group, const void* input, const void* weight,
                         const void* bias, void* running_mean, void* running_var, int training,
                         double momentum, double eps, int cudnn_enabled, void** out, char** err);

// --- FSDP (fsdp.cpp) --------------------------------------------------------------------
// Bytes of the tensor's storage (0 once freed).
int tchd_storage_nbytes(const void* tensor, int64_t* out, char** err);
// Returns the tensor's memory to its allocator; sizes and strides stay.
int tchd_storage_free(void* tensor, char** err);
// Allocates (uninitialised) memory for a tensor whose storage was freed; a no-op if it has it.
int tchd_storage_alloc(void* tensor, char** err);
// dst.copy_(src) without bumping dst's version counter (dst may be saved by autograd).
int tchd_copy_unversioned(void* dst, const void* src, char** err);

// Called by the backward node with the full parameters' gradients (owned `at::Tensor*`,
// NULL where none arrived); fills shard_grads[i] with owned `at::Tensor*` (or NULL).
typedef int (*tchd_fsdp_backward_fn)(void* ctx, void* const* grads, size_t n, void** shard_grads,
                                     char** err);
// Frees a context handed to the functions below (always called, also on failure).
typedef void (*tchd_ctx_drop_fn)(void* ctx);
// Makes each params[i] the output i of a new autograd node whose inputs are the shards
// (which must require grad): when backward reaches it, `callback` turns the parameters'
// gradients into the shards'. Call once per training forward, before it.
int tchd_fsdp_attach(void* const* params, size_t n_params, void* const* shards, size_t n_shards,
                     tchd_fsdp_backward_fn callback, tchd_ctx_drop_fn drop, void* ctx, char** err);
// The same with any inputs and outputs and the node called `name`: tensor parallelism's
// region operators (their backward all-reduces the gradient, or passes it on).
int tchd_attach_backward(void* const* outputs, size_t n_outputs, void* const* inputs, size_t n_inputs,
                         const char* name, tchd_fsdp_backward_fn callback, tchd_ctx_drop_fn drop, void* ctx,
                         char** err);

// --- Gradient hooks (hooks.cpp) ---------------------------------------------------------
// A registered hook; removing it frees it.
typedef struct tchd_hook_handle tchd_hook_handle;
// Called with the gradient flowing into a tensor (an owned `at::Tensor*`, for tch to
// free); may set *replacement to an owned `at::Tensor*` that flows on instead.
typedef int (*tchd_grad_hook_fn)(void* ctx, void* grad, void** replacement, char** err);
// Called with the parameter (an owned `at::Tensor*`) once its .grad holds this
// backward's gradient, accumulated.
typedef int (*tchd_post_accumulate_grad_hook_fn)(void* ctx, void* param, char** err);
// Tensor.register_hook: `callback` runs when the gradient of `tensor` (which must require
// grad) is computed, before it flows on (for a leaf: before it is accumulated). With
// `handle` NULL the hook stays as long as the tensor; otherwise *handle removes it.
int tchd_register_grad_hook(void* tensor, tchd_grad_hook_fn callback, tchd_ctx_drop_fn drop, void* ctx,
                            tchd_hook_handle** handle, char** err);
// Tensor.register_post_accumulate_grad_hook, on a leaf that requires grad.
int tchd_register_post_accumulate_grad_hook(void* param, tchd_post_accumulate_grad_hook_fn callback,
                                            tchd_ctx_drop_fn drop, void* ctx, tchd_hook_handle** handle,
                                            char** err);
// Removes the hook (its context is dropped once no call of it is running) and frees the handle.
void tchd_hook_remove(tchd_hook_handle* handle);

#ifdef __cplusplus
}
#endif
