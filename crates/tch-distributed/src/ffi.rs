//! Raw bindings to shim/tchd.h. Safe wrappers live in the other modules.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
pub struct tchd_store {
    _private: [u8; 0],
}
#[repr(C)]
pub struct tchd_group {
    _private: [u8; 0],
}
#[repr(C)]
pub struct tchd_work {
    _private: [u8; 0],
}

#[repr(C)]
pub struct tchd_hook_handle {
    _private: [u8; 0],
}

#[repr(C)]
pub struct tchd_reducer {
    _private: [u8; 0],
}

/// `tchd_bucket_timing_fn`: a bucket's index, parameter count, bytes, start and end
/// (microseconds since the Unix epoch).
pub type BucketTimingFn = extern "C" fn(usize, usize, i64, f64, f64);

/// `tchd_fsdp_backward_fn`: context, the full gradients (owned, or null), their count,
/// the shards' gradients to fill, error.
pub type FsdpBackwardFn =
    extern "C" fn(*mut c_void, *const *mut c_void, usize, *mut *mut c_void, *mut *mut c_char) -> c_int;
/// `tchd_grad_hook_fn`: context, the gradient (owned), its replacement to fill (owned), error.
pub type GradHookFn = extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void, *mut *mut c_char) -> c_int;
/// `tchd_post_accumulate_grad_hook_fn`: context, the parameter (owned), error.
pub type PostAccumulateGradHookFn = extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_char) -> c_int;
/// `tchd_ctx_drop_fn`.
pub type CtxDropFn = extern "C" fn(*mut c_void);

pub const TCHD_OK: c_int = 0;
pub const TCHD_ERR_OTHER: c_int = 1;
pub const TCHD_ERR_NETWORK: c_int = 2;
pub const TCHD_ERR_STORE: c_int = 3;
pub const TCHD_ERR_BACKEND: c_int = 4;
pub const TCHD_ERR_VALUE: c_int = 5;

pub const TCHD_GLOO: c_int = 1;
pub const TCHD_NCCL: c_int = 2;

extern "C" {
    pub fn tchd_free_string(s: *mut c_char);
    pub fn tchd_free_bytes(p: *mut u8);
    pub fn tchd_has_nccl() -> c_int;

    pub fn tchd_store_tcp(
        host: *const c_char,
        port: u16,
        is_server: c_int,
        num_workers: i64,
        wait_workers: c_int,
        timeout_ms: i64,
        listen_fd: c_int,
        out: *mut *mut tchd_store,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_store_free(store: *mut tchd_store);
    pub fn tchd_store_set(
        store: *mut tchd_store,
        key: *const c_char,
        value: *const u8,
        len: usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_store_get(
        store: *mut tchd_store,
        key: *const c_char,
        value: *mut *mut u8,
        len: *mut usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_store_add(
        store: *mut tchd_store,
        key: *const c_char,
        delta: i64,
        out: *mut i64,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_store_compare_set(
        store: *mut tchd_store,
        key: *const c_char,
        expected: *const u8,
        expected_len: usize,
        desired: *const u8,
        desired_len: usize,
        value: *mut *mut u8,
        len: *mut usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_store_port(store: *mut tchd_store, out: *mut u16, err: *mut *mut c_char) -> c_int;

    #[allow(clippy::too_many_arguments)]
    pub fn tchd_group_new(
        store: *mut tchd_store,
        prefix: *const c_char,
        group_name: *const c_char,
        global_ranks: *const u64,
        n_global_ranks: usize,
        backend: c_int,
        rank: c_int,
        size: c_int,
        gloo_hostname: *const c_char,
        gloo_interface: *const c_char,
        timeout_ms: i64,
        bound_cuda_device: c_int,
        split_from: *mut tchd_group,
        split_color: c_int,
        check_collectives: c_int,
        out: *mut *mut tchd_group,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_group_nocolor_split(
        parent: *mut tchd_group,
        cuda_device: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_group_free(group: *mut tchd_group);
    pub fn tchd_group_bound_device(group: *mut tchd_group) -> c_int;
    pub fn tchd_group_shutdown(group: *mut tchd_group, err: *mut *mut c_char) -> c_int;

    pub fn tchd_all_reduce(
        group: *mut tchd_group,
        tensors: *const *mut c_void,
        n: usize,
        op: c_int,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reduce(
        group: *mut tchd_group,
        tensor: *mut c_void,
        root: c_int,
        op: c_int,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_broadcast(
        group: *mut tchd_group,
        tensor: *mut c_void,
        root: c_int,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_all_gather(
        group: *mut tchd_group,
        outputs: *const *mut c_void,
        n: usize,
        input: *mut c_void,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_all_gather_into_tensor(
        group: *mut tchd_group,
        output: *mut c_void,
        input: *mut c_void,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reduce_scatter_tensor(
        group: *mut tchd_group,
        output: *mut c_void,
        input: *mut c_void,
        op: c_int,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_send(
        group: *mut tchd_group,
        tensor: *mut c_void,
        dst: c_int,
        tag: c_int,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_recv(
        group: *mut tchd_group,
        tensor: *mut c_void,
        src: c_int,
        tag: c_int,
        out: *mut *mut tchd_work,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_work_source_rank(work: *mut tchd_work, rank: *mut c_int, err: *mut *mut c_char) -> c_int;
    pub fn tchd_barrier(group: *mut tchd_group, out: *mut *mut tchd_work, err: *mut *mut c_char) -> c_int;

    pub fn tchd_work_wait(work: *mut tchd_work, timeout_ms: i64, err: *mut *mut c_char) -> c_int;
    pub fn tchd_work_is_completed(work: *mut tchd_work) -> c_int;
    pub fn tchd_work_free(work: *mut tchd_work);

    pub fn tchd_grad_enabled() -> c_int;
    pub fn tchd_autocast_enter(cuda: c_int, err: *mut *mut c_char) -> c_int;
    pub fn tchd_autocast_exit(cuda: c_int, previous: c_int);
    pub fn tchd_broadcast_coalesced(
        group: *mut tchd_group,
        tensors: *const *mut c_void,
        n: usize,
        buffer_bytes: i64,
        root: c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn tchd_reducer_new(
        group: *mut tchd_group,
        params: *const *mut c_void,
        names: *const *const c_char,
        n: usize,
        bucket_cap_bytes: i64,
        first_bucket_cap_bytes: i64,
        find_unused_parameters: c_int,
        gradient_as_bucket_view: c_int,
        out: *mut *mut tchd_reducer,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reducer_free(reducer: *mut tchd_reducer);
    pub fn tchd_reducer_rebuild_buckets(
        reducer: *mut tchd_reducer,
        rebuilt: *mut c_int,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reducer_time_buckets(
        reducer: *mut tchd_reducer,
        group: *mut tchd_group,
        report: BucketTimingFn,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_verify_params(
        group: *mut tchd_group,
        params: *const *mut c_void,
        n: usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reducer_prepare_for_forward(reducer: *mut tchd_reducer, err: *mut *mut c_char) -> c_int;
    pub fn tchd_reducer_prepare_for_backward(
        reducer: *mut tchd_reducer,
        outputs: *const *mut c_void,
        n: usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reducer_bucket_sizes(
        reducer: *mut tchd_reducer,
        counts: *mut i64,
        capacity: usize,
        n_buckets: *mut usize,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_reducer_bucket_params(
        reducer: *mut tchd_reducer,
        indices: *mut i64,
        capacity: usize,
        n: *mut usize,
        err: *mut *mut c_char,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn tchd_sync_batch_norm(
        group: *mut tchd_group,
        input: *const c_void,
        weight: *const c_void,
        bias: *const c_void,
        running_mean: *mut c_void,
        running_var: *mut c_void,
        training: c_int,
        momentum: f64,
        eps: f64,
        cudnn_enabled: c_int,
        out: *mut *mut c_void,
        err: *mut *mut c_char,
    ) -> c_int;

    pub fn tchd_storage_nbytes(tensor: *const c_void, out: *mut i64, err: *mut *mut c_char) -> c_int;
    pub fn tchd_storage_free(tensor: *mut c_void, err: *mut *mut c_char) -> c_int;
    pub fn tchd_storage_alloc(tensor: *mut c_void, err: *mut *mut c_char) -> c_int;
    pub fn tchd_copy_unversioned(dst: *mut c_void, src: *const c_void, err: *mut *mut c_char) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn tchd_fsdp_attach(
        params: *const *mut c_void,
        n_params: usize,
        shards: *const *mut c_void,
        n_shards: usize,
        callback: FsdpBackwardFn,
        drop: CtxDropFn,
        ctx: *mut c_void,
        err: *mut *mut c_char,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    pub fn tchd_attach_backward(
        outputs: *const *mut c_void,
        n_outputs: usize,
        inputs: *const *mut c_void,
        n_inputs: usize,
        name: *const c_char,
        callback: FsdpBackwardFn,
        drop: CtxDropFn,
        ctx: *mut c_void,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_register_grad_hook(
        tensor: *mut c_void,
        callback: GradHookFn,
        drop: CtxDropFn,
        ctx: *mut c_void,
        handle: *mut *mut tchd_hook_handle,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_register_post_accumulate_grad_hook(
        param: *mut c_void,
        callback: PostAccumulateGradHookFn,
        drop: CtxDropFn,
        ctx: *mut c_void,
        handle: *mut *mut tchd_hook_handle,
        err: *mut *mut c_char,
    ) -> c_int;
    pub fn tchd_hook_remove(handle: *mut tchd_hook_handle);
}
