//! Process groups and collectives over c10d's ProcessGroup (Gloo or NCCL backend).
use std::ffi::c_void;
use std::fmt;
use std::panic::Location;
use std::ptr::{self, NonNull};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tch::{Device, Tensor};

use crate::c_args::{cstring, duration_ms};
use crate::debug::CollectiveOp;
use crate::error::{check, DistError, ErrorKind, Result};
use crate::ffi;
use crate::reduce_op::ReduceOp;
use crate::rendezvous::validate_rank;
use crate::spans;
use crate::store::Store;

/// The communication library behind a group, as in `torch.distributed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// CPU tensors (and CUDA tensors, more slowly). Works everywhere.
    Gloo,
    /// CUDA tensors only; the fast choice on GPUs.
    Nccl,
}

impl Backend {
    /// PyTorch's rule: NCCL for CUDA devices, Gloo otherwise.
    pub fn for_device(device: Device) -> Backend {
        match device {
            Device::Cuda(_) => Backend::Nccl,
            _ => Backend::Gloo,
        }
    }

    /// Whether this build can create groups of this backend at all.
    pub fn is_available(self) -> bool {
        match self {
            Backend::Gloo => true,
            Backend::Nccl => self.check_available().is_ok(),
        }
    }

    /// An error saying why this backend cannot be used here, if it cannot.
    pub fn check_available(self) -> Result<()> {
        if self == Backend::Nccl {
            if !nccl_compiled_in() {
                return Err(DistError::new(
                    ErrorKind::Unsupported,
                    "this build has no NCCL (libtorch without CUDA, or CUDA headers missing at build time): use Backend::Gloo",
                ));
            }
            if !tch::Cuda::is_available() {
                return Err(DistError::new(
                    ErrorKind::Unsupported,
                    "NCCL needs CUDA GPUs and none is visible: use Backend::Gloo for CPU ranks",
                ));
            }
        }
        Ok(())
    }

    fn raw(self) -> i32 {
        match self {
            Backend::Gloo => ffi::TCHD_GLOO,
            Backend::Nccl => ffi::TCHD_NCCL,
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        })
    }
}

impl FromStr for Backend {
    type Err = DistError;
    fn from_str(s: &str) -> Result<Backend> {
        match s.to_ascii_lowercase().as_str() {
            "gloo" => Ok(Backend::Gloo),
            "nccl" => Ok(Backend::Nccl),
            _ => Err(DistError::invalid(format!(
                "unknown backend {s:?}: use \"gloo\" (CPU) or \"nccl\" (CUDA)"
            ))),
        }
    }
}

/// True when ProcessGroupNCCL was compiled into this build.
pub fn nccl_compiled_in() -> bool {
    unsafe { ffi::tchd_has_nccl() != 0 }
}

/// Options for [`ProcessGroup::new`]: everything but the store, the rank and the
/// world size, which every group needs.
///
/// ```
/// let options = tch_distributed::GroupOptions::default();
/// assert_eq!(options.backend, tch_distributed::Backend::Gloo);
/// assert_eq!(options.timeout, tch_distributed::DEFAULT_TIMEOUT);
/// ```
#[derive(Debug, Clone)]
pub struct GroupOptions {
    /// Gloo (the default: it runs on every machine) or NCCL. Every member passes the same.
    pub backend: Backend,
    /// Collectives that do not finish within this fail instead of hanging.
    pub timeout: Duration,
    /// Where Gloo binds its sockets: an address or host name of this machine.
    /// `None`: c10d's default (this host's name, else loopback).
    pub gloo_hostname: Option<String>,
    /// Network interface for Gloo (as `GLOO_SOCKET_IFNAME`); wins over the host name.
    pub gloo_interface: Option<String>,
    /// The GPU this rank computes on, as `init_process_group(device_id=...)`: NCCL then
    /// uses it instead of guessing one from the global rank (c10d's "Guessing device ID
    /// based on global rank" warning). `None`, or a CPU device: not bound.
    pub device_id: Option<Device>,
    /// Whether the ranks compare each collective before running it (c10d's
    /// ProcessGroupWrapper, which PyTorch puts in under `TORCH_DISTRIBUTED_DEBUG=DETAIL`):
    /// a collective that only some ranks reach, or that ranks issue with other ops or
    /// shapes, then fails on every rank with an error naming both calls, instead of
    /// hanging or, under Gloo, aborting the process from Gloo's own threads. It costs
    /// a small barrier and all-gather on a helper Gloo group per collective.
    /// `None`: [`checks_collectives`]'s rule (on for Gloo, on for NCCL under `DETAIL`).
    pub check_collectives: Option<bool>,
}

/// Environment variable: `1` checks every group's collectives, `0` none (see
/// [`GroupOptions::check_collectives`]); unset, the backend decides.
pub const CHECK_COLLECTIVES_ENV: &str = "TCHD_CHECK_COLLECTIVES";

/// Whether a group of `backend` compares its collectives across ranks when its options
/// leave it to the rule ([`GroupOptions::check_collectives`] `None`):
/// [`CHECK_COLLECTIVES_ENV`] when set to `0` or `1`; else yes for Gloo, whose threads
/// abort the process on mismatched messages (a misuse must be an error, never a
/// signal), and for NCCL only under `TORCH_DISTRIBUTED_DEBUG=DETAIL`, as PyTorch does
/// (NCCL does not abort on a mismatch, and the check's host round trip would stall the
/// GPU's stream of collectives).
///
/// Ranks of one group must agree: a Python rank shares a Gloo group with Rust ranks
/// only when it checks too (`TORCH_DISTRIBUTED_DEBUG=DETAIL`, whose keys these are) or
/// the Rust ranks do not (`TCHD_CHECK_COLLECTIVES=0`).
pub fn checks_collectives(backend: Backend) -> bool {
    match std::env::var(CHECK_COLLECTIVES_ENV).ok().as_deref().map(str::trim) {
        Some("1") => return true,
        Some("0") => return false,
        _ => {}
    }
    match backend {
        Backend::Gloo => true,
        Backend::Nccl => crate::debug::detail_logging(),
    }
}

impl Default for GroupOptions {
    fn default() -> Self {
        Self {
            backend: Backend::Gloo,
            timeout: crate::DEFAULT_TIMEOUT,
            gloo_hostname: None,
            gloo_interface: None,
            device_id: None,
            check_collectives: None,
        }
    }
}

/// A group of processes that run collectives together (c10d::ProcessGroup).
pub struct ProcessGroup {
    raw: NonNull<ffi::tchd_group>,
    rank: usize,
    world_size: usize,
    backend: Backend,
    timeout: Duration,
    /// Which group of this process, in creation order: its c10d group name.
    id: u64,
    /// Where its keys live in the store, e.g. "default_pg/0/".
    store_prefix: String,
    /// Collectives issued so far, for [`crate::debug`]'s sequence numbers.
    issued: AtomicU64,
    /// Sends and receives issued so far: numbered apart from the collectives, as NCCL
    /// numbers its point-to-point calls, since only two ranks of the group take part.
    p2p_issued: AtomicU64,
}

// SAFETY: c10d process groups are thread-safe: collectives are enqueued under locks.
unsafe impl Send for ProcessGroup {}
unsafe impl Sync for ProcessGroup {}

/// Python's `_world.group_count`: the default group is "0", and every group created
/// after it on every rank takes the next number as its name, which is also its key
/// prefix in the store. A Python rank and a Rust rank that create the same groups in
/// the same order therefore meet on the same keys.
static GROUP_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn next_group_number() -> u64 {
    GROUP_COUNTER.fetch_add(1, Ordering::SeqCst)
}

/// `destroy_process_group` starts the numbering again, as PyTorch's does.
pub(crate) fn reset_group_numbers() {
    GROUP_COUNTER.store(0, Ordering::SeqCst);
}

impl ProcessGroup {
    /// Creates a group over `store` in which this process is `rank` of `world_size`.
    /// Every member calls this with the same world size and options' backend; it
    /// returns once all of them have connected (or fails on timeout). Its keys are
    /// PyTorch's for a group over this store: `<number>/<device>/...`.
    pub fn new(store: &Store, rank: usize, world_size: usize, opts: &GroupOptions) -> Result<Self> {
        validate_rank(rank, world_size)?;
        opts.backend.check_available()?;
        Self::create(store, "", next_group_number(), &[], rank, world_size, opts, None)
    }

    /// A group named `id` whose keys live under `store_prefix` (PyTorch's PrefixStore
    /// chain, "default_pg" for the default group and the ones made from it), with
    /// `global_ranks` as its members (empty: every rank of the store's job); an NCCL
    /// group split from `split`'s group with its color, when given.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create(
        store: &Store,
        store_prefix: &str,
        id: u64,
        global_ranks: &[usize],
        rank: usize,
        world_size: usize,
        opts: &GroupOptions,
        split: Option<(&ProcessGroup, i32)>,
    ) -> Result<Self> {
        // Nested PrefixStores join with "/": PrefixStore("1/", PrefixStore("default_pg"))
        // is PrefixStore("default_pg/1/").
        let backend = opts.backend;
        let prefix = if store_prefix.is_empty() { format!("{id}/") } else { format!("{store_prefix}/{id}/") };
        let cprefix = cstring(&prefix)?;
        let name = cstring(&id.to_string())?;
        let members: Vec<u64> = global_ranks.iter().map(|&r| r as u64).collect();
        let host = opts.gloo_hostname.as_deref().map(cstring).transpose()?;
        let iface = opts.gloo_interface.as_deref().map(cstring).transpose()?;
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = unsafe {
            ffi::tchd_group_new(
                store.raw(),
                cprefix.as_ptr(),
                name.as_ptr(),
                members.as_ptr(),
                members.len(),
                backend.raw(),
                rank as i32,
                world_size as i32,
                host.as_ref().map_or(ptr::null(), |h| h.as_ptr()),
                iface.as_ref().map_or(ptr::null(), |i| i.as_ptr()),
                duration_ms(opts.timeout),
                match opts.device_id {
                    Some(Device::Cuda(index)) => index as i32,
                    _ => -1,
                },
                split.map_or(ptr::null_mut(), |(parent, _)| parent.raw()),
                split.map_or(-1, |(_, color)| color),
                i32::from(opts.check_collectives.unwrap_or_else(|| checks_collectives(backend))),
                &mut out,
                &mut err,
            )
        };
        check(status, err).map_err(|e| {
            e.context(format!("creating the {backend} process group (rank {rank} of {world_size})"))
        })?;
        Ok(ProcessGroup {
            raw: NonNull::new(out).expect("shim returned a null group"),
            rank,
            world_size,
            backend,
            timeout: opts.timeout,
            id,
            store_prefix: prefix,
            issued: AtomicU64::new(0),
            p2p_issued: AtomicU64::new(0),
        })
    }

    /// A rank of this (NCCL) group that is not in a group being split from it takes
    /// part in the split: `perform_nocolor_split`.
    pub(crate) fn nocolor_split(&self, cuda_device: usize) -> Result<()> {
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_group_nocolor_split(self.raw(), cuda_device as i32, &mut err) }, err)
            .map_err(|e| e.context("splitting the default group's NCCL communicator for a new group"))
    }

    /// The group's name in c10d ("0" for the default group), as `group.group_name`.
    pub fn group_name(&self) -> String {
        self.id.to_string()
    }

    /// The store prefix of this group's keys (PyTorch's `PrefixStore` chain joined).
    pub(crate) fn store_prefix(&self) -> &str {
        &self.store_prefix
    }

    /// The shim's handle, for other shim entry points (DDP, SyncBatchNorm).
    pub(crate) fn raw(&self) -> *mut ffi::tchd_group {
        self.raw.as_ptr()
    }

    /// This process's rank in the group (0..world_size).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes in the group.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The backend the group's collectives run on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How long a collective may wait for the other ranks before it fails.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The GPU the group is bound to ([`GroupOptions::device_id`]), if any.
    pub fn bound_device(&self) -> Option<Device> {
        let index = unsafe { ffi::tchd_group_bound_device(self.raw.as_ptr()) };
        (index >= 0).then_some(Device::Cuda(index as usize))
    }

    /// Combines `tensor` across all ranks with `op`; every rank ends with the result.
    #[track_caller]
    pub fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_async(tensor, op)?.wait()
    }

    /// [`ProcessGroup::all_reduce`] without waiting: [`Work::wait`] finishes it
    /// (PyTorch's `async_op=True`).
    #[track_caller]
    pub fn all_reduce_async(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<Work> {
        self.check_tensor(tensor, "all_reduce")?;
        self.check_op(op, "all_reduce")?;
        let span = self.observe(CollectiveOp::AllReduce, Some(op), None, Some(tensor));
        let ptrs = [tensor.as_mut_ptr() as *mut c_void];
        self.start("all_reduce", span, |out, err| unsafe {
            ffi::tchd_all_reduce(self.raw.as_ptr(), ptrs.as_ptr(), 1, op.raw(), out, err)
        })
    }

    /// Like [`all_reduce`](Self::all_reduce), but only rank `dst` is guaranteed the result.
    #[track_caller]
    pub fn reduce(&self, tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<()> {
        self.reduce_async(tensor, dst, op)?.wait()
    }

    /// [`ProcessGroup::reduce`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn reduce_async(&self, tensor: &mut Tensor, dst: usize, op: ReduceOp) -> Result<Work> {
        self.check_tensor(tensor, "reduce")?;
        self.check_op(op, "reduce")?;
        self.check_peer(dst, "reduce", "destination")?;
        let span = self.observe(CollectiveOp::Reduce, Some(op), Some(dst), Some(tensor));
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        self.start("reduce", span, |out, err| unsafe {
            ffi::tchd_reduce(self.raw.as_ptr(), ptr, dst as i32, op.raw(), out, err)
        })
    }

    /// Copies rank `src`'s `tensor` into every other rank's `tensor`.
    #[track_caller]
    pub fn broadcast(&self, tensor: &mut Tensor, src: usize) -> Result<()> {
        self.broadcast_async(tensor, src)?.wait()
    }

    /// [`ProcessGroup::broadcast`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn broadcast_async(&self, tensor: &mut Tensor, src: usize) -> Result<Work> {
        self.check_tensor(tensor, "broadcast")?;
        self.check_peer(src, "broadcast", "source")?;
        let span = self.observe(CollectiveOp::Broadcast, None, Some(src), Some(tensor));
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        self.start("broadcast", span, |out, err| unsafe {
            ffi::tchd_broadcast(self.raw.as_ptr(), ptr, src as i32, out, err)
        })
    }

    /// Gathers every rank's `input` into `outputs[rank]` on every rank
    /// (`outputs.len()` == world size, each shaped like `input`).
    #[track_caller]
    pub fn all_gather(&self, outputs: &mut [Tensor], input: &Tensor) -> Result<()> {
        self.all_gather_async(outputs, input)?.wait()
    }

    /// [`ProcessGroup::all_gather`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn all_gather_async(&self, outputs: &mut [Tensor], input: &Tensor) -> Result<Work> {
        self.check_tensor(input, "all_gather")?;
        if outputs.len() != self.world_size {
            return Err(DistError::invalid(format!(
                "all_gather needs one output tensor per rank: got {}, world size is {}",
                outputs.len(),
                self.world_size
            )));
        }
        for (i, out) in outputs.iter().enumerate() {
            self.check_tensor(out, "all_gather")?;
            if out.size() != input.size() || out.kind() != input.kind() || out.device() != input.device() {
                return Err(DistError::invalid(format!(
                    "all_gather output {i} is {:?} {:?} on {:?} but the input is {:?} {:?} on {:?}: each output must match the input",
                    out.size(),
                    out.kind(),
                    out.device(),
                    input.size(),
                    input.kind(),
                    input.device()
                )));
            }
        }
        let span = self.observe(CollectiveOp::AllGather, None, None, Some(input));
        let ptrs: Vec<*mut c_void> = outputs.iter_mut().map(|t| t.as_mut_ptr() as *mut c_void).collect();
        // c10d only reads the input; the shim's signature is not const-correct.
        let input_ptr = input.as_ptr() as *mut c_void;
        self.start("all_gather", span, |out, err| unsafe {
            ffi::tchd_all_gather(self.raw.as_ptr(), ptrs.as_ptr(), ptrs.len(), input_ptr, out, err)
        })
    }

    /// Convenience form of [`all_gather`](Self::all_gather) that allocates the outputs.
    #[track_caller]
    pub fn all_gather_to_vec(&self, input: &Tensor) -> Result<Vec<Tensor>> {
        let mut outputs: Vec<Tensor> = (0..self.world_size).map(|_| input.empty_like()).collect();
        self.all_gather(&mut outputs, input)?;
        Ok(outputs)
    }

    /// Gathers every rank's `input` into one tensor: `output` holds world size times
    /// `input`'s elements, rank r's at `[r * n, (r + 1) * n)` of the flattened output
    /// (`torch.distributed.all_gather_into_tensor`; c10d's `_allgather_base`). `output`
    /// may be shaped `[world_size * d0, ...]` (concatenated along dim 0) or
    /// `[world_size, d0, ...]` (stacked): only the element count and order matter.
    ///
    /// This is FSDP's unshard: every rank holds one shard of a parameter, and this call
    /// puts the whole parameter on every rank.
    ///
    /// ```no_run
    /// # use tch::{Device, Kind, Tensor};
    /// # fn main() -> tch_distributed::Result<()> {
    /// let group = tch_distributed::default_group()?;
    /// let shard = Tensor::full([2, 3], group.rank() as f64, (Kind::Float, Device::Cpu));
    /// let mut full = Tensor::zeros([2 * group.world_size() as i64, 3], (Kind::Float, Device::Cpu));
    /// group.all_gather_into_tensor(&mut full, &shard)?;
    /// // Rows 2r and 2r + 1 hold rank r's shard.
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn all_gather_into_tensor(&self, output: &mut Tensor, input: &Tensor) -> Result<()> {
        self.all_gather_into_tensor_async(output, input)?.wait()
    }

    /// [`ProcessGroup::all_gather_into_tensor`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn all_gather_into_tensor_async(&self, output: &mut Tensor, input: &Tensor) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::AllGatherIntoTensor;
        const WHAT: &str = OP.name();
        self.check_tensor(input, WHAT)?;
        self.check_tensor(output, WHAT)?;
        self.check_scattered(output, "output", input, "input", WHAT)?;
        let span = self.observe(OP, None, None, Some(input));
        // Flat views of the same memory: Gloo wants the output as the inputs concatenated
        // along dim 0, and this accepts the stacked form (and scalars) as PyTorch does.
        let (mut flat_out, flat_in) = (output.view([-1]), input.view([-1]));
        let (out_ptr, in_ptr) = (flat_out.as_mut_ptr() as *mut c_void, flat_in.as_ptr() as *mut c_void);
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_all_gather_into_tensor(self.raw.as_ptr(), out_ptr, in_ptr, out, err)
        })
    }

    /// Reduces `input` over the ranks with `op` and leaves chunk r of the result on rank
    /// r: `input` holds world size times `output`'s elements, and rank r's `output` is
    /// the reduction over every rank of `input[r * n .. (r + 1) * n]` (flattened)
    /// (`torch.distributed.reduce_scatter_tensor`; c10d's `_reduce_scatter_base`).
    ///
    /// This is FSDP's gradient step: every rank computed the gradient of the whole
    /// parameter, and each keeps the sum over ranks of its own shard's part. Gloo has no
    /// [`ReduceOp::Avg`] (as in PyTorch): for the average, as DDP takes it, reduce with
    /// `Sum` and divide by the world size, as FSDP2 does on Gloo.
    #[track_caller]
    pub fn reduce_scatter_tensor(&self, output: &mut Tensor, input: &Tensor, op: ReduceOp) -> Result<()> {
        self.reduce_scatter_tensor_async(output, input, op)?.wait()
    }

    /// [`ProcessGroup::reduce_scatter_tensor`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn reduce_scatter_tensor_async(
        &self,
        output: &mut Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::ReduceScatterTensor;
        const WHAT: &str = OP.name();
        self.check_tensor(input, WHAT)?;
        self.check_tensor(output, WHAT)?;
        self.check_op(op, WHAT)?;
        self.check_scattered(input, "input", output, "output", WHAT)?;
        let span = self.observe(OP, Some(op), None, Some(input));
        // Flat views, as in all_gather_into_tensor: any shapes of the right sizes.
        let (mut flat_out, flat_in) = (output.view([-1]), input.view([-1]));
        let (out_ptr, in_ptr) = (flat_out.as_mut_ptr() as *mut c_void, flat_in.as_ptr() as *mut c_void);
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_reduce_scatter_tensor(self.raw.as_ptr(), out_ptr, in_ptr, op.raw(), out, err)
        })
    }

    /// Sends `tensor` to rank `dst`, which must [`recv`](Self::recv) a tensor of the same
    /// shape and dtype with the same `tag` (`torch.distributed.send`). Returns once the
    /// tensor has been handed over: with Gloo, when `dst` has received it.
    ///
    /// Only the two ranks take part, so the other ranks issue nothing; two ranks that
    /// both send to each other first wait for ever: use [`isend`](Self::isend) and
    /// [`irecv`](Self::irecv) for exchanges.
    #[track_caller]
    pub fn send(&self, tensor: &Tensor, dst: usize, tag: i32) -> Result<()> {
        self.isend(tensor, dst, tag)?.wait()
    }

    /// [`ProcessGroup::send`] without waiting (`torch.distributed.isend`): the tensor must
    /// not change until [`Work::wait`] returned.
    #[track_caller]
    pub fn isend(&self, tensor: &Tensor, dst: usize, tag: i32) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::Send;
        const WHAT: &str = OP.name();
        self.check_tensor(tensor, WHAT)?;
        self.check_point_to_point(dst, tag, WHAT, "destination")?;
        let span = self.observe_point_to_point(OP, dst, tensor);
        // c10d only reads what it sends; the shim's signature is not const-correct.
        let ptr = tensor.as_ptr() as *mut c_void;
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_send(self.raw.as_ptr(), ptr, dst as i32, tag, out, err)
        })
    }

    /// Receives into `tensor` what rank `src` [`send`](Self::send)s with the same `tag`
    /// (`torch.distributed.recv`); the shapes and dtypes must agree.
    #[track_caller]
    pub fn recv(&self, tensor: &mut Tensor, src: usize, tag: i32) -> Result<()> {
        self.irecv(tensor, src, tag)?.wait()
    }

    /// [`ProcessGroup::recv`] without waiting (`torch.distributed.irecv`): `tensor`
    /// holds the data once [`Work::wait`] returned.
    #[track_caller]
    pub fn irecv(&self, tensor: &mut Tensor, src: usize, tag: i32) -> Result<Work> {
        const OP: CollectiveOp = CollectiveOp::Recv;
        const WHAT: &str = OP.name();
        self.check_tensor(tensor, WHAT)?;
        self.check_point_to_point(src, tag, WHAT, "source")?;
        let span = self.observe_point_to_point(OP, src, tensor);
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_recv(self.raw.as_ptr(), ptr, src as i32, tag, out, err)
        })
    }

    /// Receives into `tensor` from whichever rank sends first with `tag`, and returns
    /// that rank (`torch.distributed.recv` with `src=None`). Gloo only: NCCL has no
    /// receive from any source.
    #[track_caller]
    pub fn recv_any_source(&self, tensor: &mut Tensor, tag: i32) -> Result<usize> {
        const OP: CollectiveOp = CollectiveOp::Recv;
        const WHAT: &str = OP.name();
        self.check_tensor(tensor, WHAT)?;
        check_tag(tag, WHAT)?;
        if self.backend == Backend::Nccl {
            return Err(DistError::new(
                ErrorKind::Unsupported,
                "recv from any source: NCCL cannot receive from an unnamed rank (neither can PyTorch's): name the source rank",
            ));
        }
        let seq = self.p2p_issued.fetch_add(1, Ordering::SeqCst);
        let span =
            self.describe_call(OP, None, None, std::slice::from_ref(tensor), seq, Some(Location::caller()));
        let ptr = tensor.as_mut_ptr() as *mut c_void;
        let work = self.start(WHAT, span, |out, err| unsafe {
            ffi::tchd_recv(self.raw.as_ptr(), ptr, -1, tag, out, err)
        })?;
        work.wait_for_source()
    }

    /// Waits until every rank of the group has reached this point.
    #[track_caller]
    pub fn barrier(&self) -> Result<()> {
        self.barrier_async()?.wait()
    }

    /// [`ProcessGroup::barrier`] without waiting: [`Work::wait`] finishes it.
    #[track_caller]
    pub fn barrier_async(&self) -> Result<Work> {
        let span = self.observe(CollectiveOp::Barrier, None, None, None);
        self.start("barrier", span, |out, err| unsafe { ffi::tchd_barrier(self.raw.as_ptr(), out, err) })
    }

    /// Shuts the backend down (NCCL aborts its communicators). The group is unusable after.
    pub fn shutdown(&self) -> Result<()> {
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_group_shutdown(self.raw.as_ptr(), &mut err) }, err)
    }

    fn start(
        &self,
        what: &'static str,
        span: spans::Span,
        call: impl FnOnce(*mut *mut ffi::tchd_work, *mut *mut std::ffi::c_char) -> i32,
    ) -> Result<Work> {
        let mut out = ptr::null_mut();
        let mut err = ptr::null_mut();
        let status = call(&mut out, &mut err);
        check(status, err).map_err(|e| self.explain(e, what))?;
        Ok(Work {
            raw: NonNull::new(out).expect("shim returned a null work"),
            what,
            rank: self.rank,
            world_size: self.world_size,
            timeout: self.timeout,
            span: Some(span),
        })
    }

    /// Numbers every collective (as every rank numbers the same calls), describes it
    /// to [`crate::debug`] when someone listens, and starts timing it for the
    /// [`spans`] when that is on.
    #[track_caller]
    fn observe(
        &self,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        input: Option<&Tensor>,
    ) -> spans::Span {
        let seq = self.issued.fetch_add(1, Ordering::SeqCst);
        let tensors = input.map(std::slice::from_ref).unwrap_or_default();
        self.describe_call(op, reduce_op, root, tensors, seq, Some(Location::caller()))
    }

    /// [`observe`](Self::observe) for a call over several tensors (DDP's coalesced
    /// broadcast): their total element count, the first one's dtype; values only of one.
    pub(crate) fn observe_tensors(
        &self,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        tensors: &[Tensor],
    ) -> spans::Span {
        let seq = self.issued.fetch_add(1, Ordering::SeqCst);
        self.describe_call(op, reduce_op, root, tensors, seq, None)
    }

    /// [`observe`](Self::observe) for a send or a receive: `peer` is the other rank, and
    /// the number is the group's count of sends and receives, not of collectives.
    #[track_caller]
    fn observe_point_to_point(&self, op: CollectiveOp, peer: usize, tensor: &Tensor) -> spans::Span {
        let seq = self.p2p_issued.fetch_add(1, Ordering::SeqCst);
        self.describe_call(op, None, Some(peer), std::slice::from_ref(tensor), seq, Some(Location::caller()))
    }

    fn describe_call(
        &self,
        op: CollectiveOp,
        reduce_op: Option<ReduceOp>,
        root: Option<usize>,
        tensors: &[Tensor],
        seq: u64,
        site: Option<&'static Location<'static>>,
    ) -> spans::Span {
        let numel: i64 = tensors.iter().map(|t| t.numel() as i64).sum();
        let bytes: i64 = tensors.iter().map(|t| t.numel() as i64 * t.kind().elt_size_in_bytes() as i64).sum();
        let mut span = spans::span(op.name(), "collective", spans::Lane::Collectives);
        if span.is_timed() {
            span = span
                .arg("seq", spans::Arg::Int(seq as i64))
                .arg("group", spans::Arg::Int(self.id as i64))
                .arg("numel", spans::Arg::Int(numel))
                .arg("bytes", spans::Arg::Int(bytes));
            if let Some(op) = reduce_op {
                span = span.arg("reduce_op", spans::Arg::Text(op.name().into()));
            }
            if let Some(root) = root {
                let key = if op.is_point_to_point() { "peer" } else { "root" };
                span = span.arg(key, spans::Arg::Int(root as i64));
            }
        }
        let call = crate::debug::CollectiveCall {
            op,
            reduce_op,
            root,
            dtype: tensors.first().map(Tensor::kind),
            numel,
            seq,
            group: self.id,
            rank: self.rank,
            world_size: self.world_size,
            values: None,
            site,
        };
        crate::mismatch::remember(&call);
        if crate::debug::wanted() {
            let input = match tensors {
                [one] => Some(one),
                _ => None,
            };
            crate::debug::issued(call, input);
        }
        span
    }

    /// `e`, the failure of `what` on this group, with what this rank (and, for a
    /// mismatch, every rank) was doing.
    pub(crate) fn explain(&self, e: DistError, what: &str) -> DistError {
        if e.kind() == ErrorKind::Mismatch {
            return crate::mismatch::explain(e, what, self.id, self.rank, self.world_size);
        }
        explain(e, what, self.rank, self.world_size, self.timeout)
    }

    fn check_tensor(&self, t: &Tensor, what: &str) -> Result<()> {
        if !t.defined() {
            return Err(DistError::invalid(format!("{what}: the tensor is undefined")));
        }
        match (self.backend, t.device()) {
            (Backend::Nccl, Device::Cuda(_)) | (Backend::Gloo, Device::Cpu | Device::Cuda(_)) => {}
            (Backend::Nccl, d) => {
                return Err(DistError::invalid(format!(
                    "{what}: the NCCL backend works on CUDA tensors but this one is on {d:?}: move it with .to_device(Device::Cuda(local_rank)), or use Backend::Gloo for CPU tensors"
                )))
            }
            (Backend::Gloo, d) => {
                return Err(DistError::invalid(format!("{what}: Gloo works on CPU or CUDA tensors, not on {d:?}")))
            }
        }
        if !t.is_contiguous() {
            return Err(DistError::invalid(format!(
                "{what}: the tensor is not contiguous: collectives write in place into dense memory; call .contiguous() first"
            )));
        }
        Ok(())
    }

    fn check_op(&self, op: ReduceOp, what: &str) -> Result<()> {
        if op == ReduceOp::Avg && self.backend == Backend::Gloo {
            return Err(DistError::new(
                ErrorKind::Unsupported,
                format!("{what}: ReduceOp::Avg is not supported by the Gloo backend (as in PyTorch): reduce with ReduceOp::Sum, then divide by the world size"),
            ));
        }
        Ok(())
    }

    /// `big` must hold world size times `small`'s elements, of the same dtype and device.
    fn check_scattered(
        &self,
        big: &Tensor,
        big_name: &str,
        small: &Tensor,
        small_name: &str,
        what: &str,
    ) -> Result<()> {
        if big.kind() != small.kind() || big.device() != small.device() {
            return Err(DistError::invalid(format!(
                "{what}: the {big_name} is {:?} on {:?} but the {small_name} is {:?} on {:?}: both must have the same dtype and device",
                big.kind(),
                big.device(),
                small.kind(),
                small.device()
            )));
        }
        let want = small.numel() as i64 * self.world_size as i64;
        if big.numel() as i64 != want {
            return Err(DistError::invalid(format!(
                "{what}: the {big_name} has {} elements ({:?}) but must have world size x {small_name} = {} x {} = {want} (e.g. shape [{}, ...] for a {small_name} of shape {:?})",
                big.numel(),
                big.size(),
                self.world_size,
                small.numel(),
                small.size().first().copied().unwrap_or(1) * self.world_size as i64,
                small.size()
            )));
        }
        Ok(())
    }

    fn check_point_to_point(&self, peer: usize, tag: i32, what: &str, role: &str) -> Result<()> {
        self.check_peer(peer, what, role)?;
        if peer == self.rank {
            return Err(DistError::invalid(format!(
                "{what}: the {role} rank {peer} is this rank itself: a rank cannot {what} to or from itself (as in PyTorch); name another rank of 0..{}",
                self.world_size
            )));
        }
        check_tag(tag, what)
    }

    fn check_peer(&self, peer: usize, what: &str, role: &str) -> Result<()> {
        if peer >= self.world_size {
            return Err(DistError::invalid(format!(
                "{what}: {role} rank {peer} does not exist: the group has ranks 0..{}",
                self.world_size
            )));
        }
        Ok(())
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        unsafe { ffi::tchd_group_free(self.raw.as_ptr()) }
    }
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("backend", &self.backend)
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .finish()
    }
}

/// A collective in flight. `wait()` blocks until it is done on this rank.
/// Dropping it without waiting lets the collective finish in the background.
pub struct Work {
    raw: NonNull<ffi::tchd_work>,
    what: &'static str,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    /// The collective's span on the timeline: ends when `wait()` returns (or the work
    /// is dropped).
    span: Option<spans::Span>,
}

// SAFETY: c10d Work objects are shared with backend threads and internally locked.
unsafe impl Send for Work {}

impl Work {
    /// Blocks until the collective completed; its error (e.g. a timeout) otherwise.
    pub fn wait(mut self) -> Result<()> {
        self.wait_in_place()
    }

    fn wait_in_place(&mut self) -> Result<()> {
        let mut err = ptr::null_mut();
        let status = unsafe { ffi::tchd_work_wait(self.raw.as_ptr(), 0, &mut err) };
        if let Some(span) = self.span.take() {
            span.end();
        }
        check(status, err).map_err(|e| explain(e, self.what, self.rank, self.world_size, self.timeout))
    }

    /// Waits for a receive from any source and returns the rank it came from.
    fn wait_for_source(mut self) -> Result<usize> {
        self.wait_in_place()?;
        let mut source = -1;
        let mut err = ptr::null_mut();
        check(unsafe { ffi::tchd_work_source_rank(self.raw.as_ptr(), &mut source, &mut err) }, err)
            .map_err(|e| explain(e, self.what, self.rank, self.world_size, self.timeout))?;
        Ok(source as usize)
    }

    /// Whether the collective has finished, without waiting for it.
    pub fn is_completed(&self) -> bool {
        unsafe { ffi::tchd_work_is_completed(self.raw.as_ptr()) != 0 }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        unsafe { ffi::tchd_work_free(self.raw.as_ptr()) }
    }
}

fn explain(e: DistError, what: &str, rank: usize, world_size: usize, timeout: Duration) -> DistError {
    let hint = match e.kind() {
        ErrorKind::Timeout => format!(
            " (another rank did not take part within {timeout:?}: did it crash, or take a different code path?)"
        ),
        ErrorKind::Network | ErrorKind::Backend => " (a peer may have exited: look at the other ranks' output)".to_string(),
        _ => String::new(),
    };
    e.context(format!("{what} on rank {rank} of {world_size}{hint}"))
}

/// Tags tell apart several messages between the same two ranks; Gloo refuses
/// negative ones.
fn check_tag(tag: i32, what: &str) -> Result<()> {
    if tag < 0 {
        return Err(DistError::invalid(format!(
            "{what}: tag {tag} is negative: tags are 0 or more (0 by default)"
        )));
    }
    Ok(())
}
